# The shell tests' common checks, sourced by tests/scripts/test_*.sh after they set $work (a scratch folder)
# and failures=0: fail MESSAGE counts a failure; check NAME COMMAND... runs a command that must succeed;
# refused NAME TEXT COMMAND... one that must fail with TEXT in its output. Each command's output goes to
# $work/NAME.log, shown when the check fails.
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
check() {
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then echo "ok: $name"; else fail "$name"; cat "$work/$name.log"; fi
}
refused() {
  local name=$1 text=$2; shift 2
  if "$@" > "$work/$name.log" 2>&1; then
    fail "$name should exit non-zero"
  elif ! grep -qF -- "$text" "$work/$name.log"; then
    fail "$name: error does not say '$text'"; cat "$work/$name.log"
  else
    echo "ok: $name"
  fi
}
