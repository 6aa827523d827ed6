#!/usr/bin/env bash
# Fuzzes the C ABI on the CPU backend (tests/fuzz, docs/testing.md "Fuzzing"): installs what is
# missing from Debian (clang, its libFuzzer and OpenMP runtime), builds the fuzz preset
# (build-fuzz), then
#   1. runs every seed of tests/fuzz/corpus/ once (regressions: each must pass), and reports the
#      reproducers in tests/fuzz/found/ (known open bugs: reported, not counted as failures);
#   2. fuzzes for FA_FUZZ_SECONDS (default 120) from a temporary copy of the seeds that passed
#      (FA_FUZZ_SEED / FA_FUZZ_RUNS: a fixed seed and number of inputs, as CI runs it).
# Logs and the crash, timeout and out-of-memory inputs go to build-fuzz/artifacts/ (seeds/ for
# step 1, fresh/ for step 2); the script exits non-zero when a seed of the corpus failed or the
# fresh run found anything.
#   [FA_FUZZ_SECONDS=120] [FA_FUZZ_SEED=N FA_FUZZ_RUNS=N] scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v python3 >/dev/null || need+=(python3)
command -v clang >/dev/null && command -v clang++ >/dev/null || need+=(clang)
if command -v clang >/dev/null &&
   ! ls "$(clang -print-resource-dir)"/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then
  need+=(libclang-rt-dev)  # libFuzzer of Debian's default clang (libclang-rt-14-dev on bookworm)
fi
if ! command -v clang++ >/dev/null ||
   ! echo '#include <omp.h>' | clang++ -fopenmp -x c++ -fsyntax-only - 2>/dev/null; then
  need+=(libomp-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "fuzz: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi

. scripts/env.sh
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$FA_JOBS"

fuzzer=build-fuzz/tests/fuzz/fa_fuzz_api
artifacts=build-fuzz/artifacts
rm -rf "$artifacts"
mkdir -p "$artifacts/seeds" "$artifacts/fresh"
opts=(-timeout=10 -rss_limit_mb=2048)
# Up to three OpenMP threads a call on a machine that may have two cores: let them sleep.
export OMP_WAIT_POLICY=passive
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
first_error() { grep -m1 -E 'invariant broken|ERROR: |runtime error' "$1" | cut -c1-160; }

# One seed, one process, so that every failing seed is named (its log beside its artifact).
run_seed() {
  local log="$artifacts/seeds/$(basename "$1").log"
  if "$fuzzer" "${opts[@]}" -artifact_prefix="$artifacts/seeds/" "$1" >"$log" 2>&1; then
    echo "  pass  $(basename "$1")"
    return 0
  fi
  echo "  FAIL  $(basename "$1"): $(first_error "$log")"
  return 1
}

echo "fuzz: seed corpus (tests/fuzz/corpus)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for seed in tests/fuzz/corpus/*; do
  if run_seed "$seed"; then cp "$seed" "$work/"; else failed=$((failed + 1)); fi
done
if compgen -G "tests/fuzz/found/*" >/dev/null; then
  echo "fuzz: open findings (tests/fuzz/found; not counted)"
  for seed in tests/fuzz/found/*; do run_seed "$seed" || true; done
fi

# FA_FUZZ_SEED and FA_FUZZ_RUNS make the fresh run reproducible (the same inputs every time for
# the same build: CI's, so that it cannot turn red by chance); FA_FUZZ_SECONDS still caps it.
seconds=${FA_FUZZ_SECONDS:-120}
bound=(-max_total_time="$seconds")
[ -n "${FA_FUZZ_SEED:-}" ] && bound+=(-seed="$FA_FUZZ_SEED")
[ -n "${FA_FUZZ_RUNS:-}" ] && bound+=(-runs="$FA_FUZZ_RUNS")
log="$artifacts/fresh/fuzz.log"
echo "fuzz: fresh run (${bound[*]}) from the $(ls "$work" | wc -l) seeds that passed"
status=0
"$fuzzer" "${opts[@]}" -artifact_prefix="$artifacts/fresh/" "${bound[@]}" \
  -print_final_stats=1 "$work" >"$log" 2>&1 || status=$?
grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' "$log" || true
found=$(find "$artifacts/fresh" -type f ! -name '*.log' | wc -l)
if [ "$status" -ne 0 ] || [ "$found" -gt 0 ]; then
  echo "fuzz: the fresh run failed (exit $status): $(first_error "$log")"
  find "$artifacts/fresh" -type f ! -name '*.log' | sed 's/^/  /'
fi
echo "fuzz: ${failed} corpus seed(s) failed; logs and artifacts in $artifacts"
[ "$failed" -eq 0 ] && [ "$status" -eq 0 ] && [ "$found" -eq 0 ]
