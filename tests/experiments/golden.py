#!/usr/bin/env python3
"""The golden run: the default experiment's first training losses, pinned for this build's arithmetic.

A refactor that changes the numbers fails here. With the same BLAS kernels as the pinned run (its
OpenBLAS core and CPU vendor are recorded in the file: oneDNN picks its kernels by what the CPU reports)
every loss must match to the last bit; with other kernels (another CPU), to 1e-6 relative (other kernels
round products differently: 7e-8 over these steps, measured).
When arithmetic changes on purpose, regenerate the file and say why in the commit:

    python3 tests/experiments/golden.py build/attnlab configs/default.yaml tests/experiments/golden/default.txt --write

Usage: golden.py ATTNLAB CONFIG GOLDEN_FILE [--write]
"""
import json
import os
import subprocess
import sys
import tempfile

# A short run of the config, every step logged; one thread (the pinned losses are one thread's).
OVERRIDES = ["train.steps=60", "train.schedule.warmup_steps=10", "log.interval=1", "train.eval_interval=60", "log.patterns=false"]


def run(attnlab, config, folder):
    subprocess.run([attnlab, "train", config, f"log.dir={folder}", "name=golden", "--threads", "1", *OVERRIDES],
                   check=True, stdout=subprocess.DEVNULL)
    run_dir = os.path.join(folder, "golden")
    losses = {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        row = json.loads(line)
        if row["split"] == "train":
            losses[row["step"]] = row["loss"]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))  # the kernels and vendor the run recorded
    return f"{summary['openblas_core']} {summary['cpu_vendor']}", losses


def main():
    attnlab, config, golden = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as folder:
        core, losses = run(attnlab, config, folder)
    if "--write" in sys.argv:
        with open(golden, "w") as out:
            out.write(f"# {os.path.basename(config)} with {' '.join(OVERRIDES)} --threads 1\n")
            out.write(f"# kernels {core}\n")
            for step, loss in sorted(losses.items()):
                out.write(f"{step} {loss!r}\n")
        print(f"wrote {golden}: {len(losses)} losses, kernels {core}")
        return 0
    pinned_core, pinned = None, {}
    for line in open(golden):
        if line.startswith("# kernels "):
            pinned_core = line[len("# kernels "):].strip()
        elif line.strip() and not line.startswith("#"):
            step, loss = line.split()
            pinned[int(step)] = float(loss)
    exact = core == pinned_core
    if sorted(losses) != sorted(pinned):
        print(f"FAILED: logged steps {sorted(losses)[:3]}... differ from the pinned {sorted(pinned)[:3]}...")
        return 1
    worst = max(abs(losses[s] - pinned[s]) / abs(pinned[s]) for s in pinned)
    wrong = [s for s in sorted(pinned) if (losses[s] != pinned[s] if exact else abs(losses[s] - pinned[s]) > 1e-6 * abs(pinned[s]))]
    how = "bit for bit (same BLAS kernels)" if exact else f"to 1e-6 (BLAS kernels {core}, pinned with {pinned_core})"
    if wrong:
        s = wrong[0]
        print(f"FAILED: {len(wrong)} of {len(pinned)} losses differ from the pinned run {how}; first at step {s}: "
              f"{losses[s]!r} against {pinned[s]!r} (largest relative difference {worst:.2e}). If the arithmetic changed on "
              f"purpose, regenerate {golden} (see golden.py) and say why in the commit.")
        return 1
    print(f"ok: {len(pinned)} losses equal the pinned run {how}; largest relative difference {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
