#!/usr/bin/env python3
"""The stall cycles ptxas scheduled into a kernel's loops, read from the control bits of its SASS.

    cuobjdump -sass kernel.cubin > kernel.sass
    python3 scripts/sass_stalls.py kernel.sass                 # every loop with a wgmma / mma
    python3 scripts/sass_stalls.py kernel.sass --range 1cd20 1ef50 [--list]

Each instruction of sm_70 and later carries 23 control bits above bit 105 of its 128-bit word
(cuobjdump prints the word as two 64-bit halves, the second on the line below): from the lowest,
the stall count (4 bits: cycles the scheduler waits before this warp's next issue, the compiler's
account of fixed latencies and throughputs), the yield bit, the write and read scoreboard
indices (3 bits each) and the wait mask (6 bits: the scoreboards this instruction waits on). The
sum of the stall counts over a loop body is what one warp spends in it, issuing alone, before any
variable-latency wait (scoreboards, barriers): a static lower bound on a step, and by opcode a
list of what sets it. A loop is a backward branch; by default the loops whose body holds a
tensor-core instruction (HGMMA / HMMA) are reported, innermost first.
"""
import argparse
import collections
import re
import sys

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\*\s*(0x[0-9a-f]{16})\s*\*/")
HIGH = re.compile(r"^\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")
BRANCH = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
TENSOR = re.compile(r"\b(HGMMA|HMMA)\b")


class Insn:
    def __init__(self, addr, text, high):
        ctrl = high >> 41  # bits 105..127 of the instruction word
        self.addr, self.text = addr, text
        self.stall = ctrl & 0xF
        self.yield_bit = (ctrl >> 4) & 1
        self.write_sb = (ctrl >> 5) & 7
        self.read_sb = (ctrl >> 8) & 7
        self.wait_mask = (ctrl >> 11) & 0x3F

    @property
    def opcode(self):
        words = self.text.split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0]
        return op.split(".")[0]


def parse(lines):
    """The instructions of a cuobjdump -sass listing (all kernels, in address order per kernel)."""
    out = []
    for i, line in enumerate(lines):
        m = LINE.search(line)
        if not m or i + 1 >= len(lines):
            continue
        h = HIGH.match(lines[i + 1])
        if h:
            out.append(Insn(int(m.group(1), 16), m.group(2), int(h.group(1), 16)))
    return out


def loops(insns):
    """(first, last) addresses of each backward branch's body that holds a tensor-core
    instruction, shortest first."""
    found = []
    for x in insns:
        b = BRANCH.search(x.text)
        if not b:
            continue
        target = int(b.group(1), 16)
        if target > x.addr:
            continue
        body = [y for y in insns if target <= y.addr <= x.addr]
        if any(TENSOR.search(y.text) for y in body):
            found.append((target, x.addr))
    return sorted(set(found), key=lambda r: r[1] - r[0])


def report(insns, first, last, listing, out):
    body = [x for x in insns if first <= x.addr <= last]
    total = sum(x.stall for x in body)
    print(f"{first:#x}-{last:#x}: {len(body)} instructions, {total} stall cycles", file=out)
    cycles, count = collections.Counter(), collections.Counter()
    for x in body:
        cycles[x.opcode] += x.stall
        count[x.opcode] += 1
    for op, c in cycles.most_common(12):
        print(f"  {op:12s} {count[op]:5d} instructions {c:6d} cycles ({c / count[op]:.1f} each)",
              file=out)
    if listing:
        for x in body:
            print(f"  {x.addr:06x} stall {x.stall:2d} wait {x.wait_mask:02x}  {x.text}", file=out)
    return len(body), total


def main(argv=None, out=sys.stdout):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", help="a cuobjdump -sass listing")
    ap.add_argument("--range", nargs=2, metavar=("FIRST", "LAST"),
                    help="hex addresses of one range instead of the loops")
    ap.add_argument("--list", action="store_true", help="every instruction with its stall count")
    a = ap.parse_args(argv)
    with open(a.sass) as f:
        insns = parse(f.read().splitlines())
    if not insns:
        print(f"{a.sass}: no SASS instructions with control words", file=sys.stderr)
        return 2
    ranges = [(int(a.range[0], 16), int(a.range[1], 16))] if a.range else loops(insns)
    for first, last in ranges:
        report(insns, first, last, a.list, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
