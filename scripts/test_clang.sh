#!/usr/bin/env bash
# The test suite on a clang build (build-clang/, Release). attnlab is written in standard C++17 and
# builds with Debian's clang 14 as well as its GCC 12, but GCC accepts things clang rejects (a lambda
# capturing a structured binding, GCC's own builtins) without a word, even with -Wpedantic: this is the
# check that it still builds and passes there. clang rounds otherwise, so the golden run compares its
# losses to 1e-6 and the README tour its blocks with the numbers masked (they pin GCC's bits). Installs
# clang through scripts/setup.sh when it is missing. About 8 minutes on two cores, the build included
# (2026-12-07). Arguments go to ctest (e.g. -R golden).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh clang > /dev/null  # the packages, clang among them (and the normal build)
cmake -S . -B build-clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build-clang -j "$(nproc 2>/dev/null || echo 2)"
cd build-clang
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
