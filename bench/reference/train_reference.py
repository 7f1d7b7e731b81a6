#!/usr/bin/python3
"""PyTorch reference for trainrun: train what a trainrun config describes, in Python, and write a trace.

    /usr/bin/python3 bench/reference/train_reference.py CONFIG.yaml [key.path=value ...] [--steps N]
                     [--trace OUT.trace] [--clip pytorch|libtorch] [--native-kernels] [--print-every K]

Runs under Debian's python3-torch (1.13), which wraps the same libtorch shared libraries trainrun links, and
reproduces a trainrun run operation for operation:

  * threads: intra-op `threads` (0 = 1), inter-op `interop_threads`, OpenBLAS pinned to 1 thread;
  * data: the IDX files read with gzip + numpy; x = float32(byte) / float32(255), then (x - float32(mean)) /
    float32(std) in float32 (data.c); data.train_subset = the first N samples; the validation split takes the
    first val_size entries of permutation(seed, 2^64 - 1, n) (in that order) and the training set keeps the rest
    in file order; epoch e visits permutation(seed, e, n_train) (a bit-exact port of tr_permutation: splitmix64
    in counter form, Lemire's bounded draw with rejection, Fisher-Yates); batch b = rows perm[b*bs:(b+1)*bs];
    data.augment: each training sample i of epoch e is padded with F.pad (value: a black pixel, normalised),
    cropped at (dy, dx) and flipped with torch.flip as augment_draw(seed, e, i) says (tr_augment_draw, bit for bit);
  * model: torch.manual_seed(seed) right before the nn.Sequential is built, layer by layer with PyTorch's default
    initialisation (the same draws, in the same order, as libtorch's C++ modules), and again once it is built;
    model.torchscript: X.pt: the eager module of X.py's build() with X.pt's weights (build_torchscript_twin);
  * optimizer: torch.optim.SGD / Adam / AdamW over model.parameters() with the config's options; the lr of every
    param group is set from the schedule (runtime/src/core/schedule.c) before each step;
  * step: model.train(), zero_grad(set_to_none=True), cross_entropy(label_smoothing), backward,
    clip_grad_norm_ when optim.grad_clip_norm > 0, opt.step();
  * evaluation: every eval.every_steps steps and/or at the end of each epoch (eval.every_epoch), eval.batch_size
    chunks in order under eval() + no_grad; loss = sum(loss_i * n_i) / N in double; and the test set at the end
    when eval.test_at_end;
  * the trace (runtime/src/core/trace.h): step, eval and final records, doubles in hex.

--clip: `pytorch` (default) uses torch.nn.utils.clip_grad_norm_, i.e. what a PyTorch user runs. `libtorch` uses a
port of libtorch's C++ torch::nn::utils::clip_grad_norm_ (which trainrun used to call). The two differ in one op: Python
computes the clip coefficient max_norm / (total_norm + 1e-6) as `Tensor.__rtruediv__`, which is
reciprocal(total_norm + 1e-6) * max_norm, while C++'s `double / Tensor` (ATen/TensorOperators.h) is a true
division, full_like(max_norm).div_(total_norm + 1e-6). In float32 the two can differ by one ulp, and that ulp
scales every gradient of a clipped step. Measured on configs/reference/mlp_adam_clip_wd.yaml (clipping active on
all 300 steps): max_norm 0.7 first differs at step 8 and reaches a relative loss difference of 9.7e-2 by step
300, 1.5 at step 4 and 2.5e-3, 0.3 at step 8 and 3.5e-7; a power of two (0.5, 2.0) never differs, since then
rn(1/x) * 2^k is exactly rn(2^k / x). trainrun's shim now clips op for op as Python does (shim/src/step.cpp),
so the default --clip pytorch is bit-identical to trainrun for every max_norm; --clip libtorch shows the difference.
(Python also builds the total norm with torch.norm(g, 2.0) over all dims, and stacks even a single norm; neither
changes a bit.)

Kernels: by default the BLAS (OpenBLAS in Debian's torch, MKL in PyPI's), oneDNN and ATen kernels are pinned to
AVX2 (KERNEL_PINS; recorded as the trace's `# kernels` line) so that traces can reproduce on other x86-64 CPUs with
AVX2 + FMA; run trainrun under the same environment to compare by hand:
    env OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
        ./build/trainrun verify CONFIG.yaml TRACE                                      (libtorch 1.13, Debian)
    env MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
        ./build-torch2.11/trainrun verify CONFIG.yaml TRACE                            (libtorch 2.11, PyPI)
--native-kernels records what this machine picks instead.

This is a development tool (it needs Python and torch); CI only reads the traces it wrote (tests/reference/).
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time
import zlib

# Kernel pins. Losses agree across libraries only when both run the very same kernels: one last-bit difference
# in one op grows, over 300 steps, to relative loss differences of 1e-3..1 (measured on the reference configs
# with OpenBLAS's SkylakeX or Sandybridge sgemm, oneDNN's AVX-512 conv, or ATen's AVX-512 kernels instead of the
# AVX2 ones). The CPU kernels libtorch runs are chosen per machine by three dispatchers: OpenBLAS (sgemm: linear
# layers), oneDNN (conv2d) and ATen's own (everything else). Pinned to their AVX2 kernels, a trace should
# reproduce on any x86-64 CPU with AVX2 + FMA, AVX-512 machines included (the same instructions run; not yet
# checked on a second machine, and oneDNN sizes some blocking by the caches). tests/test_parity.c runs trainrun
# under the same pins. Each is read when its library first initialises: they must be set before
# `import torch`, hence here, at the top, and only when run as a script.
# precision: bf16-mixed cannot run under the AVX2 pin (oneDNN's bfloat16 matmul needs AVX-512: "could not create a
# primitive descriptor iterator"); its trace is recorded with --onednn-isa AVX512_CORE_BF16 (the avx512_bf16
# instructions; AVX512_CORE emulates them 5x slower) and replays on CPUs that have them.
# The BLAS differs by lane: Debian's python3-torch (libtorch 1.13) calls OpenBLAS, pinned by OPENBLAS_CORETYPE; the
# PyPI wheels (libtorch 2.x) link MKL in, pinned to its AVX2 code path by MKL_CBWR (MKL's conditional numerical
# reproducibility). Which torch this is is decided from where it lies, without importing it (the pins must be set
# first).
import importlib.util  # noqa: E402
_torch_spec = importlib.util.find_spec("torch")
DEBIAN_TORCH = _torch_spec is not None and (_torch_spec.origin or "").startswith("/usr/lib/python3/")
BLAS_PIN = ("OPENBLAS_CORETYPE", "Haswell") if DEBIAN_TORCH else ("MKL_CBWR", "AVX2")
KERNEL_PINS = {BLAS_PIN[0]: BLAS_PIN[1], "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
for _i, _a in enumerate(sys.argv[1:-1], 1):
    if _a == "--onednn-isa":
        KERNEL_PINS["ONEDNN_MAX_CPU_ISA"] = sys.argv[_i + 1]
NATIVE_KERNELS = "--native-kernels" in sys.argv[1:]
if __name__ == "__main__" and not NATIVE_KERNELS:
    os.environ.update(KERNEL_PINS)
# OpenBLAS reads this when it is loaded (with libtorch, at `import torch`): one BLAS thread, as trainrun pins it.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    import yaml  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("train_reference.py: needs PyYAML (Debian: apt-get install python3-yaml)")

U64 = (1 << 64) - 1

# ---------------------------------------------------------------------------------------------------- config

# The defaults of runtime/src/config/config.c for every key this script reads (`trainrun --config-reference`).
DEFAULTS = {
    "seed": 0, "threads": 0, "interop_threads": 1, "deterministic": False, "precision": "32",
    "data.format": "idx", "data.root": "/usr/share/datasets/fashion-mnist",
    "data.train_images": "train-images-idx3-ubyte.gz", "data.train_labels": "train-labels-idx1-ubyte.gz",
    "data.test_images": "t10k-images-idx3-ubyte.gz", "data.test_labels": "t10k-labels-idx1-ubyte.gz",
    "data.val_size": 5000, "data.train_subset": 0, "data.test_subset": 0,
    "data.mean": [0.286], "data.std": [0.353], "data.shuffle": True,
    "data.augment.crop_padding": 0, "data.augment.hflip": 0.0,
    "data.train_text": "", "data.vocab": "bytes", "data.block_size": 64, "data.val_fraction": 0.1,
    "data.val_windows": 0,
    "model.spec": "", "model.torchscript": "", "model.init_method": "",
    "optim.name": "adamw", "optim.lr": 1e-3, "optim.momentum": 0.0, "optim.dampening": 0.0,
    "optim.nesterov": False, "optim.weight_decay": 0.0, "optim.beta1": 0.9, "optim.beta2": 0.999,
    "optim.eps": 1e-8, "optim.amsgrad": False, "optim.grad_clip_norm": 0.0, "optim.no_decay": "",
    "schedule.name": "constant", "schedule.warmup_steps": 0, "schedule.step_size": 1000, "schedule.gamma": 0.1,
    "schedule.min_lr": 0.0,
    "train.epochs": 10, "train.max_steps": 0, "train.batch_size": 64, "train.loss": "cross_entropy",
    "train.label_smoothing": 0.0, "train.drop_last": True,
    "eval.every_steps": 0, "eval.every_epoch": True, "eval.batch_size": 1000, "eval.test_at_end": True,
    "eval.weights": "live",
    "init.from": "", "init.strict": True,
    "debug.leak_bytes_per_step": 0, "debug.perturb_resume_rng": False,
}
# Sections whose keys change nothing a trace records (logging, memory watchdog, checkpoints, run directory, the EMA:
# the trace records the live weights' evaluations and final parameters).
IGNORED_SECTIONS = ("log", "watchdog", "checkpoint", "run", "ema")


def flatten(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        path = prefix + str(k)
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def coerce(key, value):
    """Give a YAML value the type of the key's default (PyYAML reads YAML 1.1, where `1e-3` is a string)."""
    default = DEFAULTS[key]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise SystemExit(f"{key}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SystemExit(f"{key}: expected an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool):
            raise SystemExit(f"{key}: expected a float, got {value!r}")
        return float(value)
    if isinstance(default, list):
        vals = value if isinstance(value, list) else [value]
        return [float(v) for v in vals]
    return str(value)


