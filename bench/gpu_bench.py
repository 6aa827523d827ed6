#!/usr/bin/env python3
"""The GPU benchmark: flashattn (through its C ABI) against PyTorch's SDPA backends, forward
(--op fwd, the default) or backward (--op bwd), same process, same shapes, same rounds.

Backends (--backends, comma-separated; flashattn is always one of them):
  flashattn        ours: the kernel family the library picks (fa_backend AUTO)
  flashattn-det    ours with deterministic=1 (backward only)
  vanilla          ours: standard attention, materialising the scores (fa_backend VANILLA)
  torch-fa2        SDPA with SDPBackend.FLASH_ATTENTION (FlashAttention-2), the spot checks'
                   reference
  torch-cudnn      SDPA with CUDNN_ATTENTION
  torch-efficient  SDPA with EFFICIENT_ATTENTION (memory-efficient)
  torch-math       SDPA with MATH (materialising)
  torch-flex       FlexAttention (torch.nn.attention.flex_attention under torch.compile; a causal
                   cell passes a block mask built once outside the timing); forward only, and
                   each new shape compiles on its first call, outside the timing
Default: flashattn, torch-fa2, torch-cudnn, and flashattn-det for the backward (--no-det drops
it). A backend that cannot run a cell (refused, out of memory, or vanilla / torch-math past
--math-max-seqlen) is left out of that cell and named, with the reason, in the record's
"skipped"; flashattn-det is dropped for the rest of the run at the library's first refusal.

Grid (shared/BENCH.md): hidden 2048 (heads = 2048 / d), batch * seqlen = 16384,
seqlen 512..16384, d in {64, 128, 256}, causal and not, bf16 and fp16.
TFLOP/s = 4 b h s^2 d (halved for causal; times 2.5 for the backward) / median time; CUDA
events, warm-up (>= 200 ms), median of --repeats runs, rotating among 3 input sets so the 60 MB
L2 does not hold them (vanilla's workspace, its b h s^2 scores, is one buffer for the 3 sets:
three would not fit at 16k).

Backward: the forward runs once outside the timing (ours: fa_forward for out and lse; PyTorch:
the autograd graph, kept with retain_graph), then only the backward is timed: fa_backward with
preallocated dq, dk, dv and workspace, torch.autograd.grad for PyTorch's backends.
Each backend is timed once per round, the rounds' orders a Williams design
(bench/round_order.py: every backend follows every other equally often; 6 rounds for the
forward's 3 default backends, 4 for the backward's 4), and its figure is the median of its
rounds (the JSON row keeps each round's ms in ms_rounds; --rounds N takes N rounds of the design
instead). Every timing starts with at least 200 ms of the backend's own untimed calls
(gpu_common.time_fn): with five, whichever backend came right after cuDNN's backward read up to
14% slow; with 200 ms, still ~0.5%, hence the design. tests/fa_bench/gpu_bench_smoke_test.py
runs this file's control flow on stand-ins for torch, the library and the timer.
Each of our rows names the library's kernel family that ran it ("kernel": "cuda-sm80"; asked once
per cell with fa_select_kernel, of the row's own build for a --lib-variant). Our rows and a
--lib-variant's carry max_abs_diff_vs_torch_fa2 (out, or the largest over dq, dk, dv) on set 0.

--memory adds peak_bytes to every row: torch.cuda.max_memory_allocated above what was allocated
before, over building one call on input set 0 and running it once (ours with its own out, lse,
gradients and workspace, all torch tensors; a backward with the forward whose outputs it reads;
PyTorch's backward with its copy of dout in its output's layout), measured before and apart
from the timing. That is each call's memory beyond the inputs q, k, v (and dout).

--lib-variant times a second build of the library (another tree's, with a patch applied) in the
same cells and rounds as the main one: an A/B whose two sides see the same inputs, clocks and
neighbours, which separate runs (~0.5% apart on their own) do not. bench/ab.sh builds them.
Exit status 2 when the library refuses our call (its message on stderr).

  python3 bench/gpu_bench.py --json out.json [--quick] [--commit SHA] [--op bwd] [--dropout P]
      [--backends flashattn,vanilla,torch-fa2,...] [--memory] [--causal both|no|yes]
      [--seqlens 1024,...] [--dims 64,...] [--dtypes bf16,...] [--no-det] [--rounds N]
      [--lib-variant NAME=PATH ...]
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
TORCH = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
         "torch-efficient": SDPBackend.EFFICIENT_ATTENTION, "torch-math": SDPBackend.MATH}
FLEX = "torch-flex"
PYTORCH = (*TORCH, FLEX)  # PyTorch's backends: everything not ours
OURS = ("flashattn", "flashattn-det", "vanilla")
FA_BACKEND_VANILLA = 3  # include/flashattn/flashattn.h, fa_backend
# The order every cell builds and lists its backends in (a --lib-variant's right after
# flashattn): the round design is over this order, so a subset keeps the default's.
ORDER = ("flashattn", "flashattn-det", "vanilla", *PYTORCH)
MATERIALISING = ("vanilla", "torch-math")  # their memory grows with s^2: --math-max-seqlen
# --dropout: every backend drops with this probability (ours with a fixed seed, SDPA with torch's
# generator), so the spot checks against FA2 are skipped (different masks).
DROPOUT = 0.0
# --lib-variant NAME=PATH: ours timed again through another build of the library (loaded beside
# the main one), as backend flashattn[NAME]; VARIANTS lists the names, for the table. (A knob of
# core/tuning.h is varied by building with its CMake variable, e.g. -DFA_TUNING_SM80_BWD_PDL=0:
# the library reads no environment.)
VARIANTS = []
VARIANT_LIBS = {}


_FLEX_FN = []


def flex_fn():
    """flex_attention under torch.compile, made once: every cell's shape is a recompile of the
    same function, so dynamo's per-function limit (8 by default, after which it falls back to
    an unfused eager path) is raised to more than the grid's cells."""
    if not _FLEX_FN:
        from torch.nn.attention.flex_attention import flex_attention
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 256)
        _FLEX_FN.append(torch.compile(flex_attention, dynamic=False))
    return _FLEX_FN[0]


