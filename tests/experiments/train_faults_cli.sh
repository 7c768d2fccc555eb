#!/usr/bin/env bash
# End-to-end runs of `attnlab train` meeting faults halfway: a stop during an evaluation (and a resume
# that ends bit for bit as a run never stopped), a run that diverges (and what eval and analyze then say),
# Ctrl-C, SIGTERM and SIGUSR1 (a checkpoint, then resume), a stop with nobody reading the output, kill -9
# (resume logs every step once), a second writer of a run that trains (refused), an emptied and an edited
# config.yaml.
# Usage: train_faults_cli.sh ATTNLAB_BINARY SOURCE_DIR WORK_DIR
source "$(dirname "$0")/cli_common.sh"  # ATTNLAB_BINARY SOURCE_DIR WORK_DIR: $attnlab, $source, a fresh $work; $config, $tiny

# SIGTERM as the evaluation after step 3 begins (ATTNLAB_TEST_STOP_AT: at that exact point) ends it
# unlogged and stops the run after step 3 with its checkpoint, as during a step (an evaluation used to run
# to its end, however many batches it had). The checkpoint owes that evaluation: the resume runs it first
# (and the patterns and checkpoints due after it), so the run ends bit for bit as one never stopped.
in_eval=(train.eval_train=true train.checkpoint_interval=3 train.keep_checkpoints=true log.pattern_interval=3 log.dir="$work/runs")
"$attnlab" train "$config" "${tiny[@]}" "${in_eval[@]}" name=never-stopped > "$work/never_stopped.log" 2>&1 || fail "never-stopped"
ATTNLAB_TEST_STOP_AT=eval:3 "$attnlab" train "$config" "${tiny[@]}" "${in_eval[@]}" name=stop-in-eval > "$work/stop_in_eval.log" 2>&1
status=$?
{ [ $status = 143 ] && grep -q "stopped by SIGTERM after step 3; checkpoint written" "$work/stop_in_eval.log" \
    && ! grep -q '"split":"eval' "$work/runs/stop-in-eval/metrics.jsonl"; } \
  || { fail "SIGTERM during an evaluation (status $status)"; cat "$work/stop_in_eval.log"; }
