#!/usr/bin/env bash
# End to end: `attnlab compare` on a tiny comparison (two variants x two seeds, two at a time) writes
# every run, summary.csv/md, runs.csv and report.html; every file a report references exists; the same
# command again reruns nothing; a changed config is refused; a bad comparison file fails with
# file:line:column before anything is written; an interrupted comparison resumes; a grid sweep with
# `select` reports each variant at its best learning rate and plots the metric against state size; with
# select.seeds the other seeds run only at the chosen value; a comparison killed outright takes its runs
# with it, a run folder that another process writes is left alone, and a moved comparison goes on in its
# new place.
# Usage: compare_cli.sh ATTNLAB_BINARY SOURCE_DIR WORK_DIR
set -uo pipefail
attnlab=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# Waits for a line matching $1 in file $2 (an event; the bound only ends a wait for one that never comes).
wait_for() {
  for _ in $(seq 6000); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  fail "\"$1\" never appeared in $2"; return 1
}
# Waits for process $1, not a child of this script, to end (an event; the bound only ends a wait for one
# that never ends, which it then kills). A zombie has ended.
wait_for_end() {
  local state
  for _ in $(seq 600); do
    state=$(ps -o stat= -p "$1" 2> /dev/null)
    [ -z "$state" ] || [ "${state:0:1}" = Z ] && return 0
    sleep 0.1
  done
  fail "process $1 ($2) still runs a minute later"; kill -9 "$1"; return 1
}
cp "$source/configs/reverse.yaml" "$work/base.yaml"
cat > "$work/tiny.yaml" <<YAML
name: tiny
base: base.yaml
seeds: [0, 1]
metric: exact_match
set: {train.steps: 8, train.batch_size: 4, train.eval_interval: 4, train.eval_batches: 1, log.interval: 4,
      train.schedule: {kind: constant, warmup_steps: 0}, model.d_model: 16, model.n_layers: 1, model.n_heads: 2}
variants:
  softmax: {}
  linear: {model.attention.name: linear}
dir: $work/out
analyze: true
YAML
out=$work/out/tiny

# Every file a report.html links to or embeds by path exists (data: URIs and in-page anchors aside).
check_references() {
  local report=$1 folder
  folder=$(dirname "$report")
  [ -s "$report" ] || { fail "$report is missing"; return; }
  local refs
  refs=$(grep -o -E '(href|src)="[^"]*"' "$report" | sed -E 's/^(href|src)="//; s/"$//' | grep -v -E '^(data:|#|https?:)' | sort -u)
  [ -n "$refs" ] || fail "$report references no files"
  while IFS= read -r ref; do
    [ -e "$folder/$ref" ] || fail "$report references $ref, which does not exist"
  done <<< "$refs"
  grep -q -E 'https?://[^"]*\.(js|css|png)' "$report" && fail "$report loads something from the network"
}

"$attnlab" compare "$work/tiny.yaml" --jobs 2 > "$work/first.log" 2>&1 || { cat "$work/first.log"; fail "the comparison did not finish"; }
for v in softmax linear; do
  for s in 0 1; do
    [ -s "$out/runs/$v/seed_$s/summary.json" ] || fail "run $v/seed_$s did not finish"
    check_references "$out/runs/$v/seed_$s/report.html"
  done
done
for f in summary.csv summary.md runs.csv compare.yaml; do [ -s "$out/$f" ] || fail "no $f"; done
check_references "$out/report.html"
[ "$(grep -c -E '^(softmax|linear),2,' "$out/summary.csv")" = 2 ] || { cat "$out/summary.csv"; fail "summary.csv lacks a row per variant over 2 seeds"; }
grep -q '^| softmax | 2/2 |' "$out/summary.md" || { cat "$out/summary.md"; fail "summary.md lacks the softmax row"; }
# best counts the final evaluation too: its mean is never below final's.
python3 -c '
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    assert float(r["best_exact_match_mean"]) >= float(r["final_exact_match_mean"]), r' "$out/summary.csv" \
  || { cat "$out/summary.csv"; fail "best reads below final in summary.csv"; }
