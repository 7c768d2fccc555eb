#!/usr/bin/python3
"""The PyTorch side of `compare.py attention`: forward and backward of one attention kernel alone, as
`attnlab bench attention` times it (experiments/bench/bench_attention.cpp), one JSON line per
(variant, n) with the same keys: impl, variant, n, ms, peak_rss_mb, base_rss_mb.

q, k, v are [B, H, n, D] (B batch, H heads, n tokens, D head dim), drawn from a generator seeded with 0;
the loss is the sum of the output. Each case runs one untimed step, then steps until at least 3 have
run and at least a second has passed; ms is the mean step. The kernels, written out with tensor ops:
  softmax    softmax(q k^T / sqrt(D)) v
  causal     the same with the future keys masked (the mask is built in every step)
  linear     phi(q) (phi(k)^T v) / (phi(q) . sum_j phi(k_j) + 1e-6), phi = elu + 1 (Katharopoulos et al. 2020)
  linformer  softmax over E k, E v: keys and values projected along the sequence to --proj rows by a
             learned E [proj, n] shared by both (Wang et al. 2020)

Usage: /usr/bin/python3 scripts/bench/torch_attention.py [--variants softmax,causal,linear,linformer]
       [--lengths 256,512,1024,2048,4096] [--batch 1] [--heads 4] [--dhead 32] [--proj 256] [--threads 1]
"""
import argparse
import json
import math
import time

from torch_side import current_rss_mb, peak_rss_mb, torch

F = torch.nn.functional


def softmax_attention(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, H, n, m]
    if causal:
        n = q.shape[-2]
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(-1) @ v


def linear_attention(q, k, v):
    q, k = F.elu(q) + 1, F.elu(k) + 1
    state = k.transpose(-2, -1) @ v                                                   # [B, H, D, D]
    normaliser = 1.0 / (q @ k.sum(-2, keepdim=True).transpose(-2, -1) + 1e-6)       # [B, H, n, 1]
    return (q @ state) * normaliser


# Each variant: (q, k, v, E) -> output [B, H, n, D].
VARIANTS = {
    "softmax": lambda q, k, v, E: softmax_attention(q, k, v, causal=False),
    "causal": lambda q, k, v, E: softmax_attention(q, k, v, causal=True),
    "linear": lambda q, k, v, E: linear_attention(q, k, v),
    "linformer": lambda q, k, v, E: softmax_attention(q, E @ k, E @ v, causal=False),  # E @ k: [B, H, proj, D]
}


def time_case(kernel, n, args):
    """Mean seconds of one forward + backward at length n."""
    gen = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, n, args.dhead)
    # Every variant draws the same inputs, linformer's projection included, so cases differ only in the kernel.
    q, k, v = (torch.randn(shape, generator=gen, requires_grad=True) for _ in range(3))
    E = (torch.randn(args.proj, n, generator=gen) / math.sqrt(n)).requires_grad_()

    def step():
        output = kernel(q, k, v, E)  # held until the backward has run, as attnlab's bench holds it
        output.sum().backward()

    step()
    reps, started = 0, time.perf_counter()
    while reps < 3 or time.perf_counter() - started < 1.0:
        step()
        reps += 1
    return (time.perf_counter() - started) / reps


def parse_args():
    parser = argparse.ArgumentParser(description="Time attention kernels alone (forward + backward); one JSON line per case.")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, among " + ", ".join(VARIANTS))
    parser.add_argument("--lengths", default="256,512,1024,2048,4096", help="comma-separated sequence lengths")
    for name, default, doc in [("batch", 1, "batch size"), ("heads", 4, "heads"), ("dhead", 32, "head dimension"),
                               ("proj", 256, "linformer's projected length"),
                               ("threads", 1, "PyTorch's intra-op threads (OpenBLAS's own come from OPENBLAS_NUM_THREADS)")]:
        parser.add_argument("--" + name, type=int, default=default, help=doc)
    args = parser.parse_args()
    args.variants = args.variants.split(",")
    for name in args.variants:
        if name not in VARIANTS:
            parser.error(f"variant '{name}' has no PyTorch reference here; choose among {', '.join(VARIANTS)}")
    args.lengths = [int(n) for n in args.lengths.split(",")]
    return args


def main():
    start_rss = current_rss_mb()  # after the imports, before any work
    args = parse_args()
    torch.set_num_threads(args.threads)
    for n in args.lengths:
        for name in args.variants:
            seconds = time_case(VARIANTS[name], n, args)
            print(json.dumps({"impl": "pytorch", "variant": name, "n": n, "ms": seconds * 1e3,
                              "peak_rss_mb": peak_rss_mb(), "base_rss_mb": start_rss}), flush=True)


if __name__ == "__main__":
    main()
