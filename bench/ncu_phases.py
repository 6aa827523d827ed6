#!/usr/bin/env python3
"""Where a kernel's warps wait, by phase: reads the per-instruction SASS pages that
bench/ncu_compare.sh writes (ncu --page source --csv --print-source sass) and prints, per file,
the stall reasons and the instruction mix of the whole kernel, of the code before its main
loop, of the loop, split at its barriers, and of the code after it.

The main loop is taken as the address range from the first to the last instruction executed
at least --loop-fraction times as often as the most executed one (its body runs once a step;
the prologue and epilogue once a block). Each loop segment ends with a BAR instruction, so
"segment 2" of our backward is what runs between its first and second barrier of a step.

  python3 bench/ncu_phases.py OUT/ours-sass.csv OUT/fa2-sass.csv [--top 6]
"""
import argparse
import collections
import csv
import signal
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def count(n):
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def read(path):
    """The instructions of one SASS page: (opcode, executed, samples, {stall: samples})."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if "Source" in r and SAMPLES in r), None)
    if header_at is None:
        raise SystemExit(f"{path}: no SASS source table (columns 'Source' and '{SAMPLES}')")
    header = rows[header_at]
    col = {name: i for i, name in enumerate(header)}
    stalls = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    out = []
    for r in rows[header_at + 1:]:
        if len(r) < len(header):
            continue
        out.append((opcode(r[col["Source"]]), number(r[col[EXECUTED]]), number(r[col[SAMPLES]]),
                    {n[len("stall_"):]: number(r[col[n]]) for n in stalls}))
    if not out:
        raise SystemExit(f"{path}: the SASS table has no instructions")
    return out


def summary(instrs, top):
    stalls, mix = collections.Counter(), collections.Counter()
    for op, executed, _, by_reason in instrs:
        stalls.update(by_reason)
        mix[op] += executed
    total = sum(s for _, _, s, _ in instrs)
    reasons = "-"
    if total:
        reasons = " ".join(f"{k} {v / total:.0%}" for k, v in stalls.most_common(top) if v > 0)
    ops = " ".join(f"{k} {count(v)}" for k, v in mix.most_common(top) if v > 0)
    return total, reasons, ops


def phases(instrs, loop_fraction):
    most = max(executed for _, executed, _, _ in instrs)
    hot = [i for i, (_, executed, _, _) in enumerate(instrs) if executed >= loop_fraction * most]
    first, last = hot[0], hot[-1]
    out = [("before the loop", instrs[:first])]
    start = first
    for i in range(first, last + 1):
        if instrs[i][0] == "BAR" or i == last:
            out.append((f"loop segment {len(out)}", instrs[start:i + 1]))
            start = i + 1
    out.append(("after the loop", instrs[last + 1:]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="+", help="SASS pages (CSV) from bench/ncu_compare.sh")
    ap.add_argument("--top", type=int, default=6, help="stall reasons and opcodes shown per line")
    ap.add_argument("--loop-fraction", type=float, default=0.3,
                    help="executed count, relative to the most executed instruction, that marks "
                         "the main loop (default 0.3)")
    args = ap.parse_args()
    if not 0 < args.loop_fraction <= 1:
        ap.error("--loop-fraction must be in (0, 1]")
    for path in args.pages:
        instrs = read(path)
        total, reasons, ops = summary(instrs, args.top)
        print(f"== {path}: {total:.0f} stall samples")
        print(f"   whole kernel: {reasons}")
        print(f"                 {ops}")
        for name, part in phases(instrs, args.loop_fraction):
            samples, reasons, ops = summary(part, args.top)
            if samples == 0 and not any(executed for _, executed, _, _ in part):
                continue  # code that never ran in the profiled launch (deterministic mode's)
            share = samples / total if total else 0.0
            print(f"   {name:<16} {samples:8.0f} ({share:5.1%})  {reasons}")
            if ops:
                print(f"   {'':<16} {'':8} {'':7}  {ops}")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    sys.exit(main())
