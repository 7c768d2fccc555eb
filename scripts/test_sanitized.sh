#!/usr/bin/env bash
# The test suite on an AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/, -O2 -g): any
# invalid memory access, leak or undefined behaviour fails the test it happens in. OpenMPI's own
# allocations, kept until exit by design, are suppressed (tests/sanitizers/lsan.supp); their stacks need
# the slow unwinder to be seen whole. The Python module's tests load it into Debian's python3 with the
# sanitizers' runtimes preloaded (tests/python/module_env.sh). All but the README tour (label `long`): it
# trains five models and took over half an hour under the sanitizers, past its time limit, and each of
# its commands has a test of its own here. About 40 minutes on two cores, the build included (2026-12-07).
# Arguments go to ctest (e.g. -R mpi).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh > /dev/null  # the packages (and the normal build, which the tests' data scripts use)
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build build-asan -j "$(nproc 2>/dev/null || echo 2)"
cd build-asan
export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$PWD/../tests/sanitizers/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" -LE long "$@"
