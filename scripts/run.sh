#!/usr/bin/env bash
# The main job: set-up, build, then run attention (forward + backward) on the GPU when this
# build can, else on the CPU backend, check it against the fp64 reference and print a table.
#   scripts/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$FA_JOBS" --target fa_demo
./build/tools/fa-demo "$@"