def our_call(lib, p, stream, backward, keep=None, ws=None):
    """A no-argument fa_forward / fa_backward call on p with a workspace of the size query's
    bytes: ws if given (a buffer shared by several calls), else its own from torch; none when the
    forward needs none. The closure keeps keep (p's tensors) and the workspace alive."""
    n = fa_ctypes.workspace_size(lib, p, backward)
    f = fa_ctypes.backward if backward else fa_ctypes.forward
    if n == 0 and not backward:
        return lambda keep=keep: f(lib, p, stream)
    ws = ws if ws is not None else torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
    return lambda keep=keep: f(lib, p, stream, ws.data_ptr(), n)


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


def params(lib, st, backend, causal):
    """fa_params of one of our backends on input set st (lib: the main build or a variant's)."""
    args = (st["q"], st["k"], st["v"], st["out"], st["lse"])
    if "grads" in st:
        p = fa_ctypes.backward_params(lib, *args, st["dout"], *st["grads"], causal=causal,
                                      deterministic=backend == "flashattn-det",
                                      dropout_p=DROPOUT, seed=1)
    else:
        p = fa_ctypes.forward_params(lib, *args, causal=causal, dropout_p=DROPOUT, seed=1)
    if backend == "vanilla":
        p.backend = FA_BACKEND_VANILLA
    return p


