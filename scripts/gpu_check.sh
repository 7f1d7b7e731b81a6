#!/usr/bin/env bash
# scripts/gpu_check.sh -- issue 21, part B: build trainrun against a CUDA-enabled libtorch and run the GPU checks.
#
#   scripts/gpu_check.sh fetch      on the build machine (Debian 12, network): download the .debs the GPU machine
#                                   lacks (libyaml, cJSON, Criterion and their runtime libraries, pkg-config, zlib and
#                                   OpenSSL headers, Fashion-MNIST) into .gpu-debs/ (git-ignored: carry it along)
#   scripts/gpu_check.sh run        on the GPU machine (bare, no network, PyTorch with CUDA, nvcc, CMake, ninja):
#                                   unpack the .debs with dpkg -x into .gpu-prefix/, build with every core against the
#                                   libtorch inside the PyTorch wheel (python3 -c 'import torch;
#                                   print(torch.utils.cmake_prefix_path)'), then
#                                     1. the CPU test suite against that libtorch (every ctest test but test_gpu),
#                                     2. tests/test_gpu.c (MLP and convnet accuracy vs the CPU, eval on the device,
#                                        the watchdog on the CUDA allocator, allocated flat over 3,000 steps,
#                                        SIGKILL + resume bit for bit, CUDA generators in rng.safetensors),
#                                     3. throughput of the convnet: trainrun vs PyTorch eager (bench/eager.py) on the
#                                        GPU, side by side, as a ratio.
#                                   Logs and summary.txt go to $OUT (the device tool's output folder) or gpu-logs/.
#
# With the device tool: `run` with carry [".gpu-debs"] and a timeout that leaves room to rerun once, e.g.
#   bash scripts/gpu_check.sh run       (GPU_CHECK_BUDGET=480 seconds by default: each phase gets what is left)
# Environment: GPU_CHECK_BUDGET (seconds for everything), GPU_CHECK_SKIP_CPU=1 (skip phase 1), GPU_CHECK_JOBS
# (build and ctest parallelism; default nproc), TORCH_CMAKE_PREFIX (skip asking python3), PYTHON (python3).
set -u
cd "$(dirname "$0")/.."
MODE=${1:-run}
DEBS=${GPU_DEBS:-.gpu-debs}
PREFIX=$PWD/.gpu-prefix
OUTDIR=${OUT:-$PWD/gpu-logs}
JOBS=${GPU_CHECK_JOBS:-$(nproc)}
BUDGET=${GPU_CHECK_BUDGET:-480}
PYTHON=${PYTHON:-python3}
T0=$(date +%s)

# Runtime libraries and headers the build and the tests need that a bare GPU machine may lack (Debian 12 names).
# Criterion's -dev package brings only headers and its .so link; its .pc file's Requires.private (boxfort, libffi,
# libgit2, nanomsg -dev packages) are dropped after unpacking, so only their runtime libraries are fetched.
PACKAGES="libyaml-0-2 libyaml-dev libcjson1 libcjson-dev libcriterion3 libcriterion-dev libnanomsg5 libffi8
 libgit2-1.5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1 libpcre2-8-0 libgssapi-krb5-2
 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 zlib1g zlib1g-dev libssl3 libssl-dev pkgconf
 pkgconf-bin libpkgconf3 pkg-config dataset-fashion-mnist"

