#!/usr/bin/env bash
# End to end: scripts/bench/compare.py against the real binary and Debian's PyTorch, on tiny sizes: a gpt
# case over two alternated reps, two attention kernels at one length and generation by two kernels after
# two context lengths, and one set of the README table's row, each JSON line checked for its fields
# with positive values (and the tiny GPT's parameter count, worked out by hand); then a non-zero
# exit naming the fix for a missing binary, a missing PyTorch and a kernel without a PyTorch reference.
# PyTorch is required (scripts/setup.sh installs python3-torch): without it the first case fails.
# Usage: test_bench_compare.sh ATTNLAB_BINARY SOURCE_DIR
set -uo pipefail
attnlab=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compare=(/usr/bin/python3 "$source/scripts/bench/compare.py")
failures=0
source "$(dirname "$0")/checks.sh"  # fail, check, refused
fields() {  # name, then the JSON lines expected in $work/name.log, one argument each: key=value or key>0 ...
  local name=$1; shift
  /usr/bin/python3 - "$work/$name.log" "$@" <<'PY' || fail "$name: $(cat "$work/$name.log")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
expected = sys.argv[2:]
if len(lines) != len(expected):
    sys.exit(f"{len(lines)} JSON lines, expected {len(expected)}")
for line, spec in zip(lines, expected):
    for term in spec.split():
        key, op, value = (term.partition(">0") if term.endswith(">0") else term.partition("="))
        if key not in line:
            sys.exit(f"no {key} in {line}")
        if op == ">0" and not (isinstance(line[key], (int, float)) and line[key] > 0):
            sys.exit(f"{key} is not a positive number in {line}")
        if op == "=" and str(line[key]) != value:
            sys.exit(f"{key} is {line[key]}, expected {value}")
PY
}
export ATTNLAB=$attnlab
speed_and_memory="speed_ratio>0 attnlab_work_mb>0 pytorch_work_mb>0 work_memory_ratio>0"

# V C + T C + L (12 C^2 + 13 C) + 2 C + C V with V 65, C 32, T 16, L 1: 2080 + 512 + 12704 + 64 + 2080.
check gpt "${compare[@]}" gpt --threads 1 --reps 2 --layers 1 --heads 2 --dim 32 --block 16 --batch 2 --steps 2 --warmup 1
fields gpt "case=gpt params=17440 attnlab_tokens_per_s>0 pytorch_tokens_per_s>0 attnlab_peak_rss_mb>0 pytorch_peak_rss_mb>0 $speed_and_memory"

check attention "${compare[@]}" attention --threads 1 --reps 1 --variants softmax,linear --lengths 64
fields attention "variant=softmax n=64 attnlab_ms>0 pytorch_ms>0 $speed_and_memory" \
                 "variant=linear n=64 attnlab_ms>0 pytorch_ms>0 $speed_and_memory"

# generate: two kernels, two contexts; softmax beside PyTorch's KV-cache loop and nanoGPT's recomputing generate,
# with the same parameter count on both sides (a mismatch stops compare.py); sparse, which keeps no state, says so.
generate_fields="attnlab_cached_ms>0 attnlab_recomputed_ms>0 cache_speedup>0 flatness>0"
check generate "${compare[@]}" generate --threads 1 --reps 1 --kernels softmax,sparse --contexts 16,32 --layers 1 --heads 2 --dim 32 \
  --tokens 3 --recomputed-tokens 1
fields generate "kernel=softmax context=16 flatness=1.0 decodes_from_state=True $generate_fields pytorch_kv_cache_ms>0 pytorch_recompute_ms>0 kv_cache_speed_ratio>0 recompute_speed_ratio>0" \
                "kernel=softmax context=32 decodes_from_state=True $generate_fields pytorch_kv_cache_ms>0 kv_cache_speed_ratio>0" \
                "kernel=sparse context=16 decodes_from_state=False $generate_fields" \
                "kernel=sparse context=32 decodes_from_state=False $generate_fields"

# table: one set on one thread, the reference GPT and the toy shape, then one `bench gpt` run, then the
# summary with the README row (the two-thread columns left empty).
table_set="threads=1 attnlab_tokens_per_s>0 pytorch_tokens_per_s>0 $speed_and_memory"
check table "${compare[@]}" table --sets 1 --reps 1 --threads 1 --sgemm-runs 1 --steps 2 --warmup 1
fields table "case=table_set set=1 shape=gpt params=818176 $table_set" "case=table_set set=1 shape=toy params=103168 $table_set" \
             "case=table_sgemm set=1 of_sgemm_fastest>0 products_of_sgemm>0" "case=table sets=1 machine row"
/usr/bin/python3 - "$work/table.log" <<'PY' || fail "table: the row is not the README's five columns: $(tail -1 "$work/table.log")"
import json, re, sys
line = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
cells = [c.strip() for c in line["row"].strip("|").split("|")]
gpt, toy = line["medians"]["gpt_1"], line["medians"]["toy_1"]
assert len(cells) == 6 and cells[0].endswith("(1)"), cells
assert cells[1] == f"{gpt:.2f}x" and cells[2] == "-" and cells[3] == f"{toy:.2f}x" and cells[4] == "-", cells
shares = line["of_sgemm_fastest"]  # [min, median, max]; one run here, so the cell is that figure alone
assert cells[5] == f"{shares[1]:.2f}" and re.fullmatch(r"[0-9.]+(-[0-9.]+ \(median [0-9.]+\))?", cells[5]), cells
PY
refused table_sets "argument --sets" "${compare[@]}" table --sets 0

refused no_binary "set ATTNLAB to its path" env ATTNLAB="$work/nothing" "${compare[@]}" gpt
mkdir "$work/no_torch" && echo 'raise ImportError("hidden by the test")' > "$work/no_torch/torch.py"
refused no_torch "apt-get install python3-torch" env PYTHONPATH="$work/no_torch" "${compare[@]}" gpt
refused no_reference "'performer' has no PyTorch reference" "${compare[@]}" attention --reps 1 --variants performer --lengths 16

echo "$failures failures"
[ $failures -eq 0 ]