def load_config(path, overrides):
    with open(path) as f:
        raw = flatten(yaml.safe_load(f))
    for ov in overrides:
        k, _, v = ov.partition("=")
        raw[k] = yaml.safe_load(v)
    cfg = dict(DEFAULTS)
    for k, v in raw.items():
        if k in DEFAULTS:
            cfg[k] = coerce(k, v)
        elif k.split(".")[0] not in IGNORED_SECTIONS:
            raise SystemExit(f"{path}: {k}: key not known to train_reference.py")
    if cfg["init.from"]:
        raise SystemExit("init.from is not supported by the reference")
    if cfg["debug.leak_bytes_per_step"]:
        raise SystemExit("debug.leak_bytes_per_step is not supported by the reference")
    if cfg["precision"] not in ("32", "bf16-mixed"):
        raise SystemExit(f"precision: {cfg['precision']!r} is not 32 or bf16-mixed")
    if cfg["data.format"] not in ("idx", "text") or cfg["train.loss"] != "cross_entropy":
        raise SystemExit("only data.format idx / text and train.loss cross_entropy exist")
    if cfg["eval.weights"] == "ema":
        raise SystemExit("eval.weights ema: the trace records live-weight evaluations; use live or both")
    base = os.path.dirname(os.path.abspath(path))
    resolve = lambda p: p if os.path.isabs(p) else os.path.join(base, p)  # noqa: E731
    cfg["data.root"] = resolve(cfg["data.root"])
    if bool(cfg["model.spec"]) == bool(cfg["model.torchscript"]):
        raise SystemExit(f"{path}: exactly one of model.spec and model.torchscript is required")
    for k in ("model.spec", "model.torchscript"):
        if cfg[k]:
            cfg[k] = resolve(cfg[k])
    return cfg


