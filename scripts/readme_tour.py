#!/usr/bin/env python3
"""The README's ten-minute tour: its commands, run as a newcomer runs them, and the output blocks they fill.

Every output block of README.md's tour sits between `<!-- tour:NAME -->` and `<!-- /tour -->` and is what
the step NAME below prints. This file is the one place that lists the steps and says which parts of their
output depend on time rather than on the build:

    /usr/bin/python3 scripts/readme_tour.py --update   # run the tour, rewrite the blocks (and the figures)
    /usr/bin/python3 scripts/readme_tour.py --check    # run the tour, fail where a block no longer matches

Both run the steps in a fresh temporary folder whose `configs` is the repository's and whose
`build/attnlab` is the program under test (`--bin`, or $ATTNLAB_BIN; default build/attnlab), with the
Python module from `--pythonpath` (or $ATTNLAB_PYTHONPATH; default build/python). The ctest
docs.readme_tour runs --check.

A run repeats bit for bit for a given build, seed and thread count, so the tour pins --threads and --check
compares losses and accuracies exactly. It ignores only what the clock decides (normalise() below): wall
times, throughput, ETAs, timestamps, the thread tuner's notes, progress lines and the order in which a
comparison's runs start and finish. Another CPU (another OpenBLAS kernel set, another vector width of the
-march=native build) rounds differently and moves every figure; there --check compares the blocks with
every number masked and says so (a changed line, a missing or new output line still fail): run --update on
that machine to pin its figures.
"""
import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PYTHON = "/usr/bin/python3"


@dataclasses.dataclass
class Step:
    name: str
    command: str         # a shell command run in the tour's folder, or Python source when python=True
    python: bool = False
    table_only: bool = False  # write only the output's Markdown table, rendered, without the command

    def label(self):
        return "the Python code" if self.python else f"`{self.command}`"


# What a newcomer opens from Python after the command line's steps (docs/python.md has the rest).
PYTHON_TOUR = '''\
import numpy as np
import attnlab

run = attnlab.Run("runs/induction")  # the run folder: config, metrics, patterns, analysis as Python values
model = run.model()                  # its best checkpoint, run on numpy arrays
batch = model.data.held_out(8, seed=1)
logits, cache = model.run_with_cache(batch["input"], ["blocks.1.attn.hook_pattern"])
pattern = cache["blocks.1.attn.hook_pattern"]  # [8 sequences, 4 heads, T queries, T keys]
name = lambda i: model.data.to_string(batch["input"][0][i:i + 1])  # the token at position i of sequence 0
for query in np.flatnonzero(batch["target"][0] != -100)[:4]:  # the first positions of the repeat
    key = int(pattern[0, 2, query].argmax())
    print(f"head 1.2 at {name(query)!r} (position {query}) looks most at {name(key)!r} (position {key}),"
          f" which came after {name(key - 1)!r}; the model predicts {model.data.to_string(logits[0, query].argmax(keepdims=True))!r}")

# What attnlab analyze found, as numpy: each sender's effect on the answer through 1.2's keys, or values, alone.
for part in "kv":
    t = run.analysis["tables"][f"patching_path_{part}"]
    values = np.reshape(t["values"], (len(t["rows"]), len(t["cols"])))[:, t["cols"].index("1.2")]
    print(f"path patching through 1.2's {part}:", ", ".join(f"{row} {v:+.3f}" for row, v in zip(t["rows"], values)))
'''

STEPS = [
    Step("train", "build/attnlab train configs/default.yaml --threads 1"),
    Step("folder", "ls runs/induction"),
    Step("analyze", "build/attnlab analyze runs/induction --threads 1"),
    Step("compare", "build/attnlab compare configs/compare_induction.yaml --jobs 2 --threads 1"),
    Step("compare_summary", "cat runs/compare_induction/summary.md", table_only=True),
    Step("python", PYTHON_TOUR, python=True),
]

