"""Host time the Python binding adds per call over calling the C ABI directly.

  python3 bench/python_overhead.py [--device cpu|cuda] [--iters N] [--limit-us 15]

Both sides run the same forward on the same small tensors:
  raw      fa_forward through ctypes with params packed once, outputs and workspace preallocated
           (what a C program pays, plus one ctypes call);
  wrapper  flashattn.flash_attn_func(q, k, v, causal=True) as a user calls it (inference: inputs
           without requires_grad), including output allocation, the workspace query and the
           stream look-up;
  autograd the same with requires_grad inputs (forward only: adds torch.autograd.Function).
Each figure is the best of several repeats of the mean over --iters calls (host wall time; on
CUDA the queue is drained once per repeat, and the shapes are small enough that the host, not the
GPU, is the bottleneck). The overhead is wrapper - raw; with --limit-us the script exits 1 when it
exceeds the limit (the issue's budget is 15 us).
"""
import argparse
import ctypes
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashattn  # noqa: E402
from flashattn import _kernels, _library, _params  # noqa: E402


def best_mean_us(fn, iters, repeats, sync):
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / iters * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--shape", default="1,32,2,64", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--limit-us", type=float, default=None)
    args = ap.parse_args()

    b, s, h, d = (int(x) for x in args.shape.split(","))
    dev = torch.device(args.device)
    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=dtype) for _ in range(3))
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    lib = _library.load()
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
    p = _params.new_params()
    for field, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
        _params.put(p, field, t, field)
    p.causal = 1
    size = ctypes.c_size_t()
    _library.check(lib, lib.fa_forward_workspace_size(ctypes.byref(p), ctypes.byref(size)), "ws")
    ws = torch.empty(max(size.value, 1), dtype=torch.uint8, device=dev)
    stream = _kernels._raw_stream(dev.index or 0) if dev.type == "cuda" else None
    pref, ws_ptr, nbytes, fwd = ctypes.byref(p), ws.data_ptr(), size.value, lib.fa_forward

    def raw():
        fwd(pref, ws_ptr, nbytes, stream)

    def wrapper():
        flashattn.flash_attn_func(q, k, v, causal=True)

    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def autograd():
        flashattn.flash_attn_func(qg, kg, vg, causal=True)

    raw()
    torch.testing.assert_close(flashattn.flash_attn_func(q, k, v, causal=True), out, rtol=0,
                               atol=0)
    for fn in (raw, wrapper, autograd):  # warm-up: allocator pools, OpenMP threads, lazy loads
        for _ in range(200):
            fn()
    t_raw = best_mean_us(raw, args.iters, args.repeats, sync)
    t_wrap = best_mean_us(wrapper, args.iters, args.repeats, sync)
    t_grad = best_mean_us(autograd, args.iters, args.repeats, sync)
    print(f"device {dev}, {dtype}, shape (b, s, h, d) = ({b}, {s}, {h}, {d}), torch "
          f"{torch.__version__}, library {flashattn.library_path()}")
    print(f"{'path':10} {'us/call':>9} {'over raw':>9}")
    for name, t in (("raw C ABI", t_raw), ("wrapper", t_wrap), ("autograd", t_grad)):
        print(f"{name:10} {t:9.2f} {t - t_raw:9.2f}")
    overhead = t_wrap - t_raw
    if args.limit_us is not None and overhead > args.limit_us:
        print(f"FAIL: wrapper overhead {overhead:.2f} us > {args.limit_us} us")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
