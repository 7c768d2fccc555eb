#!/usr/bin/env bash
# End-to-end runs of `attnlab train` on tiny configs: every task with a model kind that trains it,
# every model kind, a bad config (exit 2, no run folder), and a resolved config that runs again.
# Usage: train_cli.sh ATTNLAB_BINARY SOURCE_DIR WORK_DIR
set -uo pipefail
attnlab=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
config="$source/configs/reverse.yaml"
tiny=(train.steps=6 train.batch_size=4 train.eval_interval=3 train.eval_batches=1 log.interval=3
      train.schedule.kind=constant train.schedule.warmup_steps=0 model.d_model=16 model.n_layers=1 model.n_heads=2)
failures=0
check() {  # name, then the command
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then echo "ok: $name"; else echo "FAILED: $name"; cat "$work/$name.log"; failures=$((failures + 1)); fi
}
for case in "copy token_tagger" "reverse token_tagger" "sort causal_lm" "mqar causal_lm" "induction causal_lm" "majority sequence_classifier"; do
  set -- $case
  check "train_$1_$2" "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name="$1-$2" task.name="$1" model.kind="$2"
  for f in config.yaml metrics.jsonl metrics.csv; do
    [ -s "$work/runs/$1-$2/$f" ] || { echo "FAILED: $1-$2 has no $f"; failures=$((failures + 1)); }
  done
  grep -q '"split": "eval"' "$work/runs/$1-$2/metrics.jsonl" || { echo "FAILED: $1-$2 logged no evaluation"; failures=$((failures + 1)); }
  grep -q '"split": "patterns", "heads": \[{"layer": 0' "$work/runs/$1-$2/metrics.jsonl" && ls "$work/runs/$1-$2/patterns/"step_6_probe_0.npy "$work/runs/$1-$2/patterns/"step_6_probe_0.png > /dev/null \
    || { echo "FAILED: $1-$2 captured no patterns"; failures=$((failures + 1)); }
done
printf 'to be or not to be, that is the question\n%.0s' {1..40} > "$work/text.txt"
# nanoGPT's model details (tied embeddings, no biases, decayed embeddings) and a final evaluation over the
# whole validation split; sampling below rebuilds the same tied model.
check train_char_text "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=text task.name=char_text \
  task.path="$work/text.txt" task.block_size=16 model.kind=causal_lm model.tie_embeddings=true model.bias=false \
  "train.optimizer.decay_kinds=[weight, embedding]" train.final_eval_batches=0
grep -q "final evaluation (the whole held-out split, 163 scored tokens)" "$work/train_char_text.log" \
  && grep -q '"split": "final"' "$work/runs/text/metrics.jsonl" || { echo "FAILED: no whole-split final evaluation"; failures=$((failures + 1)); }
check eval_text "$attnlab" eval "$work/runs/text" --checkpoint last
grep -q '"scored_tokens": 163}' "$work/eval_text.log" || { echo "FAILED: eval did not cover the whole split"; cat "$work/eval_text.log"; failures=$((failures + 1)); }
final_loss=$(grep '"split": "final"' "$work/runs/text/metrics.jsonl" | grep -o '"loss": [^,]*')
[ -n "$final_loss" ] && grep -q "$final_loss," "$work/eval_text.log" \
  || { echo "FAILED: attnlab eval ($(grep -o '"loss": [^,]*' "$work/eval_text.log")) differs from the final evaluation ($final_loss)"; failures=$((failures + 1)); }
check eval_run "$attnlab" eval "$work/runs/sort-causal_lm"
grep -q '"token_accuracy"' "$work/eval_run.log" || { echo "FAILED: eval printed no metrics"; failures=$((failures + 1)); }
check sample_text "$attnlab" sample "$work/runs/text" --prompt "to be" --tokens 20 --seed 3
[ "$(head -c 5 "$work/sample_text.log")" = "to be" ] || { echo "FAILED: sample did not continue the prompt"; failures=$((failures + 1)); }
check sample_ids "$attnlab" sample "$work/runs/induction-causal_lm" --prompt "2 3 4" --tokens 5 --temperature 0
if "$attnlab" sample "$work/runs/copy-token_tagger" > "$work/sample_tagger.log" 2>&1; then
  echo "FAILED: sampling a token tagger should fail"; failures=$((failures + 1))
