#!/usr/bin/env bash
# Tuning run on the GPU machine: builds the library a second time with a kernel-config override
# (FA_TUNE_FLAGS, e.g. "-DFA_SM80_FWD_BLOCK_N_D128=64") and benchmarks it beside the default
# build (build-gpu, from scripts/gpu-check.sh). Verdicts go to docs/performance-log.md.
#   [FA_TUNE_NAME=name] bench/gpu_tune.sh OUTDIR
# FA_TUNE_NAME (default "tune") names the build directory and output files, so that several
# variants can be built and measured in one session. FA_TUNE_HEAD_DIMS (e.g. "64;128;256")
# builds only those head dims' kernels (a third of the build for the benchmark's dims).
# FA_TUNE_TEST_FILTER (a GoogleTest filter) also builds the tests and runs those first (a
# GoogleTest source tree: FA_GTEST_SOURCE_DIR, default .deps/googletest). FA_TUNE_KERNEL_TIMES
# (bench/kernel_times.py cases, e.g. "64:1024:0,128:2048:1") also times the backward's kernels
# one by one, bf16 and fp16, into NAME-ktimes.txt (the pre- / postprocess patches' measure).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?}
name=${FA_TUNE_NAME:-tune}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
dims=()
[ -n "${FA_TUNE_HEAD_DIMS:-}" ] && dims=("-DFA_HEAD_DIMS=${FA_TUNE_HEAD_DIMS}")
tests=(-DFA_BUILD_TESTS=OFF) targets=(--target flashattn)
if [ -n "${FA_TUNE_TEST_FILTER:-}" ]; then
  tests=(-DFA_BUILD_TESTS=ON "-DFA_GTEST_SOURCE_DIR=${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}")
  targets=(--target flashattn fa_tests)
fi
cmake -S . -B build-${name} -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS="${FA_ARCHS:-90a}" "${tests[@]}" \
  -DFA_BUILD_TOOLS=OFF -DCMAKE_CUDA_FLAGS="${FA_TUNE_FLAGS:-}" "${dims[@]}" > "$out/${name}-build.log" 2>&1 &&
  cmake --build build-${name} -j "$(nproc)" "${targets[@]}" >> "$out/${name}-build.log" 2>&1 || { tail -20 "$out/${name}-build.log"; exit 1; }
if [ -n "${FA_TUNE_TEST_FILTER:-}" ]; then
  ./build-${name}/tests/fa_tests --gtest_filter="${FA_TUNE_TEST_FILTER}" > "$out/${name}-tests.log" 2>&1
  echo "tests ($FA_TUNE_TEST_FILTER): rc=$? $(grep -cE '^\[ +OK' "$out/${name}-tests.log") ok," \
    "$(grep -cE '^\[  FAILED' "$out/${name}-tests.log") failed lines"
fi
# FA_TUNE_BENCH_ARGS may hold several argument sets separated by ';' (e.g. the forward and the
# backward with dropout): one benchmark each, the first into NAME.json, the next NAME-2.json, ...
IFS=';' read -ra arg_sets <<< "${FA_TUNE_BENCH_ARGS:-}"
[ ${#arg_sets[@]} -eq 0 ] && arg_sets=("")
i=0
if [ -n "${FA_TUNE_KERNEL_TIMES:-}" ]; then
  for dt in bf16 fp16; do
    python3 bench/kernel_times.py --lib build-${name}/libflashattn.so --dtype $dt \
      --cases "$FA_TUNE_KERNEL_TIMES" 2>> "$out/${name}-ktimes.log"
  done > "$out/${name}-ktimes.txt"
  echo "kernel times: $(grep -c '^==' "$out/${name}-ktimes.txt") cases in ${name}-ktimes.txt"
fi
for args in "${arg_sets[@]}"; do
  i=$((i + 1)); suffix=""; [ $i -gt 1 ] && suffix="-$i"
  python3 bench/gpu_bench.py --lib build-${name}/libflashattn.so --quick $args \
    --json "$out/${name}${suffix}.json" --commit "${FA_COMMIT:-unknown}+${FA_TUNE_FLAGS:-}" \
    2> "$out/${name}${suffix}.log" | tail -20
done