grep -q 'heatmap' "$out/report.html" || fail "the comparison report shows no heatmaps"
# The runs and logs it names are paths from where it ran: here, with a relative dir, from the work folder.
sed -e 's/name: tiny/name: relative/' -e "s|^dir: .*|dir: out|" -e 's/^analyze: true/analyze: false/' "$work/tiny.yaml" > "$work/relative.yaml"
(cd "$work" && "$attnlab" compare relative.yaml train.steps=4 > "$work/relative.log" 2>&1) || { cat "$work/relative.log"; fail "the relative comparison failed"; }
named=$(grep -o -E '(started  |finished) [^ ]*|log: [^)]*' "$work/relative.log" | sed -E 's/^(started  |finished|log:) //')
[ "$(echo "$named" | grep -c .)" = 12 ] || { cat "$work/relative.log"; fail "expected 4 runs started, 4 logs and 4 finished"; }
while IFS= read -r path; do
  case $path in out/relative/runs/*) ;; *) fail "$path is not a path from the work folder";; esac
  [ -e "$work/$path" ] || fail "$path, named by compare, does not exist from where it ran"
done <<< "$named"
grep -q "finished out/relative/runs/softmax/seed_0 in [0-9.]* s: exact_match [0-9.]*%  \[1/4\]  eta " "$work/relative.log" \
  || { cat "$work/relative.log"; fail "a finished run's line lacks its metric in percent, the count or the time left"; }
# `attnlab report` on the comparison's folder says which command rewrites it.
if "$attnlab" report "$work/out/relative" > "$work/report-folder.log" 2>&1; then fail "report on a comparison folder should fail"; fi
grep -q "is a comparison's folder, not a run's: \`attnlab compare relative.yaml train.steps=4\`, run again" "$work/report-folder.log" \
  || { cat "$work/report-folder.log"; fail "report on a comparison folder does not say to rerun compare"; }
for v in softmax linear; do
  for s in 0 1; do [ -s "$out/runs/$v/seed_$s/analysis/summary.json" ] || fail "run $v/seed_$s was not analysed"; done
done
grep -q '<h2>Analysis side by side</h2>' "$out/report.html" && grep -q '^ablation.baseline.token_accuracy,linear,' "$out/analysis_summary.csv" \
  || fail "the comparison report sets no analyses side by side"
label=$(head -n 1 "$out/runs/softmax/seed_0/patterns/probe_0_labels.txt")
grep -q "rotate(-90)\">$label</text>" "$out/runs/softmax/seed_0/report.html" || fail "the run report's heatmaps carry no token labels"

# Again: nothing reruns.
before=$(stat -c %Y "$out/runs/softmax/seed_0/last.ckpt")
"$attnlab" compare "$work/tiny.yaml" > "$work/again.log" 2>&1 || fail "resuming a finished comparison failed"
grep -q "4 of 4 runs already done" "$work/again.log" || { cat "$work/again.log"; fail "a finished comparison reran"; }
[ "$(stat -c %Y "$out/runs/softmax/seed_0/last.ckpt")" = "$before" ] || fail "a finished run was retrained"

# The same comparison with a different config is refused, naming the comparison file.
if "$attnlab" compare "$work/tiny.yaml" train.steps=9 > "$work/changed.log" 2>&1; then fail "a changed config was mixed into finished runs"; fi
grep -q "tiny.yaml:[0-9]*:[0-9]*: variant 'softmax'.*different config (.*: train.steps 8 there, 9 now)" "$work/changed.log" || { cat "$work/changed.log"; fail "the changed-config error does not say where and why"; }

# A run folder written by an older build lacks the keys added since; at their defaults they are no
# difference, and the finished comparison is still recognised.
sed -i '/label_smoothing:/d' "$out/runs/softmax/seed_0.yaml"
"$attnlab" compare "$work/tiny.yaml" > "$work/older.log" 2>&1 || { cat "$work/older.log"; fail "a run config without a newer key was refused"; }
grep -q "4 of 4 runs already done" "$work/older.log" || { cat "$work/older.log"; fail "a run config without a newer key was rerun"; }

# A comparison folder moved elsewhere (its dir: changed to match) goes on there: its runs' configs name the
# old log.dir, which is no difference, and a run not yet trained trains in the new place.
mkdir -p "$work/moved" && cp -r "$out" "$work/moved/tiny"
rm -r "$work/moved/tiny/runs/linear/seed_1" "$work/moved/tiny/runs/linear/seed_1.log"
sed -e "s|^dir: .*|dir: $work/moved|" "$work/tiny.yaml" > "$work/moved.yaml"
before=$(stat -c %Y "$out/runs/linear/seed_1/last.ckpt")
"$attnlab" compare "$work/moved.yaml" > "$work/moved.log" 2>&1 || { cat "$work/moved.log"; fail "a moved comparison did not go on"; }
grep -q "3 of 4 runs already done" "$work/moved.log" || { cat "$work/moved.log"; fail "a moved comparison did not count its finished runs"; }
[ -s "$work/moved/tiny/runs/linear/seed_1/summary.json" ] || fail "the moved comparison's remaining run did not train in its new place"
[ "$(stat -c %Y "$out/runs/linear/seed_1/last.ckpt")" = "$before" ] || fail "the moved comparison's run trained in the old place"
grep -q "^  dir: $work/moved/tiny/runs/linear$" "$work/moved/tiny/runs/linear/seed_1.yaml" || { cat "$work/moved/tiny/runs/linear/seed_1.yaml"; fail "the run's config still names the old place"; }
check_references "$work/moved/tiny/report.html"

# A bad variant key: exit 2, file:line:column, nothing written.
sed -e 's/name: tiny/name: bad/' -e 's/model.attention.name: linear/model.atention.name: linear/' "$work/tiny.yaml" > "$work/bad.yaml"
"$attnlab" compare "$work/bad.yaml" > "$work/bad.log" 2>&1
[ $? = 2 ] || fail "a bad comparison file should exit 2"
grep -q "bad.yaml:9:12: variant 'linear' sets \`model.atention.name: linear\`: unknown key 'model.atention'; did you mean 'model.attention'" "$work/bad.log" || { cat "$work/bad.log"; fail "the bad-key error does not point at the variant"; }
[ -e "$work/out/bad" ] && fail "a bad comparison wrote a folder"
sed -e 's/name: tiny/name: bad2/' -e 's/^analyze: true/analyze: maybe/' "$work/tiny.yaml" > "$work/bad2.yaml"
"$attnlab" compare "$work/bad2.yaml" > "$work/bad2.log" 2>&1
[ $? = 2 ] && grep -q "bad2.yaml:11:10: 'analyze' must be true or false, got 'maybe'" "$work/bad2.log" && [ ! -e "$work/out/bad2" ] \
  || { cat "$work/bad2.log"; fail "a bad analyze value is not an error at its line"; }

# The comparison places its runs itself: a command-line log.dir is refused, not silently ignored.
sed -e 's/name: tiny/name: placed/' "$work/tiny.yaml" > "$work/placed.yaml"
"$attnlab" compare "$work/placed.yaml" log.dir="$work/elsewhere" > "$work/logdir.log" 2>&1
[ $? = 2 ] || fail "a command-line log.dir for a comparison should exit 2"
grep -q "command-line override \`log.dir=$work/elsewhere\`: the comparison sets seed, name and log.dir" "$work/logdir.log" || { cat "$work/logdir.log"; fail "the log.dir error does not name the override"; }
{ [ -e "$work/elsewhere" ] || [ -e "$work/out/placed" ]; } && fail "a refused comparison wrote a folder"

# Interrupted, then resumed with the same command. The stop comes at an exact point, not after a wait
# (ATTNLAB_TEST_STOP_AT, compare.cpp): SIGTERM right after the first run started, before it can have
# installed its handler; the run holds the forwarded signal until it can stop with a checkpoint.
sed -e 's/name: tiny/name: stop/' "$work/tiny.yaml" > "$work/stop.yaml"
ATTNLAB_TEST_STOP_AT=start:1 "$attnlab" compare "$work/stop.yaml" train.steps=1500 > "$work/stop.log" 2>&1
code=$?
[ $code = 143 ] || { cat "$work/stop.log"; fail "a comparison stopped by SIGTERM should exit 143, got $code"; }
grep -q "stopped by SIGTERM. Resume with the same command: attnlab compare $work/stop.yaml train.steps=1500" "$work/stop.log" || fail "the stopped comparison does not say how to resume"
[ -s "$work/out/stop/runs/softmax/seed_0/last.ckpt" ] || { cat "$work/stop.log" "$work/out/stop/runs/softmax/seed_0.log"; fail "the interrupted run left no checkpoint"; }
grep -q "stopped by SIGTERM after step [0-9]*; checkpoint written" "$work/out/stop/runs/softmax/seed_0.log" || fail "the run does not say it stopped with a checkpoint"
[ -e "$work/out/stop/runs/softmax/seed_0/summary.json" ] && fail "the interrupted run claims to be finished"
if "$attnlab" compare "$work/stop.yaml" train.steps=1400 > "$work/other.log" 2>&1; then fail "resuming with other settings should be refused"; fi
"$attnlab" compare "$work/stop.yaml" train.steps=1500 > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "the resumed comparison did not finish"; }
grep -q "0 of 4 runs already done" "$work/resume.log" || fail "resume miscounted"
grep -q "resuming seed_0" "$work/out/stop/runs/softmax/seed_0.log" || fail "the interrupted run started again instead of resuming"
[ "$(grep -c '"step":1500,"split":"eval"' "$work/out/stop/runs/softmax/seed_0/metrics.jsonl")" = 1 ] || fail "the resumed run's metrics are not one continuous log"

# A signal that comes between runs (while one is reported and the next started): no other run starts. One
# that comes right after a run started reaches it: it stops with a checkpoint (before
# its handler was in place the forwarded signal used to kill it). Both at exact points of the loop.
sed -e 's/name: tiny/name: between/' -e 's/^seeds: \[0, 1\]/seeds: [0, 1, 2]/' -e 's/^analyze: true/analyze: false/' "$work/tiny.yaml" > "$work/between.yaml"
ATTNLAB_TEST_STOP_AT=report:1 "$attnlab" compare "$work/between.yaml" train.steps=200 --jobs 1 --threads 1 > "$work/between.log" 2>&1
code=$?
{ [ $code = 143 ] && grep -q "\[1/6\]" "$work/between.log" && [ "$(grep -c "started  *$work/out/between/runs/" "$work/between.log")" = 1 ] \
    && grep -q "stopped by SIGTERM. Resume" "$work/between.log"; } \
  || { cat "$work/between.log"; fail "SIGTERM between runs: another run started, or the stop was not reported (exit $code)"; }
rm -rf "$work/out/between"
ATTNLAB_TEST_STOP_AT=start:2 "$attnlab" compare "$work/between.yaml" train.steps=200 --jobs 1 --threads 1 > "$work/between.log" 2>&1
code=$?
second=$(grep -o "started  *[^ ]*" "$work/between.log" | sed -n '2s/started  *//p')
{ [ $code = 143 ] && [ -n "$second" ] && grep -q "stopped  $second " "$work/between.log" && [ -s "$second/last.ckpt" ] \
    && ! grep -q "\[2/6\]" "$work/between.log"; } \
  || { cat "$work/between.log"; fail "SIGTERM as the second run started did not stop it with a checkpoint (exit $code)"; }