else
  grep -q "needs a causal_lm run" "$work/sample_tagger.log" && echo "ok: sampling a tagger is refused" || { cat "$work/sample_tagger.log"; failures=$((failures + 1)); }
fi
check export_weights "$attnlab" export "$work/runs/reverse-token_tagger" "$work/weights"
[ -s "$work/weights/index.json" ] && ls "$work/weights"/*.npy > /dev/null || { echo "FAILED: no weights folder"; failures=$((failures + 1)); }
check train_from_weights "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=warm task.name=reverse \
  model.kind=token_tagger model.init_from="$work/weights"
check train_vit_quadrants "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=vit task.name=quadrants \
  task.image_size=8 model.kind=vit model.patch_size=4
check train_vit_fashion_mnist "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=fmnist \
  task.name=fashion_mnist model.kind=vit model.patch_size=7
check train_from_resolved_config "$attnlab" train "$work/runs/sort-causal_lm/config.yaml" log.dir="$work/again"

# A bad config: exit status 2, a positioned message, and nothing written.
"$attnlab" train "$config" log.dir="$work/bad" model.n_heads=3 > "$work/bad.log" 2>&1
status=$?
if [ $status -eq 2 ] && grep -q "must divide" "$work/bad.log" && [ ! -e "$work/bad" ]; then
  echo "ok: bad config exits 2 and writes nothing"
else
  echo "FAILED: bad config (status $status)"; cat "$work/bad.log"; failures=$((failures + 1))
fi
"$attnlab" train "$config" log.dir="$work/bad" task.name=char_text task.path="$work/missing.txt" model.kind=causal_lm > "$work/missing.log" 2>&1
status=$?
if [ $status -ne 0 ] && grep -q "get_data.sh" "$work/missing.log" && [ ! -e "$work/bad" ]; then
  echo "ok: a missing text file says how to get it and writes nothing"
else
  echo "FAILED: missing text file (status $status)"; cat "$work/missing.log"; failures=$((failures + 1))
fi
# A diverging run stops with the step and the parameter whose gradient went bad, keeping no bad checkpoint.
"$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=diverge train.optimizer.name=sgd train.optimizer.lr=1e30 \
  train.grad_clip=0 > "$work/diverge.log" 2>&1
if [ $? -ne 0 ] && grep -q "training stopped at step .* gradient of .* is not finite" "$work/diverge.log" && [ ! -e "$work/runs/diverge/last.ckpt" ]; then
  echo "ok: a diverging run stops and names the parameter"
else
  echo "FAILED: diverging run"; cat "$work/diverge.log"; failures=$((failures + 1))
fi

# Ctrl-C: the current step finishes, last.ckpt is written, the resume command is printed; resuming finishes.
"$attnlab" train "$config" log.dir="$work/runs" name=interrupted train.steps=100000 model.d_model=16 model.n_heads=2 \
  > "$work/interrupted.log" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q "step 50/" "$work/interrupted.log" 2>/dev/null && break; sleep 0.1; done
kill -INT $pid
wait $pid
status=$?
if [ $status -eq 130 ] && [ -s "$work/runs/interrupted/last.ckpt" ] && grep -q "attnlab train --resume" "$work/interrupted.log"; then
  echo "ok: Ctrl-C writes a checkpoint and says how to resume"
  stopped=$(sed -n 's/.*interrupted after step \([0-9]*\).*/\1/p' "$work/interrupted.log")
  check resume_after_interrupt "$attnlab" train --resume "$work/runs/interrupted" train.steps=$((stopped + 20))
  grep -q "resuming interrupted" "$work/resume_after_interrupt.log" || { echo "FAILED: resume did not resume"; failures=$((failures + 1)); }
else
  echo "FAILED: Ctrl-C (status $status)"; cat "$work/interrupted.log"; failures=$((failures + 1))
fi
echo "$failures failures"
[ $failures -eq 0 ]
