#!/usr/bin/env python3
"""scripts/sass_stalls.py on a synthetic cuobjdump listing whose control words are built here:
each instruction's stall count, wait mask and scoreboards decoded from bits 105..127; the loops
reported are the backward branches whose body holds a tensor-core instruction (the scalar loop
is not), with their stall sums by opcode; a predicated instruction counts under its opcode."""
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import sass_stalls  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def word(stall, yield_bit=0, write_sb=7, read_sb=7, wait=0, reuse=0, low_bits=0x1234):
    ctrl = stall | yield_bit << 4 | write_sb << 5 | read_sb << 8 | wait << 11 | reuse << 17
    return (ctrl << 41) | low_bits


# (address, text, stall, wait mask): a scalar loop 0x10-0x30, then a tensor loop 0x40-0x80.
PROGRAM = [
    (0x00, "MOV R0, RZ", 1, 0),
    (0x10, "IADD3 R0, R0, 0x1, RZ", 2, 0),
    (0x20, "ISETP.GE.AND P0, PT, R0, 0x4, PT", 5, 0),
    (0x30, "@!P0 BRA 0x10", 7, 0),
    (0x40, "HGMMA.64x128x16.F32.BF16 R88, gdesc[UR8], RZ, !UPT", 1, 0),
    (0x50, "MUFU.EX2 R1, R1", 8, 0),
    (0x60, "FADD R2, R2, R1", 6, 0x02),
    (0x70, "@P1 FADD R3, R3, R1", 4, 0x04),
    (0x80, "@!P2 BRA 0x40", 9, 0),
    (0x90, "EXIT", 5, 0),
]
lines = ["        Function : kernel"]
for addr, text, stall, wait in PROGRAM:
    lines.append(f"        /*{addr:04x}*/                   {text} ;   /* 0x{0x000fe20000000f00:016x} */")
    lines.append(f"                                                 /* 0x{word(stall, wait=wait):016x} */")

insns = sass_stalls.parse(lines)
check([x.addr for x in insns] == [p[0] for p in PROGRAM], f"addresses {[x.addr for x in insns]}")
check([x.stall for x in insns] == [p[2] for p in PROGRAM], f"stalls {[x.stall for x in insns]}")
check([x.wait_mask for x in insns] == [p[3] for p in PROGRAM], "wait masks")
check(all(x.write_sb == 7 and x.read_sb == 7 for x in insns), "scoreboards")
check(insns[7].opcode == "FADD" and insns[4].opcode == "HGMMA", "opcodes of predicated / dotted")
check(sass_stalls.loops(insns) == [(0x40, 0x80)], f"loops {sass_stalls.loops(insns)}")

with tempfile.NamedTemporaryFile("w", suffix=".sass", delete=False) as f:
    f.write("\n".join(lines) + "\n")
try:
    out = io.StringIO()
    code = sass_stalls.main([f.name], out=out)
    text = out.getvalue()
    check(code == 0, f"exit {code}")
    check(text.splitlines()[0] == "0x40-0x80: 5 instructions, 28 stall cycles", f"report: {text}")
    check("  FADD             2 instructions     10 cycles (5.0 each)" in text, f"by opcode: {text}")
    out = io.StringIO()
    sass_stalls.main([f.name, "--range", "10", "30", "--list"], out=out)
    text = out.getvalue()
    check(text.splitlines()[0] == "0x10-0x30: 3 instructions, 14 stall cycles", f"--range: {text}")
    check("000020 stall  5 wait 00  ISETP.GE.AND P0, PT, R0, 0x4, PT" in text, f"--list: {text}")
finally:
    os.unlink(f.name)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("sass_stalls: ok")
