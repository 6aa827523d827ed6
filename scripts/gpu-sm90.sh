#!/usr/bin/env bash
# The Hopper-native forward's check on the GPU machine (issue 25), in two steps that each fit one
# device call:
#   scripts/gpu-sm90.sh test OUTDIR    build (sm_90a) with the tests; the wgmma self-test, the
#                                      cuda-sm90 grid under its three schedules and the fallback
#                                      assertions; memcheck, racecheck and synccheck on a small
#                                      subset. Summary last.
#   scripts/gpu-sm90.sh bench OUTDIR [launch|schedules|d64]
#                                      the quick forward grid (bf16) with the library as it ships
#                                      (cuda-sm90 the default forward on sm90) beside builds with
#                                      one lever changed each, in one bench/ab.sh cmake run (the
#                                      ablation's tables): `launch` (default) the static walk for
#                                      tiles of one length, one block a tile, 80 keys at d 256;
#                                      `schedules` schedules 0 and 1 and cuda-sm80; `d64` two and
#                                      three consumer warpgroups always (the default picks by
#                                      length) and 192 keys a tile, d 64 only (four small builds).
#                                      (launch: four builds and the bench, over 9 minutes at
#                                      05243cc: the device call's limit cut its d 256 cells; run
#                                      `FA_AB_BASE_LIB=... ` or fewer variants where time is short.)
#   scripts/gpu-sm90.sh bwd OUTDIR     the backward (Tuning::sm90_bwd on in these builds): its
#                                      tests, racecheck / memcheck, the deterministic mode's cost
#                                      and the A/B against 128 queries a step at d 64, overlap
#                                      off and cuda-sm80 (about 8 minutes).
# Environment: FA_GTEST_SOURCE_DIR (default .deps/googletest: carry .deps/googletest; the bench
# step builds the tools too, so carry .deps/CLI11, .deps/fmt and .deps/nlohmann_json for it),
# FA_COMMIT.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/gpu-sm90.sh test|bench OUTDIR}
out=${2:?usage: scripts/gpu-sm90.sh test|bench OUTDIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
case $mode in
  test)
    t0=$(date +%s)
    cmake -S . -B build-sm90 -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_CUDA_RESOURCE_USAGE=ON \
      -DFA_BUILD_TESTS=ON -DFA_BUILD_TOOLS=OFF \
      -DFA_GTEST_SOURCE_DIR="${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}" > "$out/build.log" 2>&1 &&
      cmake --build build-sm90 -j "$(nproc)" --target fa_tests >> "$out/build.log" 2>&1
    rc=$?
    echo "build: rc=$rc in $(( $(date +%s) - t0 ))s"
    [ $rc -ne 0 ] && { grep -E "error" "$out/build.log" | head -20; exit 1; }
    grep -A2 "sm90.*fwd_kernel" "$out/build.log" | grep -E "registers|spill" | sort | uniq -c | head
    # ptxas serializing the wgmma pipeline (C7515) undoes the overlap: say so loudly.
    echo "wgmma serialized (C7515) in $(grep -c C7515 "$out/build.log") kernels"
    tests=./build-sm90/tests/fa_tests
    # Each schedule alone on two small cases first, under a time limit: a schedule that hangs
    # (an mbarrier phase or a named barrier miscounted) is told apart from those that do not.
    for sched in 0 1 2; do
      FA_TEST_SM90_SCHEDULES=$sched timeout 60 $tests \
        --gtest_filter='Grid/GpuSm90*bf16*s128x128_d64*:Grid/GpuSm90*bf16*s113x203_d128*' \
        > "$out/smoke$sched.log" 2>&1
      echo "smoke schedule $sched: rc=$? $(grep -cE '^\[ +OK' "$out/smoke$sched.log") ok, $(grep -cE '^\[  FAILED' "$out/smoke$sched.log") failed lines"
      grep -E "Failure|Which is|max_err|error" "$out/smoke$sched.log" | head -6
    done
    timeout 300 $tests --gtest_filter='Shapes/GpuWgmma*:Grid/GpuSm90*:GpuSm90Fallback*' \
      > "$out/tests.log" 2>&1
    echo "tests: rc=$? $(grep -cE '^\[ +OK' "$out/tests.log") ok, $(grep -cE '^\[  FAILED' "$out/tests.log") failed lines"
    grep -E "^\[  FAILED" "$out/tests.log" | head -30
    grep -E "Failure|Which is" "$out/tests.log" | head -10
    small='Grid/GpuSm90*s113x203_d64*:Grid/GpuSm90*s1x129_d128*'
    for tool in memcheck racecheck synccheck; do
      FA_TEST_SM90_SCHEDULES=2 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 $tests \
        --gtest_filter="$small" > "$out/$tool.log" 2>&1
      echo "$tool: rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$out/$tool.log" | tr '\n' ' ')"
    done
    ;;
  bench)
    # The library as it ships (cuda-sm90 the default forward) is the base; each variant one lever.
    dims="64;128;256" bench_dims=64,128,256
    case ${3:-launch} in
      schedules)  # the consumers' schedules, each with the default launch
        variants=(sm90s0="-DFA_TUNING_SM90_FWD_SCHEDULE=0" sm90s1="-DFA_TUNING_SM90_FWD_SCHEDULE=1"
                  sm80="-DFA_TUNING_SM90_FWD=0") ;;
      launch)  # the defaults (ping-pong, dynamic scheduler, 64 keys a tile at d 256), one lever off
        variants=(sm90static="-DFA_TUNING_SM90_FWD_PERSISTENT=3"
                  sm90pertile="-DFA_TUNING_SM90_FWD_PERSISTENT=0"
                  sm90n80="-DFA_TUNING_SM90_FWD_D256_BLOCK_N=80") ;;
      d64)  # d 64 only: the consumer warpgroups by length (the default) against two and three
        # always, and 192 keys a tile with two (FlashAttention-3's d 64 tile)
        dims="64" bench_dims=64
        # and the sm90 grid's d 64 kernel cases on every build first
        export FA_AB_TEST_FILTER=${FA_AB_TEST_FILTER:-'Grid/GpuSm90*_d64*:Grid/GpuSm90*_d40*'}
        variants=(sm90d64c2="-DFA_TUNING_SM90_FWD_D64_CONSUMERS=2"
                  sm90d64c3="-DFA_TUNING_SM90_FWD_D64_CONSUMERS=3"
                  sm90d64n192="-DFA_TUNING_SM90_FWD_D64_BLOCK_N=192 -DFA_TUNING_SM90_FWD_D64_CONSUMERS=2") ;;
      *) echo "bench sets: launch (default), schedules, d64" >&2; exit 2 ;;
    esac
    FA_AB_HEAD_DIMS="$dims" FA_AB_BENCH_ARGS="--dims $bench_dims" bench/ab.sh cmake "$out" \
      "${variants[@]}"
    ;;
  bwd)
    # The Hopper backward (issue 28), four builds at once with Tuning::sm90_bwd on (the knob's
    # shipped default is off): the defaults (overlapped schedule) and 128 queries a step at
    # d 64, both with the tests; overlap off; and the default library (cuda-sm80's backward).
    # Then the grid with the deterministic cases (20 reruns bit for bit) and the fallbacks on the
    # first, the d 64 grid on the second, racecheck and memcheck on three cases, the
    # deterministic mode against the default one, and the same-run A/B of the four (bf16, d 64 /
    # 128, s 1k / 4k / 16k, full and causal, cuDNN beside).
    export FA_GTEST_SOURCE_DIR=${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}
    t0=$(date +%s)
    bld() {  # NAME JOBS TESTS(0/1) CMAKE-ARGS...: build-sm90bwd-NAME
      local n=$1 j=$2 t=$3; shift 3
      local tg=(--target flashattn) ta=(-DFA_BUILD_TESTS=OFF)
      [ "$t" = 1 ] && tg+=(fa_tests) ta=(-DFA_BUILD_TESTS=ON "-DFA_GTEST_SOURCE_DIR=$FA_GTEST_SOURCE_DIR")
      cmake -S . -B "build-sm90bwd-$n" -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_HEAD_DIMS="64;128" \
        -DFA_CUDA_RESOURCE_USAGE=ON -DFA_BUILD_TOOLS=OFF "${ta[@]}" "$@" > "$out/build-$n.log" 2>&1 &&
        cmake --build "build-sm90bwd-$n" -j "$j" "${tg[@]}" >> "$out/build-$n.log" 2>&1
      echo "build $n: rc=$?"
    }
    bld base 6 1 -DFA_TUNING_SM90_BWD=1 &
    bld m128 6 1 -DFA_TUNING_SM90_BWD=1 -DFA_TUNING_SM90_BWD_D64_BLOCK_M=128 &
    bld ovl0 2 0 -DFA_TUNING_SM90_BWD=1 -DFA_TUNING_SM90_BWD_OVERLAP=0 &
    bld sm80 2 0 -DFA_TUNING_SM90_BWD=0 &
    wait
    echo "builds: $(( $(date +%s) - t0 ))s; wgmma serialized (C7512 / C7515 / C7520): $(cat "$out"/build-*.log | grep -cE 'C7512|C7515|C7520')"
    tests=./build-sm90bwd-base/tests/fa_tests
    count() { echo "$(grep -cE '^\[ +OK' "$1") ok, $(grep -cE '^\[  FAILED' "$1") failed lines"; }
    timeout 150 $tests --gtest_filter='Grid/GpuSm90Bwd*:Det/GpuSm90Bwd*:GpuSm90BwdFallback*:Sm90Bwd*' > "$out/tests.log" 2>&1
    echo "tests: rc=$? $(count "$out/tests.log")"
    grep -E "^\[  FAILED" "$out/tests.log" | sort -u | head -20
    timeout 100 ./build-sm90bwd-m128/tests/fa_tests --gtest_filter='Grid/GpuSm90Bwd*d64*:Grid/GpuSm90Bwd*d60*:Det/GpuSm90Bwd*d64*' \
      > "$out/tests-m128.log" 2>&1
    echo "tests, 128 queries a step at d 64: rc=$? $(count "$out/tests-m128.log")"
    grep -E "^\[  FAILED" "$out/tests-m128.log" | sort -u | head -10
    small='Det/GpuSm90Bwd.*/1_*:Det/GpuSm90Bwd.*/4_*:Grid/GpuSm90Bwd.*s113x203_d128*causal*'
    for tool in racecheck memcheck; do
      timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $tests --gtest_filter="$small" \
        > "$out/$tool.log" 2>&1
      echo "$tool: rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tr '\n' ' ')"
    done
    lib() { echo "build-sm90bwd-$1/libflashattn.so"; }
    python3 bench/gpu_bench.py --op bwd --lib "$(lib base)" --backends flashattn,flashattn-det \
      --dtypes bf16 --seqlens 4096,16384 --dims 64,128 --rounds 2 --json "$out/det.json" \
      --commit "${FA_COMMIT:-unknown}" > "$out/det.txt" 2> "$out/det.log"
    echo "deterministic vs default: rc=$?"; grep -vE "^\s*$" "$out/det.txt" | tail -10
    python3 bench/gpu_bench.py --op bwd --no-det --lib "$(lib base)" --lib-variant m128="$(lib m128)" \
      --lib-variant ovl0="$(lib ovl0)" --lib-variant sm80="$(lib sm80)" --backends flashattn,torch-cudnn \
      --dtypes bf16 --seqlens 1024,4096,16384 --dims 64,128 --rounds 2 --json "$out/ab.json" \
      --commit "${FA_COMMIT:-unknown}" > "$out/ab.txt" 2> "$out/ab.log"
    echo "A/B: rc=$? ($(( $(date +%s) - t0 ))s in all)"; grep -vE "^\s*$" "$out/ab.txt" | tail -16
    ;;
  *) echo "usage: scripts/gpu-sm90.sh test OUTDIR | bench OUTDIR [launch|schedules|d64] | bwd OUTDIR" >&2; exit 2 ;;
esac
