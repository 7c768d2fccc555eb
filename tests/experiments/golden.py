#!/usr/bin/env python3
"""The golden run: the default experiment's first training losses, pinned for this build's arithmetic.

A refactor that changes the numbers fails here. With the same BLAS kernels and compiler as the pinned run
(its OpenBLAS core, CPU vendor and compiler are recorded in the file: oneDNN picks its kernels by what
the CPU reports, and GCC and clang round apart) every loss must match to the last bit, and on the pinned
run's CPU model and cache sizes the parameters after the last step too (a SHA-256 of their exported
arrays): a loss is a float32 mean over many tokens, and a change of an ulp here and there (GELU's exp,
2026-12-07) left all 60 losses as they were while the weights had moved. (Not on another model or caches
with the same kernels: the libraries size their blocks by the caches, and the losses alone are what was
pinned for those.) With other kernels (another CPU) or another compiler, the losses to 1e-6 relative
(other kernels round products differently: 7e-8 over these steps, measured; a clang 14 build, 6.7e-8).
When arithmetic changes on purpose, regenerate the file and say why in the commit:

    python3 tests/experiments/golden.py build/attnlab configs/default.yaml tests/experiments/golden/default.txt --write

Usage: golden.py ATTNLAB CONFIG GOLDEN_FILE [--write]
"""
import hashlib
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
    summary = json.load(open(os.path.join(run_dir, "summary.json")))  # the kernels, vendor and compiler the run recorded
    build = f"{summary['openblas_core']} {summary['cpu_vendor']} {summary.get('compiler', 'unknown')}"
    return build, losses, parameters_digest(attnlab, run_dir, folder)


def cpu_model():
    """The CPU's model name and cache sizes as Linux reports them (empty elsewhere)."""
    name = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
        base = "/sys/devices/system/cpu/cpu0/cache"
        sizes = []
        for index in sorted(f for f in os.listdir(base) if f.startswith("index")):
            read = lambda key: open(os.path.join(base, index, key)).read().strip()
            if read("type") != "Instruction":
                sizes.append(f"L{read('level')} {read('size')}")
        return f"{name} ({', '.join(sizes)})" if sizes else name
    except OSError:
        return name


def parameters_digest(attnlab, run_dir, folder):
    """SHA-256 over the last checkpoint's parameters as `attnlab export` writes them (each array's .npy,
    by name; not index.json, which names the run)."""
    out = os.path.join(folder, "export")
    subprocess.run([attnlab, "export", run_dir, out, "--checkpoint", "last"], check=True, stdout=subprocess.DEVNULL)
    digest = hashlib.sha256()
    for name in sorted(f for f in os.listdir(out) if f.endswith(".npy")):
        digest.update(name.encode() + b"\0")
        with open(os.path.join(out, name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def main():
    attnlab, config, golden = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as folder:
        core, losses, digest = run(attnlab, config, folder)
    if "--write" in sys.argv:
        with open(golden, "w") as out:
            out.write(f"# {os.path.basename(config)} with {' '.join(OVERRIDES)} --threads 1\n")
            out.write(f"# kernels {core}\n")
            out.write(f"# parameters {digest} on {cpu_model()}\n")
            for step, loss in sorted(losses.items()):
                out.write(f"{step} {loss!r}\n")
        print(f"wrote {golden}: {len(losses)} losses, kernels {core}")
        return 0
    pinned_core, pinned_digest, pinned_model, pinned = None, None, None, {}
    for line in open(golden):
        if line.startswith("# kernels "):
            pinned_core = line[len("# kernels "):].strip()
        elif line.startswith("# parameters "):
            pinned_digest, _, pinned_model = line[len("# parameters "):].strip().partition(" on ")
        elif line.strip() and not line.startswith("#"):
            step, loss = line.split()
            pinned[int(step)] = float(loss)
    exact = core == pinned_core
    if sorted(losses) != sorted(pinned):
        print(f"FAILED: logged steps {sorted(losses)[:3]}... differ from the pinned {sorted(pinned)[:3]}...")
        return 1
    worst = max(abs(losses[s] - pinned[s]) / abs(pinned[s]) for s in pinned)
    wrong = [s for s in sorted(pinned) if (losses[s] != pinned[s] if exact else abs(losses[s] - pinned[s]) > 1e-6 * abs(pinned[s]))]
    how = "bit for bit (same BLAS kernels and compiler)" if exact else f"to 1e-6 (BLAS kernels and compiler {core}, pinned with {pinned_core})"
    if wrong:
        s = wrong[0]
        print(f"FAILED: {len(wrong)} of {len(pinned)} losses differ from the pinned run {how}; first at step {s}: "
              f"{losses[s]!r} against {pinned[s]!r} (largest relative difference {worst:.2e}). If the arithmetic changed on "
              f"purpose, regenerate {golden} (see golden.py) and say why in the commit.")
        return 1
    same_model = exact and pinned_digest is not None and cpu_model() == pinned_model
    if same_model and digest != pinned_digest:
        print(f"FAILED: every loss equals the pinned run's bit for bit, but the parameters after step {max(pinned)} do not "
              f"(SHA-256 of their exported arrays {digest[:16]}... against the pinned {str(pinned_digest)[:16]}...): the "
              f"arithmetic changed below the losses' rounding. If on purpose, regenerate {golden} (see golden.py) and say "
              f"why in the commit.")
        return 1
    weights = ", and the parameters after the last step," if same_model else ""
    print(f"ok: {len(pinned)} losses{weights} equal the pinned run {how}; largest relative difference {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
