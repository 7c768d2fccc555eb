# Shared by the end-to-end scripts of the command (train_cli.sh, train_faults_cli.sh): the failure count,
# their arguments (the binary, the source folder, a work folder made afresh), the tiny config they train,
# the failure count, running a command into its log, reading the metrics log, waiting for an event.
set -uo pipefail
attnlab=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
config="$source/configs/reverse.yaml"
tiny=(train.steps=6 train.batch_size=4 train.eval_interval=3 train.eval_batches=1 log.interval=3
      train.schedule.kind=constant train.schedule.warmup_steps=0 model.d_model=16 model.n_layers=1 model.n_heads=2)
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
check() {  # name, then the command
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then echo "ok: $name"; else fail "$name"; cat "$work/$name.log"; fi
}
# The JSON value of `key` in the last line of file $1 that holds "split":"$2".
json_field() { grep "\"split\":\"$2\"" "$1" | tail -n 1 | sed -n "s/.*\"$3\":\([^,}]*\).*/\1/p"; }
# Waits for a line matching $1 in file $2 (an event, e.g. a progress line that shows the run is training;
# the bound only ends a run that never gets there). Fails when it never comes.
wait_for() {
  for _ in $(seq 6000); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  fail "\"$1\" never appeared in $2"; return 1
}
parses_as_json() { python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$1" 2> /dev/null; }
