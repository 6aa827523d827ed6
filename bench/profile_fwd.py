#!/usr/bin/env python3
"""Runs flashattn's forward (or, with --op bwd, its backward) through the C ABI for a profiler to
capture, three times each, e.g.
  ncu --clock-control none --section SpeedOfLight -k regex:fwd_kernel python3 bench/profile_fwd.py
Arguments: --d 128 --s 4096 --causal --dtype bf16 --op fwd|bwd --deterministic
--lib build-gpu/libflashattn.so"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--s", type=int, default=4096)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--dtype", default="bf16")
ap.add_argument("--lib", default="build-gpu/libflashattn.so")
ap.add_argument("--op", default="fwd", choices=["fwd", "bwd"])
ap.add_argument("--deterministic", action="store_true")
args = ap.parse_args()
lib = fa_ctypes.load(args.lib)
dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
b, h = 16384 // args.s, 2048 // args.d
q, k, v = (torch.randn(b, args.s, h, args.d, device="cuda", dtype=dt) for _ in range(3))
out = torch.empty_like(q)
lse = torch.empty(b, h, args.s, device="cuda", dtype=torch.float32)
stream = torch.cuda.current_stream().cuda_stream
if args.op == "fwd":
    p = fa_ctypes.forward_params(lib, q, k, v, out, lse, causal=args.causal)
    for _ in range(3):
        fa_ctypes.forward(lib, p, stream)
else:
    dout = torch.randn_like(q)
    grads = [torch.empty_like(x) for x in (q, k, v)]
    p = fa_ctypes.backward_params(lib, q, k, v, out, lse, dout, *grads, causal=args.causal,
                                  deterministic=args.deterministic)
    fa_ctypes.forward(lib, p, stream)  # out and lse for the backward
    n = fa_ctypes.workspace_size(lib, p, backward=True)
    ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
    for _ in range(3):
        fa_ctypes.backward(lib, p, stream, ws.data_ptr(), n)
torch.cuda.synchronize()
