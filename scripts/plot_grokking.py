#!/usr/bin/python3
"""Grokking in three panels, from a modular run folder that `attnlab analyze --only fourier` has read:

  1. training and held-out accuracy against step (log scale), from metrics.jsonl (train.eval_train's
     rows and the evaluations);
  2. the token embedding's Fourier spectrum over Z_p (analysis/summary.json: fourier_embedding), the key
     frequencies marked;
  3. Nanda et al.'s progress measures against step (fourier_progress): training and held-out loss,
     restricted loss and excluded loss (log scale), with the step the held-out accuracy passes 99%.

Needs only Debian's python3-matplotlib and python3-numpy:

  /usr/bin/python3 scripts/plot_grokking.py runs/grokking                   # runs/grokking/plots/grokking.png
  /usr/bin/python3 scripts/plot_grokking.py runs/grokking --out docs/images/grokking.png
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_rows(run):
    rows = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") in ("eval", "eval_train"):
                rows.append(row)
    return rows


def table(summary, name):
    for t in summary["tables"]:
        if t["name"] == name:
            return t
    sys.exit(f"{name} is not in analysis/summary.json: run `attnlab analyze RUN --only fourier` first")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run")
    parser.add_argument("--out", help="the figure's file (default RUN/plots/grokking.png)")
    args = parser.parse_args()
    rows = read_rows(args.run)
    with open(os.path.join(args.run, "analysis", "summary.json")) as f:
        summary = json.load(f)
    spectrum, progress = table(summary, "fourier_embedding"), table(summary, "fourier_progress")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    held = [(r["step"], r["token_accuracy"]) for r in rows if r["split"] == "eval"]
    train = [(r["step"], r["token_accuracy"]) for r in rows if r["split"] == "eval_train"]
    ax = axes[0]
    ax.plot(*zip(*train), label="training pairs", color="tab:blue")
    ax.plot(*zip(*held), label="held-out pairs", color="tab:red")
    ax.set(xscale="log", xlabel="step", ylabel="accuracy", title="Accuracy: memorised, then generalised")
    grokked = next((s for s, a in held if a >= 0.99), None)
    if grokked:
        ax.axvline(grokked, color="grey", linestyle=":", label=f"held-out >= 99% at step {grokked}")
    ax.legend(loc="upper left")

    ax = axes[1]
    shares = spectrum["values"]
    keys = [k for k in range(1, len(shares)) if shares[k] > 2 * (1 - shares[0]) / (len(shares) - 1)]
    ax.bar(range(len(shares)), shares, color=["tab:orange" if k in keys else "tab:grey" for k in range(len(shares))])
    ax.set(xlabel="frequency k of Z_p", ylabel="share of the embedding's squared norm",
           title="Embedding spectrum: key frequencies " + ", ".join(map(str, keys)))

    ax = axes[2]
    steps = [int(s) for s in progress["rows"]]
    cols = progress["cols"]
    values = progress["values"]
    for name, colour, style in [("train_loss", "tab:blue", "-"), ("held_out_loss", "tab:red", "-"),
                                ("restricted_loss", "tab:green", "--"), ("excluded_loss", "tab:purple", "--")]:
        c = cols.index(name)
        ax.plot(steps, [values[i * len(cols) + c] for i in range(len(steps))], style, color=colour, label=name.replace("_", " "))
    if grokked:
        ax.axvline(grokked, color="grey", linestyle=":")
    ax.set(yscale="log", xlabel="step", ylabel="loss", title="Progress measures (Nanda et al. 2023)")
    ax.legend(loc="lower left")
    fig.tight_layout()
    out = args.out or os.path.join(args.run, "plots", "grokking.png")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
