#!/usr/bin/env bash
# Profiles our sm80 forward and PyTorch's FlashAttention-2 forward on the same shape with Nsight
# Compute (GPU machine), writing the detail pages and per-instruction source counters to OUTDIR.
# With --op bwd the main backward kernels instead (ours: bwd_kernel; FA2: its dq_dk_dv kernel).
# Both run through bench/profile_kernels.py (its --d, --s, --causal, --dtype, --op pass
# through); it ends with bench/ncu_phases.py on both SASS pages (also in OUTDIR/phases.txt).
#   [FA_LIB=build-gpu/libflashattn.so] bench/ncu_compare.sh OUTDIR [--d 128] [--s 4096] [--causal]
#     [--op bwd]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/ncu_compare.sh OUTDIR [profile args]}
shift
mkdir -p "$out"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats
  --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats
  --section MemoryWorkloadAnalysis --section SourceCounters)
run() {  # name kernel-regex command...
  local name=$1 kernel=$2
  shift 2
  ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 \
    "${sections[@]}" -f -o "$out/$name" "$@" > "$out/$name-ncu.log" 2>&1
  ncu --import "$out/$name.ncu-rep" --page details > "$out/$name-details.txt" 2>&1
  ncu --import "$out/$name.ncu-rep" --page source --csv --print-source sass > "$out/$name-sass.csv" 2>&1
}
ours_kernel=fwd_kernel fa2_kernel=flash_fwd
case " $* " in *" --op bwd "*) ours_kernel=bwd_kernel fa2_kernel=flash_bwd_dq_dk_dv ;; esac
run ours "$ours_kernel" python3 bench/profile_kernels.py --backend flashattn \
  --lib "${FA_LIB:-build-gpu/libflashattn.so}" "$@"
run fa2 "$fa2_kernel" python3 bench/profile_kernels.py --backend fa2 "$@"
for n in ours fa2; do
  echo "== $n"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|No Eligible|Executed Instructions  |Theoretical Occupancy|Local Memory Spill" "$out/$n-details.txt" | head -14
done
# Where each kernel's warps wait: before its main loop, per barrier segment of the loop, after it.
python3 "$(dirname "$0")/ncu_phases.py" "$out/ours-sass.csv" "$out/fa2-sass.csv" | tee "$out/phases.txt"
