#!/usr/bin/python3
"""The PyTorch side of `compare.py generate`: generates tokens greedily with the GPT that
`attnlab bench generate` times (experiments/bench/bench_generate.cpp; torch_gpt.py's model, with softmax
attention) and prints one JSON line per (mode, context) with the same keys.

Two modes, one sequence, under torch.inference_mode():
  recompute  nanoGPT's generate: for each new token a forward over the whole sequence (cropped to the
             block size), the last position's logits, the most likely token appended
  kv_cache   a loop that keeps each layer's keys and values in tensors allocated once for the longest
             sequence: the context is fed as one prompt (causal mask), then each new token's query
             attends over the cached keys, without a mask (it sees them all)
ms_per_token is the median over the timed tokens (after untimed ones: 4 with the cache, 1 recomputing,
as attnlab's side), mean_ms their mean, prefill_ms the prompt's forward (kv_cache).

Usage: /usr/bin/python3 scripts/bench/torch_generate.py [--contexts 256,512,...] [--modes recompute,kv_cache]
       [--layers 4] [--heads 4] [--dim 128] [--vocab 65] [--tokens 64] [--recomputed-tokens 3] [--threads 1]
"""
import argparse
import json
import math
import statistics
import time

import torch_gpt
from torch_side import current_rss_mb, peak_rss_mb, torch

nn = torch.nn
F = torch.nn.functional

UNTIMED = {"kv_cache": 4, "recompute": 1}

# B batch (1), T tokens, C channels (dim), H heads, D head dim (C / H), V vocabulary, L layers


class Block(torch_gpt.Block):
    """torch_gpt.py's block (the same layers); forward takes the layer's cache (None: no cache, the whole
    sequence)."""

    def forward(self, x, cache=None, start=0):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)   # each [B, T, C]
        q = q.view(B, T, H, C // H).transpose(1, 2)        # [B, H, T, D]
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        if cache is not None:                              # keys and values of positions [0, start + T)
            cache[0][:, :, start:start + T] = k
            cache[1][:, :, start:start + T] = v
            k, v = cache[0][:, :, :start + T], cache[1][:, :, :start + T]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))  # [B, H, T, start + T]
        if T > 1:  # query i sits at position start + i: it sees keys j <= start + i
            future = torch.ones(T, start + T, dtype=torch.bool).triu(start + 1)
            scores = scores.masked_fill(future, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).contiguous().view(B, T, C)  # [B, T, C]
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block, dim, heads, layers):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, caches=None, start=0):
        """Logits [B, T, V] of ids [B, T] at positions start .. start + T - 1."""
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.shape[1]))
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], start)
        return self.head(self.ln_f(x))

    def empty_caches(self, dim, heads):
        shape = (1, heads, self.block, dim // heads)
        return [(torch.empty(shape), torch.empty(shape)) for _ in self.blocks]


def generate_recomputing(model, ids, steps):
    """nanoGPT's generate (greedy): a forward over the sequence, cropped to the block size, per token."""
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        cond = ids if ids.size(1) <= model.block else ids[:, -model.block:]
        next_id = model(cond)[:, -1, :].argmax(-1, keepdim=True)
        ids = torch.cat((ids, next_id), dim=1)
        times.append((time.perf_counter() - started) * 1e3)
    return times, 0.0


def generate_with_cache(model, ids, steps, dim, heads):
    caches = model.empty_caches(dim, heads)
    started = time.perf_counter()
    next_id = model(ids, caches, 0)[:, -1, :].argmax(-1, keepdim=True)
    prefill_ms = (time.perf_counter() - started) * 1e3
    position, times = ids.shape[1], []
    for _ in range(steps):
        started = time.perf_counter()
        next_id = model(next_id, caches, position)[:, -1, :].argmax(-1, keepdim=True)
        position += 1
        times.append((time.perf_counter() - started) * 1e3)
    return times, prefill_ms


def parse_args():
    parser = argparse.ArgumentParser(description="Greedy generation with and without a KV cache; one JSON line per (mode, context).")
    parser.add_argument("--contexts", default="256,512,1024,2048,4096,8192", help="comma-separated context lengths")
    parser.add_argument("--modes", default="recompute,kv_cache", help="recompute, kv_cache or both")
    for name, default, doc in [("layers", 4, "transformer blocks"), ("heads", 4, "attention heads"), ("dim", 128, "model width"),
                               ("vocab", 65, "vocabulary size"), ("tokens", 64, "tokens timed with the cache"),
                               ("recomputed-tokens", 3, "tokens timed recomputing"),
                               ("threads", 1, "PyTorch's intra-op threads (OpenBLAS's own come from OPENBLAS_NUM_THREADS)")]:
        parser.add_argument("--" + name, type=int, default=default, help=doc)
    return parser.parse_args()


def main():
    start_rss = current_rss_mb()  # after the imports, before any work
    args = parse_args()
    if args.dim % args.heads:
        raise SystemExit(f"--heads ({args.heads}) must divide --dim ({args.dim})")
    contexts = [int(c) for c in args.contexts.split(",")]
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in UNTIMED:
            raise SystemExit(f"mode '{mode}' is not among {sorted(UNTIMED)}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    block = max(contexts) + max(UNTIMED["kv_cache"] + args.tokens, UNTIMED["recompute"] + args.recomputed_tokens)
    model = GPT(args.vocab, block, args.dim, args.heads, args.layers).eval()
    with torch.inference_mode():
        for context in contexts:
            ids = torch.randint(0, args.vocab, (1, context))
            for mode in modes:
                timed = args.tokens if mode == "kv_cache" else args.recomputed_tokens
                if mode == "kv_cache":
                    times, prefill_ms = generate_with_cache(model, ids, UNTIMED[mode] + timed, args.dim, args.heads)
                else:
                    times, prefill_ms = generate_recomputing(model, ids, UNTIMED[mode] + timed)
                times = times[UNTIMED[mode]:]
                print(json.dumps({"impl": "pytorch-" + torch.__version__, "kernel": "softmax", "mode": mode, "context": context,
                                  "ms_per_token": statistics.median(times), "mean_ms": statistics.mean(times), "tokens": len(times),
                                  "prefill_ms": prefill_ms, "params": sum(p.numel() for p in model.parameters()),
                                  "peak_rss_mb": peak_rss_mb(), "base_rss_mb": start_rss}), flush=True)


if __name__ == "__main__":
    main()
