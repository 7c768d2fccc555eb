#!/usr/bin/env bash
# Runs the Python module's tests (pytest, Debian's python3) against build/python, with OpenBLAS on the
# kernels the command line picks on this CPU (an interpreter cannot re-execute itself to choose them, as
# the attnlab command does), so that a run trained from Python and one from the command line can be
# compared bit for bit. Usage: run_pytest.sh BUILD_DIR SOURCE_DIR [pytest arguments]
set -euo pipefail
build=$1 source=$2
shift 2
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" ATTNLAB="$build/attnlab" ATTNLAB_SOURCE_DIR="$source"
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$(/usr/bin/python3 -W ignore -c "import attnlab; print(attnlab.command_line_blas_core())")
  export OPENBLAS_CORETYPE=$core
fi
export OPENBLAS_NUM_THREADS=1
cd "$source/tests/python"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
