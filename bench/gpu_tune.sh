#!/usr/bin/env bash
# Tuning run on the GPU machine: builds the library a second time with a kernel-config override
# (FA_TUNE_FLAGS, e.g. "-DFA_SM80_FWD_BLOCK_N_D128=64") and benchmarks it beside the default
# build (build-gpu, from scripts/gpu-check.sh). Verdicts go to docs/performance.md.
#   bench/gpu_tune.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?}
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-tune -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS="${FA_ARCHS:-90a}" -DFA_BUILD_TESTS=OFF \
  -DFA_BUILD_TOOLS=OFF -DCMAKE_CUDA_FLAGS="${FA_TUNE_FLAGS:-}" > "$out/tune-build.log" 2>&1 &&
  cmake --build build-tune -j "$(nproc)" --target flashattn >> "$out/tune-build.log" 2>&1 || { tail -20 "$out/tune-build.log"; exit 1; }
python3 bench/gpu_bench.py --lib build-tune/libflashattn.so --json "$out/tune.json" --quick ${FA_TUNE_BENCH_ARGS:-} \
  --commit "${FA_COMMIT:-unknown}+${FA_TUNE_FLAGS:-}" 2> "$out/tune.log" | tail -20
