#!/usr/bin/env python3
"""GPU benchmark of the forward (--op fwd, the default) or the backward (--op bwd): flashattn
(through its C ABI) against PyTorch's SDPA backends FLASH_ATTENTION (FlashAttention-2) and
CUDNN_ATTENTION, same process, same shapes.

Grid (shared/BENCH.md): hidden 2048 (heads = 2048 / d), batch * seqlen = 16384,
seqlen 512..16384, d in {64, 128, 256}, causal and not, bf16 and fp16.
TFLOP/s = 4 b h s^2 d (halved for causal; times 2.5 for the backward) / median time; CUDA
events, warm-up (>= 200 ms), median of --repeats runs, rotating among input sets so the 60 MB L2
does not hold them.

Backward: the forward runs once outside the timing (ours: fa_forward for out and lse; PyTorch:
the autograd graph, kept with retain_graph), then only the backward is timed: fa_backward with
preallocated dq, dk, dv and workspace (backend flashattn, and flashattn-det with
deterministic=1 while the library accepts it), torch.autograd.grad for torch-fa2 / torch-cudnn.
Forward and backward: each backend is timed once per round, the rounds' orders a Williams design
(bench/round_order.py: every backend follows every other equally often; 6 rounds for the
forward's 3 backends, 4 for the backward's default 4), and its figure is the median of its
rounds (the JSON row keeps each round's ms in ms_rounds; --rounds N takes N rounds of the design
instead). Every timing starts with at least 200 ms of the backend's own untimed calls
(gpu_common.time_fn): with five, whichever backend came right after cuDNN's backward read up to
14% slow; with 200 ms, still ~0.5%, hence the design. tests/fa_bench/gpu_bench_smoke_test.py
runs this file's control flow on stand-ins for torch, the library and the timer.
Each of our rows names the library's kernel family that ran it ("kernel": "cuda-sm80"; asked once
per cell with fa_select_kernel, of the row's own build for a --lib-variant).
Exit status 2 when the library refuses the backward (its message on stderr).

  python3 bench/gpu_bench.py --json out.json [--quick] [--commit SHA] [--op bwd] [--dropout P]
      [--causal both|no|yes] [--seqlens 1024,...] [--dtypes bf16,...]
      [--no-det] [--rounds N] [--lib-variant NAME=PATH ...]
--lib-variant times a second build of the library (another tree's, with a patch applied) in the
same cells and rounds as the main one: an A/B whose two sides see the same inputs, clocks and
neighbours, which separate runs (~0.5% apart on their own) do not.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes  # noqa: E402
from gpu_common import ceilings, record_header, time_fn  # noqa: E402
from round_order import round_orders  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# --dropout: every backend drops with this probability (ours with a fixed seed, SDPA with torch's
# generator), so the spot checks against FA2 are skipped (different masks).
DROPOUT = 0.0
# --lib-variant NAME=PATH: ours timed again through another build of the library (loaded beside
# the main one), as backend flashattn[NAME]; VARIANTS lists the names, for the table. (A knob of
# core/tuning.h is varied by building with its CMake variable, e.g. -DFA_TUNING_SM80_BWD_PDL=0:
# the library reads no environment.)
VARIANTS = []
VARIANT_LIBS = {}


def our_call(lib, p, stream, backward):
    """A no-argument fa_forward / fa_backward call on p, with its own workspace from torch (the
    size query's bytes; the closure keeps p and the workspace alive)."""
    n = fa_ctypes.workspace_size(lib, p, backward)
    ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
    f = fa_ctypes.backward if backward else fa_ctypes.forward
    return lambda: f(lib, p, stream, ws.data_ptr(), n)


def time_rounds(fns, rounds, repeats, context):
    """{backend: [ms of each round]}: every backend of fns timed once a round, in the rounds'
    orders of round_orders (rounds None: the whole design), each timing inside context(backend)
    (its SDPA kernel, or none)."""
    times = {n: [] for n in fns}
    for order in round_orders(list(fns), rounds):
        for n in order:
            with context(n):
                times[n].append(time_fn(fns[n], repeats))
    return times


def bwd_cell(lib, b, s, h, d, dt, causal, stream, repeats, det, rounds):
    """Backward of one cell: ({backend: median ms}, {our backend: max |ours - torch-fa2| over
    dq, dk, dv on set 0}, {backend: [ms of each round]}, {our backend: its kernel family}).
    Every backend is timed once per round, in the rounds' orders of round_orders (rounds None:
    the whole design), so that none always comes first after the cell's setup or right after
    another; a backend's figure is the median of its rounds. Raises FaError when the library
    refuses the default backward. det[0]: whether flashattn-det still runs; cleared, with the
    library's message, at its first refusal."""
    def params(st, deterministic, on=None):
        return fa_ctypes.backward_params(on or lib, st["q"], st["k"], st["v"], st["out"],
                                         st["lse"], st["dout"], *st["grads"], causal=causal,
                                         deterministic=deterministic, dropout_p=DROPOUT, seed=1)
    sets = []
    for _ in range(3):  # 3 x 8 tensors of 64 MB (q k v out dout dq dk dv): rotated, L2 is 60 MB
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[dt], requires_grad=True)
                   for _ in range(3))
        st = {"q": q, "k": k, "v": v, "dout": torch.randn_like(q), "out": torch.empty_like(q),
              "lse": torch.empty(b, h, s, device="cuda", dtype=torch.float32),
              "grads": [torch.empty_like(x) for x in (q, k, v)]}
        p = params(st, False)
        our_call(lib, p, stream, False)()  # out and lse, which the backward reads
        st["flashattn"] = our_call(lib, p, stream, True)
        sets.append(st)
    fns = {"flashattn": [st["flashattn"] for st in sets]}
    families = {"flashattn": fa_ctypes.select_kernel(lib, params(sets[0], False), backward=True)}
    for var, other in VARIANT_LIBS.items():  # its own params and workspace, the same tensors
        fns[f"flashattn[{var}]"] = [our_call(other, params(st, False, other), stream, True)
                                    for st in sets]
        families[f"flashattn[{var}]"] = fa_ctypes.select_kernel(
            other, params(sets[0], False, other), backward=True)
    if det[0]:
        try:
            for st in sets:
                st["flashattn-det"] = our_call(lib, params(st, True), stream, True)
            sets[0]["flashattn-det"]()  # a refusal shows on the first call
            fns["flashattn-det"] = [st["flashattn-det"] for st in sets]
            families["flashattn-det"] = fa_ctypes.select_kernel(lib, params(sets[0], True),
                                                                backward=True)
        except fa_ctypes.FaError as e:
            print(f"flashattn-det skipped for the rest of the run: {e}", file=sys.stderr)
            det[0] = False

    def torch_fns():
        """One autograd.grad call per set, through a forward run once here, outside the timing."""
        out = []
        for st in sets:
            o = F.scaled_dot_product_attention(st["q"].transpose(1, 2), st["k"].transpose(1, 2),
                                               st["v"].transpose(1, 2), is_causal=causal,
                                               dropout_p=DROPOUT)
            # dout with o's strides, so that the backward copies nothing into its layout
            g = torch.empty_like(o).copy_(st["dout"].transpose(1, 2))
            out.append(lambda st=st, o=o, g=g: torch.autograd.grad(
                o, (st["q"], st["k"], st["v"]), g, retain_graph=True))
        return out
    ref = None
    for backend, kernel in (("torch-fa2", SDPBackend.FLASH_ATTENTION),
                            ("torch-cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([kernel]):
                fns[backend] = torch_fns()
                if backend == "torch-fa2":
                    ref = fns[backend][0]()  # the reference gradients, on set 0
        except RuntimeError as e:
            fns.pop(backend, None)
            print(f"{backend} unavailable for {dt} d{d} s{s}: {e}", file=sys.stderr)
    times = time_rounds(fns, rounds, repeats, lambda n: contextlib.nullcontext())
    # correctness spot check against PyTorch's FlashAttention-2 on the same inputs
    errs = {}
    # flashattn last: dq, dk, dv end as its own; a --lib-variant's build is checked as well
    for backend in ("flashattn-det", *(f"flashattn[{v}]" for v in VARIANT_LIBS), "flashattn"):
        if backend in fns and ref is not None and not DROPOUT:
            fns[backend][0]()
            errs[backend] = max((a.float() - r.float()).abs().max().item()
                                for a, r in zip(sets[0]["grads"], ref))
    return {n: statistics.median(t) for n, t in times.items()}, errs, times, families


def fwd_cell(lib, b, s, h, d, dt, causal, stream, repeats, rounds):
    """Forward of one cell: ({backend: median ms}, {our backend: max |out - torch-fa2's| on set
    0} (empty with dropout), {backend: [ms of each round]}, {our backend: its kernel family}).
    The backends are timed in the rounds' orders of round_orders, as the backward's (bwd_cell);
    cuDNN is left out where SDPA refuses it. A --lib-variant's build writes the same out and lse
    through its own params."""
    sets = []
    for _ in range(3):  # 3 x (q, k, v) of 64 MB each: rotated, L2 is 60 MB
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[dt]) for _ in range(3))
        out = torch.empty_like(q)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        p = fa_ctypes.forward_params(lib, q, k, v, out, lse, causal=causal, dropout_p=DROPOUT,
                                     seed=1)
        others = {name: fa_ctypes.forward_params(other, q, k, v, out, lse, causal=causal,
                                                 dropout_p=DROPOUT, seed=1)
                  for name, other in VARIANT_LIBS.items()}
        sets.append((q, k, v, out, lse, p, others))

    def sdpa(st):
        return F.scaled_dot_product_attention(st[0].transpose(1, 2), st[1].transpose(1, 2),
                                              st[2].transpose(1, 2), is_causal=causal,
                                              dropout_p=DROPOUT)
    fns = {"flashattn": [lambda st=st: fa_ctypes.forward(lib, st[5], stream) for st in sets]}
    families = {"flashattn": fa_ctypes.select_kernel(lib, sets[0][5])}
    for name, other in VARIANT_LIBS.items():
        fns[f"flashattn[{name}]"] = [
            lambda st=st, o=other, n=name: fa_ctypes.forward(o, st[6][n], stream) for st in sets]
        families[f"flashattn[{name}]"] = fa_ctypes.select_kernel(other, sets[0][6][name])
    kernels = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION}
    with sdpa_kernel([kernels["torch-fa2"]]):  # FA2 is the reference: no fallback
        ref = sdpa(sets[0]).transpose(1, 2)
    fns["torch-fa2"] = [lambda st=st: sdpa(st) for st in sets]
    try:
        with sdpa_kernel([kernels["torch-cudnn"]]):
            sdpa(sets[0])
        fns["torch-cudnn"] = [lambda st=st: sdpa(st) for st in sets]
    except RuntimeError as e:
        print(f"cudnn unavailable for {dt} d{d} s{s}: {e}", file=sys.stderr)
    times = time_rounds(fns, rounds, repeats, lambda n: (
        sdpa_kernel([kernels[n]]) if n in kernels else contextlib.nullcontext()))
    # correctness spot check against PyTorch's FlashAttention-2 on the same input; ours last
    errs = {}
    for backend in (*(f"flashattn[{v}]" for v in VARIANT_LIBS), "flashattn"):
        if not DROPOUT:
            fns[backend][0]()
            errs[backend] = (sets[0][3].float() - ref.float()).abs().max().item()
    return {n: statistics.median(t) for n, t in times.items()}, errs, times, families


