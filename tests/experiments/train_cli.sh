#!/usr/bin/env bash
# End-to-end runs of `attnlab train` on tiny configs: every task with a model kind that trains it, every
# model kind, eval / sample / export / analyze / report, bad inputs (exit 2, nothing written), weights
# exported and loaded back for every positional encoding; an encoder-decoder translated and evaluated by
# decoding. Faults halfway (signals, kill -9, divergence, a second writer) are train_faults_cli.sh's.
# Usage: train_cli.sh ATTNLAB_BINARY SOURCE_DIR WORK_DIR
source "$(dirname "$0")/cli_common.sh"  # ATTNLAB_BINARY SOURCE_DIR WORK_DIR: $attnlab, $source, a fresh $work; $config, $tiny

for case in "copy token_tagger" "reverse token_tagger" "sort causal_lm" "mqar causal_lm" "induction causal_lm" "majority sequence_classifier"; do
  set -- $case
  check "train_$1_$2" "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name="$1-$2" task.name="$1" model.kind="$2"
  for f in config.yaml metrics.jsonl metrics.csv summary.json report.html; do
    [ -s "$work/runs/$1-$2/$f" ] || fail "$1-$2 has no $f"
  done
  grep -q '"split":"eval"' "$work/runs/$1-$2/metrics.jsonl" || fail "$1-$2 logged no evaluation"
  grep -q '"split":"patterns","heads":\[{"layer":0' "$work/runs/$1-$2/metrics.jsonl" \
    && ls "$work/runs/$1-$2/patterns/"step_6_probe_0.npy "$work/runs/$1-$2/patterns/"step_6_probe_0.png > /dev/null \
    || fail "$1-$2 captured no patterns"
done
printf 'to be or not to be, that is the question\n%.0s' {1..40} > "$work/text.txt"
# nanoGPT's model details (tied embeddings, no biases, decayed embeddings) and a final evaluation over the
# whole validation split; sampling below rebuilds the same tied model.
check train_char_text "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=text task.name=char_text \
  task.path="$work/text.txt" task.block_size=16 model.kind=causal_lm model.tie_embeddings=true model.bias=false \
  "train.optimizer.decay_kinds=[weight, embedding]" train.final_eval_batches=0
grep -q "final evaluation (the whole held-out split, 163 scored tokens)" "$work/train_char_text.log" \
  && grep -q '"split":"final"' "$work/runs/text/metrics.jsonl" || fail "no whole-split final evaluation"
check eval_text "$attnlab" eval "$work/runs/text" --checkpoint last
# A relative task.path is read from the folder attnlab runs in. The checkpoint keeps a hash of the text it
# trained on, so eval or a resume from another folder, where that path holds other text (the same
# characters), is refused, naming both hashes; from the run's own folder both work.
mkdir -p "$work/here/data" "$work/elsewhere/data"
printf 'to be or not to be, that is the question\n%.0s' {1..40} > "$work/here/data/t.txt"
printf 'question the is that, be to not or be to\n%.0s' {1..40} > "$work/elsewhere/data/t.txt"
relative=("${tiny[@]}" log.dir="$work/runs" task.name=char_text task.path=data/t.txt task.block_size=16 model.kind=causal_lm)
(cd "$work/here" && "$attnlab" train "$config" "${relative[@]}" name=relative > "$work/train_relative.log" 2>&1 \
  && ATTNLAB_TEST_STOP_AT=step:3 "$attnlab" train "$config" "${relative[@]}" name=relative-stopped > "$work/train_relative_stopped.log" 2>&1
  [ $? = 143 ]) || { fail "training on a relative task.path"; cat "$work/train_relative.log" "$work/train_relative_stopped.log"; }
for command in "eval $work/runs/relative" "train --resume $work/runs/relative-stopped"; do
  (cd "$work/elsewhere" && $attnlab $command > "$work/relative_elsewhere.log" 2>&1)
  [ $? = 2 ] && grep -q "was trained on other data than its config reads now (fnv1a64 [0-9a-f]* of 1640 characters, where it read fnv1a64 [0-9a-f]* of 1640 characters).*this one is $work/elsewhere" "$work/relative_elsewhere.log" \
    || { fail "$command from another folder whose data/t.txt holds other text"; cat "$work/relative_elsewhere.log"; }
  (cd "$work/here" && $attnlab $command > "$work/relative_here.log" 2>&1) || { fail "$command from the run's own folder"; cat "$work/relative_here.log"; }
done
# The report only reads the run: from another folder, where a SCAN run's relative files are not, it is
# still written (naming model.attention's kernel, as the parts' need the data to tell).
for split in train test; do
  for word in jump walk run look; do echo "IN: $word twice OUT: I_${word^^} I_${word^^}"; echo "IN: $word OUT: I_${word^^}"; done \
    > "$work/here/data/scan_$split.txt"
done
(cd "$work/here" && "$attnlab" train "$source/configs/scan_simple.yaml" "${tiny[@]}" log.dir="$work/runs" name=scan-relative \
  task.path=data/scan_train.txt task.test_path=data/scan_test.txt > "$work/train_scan_relative.log" 2>&1) \
  || { fail "training SCAN from relative paths"; cat "$work/train_scan_relative.log"; }
