#!/usr/bin/env bash
# End to end under mpirun with two ranks (mpirun.sh beside this file gives OpenMPI's settings):
#  - data-parallel training follows the single-process run with the same seed and global batch: every
#    step's loss to 1e-5 relative for 20 steps, the evaluations, and the final parameters to 1e-5, on an
#    encoder-decoder (padded batches whose rows score different numbers of tokens) and a causal LM;
#  - a run stopped by a step limit resumes under mpirun and still follows the single-process run; a run
#    stopped by SIGTERM to mpirun writes one checkpoint and resumes, and so does one stopped by SIGUSR1
#    (which mpirun passes on at once); a rank that dies ends the job;
#  - a global batch that does not split evenly (a new run, or a run resumed on 3 processes), a config
#    error and commands that run on one process are refused, an error every rank meets printed once;
#  - a comparison of 2 variants x 2 seeds over two ranks gives the local comparison's summary, and the
#    same command again reruns nothing; a comparison rank killed outright takes its runs with it;
#  - `attnlab bench gpt` reports its allreduce.
# Usage: mpi_cli.sh ATTNLAB_BINARY SOURCE_DIR WORK_DIR MPIRUN
set -uo pipefail
attnlab=$1 source=$2 work=$3 mpirun=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
mpi() { bash "$here/mpirun.sh" "$mpirun" -np 2 "$@"; }
# Waits for a line matching $1 in file $2 (an event; the bound only ends a run that never gets there).
wait_for() {
  for _ in $(seq 6000); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  fail "\"$1\" never appeared in $2"; return 1
}
# Waits for mpirun ($1, a child of this script) to end, at most $2 seconds, after an event that ends the
# job within seconds ($3: a signal sent to it, a rank that died), and sets `status` (137 when killed).
# mpirun still running then is killed after the job's processes are listed with where each waits. With
# ranks left that is this job's hang: a failure, and 1 returned. With none left it is OpenMPI 4.1's own:
# mpirun sometimes stays in a futex wait after every rank has exited (twice in about 18 runs of this
# script under load, 2026-11-28, both after SIGTERM, the ranks' checkpoint and message complete), and the
# checks on what the ranks did go on. Ranks count as left only when they still run after the listing and
# are not zombies (ended, unreaped by the hung mpirun): a full ctest run on 2026-12-07 failed here with two
# ranks counted as left before the listing, neither of them in it, after both had written their checkpoint
# and message.
wait_for_job_end() {
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2> /dev/null; then
    local ranks
    echo "mpirun (pid $1) still runs $2 s after $3; the job's processes:"
    ps -eo pid,ppid,stat,etime,wchan:28,args --forest | grep -E "[m]pirun|[m]piexec|[a]ttnlab|[o]rted"
    ranks=$(ps -o pid=,stat= --ppid "$1" | awk '$2 !~ /^Z/ {print $1}' | xargs)  # after the listing; zombies have ended
    echo "ranks left: ${ranks:-none}"
    kill -9 "$1"
    wait "$1"
    status=$?
    [ -z "$ranks" ] && { echo "(OpenMPI's mpirun hang after its ranks ended, docs/distributed.md: not this job's)"; return 0; }
    fail "the job still runs $2 s after $3"
    return 1
  fi
  wait "$1"
  status=$?
}
# An error said exactly once in log $3 (matching $2), without OpenMPI's ORTE_ERROR_LOG lines; $1 names it.
once() {
  [ "$(grep -c "$2" "$3")" = 1 ] && ! grep -q "ORTE_ERROR_LOG" "$3" || { fail "$1: not said exactly once, or with ORTE_ERROR_LOG lines"; cat "$3"; }
}
check() {  # name, then the command
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then echo "ok: $name"; else fail "$name (status $?)"; cat "$work/$name.log"; fi
}
# Every train and eval row of run $2 against run $1's at the same step, to 1e-5 relative; the final
# parameters (exported from last.ckpt) to 1e-5. Optional $3: compare only steps above it.
same_run() {
  python3 - "$1" "$2" "${3:-0}" <<'PY' || fail "$2 does not follow $1"
import json, sys
def rows(run):
    out = {}
    for line in open(run + "/metrics.jsonl"):
        r = json.loads(line)
        if r["split"] in ("train", "eval") and r["step"] > int(sys.argv[3]):
            out[(r["step"], r["split"])] = r["loss"]
    return out
one, two = rows(sys.argv[1]), rows(sys.argv[2])
assert one and one.keys() == two.keys(), f"different rows: {sorted(one)} and {sorted(two)}"
worst = max(abs(one[k] - two[k]) / abs(one[k]) for k in one)
print(f"{len(one)} losses, largest relative difference {worst:.2e}")
assert worst < 1e-5, worst
PY
  rm -rf "$work/weights-a" "$work/weights-b"  # export writes into new folders only
  "$attnlab" export "$1" "$work/weights-a" --checkpoint last > /dev/null && "$attnlab" export "$2" "$work/weights-b" --checkpoint last > /dev/null \
    || fail "export of $1 or $2"
  python3 - "$work/weights-a" "$work/weights-b" <<'PY' || fail "the parameters of $2 differ from those of $1"
import array, ast, json, struct, sys
def load(path):  # a float32 .npy file's values (without numpy, which the test machine's python3 may lack)
    data = open(path, "rb").read()
    size_format, start = ("<H", 10) if data[6] == 1 else ("<I", 12)
    header_end = start + struct.unpack(size_format, data[8:start])[0]
    assert ast.literal_eval(data[start:header_end].decode())["descr"] == "<f4", path
    return array.array("f", data[header_end:])
tensors = json.load(open(sys.argv[1] + "/index.json"))["tensors"]
worst = 0.0
for t in tensors:
    a, b = load(f"{sys.argv[1]}/{t['file']}"), load(f"{sys.argv[2]}/{t['file']}")
    assert len(a) == len(b) > 0, t["name"]
    worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
print(f"{len(tensors)} tensors, largest difference {worst:.2e}")
assert worst < 1e-5, worst
PY
  rm -rf "$work/weights-a" "$work/weights-b"
}

