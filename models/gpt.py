#!/usr/bin/python3
"""A small GPT (nanoGPT's model.py, for TorchScript) exported for trainrun's language modelling.

    /usr/bin/python3 models/gpt.py --zero-weights  # Debian's python3-torch; writes models/gpt.pt.gz
    /usr/bin/python3 models/gpt.py --out tests/data/lm/tiny_gpt.pt --vocab 256 --layers 1 --heads 2 --embd 16 --block 16

forward(idx: int64 [N, T]) -> logits float32 [N, T, V], T <= block_size. Token embeddings (wte) + learned position
embeddings (wpe), dropout, n_layer pre-LayerNorm blocks (x + attn(ln_1(x)), x + mlp(ln_2(x))) with causal
multi-head self-attention and a 4x GELU MLP, a final LayerNorm, and the output layer tied to wte (logits = x @
wte.weight^T, written as F.linear so the tied weight is one parameter, not two slots). Initialisation as nanoGPT:
normal(0, 0.02) for Linear and Embedding weights, zero biases, the residual projections (c_proj) normal(0, 0.02 /
sqrt(2 n_layer)), written as the exported method init_weights(). Made after torch.manual_seed(0); scripted, not
traced (dropout switches with train()/eval()).

The committed models/gpt.pt.gz is saved with --zero-weights (its 0.8 M random float32 weights would not compress
below 2.9 MB): configs/text_gpt.yaml sets model.init_method: init_weights, so trainrun draws the weights at start-up
from `seed`, as torch.manual_seed(seed); m.init_weights() does in PyTorch (bench/reference/train_reference.py).

The default vocabulary is the characters of configs/text_gpt.yaml's training split (the same files, the same
last-10% validation tail as trainrun's data.format text with data.vocab: chars), so V equals the run's vocabulary.
"""
import argparse
import gzip
import io
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
FORTUNES = "/usr/share/games/fortunes"
# configs/text_gpt.yaml's data.train_text, in order (Debian package `fortunes`)
CORPUS = ["art", "cookie", "definitions", "education", "humorists", "literature", "men-women", "miscellaneous",
          "people", "platitudes", "politics", "science", "songs-poems", "work"]


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        hs = c // self.n_head
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    @torch.jit.export
    def init_weights(self, std: float, proj_std: float):
        with torch.no_grad():
            self.ln_1.weight.fill_(1.0)
            self.ln_1.bias.zero_()
            self.attn.c_attn.weight.normal_(0.0, std)
            self.attn.c_attn.bias.zero_()
            self.attn.c_proj.weight.normal_(0.0, proj_std)
            self.attn.c_proj.bias.zero_()
            self.ln_2.weight.fill_(1.0)
            self.ln_2.bias.zero_()
            self.mlp.c_fc.weight.normal_(0.0, std)
            self.mlp.c_fc.bias.zero_()
            self.mlp.c_proj.weight.normal_(0.0, proj_std)
            self.mlp.c_proj.bias.zero_()


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int, dropout: float):
        super().__init__()
        assert n_embd % n_head == 0
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.n_layer = n_layer
        self.init_weights()

    @torch.jit.export
    def init_weights(self):
        """nanoGPT's initialisation, drawn in place from the default generator (trainrun's model.init_method):
        normal(0, 0.02) for the embeddings and Linear weights, normal(0, 0.02 / sqrt(2 n_layer)) for the residual
        projections (c_proj), zero biases, LayerNorm weight 1 and bias 0. Drawn in module order: wte, wpe, then
        each block's c_attn, attn c_proj, c_fc, mlp c_proj."""
        std = 0.02
        proj_std = 0.02 / math.sqrt(2.0 * self.n_layer)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, std)
            self.wpe.weight.normal_(0.0, std)
            for block in self.h:
                block.init_weights(std, proj_std)
            self.ln_f.weight.fill_(1.0)
            self.ln_f.bias.zero_()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        assert t <= self.block_size, "sequence longer than the position table (block_size)"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def corpus_vocab_size() -> int:
    """Distinct characters of the training split of CORPUS (all but the last 10% of the code points)."""
    text = "".join(open(os.path.join(FORTUNES, f), encoding="utf-8").read() for f in CORPUS)
    n_val = math.floor(len(text) * 0.1)
    return len(set(text[: len(text) - n_val]))


def build(vocab_size: int, block_size: int = 64, n_layer: int = 4, n_head: int = 4, n_embd: int = 128,
          dropout: float = 0.0) -> GPT:
    torch.manual_seed(0)
    return GPT(vocab_size, block_size, n_layer, n_head, n_embd, dropout)


def twin(scripted) -> GPT:
    """The eager GPT with the sizes of a scripted one (an archive this script wrote), for training it in PyTorch
    from the archive's weights (bench/reference/train_reference.py)."""
    sd = scripted.state_dict()
    vocab, n_embd = sd["wte.weight"].shape
    n_layer = len({k.split(".")[1] for k in sd if k.startswith("h.")})
    n_head = getattr(scripted.h, "0").attn.n_head
    return build(vocab, sd["wpe.weight"].shape[0], n_layer, n_head, n_embd, float(scripted.drop.p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "gpt.pt.gz"), help=".pt, or .pt.gz for a gzip'd archive")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size; 0 = the corpus's characters")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--zero-weights", action="store_true",
                    help="save every parameter as zeros (they compress to almost nothing): a run then draws the "
                         "initial weights with model.init_method: init_weights, as configs/text_gpt.yaml does")
    a = ap.parse_args()
    vocab = a.vocab or corpus_vocab_size()
    m = torch.jit.script(build(vocab, a.block, a.layers, a.heads, a.embd, a.dropout))
    if a.zero_weights:
        with torch.no_grad():
            for p in m.parameters():
                p.zero_()
    buf = io.BytesIO()
    torch.jit.save(m, buf)
    data = buf.getvalue()
    if a.out.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    with open(a.out, "wb") as f:
        f.write(data)
    n = sum(p.numel() for p in m.parameters())
    print(f"{a.out}: vocab {vocab}, block {a.block}, {a.layers} layers, {a.heads} heads, {a.embd} dims, "
          f"{n} parameters, {len(data)} bytes")


if __name__ == "__main__":
    main()
