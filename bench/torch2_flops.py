#!/usr/bin/env python3
"""FLOPs of one training step of a trainrun config's model, counted by PyTorch itself (bench/vs_torch2.py).

    PYTHON bench/torch2_flops.py CONFIG.yaml [key=value ...]   -> "train_flops_per_step F forward_flops_per_step G"

Runs under PyTorch 2.x (torch.utils.flop_counter.FlopCounterMode, which counts matrix products and convolutions:
2 FLOPs per multiply-add of mm, addmm, bmm, baddbmm, convolution and their backward formulas; elementwise ops,
normalisation, pooling, softmax and the optimizer are not counted, so a fraction of the peak made from it is a lower
bound). The model is the one bench/reference/train_reference.py trains for the config (a YAML layer list, or a
TorchScript archive's eager twin); one batch of train.batch_size samples of the data's shape (values do not change
the count) goes forward, through cross_entropy and backward.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import train_reference as ref  # noqa: E402  (sets no kernel pins when imported)
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    cfg = ref.load_config(sys.argv[1], sys.argv[2:])
    bs = cfg["train.batch_size"]
    torch.manual_seed(0)
    if cfg["data.format"] == "text":
        _, _, vocab = ref.load_text(cfg)
        model = ref.build_torchscript_twin(cfg["model.torchscript"], cfg["model.init_method"], cfg["seed"])
        x = torch.randint(0, vocab, (bs, cfg["data.block_size"]))
        y = torch.randint(0, vocab, (bs, cfg["data.block_size"]))
    else:
        if cfg["model.torchscript"]:
            model, shape = ref.build_torchscript_twin(cfg["model.torchscript"]), [1, 28, 28]
        else:
            model, shape = ref.build_model(cfg["model.spec"])
        x = torch.randn([bs] + list(shape))
        y = torch.randint(0, 10, (bs,))
    model.train()
    with FlopCounterMode(display=False) as fwd:
        logits = model(x)
    forward = fwd.get_total_flops()
    with FlopCounterMode(display=False) as step:
        loss = ref.cross_entropy(model(x), y, 0.0)
        loss.backward()
    del logits
    print(f"train_flops_per_step {step.get_total_flops()} forward_flops_per_step {forward}")


if __name__ == "__main__":
    main()