# ---------------------------------------------------------------------------------------------------- data

SM64_GOLDEN = 0x9E3779B97F4A7C15
SEED_SALT = 0x5EED5EED5EED5EED
EPOCH_SALT = 0xE90C4E90C4E90C4E


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
    return z ^ (z >> 31)


def uniform_below(key, ctr, rng):
    """data.c's uniform_below: Lemire's bounded draw with rejection; returns (value, counter after it)."""
    ctr += 1
    m = mix64((key + ctr * SM64_GOLDEN) & U64) * rng
    if (m & U64) < rng:
        threshold = (1 << 64) % rng
        while (m & U64) < threshold:
            ctr += 1
            m = mix64((key + ctr * SM64_GOLDEN) & U64) * rng
    return m >> 64, ctr


def permutation(seed, epoch, n):
    """tr_permutation (runtime/src/io/data.c), bit for bit."""
    perm = list(range(n))
    key = mix64(mix64((seed ^ SEED_SALT) & U64) ^ mix64((epoch ^ EPOCH_SALT) & U64))
    ctr = 0
    for i in range(n - 1, 0, -1):
        j, ctr = uniform_below(key, ctr, i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


AUGMENT_SALT = 0xA06E0A06E0A06E0A


def augment_draw(seed, epoch, sample, padding, hflip):
    """tr_augment_draw (runtime/src/io/data.c), bit for bit: crop offsets dy, dx in [0, 2 padding] and the flip."""
    key = mix64(mix64(mix64((seed ^ SEED_SALT) & U64) ^ mix64((epoch ^ EPOCH_SALT) & U64))
                ^ mix64((sample ^ AUGMENT_SALT) & U64))
    ctr = 0
    dy = dx = padding
    if padding > 0:
        dy, ctr = uniform_below(key, ctr, 2 * padding + 1)
        dx, ctr = uniform_below(key, ctr, 2 * padding + 1)
    ctr += 1
    u = (mix64((key + ctr * SM64_GOLDEN) & U64) >> 11) * 2.0 ** -53
    return dy, dx, u < hflip


def augment(xb, idx, cfg, epoch):
    """torchvision's RandomCrop(size, padding, fill=black) then RandomHorizontalFlip(p), with trainrun's draws."""
    p, hflip = cfg["data.augment.crop_padding"], cfg["data.augment.hflip"]
    h, w = xb.shape[-2:] if xb.dim() == 4 else (0, 0)
    mean, std = cfg["data.mean"], cfg["data.std"]
    flat = xb.dim() == 2  # a YAML MLP's rows: augmented as the [1, 28, 28] images they are
    if flat:
        xb = xb.reshape(xb.shape[0], 1, 28, 28)
        h = w = 28
    fill = [float((np.float32(0) - np.float32(mean[c if len(mean) > 1 else 0]))
                  / np.float32(std[c if len(std) > 1 else 0])) for c in range(xb.shape[1])]
    out = torch.empty_like(xb)
    for k, i in enumerate(idx):
        dy, dx, flip = augment_draw(cfg["seed"], epoch, int(i), p, hflip)
        img = xb[k]
        if p > 0:
            img = torch.stack([F.pad(img[c], (p, p, p, p), value=fill[c]) for c in range(img.shape[0])])
            img = img[:, dy:dy + h, dx:dx + w]
        if flip:
            img = torch.flip(img, dims=[2])
        out[k] = img
    return out.reshape(out.shape[0], -1) if flat else out


TOKENS_SALT = 0x746F6B656E73  # "tokens"


def splitmix64(x):
    """splitmix64 of runtime/src/io/text.c: the golden-ratio increment, then the finaliser."""
    return mix64((x + SM64_GOLDEN) & U64)


def window_start(seed, g, n_tokens, block):
    """tr_window_start (runtime/src/io/text.c), bit for bit: the start of training window g."""
    return ((splitmix64((splitmix64((seed ^ TOKENS_SALT) & U64) + g) & U64)) % (n_tokens - block))


def load_text(cfg):
    """data.format text (runtime/src/io/text.c): data.train_text's files under data.root, concatenated in order, as
    bytes (data.vocab bytes) or code points (chars); the last floor(n * val_fraction) tokens are the validation
    tail; the chars vocabulary is the sorted distinct code points of the rest. Returns (train ids, val ids, V)."""
    parts = []
    for name in cfg["data.train_text"].split(","):
        name = name.lstrip(" ")
        path = name if os.path.isabs(name) else os.path.join(cfg["data.root"], name)
        with open(path, "rb") as f:
            parts.append(f.read())
    raw = b"".join(parts)
    if cfg["data.vocab"] == "bytes":
        ids, vocab = np.frombuffer(raw, dtype=np.uint8).astype(np.int64), 256
        n = ids.shape[0]
        n_val = math.floor(float(n) * cfg["data.val_fraction"])
    else:
        text = raw.decode("utf-8")
        n = len(text)
        n_val = math.floor(float(n) * cfg["data.val_fraction"])
        chars = sorted(set(text[:n - n_val]))
        index = {c: i for i, c in enumerate(chars)}
        ids, vocab = np.array([index[c] for c in text], dtype=np.int64), len(chars)
    return ids[:n - n_val], ids[n - n_val:], vocab


def val_windows(val, block, most):
    """The validation windows: consecutive, non-overlapping, from the tail's start (at most data.val_windows)."""
    nv = (val.shape[0] - 1) // block if val.shape[0] > block else 0
    if most > 0 and nv > most:
        nv = most
    x = np.stack([val[i * block:(i + 1) * block] for i in range(nv)]) if nv else np.zeros((0, block), np.int64)
    y = np.stack([val[i * block + 1:(i + 1) * block + 1] for i in range(nv)]) if nv else x
    return x, y


def load_idx(images, labels, limit):
    with gzip.open(images, "rb") if _is_gzip(images) else open(images, "rb") as f:
        img = f.read()
    with gzip.open(labels, "rb") if _is_gzip(labels) else open(labels, "rb") as f:
        lab = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", img[:16])
    lmagic, ln = struct.unpack(">II", lab[:8])
    if magic != 0x803 or lmagic != 0x801 or n != ln:
        raise SystemExit(f"{images}, {labels}: not a matching pair of IDX ubyte image/label files")
    keep = min(limit, n) if limit > 0 else n
    x = np.frombuffer(img, dtype=np.uint8, count=keep * rows * cols, offset=16)
    x = x.astype(np.float32) / np.float32(255.0)  # (float)b / 255.0f, correctly rounded in both
    y = np.frombuffer(lab, dtype=np.uint8, count=keep, offset=8).astype(np.int64)
    return x.reshape(keep, 1, rows, cols), y


def _is_gzip(path):
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def normalize(x, mean, std):
    """(x - m) / s per channel in float32 with m, s rounded to float, as tr_dataset_normalize."""
    c = x.shape[1]
    if len(mean) != len(std) or len(mean) not in (1, c):
        raise SystemExit(f"data.mean/data.std: {len(mean)} values for {c} channels")
    out = np.empty_like(x)
    for ch in range(c):
        k = 0 if len(mean) == 1 else ch
        out[:, ch] = (x[:, ch] - np.float32(mean[k])) / np.float32(std[k])
    return out


def split(x, y, val_size, seed):
    """tr_dataset_split: val = rows perm[:val_size] in that order; train = the others in file order."""
    n = x.shape[0]
    if val_size <= 0:
        return x, y, x[:0], y[:0]
    if val_size >= n:
        raise SystemExit(f"data.val_size {val_size} must be smaller than the {n} training samples")
    perm = permutation(seed, U64, n)
    vidx = np.array(perm[:val_size], dtype=np.int64)
    is_val = np.zeros(n, dtype=bool)
    is_val[vidx] = True
    return (np.ascontiguousarray(x[~is_val]), np.ascontiguousarray(y[~is_val]),
            np.ascontiguousarray(x[vidx]), np.ascontiguousarray(y[vidx]))


# ---------------------------------------------------------------------------------------------------- model

def build_layer(kind, o):
    def opt(name, default=None, required=False):
        if name in o:
            return o[name]
        if required:
            raise SystemExit(f"model: {kind}: missing option {name}")
        return default

    known = {"linear": {"in", "out", "bias"}, "conv2d": {"in", "out", "kernel", "stride", "padding", "bias"},
             "batchnorm1d": {"features", "eps", "momentum"}, "batchnorm2d": {"features", "eps", "momentum"},
             "layernorm": {"features", "eps"}, "maxpool2d": {"kernel", "stride", "padding"},
             "avgpool2d": {"kernel", "stride", "padding"}, "adaptive_avgpool2d": {"out"}, "dropout": {"p"},
             "relu": set(), "gelu": set(), "flatten": set()}
    if kind not in known:
        raise SystemExit(f"model: unknown layer kind {kind}")
    if set(o) - known[kind]:
        raise SystemExit(f"model: {kind}: unknown options {sorted(set(o) - known[kind])}")
    if kind == "linear":
        return nn.Linear(opt("in", required=True), opt("out", required=True), bias=bool(opt("bias", True)))
    if kind == "conv2d":
        return nn.Conv2d(opt("in", required=True), opt("out", required=True), opt("kernel", required=True),
                         stride=opt("stride", 1), padding=opt("padding", 0), bias=bool(opt("bias", True)))
    if kind in ("batchnorm1d", "batchnorm2d"):
        cls = nn.BatchNorm1d if kind == "batchnorm1d" else nn.BatchNorm2d
        return cls(opt("features", required=True), eps=float(opt("eps", 1e-5)), momentum=float(opt("momentum", 0.1)))
    if kind == "layernorm":
        return nn.LayerNorm([opt("features", required=True)], eps=float(opt("eps", 1e-5)))
    if kind in ("maxpool2d", "avgpool2d"):
        k = opt("kernel", required=True)
        s = opt("stride", 0) or k
        cls = nn.MaxPool2d if kind == "maxpool2d" else nn.AvgPool2d
        return cls(k, stride=s, padding=opt("padding", 0))
    if kind == "adaptive_avgpool2d":
        out = opt("out", required=True)
        return nn.AdaptiveAvgPool2d(tuple(out) if isinstance(out, list) else (out, out))
    if kind == "dropout":
        return nn.Dropout(float(opt("p", 0.5)))
    return {"relu": nn.ReLU, "gelu": nn.GELU, "flatten": nn.Flatten}[kind]()


def build_model(spec_path):
    """Build the model spec's layers in order; the caller seeds right before (init draws happen here)."""
    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    layers = []
    for item in spec["layers"]:
        if isinstance(item, str):
            kind, o = item, {}
        else:
            ((kind, o),) = item.items()
        layers.append(build_layer(kind, o or {}))
    return nn.Sequential(*layers), list(spec["input"])


def build_torchscript_twin(pt_path, init_method="", seed=0):
    """The eager Python module behind a TorchScript archive, with the archive's weights.

    models/NAME.pt is exported by models/NAME.py, whose build() (or twin(scripted), for a module whose sizes come
    from the archive) makes the module: it is built here eagerly (its init draws are overwritten) and given the
    archive's state_dict (strict: every name and shape must match), so PyTorch trains the Python module from the
    very weights trainrun loads. model.init_method: then torch.manual_seed(seed) and the eager module's method of
    that name under no_grad draw the initial weights, as trainrun runs the archive's (model_core.c, tr_core_build)."""
    import importlib.util
    base = pt_path[:-3] if pt_path.endswith(".gz") else pt_path  # models/mlp.pt.gz: a gzip'd archive
    src = os.path.splitext(base)[0] + ".py"
    if not os.path.exists(src):
        raise SystemExit(f"{pt_path}: the eager twin needs {src} with a build() function")
    spec = importlib.util.spec_from_file_location("twin", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if pt_path.endswith(".gz"):
        import gzip
        import io
        with gzip.open(pt_path, "rb") as f:
            scripted = torch.jit.load(io.BytesIO(f.read()))
    else:
        scripted = torch.jit.load(pt_path)
    model = mod.twin(scripted) if hasattr(mod, "twin") else mod.build()
    model.load_state_dict(scripted.state_dict(), strict=True)
    if init_method:
        torch.manual_seed(seed)
        with torch.no_grad():
            getattr(model, init_method)()
    return model


def param_groups(cfg, model):
    """optim.no_decay (shim/src/optim.cpp): "auto" = ndim <= 1 or a name ending in .bias (timm's rule), and/or
    fnmatch globs over the state_dict names; group 0 decays, group 1 has weight_decay 0. No exclusion: one group."""
    import fnmatch
    toks = [t for t in cfg["optim.no_decay"].replace(",", " ").split() if t]
    if not toks:
        return list(model.parameters())
    auto = "auto" in toks
    globs = [t for t in toks if t != "auto"]
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        excluded = auto and (p.dim() <= 1 or name.endswith(".bias"))
        excluded = excluded or any(fnmatch.fnmatchcase(name, g) for g in globs)
        (no_decay if excluded else decay).append(p)
    groups = []
    if decay:
        groups.append({"params": decay})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def make_optimizer(cfg, params, impl="default", tensor_lr=False):
    """impl (bench/vs_torch2.sh's forms): "default" = PyTorch's own choice (on CPU tensors the for-loop step),
    "foreach" = foreach=True (the multi-tensor step), "fused" = fused=True (one fused kernel, CPU since 2.4).
    tensor_lr: the lr as a 0-d tensor, so that a torch.compile'd step does not recompile when the schedule sets it
    (the documented way: PyTorch's recipe "(beta) Running the compiled optimizer with an LR Scheduler")."""
    name = cfg["optim.name"]
    lr = torch.tensor(cfg["optim.lr"]) if tensor_lr else cfg["optim.lr"]
    kw = {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg["optim.momentum"], dampening=cfg["optim.dampening"],
                               weight_decay=cfg["optim.weight_decay"], nesterov=cfg["optim.nesterov"], **kw)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=(cfg["optim.beta1"], cfg["optim.beta2"]), eps=cfg["optim.eps"],
               weight_decay=cfg["optim.weight_decay"], amsgrad=cfg["optim.amsgrad"], **kw)


def schedule_lr(cfg, step, total):
    """tr_schedule_lr (runtime/src/core/schedule.c), the same double arithmetic in the same order."""
    base = cfg["optim.lr"]
    warm = cfg["schedule.warmup_steps"]
    if step < warm:
        return base * float(step + 1) / float(warm)
    name = cfg["schedule.name"]
    if name == "step":
        return base * math.pow(cfg["schedule.gamma"], float(step // cfg["schedule.step_size"]))
    if name == "cosine":
        span = float(total - warm if total - warm > 1 else 1)
        p = float(step - warm) / span
        if p > 1.0:
            p = 1.0
        min_lr = cfg["schedule.min_lr"]
        return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))
    return base


def clip_grad_norm_libtorch(params, max_norm):
    """libtorch 1.13's torch::nn::utils::clip_grad_norm_ (norm_type 2), op for op."""
    with torch.no_grad():
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return 0.0
        norms = [torch.ops.aten.norm.Scalar(g, 2.0) for g in grads]
        total = norms[0] if len(norms) == 1 else torch.ops.aten.norm.Scalar(torch.stack(norms), 2.0)
        coef = torch.full_like(total, max_norm).div_(total + 1e-6)  # C++ `double / Tensor`: a true division
        coef = torch.clamp(coef, max=1.0)
        for g in grads:
            g.mul_(coef)
        return total.item()


# ---------------------------------------------------------------------------------------------------- trace

def hexf(v):
    """A double as C's printf("%a") writes it (glibc): float.hex() without the mantissa's trailing zeros."""
    v = float(v)
    if math.isnan(v):
        return "nan" if math.copysign(1.0, v) > 0 else "-nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = v.hex()
    mant, _, exp = s.partition("p")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return mant + "p" + exp


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("flags"):
                    return set(ln.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas():
    """ctypes handle of the OpenBLAS libtorch loaded, or None."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln and ".so" in ln})
    except OSError:
        libs = []
    for lib in libs + [None]:
        try:
            h = ctypes.CDLL(lib)
            h.openblas_set_num_threads
            return h
        except (OSError, AttributeError):
            continue
    return None


def kernels_line():
    """The kernels this process runs, as the trace's `# kernels` comment; checks that the pins took."""
    import ctypes
    h = openblas()
    core = "none"
    if h is not None and hasattr(h, "openblas_get_corename"):
        h.openblas_get_corename.restype = ctypes.c_char_p
        core = h.openblas_get_corename().decode()
    aten = "?"
    for ln in torch.__config__.show().splitlines():
        if "CPU capability usage:" in ln:
            aten = ln.split(":", 1)[1].strip()
    try:
        dnnl = ctypes.CDLL("libdnnl.so.2")
        dnnl.dnnl_cpu_isa2str.restype = ctypes.c_char_p
        isa = dnnl.dnnl_cpu_isa2str(dnnl.dnnl_get_effective_cpu_isa()).decode()
    except (OSError, AttributeError):
        isa = "?"
    blas = "mkl" if "BLAS_INFO=mkl" in torch.__config__.show() else ("openblas" if h is not None else "?")
    if NATIVE_KERNELS:
        return f"# kernels native {blas} {core} onednn {isa} aten {aten}"
    want_isa = "cpu_isa_" + KERNEL_PINS["ONEDNN_MAX_CPU_ISA"].lower()
    if BLAS_PIN[0] == "OPENBLAS_CORETYPE":
        blas_ok = core.lower() == BLAS_PIN[1].lower()
    else:  # MKL reads MKL_CBWR at its first call; the lane check is that MKL is the BLAS at all
        blas_ok = blas == "mkl"
    if not blas_ok or aten != "AVX2" or isa not in (want_isa, "?"):
        raise SystemExit(f"train_reference.py: kernel pins did not take (BLAS {blas}, OpenBLAS core {core}, oneDNN {isa}, "
                         f"ATen {aten}); "
                         "run this file as a script, not imported after torch, or pass --native-kernels")
    return "# kernels " + " ".join(f"{k}={v}" for k, v in KERNEL_PINS.items())


def pin_blas_threads():
    """openblas_set_num_threads(1), as trainrun's trs_set_threads does. The environment variable set above only
    works when this file is run as a script; imported after torch, OpenBLAS already runs one thread per core, and
    sgemm then splits its work differently: the losses differ from step 3 on (1.6e-2 relative by step 300)."""
    h = openblas()
    if h is None:
        return False
    h.openblas_set_num_threads(1)
    return True


def _mix64_np(z):
    """splitmix64's finalizer over a uint64 array (trace.h, "param" records)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


SKETCH_DIM = 16


def param_records(model):
    """One `param` record per state_dict entry, as trainrun writes them (runtime/src/core/trace.h): numel, crc32 of
    the raw bytes, the L2 norm in double, and the random-sign sketch s_j = sum_i sign_j(i) x_i."""
    lines = []
    with torch.no_grad():
        for name, t in model.state_dict().items():
            t = t.detach().contiguous()
            raw = t.numpy()
            x = raw.astype(np.float64).ravel()
            with np.errstate(over="ignore"):
                h = _mix64_np(np.arange(x.size, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15))
            sketch = []
            for j in range(SKETCH_DIM):
                neg = ((h >> np.uint64(j)) & np.uint64(1)).astype(bool)
                sketch.append(float(x[~neg].sum() - x[neg].sum()))
            l2 = math.sqrt(float(np.dot(x, x)))
            crc = zlib.crc32(raw.tobytes()) & 0xFFFFFFFF
            lines.append(f"param {name} numel {x.size} crc32 {crc:08x} l2 {hexf(l2)} sketch "
                         + ",".join(hexf(v) for v in sketch))
    return lines


def torch_version():
    """The libtorch version as libtorch's TORCH_VERSION macro spells it (what trainrun reports)."""
    for part in torch.__config__.show().replace(",", " ").split():
        if part.startswith("TORCH_VERSION="):
            return part.split("=", 1)[1]
    return torch.__version__.split("+")[0]


def state_digest(model):
    """crc32 of the raw bytes of every state_dict entry in order, and the sum of |x| (double) over them."""
    crc = 0
    total = 0.0
    with torch.no_grad():
        for t in model.state_dict().values():
            t = t.detach().contiguous()
            crc = zlib.crc32(t.numpy().tobytes(), crc)
            if t.is_floating_point():
                total += t.abs().sum(dtype=torch.float64).item()
            else:
                total += float(t.abs().sum().item())
    return crc & 0xFFFFFFFF, total


# ---------------------------------------------------------------------------------------------------- run

def forward(model, xb, bf16):
    """precision bf16-mixed: the forward pass under torch.autocast("cpu", dtype=torch.bfloat16), the logits in
    float32 for the loss and the counts (trainrun's shim does the same, step.cpp forward_at_precision)."""
    if not bf16:
        return model(xb)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(xb)
    return out.float() if out.dtype == torch.bfloat16 else out


def cross_entropy(logits, y, label_smoothing):
    """The shim's loss (shim/src/step.cpp): [N, C] as is; [N, T, C] flattened to [N*T, C] against [N*T] targets."""
    if logits.dim() == 3:
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), label_smoothing=label_smoothing)
    return F.cross_entropy(logits, y, label_smoothing=label_smoothing)


