#!/usr/bin/env bash
# The thread pool's tests on a ThreadSanitizer build (build-tsan/, -O1 -g): a data race between the
# pool's driver, its workers, or two threads that drive it at once fails the test it happens in. Only
# test_ops is built (the pool, parallel_for and the ops that share their chunks); the whole suite under
# TSan would take hours, and OpenBLAS's and OpenMPI's own threads are outside what it can see. About 5
# minutes on two cores, setup's checks and the build included (2026-12-07). Arguments go to ctest (they
# replace the -R).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh > /dev/null  # the packages (and the normal build)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" > /dev/null
cmake --build build-tsan -j "$(nproc 2>/dev/null || echo 2)" --target test_ops
cd build-tsan
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
if [ $# -eq 0 ]; then set -- -R "ThreadPool|Parallel|SharingTuner|LinearGrads"; fi
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