# 1. Two ranks against one process: 20 steps, every loss logged, an evaluation at 10 and 20 (each rank
# scoring half of every held-out batch), gradient clipping on the summed gradient. No biases: a key's
# bias gets no gradient in exact arithmetic (softmax ignores a shift), so AdamW turns the rounding noise
# of its gradient into steps of up to lr, different in any two runs that round differently.
tiny=(train.steps=20 train.batch_size=8 log.interval=1 train.eval_interval=10 train.eval_batches=2 train.schedule.kind=constant
      train.schedule.warmup_steps=0 train.grad_clip=0.5 model.d_model=16 model.n_layers=1 model.n_heads=2 model.bias=false
      log.patterns=false)
for case in "s2s $source/configs/reverse_seq2seq.yaml" "lm $source/configs/reverse.yaml task.name=mqar model.kind=causal_lm"; do
  set -- $case
  check "one_$1" "$attnlab" train "${@:2}" "${tiny[@]}" log.dir="$work/runs" name="one-$1"
  check "two_$1" mpi "$attnlab" train "${@:2}" "${tiny[@]}" log.dir="$work/runs" name="two-$1"
  grep -q "on 2 processes (data parallel, 4 sequences each)" "$work/two_$1.log" || fail "the 2-process run does not say it is data parallel"
  grep -q "allreduce [0-9.]* ms/step" "$work/two_$1.log" || fail "the 2-process run's log lines give no allreduce time"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))["data_parallel"]; assert d["processes"] == 2 and d["allreduce_bytes"] > 0 and d["allreduce_calls_per_step"] == 1' \
    "$work/runs/two-$1/summary.json" || fail "summary.json of two-$1 lacks its data_parallel figures"
  same_run "$work/runs/one-$1" "$work/runs/two-$1"
done
[ "$(ls "$work/runs" | sort | tr '\n' ' ')" = "one-lm one-s2s two-lm two-s2s " ] || fail "a rank other than 0 wrote a run folder: $(ls "$work/runs")"

# 2. Stopped by a step limit at 10, resumed under mpirun to 20: still the single-process run.
check split_first mpi "$attnlab" train "$source/configs/reverse_seq2seq.yaml" "${tiny[@]/train.steps=20/train.steps=10}" log.dir="$work/runs" name=split
check split_resumed mpi "$attnlab" train --resume "$work/runs/split" train.steps=20
grep -q "resuming split .* at step 11 to 20 on 2 processes" "$work/split_resumed.log" || { fail "the resumed run's first line"; cat "$work/split_resumed.log"; }
same_run "$work/runs/one-s2s" "$work/runs/split"