def evaluate(model, x, y, ebs, label_smoothing, bf16=False):
    loss_sum, correct, samples = 0.0, 0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, x.shape[0], ebs):
            xb = torch.from_numpy(x[i:i + ebs])
            yb = torch.from_numpy(y[i:i + ebs])
            logits = forward(model, xb, bf16)
            loss = cross_entropy(logits, yb, label_smoothing).item()
            n = xb.shape[0]
            loss_sum += loss * float(n)
            correct += int(logits.argmax(-1).eq(yb).sum().item())
            samples += n
    model.train(was_training)
    return (loss_sum / float(samples) if samples else 0.0), correct, samples


def trace_header(cfg, args, total):
    """The trace file (None without --trace), its header written: an emit(line) function and the file."""
    out = open(args.trace, "w") if args.trace else None

    def emit(line):
        if out:
            out.write(line + "\n")
            out.flush()

    emit("trainrun-trace 1")
    emit(f"meta libtorch {torch_version()}")
    emit(f"meta threads {torch.get_num_threads()}")
    emit(f"meta interop_threads {torch.get_num_interop_threads()}")
    emit(f"meta deterministic {1 if cfg['deterministic'] else 0}")
    emit("meta producer pytorch")
    emit(kernels_line())
    emit(f"# train_reference.py {os.path.basename(args.config)} steps {total} clip {args.clip} "
         f"torch {torch.__version__} numpy {np.__version__}")
    return emit, out


