#!/usr/bin/python3
"""Plot attnlab run folders with matplotlib, for restyling the figures `attnlab train` writes.

Reads a run folder (metrics.csv, metrics.jsonl, patterns/*.npy, analysis/summary.json) and writes these figures:

  curves.<fmt>        train and eval loss against step, and eval accuracy (solid: token accuracy,
                      dotted: exact match) against step; one colour per run
  attention_<run>_step_<N>_probe_<P>.<fmt>
                      every captured attention pattern of one probe at one step: layers as rows,
                      heads as columns, one shared colour scale (an encoder-decoder run: one figure per
                      attention part, attention_..._probe_<P>_<encoder|decoder|cross>.<fmt>)
  masking_<run>_step_<N>_probe_<P>.<fmt>
                      an encoder-decoder run only: its three attention patterns side by side for one
                      layer and head (--layer, --head): the encoder's bidirectional self-attention, the
                      decoder's causal self-attention and its cross-attention, padding masked in each
  head_metrics.<fmt>  each per-head pattern metric (entropy, mean distance, ...) against capture step,
                      one line per head (head_metrics_<run>.<fmt> per run when given several runs)
  analysis_<run>.<fmt>
                      when the run has been analysed (`attnlab analyze`, analysis/summary.json): its
                      layer x head tables side by side (ablation, patching, attribution, detectors),
                      each value written in its cell

Several run folders can be given at once, for example the runs/<variant>/seed_<s> folders of a
comparison: their curves are overlaid and labelled by the shortest trailing part of their paths that
tells them apart (softmax/seed_0, linear/seed_0, ...).

Needs only Debian's python3-matplotlib and python3-numpy:

  /usr/bin/python3 scripts/plot_run.py runs/induction                  # figures in runs/induction/plots
  /usr/bin/python3 scripts/plot_run.py runs/induction --step 250 --probe 2 --format svg
  /usr/bin/python3 scripts/plot_run.py runs/cmp/runs/*/seed_* --out cmp-plots --format pdf

Exits with status 1 and a message naming the file for a missing run folder, a missing metrics.csv,
or a --step/--probe that was not captured (the message lists what was).
"""

import argparse
import csv
import json
import os
import re
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402  (must follow matplotlib.use)
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

MAX_LABELLED_TOKENS = 40  # longer probes get plain position ticks instead of token ids
PATTERN_FILE = re.compile(r"^step_(\d+)_probe_(\d+)(?:_(encoder|decoder|cross))?\.npy$")
PARTS = ["", "encoder", "decoder", "cross"]  # "" is a single-stack model's only part
PART_TITLES = {"encoder": "encoder self-attention (bidirectional)", "decoder": "decoder self-attention (causal)",
               "cross": "cross-attention (target down, source across)"}
LINE_STYLES = ["-", "--", ":", "-."]


class PlotError(Exception):
    """A problem with the input that the user can fix; printed without a traceback."""


# ---------------------------------------------------------------------------------------------------
# Reading a run folder


def check_run(run):
    if not os.path.isdir(run):
        raise PlotError(f"{run}: no such run folder")
    if not os.path.isfile(os.path.join(run, "metrics.csv")):
        raise PlotError(f"{os.path.join(run, 'metrics.csv')}: not found (is {run} an attnlab run folder?)")