# Figures the README shows, drawn from the tour's run by scripts/plot_run.py on --update.
FIGURES = {"attention_induction_step_1500_probe_0.png": "docs/images/induction_heads.png",
           "analysis_induction.png": "docs/images/analysis_induction.png"}

# --- What the clock decides, not the build -------------------------------------------------------------

# Lines left out of the comparison: whether, how often or in which order they appear depends on timing.
DROPPED_LINES = [
    re.compile(r"attnlab: threads:"),                  # the thread tuner's notes: when a probe changes the mode
    re.compile(r"^\s*(started|finished)\s"),           # a comparison's runs start and end in the machine's order
    re.compile(r"\[\d+/\d+\]"),                        # a progress counter of runs or parts
    re.compile(r"\d%\||\[[#=>.\- ]{5,}\]|[█▏▎▍▌▋▊▉]"),     # a progress bar: tqdm's `45%|███▌ |`, `[====>   ]`
    re.compile(r"(?i)^(?!.*\bstep \d+/\d+\s+loss\b).*\beta\b"),  # an ETA, but for training's step lines
]

# Figures within a line that depend on time: (pattern, replacement).
MASKED_FIGURES = [
    (re.compile(r"\[\d{2}:\d{2}:\d{2}\]"), "[hh:mm:ss]"),                           # timestamps
    (re.compile(r"(?i)\beta\s+\S+"), "eta T"),                                         # ETAs
    (re.compile(r"\b\d+(\.\d+)?k?\s?(tok|tokens)/s\b"), "N tok/s"),                    # throughput
    (re.compile(r"\b(\d+h\s?)?(\d+m(in)?\s?)?\d+(\.\d+)?\s?(ms|s|min|h)\b"), "T"),     # durations
]

# Columns of a Markdown table whose header names a time, a rate or a memory size.
MASKED_COLUMNS = re.compile(r"(?i)time|/s\b|memory|rss")

# On another machine every number is masked: the blocks' shape is all that can be compared.
ANY_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?")


def mask_table_columns(lines):
    """Replaces the cells of a Markdown table's time, rate and memory columns with `..`."""
    masked, columns = [], set()
    for line in lines:
        if not line.startswith("|"):
            columns = set()
            masked.append(line)
            continue
        cells = line.split("|")
        if not columns and not set(line) <= set("|-: "):
            columns = {i for i, cell in enumerate(cells) if MASKED_COLUMNS.search(cell)} or {-1}
        elif not set(line) <= set("|-: "):
            cells = [".." if i in columns else cell for i, cell in enumerate(cells)]
        masked.append("|".join(cells))
    return masked


def normalise(text, numbers=False):
    """The lines of an output block as --check compares them (numbers=True: every number masked too)."""
    lines = []
    for line in text.split("\n"):
        line = line.split("\r")[-1].rstrip()  # a terminal shows what follows the last carriage return
        if any(pattern.search(line) for pattern in DROPPED_LINES):
            continue
        for pattern, replacement in MASKED_FIGURES:
            line = pattern.sub(replacement, line)
        lines.append(ANY_NUMBER.sub("#", line) if numbers else line)
    return mask_table_columns(lines)


# --- Running the tour -----------------------------------------------------------------------------------

def machine(folder):
    """What decides the bits: OpenBLAS's kernel set, the CPU's vector width and its vendor (oneDNN picks its
    kernels by what the CPU reports, so two vendors' AVX-512 may round apart), and the compiler that built
    attnlab (GCC and clang round apart)."""
    with open(os.path.join(folder, "runs", "induction", "summary.json")) as summary:
        run = json.load(summary)  # the kernel set, vendor and compiler, as the run recorded them
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    width = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
    return (f"OpenBLAS {run.get('openblas_core', 'unknown')}, {width}, {run.get('cpu_vendor', 'unknown')}, "
            f"{run.get('compiler', 'an unknown compiler')}")


