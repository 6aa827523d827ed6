#!/usr/bin/env python3
"""One shape's attention calls, for a profiler to capture or timed kernel by kernel: ours
(flashattn, through the C ABI) or PyTorch's SDPA with FlashAttention-2 (fa2) or cuDNN (cudnn).
Shapes as bench/gpu_bench.py's grid: b * s = 16384 tokens, h = 2048 / d, (b, s, h, d) tensors
(SDPA reads their (b, h, s, d) transposes, the same memory). (Not named profile.py: in bench/,
that would shadow the standard library's profile module, which cProfile imports, for every
script there.)

Default: each --backend runs its forward (--op bwd: its backward, after one forward for the
backward's inputs) --calls times, for Nsight Compute or Nsight Systems, e.g.
  ncu --clock-control none --section SpeedOfLight -k regex:fwd_kernel \
      python3 bench/profile_kernels.py
  ncu --clock-control none -k regex:flash_fwd python3 bench/profile_kernels.py --backend fa2
(bench/ncu_compare.sh runs both and compares them.)

--kernel-times: torch.profiler instead, the mean device time per kernel over 10 calls (memsets
included) of each backend on each case of --cases (d:seqlen:causal, e.g. 64:1024:0; default the
one shape of --d, --s, --causal): what the small kernels (preprocess, postprocess, the
accumulator clear) cost next to the main one, e.g.
  python3 bench/profile_kernels.py --kernel-times --op bwd --backend flashattn,fa2 \\
      --cases 64:1024:0,128:1024:1 [--dtype fp16]
"""
import argparse
import collections
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes  # noqa: E402

TORCH = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
KERNEL_TIME_CALLS = 10


def ours(lib, q, k, v, dout, causal, deterministic, stream):
    """fa_forward (with the workspace it asks for), or (dout given) fa_backward after one fa_forward for its out and lse, as a
    no-argument call (the closure keeps its tensors alive)."""
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda", dtype=torch.float32)
    if dout is None:
        p = fa_ctypes.forward_params(lib, q, k, v, out, lse, causal=causal)
        n = fa_ctypes.workspace_size(lib, p)  # the sm90 forward's tile counter
        ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
        return lambda keep=(out, lse, ws): fa_ctypes.forward(lib, p, stream, ws.data_ptr(), n)
    grads = [torch.empty_like(x) for x in (q, k, v)]
    p = fa_ctypes.backward_params(lib, q, k, v, out, lse, dout, *grads, causal=causal,
                                  deterministic=deterministic)
    fa_ctypes.forward(lib, p, stream)  # out and lse for the backward
    n = fa_ctypes.workspace_size(lib, p, backward=True)
    ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
    return lambda keep=(out, lse, grads): fa_ctypes.backward(lib, p, stream, ws.data_ptr(), n)


def sdpa(kernel, q, k, v, dout, causal):
    """SDPA's forward with one kernel, or (dout given) torch.autograd.grad through a forward run
    once here, as a no-argument call."""
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(dout is not None) for x in (q, k, v))
    if dout is None:
        def forward():
            with sdpa_kernel([kernel]):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        return forward
    with sdpa_kernel([kernel]):
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    g = dout.transpose(1, 2)
    return lambda: torch.autograd.grad(o, (qt, kt, vt), g, retain_graph=True)


def kernel_times(fn):
    """{kernel name: mean device microseconds per call of fn}."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(KERNEL_TIME_CALLS):
            fn()
        torch.cuda.synchronize()
    times = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name[:60]] += e.device_time / KERNEL_TIME_CALLS
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="flashattn",
                    help="comma-separated, of flashattn, fa2, cudnn (run in that order)")
    ap.add_argument("--op", default="fwd", choices=("fwd", "bwd"))
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--deterministic", action="store_true", help="ours, --op bwd: deterministic=1")
    ap.add_argument("--lib", default="build-gpu/libflashattn.so")
    ap.add_argument("--calls", type=int, default=3, help="calls per backend (profiler mode)")
    ap.add_argument("--kernel-times", action="store_true",
                    help="print each backend's per-kernel device times (torch.profiler)")
    ap.add_argument("--cases", help="--kernel-times: d:seqlen:causal,... (default: --d, --s, "
                                    "--causal)")
    args = ap.parse_args()
    backends = args.backend.split(",")
    bad = [b for b in backends if b != "flashattn" and b not in TORCH]
    if bad:
        ap.error(f"--backend: unknown {', '.join(bad)}; choose from flashattn, fa2, cudnn")
    if args.cases and not args.kernel_times:
        ap.error("--cases is for --kernel-times; the profiler mode runs --d, --s, --causal")
    cases = ([tuple(int(x) for x in c.split(":")) for c in args.cases.split(",")] if args.cases
             else [(args.d, args.s, int(args.causal))])
    lib = fa_ctypes.load(args.lib) if "flashattn" in backends else None
    stream = torch.cuda.current_stream().cuda_stream
    for d, s, causal in cases:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[args.dtype])
                   for _ in range(3))
        dout = torch.randn_like(q) if args.op == "bwd" else None
        calls = {n: ours(lib, q, k, v, dout, bool(causal), args.deterministic, stream)
                 if n == "flashattn" else sdpa(TORCH[n], q, k, v, dout, bool(causal))
                 for n in backends}
        if not args.kernel_times:
            for fn in calls.values():
                for _ in range(args.calls):
                    fn()
            torch.cuda.synchronize()
            continue
        times = {n: kernel_times(fn) for n, fn in calls.items()}
        print(f"== {args.dtype} {args.op} d{d} s{s} causal={causal}: " +
              ", ".join(f"{n} {sum(t.values()):.0f} us" for n, t in times.items()))
        for n, t in times.items():
            for kernel, us in t.most_common():
                print(f"   {n:9s} {us:9.1f} us  {kernel}")


if __name__ == "__main__":
    main()