(cd "$work/elsewhere" && "$attnlab" report "$work/runs/scan-relative" > "$work/report_elsewhere.log" 2>&1) \
  && grep -q "attention: <b>softmax (model.attention)</b>" "$work/runs/scan-relative/report.html" \
  || { fail "report of a run whose relative data is not here"; cat "$work/report_elsewhere.log"; }
# Its checkpoint holds a hash of the pairs read: other pairs at that path elsewhere are refused.
sed 's/twice/thrice/' "$work/here/data/scan_train.txt" > "$work/elsewhere/data/scan_train.txt"
cp "$work/here/data/scan_test.txt" "$work/elsewhere/data/scan_test.txt"
(cd "$work/elsewhere" && "$attnlab" eval "$work/runs/scan-relative" > "$work/eval_scan_elsewhere.log" 2>&1)
[ $? = 2 ] && grep -q "was trained on other data than its config reads now (fnv1a64 [0-9a-f]* of 16 pairs, where it read" "$work/eval_scan_elsewhere.log" \
  || { fail "eval of a SCAN run whose files elsewhere hold other pairs"; cat "$work/eval_scan_elsewhere.log"; }
grep -q '"scored_tokens":163}' "$work/eval_text.log" || { fail "eval did not cover the whole split"; cat "$work/eval_text.log"; }
final_loss=$(json_field "$work/runs/text/metrics.jsonl" final loss)
[ -n "$final_loss" ] && grep -q "\"loss\":$final_loss," "$work/eval_text.log" \
  || fail "attnlab eval ($(cat "$work/eval_text.log")) differs from the final evaluation ($final_loss)"
check eval_run "$attnlab" eval "$work/runs/sort-causal_lm"
grep -q '"token_accuracy"' "$work/eval_run.log" || fail "eval printed no metrics"
check sample_text "$attnlab" sample "$work/runs/text" --prompt "to be" --tokens 20 --seed 3
[ "$(head -c 5 "$work/sample_text.log")" = "to be" ] || fail "sample did not continue the prompt"
"$attnlab" sample "$work/runs/text" --prompt "TO BE" --tokens 5 > "$work/sample_bad_char.log" 2>&1
[ $? = 2 ] && grep -q -- '--prompt "TO BE": the character with byte value 84 at position 0' "$work/sample_bad_char.log" \
  || { fail "a prompt character outside the vocabulary"; cat "$work/sample_bad_char.log"; }
# Streamed: a sample far longer than anyone waits for shows its start at once, and a reader that goes
# away ends it with an error (without the streaming, this waits for a trillion tokens).
"$attnlab" sample "$work/runs/text" --prompt "to be" --tokens 1000000000000 --threads 1 2> "$work/sample_stream.err" \
  | head -c 64 > "$work/sample_stream.log"
status=("${PIPESTATUS[@]}")
[ "${status[0]}" = 2 ] && [ "$(wc -c < "$work/sample_stream.log")" = 64 ] && [ "$(head -c 5 "$work/sample_stream.log")" = "to be" ] \
  && grep -q "sample: the output could not be written (Broken pipe); sampling stopped" "$work/sample_stream.err" \
  || { fail "a streamed sample read by head (status ${status[*]})"; cat "$work/sample_stream.log" "$work/sample_stream.err"; }
mv "$work/text.txt" "$work/text-moved.txt"
check sample_without_the_text "$attnlab" sample "$work/runs/text" --prompt "to be" --tokens 5
mv "$work/text-moved.txt" "$work/text.txt"
# A toy task's tokens by name: the prompt as given, then the continuation, every word a token's name.
check sample_names "$attnlab" sample "$work/runs/induction-causal_lm" --prompt "sep 2 3 4" --tokens 5 --temperature 0
python3 - "$work/sample_names.log" <<'PY' || { fail "sample printed other than the prompt and 5 token names"; cat "$work/sample_names.log"; }
import re, sys
words = open(sys.argv[1]).read().split()
assert words[:4] == ["sep", "2", "3", "4"] and len(words) == 9, words
assert all(re.fullmatch(r"pad|sep|eos|\d+", w) for w in words), words
PY
# Padding is refused in a prompt where the task masks it (sequences of 2 to 4 tokens, padded).
check train_padded "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=padded task.name=sort task.min_length=2 task.length=4 model.kind=causal_lm
"$attnlab" sample "$work/runs/padded" --prompt "2 pad 3" > "$work/sample_padded.log" 2>&1
[ $? = 2 ] && grep -q "\-\-prompt \"2 pad 3\": 'pad' is padding, which a prompt cannot hold" "$work/sample_padded.log" \
  || { fail "a prompt holding PAD"; cat "$work/sample_padded.log"; }
"$attnlab" sample "$work/runs/induction-causal_lm" --prompt "2 700" > "$work/sample_range.log" 2>&1
[ $? = 2 ] && grep -q "'700' is not a token of this task; its tokens are pad, sep, 2, 3" "$work/sample_range.log" \
  || { fail "a prompt token out of range"; cat "$work/sample_range.log"; }
if "$attnlab" sample "$work/runs/copy-token_tagger" > "$work/sample_tagger.log" 2>&1; then
  fail "sampling a token tagger should fail"
else
  grep -q "needs a causal_lm run" "$work/sample_tagger.log" && echo "ok: sampling a tagger is refused" || { cat "$work/sample_tagger.log"; failures=$((failures + 1)); }
