#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs the main job: the default experiment
# (configs/default.yaml, a causal transformer learning induction heads), which trains for about half a
# minute and prints where its run folder is. Extra arguments go to `attnlab train` (key=value overrides,
# --threads N).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/attnlab train configs/default.yaml "$@"
