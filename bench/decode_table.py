#!/usr/bin/env python3
"""The decode grid's table and its verdict against issue 26's targets, from one record of
decode_bench.py (no GPU needed): per (batch, cache) row, TB/s of ours, cuDNN and FA2 with one and
four query tokens, paged 16 and 256 over dense and the append call's time over the plain one
(ranges over both seqlen_q), then the counts against each target.

  python3 bench/decode_table.py RECORD.json [--target-tbps 3.4]

--target-tbps: the bandwidth floor for cells whose K / V exceed 256 MB (default: 80% of the
record's measured copy ceiling)."""
import argparse
import json
import math


def load(path):
    with open(path) as f:
        rec = json.load(f)
    cells = {}
    for r in rec["rows"]:
        key = (r["b"], r["s_k"], r["s_q"], r["page_size"], r["append"])
        cells.setdefault(key, {})[r["backend"]] = r
    return rec, cells


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def span(xs):
    return f"{min(xs):.2f}–{max(xs):.2f}" if xs else "–"


def table(cells):
    """Markdown lines of the grid, one row per (batch, cache)."""
    lines = ["| batch | cache | ours q1 | cuDNN q1 | FA2 q1 | ours q4 | cuDNN q4 | FA2 q4 | "
             "paged 16 / dense | paged 256 / dense | append time / plain |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = sorted({(b, s) for (b, s, _, _, _) in cells})
    for b, s in rows:
        out = [str(b), f"{s // 1024}k"]
        paged = {16: [], 256: []}
        append = []
        for sq in (1, 4):
            dense = cells.get((b, s, sq, 0, False), {})
            for name in ("flashattn", "torch-cudnn", "torch-fa2"):
                r = dense.get(name)
                val = f"{r['tbps']:.2f}" if r else "–"
                out.append(f"**{val}**" if name == "flashattn" and r else val)
            ours = dense.get("flashattn")
            if not ours:
                continue
            for p in paged:
                r = cells.get((b, s, sq, p, False), {}).get("flashattn")
                if r:
                    paged[p].append(ours["ms"] / r["ms"])
            r = cells.get((b, s, sq, 0, True), {}).get("flashattn")
            if r:
                append.append(r["ms"] / ours["ms"])
        out += [span(paged[16]), span(paged[256]), span(append)]
        lines.append("| " + " | ".join(out) + " |")
    return lines


def verdict(rec, cells, target_tbps):
    """Lines that count the cells against each of issue 26's targets."""
    vs = {"torch-cudnn": [], "torch-fa2": []}
    behind = {"torch-cudnn": [], "torch-fa2": []}
    bw, paged, append = [], [], []
    for (b, s, sq, page, app), backends in sorted(cells.items()):
        ours = backends.get("flashattn")
        if page or app or not ours:
            continue
        for name in vs:
            if name in backends:
                x = backends[name]["ms"] / ours["ms"]
                vs[name].append(x)
                if x < 1.0:
                    behind[name].append(f"b{b}×{s // 1024}k q{sq} {x:.2f}")
        if ours["bytes"] > 256e6:
            bw.append((ours["tbps"], f"b{b}×{s // 1024}k q{sq}"))
        for p in (16, 256):
            r = cells.get((b, s, sq, p, False), {}).get("flashattn")
            if r:
                paged.append(ours["ms"] / r["ms"])
        r = cells.get((b, s, sq, 0, True), {}).get("flashattn")
        if r:
            append.append(r["ms"] / ours["ms"])
    lines = []
    for name, label in (("torch-cudnn", "cuDNN"), ("torch-fa2", "FA2")):
        xs = vs[name]
        if xs:
            lines.append(f"- ours / {label} (time ratio, above 1 = ours faster): geometric mean "
                         f"{geomean(xs):.2f}, {sum(x >= 1 for x in xs)} of {len(xs)} cells ≥ 1, "
                         f"range {span(xs)}")
            if behind[name]:
                lines.append(f"  - below 1: {', '.join(behind[name])}")
    if bw:
        low = [f"{c} {t:.2f}" for t, c in sorted(bw) if t < target_tbps]
        lines.append(f"- K / V above 256 MB: {sum(t >= target_tbps for t, _ in bw)} of {len(bw)} "
                     f"cells ≥ {target_tbps:.2f} TB/s (range {span([t for t, _ in bw])})"
                     + (f"; below: {', '.join(low)}" if low else ""))
    if paged:
        lines.append(f"- paged / dense: {sum(x >= 0.95 for x in paged)} of {len(paged)} ≥ 0.95, "
                     f"range {span(paged)}, geometric mean {geomean(paged):.2f}")
    if append:
        lines.append(f"- append time / plain: {sum(x <= 1.05 for x in append)} of {len(append)} "
                     f"within 5%, range {span(append)}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("record")
    ap.add_argument("--target-tbps", type=float, default=None)
    a = ap.parse_args()
    rec, cells = load(a.record)
    copy = rec.get("ceilings", {}).get("copy_tb_s")
    target = a.target_tbps if a.target_tbps else (0.8 * copy if copy else 3.4)
    print(f"{rec.get('gpu')}, driver {rec.get('driver')}, commit {rec.get('commit')}, "
          f"copy {copy} TB/s")
    print("\n".join(table(cells)))
    print()
    print("\n".join(verdict(rec, cells, target)))


if __name__ == "__main__":
    main()