log() { echo "[gpu_check $(( $(date +%s) - T0 ))s] $*" | tee -a "$OUTDIR/summary.txt" >&2; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

if [ "$MODE" = fetch ]; then
    mkdir -p "$DEBS"
    (cd "$DEBS" && apt-get download $PACKAGES) || { echo "gpu_check: apt-get download failed" >&2; exit 1; }
    du -sh "$DEBS"
    echo "gpu_check: $(ls "$DEBS"/*.deb | wc -l) packages in $DEBS; carry it to the GPU machine" >&2
    exit 0
fi
[ "$MODE" = run ] || { echo "usage: $0 fetch|run" >&2; exit 2; }

mkdir -p "$OUTDIR"
: > "$OUTDIR/summary.txt"
log "start: $(hostname), $JOBS jobs, budget ${BUDGET}s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUTDIR/nvidia-smi.txt" 2>&1 \
    && log "GPU: $(head -1 "$OUTDIR/nvidia-smi.txt")" || log "nvidia-smi failed: $(head -3 "$OUTDIR/nvidia-smi.txt")"

# ---- the Debian packages, unpacked into a prefix
ls "$DEBS"/*.deb > /dev/null 2>&1 || { log "no .debs in $DEBS: run '$0 fetch' on the build machine and carry $DEBS"; exit 1; }
rm -rf "$PREFIX"
for d in "$DEBS"/*.deb; do dpkg -x "$d" "$PREFIX" || { log "dpkg -x $d failed"; exit 1; }; done
LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
sed -i '/^Requires.private/d;/^Libs.private/d' "$LIBDIR/pkgconfig/criterion.pc"
export PATH=$PREFIX/usr/bin:$PATH
export LD_LIBRARY_PATH=$LIBDIR:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig:$PREFIX/usr/share/pkgconfig
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
export PKG_CONFIG_SYSROOT_DIR=$PREFIX      # the .pc files say prefix=/usr
command -v pkg-config > /dev/null || ln -sf pkgconf "$PREFIX/usr/bin/pkg-config"
pkg-config --cflags --libs criterion yaml-0.1 libcjson > "$OUTDIR/pkg-config.txt" 2>&1 \
    || { log "pkg-config cannot resolve the unpacked packages: $(cat "$OUTDIR/pkg-config.txt")"; exit 1; }
# The tests read Fashion-MNIST from /usr/share/datasets/fashion-mnist (Debian's path).
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    mkdir -p /usr/share/datasets 2>/dev/null && ln -sfn "$PREFIX/usr/share/datasets/fashion-mnist" \
        /usr/share/datasets/fashion-mnist 2>/dev/null \
        && log "Fashion-MNIST linked into /usr/share/datasets" \
        || log "cannot link Fashion-MNIST into /usr/share/datasets (not root?): tests that need it will skip"
fi

# ---- build against the wheel's libtorch, every core
TORCH_PREFIX=${TORCH_CMAKE_PREFIX:-$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)}
TORCH_VERSION=$("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null)
[ -n "$TORCH_PREFIX" ] || { log "python3 cannot import torch: no libtorch to build against"; exit 1; }
log "PyTorch $TORCH_VERSION, CMake prefix $TORCH_PREFIX"
GEN=; command -v ninja > /dev/null && GEN="-G Ninja"
BUILD=build-gpu
timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) cmake -S . -B $BUILD $GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DCMAKE_LIBRARY_PATH="$LIBDIR" -DCMAKE_INCLUDE_PATH="$PREFIX/usr/include" \
    -DOPENSSL_ROOT_DIR="$PREFIX/usr" -DZLIB_ROOT="$PREFIX/usr" \
    -DCMAKE_C_FLAGS="-isystem $PREFIX/usr/include/x86_64-linux-gnu" \
    -DCMAKE_CXX_FLAGS="-isystem $PREFIX/usr/include/x86_64-linux-gnu" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$LIBDIR -L$LIBDIR" \
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$LIBDIR -L$LIBDIR" > "$OUTDIR/cmake.log" 2>&1 \
    || { log "cmake failed: $(tail -5 "$OUTDIR/cmake.log")"; exit 1; }
grep 'trainrun: libtorch' "$OUTDIR/cmake.log" | tee -a "$OUTDIR/summary.txt" >&2
grep -q 'CUDA ON' "$OUTDIR/cmake.log" || log "WARNING: CMake did not detect a CUDA-enabled libtorch (TRAINRUN_CUDA OFF)"
b0=$(date +%s)
timeout $(( $(left) > 60 ? $(left) - 30 : 30 )) cmake --build $BUILD -j "$JOBS" > "$OUTDIR/build.log" 2>&1 \
    || { log "build failed: $(grep -m5 -E 'error|Error' "$OUTDIR/build.log")"; exit 1; }
log "built in $(( $(date +%s) - b0 ))s"

# ---- 1. the CPU suite against this libtorch (proves the README's 2.x claim)
if [ "${GPU_CHECK_SKIP_CPU:-0}" != 1 ]; then
    c0=$(date +%s)
    timeout $(( $(left) > 240 ? $(left) - 200 : 40 )) ctest --test-dir $BUILD -E '^test_gpu$' -j "$JOBS" \
        --output-on-failure > "$OUTDIR/ctest-cpu.log" 2>&1
    rc=$?
    log "CPU suite: exit $rc in $(( $(date +%s) - c0 ))s: $(grep -E 'tests passed|tests failed' "$OUTDIR/ctest-cpu.log")"
    grep -E '^\s+[0-9]+ - ' "$OUTDIR/ctest-cpu.log" | tee -a "$OUTDIR/summary.txt" >&2
fi

# ---- 2. the GPU tests
g0=$(date +%s)
(cd $BUILD && timeout $(( $(left) > 120 ? $(left) - 60 : 30 )) ./test_gpu --jobs 1 --verbose) \
    > "$OUTDIR/test_gpu.log" 2>&1
rc=$?
log "GPU tests: exit $rc in $(( $(date +%s) - g0 ))s"
grep -E '^\[(PASS|FAIL|SKIP)|Synthesis|test accuracy|leak:|flat:|sigkill:' "$OUTDIR/test_gpu.log" \
    | tee -a "$OUTDIR/summary.txt" >&2

# ---- 3. throughput, convnet, trainrun vs PyTorch eager on the GPU
if [ "$(left)" -gt 60 ]; then
    STEPS=${GPU_CHECK_STEPS:-400}
    run_dir=$(mktemp -d)
    timeout 60 $BUILD/trainrun bench/configs/convnet.yaml device=cuda train.max_steps=$((STEPS + 50)) \
        log.every_steps=50 run.dir="$run_dir" run.name=convnet > "$OUTDIR/throughput-trainrun.log" 2>&1
    # the timed window: train records after the first 50 (warm-up) steps, as bench/run.sh reads them
    tr_sps=$("$PYTHON" - "$run_dir/convnet/metrics.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
if len(recs) < 2:
    sys.exit(1)
t0, s0 = recs[0]["time_s"], recs[0]["step"]
t1, s1 = recs[-1]["time_s"], recs[-1]["step"]
print(f"{(s1 - s0) * 128 / (t1 - t0):.1f}")
EOF
    )
    timeout 90 "$PYTHON" bench/eager.py convnet --device cuda --steps "$STEPS" --warmup 50 --data \
        /usr/share/datasets/fashion-mnist > "$OUTDIR/throughput-eager.log" 2>&1
    eg_sps=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$OUTDIR/throughput-eager.log")
    if [ -n "$tr_sps" ] && [ -n "$eg_sps" ]; then
        log "throughput convnet (batch 128, $STEPS steps): trainrun $tr_sps samples/s, PyTorch eager $eg_sps" \
            "samples/s, ratio $("$PYTHON" -c "print(f'{$tr_sps / $eg_sps:.3f}')")"
    else
        log "throughput: trainrun '${tr_sps:-failed}' eager '${eg_sps:-failed}' (see throughput-*.log)"
    fi
    rm -rf "$run_dir"
fi
log "done in $(( $(date +%s) - T0 ))s"