def to_number(text):
    """A csv cell as a float; None for an empty cell or text that is not a number (split, ...)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_metrics_csv(run):
    """The rows of metrics.csv as dicts keyed by the header, so extra columns do no harm."""
    path = os.path.join(run, "metrics.csv")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "step" not in reader.fieldnames or "split" not in reader.fieldnames:
            raise PlotError(f"{path}: expected a header with 'step' and 'split' columns")
        rows = []
        for row in reader:
            parsed = {name: to_number(value) for name, value in row.items() if name is not None}
            parsed["split"] = row["split"]
            rows.append(parsed)
    return rows


def series(rows, split, column):
    """(steps, values) of one column over the rows of one split, skipping empty cells."""
    steps, values = [], []
    for row in rows:
        if row["split"] == split and row.get(column) is not None and row.get("step") is not None:
            steps.append(row["step"])
            values.append(row[column])
    return steps, values


def read_pattern_rows(run):
    """The "patterns" rows of metrics.jsonl: [(step, [head dict, ...]), ...] in file order."""
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a run still being written can leave a partial last line
            if row.get("split") == "patterns" and row.get("heads"):
                rows.append((row["step"], row["heads"]))
    return rows


def captured_patterns(run):
    """{step: [probe, ...]} for every patterns/step_N_probe_P[_part].npy in the run."""
    folder = os.path.join(run, "patterns")
    captured = {}
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            match = PATTERN_FILE.match(name)
            if match:
                captured.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return {step: sorted(probes) for step, probes in captured.items()}


def pattern_parts(run, step, probe):
    """The attention parts captured for a probe at a step: [""] for a single stack, else encoder, decoder, cross."""
    folder = os.path.join(run, "patterns")
    return [part for part in PARTS
            if os.path.isfile(os.path.join(folder, f"step_{step}_probe_{probe}{'_' + part if part else ''}.npy"))]


def probe_labels(run, probe, target=False):
    """A probe's axis labels (its tokens as the task writes them: symbols, words, "pad"), or its token ids,
    or None when the task has neither (images)."""
    side = "target_" if target else ""
    path = os.path.join(run, "patterns", f"probe_{probe}_{side}labels.txt")
    if os.path.isfile(path):
        with open(path) as f:
            return [line.rstrip("\n") for line in f]
    path = os.path.join(run, "patterns", f"probe_{probe}_{side}tokens.npy")
    if not os.path.isfile(path):
        return None
    return [str(t) for t in np.load(path).ravel()]


def load_pattern(run, step, probe, part):
    suffix = f"_{part}" if part else ""
    path = os.path.join(run, "patterns", f"step_{step}_probe_{probe}{suffix}.npy")
    patterns = np.load(path)  # [layers, heads, queries, keys]
    if patterns.ndim != 4:
        raise PlotError(f"{path}: expected [layers, heads, queries, keys], got shape {patterns.shape}")
    return patterns


def axis_labels(run, probe, part):
    """(query labels, key labels) of a part: the decoder's tokens down for decoder and cross, across for decoder."""
    source, target = probe_labels(run, probe), probe_labels(run, probe, target=True)
    queries = target if part in ("decoder", "cross") else source
    keys = target if part == "decoder" else source
    return queries, keys


# ---------------------------------------------------------------------------------------------------
# Naming


def run_labels(runs):
    """Short unique labels: the last path component, or more of the path when those collide.

    runs/cmp/softmax/seed_0 and runs/cmp/linear/seed_0 become softmax/seed_0 and linear/seed_0.
    """
    parts = [os.path.normpath(os.path.abspath(run)).split(os.sep) for run in runs]
    depth = 1
    while True:
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels) or depth >= max(len(p) for p in parts):
            return labels
        depth += 1


def file_safe(label):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)


def save(fig, out_dir, name, fmt):
    path = os.path.join(out_dir, f"{name}.{fmt}")
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    print(path)


# ---------------------------------------------------------------------------------------------------
# Choosing the attention figure


def choose_step(run, captured, step):
    """The requested step, or the latest captured one; a PlotError naming what exists otherwise."""
    folder = os.path.join(run, "patterns")
    if not captured:
        raise PlotError(f"{folder}: no captured patterns (was log.patterns false?)")
    if step is None:
        return max(captured)
    if step not in captured:
        existing = ", ".join(str(s) for s in sorted(captured))
        raise PlotError(f"{folder}: no patterns captured at step {step}; captured steps: {existing}")
    return step


def attention_step(run, step, probe):
    """The step to draw for a run, None when it captured nothing and no step was asked for."""
    captured = captured_patterns(run)
    if not captured and step is None:
        print(f"plot_run.py: {os.path.join(run, 'patterns')}: no captured patterns, no attention figure",
              file=sys.stderr)
        return None
    step = choose_step(run, captured, step)
    if probe not in captured[step]:
        existing = ", ".join(str(p) for p in captured[step])
        raise PlotError(f"{os.path.join(run, 'patterns')}: no probe {probe} at step {step}; captured probes: {existing}")
    return step


# ---------------------------------------------------------------------------------------------------
# Figures


def plot_curves(runs, labels):
    """Loss (train solid, eval dashed) and eval accuracy (token solid, exact match dotted) per run."""
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    all_losses = []
    for i, (rows, label) in enumerate(zip(runs, labels)):
        colour = f"C{i % 10}"
        steps, losses = series(rows, "train", "loss")
        loss_ax.plot(steps, losses, color=colour, label=label)
        all_losses += losses
        steps, losses = series(rows, "eval", "loss")
        loss_ax.plot(steps, losses, color=colour, linestyle="--", marker="o", markersize=3)
        all_losses += losses
        steps, accuracy = series(rows, "eval", "token_accuracy")
        acc_ax.plot(steps, accuracy, color=colour, marker="o", markersize=3, label=label)
        steps, exact = series(rows, "eval", "exact_match")
        acc_ax.plot(steps, exact, color=colour, linestyle=":", marker="x", markersize=3)

    if all_losses and min(all_losses) > 0 and max(all_losses) / min(all_losses) > 10:
        loss_ax.set_yscale("log")  # losses that fall by orders of magnitude, as on the toy tasks
    loss_ax.set_title("loss (solid: train, dashed: eval)")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("cross-entropy")
    acc_ax.set_title("eval accuracy (solid: token, dotted: exact match)")
    acc_ax.set_xlabel("step")
    acc_ax.set_ylabel("accuracy")
    acc_ax.set_ylim(-0.02, 1.02)
    for ax in (loss_ax, acc_ax):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def set_token_ticks(ax, axis, count, tokens):
    """Tokens as tick labels when they fit, else whole-number position ticks."""
    if tokens is None or len(tokens) != count or count > MAX_LABELLED_TOKENS:
        (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))
        return
    ticks = range(count)
    labels = [str(t) for t in tokens]
    if axis == "x":
        ax.set_xticks(ticks, labels, fontsize=5, rotation=90)
    else:
        ax.set_yticks(ticks, labels, fontsize=5)


