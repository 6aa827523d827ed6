#!/usr/bin/env python3
"""Per-kernel SASS instruction counts of a CUDA binary, for before/after comparisons of a refactor.

    python3 scripts/sass_counts.py build-gpu/libflashattn_cuda.so > counts.tsv
    python3 scripts/sass_counts.py --diff before.tsv after.tsv

The first form runs `cuobjdump -sass` and prints one line per kernel: the instruction count, the
count of each class that matters for attention kernels (HMMA, LDS/STS, LDG/STG, spills as
LDL/STL, BAR) and the demangled name. The second compares two such files kernel by kernel and
exits 1 if any count differs.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

CLASSES = ("HMMA", "LDSM", "LDS", "STS", "LDG", "STG", "LDL", "STL", "BAR", "RED")
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.\S+)?")


def demangle(names):
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout
    return out.splitlines() if out else names


def count(binary):
    text = subprocess.run(["cuobjdump", "-sass", binary], capture_output=True, text=True,
                          check=True).stdout
    kernels = collections.OrderedDict()
    current = None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = kernels.setdefault(m.group(1), collections.Counter())
            continue
        if current is None:
            continue
        m = INSN.search(line)
        if m:
            op = m.group(1)
            current["total"] += 1
            for c in CLASSES:
                if op == c or op.startswith(c + "."):
                    current[c] += 1
    return kernels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--diff", action="store_true", help="compare two TSV files written by this script")
    a = ap.parse_args()
    if a.diff:
        def load(p):
            rows = {}
            with open(p) as f:
                header = f.readline().rstrip("\n").split("\t")
                for line in f:
                    cols = line.rstrip("\n").split("\t")
                    rows[cols[-1]] = dict(zip(header[:-1], cols[:-1]))
            return rows
        before, after = load(a.paths[0]), load(a.paths[1])
        changed = 0
        for name in sorted(set(before) | set(after)):
            b, c = before.get(name), after.get(name)
            if b != c:
                changed += 1
                print(f"{name[:140]}\n  before {b}\n  after  {c}")
        print(f"{len(before)} kernels before, {len(after)} after, {changed} differ")
        sys.exit(1 if changed else 0)
    kernels = count(a.paths[0])
    names = demangle(list(kernels))
    print("\t".join(("total",) + CLASSES + ("kernel",)))
    for (mangled, c), name in zip(kernels.items(), names):
        print("\t".join(str(c[k]) for k in ("total",) + CLASSES) + "\t" + name)


if __name__ == "__main__":
    main()