# A comparison killed outright (kill -9) takes its run with it: the run stops after its step with a
# checkpoint (SIGTERM from the kernel, stop_signals.hpp), instead of training on, beside the same command
# run again, into the same folder.
sed -e 's/name: tiny/name: killed/' -e 's/^analyze: true/analyze: false/' "$work/tiny.yaml" > "$work/killed.yaml"
"$attnlab" compare "$work/killed.yaml" train.steps=100000000 train.eval_interval=100000000 --jobs 1 > "$work/killed.log" 2>&1 &
compare=$!
killed_log=$work/out/killed/runs/softmax/seed_0.log
if wait_for "step 40/" "$killed_log"; then
  run=$(ps -o pid= --ppid $compare | tr -d ' ')
  kill -9 $compare
  wait $compare 2> /dev/null
  if [ -n "$run" ] && wait_for_end "$run" "the killed comparison's run"; then
    { grep -q "stopped by SIGTERM after step [0-9]*; checkpoint written" "$killed_log" && [ -s "$work/out/killed/runs/softmax/seed_0/last.ckpt" ]; } \
      || { cat "$killed_log"; fail "the killed comparison's run did not stop with a checkpoint"; }
  fi
else
  kill -9 $compare
fi

# A run folder that another process writes (here a train started by hand into it) is left alone: the
# comparison names that process and goes on with its other runs. (It used to delete the folder under the
# running process and train the run a second time into it.)
sed -e 's/name: tiny/name: held/' -e 's/^analyze: true/analyze: false/' "$work/tiny.yaml" > "$work/held.yaml"
"$attnlab" train "$work/base.yaml" log.dir="$work/out/held/runs/softmax" name=seed_0 train.steps=100000000 train.eval_interval=100000000 \
  log.interval=10 model.d_model=16 model.n_heads=2 > "$work/holder.log" 2>&1 &
