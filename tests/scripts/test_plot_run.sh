#!/usr/bin/env bash
# End to end: scripts/plot_run.py on tiny runs made by the real binary: the three figures of one run,
# another step/probe as SVG, two runs overlaid, an encoder-decoder's parts and masking figure, and a
# non-zero exit naming the file for a step that was not captured, a missing run folder and a folder
# without metrics.csv.
# Usage: test_plot_run.sh ATTNLAB_BINARY SOURCE_DIR
set -uo pipefail
attnlab=$1 source=$2
if ! /usr/bin/python3 -c "import matplotlib, numpy" 2> /dev/null; then
  echo "skipped: python3-matplotlib and python3-numpy are needed (scripts/setup.sh installs them)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plot=(/usr/bin/python3 "$source/scripts/plot_run.py")
failures=0
source "$(dirname "$0")/checks.sh"  # fail, check, refused
expect_files() {  # folder, then file names that must exist and be non-empty
  local dir=$1; shift
  for f in "$@"; do [ -s "$dir/$f" ] || fail "no $dir/$f"; done
}

# Two tiny runs with patterns captured at steps 20 and 40; task.length=12 keeps probes short enough
# for token-id tick labels.
tiny=(train.steps=40 train.eval_interval=20 log.pattern_interval=20 train.schedule.warmup_steps=0 task.length=12 log.dir="$work/runs")
check train_a "$attnlab" train "$source/configs/default.yaml" "${tiny[@]}" name=a seed=0
check train_b "$attnlab" train "$source/configs/default.yaml" "${tiny[@]}" name=b seed=1

check plot_one "${plot[@]}" "$work/runs/a"
expect_files "$work/runs/a/plots" curves.png attention_a_step_40_probe_0.png head_metrics.png
[ "$(head -c 4 "$work/runs/a/plots/curves.png" | tail -c 3)" = "PNG" ] || fail "curves.png is not a PNG"

check plot_svg "${plot[@]}" "$work/runs/a" --step 20 --probe 1 --format svg --out "$work/svg"
expect_files "$work/svg" curves.svg attention_a_step_20_probe_1.svg head_metrics.svg

check plot_two "${plot[@]}" "$work/runs/a" "$work/runs/b" --out "$work/both"
expect_files "$work/both" curves.png attention_a_step_40_probe_0.png attention_b_step_40_probe_0.png \
  head_metrics_a.png head_metrics_b.png

# An analysed run adds its layer x head tables.
check analyze_a "$attnlab" analyze "$work/runs/a" --examples 32 --pairs 8
check plot_analysed "${plot[@]}" "$work/runs/a" --out "$work/analysed"
expect_files "$work/analysed" analysis_a.png

refused bad_step "captured steps: 20, 40" "${plot[@]}" "$work/runs/a" --step 7 --out "$work/bad"
[ ! -e "$work/bad/curves.png" ] || fail "bad step still wrote figures"
refused bad_probe "captured probes: 0, 1, 2, 3" "${plot[@]}" "$work/runs/a" --probe 9 --out "$work/bad"
refused missing_folder "$work/nothing: no such run folder" "${plot[@]}" "$work/nothing"
mkdir "$work/empty"
refused missing_csv "$work/empty/metrics.csv" "${plot[@]}" "$work/empty"

# An encoder-decoder run: a figure per attention part and the masking figure, its axes in the task's tokens.
check train_s2s "$attnlab" train "$source/configs/reverse_seq2seq.yaml" train.steps=10 train.eval_interval=10 log.interval=5 \
  train.schedule.warmup_steps=0 model.d_model=16 model.n_heads=2 log.dir="$work/runs" name=s2s
check plot_s2s "${plot[@]}" "$work/runs/s2s" --probe 1 --format svg
expect_files "$work/runs/s2s/plots" attention_s2s_step_10_probe_1_encoder.svg attention_s2s_step_10_probe_1_decoder.svg \
  attention_s2s_step_10_probe_1_cross.svg masking_s2s_step_10_probe_1.svg head_metrics.svg
grep -q "<!-- bos -->" "$work/runs/s2s/plots/masking_s2s_step_10_probe_1.svg" || fail "the masking figure's rows are not the decoder's tokens"
refused bad_head "outside the encoder patterns' 2 layers and 2 heads" "${plot[@]}" "$work/runs/s2s" --head 5 --out "$work/bad"

echo "$failures failures"
[ $failures -eq 0 ]
