#!/usr/bin/env bash
# End to end: scripts/plot_compare.py on a tiny sweep made by the real binary (two kernels at two
# sequence lengths and two widths): one panel, then a panel per length with --panels; a non-zero exit
# naming the file for a folder without summary.csv and for a summary.csv without state sizes.
# Usage: test_plot_compare.sh ATTNLAB_BINARY SOURCE_DIR
set -uo pipefail
attnlab=$1 source=$2
if ! /usr/bin/python3 -c "import matplotlib" 2> /dev/null; then
  echo "skipped: python3-matplotlib is needed (scripts/setup.sh installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plot=(/usr/bin/python3 "$source/scripts/plot_compare.py")
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

cp "$source/configs/mqar.yaml" "$work/base.yaml"
cat > "$work/sweep.yaml" <<YAML
name: sweep
base: base.yaml
set: {train.steps: 4, train.batch_size: 4, train.eval_interval: 4, train.eval_batches: 1, log.interval: 4, log.patterns: false,
      train.schedule: {kind: constant, warmup_steps: 0}, model.n_layers: 1, model.n_heads: 2}
variants:
  softmax-T32: {task.sequence_length: 32, task.pairs: 4}
  linear-T32: {task.sequence_length: 32, task.pairs: 4, model.attention.name: linear}
  softmax-T64: {}
  linear-T64: {model.attention.name: linear}
grid: {model.d_model: [8, 16]}
dir: $work/out
YAML
"$attnlab" compare "$work/sweep.yaml" --jobs 2 > "$work/compare.log" 2>&1 || { cat "$work/compare.log"; fail "the sweep did not finish"; }

"${plot[@]}" "$work/out/sweep" > "$work/one.log" 2>&1 || { cat "$work/one.log"; fail "one panel"; }
[ "$(head -c 4 "$work/out/sweep/state_size.png" | tail -c 3)" = "PNG" ] || fail "state_size.png is not a PNG"
"${plot[@]}" "$work/out/sweep" --panels - --format svg --out "$work/panels.svg" > "$work/panels.log" 2>&1 || { cat "$work/panels.log"; fail "panels"; }
grep -q ">T32<" "$work/panels.svg" && grep -q ">T64<" "$work/panels.svg" || fail "the panels are not titled T32 and T64"
grep -q ">gated_delta<" "$work/panels.svg" && fail "a kernel that was not run is in the legend"
grep -q ">linear<" "$work/panels.svg" || fail "the legend lacks linear"

mkdir "$work/empty"
if "${plot[@]}" "$work/empty" > "$work/missing.log" 2>&1; then fail "a folder without summary.csv was plotted"; fi
grep -q "$work/empty/summary.csv does not exist" "$work/missing.log" || { cat "$work/missing.log"; fail "the missing summary is not named"; }
printf 'variant,seeds,final_token_accuracy_mean\nsoftmax,1,0.5\n' > "$work/empty/summary.csv"
if "${plot[@]}" "$work/empty" > "$work/old.log" 2>&1; then fail "a summary without state sizes was plotted"; fi
grep -q "summary.csv has no state_size column" "$work/old.log" || { cat "$work/old.log"; fail "the missing column is not named"; }

echo "$failures failures"
[ "$failures" = 0 ]
