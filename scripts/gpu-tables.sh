#!/usr/bin/env bash
# The standard-vs-FlashAttention tables on a GPU machine (issue 5), after scripts/gpu-check.sh
# built build-gpu/: fa-bench compare (time and peak memory, vanilla until it runs out of memory),
# the default fa-bench sweep (timed: it should take under 3 minutes), the forward against every
# PyTorch SDPA backend with each call's memory (bench/gpu_bench.py --backends ... --memory, one
# round a cell: the balanced rounds of six backends would pass the step's time limit; the
# headline ours-against-FA2 figures come from gpu-check.sh's balanced runs), and the PNG charts.
# Records and charts go to OUTDIR.
#   scripts/gpu-tables.sh OUTDIR [--quick | --compare-only]
# Each step runs under a time limit (FA_STEP_TIMEOUT seconds, default 240) so that a slow step
# (vanilla at 32k-64k keys) cannot eat a GPU session; a step cut short says so in the summary.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-tables.sh OUTDIR [--quick]}
quick=()
[ "${2:-}" = "--quick" ] && quick=(--quick)
all=1
[ "${2:-}" = "--compare-only" ] && all=0
mkdir -p "$out/png"
bench=./build-gpu/tools/fa-bench/fa-bench
summary=()
step() {  # name command...: runs it, logs to OUTDIR/name.log, records rc and seconds
  local name=$1 t0
  shift
  t0=$(date +%s)
  timeout "${FA_STEP_TIMEOUT:-240}" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && rc="124 (cut at ${FA_STEP_TIMEOUT:-240}s)"
  summary+=("$name: rc=$rc in $(( $(date +%s) - t0 ))s")
}
step compare "$bench" compare --device cuda --op fwd --json "$out/compare-fwd.json" --csv "$out/compare-fwd.csv"
step compare-causal "$bench" compare --device cuda --op fwd --causal --json "$out/compare-fwd-causal.json"
[ $all = 1 ] && step sweep "$bench" sweep --device cuda --json "$out/sweep.json" --csv "$out/sweep.csv"
[ $all = 1 ] && step torch python3 bench/gpu_bench.py --lib build-gpu/libflashattn.so --dtypes bf16 \
  --backends flashattn,vanilla,torch-fa2,torch-cudnn,torch-efficient,torch-math --memory --rounds 1 \
  --commit "${FA_COMMIT:-unknown}" "${quick[@]}" --json "$out/torch-fwd.json"
step plots sh -c "python3 bench/plot.py '$out/compare-fwd.json' '$out/png' --prefix compare- &&
  { [ $all = 0 ] || python3 bench/plot.py '$out/sweep.json' '$out/png' --op fwd --prefix sweep-fwd-; } &&
  { [ $all = 0 ] || python3 bench/plot.py '$out/torch-fwd.json' '$out/png' --op fwd --prefix torch-fwd-; }"
echo "---- compare (fwd)"; cat "$out/compare.log" | tail -14
[ $all = 1 ] && { echo "---- torch (fwd)"; sed -n '/^case /,/^$/p' "$out/torch.log"; }
echo "---- summary"; printf '%s\n' "${summary[@]}"