def run_tour(binary, pythonpath, folder):
    """Runs every step in `folder`; returns {name: output} and the seconds each took."""
    os.symlink(os.path.join(ROOT, "configs"), os.path.join(folder, "configs"))
    os.makedirs(os.path.join(folder, "build"))
    os.symlink(os.path.abspath(binary), os.path.join(folder, "build", "attnlab"))
    env = dict(os.environ, PYTHONPATH=os.path.abspath(pythonpath), OPENBLAS_NUM_THREADS="1")
    outputs, seconds = {}, {}
    for step in STEPS:
        start = time.monotonic()
        if step.python:
            if "OPENBLAS_CORETYPE" not in env:  # the command line's kernels, as docs/python.md says
                env["OPENBLAS_CORETYPE"] = subprocess.run(
                    [PYTHON, "-W", "ignore", "-c", "import attnlab; print(attnlab.command_line_blas_core())"],
                    env=env, check=True, capture_output=True, text=True).stdout.strip()
            with open(os.path.join(folder, "tour.py"), "w") as script:
                script.write(step.command)
            argv = [PYTHON, "tour.py"]
        else:
            argv = ["bash", "-c", step.command]
        print(f"readme_tour: {step.name}: {step.label()}", file=sys.stderr, flush=True)
        done = subprocess.run(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds[step.name] = time.monotonic() - start
        if done.returncode != 0:
            sys.exit(f"readme_tour: step {step.name} failed (exit {done.returncode}):\n{done.stdout}")
        outputs[step.name] = done.stdout.rstrip("\n")
    return outputs, seconds


# Lines the README does not show: `compare` reports the runs under way once a minute in a log, so how
# many there are says how fast the machine was (the tour's text mentions them).
NOT_SHOWN = re.compile(r"^\s*under way: ")


def render(step, output):
    """The text between a step's markers."""
    output = "\n".join(line for line in output.split("\n") if not NOT_SHOWN.search(line))
    if step.table_only:
        return "\n".join(line for line in output.split("\n") if line.startswith("|"))
    if step.python:
        return f"```python\n{step.command.rstrip()}\n```\n\n```\n{output}\n```"
    return f"```console\n$ {step.command}\n{output}\n```"


def blocks(readme):
    """{name: (start, end, first line number)}: the character span between each step's markers."""
    found = {}
    for match in re.finditer(r"<!-- tour:(\w+) -->\n(.*?)<!-- /tour -->", readme, re.S):
        found[match.group(1)] = (match.start(2), match.end(2), readme.count("\n", 0, match.start(2)) + 1)
    return found


MACHINE_NOTE = re.compile(r"<!-- tour: made by scripts/readme_tour\.py on (.*?) -->")


def update(readme, outputs, where):
    found = blocks(readme)
    missing = [step.name for step in STEPS if step.name not in found]
    if missing:
        sys.exit(f"readme_tour: README.md has no block for {', '.join(missing)}: "
                 f"add `<!-- tour:NAME -->` and `<!-- /tour -->` lines where each goes")
    for step in sorted(STEPS, key=lambda s: found[s.name][0], reverse=True):  # from the end: spans stay put
        start, end, _ = found[step.name]
        readme = readme[:start] + render(step, outputs[step.name]) + "\n" + readme[end:]
    note = f"<!-- tour: made by scripts/readme_tour.py on {where} -->"
    if not MACHINE_NOTE.search(readme):
        sys.exit("readme_tour: README.md has no `<!-- tour: made by scripts/readme_tour.py on ... -->` line")
    return MACHINE_NOTE.sub(note, readme)


def first_difference(shown, printed):
    """The index of the first compared line that differs, and the two lines there."""
    for index in range(max(len(shown), len(printed))):
        a = shown[index] if index < len(shown) else "(nothing)"
        b = printed[index] if index < len(printed) else "(nothing)"
        if a != b:
            return index, a, b
    return None


def check(readme, outputs, where):
    """Prints each block that differs and returns 1, else 0 (on another machine than the one that made the
    blocks, with every number masked)."""
    found = blocks(readme)
    made_on = MACHINE_NOTE.search(readme)
    same_machine = made_on is not None and made_on.group(1) == where
    failures, counts = 0, []
    for step in STEPS:
        if step.name not in found:
            print(f"README.md: no block `<!-- tour:{step.name} -->` ... `<!-- /tour -->` for the step "
                  f"{step.label()}")
            failures += 1
            continue
        start, end, line_number = found[step.name]
        raw = readme[start:end].rstrip("\n").split("\n")
        shown = normalise("\n".join(raw), numbers=not same_machine)
        printed = normalise(render(step, outputs[step.name]), numbers=not same_machine)
        counts.append(f"{step.name} {len(shown)} lines ({len(raw) - len(shown)} left out)")
        difference = first_difference(shown, printed)
        if difference is None:
            continue
        failures += 1
        index, a, b = difference
        # The README line of the index-th compared line (lines left out are skipped when counting).
        kept = [i for i, line in enumerate(raw) if normalise(line) != []] + [len(raw)]
        print(f"README.md:{line_number + kept[min(index, len(kept) - 1)]}: block tour:{step.name} "
              f"({step.label()}) differs from what the build prints, at the block's "
              f"compared line {index + 1}:\n  README: {a}\n  build:  {b}")
    if failures:
        print(f"readme_tour: {failures} block(s) differ (times, rates, ETAs and progress lines aside); "
              "if the new output is right, rewrite them: /usr/bin/python3 scripts/readme_tour.py --update")
        return 1
    if not same_machine:
        print(f"readme_tour: the blocks were made on {made_on.group(1) if made_on else 'an unnamed machine'}, "
              f"this is {where}: its figures round differently, so the blocks were compared with every number "
              "masked, and they match; --update here pins this machine's figures.")
        return 0
    print(f"readme_tour: every block of README.md's tour matches what the build prints ({where}); compared: "
          + ", ".join(counts))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true", help="rewrite README.md's tour blocks and figures")
    mode.add_argument("--check", action="store_true", help="fail when a block differs from the output")
    parser.add_argument("--bin", default=os.environ.get("ATTNLAB_BIN", os.path.join(ROOT, "build", "attnlab")),
                        help="the attnlab program (default $ATTNLAB_BIN, else build/attnlab)")
    parser.add_argument("--pythonpath", default=os.environ.get("ATTNLAB_PYTHONPATH", os.path.join(ROOT, "build", "python")),
                        help="the folder holding the attnlab Python module (default $ATTNLAB_PYTHONPATH, else build/python)")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR (new or empty) and keep it, instead of a temporary folder")
    args = parser.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"readme_tour: no attnlab program at {args.bin}; build it (scripts/setup.sh) or pass --bin")

    folder = args.keep or tempfile.mkdtemp(prefix="attnlab-tour-")
    os.makedirs(folder, exist_ok=True)
    try:
        start = time.monotonic()
        outputs, seconds = run_tour(args.bin, args.pythonpath, folder)
        print("readme_tour: " + ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items())
              + f"; the tour took {time.monotonic() - start:.0f} s", file=sys.stderr)
        where = machine(folder)
        readme = open(README).read()
        if args.check:
            return check(readme, outputs, where)
        with open(README + ".tmp", "w") as out:  # then renamed: a stopped update never leaves half a README
            out.write(update(readme, outputs, where))
        os.replace(README + ".tmp", README)
        draw_figures(folder)
        print(f"readme_tour: rewrote README.md's tour blocks ({where})", file=sys.stderr)
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def draw_figures(folder):
    """Redraws the README's figures of the tour's run (needs matplotlib; skipped with a note without it)."""
    plots = os.path.join(folder, "plots")
    done = subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "plot_run.py"), "runs/induction", "--out", plots],
                          cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        print(f"readme_tour: figures not redrawn (scripts/plot_run.py: {done.stderr.strip()})", file=sys.stderr)
        return
    for drawn, shown in FIGURES.items():
        shutil.copyfile(os.path.join(plots, drawn), os.path.join(ROOT, shown))


if __name__ == "__main__":
    sys.exit(main())