def plot_attention(run, label, step, probe, part=""):
    patterns = load_pattern(run, step, probe, part)
    layers, heads, queries, keys = patterns.shape
    query_labels, key_labels = axis_labels(run, probe, part)

    labelled = key_labels is not None and max(queries, keys) <= MAX_LABELLED_TOKENS
    cell = max(2.6, 0.12 * max(queries, keys)) if labelled else 2.2  # inches; room for the token ids
    fig, axes = plt.subplots(layers, heads, figsize=(cell * heads + 1.2, cell * layers + 0.6), squeeze=False,
                             layout="constrained")
    vmax = float(patterns.max()) if patterns.size else 1.0
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            image = ax.imshow(patterns[layer, head], cmap="viridis", vmin=0.0, vmax=vmax,
                              interpolation="nearest", aspect="auto" if queries != keys else "equal")
            ax.set_title(f"layer {layer} head {head}", fontsize=9)
            set_token_ticks(ax, "x", keys, key_labels)
            set_token_ticks(ax, "y", queries, query_labels)
            ax.tick_params(labelsize=6)
            if layer == layers - 1:
                ax.set_xlabel("key", fontsize=8)
            if head == 0:
                ax.set_ylabel("query", fontsize=8)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    fig.suptitle(f"{label}: step {step}, probe {probe}" + (f", {PART_TITLES[part]}" if part else ""))
    return fig


def plot_masking(run, label, step, probe, layer, head):
    """An encoder-decoder's three attention patterns of one layer and head, side by side."""
    panels = []
    for part in ("encoder", "decoder", "cross"):
        patterns = load_pattern(run, step, probe, part)
        if layer >= patterns.shape[0] or head >= patterns.shape[1]:
            raise PlotError(f"{run}: --layer {layer} --head {head} is outside the {part} patterns' "
                            f"{patterns.shape[0]} layers and {patterns.shape[1]} heads")
        panels.append((part, patterns[layer, head]))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.6), layout="constrained")
    for ax, (part, pattern) in zip(axes, panels):
        queries, keys = axis_labels(run, probe, part)
        image = ax.imshow(pattern, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        set_token_ticks(ax, "x", pattern.shape[1], keys)
        set_token_ticks(ax, "y", pattern.shape[0], queries)
        ax.tick_params(labelsize=7)
        ax.set_title(PART_TITLES[part], fontsize=10)
        ax.set_xlabel("source key" if part != "decoder" else "target key", fontsize=8)
        ax.set_ylabel("target query" if part != "encoder" else "source query", fontsize=8)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="attention weight")
    fig.suptitle(f"{label}: step {step}, probe {probe}, layer {layer} head {head}")
    return fig


def plot_head_metrics(pattern_rows, label):
    """One panel per metric; colour is the head, line style the layer."""
    metrics = []
    for _, heads in pattern_rows:
        for head in heads:
            metrics += [name for name in head if name not in ("part", "layer", "head") and name not in metrics]
    lines = {}  # (part, layer, head) -> {metric: ([steps], [values])}
    for step, heads in pattern_rows:
        for head in heads:
            per_metric = lines.setdefault((head.get("part", ""), head["layer"], head["head"]), {})
            for name in metrics:
                if head.get(name) is not None:
                    steps, values = per_metric.setdefault(name, ([], []))
                    steps.append(step)
                    values.append(head[name])

    columns = min(3, len(metrics))
    rows = (len(metrics) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.4 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), metrics):
        for (part, layer, head), per_metric in sorted(lines.items()):
            if name in per_metric:
                steps, values = per_metric[name]
                part_index = PARTS.index(part) if part in PARTS else 0
                ax.plot(steps, values, color=f"C{(head + 4 * part_index) % 10}",
                        linestyle=LINE_STYLES[layer % len(LINE_STYLES)], marker="o", markersize=3,
                        label=f"{part + ' ' if part else ''}layer {layer} head {head}")
        ax.set_title(name.replace("_", " "))
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    for ax in axes.ravel()[len(metrics):]:
        ax.set_visible(False)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    fig.suptitle(f"{label}: attention head metrics (mean over probes)")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------------


