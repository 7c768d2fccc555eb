#!/usr/bin/python3
"""Plot a comparison's metric against the attention state size, Zoology's picture, with matplotlib.

Reads COMPARISON/summary.csv (written by `attnlab compare`; with `select:` each row is a variant at its
best learning rate) and draws the final held-out metric (mean over seeds) against the state size (the
numbers the attention layers keep per sequence, log scale), one line per variant through its rows:

  /usr/bin/python3 scripts/plot_compare.py runs/compare_mqar_frontier_quick
  /usr/bin/python3 scripts/plot_compare.py runs/compare_mqar_frontier --panels -   # softmax-T64 -> panel T64

--panels SEP splits each variant name at its last SEP into the line's label and the panel it belongs to
(one panel per sequence length, say). The figure goes to COMPARISON/state_size.<fmt> unless --out says
otherwise. Exits with status 1 and a message naming the file when summary.csv is missing, has no
state_size column, or has no row with both a state size and a value.

Needs only Debian's python3-matplotlib.
"""

import argparse
import csv
import math
import os
import sys


def fail(message):
    print(f"plot_compare.py: {message}", file=sys.stderr)
    sys.exit(1)


def read_rows(folder):
    path = os.path.join(folder, "summary.csv")
    if not os.path.isfile(path):
        fail(f"{path} does not exist (is {folder} a comparison folder that has written its summary?)")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        rows = list(reader)
    if "state_size" not in columns:
        fail(f"{path} has no state_size column (written by attnlab compare since the state size existed)")
    metrics = [c[len("final_"):-len("_mean")] for c in columns if c.startswith("final_") and c.endswith("_mean") and c != "final_eval_loss_mean"]
    if not metrics:
        fail(f"{path} has no final_<metric>_mean column")
    return path, rows, metrics[0]


def number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return math.nan
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("comparison", help="the comparison folder (holds summary.csv)")
    parser.add_argument("--panels", metavar="SEP", help="split variant names at their last SEP into line label and panel")
    parser.add_argument("--out", help="the figure's path (default COMPARISON/state_size.<format>)")
    parser.add_argument("--format", default="png", choices=["png", "svg", "pdf"])
    parser.add_argument("--title", help="the figure's title (default: the comparison folder's name)")
    args = parser.parse_args()

    path, rows, metric = read_rows(args.comparison)
    lines = {}  # (panel, label) -> [(state, value, lr)]
    for row in rows:
        state, value = number(row.get("state_size")), number(row.get(f"final_{metric}_mean"))
        if not (math.isfinite(state) and state > 0 and math.isfinite(value)):
            continue
        name = row["variant"]
        panel, label = "", name
        if args.panels and args.panels in name:
            label, panel = name.rsplit(args.panels, 1)
        lines.setdefault((panel, label), []).append((state, value))
    if not lines:
        fail(f"{path} has no row with both a state size and a final {metric}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # SVG text stays text (editable, searchable)

    panels = sorted({p for p, _ in lines}, key=lambda p: (len(p), p))
    labels = list(dict.fromkeys(label for _, label in lines))  # in the summary's order
    colours = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 1.2, 3.8), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels):
        for label in labels:
            points = sorted(lines.get((panel, label), []))
            if not points:
                continue
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colours[label], label=label)
        ax.set_xscale("log")
        ax.set_xlabel("state size (numbers per sequence)")
        ax.set_title(panel if panel else "")
        ax.grid(True, which="both", alpha=0.3)
        if metric != "loss":
            ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel(f"final held-out {metric.replace('_', ' ')}")
    handles, names = [], []
    for ax in axes[0]:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="center right", frameon=False)
    fig.suptitle(args.title or os.path.basename(os.path.normpath(args.comparison)))
    fig.tight_layout(rect=(0, 0, 1 - 1.1 / fig.get_figwidth(), 1))
    out = args.out or os.path.join(args.comparison, f"state_size.{args.format}")
    fig.savefig(out, dpi=130)
    print(out)


if __name__ == "__main__":
    main()