fi
check train_vit_quadrants "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=vit task.name=quadrants \
  task.image_size=8 model.kind=vit model.patch_size=4
check train_vit_fashion_mnist "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=fmnist \
  task.name=fashion_mnist model.kind=vit model.patch_size=7
check train_vit_cls "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=vit-cls task.name=quadrants \
  task.image_size=8 model.kind=vit model.patch_size=4 model.pooling=cls
check eval_vit_cls "$attnlab" eval "$work/runs/vit-cls"
check train_from_resolved_config "$attnlab" train "$work/runs/sort-causal_lm/config.yaml" log.dir="$work/again"

# Weights exported and loaded back, with every positional encoding and a kernel with buffers.
for variant in "learned softmax" "sinusoidal softmax" "rotary softmax" "learned performer"; do
  set -- $variant
  check "export_$1_$2" "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name="export-$1-$2" model.positional="$1" \
    model.attention.name="$2"
  check "export_weights_$1_$2" "$attnlab" export "$work/runs/export-$1-$2" "$work/weights-$1-$2"
  "$attnlab" export "$work/runs/export-$1-$2" "$work/weights-$1-$2" > "$work/export_again.log" 2>&1  # not over an earlier export
  [ $? = 2 ] && grep -qF "weights-$1-$2 is not empty (it holds an earlier export); give a new or empty folder for the weights" \
    "$work/export_again.log" || { fail "export over an earlier export"; cat "$work/export_again.log"; }
  check "init_from_$1_$2" "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name="warm-$1-$2" model.positional="$1" \
    model.attention.name="$2" model.init_from="$work/weights-$1-$2"
done

# Bad inputs: exit status 2, a positioned message, and nothing written.
bad() {  # name, expected message fragment, then the arguments of attnlab train
  local name=$1 expected=$2; shift 2
  "$attnlab" train "$@" log.dir="$work/bad" > "$work/$name.log" 2>&1
  local status=$?
  if [ $status -eq 2 ] && grep -q -- "$expected" "$work/$name.log" && [ ! -e "$work/bad" ]; then
    echo "ok: $name exits 2 and writes nothing"
  else
    fail "$name (status $status)"; cat "$work/$name.log"; rm -rf "$work/bad"
  fi
}
: > "$work/empty.yaml"
bad bad_heads "must divide" "$config" model.n_heads=3
bad empty_config "the config is empty" "$work/empty.yaml"
bad dev_null "the config is empty" /dev/null
bad folder_config "is a folder, not a config file" "$work/runs"
bad override_position "command-line override \`model.d_model=abc\`: 'model.d_model' must be an integer" "$config" model.d_model=abc
bad huge_batch "train.batch_size (100000000000) makes this experiment need" "$config" train.batch_size=100000000000
bad escaping_name "it holds '/'" "$config" name=../x
bad missing_text "get_data.sh" "$config" task.name=char_text task.path="$work/missing.txt" model.kind=causal_lm
printf 'abc' > "$work/short.txt"
bad short_text "shorter than block_size + 1" "$config" task.name=char_text task.path="$work/short.txt" model.kind=causal_lm
bad no_held_out "task 'copy': no held-out example found" "$config" task.name=copy task.length=2 task.symbols=2
bad twice "\`train.steps=3\` sets 'train.steps' too; give each key once" "$config" train.steps=3 train.steps=5

# The encoder-decoder: the three parts' patterns, then translate (greedy and beam) and decoded evaluation.
check train_seq2seq "$attnlab" train "$source/configs/reverse_seq2seq.yaml" "${tiny[@]}" log.dir="$work/runs" name=s2s
for part in encoder decoder cross; do
  [ -s "$work/runs/s2s/patterns/step_6_probe_0_$part.npy" ] || fail "the seq2seq run captured no $part patterns"
done
"$attnlab" translate "$work/runs/s2s" --input "3 4 5" --input "6 7" > "$work/translate.log" 2>&1 || fail "translate"
grep -q "^IN: 3 4 5 OUT: " "$work/translate.log" && grep -q "^IN: 6 7 OUT: " "$work/translate.log" \
  || { fail "translate printed no IN/OUT line per input"; cat "$work/translate.log"; }
check translate_beam "$attnlab" translate "$work/runs/s2s" --input "3 4 5" --beam 3
"$attnlab" eval "$work/runs/s2s" --decode > "$work/eval_decode.log" 2>&1
grep -q '"decoding":"greedy","decoded_exact_match":' "$work/eval_decode.log" || { fail "eval --decode"; cat "$work/eval_decode.log"; }
# --show: decoded examples by name; each target is its input reversed (the task), and each output's words
# are token names.
check eval_show "$attnlab" eval "$work/runs/s2s" --decode --show 3
python3 - "$work/eval_show.log" <<'PY' || { fail "eval --show printed no named examples"; cat "$work/eval_show.log"; }
import json, re, sys
line = json.loads(open(sys.argv[1]).read())
assert len(line["examples"]) == 3, line
for e in line["examples"]:
    assert e["target"].split() == e["input"].split()[::-1], e
    assert all(re.fullmatch(r"pad|sep|bos|\d+", w) for w in e["output"].split()), e
PY
"$attnlab" translate "$work/runs/s2s" --input "3 x" > "$work/translate_bad.log" 2>&1
[ $? = 2 ] && grep -q "\-\-input \"3 x\": 'x' is not a token of this task; its tokens are pad, sep, 2" "$work/translate_bad.log" \
  || { fail "a bad translate input"; cat "$work/translate_bad.log"; }
