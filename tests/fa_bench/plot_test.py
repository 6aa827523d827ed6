#!/usr/bin/env python3
"""Smoke test of bench/plot.py on a tiny record: every chart is written as a PNG, rows that did
not run are skipped. Exits 77 (CTest: skipped) when matplotlib is not installed."""
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
print("ok")
