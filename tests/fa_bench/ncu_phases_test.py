#!/usr/bin/env python3
"""bench/ncu_phases.py on a synthetic SASS page: the loop is found from the executed counts, split
at its barriers, and each phase's samples and stall shares are the page's; a page without the
SASS table is refused with its name."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "ncu_phases.py")
HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed", "stall_barrier",
          "stall_long_sb", "stall_wait", "stall_barrier (Not Issued)"]
# (source, executed, samples by reason): a prologue, a loop of two barrier-separated segments
# run 100 times, a segment that never ran, and an epilogue.
PAGE = [
    ("IMAD R1, R2, R3, RZ", 1, {"wait": 4}),
    ("LDG.E R4, desc[UR4][R2.64]", 1, {"long_sb": 6}),
    ("HMMA.16816.F32.BF16 R8, R12, R16, R8", 100, {"wait": 30}),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 100, {"barrier": 20}),
    ("@P0 REDG.E.ADD.F32x2 desc[UR4][R2.64], R8", 100, {"long_sb": 25}),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 0, {}),
    ("IADD3 R5, R5, 0x1, RZ", 0, {}),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 0, {}),
    ("BRA 0x100", 100, {"wait": 5}),
    ("STG.E.128 desc[UR4][R2.64], R8", 1, {"long_sb": 10}),
]


def write(path, rows):
    with open(path, "w") as f:
        f.write('"Kernel Name","test"\n')
        f.write(",".join(f'"{h}"' for h in HEADER) + "\n")
        for i, (src, ex, by) in enumerate(rows):
            vals = [hex(16 * i), src, sum(by.values()), 0, ex, by.get("barrier", 0),
                    by.get("long_sb", 0), by.get("wait", 0), 0]
            f.write(",".join(f'"{v}"' for v in vals) + "\n")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "ours-sass.csv")
        write(page, PAGE)
        r = run(page, "--top", "3")
        out = r.stdout
        check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
        check("100 stall samples" in out, "total samples (4+6+30+20+25+5+10 = 100)")
        phase = {}
        for line in out.splitlines():
            words = line.split()
            if words[:1] in (["before"], ["after"]):
                phase[words[0]] = line
            elif words[:2] == ["loop", "segment"]:
                phase[words[2]] = line
        check("10 (10.0%)" in phase.get("before", ""),
              "prologue: the two instructions before the loop, 10 samples")
        check("long_sb 60%" in phase.get("before", ""), "prologue's stall shares")
        check(" 50 (50.0%)" in phase.get("1", "") and "barrier 40%" in phase.get("1", ""),
              "segment 1: HMMA + BAR, 50 samples, 20 of them barrier")
        check(" 25 (25.0%)" in phase.get("2", "") and "long_sb 100%" in phase.get("2", ""),
              "segment 2: REDG up to the barrier that never ran, 25 samples")
        check(" 5 ( 5.0%)" in phase.get("4", ""), "segment 4: the branch, 5 samples")
        check(set(phase) == {"before", "1", "2", "4", "after"},
              f"segment 3 never ran and is left out: phases {sorted(phase)}")
        check("10 (10.0%)" in phase.get("after", ""), "epilogue: the store, 10 samples")
        check("REDG 100" in out, "the opcode mix counts executed instructions")
        bad = os.path.join(tmp, "details.txt")
        with open(bad, "w") as f:
            f.write("Duration ms 1.0\n")
        r = run(bad)
        check(r.returncode != 0 and "details.txt" in (r.stderr + r.stdout),
              "a page without the table is refused by name")
        r = run(page, "--loop-fraction", "0")
        check(r.returncode != 0 and "--loop-fraction" in r.stderr,
              "a bad --loop-fraction is refused by name")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        print(out)
        return 1
    print("ncu_phases: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
