#!/usr/bin/env bash
# The test command: set-up, configure (CUDA parts when nvcc exists), build, run every test.
# GPU tests skip (reported as skipped) when no CUDA device is present.
#   scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$FA_JOBS"
ctest --preset default -j "$FA_JOBS" "$@"
