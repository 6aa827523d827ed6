#!/usr/bin/env bash
# Ring attention on CUDA tensors (issue 35) on ONE GPU, in one device call:
#   scripts/gpu-ring.sh OUTDIR
# Builds (sm_90a, head dims 64 and 128 only: the ring grid's d 40 runs on the d 64 kernels; the
# tests and the NCCL check) into build-ring-gpu, then
#   1. the ring GPU tests (tests/test_gpu_ring.cpp: R = 1..4 ranks as threads with a stream each
#      on this GPU, the in-process device communicator, against the fp64 reference by the rule)
#      and the CPU ring suite in the same binary; with them tests/test_gpu_fp32_out.cpp (the
#      fp32 out / dq / dk / dv epilogues the ring's block calls use; d 256 skipped in this build);
#   2. compute-sanitizer memcheck and racecheck on two small cases (R 2 zig-zag causal, R 3
#      contiguous non-causal; racecheck sees each rank's kernels, not the cross-stream ordering);
#   3. ring_nccl_check: a one-rank NCCL communicator on this GPU (a self transfer through
#      start / wait, a one-rank ring forward against fa_forward bit for bit);
#   4. python/tests/test_ring.py (CPU cases over gloo, and the CUDA cases: nccl with a GPU per
#      rank where there are enough GPUs, else every rank on GPU 0 over gloo, host-staged);
# and prints a summary last. Files in OUTDIR (at most 6): build.log, ring-tests.log,
# memcheck.log, racecheck.log, nccl-check.log, python-ring.log.
# Environment: FA_GTEST_SOURCE_DIR (default .deps/googletest: carry .deps/googletest).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-ring.sh OUTDIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0  # the lending machines' rule (no NVLink multicast)
build=build-ring-gpu
summary=()

t0=$(date +%s)
cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_HEAD_DIMS="64;128" \
  -DFA_BUILD_TESTS=ON -DFA_BUILD_TOOLS=OFF \
  -DFA_GTEST_SOURCE_DIR="${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}" > "$out/build.log" 2>&1 &&
  cmake --build $build -j "$(nproc)" --target flashattn fa_tests fa_ring_nccl_check \
    >> "$out/build.log" 2>&1
rc=$?
summary+=("build: rc=$rc in $(( $(date +%s) - t0 ))s")
if [ $rc -ne 0 ]; then
  grep -E "error" "$out/build.log" | head -20
  printf '%s\n' "${summary[@]}"
  exit 1
fi
tests=./$build/tests/fa_tests

count() {  # $1: a gtest log
  echo "$(grep -cE '^\[ +OK' "$1") ok, $(grep -cE '^\[  FAILED' "$1") failed lines, $(grep -cE '^\[  SKIPPED' "$1") skipped"
}

t0=$(date +%s)
timeout 300 $tests --gtest_filter='*Ring*:*GpuFp32Out*' > "$out/ring-tests.log" 2>&1
summary+=("ring tests: rc=$? $(count "$out/ring-tests.log") in $(( $(date +%s) - t0 ))s")
failed=$(grep -E "^\[  FAILED" "$out/ring-tests.log" | sort -u | head -12)
rule=$(grep -E "error .* naive error|rank [0-9]|Which is" "$out/ring-tests.log" | head -6)

t0=$(date +%s)
small='Grid/GpuRing.*/0_R2_zigzag_*:Grid/GpuRing.*/7_R3_contig_*'
san() {  # tool
  timeout 240 compute-sanitizer --tool "$1" --error-exitcode 9 $tests --gtest_filter="$small" \
    > "$out/$1.log" 2>&1
  echo "$1: rc=$? $(count "$out/$1.log") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$1.log" | tail -1)"
}
san_lines=$( (san memcheck & san racecheck & wait) )
summary+=("sanitizers ($(( $(date +%s) - t0 ))s):" "$san_lines")

t0=$(date +%s)
timeout 120 ./$build/tests/fa_ring_nccl_check > "$out/nccl-check.log" 2>&1
summary+=("ring_nccl_check: rc=$? ($(tr '\n' ';' < "$out/nccl-check.log" | cut -c1-200)) in $(( $(date +%s) - t0 ))s")

t0=$(date +%s)
FA_LIBRARY=$PWD/$build/libflashattn.so timeout 240 python3 -m pytest -q -rsx -p no:cacheprovider \
  python/tests/test_ring.py > "$out/python-ring.log" 2>&1
summary+=("python test_ring.py: rc=$? $(tail -1 "$out/python-ring.log") in $(( $(date +%s) - t0 ))s")
py_failed=$(grep -E "^(FAILED|ERROR)|rank [0-9]+:" "$out/python-ring.log" | head -8)

echo "== failures"
[ -n "$failed" ] && echo "$failed"
[ -n "$rule" ] && echo "$rule"
[ -n "$py_failed" ] && echo "$py_failed"
echo "== summary ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
printf '%s\n' "${summary[@]}"
