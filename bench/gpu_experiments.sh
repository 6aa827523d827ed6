#!/usr/bin/env bash
# Measures each kernel experiment of dev/experiments/ beside the default build, in one run on the
# GPU machine: every patch is applied to its own copy of the tree, built (library only) and
# benchmarked with bench/gpu_bench.py --quick, and the default build is benchmarked in the same
# run for the ratios. Tables on stdout, JSON and logs under OUTDIR. The GPU tests of a winner
# still have to run (scripts/gpu-check.sh) before it lands.
#   bench/gpu_experiments.sh OUTDIR [patch ...]      (default: every dev/experiments/*.patch)
# Environment: FA_TUNE_BENCH_ARGS (e.g. "--dims 128,256"; several sets separated by ';', one
# benchmark each, e.g. "--dropout 0.17;--op bwd --dropout 0.17"), FA_TUNE_HEAD_DIMS (e.g.
# "64;128;256": build only those head dims), FA_TUNE_TEST_FILTER (run those GPU tests on every
# build first; FA_EXP_TEST_DEFAULT=0: not on the unchanged build, whose tests a gpu-check already
# ran), FA_COMMIT (recorded in the JSON: pass the local checkout's, the GPU machine's git
# metadata may be stale).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu_experiments.sh OUTDIR [patch ...]}
shift
mkdir -p "$out"
patches=("$@")
[ ${#patches[@]} -eq 0 ] && patches=(dev/experiments/*.patch)
root=$PWD
run() {  # name dir [tests]: build dir's library with bench/gpu_tune.sh and print its table
  (cd "$2" && FA_TUNE_NAME=$1 FA_TUNE_TEST_FILTER=${3-${FA_TUNE_TEST_FILTER:-}} \
    bench/gpu_tune.sh "$out/$1" > "$out/$1.txt" 2>&1)
  echo "== $1"
  tail -n +2 "$out/$1.txt" | tail -44
}
if [ "${FA_EXP_TEST_DEFAULT:-1}" = 0 ]; then run default "$root" ""; else run default "$root"; fi
for patch in "${patches[@]}"; do
  name=$(basename "$patch" .patch)
  dir=$(mktemp -d "/tmp/exp-$name.XXXX")
  # The tree without build outputs; the patch applied there only.
  tar -C "$root" --exclude='./build*' --exclude='./.git' -cf - . | tar -C "$dir" -xf -
  if ! (cd "$dir" && git apply "$root/$patch"); then
    echo "== $name: does not apply"
    continue
  fi
  run "$name" "$dir"
done