def train_loop(cfg, args, model, total, steps_per_epoch, batch, epoch_len, val):
    """The loop of main() for any data: batch(epoch, pos, n) gives the (x, y) tensors of rows pos..pos+n of the
    epoch's order (epoch_len rows); val = (x, y) numpy arrays of the validation set or None."""
    compiled_step = args.compile == "model+optimizer"
    if args.compile != "none":
        inductor_links_this_torch()
    opt = make_optimizer(cfg, param_groups(cfg, model), args.optim_impl, tensor_lr=compiled_step)
    run_model = torch.compile(model) if args.compile != "none" else model
    opt_step = opt.step
    if compiled_step:
        @torch.compile(fullgraph=False)
        def opt_step():
            opt.step()
    step_end = []  # time.perf_counter() at the end of every step, for --timing
    bs = cfg["train.batch_size"]
    ls = cfg["train.label_smoothing"]
    clip = cfg["optim.grad_clip_norm"]
    ebs = cfg["eval.batch_size"]
    bf16 = cfg["precision"] == "bf16-mixed"
    emit, out = trace_header(cfg, args, total)
    epoch, pos, step, lv = 0, 0, 0, float("nan")
    epoch_done = lambda: pos >= steps_per_epoch * bs or pos >= epoch_len  # noqa: E731
    params = list(model.parameters())
    loop_start = time.perf_counter()
    while step < total:
        if epoch_done():
            epoch += 1
            pos = 0
        n = bs if pos + bs <= epoch_len else epoch_len - pos
        xb, yb = batch(epoch, pos, n)
        pos += n
        lr = schedule_lr(cfg, step, total)
        for g in opt.param_groups:
            if compiled_step:
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = cross_entropy(forward(run_model, xb, bf16), yb, ls)
        lv = loss.item()
        if not math.isfinite(lv):
            raise SystemExit(f"step {step + 1}: loss is {lv}")
        loss.backward()
        if clip > 0:
            if args.clip == "pytorch":
                torch.nn.utils.clip_grad_norm_(params, clip)
            else:
                clip_grad_norm_libtorch(params, clip)
        opt_step()
        step += 1
        if args.timing:
            step_end.append(time.perf_counter())
        emit(f"step {step} loss {hexf(lv)} lr {hexf(lr)}")
        if args.print_every and step % args.print_every == 0:
            print(f"step {step} loss {lv:.9g} lr {lr:.6g}", flush=True)
        if val is not None and val[0].shape[0] > 0 and (
                (cfg["eval.every_steps"] > 0 and step % cfg["eval.every_steps"] == 0)
                or (cfg["eval.every_epoch"] and epoch_done())):
            vl, vc, vn = evaluate(model, val[0], val[1], ebs, ls, bf16)
            emit(f"eval val {step} correct {vc} samples {vn} loss {hexf(vl)}")
            per = val[1].size // max(1, val[1].shape[0])  # targets per sample: 1, or T positions of a window
            print(f"eval val {step}: loss {vl:.9g} accuracy {vc / (vn * per):.4f}", flush=True)
    if args.timing:
        write_timing(args.timing, loop_start, step_end)
    crc, abs_sum = state_digest(model)
    emit(f"final params_crc32 {crc:08x} params_abs_sum {hexf(abs_sum)}")
    for line in param_records(model):
        emit(line)
    return emit, out, step, lv, crc


