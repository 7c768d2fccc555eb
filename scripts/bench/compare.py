#!/usr/bin/python3
"""attnlab beside PyTorch on the same work, on the same machine, in one run.

  /usr/bin/python3 scripts/bench/compare.py gpt [--threads 1] [--reps 3] [--layers ...] [--heads ...] [--dim ...]
      [--block ...] [--batch ...] [--vocab ...] [--steps ...] [--warmup ...]
  /usr/bin/python3 scripts/bench/compare.py attention [--threads 1] [--reps 3] [--variants softmax,causal,linear,linformer]
      [--lengths 256,1024,4096] [--batch ...] [--heads ...] [--dhead ...] [--proj ...]
  /usr/bin/python3 scripts/bench/compare.py generate [--threads 1] [--reps 3] [--kernels softmax,linear,...]
      [--contexts 256,1024,4096] [--layers ...] [--heads ...] [--dim ...] [--vocab ...] [--tokens ...] [--recomputed-tokens ...]
  /usr/bin/python3 scripts/bench/compare.py table [--sets 3] [--reps 3] [--threads 1,2] [--sgemm-runs 2] [--steps ...] [--warmup ...]

gpt trains the reference GPT (`attnlab bench gpt` against torch_gpt.py); attention times one kernel's
forward and backward alone (`attnlab bench attention` against torch_attention.py) for each length and
variant; generate times one generated token after a context of each length (`attnlab bench generate`,
every kernel with its decoding state and recomputing, against torch_generate.py, softmax with a KV cache
and recomputing as nanoGPT's generate does). The model flags go to both sides unchanged; a flag left out takes both sides' default. Each side
runs in a process of its own, attnlab first, alternating (A B A B ...) --reps times, and one JSON line per
case gives the medians over the reps:
  gpt        attnlab_tokens_per_s, pytorch_tokens_per_s, speed_ratio (attnlab's tokens/s over PyTorch's),
             attnlab_peak_rss_mb, pytorch_peak_rss_mb, and params (the same on both sides, or it stops)
  attention  variant, n, attnlab_ms, pytorch_ms, speed_ratio (PyTorch's ms over attnlab's)
  gpt, attention
             attnlab_work_mb, pytorch_work_mb (peak RSS above the RSS before any work) and
             work_memory_ratio (attnlab's over PyTorch's)
so a speed_ratio above 1 means attnlab is faster and a work_memory_ratio below 1 that it needs less.
  generate   one line per (kernel, context): attnlab_cached_ms and attnlab_recomputed_ms (ms per token,
             each the median over the reps of each run's median token), cache_speedup (recomputed over
             cached), flatness (cached ms over cached ms at the shortest context), decodes_from_state
             (false: the kernel is recomputed over its q, k, v under the cache); for softmax also
             pytorch_kv_cache_ms, pytorch_recompute_ms, kv_cache_speed_ratio (PyTorch's KV-cache loop
             over attnlab's cache) and recompute_speed_ratio (nanoGPT's generate over attnlab's recomputing)

table makes the README's benchmark row: --sets sets, each the gpt case (--reps reps) for the reference GPT
and for the toy shape (TOY_FLAGS) at each of --threads, then --sgemm-runs runs of `attnlab bench gpt
--threads 1 --steps 100` for the GPT's fastest step as a share of the fastest in-process 1024^3 product.
One line per case of a set ("table_set": shape, threads and the gpt case's figures) and per sgemm run
("table_sgemm": of_sgemm_fastest, products_of_sgemm), then one "table" line: each column's median over the
sets and its range, the working memory's range, of_sgemm_fastest's range and median, and "row", the
README table's row for this machine and day (its last cell the range and median of of_sgemm_fastest, or
one figure when every run rounds to it). --steps and --warmup, when given, go to every run.

The attnlab binary is $ATTNLAB, else build/attnlab (scripts/setup.sh builds it); the PyTorch side is
Debian's python3-torch under /usr/bin/python3.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # Debian's python3-torch is installed for it
TIMEOUT_S = 1800             # one side's run of one case

GPT_FLAGS = ["layers", "heads", "dim", "block", "batch", "vocab", "steps", "warmup"]
ATTENTION_FLAGS = ["batch", "heads", "dhead", "proj"]
GENERATE_FLAGS = ["layers", "heads", "dim", "vocab", "tokens", "recomputed-tokens"]
GENERATE_KERNELS = "softmax,sliding_window,linear,performer,decay,delta,gated_delta,cosine,sparse"
# The README table's toy shape (the reference GPT is both sides' defaults).
TOY_FLAGS = ["--layers", "2", "--heads", "4", "--dim", "64", "--block", "16", "--batch", "32", "--vocab", "16"]
TABLE_SHAPES = (("gpt", []), ("toy", TOY_FLAGS))


def fail(message):
    sys.exit(f"compare.py: {message}")


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def positive_ints(text):
    return [positive_int(part) for part in text.split(",")]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cases = parser.add_subparsers(dest="case", required=True, metavar="{gpt,attention,generate,table}")
    gpt = cases.add_parser("gpt", help="train the reference GPT on random tokens")
    attention = cases.add_parser("attention", help="one attention kernel's forward and backward alone")
    generate = cases.add_parser("generate", help="time per generated token against the context's length")
    table = cases.add_parser("table", help="the README benchmark table's row for this machine: sets of gpt cases")
    table.add_argument("--sets", type=positive_int, default=3, help="sets of cases; each column's median over them")
    table.add_argument("--reps", type=positive_int, default=3, help="runs of each side in each case, alternated")
    table.add_argument("--threads", type=positive_ints, default="1,2", help="comma-separated thread counts")
    table.add_argument("--sgemm-runs", type=positive_int, default=2, help="runs of `bench gpt --threads 1` after each set")
    for name in ("steps", "warmup"):
        table.add_argument("--" + name, type=int, help="passed to every run")
    for sub, flags in ((gpt, GPT_FLAGS), (attention, ATTENTION_FLAGS), (generate, GENERATE_FLAGS)):
        sub.add_argument("--threads", type=positive_int, default=1, help="cores each side may use")
        sub.add_argument("--reps", type=positive_int, default=3, help="runs of each side, alternated; medians reported")
        for name in flags:
            sub.add_argument("--" + name, type=int, help="passed to both sides")
    attention.add_argument("--variants", default="softmax,causal,linear,linformer", help="comma-separated")
    attention.add_argument("--lengths", type=positive_ints, default="256,1024,4096", help="comma-separated sequence lengths")
    generate.add_argument("--kernels", default=GENERATE_KERNELS, help="comma-separated attnlab kernels (PyTorch's side: softmax)")
    generate.add_argument("--contexts", type=positive_ints, default="256,512,1024,2048,4096,8192", help="comma-separated context lengths")
    return parser.parse_args()


def attnlab_binary():
    path = os.environ.get("ATTNLAB") or os.path.join(ROOT, "build", "attnlab")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        fail(f"no attnlab binary at {path}: build it (scripts/setup.sh) or set ATTNLAB to its path")
    return path


def check_torch():
    """Stops with torch_side.py's message (which package to install) when PyTorch cannot be imported."""
    done = subprocess.run([PYTHON, os.path.join(HERE, "torch_side.py")], capture_output=True, text=True)
    if done.returncode != 0:
        fail(done.stderr.strip() or f"{PYTHON} cannot import torch")


