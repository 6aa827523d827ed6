#!/usr/bin/env bash
# The attention bias on the GPU machine (issue 31: cuda-sm80's bias kernels, forward and the
# backward with dbias), in one device call of under 6 minutes on 16 cores:
#   scripts/gpu-bias.sh OUTDIR
# builds build-gpu-bias (sm_90a, head dims 64 and 128, with the tests); runs the GPU bias tests
# (forward grid, backward grids with dbias, refusals; 4 shards); compute-sanitizer memcheck on a
# twentieth of the backward grid; the Python bias tests on CUDA; bias_bench.py (fwd and fwd+bwd,
# 4k and 8k, ours against cuDNN and FlexAttention) when the time allows. Summary last.
# Environment: FA_GTEST_SOURCE_DIR (default .deps/googletest: carry it), FA_COMMIT (recorded),
# FA_BIAS_BENCH=0 skips the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-bias.sh OUTDIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
bdir=build-gpu-bias
lib=$PWD/$bdir/libflashattn.so
start=$(date +%s)
summary=()
note() { summary+=("$1"); echo "$1"; }
count() {  # $1: a gtest log
  echo "$(grep -cE '^\[ +OK' "$1") ok, $(grep -cE '^\[  FAILED' "$1") failed lines, $(grep -cE '^\[  SKIPPED' "$1") skipped"
}

t0=$(date +%s)
cmake -S . -B $bdir -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_HEAD_DIMS="64;128" \
  -DFA_BUILD_TESTS=ON -DFA_BUILD_TOOLS=OFF -DFA_CUDA_RESOURCE_USAGE=ON \
  -DFA_GTEST_SOURCE_DIR="${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}" > "$out/build.log" 2>&1 &&
  cmake --build $bdir -j "$jobs" --target flashattn fa_tests >> "$out/build.log" 2>&1
rc=$?
note "build: rc=$rc in $(( $(date +%s) - t0 ))s"
if [ $rc -ne 0 ]; then
  grep -E "error" "$out/build.log" | head -20
  exit 1
fi
# Registers and spills of the backward kernels (ptxas, FA_CUDA_RESOURCE_USAGE).
grep -E "Compiling entry|registers|spill" "$out/build.log" | grep -A2 "bwd_kernel" \
  > "$out/bwd-resources.log" 2>/dev/null

tests=./$bdir/tests/fa_tests
t0=$(date +%s)
filter='*GpuBias*'
pids=()
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 150 $tests --gtest_filter="$filter" \
    > "$out/bias-tests-$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
cat "$out"/bias-tests-*.log > "$out/bias-tests.log" && rm -f "$out"/bias-tests-*.log
note "GPU bias tests (fwd, bwd, refusals): rc=$rc, $(count "$out/bias-tests.log"), $(( $(date +%s) - t0 ))s"
grep -E "^\[  FAILED" "$out/bias-tests.log" | sort -u | head -30
grep -E "error [0-9.e+-]+, same-precision" "$out/bias-tests.log" | head -12

t0=$(date +%s)
GTEST_TOTAL_SHARDS=20 GTEST_SHARD_INDEX=3 timeout 150 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $tests --gtest_filter='*GpuBiasBwd*:GpuBiasRefusal*' > "$out/memcheck.log" 2>&1
note "memcheck (1/20 of the bias backward grid): rc=$? $(count "$out/memcheck.log") $(grep -hE 'ERROR SUMMARY' "$out/memcheck.log" | tail -1), $(( $(date +%s) - t0 ))s"

t0=$(date +%s)
FA_LIBRARY=$lib timeout 150 python3 -m pytest -q -rsx -p no:cacheprovider \
  python/tests/test_attn_bias.py > "$out/python-bias.log" 2>&1
note "python bias tests (CPU and CUDA): rc=$? $(tail -1 "$out/python-bias.log") $(( $(date +%s) - t0 ))s"
grep -E "^(FAILED|ERROR)|assert" "$out/python-bias.log" | head -10

left=$(( 330 - ($(date +%s) - start) ))
if [ "${FA_BIAS_BENCH:-1}" != 0 ] && [ $left -gt 60 ]; then
  t0=$(date +%s)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > "$out/gpu.txt"
  FA_LIBRARY=$lib PYTHONUNBUFFERED=1 timeout $(( left - 10 )) python3 bench/bias_bench.py \
    --json "$out/bias-bench.json" --commit "${FA_COMMIT:-unknown}" --seqlens 4096,8192 \
    --masks none,bias,padding --passes fwd,fwdbwd --backends flashattn,torch-cudnn,torch-flex \
    --repeats 10 --rounds 2 > "$out/bias-bench.txt" 2> "$out/bias-bench.log"
  note "bias bench (4k / 8k, fwd and fwd+bwd): rc=$? in $(( $(date +%s) - t0 ))s"
  cat "$out/bias-bench.txt"
else
  note "bias bench: skipped ($left s left)"
fi

echo "---- summary ($(( $(date +%s) - start ))s)"
printf '%s\n' "${summary[@]}"