check resume_after_eval_stop "$attnlab" train --resume "$work/runs/stop-in-eval"
for which in best last; do
  for run in never-stopped stop-in-eval; do "$attnlab" export "$work/runs/$run" "$work/export-$run-$which" --checkpoint "$which" > /dev/null; done
  for f in "$work/export-never-stopped-$which"/*.npy; do
    cmp -s "$f" "$work/export-stop-in-eval-$which/$(basename "$f")" || fail "$which.ckpt's $(basename "$f") differs after a stop in an evaluation"
  done
done
python3 - "$work/runs/never-stopped" "$work/runs/stop-in-eval" <<'PY' || fail "a run stopped in an evaluation and resumed logs other than one never stopped"
import json, os, sys
def rows(run):  # every row, less what the clock gives
    return [{k: v for k, v in json.loads(line).items() if k not in ("elapsed_s", "tokens_per_s")} for line in open(run + "/metrics.jsonl")]
a, b = (rows(r) for r in sys.argv[1:])
assert a == b, (a, b)
assert sum(r["split"] == "eval" and r["step"] == 3 for r in b) == 1 and any(r["split"] == "eval_train" and r["step"] == 3 for r in b)
assert sorted(os.listdir(sys.argv[1] + "/patterns")) == sorted(os.listdir(sys.argv[2] + "/patterns"))
PY

# The last step's evaluations are not cut short (a run at its last step is not resumed): a signal then
# lets them finish the run, which exits 0 and says the signal came.
ATTNLAB_TEST_STOP_AT=eval:6 "$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=stop-in-last-eval > "$work/stop_in_last_eval.log" 2>&1
status=$?
{ [ $status = 0 ] && grep -q "SIGTERM came during the last step, whose evaluations finish the run; it has finished" "$work/stop_in_last_eval.log" \
    && grep -q '"status": "finished"' "$work/runs/stop-in-last-eval/summary.json"; } \
  || { fail "SIGTERM during the last step's evaluation (status $status)"; cat "$work/stop_in_last_eval.log"; }

# A diverging run stops with the step and the parameter whose gradient went bad; last.ckpt holds the
# state before it, its metrics parse as JSON, and eval falls back to last.ckpt, saying so.
"$attnlab" train "$config" "${tiny[@]}" log.dir="$work/runs" name=diverge train.optimizer.name=sgd train.optimizer.lr=1e30 \
  train.grad_clip=0 > "$work/diverge.log" 2>&1
status=$?
if [ $status -eq 1 ] && grep -q "training stopped at step .* gradient of .* is not finite; last.ckpt holds step" "$work/diverge.log" \
   && [ -s "$work/runs/diverge/last.ckpt" ] && grep -q '"status": "diverged"' "$work/runs/diverge/summary.json" \
   && parses_as_json "$work/runs/diverge/metrics.jsonl"; then
  echo "ok: a diverging run stops, names the parameter and keeps the state before it"
else
  fail "diverging run (status $status)"; cat "$work/diverge.log"
fi
check eval_diverged "$attnlab" eval "$work/runs/diverge"
grep -q "has no best.ckpt .* using last.ckpt" "$work/eval_diverged.log" || fail "eval of a diverged run does not say which checkpoint"
# Its weights give NaN (the step before the bad one already overflowed): eval says so, analyze refuses
# (every table would be NaN) and leaves no analysis behind.
grep -q '"loss":null' "$work/eval_diverged.log" && grep -q "warning: the held-out loss of .*diverge (last.ckpt, step .) is not finite" "$work/eval_diverged.log" \
  || fail "eval of a diverged run does not warn of its loss"
"$attnlab" analyze "$work/runs/diverge" > "$work/analyze_diverged.log" 2>&1
[ $? = 2 ] && grep -q "diverge/last.ckpt (step .) gives a held-out loss of NaN: its weights give no usable outputs to analyse" "$work/analyze_diverged.log" \
  && [ ! -e "$work/runs/diverge/analysis" ] || { fail "analyze of a diverged run"; cat "$work/analyze_diverged.log"; }

# A stop signal (Ctrl-C, or SIGTERM from a scheduler): the current step finishes, last.ckpt is written,
# the resume command is printed, the exit status is 128 + the signal; resuming finishes.
stop_and_resume() {  # signal, expected exit status
  local signal=$1 expected=$2 name="stopped-$1"
  "$attnlab" train "$config" log.dir="$work/runs" name="$name" train.steps=100000 log.interval=10 model.d_model=16 model.n_heads=2 \
    > "$work/$name.log" 2>&1 &
  local pid=$!
  wait_for "step 50/" "$work/$name.log"
  kill -"$signal" $pid
  wait $pid
  local status=$?
  if [ $status -eq "$expected" ] && [ -s "$work/runs/$name/last.ckpt" ] && grep -q "stopped by SIG$signal after step .*attnlab train --resume" "$work/$name.log"; then
    echo "ok: SIG$signal writes a checkpoint and says how to resume"
    local stopped
    stopped=$(sed -n 's/.*stopped by SIG[A-Z0-9]* after step \([0-9]*\).*/\1/p' "$work/$name.log")
    check "resume_after_$signal" "$attnlab" train --resume "$work/runs/$name" train.steps=$((stopped + 20))
    grep -q "resuming $name" "$work/resume_after_$signal.log" || fail "resume after SIG$signal did not resume"
  else
    fail "SIG$signal (status $status)"; cat "$work/$name.log"
  fi
}
stop_and_resume INT 130
stop_and_resume TERM 143
stop_and_resume USR1 138  # what mpirun passes on to the ranks at once (docs/distributed.md)

# Output never holds the stop back: with a stdout nobody reads (a pipe filled to its capacity: the event
# waited for, not a time), SIGTERM still ends the run with its checkpoint and status 143. (Before, the
# run sat blocked in write(2) for ever.)
python3 - "$attnlab" "$config" "$work/runs" <<'PY' || fail "a run whose output is stalled does not stop on SIGTERM"
import fcntl, os, signal, struct, subprocess, sys, termios, time
attnlab, config, runs = sys.argv[1:]
read_end, write_end = os.pipe()
capacity = fcntl.fcntl(write_end, 1032)  # F_GETPIPE_SZ
run = subprocess.Popen([attnlab, "train", config, f"log.dir={runs}", "name=stalled", "train.steps=100000000", "log.interval=1",
                        "model.d_model=16", "model.n_heads=2", "--threads", "1"], stdout=write_end, stderr=write_end)
os.close(write_end)
def queued():
    return struct.unpack("i", fcntl.ioctl(read_end, termios.FIONREAD, b"\0\0\0\0"))[0]
deadline = time.monotonic() + 600  # a bound for a run that never fills it, not a wait
while queued() < capacity - 8192 and run.poll() is None and time.monotonic() < deadline:  # progress lines fill the pipe
    time.sleep(0.05)  # (whole lines: each page of the pipe may keep a few bytes free)
if run.poll() is not None or queued() < capacity - 8192:
    run.kill()
    raise SystemExit(f"the run ended or never filled the pipe ({queued()} of {capacity} bytes)")
