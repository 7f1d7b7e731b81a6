#!/usr/bin/python3
"""A small GPT (nanoGPT's model.py, for TorchScript) exported for trainrun's language modelling.

    /usr/bin/python3 models/gpt.py                 # Debian's python3-torch; writes models/gpt.pt.gz
    /usr/bin/python3 models/gpt.py --out tests/data/lm/tiny_gpt.pt --vocab 256 --layers 1 --heads 2 --embd 16 --block 16

forward(idx: int64 [N, T]) -> logits float32 [N, T, V], T <= block_size. Token embeddings (wte) + learned position
embeddings (wpe), dropout, n_layer pre-LayerNorm blocks (x + attn(ln_1(x)), x + mlp(ln_2(x))) with causal
multi-head self-attention and a 4x GELU MLP, a final LayerNorm, and the output layer tied to wte (logits = x @
wte.weight^T, written as F.linear so the tied weight is one parameter, not two slots). Initialisation as nanoGPT:
normal(0, 0.02) for Linear and Embedding weights, zero biases, the residual projections (c_proj) normal(0, 0.02 /
sqrt(2 n_layer)). Made after torch.manual_seed(0); scripted, not traced (dropout switches with train()/eval()).

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
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "gpt.pt.gz"), help=".pt, or .pt.gz for a gzip'd archive")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size; 0 = the corpus's characters")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    a = ap.parse_args()
    vocab = a.vocab or corpus_vocab_size()
    m = torch.jit.script(build(vocab, a.block, a.layers, a.heads, a.embd, a.dropout))
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
