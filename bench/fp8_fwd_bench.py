#!/usr/bin/env python3
"""The fp8 e4m3 forward (cuda-sm90's fp8 kernels, issue 30) against our bf16 forward, same process,
same shapes, through the Python package (flash_attn_func; CUDA events around each call, after the
first calls' warm-up, gpu_common.time_fn: the package's per-call Python work overlaps the GPU's at
these sizes).

Grid: hidden 2048 (heads = 2048 / d), batch * seqlen = 16384, d in --dims, seqlen in --seqlens,
causal and not. The fp8 inputs are the bf16 ones quantized per (batch, kv head) (flashattn.fp8.
quantize_e4m3, descales amax / 448, passed with the call); out bf16. TFLOP/s = 4 b h s^2 d (halved
for causal) / median time. Each row also has fp8's error against the bf16 output (max and RMSE):
a sanity check of the fast path, not the accuracy table (tests/test_fp8.cpp has that).

  FA_LIBRARY=build/libflashattn.so python3 bench/fp8_fwd_bench.py \\
      [--dims 128,256] [--seqlens 4096,16384] [--repeats 30] [--json out.json]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from gpu_common import time_fn  # noqa: E402

import flashattn  # noqa: E402
from flashattn import fp8  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dims", default="128,256")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    print(f"{'d':>4} {'seqlen':>6} {'causal':>6} {'bf16 TF/s':>10} {'fp8 TF/s':>9} {'ratio':>6} "
          f"{'max|fp8-bf16|':>14} {'rmse':>8}")
    for d in (int(x) for x in a.dims.split(",")):
        for s in (int(x) for x in a.seqlens.split(",")):
            b, h = max(1, 16384 // s), 2048 // d
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            (q8, qd), (k8, kd), (v8, vd) = (fp8.quantize_e4m3(t) for t in (q, k, v))
            q8, k8, v8 = (flashattn.e4m3(t.contiguous()) for t in (q8, k8, v8))
            for causal in (False, True):
                def run_bf16():
                    return flashattn.flash_attn_func(q, k, v, causal=causal)

                def run_fp8():
                    return flashattn.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd,
                                                     k_descale=kd, v_descale=vd)

                ref, got = run_bf16().float(), run_fp8().float()
                err = (got - ref).abs()
                flops = 4.0 * b * h * s * s * d / (2 if causal else 1)
                ms = {name: time_fn([fn], a.repeats) for name, fn in
                      (("bf16", run_bf16), ("fp8", run_fp8))}
                tf = {name: flops / (t * 1e-3) / 1e12 for name, t in ms.items()}
                row = dict(d=d, seqlen=s, batch=b, heads=h, causal=causal, ms=ms, tflops=tf,
                           fp8_vs_bf16_max=float(err.max()),
                           fp8_vs_bf16_rmse=float(err.pow(2).mean().sqrt()))
                rows.append(row)
                print(f"{d:>4} {s:>6} {str(causal):>6} {tf['bf16']:>10.1f} {tf['fp8']:>9.1f} "
                      f"{tf['fp8'] / tf['bf16']:>6.2f} {row['fp8_vs_bf16_max']:>14.4f} "
                      f"{row['fp8_vs_bf16_rmse']:>8.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(0), build=flashattn.build_info(),
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
