#!/usr/bin/env bash
# The Turing family's check on a newer GPU (issue 33), in one device call: Turing's instruction
# stream run through the JIT path. Builds the library with FA_ARCHS="90a;75-virtual" (the rest of
# the library as sm_90a SASS, cuda-sm75 as compute_75 PTX alone, which the driver compiles for
# this GPU at the first launch) and the tests; then
#   - the sm75 kernels' registers and spills: their PTX through ptxas for sm_75 (what a Turing
#     GPU would run) and for this GPU (resources.log; the driver's JIT may differ slightly);
#   - the cuda-sm75 grid forced through Tuning::sm75 (tests/test_gpu_sm75.cpp): fp16 cases of
#     the GPU grid, padded head dims, the bf16 / wide-backward refusals, the LSE-less call; the
#     backward's grid (d <= 128: gradients by the rule) and its deterministic repeats;
#   - memcheck, racecheck and synccheck on a few cases (forward: causal packed d 64, dropout
#     d 128, d 40 padded with a window, wide d 256; backward: causal packed d 64, dropout d 128,
#     d 40 padded with a window);
# and prints a summary last. Logs (6 files) in OUTDIR. The sm80 backward's kernels are left out
# (-DFA_CUDA_BACKWARD=OFF: minutes of compile time), the Turing backward's built
# (-DFA_SM75_BACKWARD=ON).
#   scripts/gpu-sm75.sh OUTDIR [gtest filter of the grid, default every GpuSm75 test]
# Environment: FA_GTEST_SOURCE_DIR (default .deps/googletest: carry .deps/googletest).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-sm75.sh OUTDIR [gtest filter]}
filter=${2:-'Grid/GpuSm75.*:Grid/GpuSm75Bwd.*:GpuSm75*'}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
build=build-sm75
t0=$(date +%s)
cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS="90a;75-virtual" \
  -DFA_CUDA_BACKWARD=OFF -DFA_SM75_BACKWARD=ON -DFA_BUILD_TESTS=ON -DFA_BUILD_TOOLS=OFF \
  -DFA_GTEST_SOURCE_DIR="${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}" > "$out/build.log" 2>&1 &&
  cmake --build $build -j "$(nproc)" --target fa_tests >> "$out/build.log" 2>&1
rc=$?
build_line="build: rc=$rc in $(( $(date +%s) - t0 ))s"
echo "$build_line"
[ $rc -ne 0 ] && { grep -E "error" "$out/build.log" | head -20; exit 1; }

# Registers and spills of every sm75 kernel, from its PTX (compiled again here, as the build
# did, to a file): for sm_75 (a Turing GPU's compile) and for this GPU (what the JIT path runs).
here=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
rsp=$build/CMakeFiles/fa_cuda_sm75_objects.dir/includes_CUDA.rsp
ptxdir=$(mktemp -d)
ls $build/CMakeFiles/fa_cuda_sm75_objects.dir/src/cuda/instantiations/ | grep '\.o$' |
  sed 's/\.cu\.o$//' | xargs -P "$(nproc)" -I{} nvcc -DFA_WITH_CUDA=1 --options-file "$rsp" \
  -O3 -DNDEBUG --expt-relaxed-constexpr -std=c++17 -gencode arch=compute_75,code=compute_75 \
  -x cu -ptx -o "$ptxdir/{}.ptx" "src/cuda/instantiations/{}.cu"
for ptx in "$ptxdir"/*.ptx; do
  for arch in sm_75 "sm_$here"; do
    echo "== $(basename "$ptx" .ptx) $arch"
    ptxas -arch=$arch -v -o /dev/null "$ptx" 2>&1 | grep -E "registers|spill"
  done
done > "$out/resources.log" 2>&1
rm -rf "$ptxdir"
spills=$(grep -E "spill stores" "$out/resources.log" | grep -vc " 0 bytes spill stores")

tests=./$build/tests/fa_tests
t0=$(date +%s)
timeout 360 $tests --gtest_filter="$filter" > "$out/tests.log" 2>&1
test_rc=$?
test_line="tests: rc=$test_rc in $(( $(date +%s) - t0 ))s, $(grep -cE '^\[ +OK' "$out/tests.log") ok, $(grep -cE '^\[  SKIPPED' "$out/tests.log") skipped, $(grep -cE '^\[  FAILED' "$out/tests.log") failed lines"

small='Grid/GpuSm75.*s256x512_d64_causal*:Grid/GpuSm75.*_d128_drop*:Grid/GpuSm75.*_d40_win50*:Grid/GpuSm75.*s256x512_d256'
small+=':Grid/GpuSm75Bwd.*s256x512_d64_causal*:Grid/GpuSm75Bwd.*_d128_drop*:Grid/GpuSm75Bwd.*_d40_win50*'
san_lines=()
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $tests --gtest_filter="$small" \
    > "$out/$tool.log" 2>&1
  san_lines+=("$tool: rc=$? $(grep -cE '^\[ +OK' "$out/$tool.log") ok, $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$out/$tool.log" | tr '\n' ' ')")
done

echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "$build_line"
echo "sm75 kernels with spills (sm_75 or sm_$here): $spills (resources.log)"
grep -E "^\[  FAILED" "$out/tests.log" | head -30
grep -E "Failure|Which is|max_err|error" "$out/tests.log" | head -10
echo "$test_line"
printf '%s\n' "${san_lines[@]}"
