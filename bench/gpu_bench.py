#!/usr/bin/env python3
"""GPU forward benchmark: flashattn (through its C ABI) against PyTorch's SDPA backends
FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION, same process, same shapes.

Grid (shared/BENCH.md): hidden 2048 (heads = 2048 / d), batch * seqlen = 16384,
seqlen 512..16384, d in {64, 128, 256}, causal and not, bf16 and fp16.
TFLOP/s = 4 b h s^2 d (halved for causal) / median time; CUDA events, warm-up, median of
--repeats runs, rotating among input sets so the 60 MB L2 does not hold them.

  python3 bench/gpu_bench.py --json out.json [--quick] [--commit SHA]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes  # noqa: E402
from gpu_common import ceilings, record_header, time_fn  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}





def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k; bf16 only")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--dims", default="64,128,256", help="head dims (the standard grid: 64,128,256)")
    args = ap.parse_args()

    lib = fa_ctypes.load(args.lib)
    torch.manual_seed(0)
    seqlens = [1024, 4096, 16384] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    dtypes = ["bf16"] if args.quick else ["bf16", "fp16"]
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    ceil = ceilings()
    print(f"ceilings: {ceil}", file=sys.stderr)
    for dt in dtypes:
        for d in (int(x) for x in args.dims.split(",")):
            for causal in (False, True):
                for s in seqlens:
                    b, h = 16384 // s, 2048 // d
                    flops = 4 * b * h * s * s * d / (2 if causal else 1)
                    sets = []
                    for _ in range(3):  # 3 x (q, k, v) of 64 MB each: rotated, L2 is 60 MB
                        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[dt])
                                   for _ in range(3))
                        out = torch.empty_like(q)
                        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                        p = fa_ctypes.forward_params(lib, q, k, v, out, lse, causal=causal)
                        sets.append((q, k, v, out, lse, p))
                    ours = [lambda st=st: fa_ctypes.forward(lib, st[5], stream) for st in sets]

                    def sdpa(st):
                        return F.scaled_dot_product_attention(
                            st[0].transpose(1, 2), st[1].transpose(1, 2), st[2].transpose(1, 2),
                            is_causal=causal)
                    res = {}
                    res["flashattn"] = time_fn(ours, args.repeats)
                    # correctness spot check against PyTorch's FlashAttention-2 on the same input
                    fa_ctypes.forward(lib, sets[0][5], stream)
                    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                        ref = sdpa(sets[0]).transpose(1, 2)
                        res["torch-fa2"] = time_fn([lambda st=st: sdpa(st) for st in sets], args.repeats)
                    err = (sets[0][3].float() - ref.float()).abs().max().item()
                    try:
                        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                            res["torch-cudnn"] = time_fn([lambda st=st: sdpa(st) for st in sets],
                                                         args.repeats)
                    except RuntimeError as e:
                        print(f"cudnn unavailable for {dt} d{d} s{s}: {e}", file=sys.stderr)
                    for backend, ms in res.items():
                        rows.append({"op": "fwd", "dtype": dt, "d": d, "causal": causal, "b": b,
                                     "h": h, "s_q": s, "s_k": s, "backend": backend,
                                     "ms": round(ms, 4), "tflops": round(flops / ms * 1e-9, 1),
                                     "max_abs_diff_vs_torch_fa2": err if backend == "flashattn" else None})
                    print(f"{dt} d{d} causal={int(causal)} s{s}: " +
                          " ".join(f"{k}={flops / v * 1e-9:.0f}" for k, v in res.items()) +
                          f" err={err:.2e}", file=sys.stderr)
                    del sets
    torch.cuda.empty_cache()
    record = dict(record_header(lib, args.commit, ceil), rows=rows)
    with open(args.json, "w") as f:
        json.dump(record, f, indent=1)
    # Short table last: TFLOP/s and ratios, ours / baseline.
    print(f"\n{'case':<26}{'ours':>7}{'fa2':>7}{'cudnn':>7}{'/fa2':>7}{'/cudnn':>8}")
    keyed = {}
    for r in rows:
        keyed.setdefault((r["dtype"], r["d"], r["causal"], r["s_q"]), {})[r["backend"]] = r["tflops"]
    for (dt, d, c, s), v in keyed.items():
        o, f2, cu = v.get("flashattn"), v.get("torch-fa2"), v.get("torch-cudnn")
        print(f"{dt} d{d} {'causal' if c else 'full':<6} s{s:<6}{o:>7.0f}{f2:>7.0f}"
              f"{(cu or 0):>7.0f}{o / f2:>7.2f}{(o / cu if cu else 0):>8.2f}")


if __name__ == "__main__":
    main()