for input in "pad 3 4:'pad' is padding" "3 sep:'sep' is the separator (the decoder's BOS)" "3 eos:'eos' is the end token"; do
  "$attnlab" translate "$work/runs/s2s" --input "${input%%:*}" > "$work/translate_special.log" 2>&1
  [ $? = 2 ] && grep -q "${input#*:}, which a source cannot hold" "$work/translate_special.log" \
    || { fail "translate --input \"${input%%:*}\""; cat "$work/translate_special.log"; }
done
"$attnlab" translate "$work/runs/reverse-token_tagger" --input "3 4" > "$work/translate_kind.log" 2>&1
[ $? = 2 ] && grep -q "attnlab translate decodes with an encoder-decoder" "$work/translate_kind.log" \
  || { fail "translate on a tagger"; cat "$work/translate_kind.log"; }

# attnlab analyze: every part on a causal LM, the encoder-decoder's three attentions, and bad options.
for run in induction-causal_lm s2s majority-sequence_classifier; do
  check "analyze_$run" "$attnlab" analyze "$work/runs/$run" --examples 64 --pairs 8
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["tables"], "no tables"' "$work/runs/$run/analysis/summary.json" \
    || fail "analyze $run wrote no tables"
  grep -q "<h2>Analysis</h2>" "$work/runs/$run/report.html" || fail "the report of $run has no Analysis section"
done
# It says what it will run, then numbers each part as it goes.
log="$work/analyze_induction-causal_lm.log"
parts=$(sed -n 's/^attnlab analyze: .*, 64 held-out examples; \([0-9]*\) parts: .*/\1/p' "$log")
[ -n "$parts" ] && grep -q "^attnlab analyze: \[1/$parts\] ablation \.\.\. [0-9.]* s$" "$log" \
  && grep -q "^attnlab analyze: \[$parts/$parts\] " "$log" || { cat "$log"; fail "analyze does not number its parts"; }
for table in patching_heads patching_residual ablation_zero_accuracy attribution_heads detector_induction_head probes_accuracy emergence_induction; do
  [ -s "$work/runs/induction-causal_lm/analysis/$table.csv" ] && [ -s "$work/runs/induction-causal_lm/analysis/$table.png" ] || fail "analyze wrote no $table"
done
[ -s "$work/runs/s2s/analysis/ablation_cross_zero_accuracy.csv" ] && [ -s "$work/runs/s2s/analysis/patching_cross_heads.csv" ] \
  || fail "the encoder-decoder's cross-attention heads were not ablated and patched"
grep -q -E '^decoder 0,[^,]+,[^,]+,[^,]+$' "$work/runs/s2s/analysis/ablation_layers_zero_loss.csv" \
  || { fail "a decoder layer's attention, MLP and cross-attention ablations are not all in their columns"; cat "$work/runs/s2s/analysis/ablation_layers_zero_loss.csv"; }
# Rollout maps of a ViT with each pooling: a 2 x 2 map over the 8 x 8 images' four patches per probe
# image, scaled to a maximum of 1.
for run in vit vit-cls; do
  check "analyze_$run" "$attnlab" analyze "$work/runs/$run" --only rollout,probes --examples 16
  python3 - "$work/runs/$run/analysis/rollout_maps.npy" <<'PY' || fail "the rollout maps of $run"