# 3. SIGTERM to mpirun: every rank stops after the same step, rank 0 writes last.ckpt and says how to
# resume (mpirun itself exits non-zero after forwarding a signal); the run resumes under mpirun.
# (Started as mpirun.sh itself, which execs mpirun: $! is mpirun's process id.) With a line every step:
# OpenMPI 4.1's mpirun stops passing rank 0's stdout on once it has the signal, holds the signal for a
# second, forwards it, and kills the ranks a second later; rank 0 once sat blocked writing its progress
# until then (no checkpoint, no message). Its lines now go out from a thread of their own, and the last
# word also on stderr (progress.hpp).
bash "$here/mpirun.sh" "$mpirun" -np 2 "$attnlab" train "$source/configs/reverse.yaml" log.dir="$work/runs" name=stopped train.steps=100000 log.interval=1 \
  train.eval_interval=10 model.d_model=16 model.n_heads=2 > "$work/stopped.log" 2>&1 &
pid=$!
wait_for "step 500/" "$work/stopped.log"
kill -TERM $pid
wait_for_job_end $pid 60 "SIGTERM"
if [ $status -ne 0 ] && [ -s "$work/runs/stopped/last.ckpt" ] && [ "$(grep -c "stopped by SIGTERM" "$work/stopped.log")" = 1 ] \
   && grep -q "Resume with: mpirun -np 2 attnlab train --resume $work/runs/stopped" "$work/stopped.log"; then
  echo "ok: SIGTERM to mpirun writes one checkpoint and says how to resume"
  stopped=$(sed -n 's/.*stopped by SIG[A-Z]* after step \([0-9]*\).*/\1/p' "$work/stopped.log")
  check resume_after_term mpi "$attnlab" train --resume "$work/runs/stopped" train.steps=$((stopped + 20))
  grep -q "resuming stopped .* at step $((stopped + 1)) " "$work/resume_after_term.log" || fail "the run did not resume after step $stopped"
else
  fail "SIGTERM to mpirun (status $status)"; cat "$work/stopped.log"
fi

# 3a. SIGUSR1 to mpirun: passed on to every rank at once (SIGTERM waits a second, and the ranks are
# killed a second after it: docs/distributed.md), so the ranks stop after the same step, whatever its length; rank 0
# writes one checkpoint and says how to resume. (SIGUSR1 used to kill the ranks.)
bash "$here/mpirun.sh" "$mpirun" -np 2 "$attnlab" train "$source/configs/reverse.yaml" log.dir="$work/runs" name=usr1 train.steps=100000 log.interval=1 \
  train.eval_interval=10 model.d_model=16 model.n_heads=2 > "$work/usr1.log" 2>&1 &
pid=$!
wait_for "step 500/" "$work/usr1.log"
kill -USR1 $pid
wait_for_job_end $pid 60 "SIGUSR1"
[ $status -ne 0 ] && [ -s "$work/runs/usr1/last.ckpt" ] && [ "$(grep -c "stopped by SIGUSR1 after step" "$work/usr1.log")" = 1 ] \
  && grep -q "Resume with: mpirun -np 2 attnlab train --resume $work/runs/usr1" "$work/usr1.log" \
  && echo "ok: SIGUSR1 to mpirun writes one checkpoint and says how to resume" || { fail "SIGUSR1 to mpirun (status $status)"; cat "$work/usr1.log"; }

# 3b. A run that diverges under mpirun: every rank stops at the same step (the reduced loss), rank 0
# writes last.ckpt and the summary and names the parameter; the job exits non-zero.
mpi "$attnlab" train "$source/configs/reverse.yaml" "${tiny[@]/train.grad_clip=0.5/train.grad_clip=0}" log.dir="$work/runs" name=diverged \
  train.optimizer.name=sgd train.optimizer.lr=1e30 > "$work/diverged.log" 2>&1
status=$?
[ $status -ne 0 ] && [ "$(grep -c "training stopped at step .* is not finite; last.ckpt holds step" "$work/diverged.log")" = 1 ] \
  && [ -s "$work/runs/diverged/last.ckpt" ] && grep -q '"status": "diverged"' "$work/runs/diverged/summary.json" \
  && echo "ok: a run diverging under mpirun keeps its checkpoint and summary" || { fail "divergence under mpirun (status $status)"; cat "$work/diverged.log"; }

# 4. A rank that dies (kill -9) ends the whole job with mpirun's message, never a hang.
bash "$here/mpirun.sh" "$mpirun" -np 2 "$attnlab" train "$source/configs/reverse.yaml" log.dir="$work/runs" name=killed train.steps=100000 log.interval=10 \
  model.d_model=16 model.n_heads=2 > "$work/killed.log" 2>&1 &