holder=$!
if wait_for "step 50/" "$work/holder.log"; then
  "$attnlab" compare "$work/held.yaml" > "$work/held.log" 2>&1
  code=$?
  { [ $code = 1 ] && grep -q "FAILED   $work/out/held/runs/softmax/seed_0: $work/out/held/runs/softmax/seed_0 is in use by attnlab train (pid $holder), so attnlab compare cannot write it; wait for it to end or stop it (kill $holder)" "$work/held.log" \
      && grep -q "attnlab compare: 3 of 4 runs done" "$work/held.log" && grep -q "steps: 100000000" "$work/out/held/runs/softmax/seed_0/config.yaml" \
      && grep -q "in use by attnlab train (pid $holder)" "$work/out/held/runs/softmax/seed_0.log"; } \
    || { cat "$work/held.log"; fail "a run folder another process writes was not left alone (exit $code)"; }
fi
kill -TERM $holder
wait $holder

# A run that diverges is reported as such and not retried (it would diverge again the same way).
sed -e 's/name: tiny/name: diverge/' -e 's/model.attention.name: linear/train.optimizer: {name: sgd, lr: 1.0e+30}, train.grad_clip: 0/' \
  "$work/tiny.yaml" > "$work/diverge.yaml"
"$attnlab" compare "$work/diverge.yaml" > "$work/diverge.log" 2>&1
[ $? = 1 ] || fail "a comparison with a diverged run should exit 1"
grep -q "DIVERGED $work/out/diverge/runs/linear/seed_0" "$work/diverge.log" || { cat "$work/diverge.log"; fail "the diverged run is not reported"; }
grep -q "^linear,0,runs/linear/seed_0,diverged" "$work/out/diverge/runs.csv" || fail "runs.csv does not mark the diverged run"
"$attnlab" compare "$work/diverge.yaml" > "$work/diverge-again.log" 2>&1
grep -q "4 of 4 runs already done" "$work/diverge-again.log" || fail "a diverged run was retried"