def side_environments(threads):
    """The environments of the two sides' processes, each to use `threads` cores its best way.

    attnlab gets --threads N and runs OpenBLAS on one thread inside each of its own N. Debian's PyTorch
    1.13 hands its matrix products to OpenBLAS, whose threads are OpenBLAS's own, not PyTorch's intra-op
    pool: so OpenBLAS gets the N threads and PyTorch's pool one, so that the two pools never ask for more
    than N cores together. On a 2-core machine this was the fastest pairing for the default gpt case
    (44.8 ms a step, against 57.8 ms with 2 intra-op threads and 1 OpenBLAS thread, and 162 ms with 2 of
    each); the torch programs are therefore always run with --threads 1.
    """
    attnlab_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    torch_env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS="1")
    return attnlab_env, torch_env


def run(command, env):
    """The JSON lines one run of one side prints."""
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        fail(f"no result within {TIMEOUT_S} s: {' '.join(command)}")
    if done.returncode != 0:
        fail(f"exit status {done.returncode} from {' '.join(command)}\n{done.stderr[-2000:]}")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        fail(f"no JSON line from {' '.join(command)}\n{done.stdout[-2000:]}")
    return lines


def alternate(attnlab_command, torch_command, args, threads=None):
    """Runs attnlab, then PyTorch, --reps times on `threads` (else --threads); returns each side's JSON lines."""
    threads = args.threads if threads is None else threads
    attnlab_env, torch_env = side_environments(threads)
    attnlab_lines, torch_lines = [], []
    for _ in range(args.reps):
        attnlab_lines += run(attnlab_command + ["--threads", str(threads)], attnlab_env)
        torch_lines += run(torch_command + ["--threads", "1"], torch_env)
    return attnlab_lines, torch_lines


