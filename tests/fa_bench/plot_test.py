#!/usr/bin/env python3
"""Smoke test of bench/plot.py on tiny records: every chart is written as a PNG, rows that did
not run are skipped; a bench/gpu_bench.py record (no status, kernel and ms_rounds in the rows,
peak_bytes from --memory, a "skipped" section) draws its TFLOP/s and memory charts; every
committed GPU record of bench/results/ (gpu_bench.py's, the former torch_compare.py's and
fa-bench's) still draws its TFLOP/s chart. Exits 77 (CTest: skipped) when matplotlib is not
installed."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("matplotlib not importable: skipped")
    sys.exit(77)

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "plot.py")
rows = []
for be, scale in (("flashattn", 1.0), ("vanilla", 3.0)):
    for d in (64, 128):
        for causal in (False, True):
            for s in (512, 1024, 2048):
                ms = scale * s * s * d * 1e-9
                rows.append({"op": "fwd", "dtype": "bf16", "d": d, "causal": causal, "b": 1, "h": 16,
                             "s_q": s, "s_k": s, "backend": be, "status": "ok", "ms": ms,
                             "tflops": 4 * 16 * s * s * d / ms * 1e-9, "peak_bytes": int(scale * s * s) + 3 * s * 16 * d,
                             "input_bytes": 3 * s * 16 * d})
rows.append({"op": "fwd", "dtype": "bf16", "d": 64, "causal": False, "b": 1, "h": 16, "s_q": 4096,
             "s_k": 4096, "backend": "vanilla", "status": "oom: test", "ms": None, "tflops": None,
             "peak_bytes": None})
rec = {"gpu": "test", "rows": rows,
       "compare": [{"s": 512, "op": "fwd", "speedup": 3.0, "memory_ratio": 2.5},
                   {"s": 4096, "op": "fwd", "speedup": None, "memory_ratio": None}]}
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "rec.json")
    with open(path, "w") as f:
        json.dump(rec, f)
    r = subprocess.run([sys.executable, PLOT, path, os.path.join(tmp, "png"), "--prefix", "t-"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(1)
    for name in ("tflops", "memory", "speedup"):
        png = os.path.join(tmp, "png", f"t-{name}.png")
        with open(png, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                print(f"{png} is not a PNG")
                sys.exit(1)

    # A gpu_bench.py record as --memory writes it (two dtypes, a backend skipped in one cell).
    rows = []
    for dt in ("bf16", "fp16"):
        for be, scale in (("flashattn", 1.0), ("vanilla", 4.0), ("torch-fa2", 1.1),
                          ("torch-math", 9.0)):
            for s in (1024, 2048):
                if be == "torch-math" and s == 2048:
                    continue
                ms = scale * s * 1e-3
                rows.append({"op": "bwd", "dtype": dt, "d": 64, "causal": False, "b": 16384 // s,
                             "h": 32, "s_q": s, "s_k": s, "backend": be,
                             **({} if be.startswith("torch") else {"kernel": "cuda-sm80"}),
                             "ms": ms, "tflops": 100 / scale, "dropout": 0.0,
                             "max_abs_diff_vs_torch_fa2": None, "ms_rounds": [ms] * 4,
                             "peak_bytes": int(scale * s * 2**10)})
    rec = {"gpu": "test", "commit": "x", "ceilings": {}, "rows": rows,
           "skipped": [{"op": "bwd", "dtype": "bf16", "d": 64, "causal": False, "s_q": 2048,
                        "backend": "torch-math", "why": "skipped: seqlen > --math-max-seqlen"}]}
    path = os.path.join(tmp, "gpu-bench.json")
    with open(path, "w") as f:
        json.dump(rec, f)
    r = subprocess.run([sys.executable, PLOT, path, os.path.join(tmp, "png"), "--op", "bwd",
                        "--dtype", "bf16", "--prefix", "g-"], capture_output=True, text=True,
                       timeout=120)
    for name in ("tflops", "memory"):
        if r.returncode != 0 or not os.path.exists(os.path.join(tmp, "png", f"g-{name}.png")):
            print("gpu_bench record:", name, r.stdout, r.stderr)
            sys.exit(1)

    results = os.path.join(os.path.dirname(PLOT), "results")
    for name in sorted(os.listdir(results)):
        if not (name.startswith("h200-") and name.endswith(".json")):
            continue
        with open(os.path.join(results, name)) as f:
            committed = json.load(f)
        ops = sorted({r["op"] for r in committed.get("rows", []) if r.get("ms")})
        if not ops:
            continue
        r = subprocess.run([sys.executable, PLOT, os.path.join(results, name),
                            os.path.join(tmp, "committed"), "--op", ops[0],
                            "--prefix", name[:-5] + "-"], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0 or not os.path.exists(
                os.path.join(tmp, "committed", name[:-5] + "-tflops.png")):
            print(f"bench/results/{name}:", r.stdout, r.stderr)
            sys.exit(1)
print("ok")
