"""Host time the Python binding adds per call over calling the C ABI directly.

  python3 bench/python_overhead.py [--device cpu|cuda] [--iters N] [--limit-us 15] [--breakdown]

Both sides run the same forward on the same small tensors:
  raw      fa_forward through ctypes with params packed once, outputs and workspace preallocated
           (what a C program pays, plus one ctypes call);
  wrapper  flashattn.flash_attn_func(q, k, v, causal=True) as a user calls it (inference: inputs
           without requires_grad), including output allocation, the stream look-up (CUDA) and
           the workspace query (CPU: a second validation pass in the library);
  autograd the same with requires_grad inputs (forward only: adds torch.autograd.Function).
Each figure is the best of several repeats of the mean over --iters calls, the repeats of all
paths interleaved (host wall time; on CUDA the queue is drained once per repeat, and the shapes
are small enough that the host, not the GPU, is the bottleneck). The overhead is wrapper - raw;
with --limit-us the script exits 1 when it exceeds the limit (the issue's budget is 15 us).

--breakdown also times the wrapper's pieces, each alone in a loop (so they need not add up exactly
to the overhead):
  interface  flash_attn_func's own work above _kernels.forward (argument conversion, grad check,
             the eager dispatch of ops.fwd);
  forward    _kernels.forward minus the raw call: reads, allocation, packing, stream, status;
  reads      reading q, k, v's dtype, shape, strides, data pointer and device (_kernels._operand);
  alloc      allocating out and lse (torch.empty_like, Tensor.new_empty);
  pack       a zeroed fa_params, the tensor run and the option scalars packed in;
  stream     the current CUDA stream's handle (CUDA only).
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


def best_means_us(fns, iters, repeats, sync):
    """Best of `repeats` means over `iters` calls, per function. The repeats are interleaved (one
    of each function per round) so that a machine that speeds up or slows down mid-run shifts
    every figure alike rather than one."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            sync()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            best[i] = min(best[i], (time.perf_counter() - t0) / iters * 1e6)
    return best


def pieces(q, k, v):
    """The wrapper's pieces for --breakdown (see the module docstring), as (name, function)."""
    cuda = q.is_cuda
    b, s, h, _ = q.shape

    def forward():
        _kernels.forward(q, k, v, None, None, 0, 0, 0.0, 0.0, True, -1, -1, 0.0, None, None)

    def reads():
        _kernels._operand(q, "q", cuda)
        _kernels._operand(k, "k", cuda)
        _kernels._operand(v, "v", cuda)

    def alloc():
        torch.empty_like(q)
        q.new_empty(b, h, s, dtype=torch.float32)

    qv, kv, vv = (_kernels._operand(t, n, cuda)[1] for t, n in ((q, "q"), (k, "k"), (v, "v")))
    out, lse = torch.empty_like(q), q.new_empty(b, h, s, dtype=torch.float32)
    values = qv + kv + vv + _params.tensor_values(out) + _params.tensor_values(lse)

    def pack():
        p = _params.FaParams()
        p.struct_size = ctypes.sizeof(p)
        _kernels._FWD_RUN.pack_into(p, _kernels._Q, *values)
        _params.put_options(p, 0, 0, 0.0, True, -1, -1, 0.0)

    index = q.get_device()
    found = [("forward", forward), ("reads", reads), ("alloc", alloc), ("pack", pack)]
    if cuda:
        found.append(("stream", lambda: _kernels._raw_stream(index)))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--shape", default="1,32,2,64", help="batch,seqlen,heads,head_dim")
    ap.add_argument("--limit-us", type=float, default=None)
    ap.add_argument("--breakdown", action="store_true", help="also time the wrapper's pieces")
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
    extra = pieces(q, k, v) if args.breakdown else []
    t_raw, t_wrap, t_grad, *t_extra = best_means_us(
        [raw, wrapper, autograd] + [fn for _, fn in extra], args.iters, args.repeats, sync)
    print(f"device {dev}, {dtype}, shape (b, s, h, d) = ({b}, {s}, {h}, {d}), torch "
          f"{torch.__version__}, library {flashattn.library_path()}")
    print(f"{'path':10} {'us/call':>9} {'over raw':>9}")
    for name, t in (("raw C ABI", t_raw), ("wrapper", t_wrap), ("autograd", t_grad)):
        print(f"{name:10} {t:9.2f} {t - t_raw:9.2f}")
    if extra:
        t_fwd = t_extra[0]
        print(f"\n{'piece':10} {'us/call':>9}")
        print(f"{'interface':10} {t_wrap - t_fwd:9.2f}")
        print(f"{'forward':10} {t_fwd - t_raw:9.2f}")
        for (name, _), t in zip(extra[1:], t_extra[1:]):
            print(f"{name:10} {t:9.2f}")
    overhead = t_wrap - t_raw
    if args.limit_us is not None and overhead > args.limit_us:
        print(f"FAIL: wrapper overhead {overhead:.2f} us > {args.limit_us} us")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
