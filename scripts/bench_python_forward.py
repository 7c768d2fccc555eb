#!/usr/bin/python3
"""The forward of the reference GPT (4 layers, width 128, 4 heads, 12 x 64 tokens, vocabulary 65) from Python
(attnlab.Model's model(ids)) beside the same forward in C++ (`attnlab bench gpt --forward`), interleaved, one
thread, on the OpenBLAS kernels the command line uses: what the binding costs.

Usage: scripts/bench_python_forward.py [REPEATS] [STEPS]   (after scripts/setup.sh; from the repository's root)
Prints one JSON line per measurement and the ratio of the means.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    if "OPENBLAS_CORETYPE" not in os.environ or "OPENBLAS_NUM_THREADS" not in os.environ:  # as the command line runs
        core = subprocess.run([sys.executable, "-W", "ignore", "-c", "import attnlab; print(attnlab.command_line_blas_core())"],
                              check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "build", "python")}).stdout.strip()
        os.environ.update(OPENBLAS_CORETYPE=core, OPENBLAS_NUM_THREADS="1")
        os.execv(sys.executable, [sys.executable, *sys.argv])
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import numpy as np
    import attnlab
    attnlab.set_threads(1)
    # copy's causal layout with 63 symbols and length 32: vocabulary 65, 64 positions, as the bench's model
    model = attnlab.Model.from_config({"task": {"name": "copy", "length": 32, "symbols": 63},
                                       "model": {"kind": "causal_lm", "d_model": 128, "n_heads": 4, "n_layers": 4}})
    ids = np.random.default_rng(1).integers(0, 65, (12, 64))
    times = {"attnlab": [], "python": []}
    for _ in range(repeats):
        line = json.loads(subprocess.run([os.path.join(ROOT, "build", "attnlab"), "bench", "gpt", "--forward", "--steps", str(steps),
                                          "--threads", "1"], check=True, capture_output=True, text=True).stdout)
        times["attnlab"].append(line["forward_ms"])
        print(json.dumps(line))
        for _ in range(5):
            model(ids)
        start = time.perf_counter()
        for _ in range(steps):
            model(ids)
        times["python"].append((time.perf_counter() - start) * 1e3 / steps)
        print(json.dumps({"impl": "python", "mode": "forward", "threads": 1, "forward_ms": times["python"][-1],
                          "openblas_core": attnlab.blas_core()}))
    mean = {k: sum(v) / len(v) for k, v in times.items()}
    print(json.dumps({"python_over_cpp": mean["python"] / mean["attnlab"], **{k + "_ms": v for k, v in mean.items()}}))


if __name__ == "__main__":
    main()
