#!/usr/bin/env bash
# Runs the Python module's tests (pytest, Debian's python3) against BUILD_DIR/python, in the
# environment module_env.sh sets (OpenBLAS on the command line's kernels, so that a run trained from
# Python and one from the command line compare bit for bit). Usage: run_pytest.sh BUILD_DIR SOURCE_DIR
# [pytest arguments]
set -euo pipefail
build=$1 source=$2
shift 2
source "$source/tests/python/module_env.sh"
export ATTNLAB="$build/attnlab" ATTNLAB_SOURCE_DIR="$source"
cd "$source/tests/python"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
