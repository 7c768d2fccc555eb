# Sourced (with $build set to a build folder) by the scripts that run Debian's python3 on the module that
# folder built: the module on PYTHONPATH, and OpenBLAS on the kernels the command line picks on this CPU
# (an interpreter cannot re-execute itself to choose them, as the attnlab command does), on one thread,
# so that a run trained from Python and one from the command line can be compared bit for bit.
#
# A module built with AddressSanitizer and UBSan (scripts/test_sanitized.sh) cannot be loaded into an
# interpreter built without them unless their runtimes come first: they are preloaded, the same files the
# module links. The interpreter keeps its allocations until it exits, so leaks are not checked under it
# (the C++ tests check them).
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
module=$(ls "$build"/python/attnlab*.so)
if runtimes=$(ldd "$module" | awk '/lib(asan|ubsan)\.so/ {print $3}') && [ -n "$runtimes" ]; then
  export LD_PRELOAD="$(echo $runtimes)${LD_PRELOAD:+ $LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
[ -n "${OPENBLAS_CORETYPE:-}" ] || export OPENBLAS_CORETYPE=$(/usr/bin/python3 -W ignore -c "import attnlab; print(attnlab.command_line_blas_core())")
export OPENBLAS_NUM_THREADS=1