class Cell:
    """One cell's input sets and the calls of each backend on them. backward: sets hold dout
    and our gradients, and our forward has run on each (out and lse, which every backward of
    ours reads)."""

    def __init__(self, lib, b, s, h, d, dt, causal, stream, backward):
        self.lib, self.causal, self.stream, self.backward = lib, causal, stream, backward
        self.lse_shape = (b, h, s)
        self.sets = []
        # 3 x (q, k, v) of 64 MB each (backward: 3 x 8 tensors with out, dout and the
        # gradients): rotated, the L2 is 60 MB
        for _ in range(3):
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[dt],
                                   requires_grad=backward) for _ in range(3))
            st = {"q": q, "k": k, "v": v}
            if backward:
                st["dout"] = torch.randn_like(q)
            self.sets.append(self.outputs(st))
        if backward:
            for st in self.sets:
                our_call(lib, params(lib, st, "flashattn", causal), stream, False, st)()

    def outputs(self, st):
        """st with our outputs beside its inputs: out, lse (and for the backward dq, dk, dv)."""
        q = st["q"]
        st["out"] = torch.empty_like(q)
        st["lse"] = torch.empty(*self.lse_shape, device="cuda", dtype=torch.float32)
        if self.backward:
            st["grads"] = [torch.empty_like(x) for x in (q, st["k"], st["v"])]
        return st

    def lib_of(self, backend):
        """The library a backend of ours calls: a variant's build, or the main one."""
        return VARIANT_LIBS.get(backend[len("flashattn["):-1], self.lib) \
            if backend.startswith("flashattn[") else self.lib

    def ours(self, backend, sets):
        """One call of our backend per input set (vanilla: one workspace for all of them)."""
        lib, ws = self.lib_of(backend), None
        ps = [params(lib, st, backend, self.causal) for st in sets]
        if backend == "vanilla":
            n = fa_ctypes.workspace_size(lib, ps[0], self.backward)
            ws = torch.empty(max(n, 1), device="cuda", dtype=torch.uint8)
        return [our_call(lib, p, self.stream, self.backward, st, ws) for p, st in zip(ps, sets)]

    def family(self, backend):
        """The kernel family our backend runs on set 0 (fa_select_kernel)."""
        lib = self.lib_of(backend)
        return fa_ctypes.select_kernel(lib, params(lib, self.sets[0], backend, self.causal),
                                       backward=self.backward)

    def sdpa(self, st):
        return F.scaled_dot_product_attention(st["q"].transpose(1, 2), st["k"].transpose(1, 2),
                                              st["v"].transpose(1, 2), is_causal=self.causal,
                                              dropout_p=DROPOUT)

    def torch_calls(self, backend, sets):
        """One call of a PyTorch backend per input set. Forward: SDPA, timed inside its
        sdpa_kernel context (time_rounds' context). Backward: torch.autograd.grad through a
        forward run once here, outside the timing, with that backend."""
        if not self.backward:
            return [lambda st=st: self.sdpa(st) for st in sets]
        out = []
        with sdpa_kernel([TORCH[backend]]):
            for st in sets:
                o = self.sdpa(st)
                # dout with o's strides, so that the backward copies nothing into its layout
                g = torch.empty_like(o).copy_(st["dout"].transpose(1, 2))
                out.append(lambda st=st, o=o, g=g: torch.autograd.grad(
                    o, (st["q"], st["k"], st["v"]), g, retain_graph=True))
        return out

    def flex_calls(self, sets):
        """One FlexAttention call per input set, on the same (b, h, s, d) views SDPA gets; a
        causal cell's block mask is built here, outside the timing."""
        if self.backward:
            raise RuntimeError("torch-flex is timed in the forward only")
        from torch.nn.attention.flex_attention import create_block_mask
        fn, mask = flex_fn(), None
        if self.causal:
            s = sets[0]["q"].shape[1]
            mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, s, s, device="cuda")
        return [lambda st=st: fn(*(st[n].transpose(1, 2) for n in ("q", "k", "v")),
                                 block_mask=mask) for st in sets]

    def calls(self, backend, sets):
        if backend == FLEX:
            return self.flex_calls(sets)
        if backend in TORCH:
            return self.torch_calls(backend, sets)
        return self.ours(backend, sets)

    def context(self, backend):
        """What a timing of backend runs inside: the forward's SDPA kernel, else nothing."""
        if backend in TORCH and not self.backward:
            return sdpa_kernel([TORCH[backend]])
        return contextlib.nullcontext()

    def peak_bytes(self, backend):
        """Bytes allocated above what was before, at the peak of building one call of backend
        on set 0's inputs (ours with its own outputs; a backward of ours after our forward) and
        running it once."""
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        st = {n: self.sets[0][n] for n in ("q", "k", "v", "dout") if n in self.sets[0]}
        if backend not in PYTORCH:
            self.outputs(st)
            if self.backward:
                our_call(self.lib, params(self.lib, st, "flashattn", self.causal), self.stream,
                         False, st)()
        fn = self.calls(backend, [st])[0]
        with self.context(backend):
            fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    def reference(self, fns, tried):
        """PyTorch FA2's out (forward) or dq, dk, dv (backward) on set 0: the spot checks'
        reference, through fns' torch-fa2 calls or else calls of its own; None when FA2 cannot
        run the backward (tried: torch-fa2's calls were built and refused)."""
        if self.backward and tried and "torch-fa2" not in fns:
            return None
        try:
            with sdpa_kernel([TORCH["torch-fa2"]]):
                if not self.backward:
                    return self.sdpa(self.sets[0]).transpose(1, 2)
                return (fns.get("torch-fa2") or self.torch_calls("torch-fa2", self.sets[:1]))[0]()
        except RuntimeError as e:
            if not self.backward:  # FA2 is the forward's reference: no fallback
                raise
            print(f"torch-fa2 unavailable: {e}", file=sys.stderr)
            return None


