#!/usr/bin/env python3
"""Runs PyTorch's SDPA forward (or, with --op bwd, its backward) with one backend for a profiler
to capture, three times each (the counterpart of profile_fwd.py), e.g.
  ncu --clock-control none -k regex:flash_fwd python3 bench/profile_torch.py --backend fa2
Arguments: --backend fa2|cudnn --d 128 --s 4096 --causal --dtype bf16 --op fwd|bwd"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ap = argparse.ArgumentParser()
ap.add_argument("--backend", default="fa2", choices=["fa2", "cudnn"])
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--s", type=int, default=4096)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--dtype", default="bf16")
ap.add_argument("--op", default="fwd", choices=["fwd", "bwd"])
args = ap.parse_args()
dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
backend = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[args.backend]
b, h = 16384 // args.s, 2048 // args.d
# SDPA takes (batch, heads, seqlen, d); the transpose of a (b, s, h, d) tensor matches the
# layout our library is given, so both read the same memory pattern.
q, k, v = (torch.randn(b, args.s, h, args.d, device="cuda", dtype=dt,
                       requires_grad=args.op == "bwd").transpose(1, 2) for _ in range(3))
with sdpa_kernel([backend]):
    if args.op == "fwd":
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        g = torch.randn_like(o)
        for _ in range(3):
            torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
torch.cuda.synchronize()