def median(lines, key):
    return statistics.median(line[key] for line in lines)


def work_mb(lines):
    """Median memory used by the work: peak RSS above the RSS before any work."""
    return statistics.median(line["peak_rss_mb"] - line["base_rss_mb"] for line in lines)


def memory(a, b):
    return {"attnlab_work_mb": work_mb(a), "pytorch_work_mb": work_mb(b),
            "work_memory_ratio": work_mb(a) / max(work_mb(b), 1e-9)}


def given_flags(args, names):
    """The model flags given on the command line, as both sides take them."""
    flags = []
    for name in names:
        value = getattr(args, name.replace("-", "_"))
        if value is not None:
            flags += ["--" + name, str(value)]
    return flags


def gpt_case(attnlab, args, flags, threads):
    """The gpt case's figures for the model `flags` on `threads`."""
    a, b = alternate([attnlab, "bench", "gpt"] + flags, [PYTHON, os.path.join(HERE, "torch_gpt.py")] + flags, args, threads)
    params = {line["params"] for line in a + b}
    if len(params) != 1:
        fail(f"the two sides built different models (parameter counts {sorted(params)}) for {' '.join(flags) or 'the defaults'}")
    return {"case": "gpt", "args": flags, "threads": threads, "params": params.pop(),
            "attnlab_tokens_per_s": median(a, "tokens_per_s"), "pytorch_tokens_per_s": median(b, "tokens_per_s"),
            "speed_ratio": median(a, "tokens_per_s") / median(b, "tokens_per_s"),
            "attnlab_peak_rss_mb": median(a, "peak_rss_mb"), "pytorch_peak_rss_mb": median(b, "peak_rss_mb"), **memory(a, b)}


def compare_gpt(attnlab, args):
    print(json.dumps(gpt_case(attnlab, args, given_flags(args, GPT_FLAGS), args.threads)), flush=True)


