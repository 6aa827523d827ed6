#!/usr/bin/env python3
"""Same-run comparison: flashattn (C ABI via ctypes; backends `flashattn` and `vanilla`) against
PyTorch's scaled_dot_product_attention backends FLASH_ATTENTION (torch-fa2), CUDNN_ATTENTION
(torch-cudnn), EFFICIENT_ATTENTION (torch-efficient) and MATH (torch-math), on identical
tensors in one process. Writes one JSON (shared/BENCH.md schema) with every figure, each row's
peak memory, the ratios ours / baseline cell by cell, and the card's ceilings.

Grid: hidden 2048 (heads = 2048 / d), batch * seqlen = 16384, seqlen 512..16384, d 64/128/256,
causal and not; op fwd and bwd. Timing: CUDA events, warm-up, median of --repeats, rotating
among input sets that together exceed the L2. Peak memory: torch.cuda.max_memory_allocated above
what was allocated before the call was built, for one call on one input set (outputs, workspace,
intermediates; ours: its workspace is a torch tensor, so the same allocator counts it). A backend
that cannot run a cell (unsupported, out of memory) gets a row with status and null figures.

  python3 bench/torch_compare.py --lib build-gpu/libflashattn.so --json out.json [--quick]
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
TORCH = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
         "torch-efficient": SDPBackend.EFFICIENT_ATTENTION, "torch-math": SDPBackend.MATH}
OURS = {"flashattn": 0, "vanilla": 3}  # fa_backend: AUTO, VANILLA
L2_BYTES = 60 * 2**20





class Cell:
    """Input sets of one shape, in (b, s, h, d) layout, shared by every backend."""

    def __init__(self, b, s, h, d, dtype, grads):
        set_bytes = 4 * b * s * h * d * dtype.itemsize
        n_sets = max(1, min(4, -(-2 * L2_BYTES // set_bytes)))
        self.sets = []
        for _ in range(n_sets):
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype, requires_grad=grads)
                       for _ in range(3))
            self.sets.append({"q": q, "k": k, "v": v, "dout": torch.randn_like(q)})


def sdpa(st, causal):
    return F.scaled_dot_product_attention(st["q"].transpose(1, 2), st["k"].transpose(1, 2),
                                          st["v"].transpose(1, 2), is_causal=causal)


def torch_fns(sets, backend, op, causal):
    if op == "fwd":
        def fwd(st):
            with sdpa_kernel([TORCH[backend]]), torch.no_grad():
                sdpa(st, causal)
        return [lambda st=st: fwd(st) for st in sets]
    outs = []
    with sdpa_kernel([TORCH[backend]]):
        for st in sets:
            outs.append(sdpa(st, causal))
    # o is (b, h, s, d) (SDPA's layout): dout, stored (b, s, h, d) like ours, as the same view.
    return [lambda st=st, o=o: torch.autograd.grad(o, (st["q"], st["k"], st["v"]),
                                                   st["dout"].transpose(1, 2), retain_graph=True)
            for st, o in zip(sets, outs)]


def our_fns(lib, sets, backend, op, causal, stream):
    fns = []
    for st in sets:
        q, k, v = (st[n].detach() for n in ("q", "k", "v"))
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda", dtype=torch.float32)
        p = fa_ctypes.forward_params(lib, q, k, v, out, lse, causal=causal)
        p.backend = OURS[backend]
        grads = [torch.empty_like(x) for x in (q, k, v)] if op == "bwd" else []
        if op == "bwd":
            fa_ctypes.with_grads(p, st["dout"], *grads)
        n = max(fa_ctypes.workspace_size(lib, p), fa_ctypes.workspace_size(lib, p, op == "bwd"))
        ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
        st[backend] = (p, out, lse, grads, ws)  # keep tensors alive
        call = fa_ctypes.backward if op == "bwd" else fa_ctypes.forward
        if op == "bwd":
            fa_ctypes.forward(lib, p, stream, ws.data_ptr(), n)
        fns.append(lambda p=p, ws=ws, n=n, call=call: call(lib, p, stream, ws.data_ptr(), n))
    return fns


def drop_buffers(sets):
    """Frees what our_fns parked in the input sets (outputs, workspace) next to q, k, v, dout."""
    for st in sets:
        for key in [key for key in st if key not in ("q", "k", "v", "dout")]:
            del st[key]


def measure(make_fns, sets, repeats):
    """(ms, peak_bytes, status). make_fns(sets) builds one call per input set. The peak is
    measured on one set (max allocated above what existed before, over building the call and
    running it once), so every backend is charged for exactly one call's outputs, workspace and
    intermediates; the timing then rotates over all sets."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fns = None
    try:
        one = make_fns(sets[:1])
        one[0]()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        one = None
        drop_buffers(sets)
        torch.cuda.empty_cache()
        fns = make_fns(sets)
        ms = time_fn(fns, repeats, warmup=3)
        return ms, peak, "ok"
    except torch.OutOfMemoryError:
        return None, None, "oom"
    except fa_ctypes.FaError as e:
        kind = "unsupported" if e.status in (fa_ctypes.FA_ERROR_BACKEND, fa_ctypes.FA_ERROR_UNSUPPORTED) else "error"
        return None, None, f"{kind}: {e}"
    except RuntimeError as e:  # e.g. a torch backend that does not take this shape
        return None, None, f"unsupported: {str(e).splitlines()[0][:200]}"
    finally:
        fns = None
        drop_buffers(sets)
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/libflashattn.so", help="path of libflashattn.so")
    ap.add_argument("--json", required=True, help="output record")
    ap.add_argument("--repeats", type=int, default=30, help="timed calls per cell (median)")
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k; d 128 only")
    ap.add_argument("--commit", default=os.environ.get("FA_COMMIT", "unknown"))
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--ops", default="fwd,bwd")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--backends", default=",".join(list(OURS) + list(TORCH)))
    ap.add_argument("--math-max-seqlen", type=int, default=16384,
                    help="skip torch-math and vanilla above this seqlen (they materialise s^2)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in OURS and b not in TORCH]
    if unknown:
        ap.error(f"--backends: unknown {unknown}; choose from {list(OURS) + list(TORCH)}")
    dims = [128] if args.quick else [int(x) for x in args.dims.split(",")]
    seqlens = [1024, 4096, 16384] if args.quick else [int(x) for x in args.seqlens.split(",")]

    lib = fa_ctypes.load(args.lib)
    torch.manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    ceil = ceilings()
    print(f"ceilings: {ceil}", file=sys.stderr)
    rows, ratios = [], []
    for op in args.ops.split(","):
        for d in dims:
            for causal in (False, True):
                for s in seqlens:
                    b, h = max(1, 16384 // s), 2048 // d
                    flops = 4 * b * h * s * s * d / (2 if causal else 1) * (2.5 if op == "bwd" else 1)
                    cell = Cell(b, s, h, d, DTYPES[args.dtype], op == "bwd")
                    res = {}
                    for be in backends:
                        if be in ("vanilla", "torch-math") and s > args.math_max_seqlen:
                            res[be] = (None, None, "skipped: seqlen > --math-max-seqlen")
                        elif be in OURS:
                            res[be] = measure(lambda sets: our_fns(lib, sets, be, op, causal, stream),
                                              cell.sets, args.repeats)
                        else:
                            res[be] = measure(lambda sets: torch_fns(sets, be, op, causal),
                                              cell.sets, args.repeats)
                        ms, peak, status = res[be]
                        rows.append({"op": op, "dtype": args.dtype, "d": d, "causal": causal, "b": b,
                                     "h": h, "h_kv": h, "s_q": s, "s_k": s, "backend": be,
                                     "device": "cuda", "status": status,
                                     "ms": round(ms, 4) if ms else None,
                                     "tflops": round(flops / ms * 1e-9, 1) if ms else None,
                                     "peak_bytes": peak})
                    for ours in OURS:
                        for base in TORCH:
                            if ours in res and base in res and res[ours][0] and res[base][0]:
                                ratios.append({"op": op, "d": d, "causal": causal, "s": s,
                                               "ours": ours, "baseline": base,
                                               "speed_ratio": round(res[base][0] / res[ours][0], 3),
                                               "memory_ratio": round(res[ours][1] / res[base][1], 3)})
                    print(f"{op} d{d} {'causal' if causal else 'full'} s{s}: " + " ".join(
                        f"{k}={flops / v[0] * 1e-9:.0f}" if v[0] else f"{k}={v[2].split(':')[0]}"
                        for k, v in res.items()), file=sys.stderr)
                    del cell
                    torch.cuda.empty_cache()
    record = dict(record_header(lib, args.commit, ceil), rows=rows,
                  ratios_note="speed_ratio = baseline ms / ours ms (>1: ours faster); "
                              "memory_ratio = ours peak / baseline peak",
                  ratios=ratios)
    with open(args.json, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {args.json}: {len(rows)} rows, {len(ratios)} ratios", file=sys.stderr)


if __name__ == "__main__":
    main()