def kernel_field(families, backend):
    """{"kernel": family} for a row of one of our backends (families: a cell's), {} for
    PyTorch's. (shared/BENCH.md names ours flashattn-<family>; the rows keep `backend` as it is,
    which the tables, plots and A/B records key on.)"""
    return {"kernel": families[backend]} if backend in families else {}


def bwd_table(rows):
    """Short table for --op bwd: TFLOP/s and ratios ours / baseline; det/ours = deterministic ms
    over default ms (what determinism costs), when flashattn-det ran."""
    keyed = {}
    for r in rows:
        keyed.setdefault((r["dtype"], r["d"], r["causal"], r["s_q"]), {})[r["backend"]] = r
    det = any(r["backend"] == "flashattn-det" for r in rows)
    print(f"\n{'case':<26}{'ours':>7}{'fa2':>7}{'cudnn':>7}{'/fa2':>7}{'/cudnn':>8}" +
          (f"{'det':>7}{'det/ours':>10}" if det else "") +
          "".join(f"  {'[' + v + ']':>{max(len(v) + 2, 7)}}{'/fa2':>7}{'ours/it':>8}"
                  for v in VARIANTS))

    def tf(r):
        return f"{r['tflops']:>7.0f}" if r else f"{'-':>7}"

    def ratio(a, b, width):  # a's speed over b's
        return f"{b['ms'] / a['ms']:>{width}.2f}" if a and b else f"{'-':>{width}}"
    for (dt, d, c, s), v in keyed.items():
        o, f2, cu, dd = (v.get(k) for k in ("flashattn", "torch-fa2", "torch-cudnn",
                                             "flashattn-det"))
        case = f"{dt} d{d} {'causal' if c else 'full'} s{s}"
        line = f"{case:<26}{tf(o)}{tf(f2)}{tf(cu)}{ratio(o, f2, 7)}{ratio(o, cu, 8)}"
        if det:
            line += tf(dd) + (f"{dd['ms'] / o['ms']:>10.2f}" if dd and o else f"{'-':>10}")
        for var in VARIANTS:  # the variant's TFLOP/s, its ratio to FA2, ours over it (speed)
            vr = v.get(f"flashattn[{var}]")
            line += ("  " + f"{tf(vr).strip():>{max(len(var) + 2, 7)}}" + ratio(vr, f2, 7) +
                     ratio(o, vr, 8))
        print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k; bf16 only")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--dims", default="64,128,256", help="head dims (the standard grid: 64,128,256)")
    ap.add_argument("--op", default="fwd", choices=("fwd", "bwd"),
                    help="the pass to time (backward: FLOPs 2.5 x the forward's)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout probability for every backend (spot checks skipped)")
    ap.add_argument("--causal", default="both", choices=("both", "no", "yes"),
                    help="the cells to run: full attention, causal or both")
    ap.add_argument("--lib-variant", action="append", default=[], metavar="NAME=PATH",
                    help="also time the library built at PATH (e.g. with a patch of "
                         "dev/experiments) in the same cell and rounds (backend "
                         "flashattn[NAME]); repeatable")
    ap.add_argument("--seqlens",
                    help="comma-separated seqlens instead of the grid's (or --quick's)")
    ap.add_argument("--dtypes", help="comma-separated dtypes (bf16, fp16) instead of the grid's")
    ap.add_argument("--no-det", action="store_true", help="--op bwd: skip the deterministic mode")
    ap.add_argument("--rounds", type=int, default=None,
                    help="time every backend this many times per cell (default: the Williams "
                         "design's rounds, 4 for 4 backends, 6 for 3; fewer are not balanced); "
                         "the figure is the median of the rounds")
    args = ap.parse_args()
    if args.rounds is not None and args.rounds < 1:
        ap.error(f"--rounds must be at least 1, not {args.rounds}")
    global DROPOUT
    DROPOUT = args.dropout
    for var in args.lib_variant:
        name, sep, path = var.partition("=")
        if not sep or not name or not path or name in VARIANTS:
            ap.error(f"--lib-variant wants NAME=PATH with a new NAME, not {var!r}")
        VARIANT_LIBS[name] = fa_ctypes.load(path)
        VARIANTS.append(name)
    causals = {"both": (False, True), "no": (False,), "yes": (True,)}[args.causal]

    lib = fa_ctypes.load(args.lib)
    torch.manual_seed(0)
    seqlens = [1024, 4096, 16384] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    dtypes = ["bf16"] if args.quick else ["bf16", "fp16"]
    if args.seqlens:
        seqlens = [int(x) for x in args.seqlens.split(",")]
    if args.dtypes:
        dtypes = args.dtypes.split(",")
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    det = [not args.no_det]  # flashattn-det runs until the library refuses deterministic=1
    ceil = ceilings()
    print(f"ceilings: {ceil}", file=sys.stderr)
    header = record_header(lib, args.commit, ceil)

    def save(partial):
        """The record so far (saved after every cell, marked partial, so that a run cut short
        keeps its cells)."""
        with open(args.json, "w") as f:
            json.dump(dict(header, rows=rows, **({"partial": True} if partial else {})), f,
                      indent=1)
    for dt in dtypes:
        for d in (int(x) for x in args.dims.split(",")):
            for causal in causals:
                for s in seqlens:
                    b, h = 16384 // s, 2048 // d
                    flops = 4 * b * h * s * s * d / (2 if causal else 1)
                    if args.op == "bwd":
                        flops *= 2.5
                        try:
                            res, errs, rounds, families = bwd_cell(
                                lib, b, s, h, d, dt, causal, stream, args.repeats, det,
                                args.rounds)
                        except fa_ctypes.FaError as e:
                            print(f"flashattn refused the backward ({dt} d{d} causal={int(causal)}"
                                  f" s{s}): {e}", file=sys.stderr)
                            sys.exit(2)
                        for backend, ms in res.items():
                            rows.append({"op": "bwd", "dtype": dt, "d": d, "causal": causal,
                                         "b": b, "h": h, "s_q": s, "s_k": s, "backend": backend,
                                         **kernel_field(families, backend),
                                         "ms": round(ms, 4), "tflops": round(flops / ms * 1e-9, 1),
                                         "dropout": DROPOUT,
                                         "max_abs_diff_vs_torch_fa2": errs.get(backend),
                                         "ms_rounds": [round(x, 4) for x in rounds[backend]]})
                        print(f"{dt} d{d} causal={int(causal)} s{s} bwd: " +
                              " ".join(f"{k}={flops / v * 1e-9:.0f}" for k, v in res.items()) +
                              "".join(f" err[{k}]={v:.2e}" for k, v in errs.items()),
                              file=sys.stderr)
                        torch.cuda.empty_cache()  # the cell's sets are gone with bwd_cell
                        save(partial=True)
                        continue
                    res, errs, rounds, families = fwd_cell(lib, b, s, h, d, dt, causal, stream,
                                                           args.repeats, args.rounds)
                    for backend, ms in res.items():
                        rows.append({"op": "fwd", "dtype": dt, "d": d, "causal": causal, "b": b,
                                     "h": h, "s_q": s, "s_k": s, "backend": backend,
                                     **kernel_field(families, backend),
                                     "ms": round(ms, 4), "tflops": round(flops / ms * 1e-9, 1),
                                     "dropout": DROPOUT,
                                     "max_abs_diff_vs_torch_fa2": errs.get(backend),
                                     "ms_rounds": [round(x, 4) for x in rounds[backend]]})
                    print(f"{dt} d{d} causal={int(causal)} s{s}: " +
                          " ".join(f"{k}={flops / v * 1e-9:.0f}" for k, v in res.items()) +
                          "".join(f" err[{k}]={v:.2e}" for k, v in errs.items()),
                          file=sys.stderr)
                    torch.cuda.empty_cache()
                    save(partial=True)
    torch.cuda.empty_cache()
    save(partial=False)
    if args.op == "bwd":
        bwd_table(rows)
        return
    # Short table last: TFLOP/s and ratios, ours / baseline; per --lib-variant its TFLOP/s, its
    # ratio to FA2 and ours over it.
    print(f"\n{'case':<26}{'ours':>7}{'fa2':>7}{'cudnn':>7}{'/fa2':>7}{'/cudnn':>8}" +
          "".join(f"  {'[' + v + ']':>{max(len(v) + 2, 7)}}{'/fa2':>7}{'ours/it':>8}"
                  for v in VARIANTS))
    keyed = {}
    for r in rows:
        keyed.setdefault((r["dtype"], r["d"], r["causal"], r["s_q"]), {})[r["backend"]] = r["tflops"]
    for (dt, d, c, s), v in keyed.items():
        o, f2, cu = v.get("flashattn"), v.get("torch-fa2"), v.get("torch-cudnn")
        line = (f"{dt} d{d} {'causal' if c else 'full':<6} s{s:<6}{o:>7.0f}{f2:>7.0f}"
                f"{(cu or 0):>7.0f}{o / f2:>7.2f}{(o / cu if cu else 0):>8.2f}")
        for var in VARIANTS:
            vt = v.get(f"flashattn[{var}]")
            line += (f"  {vt:>{max(len(var) + 2, 7)}.0f}{vt / f2:>7.2f}{o / vt:>8.2f}" if vt
                     else "")
        print(line)


if __name__ == "__main__":
    main()