def inductor_links_this_torch():
    """torch.compile's C++ code is linked with -L <Python's LIBDIR> before -L <torch/lib> (torch/_inductor/
    cpp_builder.py): on Debian with libtorch-dev installed, LIBDIR /usr/lib/x86_64-linux-gnu holds libtorch 1.13, so
    inductor's vector-ISA probe links against it, fails to load (undefined Sleef_expf16_u10), and inductor silently
    generates scalar code (torch._inductor.cpu_vec_isa.pick_vec_isa() is INVALID_VEC_ISA) -- 1.3-2x slower steps.
    Put this torch's own library folder first."""
    import torch._inductor.cpp_builder as cb
    import torch._inductor.cpu_vec_isa as isa
    from torch.utils.cpp_extension import TORCH_LIB_PATH
    orig = cb._get_python_related_args

    def python_args():
        include_dirs, lib_dirs = orig()
        return include_dirs, [TORCH_LIB_PATH] + lib_dirs

    cb._get_python_related_args = python_args
    if not isa.pick_vec_isa():
        print("train_reference.py: warning: inductor found no vector ISA; compiled code is scalar", file=sys.stderr)


def write_timing(path, loop_start, step_end):
    """--timing: a JSON object with the seconds since the process started at which the loop started
    (`loop_start_s`) and at which each step ended (`step_end_s`, one per step): bench/vs_torch2.sh reads its timed
    window, and the first steps' excess over the median step (torch.compile's compilation) off it."""
    import json
    now_since_start = process_seconds()
    offset = now_since_start - time.perf_counter()
    with open(path, "w") as f:
        json.dump({"loop_start_s": loop_start + offset, "step_end_s": [t + offset for t in step_end]}, f)


