#!/usr/bin/env bash
# The Hopper fp8 e4m3 forward's check on the GPU machine (issue 30), in one device call (about 5
# minutes on a 16-core H200):
#   scripts/gpu-fp8.sh OUTDIR
# builds the library and the tests for sm_90a (head dims 64, 128, 256; no backward kernels, which
# fp8 does not use), then: the fp8 kernels' ptxas lines; a smoke case under a short limit (a
# hang - an mbarrier phase or a byte count off - shows as a timeout, not a stuck call); the fp8
# grid (tests/test_gpu_sm90_fp8.cpp; the 16-bit kernels sharing the file have the same PTX as
# before the fp8 path, so their grid is gpu-sm90.sh's); memcheck on three small fp8 cases and
# racecheck on one; bench/fp8_fwd_bench.py (fp8
# against bf16, d 128 / 256, s 4k / 16k, causal and not), and python/tests/test_fp8.py where
# python3 has torch and pytest. Summary last.
# Environment: FA_GTEST_SOURCE_DIR (default .deps/googletest: carry .deps/googletest); the bench
# needs torch.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-fp8.sh OUTDIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
summary=()
say() { echo "$*"; summary+=("$*"); }

t0=$(date +%s)
cmake -S . -B build-fp8 -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_HEAD_DIMS="64;128;256" \
  -DFA_CUDA_BACKWARD=OFF -DFA_CUDA_RESOURCE_USAGE=ON -DFA_BUILD_TESTS=ON -DFA_BUILD_TOOLS=OFF \
  -DFA_GTEST_SOURCE_DIR="${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}" > "$out/build.log" 2>&1 &&
  cmake --build build-fp8 -j "$(nproc)" --target flashattn fa_tests >> "$out/build.log" 2>&1
rc=$?
say "build: rc=$rc in $(( $(date +%s) - t0 ))s"
if [ $rc -ne 0 ]; then grep -E "error" "$out/build.log" | head -20; exit 1; fi
# ptxas on the fp8 kernels (FwdTraits<..., true>: mangled ...Lb0ELi2ELb1E) and the V pre-pass.
grep -A4 -E "Compiling entry function '.*(Lb0ELi2ELb1E|vt_kernel)" "$out/build.log" |
  grep -E "Compiling entry|bytes stack frame|Used [0-9]+ registers" > "$out/ptxas-fp8.txt"
say "fp8 kernels' ptxas (registers / spill stores / loads):"
while read -r l; do say "$l"; done < <(paste - - - < "$out/ptxas-fp8.txt" |
  sed -E "s/.*FwdTraitsILi([0-9]+)ENS0_7(Bf16|Fp16)Tag.*stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads.*Used ([0-9]+) registers.*/  fwd d\1 out \2: \5 regs, spills \3 \/ \4/; s/.*vt_kernelILi([0-9]+).*stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads.*Used ([0-9]+) registers.*/  vt d\1: \4 regs, spills \2 \/ \3/" |
  sort -u)
say "wgmma serialized (C7515 / C7520) in $(grep -cE 'C7515|C7520' "$out/build.log") kernels"

tests=./build-fp8/tests/fa_tests
timeout 60 $tests --gtest_filter='Sm90Fp8Layout*:Grid/GpuSm90Fp8.*/0_*' > "$out/smoke.log" 2>&1
rc=$?
say "smoke (layout + d128 plain): rc=$rc $(grep -cE '^\[ +OK' "$out/smoke.log") ok, $(grep -cE '^\[  FAILED' "$out/smoke.log") failed lines"
grep -E "Failure|Which is|max|error" "$out/smoke.log" | head -8
if [ $rc -eq 124 ]; then  # a hang: every later step would hang too
  echo; echo "==== summary ===="; printf '%s\n' "${summary[@]}"; exit 1
fi

timeout 150 $tests --gtest_filter='Grid/GpuSm90Fp8*:GpuSm90Fp8*' > "$out/tests.log" 2>&1
say "fp8 grid: rc=$? $(grep -cE '^\[ +OK' "$out/tests.log") ok, $(grep -cE '^\[  SKIPPED' "$out/tests.log") skipped, $(grep -cE '^\[  FAILED' "$out/tests.log") failed lines"
grep -E "^\[  FAILED" "$out/tests.log" | sort -u | head -30
grep -E "Failure|Which is|max_err" "$out/tests.log" | head -12
# Each case's errors against fp64 (out: ours and the naive fp8 baseline's; LSE: ours and fp32's).
grep -E "^\[ fp8 sm90 \]" "$out/tests.log" > "$out/errors.txt"
say "errors ($out/errors.txt), the first cases:"
while read -r l; do say "  $l"; done < <(head -6 "$out/errors.txt")

# memcheck on d 128 plain, d 64 packed and d 256 (64-key tiles); racecheck on the first.
small='Grid/GpuSm90Fp8.*/0_*:Grid/GpuSm90Fp8.*/12_*:Grid/GpuSm90Fp8.*/14_*'
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $tests --gtest_filter="$small" \
  > "$out/memcheck.log" 2>&1
say "memcheck: rc=$? $(grep -hE 'ERROR SUMMARY' "$out/memcheck.log" | tr '\n' ' ')"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $tests \
  --gtest_filter='Grid/GpuSm90Fp8.*/0_*' > "$out/racecheck.log" 2>&1
say "racecheck: rc=$? $(grep -hE 'RACECHECK SUMMARY' "$out/racecheck.log" | tr '\n' ' ')"

if python3 -c "import torch, pytest" 2>/dev/null; then
  FA_LIBRARY=$PWD/build-fp8/libflashattn.so timeout 60 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_fp8.py > "$out/python.log" 2>&1
  say "python tests/test_fp8.py: rc=$? $(tail -1 "$out/python.log" | cut -c1-150)"
fi

FA_LIBRARY=$PWD/build-fp8/libflashattn.so timeout 150 \
  python3 bench/fp8_fwd_bench.py --json "$out/bench.json" > "$out/bench.log" 2>&1
say "bench: rc=$?"
while read -r l; do say "  $l"; done < <(grep -vE "^\s*$" "$out/bench.log" | tail -12)

echo
echo "==== summary ($(( $(date +%s) - t0 ))s) ===="
printf '%s\n' "${summary[@]}"
