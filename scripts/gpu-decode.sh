#!/usr/bin/env bash
# The KV-cache family's check on the GPU machine (issue 26), in steps that each fit one device
# call (a second call within the machine's 30 s idle window reuses build-gpu):
#   scripts/gpu-decode.sh test OUTDIR    build (sm_90a, every head dim) with the tests; the
#                                        KV-cache GPU tests (4 shards); memcheck, racecheck and
#                                        synccheck on small cases; the Python KV-cache and
#                                        generation tests on CUDA (bf16 Llama logits by the rule);
#                                        the sm90 backward's grid under a time limit. Summary last.
#   scripts/gpu-decode.sh bench OUTDIR HEADS [decode_bench.py args...]
#                                        the decode grid of one head configuration (32/8 or
#                                        32/32) with cuDNN and FA2 in the same run, builds the
#                                        library first when build-gpu lacks it.
#   scripts/gpu-decode.sh ab OUTDIR BASE [decode_bench.py args...]
#                                        an A/B of this tree against BASE (another source tree,
#                                        e.g. `git archive <commit> | tar -x -C .abbase`, carried):
#                                        both libraries built side by side for d 128 only, then
#                                        the same decode cells timed with each, one run after
#                                        the other (cuDNN in both runs as the anchor); default
#                                        cells: batch 1, 32/8, one query, cache 4k / 16k / 128k.
#   scripts/gpu-decode.sh variant OUTDIR "CMAKE ARGS" [decode_bench.py args...]
#                                        the same A/B of this tree as it ships against this tree
#                                        built with CMAKE ARGS (a knob of core/tuning.h, e.g.
#                                        "-DFA_TUNING_KVCACHE_FUSED_MERGE=1"); the variant's
#                                        records are named variant-*.
# Environment: FA_GTEST_SOURCE_DIR (default .deps/googletest: carry it), FA_COMMIT (recorded).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/gpu-decode.sh test|bench|ab|variant OUTDIR [HEADS|BASE|CMAKE ARGS]}
out=${2:?usage: scripts/gpu-decode.sh test|bench|ab|variant OUTDIR [HEADS|BASE|CMAKE ARGS]}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
lib=$PWD/build-gpu/libflashattn.so

build() {  # $1: the targets
  local t0=$(date +%s)
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_BUILD_TESTS=ON \
    -DFA_BUILD_TOOLS=OFF -DFA_GTEST_SOURCE_DIR="${FA_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}" \
    > "$out/build.log" 2>&1 && cmake --build build-gpu -j "$jobs" --target $1 >> "$out/build.log" 2>&1
  local rc=$?
  echo "build ($1): rc=$rc in $(( $(date +%s) - t0 ))s"
  [ $rc -ne 0 ] && { grep -E "error" "$out/build.log" | head -20; exit 1; }
}

count() {  # $1: a gtest log
  echo "$(grep -cE '^\[ +OK' "$1") ok, $(grep -cE '^\[  FAILED' "$1") failed lines, $(grep -cE '^\[  SKIPPED' "$1") skipped"
}

