#!/usr/bin/env python3
"""PNG charts from a benchmark record (fa-bench sweep / compare JSON, or bench/gpu_bench.py's;
memory.png needs rows with peak_bytes: fa-bench's, or gpu_bench.py --memory's):

  tflops.png   TFLOP/s vs seqlen per backend, one panel per head_dim x causal (one op)
  memory.png   peak memory vs seqlen, log scale, one line per backend (standard vs flash)
  speedup.png  the compare table: vanilla / flash time and memory ratios vs seqlen
               (only when the record has a "compare" section)

  python3 bench/plot.py RECORD.json OUTDIR [--op fwd] [--dtype bf16]
Rows whose status is not "ok" (out of memory, unsupported) are left out of the lines. A record
with nothing to draw (a `fa-bench plan` table, a fa-cpu-bench record, rows of another op) is
refused with a message saying what it is and what plot.py draws (exit status 2), before
matplotlib is loaded.
"""
import argparse
import json
import os
import sys

plt = None  # matplotlib.pyplot, imported once the record is known to be drawable

# What a row needs to be drawn: the keys of shared/BENCH.md's rows that the charts read.
ROW_KEYS = ("op", "d", "causal", "s_q", "backend")
DRAWS = ("plot.py draws the rows of fa-bench run / sweep / compare records and of "
         "bench/gpu_bench.py's (shared/BENCH.md's schema)")


def refusal(rec, op):
    """Why the record cannot be drawn for `op` (a message), or None when it can."""
    if not isinstance(rec, dict) or not isinstance(rec.get("rows"), list):
        return f"not a benchmark record (no 'rows' list); {DRAWS}"
    rows = rec["rows"]
    if "model" in rec and "elem_bytes" in rec:
        return (f"a `fa-bench plan` record (memory per seqlen of model "
                f"{rec['model'].get('name', '?')}): it has no timed rows; {DRAWS}")
    if "machine" in rec and any("gflops" in r for r in rows if isinstance(r, dict)):
        return (f"a fa-cpu-bench record (docs/cpu-benchmark.md): its rows have no s_q / tflops; "
                f"{DRAWS}")
    if not rows:
        return "the record has no rows"
    for i, r in enumerate(rows):
        missing = [k for k in ROW_KEYS if not isinstance(r, dict) or k not in r]
        if not missing and r.get("ms") and "tflops" not in r:
            missing = ["tflops"]
        if missing:
            return f"row {i} lacks {', '.join(missing)}; {DRAWS}"
    ops = sorted({r["op"] for r in rows if r.get("ms")})
    if op not in ops:
        return (f"no timed rows with op {op}; the record has {', '.join(ops) or 'none'} "
                f"(choose with --op)")
    return None


def ok_rows(rec, op, dtype):
    return [r for r in rec["rows"] if r.get("status", "ok") == "ok" and r["op"] == op
            and (dtype is None or r.get("dtype") == dtype) and r.get("ms")]


def series(rows, key):
    """{backend: ([seqlen], [value])} sorted by seqlen."""
    out = {}
    for r in sorted(rows, key=lambda r: r["s_q"]):
        xs, ys = out.setdefault(r["backend"], ([], []))
        xs.append(r["s_q"])
        ys.append(r[key])
    return out


def log_axes(ax, title):
    """Log-log axes over sequence length, as the memory and compare charts draw them."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend()


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_tflops(rec, op, dtype, path):
    rows = ok_rows(rec, op, dtype)
    dims = sorted({r["d"] for r in rows})
    causals = sorted({r["causal"] for r in rows})
    if not rows:
        return False
    fig, axes = plt.subplots(len(dims), len(causals), figsize=(5 * len(causals), 3.2 * len(dims)),
                             squeeze=False, sharex=True)
    for i, d in enumerate(dims):
        for j, c in enumerate(causals):
            ax = axes[i][j]
            for be, (xs, ys) in series([r for r in rows if r["d"] == d and r["causal"] == c],
                                       "tflops").items():
                ax.plot(xs, ys, marker="o", label=be)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{op} d={d} {'causal' if c else 'non-causal'}")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("sequence length")
    fig.suptitle(f"{rec.get('gpu', '')} {dtype or ''}")
    return save(fig, path)


def plot_memory(rec, op, dtype, path):
    rows = [r for r in ok_rows(rec, op, dtype) if r.get("peak_bytes")]
    if not rows:
        return False
    # One line per backend at the record's first (d, causal) with rows: a memory curve per shape.
    d, c = rows[0]["d"], rows[0]["causal"]
    fig, ax = plt.subplots(figsize=(6, 4))
    shape = [r for r in rows if r["d"] == d and r["causal"] == c]
    for be, (xs, ys) in series(shape, "peak_bytes").items():
        ax.plot(xs, [y / 2**20 for y in ys], marker="o", label=f"{be}: peak")
    # fa-bench rows also say what the inputs took: the rest is the call's own memory.
    own = [dict(r, own=r["peak_bytes"] - r["input_bytes"]) for r in shape
           if r.get("input_bytes") is not None]
    for be, (xs, ys) in series(own, "own").items():
        ax.plot(xs, [y / 2**20 for y in ys], marker="s", linestyle="--", label=f"{be}: beyond inputs")
    ax.set_ylabel("memory (MiB)")
    log_axes(ax, f"{op} peak memory, d={d} {'causal' if c else 'non-causal'}")
    return save(fig, path)


def plot_speedup(rec, path):
    lines = [c for c in rec.get("compare", []) if c.get("speedup") or c.get("memory_ratio")]
    if not lines:
        return False
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for op in sorted({c["op"] for c in lines}):
        cs = sorted((c for c in lines if c["op"] == op), key=lambda c: c["s"])
        a1.plot([c["s"] for c in cs if c["speedup"]], [c["speedup"] for c in cs if c["speedup"]],
                marker="o", label=op)
        a2.plot([c["s"] for c in cs if c["memory_ratio"]],
                [c["memory_ratio"] for c in cs if c["memory_ratio"]], marker="o", label=op)
    log_axes(a1, "speed-up: vanilla time / flash time")
    log_axes(a2, "memory ratio: vanilla / flash, beyond the inputs")
    return save(fig, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("record", help="JSON record")
    ap.add_argument("outdir", help="directory for the PNG files (created)")
    ap.add_argument("--op", default="fwd", choices=["fwd", "bwd", "fwdbwd"])
    ap.add_argument("--dtype", default=None, help="only rows of this dtype (default: all)")
    ap.add_argument("--prefix", default="", help="file name prefix, e.g. h200-2026-12-01-")
    args = ap.parse_args()
    try:
        with open(args.record) as f:
            rec = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plot.py: cannot read {args.record}: {e}", file=sys.stderr)
        return 2
    why = refusal(rec, args.op)
    if why:
        print(f"plot.py: cannot draw {args.record}: {why}", file=sys.stderr)
        return 2
    global plt
    import matplotlib
    matplotlib.use("Agg")  # files only; no display on CI or the GPU machine
    import matplotlib.pyplot
    plt = matplotlib.pyplot
    os.makedirs(args.outdir, exist_ok=True)
    made = []
    for name, fn in (("tflops", lambda p: plot_tflops(rec, args.op, args.dtype, p)),
                     ("memory", lambda p: plot_memory(rec, args.op, args.dtype, p)),
                     ("speedup", lambda p: plot_speedup(rec, p))):
        path = os.path.join(args.outdir, f"{args.prefix}{name}.png")
        if fn(path):
            made.append(path)
    print("\n".join(made) if made else "no chart: no rows with status ok for this op", file=sys.stderr)
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