pid=$!
wait_for "step 20/" "$work/killed.log"
rank=$(ps -o pid= --ppid $pid | tail -n 1)
[ -n "$rank" ] && kill -9 $rank
if wait_for_job_end $pid 30 "a rank died"; then
  [ $status -ne 0 ] && grep -q "exited on signal 9" "$work/killed.log" && echo "ok: a dead rank ends the job (status $status)" \
    || { fail "a dead rank (status $status)"; cat "$work/killed.log"; }
fi

# 5. Refused before anything is written: an uneven split of the global batch, a run resumed on a number
# of processes that does not divide its batch (it keeps its batch: the message suggests process counts),
# a config error, and one-process commands. An error that every rank meets is printed once, without
# OpenMPI's ORTE_ERROR_LOG lines (every rank used to print it and abort).
mpi "$attnlab" train "$source/configs/reverse.yaml" train.batch_size=5 log.dir="$work/uneven" > "$work/uneven.log" 2>&1
status=$?
[ $status = 2 ] && grep -q "train.batch_size (5) is the global batch and must split evenly over the 2 processes that mpirun started (-np 2); set train.batch_size=6 or 4" "$work/uneven.log" \
  && [ ! -e "$work/uneven" ] || { fail "an uneven batch split (status $status)"; cat "$work/uneven.log"; }
once "an uneven batch split" "must split evenly" "$work/uneven.log"
bash "$here/mpirun.sh" "$mpirun" -np 3 "$attnlab" train --resume "$work/runs/one-s2s" train.steps=30 > "$work/resume3.log" 2>&1
status=$?
[ $status = 2 ] && grep -q "a resumed run keeps its batch, so start a number of processes that divides 8: mpirun -np 2 or -np 4" "$work/resume3.log" \
  && [ -s "$work/runs/one-s2s/summary.json" ] || { fail "a run resumed on 3 processes (status $status)"; cat "$work/resume3.log"; }
once "a run resumed on 3 processes" "must split evenly" "$work/resume3.log"
mpi "$attnlab" train --resume "$work/runs/one-s2s" model.d_model=8 train.steps=40 > "$work/resume_changed.log" 2>&1
status=$?
[ $status = 2 ] && ! grep -q "MPI_ABORT" "$work/resume_changed.log" || { fail "a resume that changes the model under mpirun (status $status)"; cat "$work/resume_changed.log"; }
once "a resume that changes the model" "does not describe the run that" "$work/resume_changed.log"
cp -r "$work/runs/one-s2s" "$work/runs/damaged" && sed -i '2s/"loss":/"loss";/' "$work/runs/damaged/metrics.jsonl"
mpi "$attnlab" train --resume "$work/runs/damaged" train.steps=40 > "$work/resume_damaged.log" 2>&1
status=$?
[ $status = 2 ] && ! grep -q "MPI_ABORT" "$work/resume_damaged.log" && [ -s "$work/runs/damaged/summary.json" ] \
  || { fail "a resume refused for a damaged metrics line under mpirun (status $status)"; cat "$work/resume_damaged.log"; }
once "a damaged metrics line" "metrics.jsonl:2: not a metrics row" "$work/resume_damaged.log"
mpi "$attnlab" train "$source/configs/reverse.yaml" model.n_heads=3 log.dir="$work/bad-config" > "$work/bad_config.log" 2>&1
status=$?
[ $status = 2 ] && [ ! -e "$work/bad-config" ] || { fail "a config error under mpirun (status $status)"; cat "$work/bad_config.log"; }
once "a config error" "^attnlab: config error: command-line override \`model.n_heads=3\`: model.n_heads (3) must divide" "$work/bad_config.log"
# A bad command line is said once (rank 0), as a config error is.
mpi "$attnlab" train "$source/configs/reverse.yaml" --threds 1 > "$work/bad_flag.log" 2>&1
status=$?
[ $status != 0 ] || fail "an unknown flag under mpirun exited 0"
once "an unknown flag" "The following argument was not expected: --threds" "$work/bad_flag.log"
mpi "$attnlab" eval "$work/runs/one-s2s" > "$work/eval.log" 2>&1
status=$?
[ $status = 2 ] && grep -q "this command runs on one process, but mpirun started 2; run it without mpirun" "$work/eval.log" \
  || { fail "eval under mpirun (status $status)"; cat "$work/eval.log"; }

# 6. A comparison over two ranks gives the local comparison's summary (the runs themselves are plain
# processes started by the ranks); run again, it reruns nothing.
cp "$source/configs/reverse.yaml" "$work/base.yaml"
for where in local mpi; do
  cat > "$work/$where.yaml" <<YAML