case $mode in
  test)
    build "flashattn fa_tests"
    tests=./build-gpu/tests/fa_tests
    t0=$(date +%s)
    kv='Grid/GpuKvFamily*:Paged/GpuKvFamily*:Fp8/GpuKvFamily*:GpuKvFamilyDispatch*:Grid/GpuKvUpdate*:GpuKvHostile*'
    pids=()
    for i in 0 1 2 3; do
      GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 240 $tests --gtest_filter="$kv" \
        > "$out/kv-tests-$i.log" 2>&1 &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cat "$out"/kv-tests-*.log > "$out/kv-tests.log" && rm -f "$out"/kv-tests-*.log
    echo "kv tests: rc=$rc, $(count "$out/kv-tests.log"), $(( $(date +%s) - t0 ))s"
    grep -E "^\[  FAILED" "$out/kv-tests.log" | sort -u | head -20
    grep -E "max_err|Which is|rule" "$out/kv-tests.log" | head -8

    # Sanitizers side by side: memcheck over the hostile and update cases, racecheck and
    # synccheck over the update grid (the kernels as the library ships them, then as
    # programmatic dependent launches) and the d 64 plain calls.
    t0=$(date +%s)
    san() {  # tool name filter
      timeout 300 compute-sanitizer --tool "$1" --error-exitcode 9 $tests --gtest_filter="$3" \
        > "$out/$2.log" 2>&1
      echo "$2: rc=$? $(count "$out/$2.log") $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$2.log" | tail -1)" \
        > "$out/$2.rc"
    }
    san memcheck memcheck 'GpuKvHostile*:Grid/GpuKvUpdate.CacheBytes*:Grid/GpuKvUpdate.FusedMerge*:*GpuKvFamily.PlainCalls*_d64*' &
    san racecheck racecheck 'Grid/GpuKvUpdate*:Grid/GpuKvFamily.PlainCalls*_d64*' &
    san synccheck synccheck 'Grid/GpuKvUpdate*' &
    wait
    cat "$out"/*.rc; rm -f "$out"/*.rc
    echo "sanitizers: $(( $(date +%s) - t0 ))s"
    grep -hE "^=+ +(Error|Warning)" "$out"/racecheck.log | sort | uniq -c | head -6

    t0=$(date +%s)
    FA_LIBRARY=$lib timeout 240 python3 -m pytest -q -rsx -p no:cacheprovider \
      python/tests/test_kvcache.py python/tests/test_kvcache_generate.py \
      python/tests/test_hf_paged_generate.py python/tests/test_fp8.py > "$out/python-kv.log" 2>&1
    echo "python kv tests: rc=$? $(tail -1 "$out/python-kv.log") $(( $(date +%s) - t0 ))s"
    grep -E "^(FAILED|ERROR)|assert" "$out/python-kv.log" | head -10

    t0=$(date +%s)
    timeout "${FA_SM90_BWD_LIMIT:-150}" $tests \
      --gtest_filter='Grid/GpuSm90Bwd*:GpuSm90BwdFallback*' > "$out/sm90-bwd.log" 2>&1
    echo "sm90 bwd tests: rc=$? $(count "$out/sm90-bwd.log") $(( $(date +%s) - t0 ))s"
    grep -E "^\[  FAILED" "$out/sm90-bwd.log" | sort -u | head -30
    ;;
  bench)
    heads=${3:?usage: scripts/gpu-decode.sh bench OUTDIR HEADS [args]}
    shift 3
    [ -f "$lib" ] || build flashattn
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
    t0=$(date +%s)
    tag=${heads/\//-}
    FA_LIBRARY=$lib PYTHONUNBUFFERED=1 python3 bench/decode_bench.py --heads "$heads" \
      --json "$out/decode-$tag.json" --commit "${FA_COMMIT:-unknown}" "$@" \
      > "$out/decode-$tag.txt" 2> "$out/decode-$tag.log"
    echo "decode bench $heads: rc=$? in $(( $(date +%s) - t0 ))s"
    tail -5 "$out/decode-$tag.log"
    cat "$out/decode-$tag.txt"
    ;;
  ab|variant)
    other=${3:?usage: scripts/gpu-decode.sh ab OUTDIR BASE [args] | variant OUTDIR "CMAKE ARGS" [args]}
    shift 3
    args=("$@")
    [ ${#args[@]} -eq 0 ] && args=(--heads 32/8 --batches 1 --caches 4096,16384,131072 --sq 1
                                  --pages 0 --backends flashattn,torch-cudnn --rounds 2)
    lib_build() {  # source dir, build dir, log name, extra CMake arguments (one word list)
      # shellcheck disable=SC2086
      cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS=90a -DFA_HEAD_DIMS=128 \
        -DFA_BUILD_TESTS=OFF -DFA_BUILD_TOOLS=OFF $4 > "$out/$3.log" 2>&1 &&
        cmake --build "$2" -j "$(( jobs / 2 ))" --target flashattn >> "$out/$3.log" 2>&1
      echo "build $3: rc=$?"
    }
    t0=$(date +%s)
    if [ "$mode" = ab ]; then
      a_lib=$(mkdir -p "$other" && cd "$other" && pwd)/build-ab/libflashattn.so
      b_lib=$PWD/build-ab-new/libflashattn.so
      names=(base new)
      lib_build . build-ab-new new "" & lib_build "$other" "$other/build-ab" base "" & wait
    else
      a_lib=$PWD/build-ab-new/libflashattn.so
      b_lib=$PWD/build-ab-variant/libflashattn.so
      names=(new variant)
      lib_build . build-ab-new new "" & lib_build . build-ab-variant variant "$other" & wait
    fi
    echo "builds: $(( $(date +%s) - t0 ))s"
    for v in "${names[@]}"; do
      l=$b_lib
      [ "$v" = "${names[0]}" ] && l=$a_lib
      FA_LIBRARY=$l python3 bench/decode_bench.py "${args[@]}" --json "$out/ab-$v.json" \
        --commit "$v" > "$out/ab-$v.txt" 2> "$out/ab-$v.log"
      echo "$v: rc=$?"
      grep -E "flashattn|torch" "$out/ab-$v.txt"
    done
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
