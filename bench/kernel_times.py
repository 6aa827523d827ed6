#!/usr/bin/env python3
"""Per-kernel device time of one backward call: ours (through the C ABI) beside PyTorch's SDPA
FlashAttention-2, from torch.profiler (mean of 10 calls, memsets included), bf16 or fp16, b · h
sized for 16k tokens x 2048 channels as in gpu_bench.py. Shows what the small kernels
(preprocess, postprocess, the accumulator clear) cost next to the main one. GPU machine:
  python3 bench/kernel_times.py --lib build-gpu/libflashattn.so [--cases d:seqlen:causal,...]
      [--dtype fp16]"""
import argparse
import collections
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes  # noqa: E402

CALLS = 10


def kernel_times(fn):
    """{kernel name: mean device microseconds per call of fn}."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    times = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name[:60]] += e.device_time / CALLS
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-gpu/libflashattn.so")
    ap.add_argument("--cases", default="64:1024:0,64:1024:1,128:1024:1,256:1024:0,64:16384:0")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    lib = fa_ctypes.load(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    for case in args.cases.split(","):
        d, s, causal = (int(x) for x in case.split(":"))
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
        out = torch.empty_like(q)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        dout = torch.randn_like(q)
        grads = [torch.empty_like(x) for x in (q, k, v)]
        p = fa_ctypes.backward_params(lib, q, k, v, out, lse, dout, *grads, causal=bool(causal))
        fa_ctypes.forward(lib, p, stream)  # out and lse for the backward
        n = fa_ctypes.workspace_size(lib, p, backward=True)
        ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
        ours = kernel_times(lambda: fa_ctypes.backward(lib, p, stream, ws.data_ptr(), n))
        qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
        g = dout.transpose(1, 2)
        fa2 = kernel_times(lambda: torch.autograd.grad(o, (qt, kt, vt), g, retain_graph=True))
        print(f"== {args.dtype} d{d} s{s} causal={causal}: ours {sum(ours.values()):.0f} us, "
              f"fa2 {sum(fa2.values()):.0f} us")
        for name, times in (("ours", ours), ("fa2", fa2)):
            for kernel, t in times.most_common():
                print(f"   {name:5s} {t:9.1f} us  {kernel}")


if __name__ == "__main__":
    main()
