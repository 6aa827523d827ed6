"""The CPU flash backend against PyTorch's CPU scaled_dot_product_attention, in one process.

    OMP_NUM_THREADS=2 python3 bench/cpu_torch_sdpa.py --lib build/libflashattn.so \
        [--lib-variant old=OTHER/libflashattn.so ...] [--quick] [--only op=fwd ...] [--json OUT.json]

Every cell (dtype, b, h, s, d, causal, op) times each backend in turn, in rounds (the order
rotates each round), the median of the rounds' medians: ours through the C ABI (bench/fa_ctypes.py,
as a C program calls it: fa_forward, then fa_backward for `fwdbwd`), every --lib-variant the same
way, and torch's SDPA on CPU tensors with its FLASH_ATTENTION backend (torch's CPU flash kernel;
MATH where it refuses). FLOPs: forward 4 b h s^2 d (halved for causal), fwd+bwd 3.5x (BENCH.md).
Threads: OMP_NUM_THREADS (ours, OpenMP) and torch.set_num_threads alike. Ours lays q, k, v out as
(b, s, h, d), torch as (b, h, s, d): each its own contiguous convention. Figures and verdicts:
docs/cpu-benchmark.md."""
import argparse
import ctypes
import itertools
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def flops(op, b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return f * (3.5 if op == "fwdbwd" else 1.0)


class Ours:
    """One library: tensors, params and a workspace for one cell, allocated outside the timing."""

    def __init__(self, lib, dt, b, h, s, d, causal, op, gen):
        mk = lambda: torch.randn(b, s, h, d, generator=gen).to(dt)  # noqa: E731
        self.lib, self.op = lib, op
        self.t = [mk(), mk(), mk(), torch.empty(b, s, h, d, dtype=dt),
                  torch.empty(b, h, s, dtype=torch.float32), mk(),
                  torch.empty(b, s, h, d, dtype=dt), torch.empty(b, s, h, d, dtype=dt),
                  torch.empty(b, s, h, d, dtype=dt)]
        self.p = fa_ctypes.backward_params(lib, *self.t, causal=causal)
        n = max(fa_ctypes.workspace_size(lib, self.p),
                fa_ctypes.workspace_size(lib, self.p, backward=True) if op == "fwdbwd" else 0)
        self.ws = torch.empty(max(n, 1), dtype=torch.uint8)
        self.n = n

    def __call__(self):
        fa_ctypes.forward(self.lib, self.p, 0, ctypes.c_void_p(self.ws.data_ptr()), self.n)
        if self.op == "fwdbwd":
            fa_ctypes.backward(self.lib, self.p, 0, ctypes.c_void_p(self.ws.data_ptr()), self.n)


class Torch:
    def __init__(self, dt, b, h, s, d, causal, op, gen):
        mk = lambda: torch.randn(b, h, s, d, generator=gen).to(dt)  # noqa: E731
        self.q, self.k, self.v, self.dout = mk(), mk(), mk(), mk()
        self.causal, self.op = causal, op
        self.backend = "torch-flash"
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                self._run()
        except RuntimeError:
            self.backend = "torch-math"

    def _run(self):
        if self.op == "fwd":
            with torch.no_grad():
                F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal)
            return
        q, k, v = (x.detach().requires_grad_() for x in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        out.backward(self.dout)

    def __call__(self):
        kind = SDPBackend.FLASH_ATTENTION if self.backend == "torch-flash" else SDPBackend.MATH
        with sdpa_kernel([kind]):
            self._run()


def median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def grid(quick, only):
    """(dtype, b, h, s, d, causal, op) cells: the issue's grid cut to what 2 cores time in minutes,
    then to the cells whose every field `only` names (--only: a subset to A/B one lever)."""
    dims = [64, 128]
    seqs = [512, 1024, 2048] if quick else [512, 1024, 2048, 4096]
    for dt, d, s, causal, op in itertools.product(["fp32", "bf16"], dims, seqs, [False, True],
                                                  ["fwd", "fwdbwd"]):
        if d == 128 and s > 2048:
            continue
        fields = {"dtype": dt, "d": str(d), "s": str(s), "mask": "causal" if causal else "full",
                  "op": op}
        if any(fields[k] not in v for k, v in only.items()):
            continue
        yield dt, 1, 8, s, d, causal, op


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lib", required=True, help="our libflashattn.so (backend name: flashattn)")
    ap.add_argument("--lib-variant", action="append", default=[], metavar="NAME=PATH",
                    help="another build of the library, timed beside it as flashattn-NAME")
    ap.add_argument("--quick", action="store_true", help="s <= 2048 only")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="timed calls a round (after a warm-up)")
    ap.add_argument("--json", help="write {machine, library, torch, command, rows} here")
    ap.add_argument("--commit", default="", help="recorded as the library's commit")
    ap.add_argument("--only", action="append", default=[], metavar="FIELD=V1,V2",
                    help="keep the cells whose FIELD (dtype, d, s, mask: full / causal, op: fwd /\n"
                         "fwdbwd) is one of the values; repeatable, e.g. --only op=fwd --only mask=full")
    a = ap.parse_args()
    only = {}
    for o in a.only:
        k, v = o.split("=", 1)
        if k not in ("dtype", "d", "s", "mask", "op"):
            ap.error(f"--only {o}: field {k!r} is not one of dtype, d, s, mask, op")
        only[k] = v.split(",")

    load_before = os.getloadavg()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    torch.set_num_threads(threads)
    libs = {"flashattn": fa_ctypes.load(a.lib)}
    for v in a.lib_variant:
        name, path = v.split("=", 1)
        libs["flashattn-" + name] = fa_ctypes.load(path)
    builds = {k: lib.fa_build_info().decode() for k, lib in libs.items()}
    print(f"threads {threads}; torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()});"
          f" " + "; ".join(f"{k}: {v}" for k, v in builds.items()), flush=True)

    rows = []
    gen = torch.Generator().manual_seed(0)
    hdr = f"{'dtype':5} {'d':>4} {'s':>5} {'causal':6} {'op':6} " + " ".join(
        f"{k:>18}" for k in list(libs) + ["torch"]) + f" {'torch/ours':>10}"
    print(hdr + "   (ms)", flush=True)
    for dt, b, h, s, d, causal, op in grid(a.quick, only):
        runners = {k: Ours(lib, DTYPES[dt], b, h, s, d, causal, op, gen) for k, lib in libs.items()}
        runners["torch"] = Torch(DTYPES[dt], b, h, s, d, causal, op, gen)
        per = {k: [] for k in runners}
        names = list(runners)
        for r in range(a.rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                runners[k]()  # warm-up: the other backend's threads have gone to sleep
                per[k].append(median_ms(runners[k], a.repeats))
        ms = {k: statistics.median(v) for k, v in per.items()}
        print(f"{dt:5} {d:4} {s:5} {str(causal):6} {op:6} " + " ".join(
            f"{ms[k]:18.2f}" for k in names) + f" {ms['torch'] / ms['flashattn']:10.2f}", flush=True)
        for k in names:
            backend = runners["torch"].backend if k == "torch" else k
            rows.append({"op": op, "dtype": dt, "b": b, "h": h, "s_q": s, "s_k": s, "d": d,
                         "causal": causal, "backend": backend, "threads": threads,
                         "ms": ms[k], "gflops": flops(op, b, h, s, d, causal) / ms[k] / 1e6,
                         "round_ms": per[k]})
    by_cell = {}
    for r in rows:
        by_cell.setdefault((r["op"], r["dtype"], r["s_q"], r["d"], r["causal"]), {})[r["backend"]] = r["ms"]
    ratios = [c[t] / c["flashattn"] for c in by_cell.values() for t in c if t.startswith("torch")]
    geo = statistics.geometric_mean(ratios)
    print(f"torch / ours: min {min(ratios):.2f}, geometric mean {geo:.2f}, max {max(ratios):.2f} "
          f"over {len(ratios)} cells", flush=True)
    if a.json:
        info = open("/proc/cpuinfo").read()
        field = lambda name: next((ln.split(":", 1)[1].strip() for ln in info.splitlines()  # noqa: E731
                                   if ln.split(":", 1)[0].strip() == name), "")
        flags = field("flags").split()
        rec = {"machine": {"cpu": field("model name") or platform.processor(),
                           "cpu_family": field("cpu family"), "cpu_model": field("model"),
                           "cores": os.cpu_count(), "threads": threads,
                           "avx512": [f for f in ("avx512f", "avx512bw", "avx512_bf16", "amx_tile")
                                      if f in flags],
                           "load_before": load_before, "load_after": os.getloadavg()},
               "library": builds, "commit": a.commit,
               "torch": {"version": torch.__version__,
                         "cpu_capability": torch.backends.cpu.get_cpu_capability()},
               "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
               "date": time.strftime("%Y-%m-%d"),
               "summary": {"torch_over_ours_min": min(ratios), "torch_over_ours_geomean": geo,
                           "torch_over_ours_max": max(ratios), "cells": len(ratios)},
               "rows": rows}
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