import struct, sys
data = open(sys.argv[1], "rb").read()
size_format, start = ("<H", 10) if data[6] == 1 else ("<I", 12)
end = start + struct.unpack(size_format, data[8:start])[0]
header = eval(data[start:end].decode())
assert header["shape"][1:] == (2, 2), header
values = struct.unpack("<%dd" % (len(data[end:]) // 8), data[end:])
for m in range(header["shape"][0]):
    block = values[4 * m:4 * m + 4]
    assert abs(max(block) - 1) < 1e-12 and min(block) >= 0, block
PY
  [ -s "$work/runs/$run/analysis/rollout_probe_0.png" ] || fail "$run has no rollout picture"
done
check analyze_mqar "$attnlab" analyze "$work/runs/mqar-causal_lm" --only probes --examples 64
head -n 1 "$work/runs/mqar-causal_lm/analysis/probes_accuracy.csv" | grep -q ',value_of_key$' || fail "mqar's value-of-key property was not probed"
check analyze_only_probes "$attnlab" analyze "$work/runs/induction-causal_lm" --only probes --examples 30
[ -s "$work/runs/induction-causal_lm/analysis/patching_heads.csv" ] || fail "analyze --only probes lost the other parts"
# Each table says how many examples it is over: exactly --examples (30 is no whole number of the run's
# batches of 4), the kept tables their own run's 64, patching its 8 pairs, the repeated tokens its 64.
python3 - "$work/runs/induction-causal_lm/analysis/summary.json" <<'PY' || fail "the tables do not say how many examples they are over"
import json, sys
summary = json.load(open(sys.argv[1]))
over = {t["name"]: t["examples"] for t in summary["tables"]}
assert summary["facts"]["examples"] == 30, summary["facts"]["examples"]
assert over["probes_accuracy"] == 30 and over["ablation_zero_loss"] == 64, over
assert over["patching_heads"] == 8 and over["repeated_tokens_induction"] == 64, over
PY
"$attnlab" analyze "$work/runs/induction-causal_lm" --only ablation,probs > "$work/analyze_bad.log" 2>&1
[ $? = 2 ] && grep -q "\-\-only: analysis part 'probs' is not among \[ablation, attribution.*did you mean 'probes'" "$work/analyze_bad.log" && [ ! -e "$work/runs/induction-causal_lm/analysis.tmp-"* ] \
  || { fail "a bad --only"; cat "$work/analyze_bad.log"; }
# A model that has learnt nothing (one step): its clean and corrupted runs are not apart, and patching
# says its restored shares mean nothing (they divided by about 0 without a word).
check train_one_step "$attnlab" train "$source/configs/default.yaml" train.steps=1 train.schedule.kind=constant log.dir="$work/runs" name=one-step
check analyze_one_step "$attnlab" analyze "$work/runs/one-step" --only patching --pairs 16
grep -q "patching: warning: the clean run's logit difference is not clearly above the corrupted run's" "$work/runs/one-step/analysis/summary.json" \
  || fail "patching on an untrained model does not warn that its shares mean nothing"
# analyze reads the model as it is: nothing it does first (its check that the outputs are finite) may
# advance the model's state. Performer redraws its features every redraw_interval training forwards; two
# runs that never redrew (6 steps, every 6 or every 10^6) analyse alike.
for every in 6 1000000; do
  check "train_redraw_$every" "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name="redraw-$every" \
    model.attention.name=performer model.attention.options.redraw_interval=$every
  check "analyze_redraw_$every" "$attnlab" analyze "$work/runs/redraw-$every" --only ablation --examples 8
done
python3 - "$work/runs/redraw-6" "$work/runs/redraw-1000000" <<'PY' || fail "analyze advanced the model's state before analysing it"
import json, sys
a, b = (json.load(open(run + "/analysis/summary.json"))["facts"]["ablation.baseline.loss"] for run in sys.argv[1:])
assert a == b, (a, b)
PY
# A part's boolean option is a switch: alone it turns on (before another flag too), =false turns off.
cp -r "$work/runs/induction-causal_lm" "$work/runs/switch" && rm -rf "$work/runs/switch/analysis"
check analyze_switch_on "$attnlab" analyze "$work/runs/switch" --only detectors --exclude-bos --threads 1
cp "$work/runs/switch/analysis/detector_previous_token_head.csv" "$work/switch_on.csv"
check analyze_switch_off "$attnlab" analyze "$work/runs/switch" --only detectors --exclude-bos=false --threads 1
cmp -s "$work/switch_on.csv" "$work/runs/switch/analysis/detector_previous_token_head.csv" && fail "--exclude-bos changed nothing"
"$attnlab" analyze "$work/runs/switch" --only detectors --exclude-bos=maybe > "$work/analyze_switch_bad.log" 2>&1
[ $? = 2 ] && grep -q "'exclude_bos' must be true or false, got 'maybe'" "$work/analyze_switch_bad.log" || fail "--exclude-bos=maybe"
"$attnlab" analyze "$work/runs/switch" --only detectors --exclude-bos true > "$work/analyze_switch_space.log" 2>&1
[ $? = 2 ] && grep -q -- "\`--exclude-bos true\`: --exclude-bos is a switch, which takes no separate value; give it alone to turn it on, or write --exclude-bos=true" \
  "$work/analyze_switch_space.log" || { cat "$work/analyze_switch_space.log"; fail "--exclude-bos true (a switch given a value)"; }
"$attnlab" eval --decode true "$work/runs/switch" > "$work/eval_switch_space.log" 2>&1  # before the positional: taken as the run
[ $? = 2 ] && grep -q -- "\`--decode true\`: --decode is a switch" "$work/eval_switch_space.log" || { cat "$work/eval_switch_space.log"; fail "--decode true RUN"; }
# A kernel whose patterns are signed mixing weights gets no detector scores, and a note says why (found in
# review: previous-token scores of -8.5).
check train_signed "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=signed-detectors task.name=induction model.kind=causal_lm model.attention.name=gated_delta
check analyze_signed "$attnlab" analyze "$work/runs/signed-detectors" --only detectors,emergence --examples 16
grep -q "detectors: the model's patterns are signed, unnormalised mixing weights" "$work/analyze_signed.log" \
  && grep -q "the repeated-tokens test: the model's patterns are signed" "$work/analyze_signed.log" \
  && grep -q "emergence: the model's patterns are signed" "$work/analyze_signed.log" && [ ! -e "$work/runs/signed-detectors/analysis/emergence_detectors.csv" ] \
  && [ ! -e "$work/runs/signed-detectors/analysis/detector_previous_token_head.csv" ] || { fail "detectors on signed patterns"; cat "$work/analyze_signed.log"; }
# A classifier's CLS token is position 0 of its patterns, labelled cls, and probes and detectors pair each
# later position with its own token (found in review: everything was one position off, the last dropped).
check train_cls "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=cls task.name=majority model.kind=sequence_classifier \
  model.pooling=cls model.positional=rotary
check analyze_cls "$attnlab" analyze "$work/runs/cls" --only probes --examples 64
/usr/bin/python3 - "$work/runs/cls" <<'PY' || fail "the CLS token's place in patterns and probes"
import glob, sys
import numpy as np
run = sys.argv[1]
labels = open(run + "/patterns/probe_0_labels.txt").read().split()
tokens = np.load(run + "/patterns/probe_0_tokens.npy")
pattern = np.load(sorted(glob.glob(run + "/patterns/step_*_probe_0.npy"))[-1])
assert labels[0] == "cls" and len(labels) == tokens.shape[1] + 1 == pattern.shape[-1], (labels, tokens.shape, pattern.shape)
assert np.allclose(pattern.sum(-1), 1, atol=1e-5)
embed = next(l for l in open(run + "/analysis/probes_accuracy.csv") if l.startswith("embed,")).split(",")
assert float(embed[2]) == 1.0, embed  # rotary: the embedded stream is the token's own vector
PY
# An analysis names the checkpoint and step it read. After a resume the report says it is out of date,
# and --only refuses to put new parts beside parts of the earlier model.
cp -r "$work/runs/induction-causal_lm" "$work/runs/stale" && rm -rf "$work/runs/stale/analysis"
check analyze_stale "$attnlab" analyze "$work/runs/stale" --checkpoint last --examples 16 --pairs 4
grep -q "held-out examples of last.ckpt at step 6 (" "$work/runs/stale/report.html" && ! grep -q 'class="stale"' "$work/runs/stale/report.html" \
  || fail "the report does not say which checkpoint was analysed"
check resume_stale "$attnlab" train --resume "$work/runs/stale" train.steps=9
grep -q "This analysis is out of date: last.ckpt now holds step 9, not step 6" "$work/runs/stale/report.html" \
  || fail "the report of a run resumed after its analysis does not say the analysis is out of date"
"$attnlab" analyze "$work/runs/stale" --only probes --checkpoint last > "$work/analyze_stale_only.log" 2>&1
[ $? = 2 ] && grep -q -- "--only: .*stale/analysis is of last.ckpt at step 6, and this analysis would be of last.ckpt at step 9" "$work/analyze_stale_only.log" \
  || { fail "analyze --only beside an analysis of another step"; cat "$work/analyze_stale_only.log"; }
# best.ckpt that did not improve on the resume still holds the model analysed, but the run's patterns and
# metrics went further (emergence read them): that too is out of date. (Its copy from before the resume is
# put back, as a resume without a better evaluation would leave it.)
cp -r "$work/runs/induction-causal_lm" "$work/runs/stale-best" && rm -rf "$work/runs/stale-best/analysis"
check analyze_stale_best "$attnlab" analyze "$work/runs/stale-best" --examples 16 --pairs 4
cp "$work/runs/stale-best/best.ckpt" "$work/best-before.ckpt"
check resume_stale_best "$attnlab" train --resume "$work/runs/stale-best" train.steps=9
cp "$work/best-before.ckpt" "$work/runs/stale-best/best.ckpt" && check report_stale_best "$attnlab" report "$work/runs/stale-best"
grep -q "This analysis is out of date: the run has trained on since (last.ckpt holds step 9)" "$work/runs/stale-best/report.html" \
  || fail "the report of a run trained on after its analysis (best.ckpt unchanged) does not say the analysis is out of date"
"$attnlab" analyze "$work/runs/stale-best" --only probes > "$work/analyze_stale_best_only.log" 2>&1
[ $? = 2 ] && grep -q -- "analysis was made when the run had trained to step 6, and it has trained to step 9 since" "$work/analyze_stale_best_only.log" \
  || { fail "analyze --only beside an analysis of an earlier history"; cat "$work/analyze_stale_best_only.log"; }

# Numbers on the command line are read as config values are: base-10 integers, finite numbers, inside
# their range, each error naming the option, what it takes and what came (exit 2, as any bad input).
bad_number() {  # expected message, then the command
  local message=$1; shift
  "$attnlab" "$@" > "$work/bad_number.log" 2>&1
  local status=$?
  [ $status = 2 ] && grep -qF -- "$message" "$work/bad_number.log" || { fail "$* (status $status)"; cat "$work/bad_number.log"; }
}
bad_number "--threads must be an integer in [0, 256], got 2.5" eval "$work/runs/s2s" --threads 2.5
bad_number "'trian' is not a command; give one of train, eval," trian "$config"
bad_number "--max-length must be an integer >= 0, got -1" translate "$work/runs/s2s" --input "3 4" --max-length -1
bad_number "--max-length 500 exceeds the" translate "$work/runs/s2s" --input "3 4" --max-length 500
bad_number "--length-penalty must be a finite number >= 0, got nan" translate "$work/runs/s2s" --input "3 4" --beam 2 --length-penalty nan
bad_number "--length-penalty ranks the outputs of beam search, and greedy decoding (--beam 1) has none" translate "$work/runs/s2s" --input "3 4" --length-penalty 2
bad_number "--length-penalty ranks the outputs of beam search" eval "$work/runs/s2s" --length-penalty 2
# The report's best-evaluation row has every column, exact match included (it was left blank).
grep -q 'each column at its own step)</td><td>[0-9.]*</td><td>[0-9.]*%</td><td>[0-9.]*%</td>' "$work/runs/s2s/report.html" \
  || fail "the report's best evaluation row lacks a column"
# Any decoding option asks eval to decode (it was ignored without --decode).
check eval_max_length "$attnlab" eval "$work/runs/s2s" --max-length 2
grep -q '"decoding":"greedy","decoded_exact_match"' "$work/eval_max_length.log" || fail "eval --max-length did not decode"
bad_number "--temperature must be a finite number >= 0, got nan" sample "$work/runs/induction-causal_lm" --temperature nan
bad_number "--temperature must be a finite number >= 0, got inf" sample "$work/runs/induction-causal_lm" --temperature inf
# pad is content where the task does not mask it (induction's sequences hold it), and an empty prompt's
# start token is shown (found in review: the first was refused, the second fed a token it did not show).
check sample_pad "$attnlab" sample "$work/runs/induction-causal_lm" --prompt "pad pad sep" --tokens 2
grep -q "^pad pad sep [^ ]* [^ ]*$" "$work/sample_pad.log" || { fail "a prompt with induction's pad"; cat "$work/sample_pad.log"; }
check sample_empty "$attnlab" sample "$work/runs/induction-causal_lm" --tokens 2
grep -q "^sep [^ ]* [^ ]*$" "$work/sample_empty.log" || { fail "an empty prompt's start token is not shown"; cat "$work/sample_empty.log"; }
bad_number "--tokens must be an integer >= 0, got -1" sample "$work/runs/induction-causal_lm" --tokens -1
bad_number "--examples must be an integer in [1, 100000], got abc" analyze "$work/runs/induction-causal_lm" --examples abc
bad_number "options of the detectors part were given, but --only ablation leaves it out" analyze "$work/runs/induction-causal_lm" \
  --only ablation --error-measure abs
bad_number "--threshold nan: 'threshold' must be a number, got 'nan'" analyze "$work/runs/induction-causal_lm" --threshold nan
bad_number "the source is empty" translate "$work/runs/s2s" --input "   "
bad_number "'0' is not a token of this task; its tokens are pad, sep, 2" translate "$work/runs/s2s" --input "0 1 3"
# A part that has nothing to say about a run is refused under --only, naming what it needs (it wrote no
# table and exited 0), and skipped with a note otherwise.
bad_number "--only rollout: rollout needs image inputs" analyze "$work/runs/induction-causal_lm" --only rollout
grep -q "rollout: skipped: it needs image inputs" "$work/runs/induction-causal_lm/analysis/summary.json" || fail "analyze does not say it skipped rollout"

# A stop signal during analyze (raised before its detectors part: an exact point, not a timed kill): exit
# 143, the earlier analysis/ exactly as it was, no temporary left.
before=$(cat "$work/runs/induction-causal_lm/analysis/summary.json")
ATTNLAB_TEST_STOP_AT=part:detectors "$attnlab" analyze "$work/runs/induction-causal_lm" --examples 32 --pairs 8 > "$work/analyze_stopped.log" 2>&1
status=$?
{ [ $status = 143 ] && grep -q "attnlab analyze: stopped by SIGTERM before detectors; .* is as it was" "$work/analyze_stopped.log" \
    && [ "$(cat "$work/runs/induction-causal_lm/analysis/summary.json")" = "$before" ] \
    && ! ls -d "$work/runs/induction-causal_lm/analysis.tmp-"* > /dev/null 2>&1; } \
  || { fail "a stopped analyze (status $status)"; cat "$work/analyze_stopped.log"; }

# What killed writers left (a temporary whose process is gone, an analysis folder cut between the two
# renames of an older version) is cleared by the next command that opens the run; a live writer's stays.
(exit 0) & dead=$!; wait $dead
run=$work/runs/induction-causal_lm
mv "$run/analysis" "$run/analysis.old"
mkdir "$run/analysis.tmp-$dead"
echo half > "$run/last.ckpt.tmp-$dead"
echo half > "$run/patterns/x.npy.tmp-$dead"
echo live > "$run/report.html.tmp-$$"
check eval_cleans "$attnlab" eval "$run"
{ [ -s "$run/analysis/summary.json" ] && [ ! -e "$run/analysis.old" ] && [ ! -e "$run/analysis.tmp-$dead" ] && [ ! -e "$run/last.ckpt.tmp-$dead" ] \
    && [ ! -e "$run/patterns/x.npy.tmp-$dead" ] && [ -e "$run/report.html.tmp-$$" ]; } || { fail "stale temporaries were not cleared"; ls -a "$run"; }
rm -f "$run/report.html.tmp-$$"

# Damaged JSON is said in words, naming the file and line: a last metrics line cut short by a kill is
# read without (a warning); a damaged line elsewhere, or a damaged analysis summary, is an error or a note.
cp -r "$run" "$work/runs/damaged"
printf '{"step": 31, "split": "train", "loss": 3.4' >> "$work/runs/damaged/metrics.jsonl"
check report_cut_line "$attnlab" report "$work/runs/damaged"
grep -q "metrics.jsonl:[0-9]*: the last line is cut short" "$work/report_cut_line.log" || fail "a cut last metrics line is not reported"
sed -i '2s/.*/{"step": 32, "split": 5}/' "$work/runs/damaged/metrics.jsonl"
"$attnlab" report "$work/runs/damaged" > "$work/report_damaged.log" 2>&1
[ $? = 2 ] && grep -q "metrics.jsonl:2: not a metrics row: a value is a number where a string belongs" "$work/report_damaged.log" && ! grep -q "json.exception" "$work/report_damaged.log" \
  || { fail "a damaged metrics line"; cat "$work/report_damaged.log"; }
cp -r "$run" "$work/runs/damaged-analysis" && echo '{}' > "$work/runs/damaged-analysis/analysis/summary.json"
check report_damaged_analysis "$attnlab" report "$work/runs/damaged-analysis"
grep -q 'is not an analysis summary: no &quot;tables&quot; key; run attnlab analyze' "$work/runs/damaged-analysis/report.html" || fail "the report does not say the analysis is damaged"
# An edited config.yaml the report cannot read is said at its line and column, as eval says it.
cp -r "$run" "$work/runs/damaged-config" && echo 'bogus: [' >> "$work/runs/damaged-config/config.yaml"
"$attnlab" report "$work/runs/damaged-config" > "$work/report_damaged_config.log" 2>&1
[ $? = 2 ] && grep -q "damaged-config/config.yaml:[0-9]*:[0-9]*: " "$work/report_damaged_config.log" \
  || { fail "a damaged config.yaml in the report"; cat "$work/report_damaged_config.log"; }
# analyze on a folder that is not a run says so and leaves nothing in it.
mkdir -p "$work/not-a-run"
"$attnlab" analyze "$work/not-a-run" > "$work/analyze_not_a_run.log" 2>&1
[ $? = 2 ] && grep -q "is not a run folder" "$work/analyze_not_a_run.log" && [ -z "$(ls -A "$work/not-a-run")" ] \
  || { fail "analyze on a folder that is not a run"; cat "$work/analyze_not_a_run.log"; ls -A "$work/not-a-run"; }

# The modular task (grokking's): the shipped config's model on p = 7, its checkpoints kept, then the
# Fourier part: a finite spectrum over the 4 frequencies of Z_7 and a progress row per kept checkpoint.
check train_modular "$attnlab" train "$source/configs/grokking.yaml" log.dir="$work/runs" name=modular task.p=7 train.steps=40 \
  train.batch_size=64 train.eval_interval=20 train.checkpoint_interval=10 model.d_model=16 model.ff_hidden=32 model.n_heads=2
ls "$work/runs/modular/checkpoints/"step_{10,20,30,40}.ckpt > /dev/null || fail "the modular run kept no checkpoints"
grep -q '"split":"eval_train"' "$work/runs/modular/metrics.jsonl" || fail "the modular run logged no training-split evaluation"
check analyze_fourier "$attnlab" analyze "$work/runs/modular" --only fourier
python3 - "$work/runs/modular/analysis/summary.json" <<'PY' || fail "the fourier part's tables"
import json, math, sys
tables = {t["name"]: t for t in json.load(open(sys.argv[1]))["tables"]}
shares = tables["fourier_embedding"]["values"]
assert len(shares) == 4 and all(v is not None and math.isfinite(v) for v in shares) and abs(sum(shares) - 1) < 1e-9, shares
assert tables["fourier_progress"]["rows"] == ["10", "20", "30", "40"], tables["fourier_progress"]["rows"]
PY
# Its losses are the model's, over every output ("=" too), as eval has them (found in review: "=" was left out).
check eval_modular "$attnlab" eval "$work/runs/modular" --checkpoint last
python3 - "$work/runs/modular/analysis/summary.json" "$work/eval_modular.log" <<'PY' || fail "fourier_progress's held-out loss is not eval's"
import json, sys
t = {t["name"]: t for t in json.load(open(sys.argv[1]))["tables"]}["fourier_progress"]
held_out = t["values"][len(t["cols"]) * 3 + t["cols"].index("held_out_loss")]
evaluated = next(json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))["loss"]
assert abs(held_out - evaluated) < 1e-6 * abs(evaluated), (held_out, evaluated)
PY
bad_number "--only fourier: fourier needs the modular task" analyze "$work/runs/induction-causal_lm" --only fourier
# Only the run's own step_N.ckpt count, and another run's copied in is refused, naming it (found in review:
# a stray file stopped the part with "stoul"; another seed's weights were read as this run's).
cp -r "$work/runs/modular" "$work/runs/modular-b" && touch "$work/runs/modular-b/checkpoints/step_final.ckpt"
check analyze_fourier_stray "$attnlab" analyze "$work/runs/modular-b" --only fourier
check train_modular_other "$attnlab" train "$source/configs/grokking.yaml" log.dir="$work/runs" name=modular-other seed=5 task.p=7 train.steps=10 \
  train.batch_size=64 train.eval_interval=10 train.checkpoint_interval=10 model.d_model=16 model.ff_hidden=32 model.n_heads=2
cp "$work/runs/modular-other/checkpoints/step_10.ckpt" "$work/runs/modular-b/checkpoints/step_10.ckpt"
bad_number "does not describe the run that $work/runs/modular-b/checkpoints/step_10.ckpt holds:" analyze "$work/runs/modular-b" --only fourier

# A run without config.yaml: every command uses the checkpoint's config, analyze and report too.
cp -r "$run" "$work/runs/no-config" && rm "$work/runs/no-config/config.yaml"
check analyze_no_config "$attnlab" analyze "$work/runs/no-config" --only detectors --examples 16
check report_no_config "$attnlab" report "$work/runs/no-config"
grep -q "config.yaml is missing; using the config stored in best.ckpt" "$work/analyze_no_config.log" || fail "analyze does not say where the config comes from"

echo "$failures failures"
[ $failures -eq 0 ]
