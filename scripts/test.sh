#!/usr/bin/env bash
# The test command: set-up, configure (CUDA parts when nvcc exists), build, run every test.
# GPU tests skip (reported as skipped) when no CUDA device is present. With FA_TEST_SANITIZERS=1
# (CI sets it) the CPU suite then runs a second time under AddressSanitizer + UBSan (the asan
# preset): memory errors in the CPU backend, the validation and the tools fail the run; and the
# fuzz target runs its seed corpus and 150,000 fresh inputs from a fixed seed (at most 300 s).
# FA_ARCHS (e.g. 90a) overrides the preset's CUDA architectures (80;90a) for a faster build.
#   [FA_TEST_SANITIZERS=1] [FA_ARCHS=...] scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh
cmake --preset default ${FA_ARCHS:+-DFA_ARCHS=$FA_ARCHS} >/dev/null
cmake --build --preset default -j "$FA_JOBS"
ctest --preset default -j "$FA_JOBS" "$@"
if [ "${FA_TEST_SANITIZERS:-0}" = 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$FA_JOBS"
  ctest --preset asan -j "$FA_JOBS" "$@"
  # The C ABI's fuzz target (tests/fuzz): its regression corpus, then a bounded fresh run with a
  # fixed seed (the same inputs every run of a build: a red CI is a bug, never luck).
  FA_FUZZ_SEED=${FA_FUZZ_SEED:-1} FA_FUZZ_RUNS=${FA_FUZZ_RUNS:-150000} \
    FA_FUZZ_SECONDS=${FA_FUZZ_SECONDS:-300} scripts/fuzz.sh
fi