# A sweep: 2 variants x a grid of 2 widths x 2 learning rates x 1 seed, each variant reported at its best
# learning rate per width; widths change the state size, so the report plots the metric against it.
cat > "$work/sweep.yaml" <<YAML
name: sweep
base: base.yaml
seeds: [0]
set: {train.steps: 8, train.batch_size: 4, train.eval_interval: 4, train.eval_batches: 1, log.interval: 4, log.patterns: false,
      train.schedule: {kind: constant, warmup_steps: 0}, model.n_layers: 1, model.n_heads: 2}
variants:
  softmax: {}
  linear: {model.attention.name: linear}
grid:
  model.d_model: [8, 16]
  train.optimizer.lr: [1e-3, 3e-2]
select: {over: train.optimizer.lr, by: loss}
dir: $work/out
YAML
sweep=$work/out/sweep
"$attnlab" compare "$work/sweep.yaml" --jobs 2 > "$work/sweep.log" 2>&1 || { cat "$work/sweep.log"; fail "the sweep did not finish"; }
grep -q "2 variants x 4 grid points x 1 seed; 0 of 8 runs already done" "$work/sweep.log" || { cat "$work/sweep.log"; fail "the sweep's plan is not announced"; }
for v in softmax linear; do
  for d in 8 16; do
    for lr in 1e-3 3e-2; do [ -s "$sweep/runs/$v/d_model-$d/lr-$lr/seed_0/summary.json" ] || fail "run $v d_model $d lr $lr did not finish"; done
  done