def process_seconds():
    """Seconds since this process was started (by the kernel's clock: /proc/self/stat's starttime)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def train_text(cfg, args):
    """data.format text: random windows of data.block_size tokens, targets shifted by one (run.c load_batch).
    Epoch e has (n_train - 1) // block windows, in order (no shuffle: the windows are random); window g =
    e x windows + index starts at window_start(seed, g, n_train, block). Validation: the tail's fixed windows."""
    if cfg["eval.test_at_end"]:
        cfg["eval.test_at_end"] = False  # token data has no test split
    train, val, vocab = load_text(cfg)
    block = cfg["data.block_size"]
    n_windows = (train.shape[0] - 1) // block
    torch.manual_seed(cfg["seed"])
    if not cfg["model.torchscript"]:
        raise SystemExit("data.format text: the reference trains a TorchScript model's eager twin only")
    model = build_torchscript_twin(cfg["model.torchscript"], cfg["model.init_method"], cfg["seed"])
    torch.manual_seed(cfg["seed"])
    bs = cfg["train.batch_size"]
    if n_windows < bs:
        raise SystemExit(f"train.batch_size {bs} is larger than the {n_windows} windows of an epoch")
    steps_per_epoch = n_windows // bs if cfg["train.drop_last"] else (n_windows + bs - 1) // bs
    total = cfg["train.max_steps"] if cfg["train.max_steps"] > 0 else cfg["train.epochs"] * steps_per_epoch
    n_train = train.shape[0]

    def batch(epoch, pos, n):
        starts = [window_start(cfg["seed"], epoch * n_windows + pos + i, n_train, block) for i in range(n)]
        x = np.stack([train[s:s + block] for s in starts])
        y = np.stack([train[s + 1:s + block + 1] for s in starts])
        return torch.from_numpy(x), torch.from_numpy(y)

    print(f"text: {n_train} training tokens, {val.shape[0]} validation, vocabulary {vocab}", flush=True)
    _, out, step, lv, crc = train_loop(cfg, args, model, total, steps_per_epoch, batch, n_windows,
                                       val_windows(val, block, cfg["data.val_windows"]))
    if out:
        out.close()
    print(f"{step} steps, last loss {lv:.9g}, params_crc32 {crc:08x}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="key.path=value, as trainrun takes them")
    ap.add_argument("--steps", type=int, default=0, help="train exactly N steps (= train.max_steps=N)")
    ap.add_argument("--trace", help="write the trace here")
    ap.add_argument("--clip", choices=("pytorch", "libtorch"), default="pytorch",
                    help="gradient clipping: torch.nn.utils.clip_grad_norm_ (default) or a port of libtorch's C++ one")
    ap.add_argument("--print-every", type=int, default=0, help="print every K-th step's loss to stdout")
    ap.add_argument("--onednn-isa", default="AVX2",
                    help="oneDNN's pin (ONEDNN_MAX_CPU_ISA): AVX2, or AVX512_CORE_BF16 for precision bf16-mixed")
    ap.add_argument("--native-kernels", action="store_true",
                    help="run the kernels this machine would pick instead of the AVX2 pins (see KERNEL_PINS)")
    ap.add_argument("--optim-impl", choices=("default", "foreach", "fused"), default="default",
                    help="the optimizer's implementation (make_optimizer); default: PyTorch's own choice")
    ap.add_argument("--compile", choices=("none", "model", "model+optimizer"), default="none",
                    help="torch.compile the model (inductor), and the optimizer step too")
    ap.add_argument("--timing", help="write the step end times here (JSON, write_timing)")
    args = ap.parse_args()
    if not NATIVE_KERNELS and not {"avx2", "fma"} <= cpu_flags():
        raise SystemExit("train_reference.py: the kernel pins need a CPU with AVX2 and FMA (--native-kernels)")

    cfg = load_config(args.config, args.overrides)
    if args.steps > 0:
        cfg["train.max_steps"] = args.steps

    # Threads first: inter-op threads can only be set before any inter-op work.
    threads = cfg["threads"] if cfg["threads"] > 0 else 1
    torch.set_num_threads(threads)
    if DEBIAN_TORCH and not pin_blas_threads():  # MKL (the wheels) takes torch.set_num_threads' count
        print("train_reference.py: warning: OpenBLAS not found; BLAS threads not pinned to 1", file=sys.stderr)
    if cfg["interop_threads"] > 0 and torch.get_num_interop_threads() != cfg["interop_threads"]:
        torch.set_num_interop_threads(cfg["interop_threads"])
    if cfg["deterministic"]:
        torch.use_deterministic_algorithms(True)

    # Data (touches no torch RNG).
    root = cfg["data.root"]
    if cfg["data.format"] == "text":
        return train_text(cfg, args)
    x, y = load_idx(os.path.join(root, cfg["data.train_images"]), os.path.join(root, cfg["data.train_labels"]),
                    cfg["data.train_subset"])
    x = normalize(x, cfg["data.mean"], cfg["data.std"])
    x, y, vx, vy = split(x, y, cfg["data.val_size"], cfg["seed"])
    tx = ty = None
    if cfg["eval.test_at_end"]:
        tx, ty = load_idx(os.path.join(root, cfg["data.test_images"]), os.path.join(root, cfg["data.test_labels"]),
                          cfg["data.test_subset"])
        tx = normalize(tx, cfg["data.mean"], cfg["data.std"])

    # Model: seeded right before the parameters are initialised (a YAML model) and again once the model is built,
    # as trainrun does (model_core.c, tr_core_build), so dropout draws start from the seed whatever the model's kind.
    torch.manual_seed(cfg["seed"])
    if cfg["model.torchscript"]:
        model = build_torchscript_twin(cfg["model.torchscript"], cfg["model.init_method"], cfg["seed"])
        input_shape = [1, 28, 28]  # the data's per-sample shape: trainrun feeds a TorchScript module images as is
    else:
        model, input_shape = build_model(cfg["model.spec"])
    torch.manual_seed(cfg["seed"])
    if len(input_shape) == 1:
        x, vx = x.reshape(x.shape[0], -1), vx.reshape(vx.shape[0], -1)
        if tx is not None:
            tx = tx.reshape(tx.shape[0], -1)

    n_train = x.shape[0]
    bs = cfg["train.batch_size"]
    if n_train < bs:
        raise SystemExit(f"train.batch_size {bs} is larger than the {n_train} training samples")
    steps_per_epoch = n_train // bs if cfg["train.drop_last"] else (n_train + bs - 1) // bs
    total = cfg["train.max_steps"] if cfg["train.max_steps"] > 0 else cfg["train.epochs"] * steps_per_epoch
    orders = {}

    def batch(epoch, pos, n):
        """Rows pos..pos+n of epoch's order: permutation(seed, epoch, n_train), or file order without shuffle."""
        if epoch not in orders:
            orders.clear()
            orders[epoch] = (np.array(permutation(cfg["seed"], epoch, n_train), dtype=np.int64)
                             if cfg["data.shuffle"] else np.arange(n_train, dtype=np.int64))
        idx = orders[epoch][pos:pos + n]
        xb = torch.from_numpy(np.ascontiguousarray(x[idx]))
        if cfg["data.augment.crop_padding"] > 0 or cfg["data.augment.hflip"] > 0:
            xb = augment(xb, idx, cfg, epoch)
        return xb, torch.from_numpy(np.ascontiguousarray(y[idx]))

    emit, out, step, lv, crc = train_loop(cfg, args, model, total, steps_per_epoch, batch, n_train, (vx, vy))
    # the final record is written before the test pass, as trainrun does
    if tx is not None and tx.shape[0] > 0:
        tl, tc, tn = evaluate(model, tx, ty, cfg["eval.batch_size"], cfg["train.label_smoothing"],
                              cfg["precision"] == "bf16-mixed")
        emit(f"eval test {step} correct {tc} samples {tn} loss {hexf(tl)}")
        print(f"eval test {step}: loss {tl:.9g} accuracy {tc / tn:.4f}", flush=True)
    if out:
        out.close()
    print(f"{step} steps, last loss {lv:.9g}, params_crc32 {crc:08x}", flush=True)


if __name__ == "__main__":
    main()
