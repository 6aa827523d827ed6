#!/usr/bin/env bash
# Same-run A/B of library builds on the GPU machine: builds the unchanged tree's library and one
# library per variant, then times them all in one bench/gpu_bench.py run (--lib-variant: the
# same cells, inputs and rounds, which separate runs, ~0.5% apart on their own, are not).
#   bench/ab.sh patch OUTDIR [PATCH ...]       each patch applied to its own copy of the tree
#                                              (default: every dev/experiments/*.patch)
#   bench/ab.sh cmake OUTDIR NAME='ARGS' ...   the tree built again with those CMake arguments
#                                              (split at spaces): a knob of core/tuning.h,
#                                              pdl0='-DFA_TUNING_SM80_BWD_PDL=0', or a kernel
#                                              configuration's macro,
#                                              n64='-DCMAKE_CUDA_FLAGS=-DFA_SM80_FWD_BLOCK_N_D128=64'
# The tables go to stdout; under OUTDIR each build's log, the records (ab.json, then ab-2.json,
# ... for further argument sets) and their logs. A winner's GPU tests still have to run
# (scripts/gpu-check.sh) before it lands. Environment:
#   FA_AB_BENCH_ARGS    gpu_bench.py arguments after --quick, e.g. "--op bwd --dims 64,128";
#                       several sets separated by ';', one run each ("--dropout 0.17;--op bwd")
#   FA_AB_HEAD_DIMS     build only these head dims' kernels, e.g. "64;128;256"
#   FA_AB_BASE_LIB      the unchanged library (default: built here, in build-ab-base)
#   FA_AB_TEST_FILTER   also build the tests and run these (a GoogleTest filter) on every build
#                       before the benchmark; FA_AB_TEST_BASE=0: not on the unchanged build
#   FA_AB_KERNEL_TIMES  bench/profile_kernels.py --kernel-times cases (d:seqlen:causal,...): the
#                       backward's kernels one by one, every build beside FA2, bf16 and fp16,
#                       into OUTDIR/NAME-ktimes.txt
#   FA_COMMIT (recorded in the JSON: pass the local checkout's, the GPU machine's git metadata
#   may be stale), FA_ARCHS (default 90a), FA_GTEST_SOURCE_DIR (default .deps/googletest)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
usage="usage: bench/ab.sh patch OUTDIR [PATCH ...] | bench/ab.sh cmake OUTDIR NAME='ARGS' ..."
mode=${1:?$usage}
out=${2:?$usage}
shift 2
case $mode in patch | cmake) ;; *) echo "$usage" >&2; exit 2 ;; esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$PWD
export PATH=/usr/local/cuda/bin:$PATH
dims=()
[ -n "${FA_AB_HEAD_DIMS:-}" ] && dims=("-DFA_HEAD_DIMS=${FA_AB_HEAD_DIMS}")
names=() libs=()

build() {  # NAME SRC TESTS(0/1) [CMake arguments...]: SRC's library in SRC/build-ab-NAME
  local name=$1 src=$2 run_tests=$3
  shift 3
  local dir=$src/build-ab-$name log=$out/$name-build.log
  local tests=(-DFA_BUILD_TESTS=OFF) targets=(--target flashattn) with_tests=0
  if [ -n "${FA_AB_TEST_FILTER:-}" ] && [ "$run_tests" = 1 ]; then
    with_tests=1
    tests=(-DFA_BUILD_TESTS=ON "-DFA_GTEST_SOURCE_DIR=${FA_GTEST_SOURCE_DIR:-$root/.deps/googletest}")
    targets=(--target flashattn fa_tests)
  fi
  if ! { cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DFA_ARCHS="${FA_ARCHS:-90a}" \
      -DFA_BUILD_TOOLS=OFF "${tests[@]}" "${dims[@]}" "$@" > "$log" 2>&1 &&
      cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >> "$log" 2>&1; }; then
    echo "== $name: build failed, left out"
    tail -20 "$log"
    return 1
  fi
  if [ $with_tests = 1 ]; then
    "$dir/tests/fa_tests" --gtest_filter="$FA_AB_TEST_FILTER" > "$out/$name-tests.log" 2>&1
    echo "== $name tests ($FA_AB_TEST_FILTER): rc=$? $(grep -cE '^\[ +OK' "$out/$name-tests.log") ok," \
      "$(grep -cE '^\[  FAILED' "$out/$name-tests.log") failed lines"
  fi
  names+=("$name")
  libs+=("$dir/libflashattn.so")
}

if [ -n "${FA_AB_BASE_LIB:-}" ]; then
  names+=(base) libs+=("$FA_AB_BASE_LIB")
else
  build base "$root" "${FA_AB_TEST_BASE:-1}" || exit 1
fi
if [ "$mode" = patch ]; then
  patches=("$@")
  [ ${#patches[@]} -eq 0 ] && patches=(dev/experiments/*.patch)
  for patch in "${patches[@]}"; do
    name=$(basename "$patch" .patch)
    case $patch in /*) ;; *) patch=$root/$patch ;; esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/ab-$name.XXXX")
    # The tree without build outputs; the patch applied there only.
    tar -C "$root" --exclude='./build*' --exclude='./.git' -cf - . | tar -C "$dir" -xf -
    if ! (cd "$dir" && git apply "$patch"); then
      echo "== $name: does not apply, left out"
      continue
    fi
    build "$name" "$dir" 1
  done
else
  [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
  for spec in "$@"; do
    name=${spec%%=*}
    if [ "$name" = "$spec" ] || [ -z "$name" ]; then echo "not NAME='ARGS': $spec" >&2; exit 2; fi
    read -ra args <<< "${spec#*=}"
    build "$name" "$root" 1 "${args[@]}"
  done
fi
[ ${#names[@]} -gt 1 ] || { echo "no variant built"; exit 1; }

if [ -n "${FA_AB_KERNEL_TIMES:-}" ]; then
  for i in "${!names[@]}"; do
    for dt in bf16 fp16; do
      python3 bench/profile_kernels.py --kernel-times --op bwd --backend flashattn,fa2 \
        --lib "${libs[$i]}" --dtype $dt --cases "$FA_AB_KERNEL_TIMES" 2>> "$out/${names[$i]}-ktimes.log"
    done > "$out/${names[$i]}-ktimes.txt"
    echo "== ${names[$i]} kernel times: $(grep -c '^==' "$out/${names[$i]}-ktimes.txt") cases"
  done
fi

variants=()
for i in "${!names[@]}"; do
  [ "$i" -gt 0 ] && variants+=(--lib-variant "${names[$i]}=${libs[$i]}")
done
IFS=';' read -ra arg_sets <<< "${FA_AB_BENCH_ARGS:-}"
[ ${#arg_sets[@]} -eq 0 ] && arg_sets=("")
i=0
for args in "${arg_sets[@]}"; do
  i=$((i + 1)); suffix=""; [ $i -gt 1 ] && suffix="-$i"
  echo "== gpu_bench.py --quick $args (ab$suffix.json)"
  # shellcheck disable=SC2086  # $args: the set's arguments, word-split on purpose
  python3 bench/gpu_bench.py --lib "${libs[0]}" "${variants[@]}" --quick $args \
    --json "$out/ab$suffix.json" --commit "${FA_COMMIT:-unknown}" 2> "$out/ab$suffix.log"
  echo "rc=$?"
done