done
[ "$(tail -n +2 "$sweep/summary_all.csv" | wc -l)" = 8 ] || { cat "$sweep/summary_all.csv"; fail "summary_all.csv lacks a row per grid point"; }
[ "$(tail -n +2 "$sweep/summary.csv" | wc -l)" = 4 ] || { cat "$sweep/summary.csv"; fail "summary.csv lacks a row per variant and width"; }
head -n 1 "$sweep/summary.csv" | grep -q '^variant,d_model,lr,seeds,.*,state_size,select_loss_mean,overrides$' || fail "summary.csv's columns"
# Each selected row's held-out loss is the lowest of its variant and width (columns: 1 variant, 2 d_model, 3 lr, 15 select_loss_mean).
awk -F, 'NR == FNR { if (FNR > 1) best[$1 "," $2] = $15; next }
         FNR > 1 && $15 + 0 < best[$1 "," $2] + 0 { print "not the best: " $0; bad = 1 } END { exit bad }' \
  "$sweep/summary.csv" "$sweep/summary_all.csv" || fail "select did not keep the lowest loss"
[ "$(cut -d, -f1,2 "$sweep/summary.csv" | tail -n +2 | sort -u | wc -l)" = 4 ] || fail "a variant and width is selected twice or not at all"
grep -q '^| softmax | 8 | [0-9e.-]* | 1/1 |' "$sweep/summary.md" && grep -q 'lr (best of 2)' "$sweep/summary.md" || { cat "$sweep/summary.md"; fail "summary.md does not show the chosen lr"; }
# State sizes: softmax keeps its keys and values (grows with the width), linear a d x d state per head.
[ "$(awk -F, 'NR > 1 { print $14 }' "$sweep/summary.csv" | sort -u | wc -l)" = 4 ] || fail "the rows do not differ in state size"
grep -q 'token_accuracy against state size</text>' "$sweep/report.html" || fail "the report has no plot against state size"
check_references "$sweep/report.html"
"$attnlab" compare "$work/sweep.yaml" > "$work/sweep-again.log" 2>&1 && grep -q "8 of 8 runs already done" "$work/sweep-again.log" || fail "a finished sweep reran"