# The analysis tables drawn side by side when a run has analysis/summary.json (attnlab analyze), in order.
ANALYSIS_TABLES = ["ablation_zero_accuracy", "ablation_mean_accuracy", "patching_heads", "attribution_heads",
                   "detector_induction_head", "detector_previous_token_head"]


def read_analysis(run):
    path = os.path.join(run, "analysis", "summary.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            summary = json.load(f)
        return {t["name"]: t for t in summary["tables"]}
    except (ValueError, KeyError, TypeError) as error:
        raise PlotError(f"{path}: not an analysis summary ({error})")


def plot_analysis(tables, label):
    chosen = [tables[name] for name in ANALYSIS_TABLES if name in tables]
    cols = min(3, len(chosen))
    rows = (len(chosen) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax in axes.flat[len(chosen):]:
        ax.axis("off")
    for ax, t in zip(axes.flat, chosen):
        values = np.array([np.nan if v is None else v for v in t["values"]], dtype=float).reshape(len(t["rows"]), len(t["cols"]))
        top = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
        top = top or 1.0
        image = ax.imshow(values, cmap="RdBu_r" if t["signed"] else "viridis", vmin=-top if t["signed"] else 0, vmax=top)
        for (r, c), v in np.ndenumerate(values):
            if np.isfinite(v):
                shade = image.cmap(image.norm(v))
                dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
                ax.text(c, r, f"{v:.2g}", ha="center", va="center", fontsize=8, color="white" if dark else "black")
        ax.set_xticks(range(len(t["cols"])), t["cols"])
        ax.set_yticks(range(len(t["rows"])), t["rows"])
        ax.set_xlabel(t["col_axis"])
        ax.set_ylabel(t["row_axis"])
        ax.set_title(textwrap.fill(t["title"], 38), fontsize=8)
    fig.suptitle(f"{label}: attnlab analyze", fontsize=10)
    fig.tight_layout()
    return fig


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Plot loss/accuracy curves, attention patterns and head metrics of attnlab runs.",
        epilog="Example: /usr/bin/python3 scripts/plot_run.py runs/induction --format svg")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s) written by `attnlab train`")
    parser.add_argument("--out", help="output folder (default: RUN/plots for one run, ./plots for several)")
    parser.add_argument("--step", type=int, help="capture step of the attention figure (default: the latest)")
    parser.add_argument("--probe", type=int, default=0, help="probe of the attention figure (default: 0)")
    parser.add_argument("--format", default="png", choices=["png", "svg", "pdf"], help="file format (default: png)")
    parser.add_argument("--layer", type=int, help="encoder-decoder masking figure: the layer (default: the last)")
    parser.add_argument("--head", type=int, default=0, help="encoder-decoder masking figure: the head (default: 0)")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    for run in args.runs:
        check_run(run)
    # Check every run's step, probe and metrics.csv before writing anything.
    steps = [attention_step(run, args.step, args.probe) for run in args.runs]
    metrics = [read_metrics_csv(run) for run in args.runs]
    labels = run_labels(args.runs)
    out_dir = args.out or (os.path.join(args.runs[0], "plots") if len(args.runs) == 1 else "plots")
    os.makedirs(out_dir, exist_ok=True)

    save(plot_curves(metrics, labels), out_dir, "curves", args.format)

    for run, label, step in zip(args.runs, labels, steps):
        if step is not None:
            parts = pattern_parts(run, step, args.probe)
            for part in parts:
                name = f"attention_{file_safe(label)}_step_{step}_probe_{args.probe}" + (f"_{part}" if part else "")
                save(plot_attention(run, label, step, args.probe, part), out_dir, name, args.format)
            if "cross" in parts:
                layer = args.layer if args.layer is not None else load_pattern(run, step, args.probe, "cross").shape[0] - 1
                name = f"masking_{file_safe(label)}_step_{step}_probe_{args.probe}"
                save(plot_masking(run, label, step, args.probe, layer, args.head), out_dir, name, args.format)
        tables = read_analysis(run)
        if tables and any(name in tables for name in ANALYSIS_TABLES):
            save(plot_analysis(tables, label), out_dir, f"analysis_{file_safe(label)}", args.format)
        pattern_rows = read_pattern_rows(run)
        if pattern_rows:
            name = "head_metrics" if len(args.runs) == 1 else f"head_metrics_{file_safe(label)}"
            save(plot_head_metrics(pattern_rows, label), out_dir, name, args.format)
        else:
            print(f"plot_run.py: {os.path.join(run, 'metrics.jsonl')}: no \"patterns\" rows, no head metrics figure",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PlotError as error:
        print(f"plot_run.py: error: {error}", file=sys.stderr)
        sys.exit(1)