def machine_name():
    """The CPU's model name as the kernel reports it (lscpu's "Model name")."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def spread(values, fmt):
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def compare_table(attnlab, args):
    timing = given_flags(args, ["steps", "warmup"])
    ratios, memory_ratios, shares = {}, [], []
    for number in range(1, args.sets + 1):
        for shape, flags in TABLE_SHAPES:
            for threads in args.threads:
                line = gpt_case(attnlab, args, flags + timing, threads)
                ratios.setdefault((shape, threads), []).append(line["speed_ratio"])
                memory_ratios.append(line["work_memory_ratio"])
                print(json.dumps({**line, "case": "table_set", "set": number, "shape": shape}), flush=True)
        sgemm_timing = timing if args.steps is not None else ["--steps", "100"] + timing
        for _ in range(args.sgemm_runs):
            line = run([attnlab, "bench", "gpt", "--threads", "1"] + sgemm_timing, side_environments(1)[0])[-1]
            shares.append(line["of_sgemm_fastest"])
            print(json.dumps({"case": "table_sgemm", "set": number, "of_sgemm_fastest": line["of_sgemm_fastest"],
                              "products_of_sgemm": line["products_of_sgemm"]}), flush=True)
    medians = {f"{shape}_{threads}": statistics.median(values) for (shape, threads), values in ratios.items()}
    cells = [f"{medians[key]:.2f}x" if key in medians else "-" for key in (f"{shape}_{t}" for shape, _ in TABLE_SHAPES for t in (1, 2))]
    share = spread(shares, "{:.2f}")
    cells.append(share if "-" not in share else f"{share} (median {statistics.median(shares):.2f})")
    day, machine = time.strftime("%Y-%m-%d", time.gmtime()), machine_name()
    print(json.dumps({"case": "table", "sets": args.sets, "machine": machine, "medians": medians,
                      "ranges": {f"{shape}_{threads}": [min(v), max(v)] for (shape, threads), v in ratios.items()},
                      "work_memory_ratio": [min(memory_ratios), max(memory_ratios)],
                      "of_sgemm_fastest": [min(shares), statistics.median(shares), max(shares)],
                      "row": f"| {machine}, {day} ({args.sets}) | " + " | ".join(cells) + " |"}), flush=True)


def compare_attention(attnlab, args):
    shape = given_flags(args, ATTENTION_FLAGS)
    for n in args.lengths:
        for variant in args.variants.split(","):
            case = ["--variants", variant, "--lengths", str(n)] + shape
            a, b = alternate([attnlab, "bench", "attention"] + case,
                             [PYTHON, os.path.join(HERE, "torch_attention.py")] + case, args)
            print(json.dumps({"case": "attention", "variant": variant, "n": n, "threads": args.threads,
                              "attnlab_ms": median(a, "ms"), "pytorch_ms": median(b, "ms"),
                              "speed_ratio": median(b, "ms") / median(a, "ms"), **memory(a, b)}), flush=True)


def by_case(lines):
    """Each (kernel, mode, context)'s lines."""
    cases = {}
    for line in lines:
        cases.setdefault((line["kernel"], line["mode"], line["context"]), []).append(line)
    return cases


def compare_generate(attnlab, args):
    flags = given_flags(args, GENERATE_FLAGS) + ["--contexts", ",".join(str(n) for n in args.contexts)]
    kernels = args.kernels.split(",")
    a, b = alternate([attnlab, "bench", "generate", "--kernels", args.kernels] + flags,
                     [PYTHON, os.path.join(HERE, "torch_generate.py")] + flags, args)
    params = {line["params"] for line in a if line["kernel"] == "softmax"} | {line["params"] for line in b}
    if len(params) > 1:
        fail(f"the two sides built different models (parameter counts {sorted(params)}) for {' '.join(flags)}")
    ours, theirs = by_case(a), by_case(b)
    shortest = min(args.contexts)
    for kernel in kernels:
        for n in args.contexts:
            cached, recomputed = median(ours[(kernel, "cached", n)], "ms_per_token"), median(ours[(kernel, "recomputed", n)], "ms_per_token")
            line = {"case": "generate", "kernel": kernel, "context": n, "threads": args.threads,
                    "attnlab_cached_ms": cached, "attnlab_recomputed_ms": recomputed, "cache_speedup": recomputed / cached,
                    "flatness": cached / median(ours[(kernel, "cached", shortest)], "ms_per_token"),
                    "decodes_from_state": ours[(kernel, "cached", n)][0]["decodes_from_state"]}
            if kernel == "softmax":
                kv_cache, recompute = median(theirs[("softmax", "kv_cache", n)], "ms_per_token"), median(theirs[("softmax", "recompute", n)], "ms_per_token")
                line.update({"pytorch_kv_cache_ms": kv_cache, "pytorch_recompute_ms": recompute,
                             "kv_cache_speed_ratio": kv_cache / cached, "recompute_speed_ratio": recompute / recomputed})
            print(json.dumps(line), flush=True)


def main():
    args = parse_args()
    attnlab = attnlab_binary()
    check_torch()
    if args.case == "gpt":
        compare_gpt(attnlab, args)
    elif args.case == "table":
        compare_table(attnlab, args)
    elif args.case == "attention":
        compare_attention(attnlab, args)
    else:
        compare_generate(attnlab, args)


if __name__ == "__main__":
    main()
