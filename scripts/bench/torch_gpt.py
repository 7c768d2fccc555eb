#!/usr/bin/python3
"""The PyTorch side of `compare.py gpt`: trains the GPT that `attnlab bench gpt` trains
(experiments/bench/bench_gpt.cpp) on random tokens and prints one JSON line with the same keys.

The model: learned token and position embeddings, pre-norm blocks (LayerNorm, one qkv Linear with bias,
causal softmax attention, an output Linear with bias; LayerNorm, Linear to 4 C, exact GELU, Linear back),
a final LayerNorm and an output layer of its own without bias (not tied to the embedding); AdamW at
lr 1e-3. A step draws B x T random tokens, takes the sequence rolled left by one as the targets, and runs
forward, cross-entropy, backward and the optimizer step. Its parameter count is
V C + T C + L (12 C^2 + 13 C) + 2 C + C V, as attnlab's.

Usage: /usr/bin/python3 scripts/bench/torch_gpt.py [--layers 4] [--heads 4] [--dim 128] [--block 64]
       [--batch 12] [--vocab 65] [--steps 50] [--warmup 5] [--threads 1]
"""
import argparse
import json
import math
import time

from torch_side import current_rss_mb, peak_rss_mb, torch

nn = torch.nn
F = torch.nn.functional

# B batch, T tokens (block), C channels (dim), H heads, D head dim (C / H), V vocabulary, L layers


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        # One function, so that the attention's intermediates live until the block returns, as in the
        # runs the README's memory figures come from.
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)   # each [B, T, C]
        q = q.view(B, T, H, C // H).transpose(1, 2)        # [B, H, T, D]
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        # The mask is built in every forward: part of the timed work in the figures the README reports.
        future = ~torch.tril(torch.ones(T, T, dtype=torch.bool))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))  # [B, H, T, T]
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        del scores  # not kept for the backward: freed now rather than when the block returns
        y = (weights @ v).transpose(1, 2).contiguous().view(B, T, C)  # [B, T, C]
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block, dim, heads, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def loss(self, ids, targets):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))  # [B, T, C]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))                          # [B, T, V]
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def parse_args():
    parser = argparse.ArgumentParser(description="Train the reference GPT on random tokens; print one JSON line.")
    for name, default, doc in [("layers", 4, "transformer blocks"), ("heads", 4, "attention heads"), ("dim", 128, "model width"),
                               ("block", 64, "sequence length"), ("batch", 12, "sequences per step"),
                               ("vocab", 65, "vocabulary size"), ("steps", 50, "timed steps"), ("warmup", 5, "untimed steps first"),
                               ("threads", 1, "PyTorch's intra-op threads (OpenBLAS's own come from OPENBLAS_NUM_THREADS)")]:
        parser.add_argument("--" + name, type=int, default=default, help=doc)
    return parser.parse_args()


def main():
    start_rss = current_rss_mb()  # after the imports, before any work
    args = parse_args()
    if args.dim % args.heads:
        raise SystemExit(f"--heads ({args.heads}) must divide --dim ({args.dim})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(args.vocab, args.block, args.dim, args.heads, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        ids = torch.randint(0, args.vocab, (args.batch, args.block))
        loss = model.loss(ids, torch.roll(ids, -1, 1))  # targets: each sequence rolled left by one
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    step_s = (time.perf_counter() - started) / args.steps
    print(json.dumps({"impl": "pytorch-" + torch.__version__, "threads": args.threads,
                      "params": sum(p.numel() for p in model.parameters()),
                      "step_ms": step_s * 1e3, "tokens_per_s": args.batch * args.block / step_s,
                      "peak_rss_mb": peak_rss_mb(), "base_rss_mb": start_rss}))


if __name__ == "__main__":
    main()