run.send_signal(signal.SIGTERM)
try:
    status = run.wait(timeout=300)
except subprocess.TimeoutExpired:
    run.kill()
    raise
assert status == 143, f"status {status}"
assert os.path.getsize(f"{runs}/stalled/last.ckpt") > 0, "no checkpoint"
print("ok: a run whose stdout nobody reads stops on SIGTERM with its checkpoint")
PY

# kill -9 after a checkpoint: resuming drops the rows logged after it, so every step is logged once, and
# removes what a write left half done. The run goes on between the line waited for and the kill (on a
# quick machine past step 300, a checkpoint), so the resumed run's length comes from the last row logged
# (each row is flushed as it is written, and a checkpoint only after its step's row): always beyond the
# last checkpoint, however far the run got.
"$attnlab" train "$config" log.dir="$work/runs" name=killed train.steps=100000 train.checkpoint_interval=100 \
  train.eval_interval=100 log.interval=10 model.d_model=16 model.n_heads=2 > "$work/killed.log" 2>&1 &
pid=$!
wait_for "step 150/" "$work/killed.log"
kill -9 $pid
wait $pid 2> /dev/null
echo half > "$work/runs/killed/last.ckpt.tmp"
last_logged=$(grep -o '"step":[0-9]*' "$work/runs/killed/metrics.jsonl" | tail -1 | cut -d: -f2)
killed_steps=$((last_logged + 100))
check resume_after_kill "$attnlab" train --resume "$work/runs/killed" train.steps=$killed_steps
[ -e "$work/runs/killed/last.ckpt.tmp" ] && fail "resume left last.ckpt.tmp behind"
duplicates=$(grep -o '"step":[0-9]*,"split":"[a-z]*"' "$work/runs/killed/metrics.jsonl" | sort | uniq -d)
[ -z "$duplicates" ] || fail "steps logged twice after a kill -9: $duplicates"

# A run folder has one writer: while a run trains, a second `attnlab train --resume` of it is refused,
# naming the process that holds it, and the run goes on alone. (It used to train the same run a second
# time, into the same files.)
"$attnlab" train "$config" log.dir="$work/runs" name=held train.steps=100000000 train.checkpoint_interval=20 log.interval=10 \
  model.d_model=16 model.n_heads=2 > "$work/held.log" 2>&1 &
holder=$!
wait_for "step 50/" "$work/held.log"
"$attnlab" train --resume "$work/runs/held" train.steps=200000000 > "$work/second.log" 2>&1 &
second=$!
wait_for "is in use by\|resuming held" "$work/second.log"  # whichever comes first: refused, or training
grep -q "resuming held" "$work/second.log" && { fail "a second writer trains the held run"; kill -9 $second; }
wait $second
status=$?
[ $status = 2 ] && grep -q "^attnlab: $work/runs/held is in use by attnlab train (pid $holder), so attnlab train cannot write it; wait for it to end or stop it (kill $holder)" "$work/second.log" \
  || { fail "a second writer of a training run (status $status)"; cat "$work/second.log"; }
# analyze writes into the folder too: refused while the run trains.
"$attnlab" analyze "$work/runs/held" --examples 8 > "$work/analyze_held.log" 2>&1
[ $? = 2 ] && grep -q "is in use by attnlab train (pid $holder), so attnlab analyze cannot write it" "$work/analyze_held.log" \
  || { fail "analyze of a training run"; cat "$work/analyze_held.log"; }
kill -TERM $holder
wait $holder
[ $? = 143 ] && grep -q "stopped by SIGTERM after step" "$work/held.log" || fail "the held run did not go on alone to its stop"

# A kill while config.yaml was being rewritten left it empty: the run still resumes, from the checkpoint's copy.
: > "$work/runs/killed/config.yaml"
check resume_with_empty_config "$attnlab" train --resume "$work/runs/killed" train.steps=$((killed_steps + 10))
grep -q "config.yaml is empty; using the config stored in last.ckpt" "$work/resume_with_empty_config.log" \
  && grep -q "steps: $((killed_steps + 10))$" "$work/runs/killed/config.yaml" || fail "an emptied config.yaml was not restored"
# An edited config.yaml that builds another model is refused, naming both files.
sed -i 's/n_heads: 2/n_heads: 4/' "$work/runs/killed/config.yaml"
"$attnlab" eval "$work/runs/killed" > "$work/edited.log" 2>&1 && fail "eval accepted an edited n_heads"
grep -q "model.n_heads: 4 here, 2 in the checkpoint" "$work/edited.log" || { fail "the edited config's error"; cat "$work/edited.log"; }

echo "$failures failures"
[ $failures -eq 0 ]
