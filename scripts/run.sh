#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs the main job. Until the experiment runner lands this is
# the demo: a one-layer attention model trained on sequence reversal, printing its loss as it learns.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/attnlab_demo "$@"