# Stopped part-way, a sweep says which rows have no chosen value yet and which were chosen among some of
# the values only (the best so far is not the best of all).
sed -e 's/^name: sweep/name: partial/' -e 's/train.steps: 8,/train.steps: 3000,/' "$work/sweep.yaml" > "$work/partial.yaml"
ATTNLAB_TEST_STOP_AT=report:1 "$attnlab" compare "$work/partial.yaml" --jobs 1 > "$work/partial.log" 2>&1
[ $? = 143 ] || { cat "$work/partial.log"; fail "the partial sweep should have been stopped by SIGTERM"; }
partial=$work/out/partial/summary.md
[ "$(grep -c '^| [a-z]* | [0-9]* | [0-9e.-]* (1 of 2 done) | 1/1 |' "$partial")" = 1 ] || { cat "$partial"; fail "the row chosen among one of two values does not say so"; }
[ "$(grep -c '^| [a-z]* | [0-9]* | - | 0/1 |' "$partial")" = 3 ] || { cat "$partial"; fail "rows with no finished run show a chosen value"; }

# A value whose run diverged has been tried: with the other value finished, the choice is complete.
sed -e 's/^name: sweep/name: tried/' -e 's/^  model.d_model: \[8, 16\]/  model.d_model: [8]/' \
    -e 's/^  train.optimizer.lr: .*/  train.optimizer.lr: [1e-3, 1e30]/' \
    -e 's/^set: {/set: {train.optimizer: {name: sgd}, train.grad_clip: 0, /' "$work/sweep.yaml" > "$work/tried.yaml"
"$attnlab" compare "$work/tried.yaml" --jobs 2 > "$work/tried.log" 2>&1
grep -q "DIVERGED" "$work/tried.log" || { cat "$work/tried.log"; fail "the 1e30 runs did not diverge"; }
[ "$(grep -c '^| [a-z]* | 8 | 1e-3 | 1/1 |' "$work/out/tried/summary.md")" = 2 ] || { cat "$work/out/tried/summary.md"; fail "a diverged value counts as not yet tried"; }

# Tuned on one seed, reported over two: seed 0 runs at both learning rates, seed 1 only at the one seed 0
# chose (by held-out loss), per variant.
sed -e 's/^name: sweep/name: tuned/' -e 's/^seeds: \[0\]/seeds: [0, 1]/' -e 's/^  model.d_model: \[8, 16\]/  model.d_model: [16]/' \
    -e 's/^select: .*/select: {over: train.optimizer.lr, by: loss, seeds: 1}/' "$work/sweep.yaml" > "$work/tuned.yaml"
tuned=$work/out/tuned
"$attnlab" compare "$work/tuned.yaml" --jobs 2 > "$work/tuned.log" 2>&1 || { cat "$work/tuned.log"; fail "the tuned sweep did not finish"; }
grep -q "2 variants x 2 grid points x 2 seeds; 0 of 6 runs already done" "$work/tuned.log" || { cat "$work/tuned.log"; fail "the tuned sweep's plan is not announced"; }
for v in softmax linear; do
  # The lr seed 0 chose: its lower final held-out loss (runs.csv columns: 3 lr, 4 seed, 6 status, 9 final_eval_loss).
  chosen=$(awk -F, -v v=$v '$1 == v && $4 == 0 { print $9, $3 }' "$tuned/runs.csv" | sort -g | head -n 1 | cut -d' ' -f2)
  [ -s "$tuned/runs/$v/d_model-16/lr-$chosen/seed_1/summary.json" ] || fail "$v: seed 1 did not run at the chosen lr $chosen"
  [ "$(awk -F, -v v=$v '$1 == v && $4 == 1 && $6 == "not selected"' "$tuned/runs.csv" | wc -l)" = 1 ] || { cat "$tuned/runs.csv"; fail "$v: seed 1 ran at a value not chosen"; }
  grep -q "^$v,16,$chosen,2," "$tuned/summary.csv" || { cat "$tuned/summary.csv"; fail "$v is not reported at lr $chosen over 2 seeds"; }
done
grep -q "chosen on the first 1 seed" "$tuned/summary.md" || fail "summary.md does not say how the value was chosen"
"$attnlab" compare "$work/tuned.yaml" > "$work/tuned-again.log" 2>&1 && grep -q "6 of 6 runs already done" "$work/tuned-again.log" || fail "a finished tuned sweep reran"

echo "$failures failures"
[ "$failures" = 0 ]