def run_cell(cell, backends, rounds, repeats, det, memory, skip):
    """One cell: ({backend: median ms}, {our backend: max |ours - torch-fa2| on set 0, over out
    or over dq, dk, dv}, {backend: [ms of each round]}, {our backend: its kernel family},
    {backend: peak bytes} (empty without memory)). backends: the cell's, in ORDER, a variant's
    right after flashattn. Every backend is timed once per round, in the rounds' orders of
    round_orders (rounds None: the whole design), so that none always comes first after the
    cell's setup or right after another; a backend's figure is the median of its rounds. A
    backend other than flashattn and the variants that fails its first call (or, with memory,
    its memory probe) is left out (skip(backend, reason)); flashattn's refusal raises FaError.
    det[0]: whether flashattn-det still runs, cleared at its first refusal."""
    fns, families, peaks = {}, {}, {}
    for n in backends:
        required = n == "flashattn" or n.startswith("flashattn[")
        try:
            if memory:
                peaks[n] = cell.peak_bytes(n)
            fns[n] = cell.calls(n, cell.sets)
            if n not in PYTORCH:
                families[n] = cell.family(n)
            if not required and not (n == "torch-fa2" and not cell.backward):
                with cell.context(n):
                    fns[n][0]()  # a refusal shows on the first call
        except RuntimeError as e:  # FaError, SDPA's refusal, out of memory
            if required:
                raise
            fns.pop(n, None)
            families.pop(n, None)
            peaks.pop(n, None)
            torch.cuda.empty_cache()
            if n == "flashattn-det" and isinstance(e, fa_ctypes.FaError):
                print(f"flashattn-det skipped for the rest of the run: {e}", file=sys.stderr)
                det[0] = False
            skip(n, str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
    ref = cell.reference(fns, "torch-fa2" in backends)
    times = time_rounds(fns, rounds, repeats, cell.context)
    # correctness spot check against PyTorch's FlashAttention-2 on the same inputs; flashattn
    # last, so that out (dq, dk, dv) end as its own
    errs = {}
    for n in sorted((n for n in fns if n not in PYTORCH), key=lambda n: n == "flashattn"):
        if ref is not None and not DROPOUT:
            fns[n][0]()
            st = cell.sets[0]
            errs[n] = (max((a.float() - r.float()).abs().max().item()
                           for a, r in zip(st["grads"], ref)) if cell.backward
                       else (st["out"].float() - ref.float()).abs().max().item())
    return {n: statistics.median(t) for n, t in times.items()}, errs, times, families, peaks


def kernel_field(families, backend):
    """{"kernel": family} for a row of one of our backends (families: a cell's), {} for
    PyTorch's. (shared/BENCH.md names ours flashattn-<family>; the rows keep `backend` as it is,
    which the tables, plots and A/B records key on.)"""
    return {"kernel": families[backend]} if backend in families else {}


SHORT = {"vanilla": "vanilla", "torch-efficient": "effic", "torch-math": "math",
         FLEX: "flex"}


def table(rows, memory):
    """Short table: TFLOP/s and ratios ours / baseline (speed); det/ours = deterministic ms over
    default ms (what determinism costs), when flashattn-det ran; per --lib-variant its TFLOP/s,
    its ratio to FA2 and ours over it; TFLOP/s of vanilla, torch-efficient and torch-math when
    they ran. With memory, a second table: each backend's peak MiB beyond the inputs."""
    keyed = {}
    for r in rows:
        keyed.setdefault((r["dtype"], r["d"], r["causal"], r["s_q"]), {})[r["backend"]] = r
    names = {r["backend"] for r in rows}
    det = "flashattn-det" in names
    extra = [n for n in SHORT if n in names]
    print(f"\n{'case':<26}{'ours':>7}{'fa2':>7}{'cudnn':>7}{'/fa2':>7}{'/cudnn':>8}" +
          (f"{'det':>7}{'det/ours':>10}" if det else "") +
          "".join(f"  {'[' + v + ']':>{max(len(v) + 2, 7)}}{'/fa2':>7}{'ours/it':>8}"
                  for v in VARIANTS) + "".join(f"{SHORT[n]:>9}" for n in extra))

    def tf(r, width=7):
        return f"{r['tflops']:>{width}.0f}" if r else f"{'-':>{width}}"

    def ratio(a, b, width):  # a's speed over b's
        return f"{b['ms'] / a['ms']:>{width}.2f}" if a and b else f"{'-':>{width}}"

    def case(dt, d, c, s):
        return f"{dt} d{d} {'causal' if c else 'full'} s{s}"
    for (dt, d, c, s), v in keyed.items():
        o, f2, cu, dd = (v.get(k) for k in ("flashattn", "torch-fa2", "torch-cudnn",
                                             "flashattn-det"))
        line = f"{case(dt, d, c, s):<26}{tf(o)}{tf(f2)}{tf(cu)}{ratio(o, f2, 7)}{ratio(o, cu, 8)}"
        if det:
            line += tf(dd) + (f"{dd['ms'] / o['ms']:>10.2f}" if dd and o else f"{'-':>10}")
        for var in VARIANTS:  # the variant's TFLOP/s, its ratio to FA2, ours over it (speed)
            vr = v.get(f"flashattn[{var}]")
            line += ("  " + f"{tf(vr).strip():>{max(len(var) + 2, 7)}}" + ratio(vr, f2, 7) +
                     ratio(o, vr, 8))
        line += "".join(tf(v.get(n), 9) for n in extra)
        print(line)
    if not memory:
        return
    order = [n for n in ORDER[:1] + tuple(f"flashattn[{v}]" for v in VARIANTS) + ORDER[1:]
             if n in names]
    labels = {n: n.replace("torch-", "") for n in order}
    widths = {n: max(len(labels[n]) + 2, 9) for n in order}
    print(f"\n{'peak MiB, beyond inputs':<26}" +
          "".join(f"{labels[n]:>{widths[n]}}" for n in order))
    for (dt, d, c, s), v in keyed.items():
        print(f"{case(dt, d, c, s):<26}" + "".join(
            f"{v[n]['peak_bytes'] / 2**20:>{widths[n]}.0f}"
            if v.get(n, {}).get("peak_bytes") is not None else f"{'-':>{widths[n]}}"
            for n in order))


def parse_backends(ap, args):
    """The run's backends in ORDER (without the variants), from --backends, --op and --no-det."""
    if args.backends is None:
        wanted = ["flashattn", "torch-fa2", "torch-cudnn"]
        if args.op == "bwd":
            wanted.append("flashattn-det")
    else:
        wanted = args.backends.split(",")
    unknown = [n for n in wanted if n not in ORDER]
    if unknown:
        ap.error(f"--backends: unknown {', '.join(unknown)}; choose from {', '.join(ORDER)}")
    if "flashattn" not in wanted:
        ap.error("--backends must include flashattn (the ratios are ours over the baselines)")
    if "flashattn-det" in wanted and args.op == "fwd":
        ap.error("--backends: flashattn-det is a backward mode (--op bwd)")
    if FLEX in wanted and args.op == "bwd":
        ap.error(f"--backends: {FLEX} is timed in the forward only")
    if args.no_det:
        wanted = [n for n in wanted if n != "flashattn-det"]
    return [n for n in ORDER if n in wanted]


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
    ap.add_argument("--backends",
                    help=f"comma-separated, of {', '.join(ORDER)} (default: flashattn, "
                         "torch-fa2, torch-cudnn; backward: and flashattn-det)")
    ap.add_argument("--memory", action="store_true",
                    help="also measure each backend's peak memory beyond the inputs for one "
                         "call (row field peak_bytes; apart from the timing)")
    ap.add_argument("--math-max-seqlen", type=int, default=None,
                    help="skip vanilla and torch-math above this seqlen (they materialise s^2)")
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
    backends = parse_backends(ap, args)
    global DROPOUT
    DROPOUT = args.dropout
    for var in args.lib_variant:
        name, sep, path = var.partition("=")
        if not sep or not name or not path or name in VARIANTS:
            ap.error(f"--lib-variant wants NAME=PATH with a new NAME, not {var!r}")
        VARIANT_LIBS[name] = fa_ctypes.load(path)
        VARIANTS.append(name)
    backends[1:1] = [f"flashattn[{v}]" for v in VARIANTS]
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
    rows, skipped = [], []
    det = [True]  # flashattn-det runs until the library refuses deterministic=1
    ceil = ceilings()
    print(f"ceilings: {ceil}", file=sys.stderr)
    header = record_header(lib, args.commit, ceil)
    backward = args.op == "bwd"

    def save(partial):
        """The record so far (saved after every cell, marked partial, so that a run cut short
        keeps its cells)."""
        extra = {"skipped": skipped} if skipped else {}
        with open(args.json, "w") as f:
            json.dump(dict(header, rows=rows, **extra, **({"partial": True} if partial else {})),
                      f, indent=1)
    for dt in dtypes:
        for d in (int(x) for x in args.dims.split(",")):
            for causal in causals:
                for s in seqlens:
                    b, h = 16384 // s, 2048 // d
                    flops = 4 * b * h * s * s * d / (2 if causal else 1) * (2.5 if backward else 1)
                    where = {"op": args.op, "dtype": dt, "d": d, "causal": causal, "s_q": s}

                    def skip(n, why):
                        skipped.append(dict(where, backend=n, why=why))
                        print(f"{n} unavailable for {dt} d{d} s{s}: {why}", file=sys.stderr)
                    cell_backends = [n for n in backends if n != "flashattn-det" or det[0]]
                    if args.math_max_seqlen is not None and s > args.math_max_seqlen:
                        for n in (n for n in cell_backends if n in MATERIALISING):
                            skip(n, "skipped: seqlen > --math-max-seqlen")
                        cell_backends = [n for n in cell_backends if n not in MATERIALISING]
                    try:
                        cell = Cell(lib, b, s, h, d, dt, causal, stream, backward)
                        res, errs, rounds, families, peaks = run_cell(
                            cell, cell_backends, args.rounds, args.repeats, det, args.memory,
                            skip)
                    except fa_ctypes.FaError as e:
                        print(f"flashattn refused the {'backward' if backward else 'forward'} "
                              f"({dt} d{d} causal={int(causal)} s{s}): {e}", file=sys.stderr)
                        sys.exit(2)
                    del cell
                    for backend, ms in res.items():
                        rows.append({"op": args.op, "dtype": dt, "d": d, "causal": causal,
                                     "b": b, "h": h, "s_q": s, "s_k": s, "backend": backend,
                                     **kernel_field(families, backend),
                                     "ms": round(ms, 4), "tflops": round(flops / ms * 1e-9, 1),
                                     "dropout": DROPOUT,
                                     "max_abs_diff_vs_torch_fa2": errs.get(backend),
                                     "ms_rounds": [round(x, 4) for x in rounds[backend]],
                                     **({"peak_bytes": peaks.get(backend)} if args.memory
                                        else {})})
                    print(f"{dt} d{d} causal={int(causal)} s{s}{' bwd' if backward else ''}: " +
                          " ".join(f"{k}={flops / v * 1e-9:.0f}" for k, v in res.items()) +
                          "".join(f" err[{k}]={v:.2e}" for k, v in errs.items()),
                          file=sys.stderr)
                    torch.cuda.empty_cache()  # the cell's sets are gone with it
                    save(partial=True)
    torch.cuda.empty_cache()
    save(partial=False)
    table(rows, args.memory)


if __name__ == "__main__":
    main()