name: $where
base: base.yaml
seeds: [0, 1]
metric: exact_match
set: {train.steps: 8, train.batch_size: 4, train.eval_interval: 4, train.eval_batches: 1, log.interval: 4,
      train.schedule: {kind: constant, warmup_steps: 0}, model.d_model: 16, model.n_layers: 1, model.n_heads: 2}
variants:
  softmax: {}
  linear: {model.attention.name: linear}
dir: $work/compare
YAML
done
check compare_local "$attnlab" compare "$work/local.yaml"
check compare_mpi mpi "$attnlab" compare "$work/mpi.yaml"
grep -q "0 of 4 runs already done; over 2 processes, 1 at a time" "$work/compare_mpi.log" || fail "the distributed comparison's plan line"
grep -q "\[rank 0\] finished" "$work/compare_mpi.log" && grep -q "\[rank 1\] finished" "$work/compare_mpi.log" || fail "the runs were not spread over both ranks"
# Every column but the times, rates and memory (8-10), which differ from one run to the next.
cut -d, -f1-7,11- "$work/compare/local/summary.csv" > "$work/local.csv"
cut -d, -f1-7,11- "$work/compare/mpi/summary.csv" > "$work/mpi.csv"
[ "$(wc -l < "$work/mpi.csv")" = 3 ] && cmp -s "$work/local.csv" "$work/mpi.csv" || { fail "the summaries differ"; diff "$work/local.csv" "$work/mpi.csv"; }
check compare_mpi_again mpi "$attnlab" compare "$work/mpi.yaml"
grep -q "4 of 4 runs already done" "$work/compare_mpi_again.log" && grep -q "attnlab compare: 4 of 4 runs done" "$work/compare_mpi_again.log" \
  || { fail "the finished distributed comparison reran"; cat "$work/compare_mpi_again.log"; }

# 6b. A comparison rank killed outright (kill -9): mpirun ends the job, and the runs of every rank stop
# after their step with a checkpoint, the killed rank's too (mpirun knows nothing of them; the kernel
# tells them: stop_signals.hpp). That run used to train on.
cat > "$work/orphans.yaml" <<YAML
name: orphans
base: base.yaml
seeds: [0, 1]
set: {train.steps: 100000000, train.batch_size: 4, train.eval_interval: 100000000, log.interval: 4, log.patterns: false,
      train.schedule: {kind: constant, warmup_steps: 0}, model.d_model: 16, model.n_layers: 1, model.n_heads: 2}
variants:
  softmax: {}
dir: $work/compare
YAML
bash "$here/mpirun.sh" "$mpirun" -np 2 "$attnlab" compare "$work/orphans.yaml" > "$work/orphans.log" 2>&1 &
pid=$!
orphans=$work/compare/orphans/runs/softmax
if wait_for "step 40/" "$orphans/seed_0.log" && wait_for "step 40/" "$orphans/seed_1.log"; then
  ranks=$(ps -o pid= --ppid $pid)
  runs=$(for rank in $ranks; do ps -o pid= --ppid $rank; done)
  [ "$(echo $runs | wc -w)" = 2 ] || fail "the comparison ranks do not run one run each: $runs"
  kill -9 $(echo $ranks | cut -d' ' -f1)
  wait $pid
  for run in $runs; do
    for _ in $(seq 600); do state=$(ps -o stat= -p "$run"); [ -z "$state" ] || [ "${state:0:1}" = Z ] && break; sleep 0.1; done
    [ -z "$state" ] || [ "${state:0:1}" = Z ] || { fail "run $run still trains a minute after its comparison rank was killed"; kill -9 "$run"; }
  done
  [ "$(grep -l "stopped by SIGTERM after step [0-9]*; checkpoint written" "$orphans"/seed_*.log | wc -l)" = 2 ] \
    || { fail "the runs of a killed comparison did not stop with their checkpoints"; tail -n 3 "$orphans"/seed_*.log; }
else
  kill -9 $pid
fi

# 7. The GPT benchmark, data parallel: one JSON line (rank 0's) with its allreduce.
check bench_gpt mpi "$attnlab" bench gpt --layers 1 --dim 32 --heads 2 --block 16 --batch 4 --steps 2 --warmup 1
[ "$(grep -c '"impl"' "$work/bench_gpt.log")" = 1 ] && grep -q '"processes":2,"allreduce_bytes":[1-9]' "$work/bench_gpt.log" \
  || { fail "bench gpt under mpirun"; cat "$work/bench_gpt.log"; }

echo "$failures failures"
[ "$failures" = 0 ]
