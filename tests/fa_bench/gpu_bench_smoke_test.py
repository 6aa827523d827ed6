#!/usr/bin/env python3
"""bench/gpu_bench.py's control flow without a GPU: torch, the library's ctypes wrapper and the
timer are replaced by stand-ins that record which backend each timing ran, so that the test
checks what a GPU run cannot show cheaply - every backend is timed in the rounds' orders of
bench/round_order.py (forward and backward, with a --lib-variant, with every --backends choice,
and with a backend refused), each row's figure is the median of its rounds, each of our rows
names the kernel family its own build's fa_select_kernel gave once per cell (the main build's,
vanilla's and a --lib-variant's stand-ins answer differently), --memory's peak_bytes is the probe
of the row's own backend, a refused or --math-max-seqlen cell is named in "skipped", and the
record and the tables come out. The numbers are the stand-ins'; nothing here measures
anything."""
import contextlib
import json
import os
import statistics
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
from round_order import round_orders  # noqa: E402

CALLS = []   # every backend call, in order
TIMED = []   # the backend of every time_fn call, in order
SELECTS = []  # every fa_select_kernel query: (library, deterministic params, backward)
# The stand-in libraries' answers: the --lib-variant build's differs, so that a row showing the
# main build's family for the variant would be caught.
FAMILY = {"other.so": "cuda-variant"}
# refuse: backends whose calls raise (SDPA's RuntimeError, our FaError); refuse_at: the seqlen
# at which they do (None: every cell).
STATE = {"sdpa": None, "refuse": set(), "refuse_at": None, "s": None}
MS = {"flashattn": 1.0, "flashattn-det": 1.3, "torch-fa2": 1.1, "torch-cudnn": 0.7,
      "flashattn[FA_TEST_VAR=1]": 0.9, "flashattn[other]": 0.95, "vanilla": 4.0,
      "torch-efficient": 2.0, "torch-math": 9.0}
# The stand-in allocator's peak after one call of each backend (--memory): distinct, so that a
# row carrying another backend's probe is caught.
PEAK = {n: (i + 1) * 2**20 for i, n in enumerate(sorted(MS))}
VANILLA = 3  # fa_backend VANILLA


class Tensor:
    """Every tensor operation gpu_bench uses, returning a tensor; `backend` remembers the SDPA
    kernel that made it (its backward runs through the same kernel)."""
    def __init__(self, backend=None):
        self.backend = backend

    def transpose(self, *_):
        return self

    def float(self):
        return self

    def abs(self):
        return self

    def max(self):
        return self

    def item(self):
        return 0.0

    def __sub__(self, other):
        return self

    def data_ptr(self):
        return 0

    def copy_(self, other):
        return self


def refused(backend):
    return backend in STATE["refuse"] and STATE["refuse_at"] in (None, STATE["s"])


def install_stubs():
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float16, torch.float32, torch.uint8 = "bf16", "fp16", "fp32", "u8"
    def randn(*shape, **k):
        STATE["s"] = shape[1]  # (b, s, h, d): the cell's seqlen, for refuse_at
        return Tensor()
    torch.randn = randn
    torch.randn_like = torch.empty_like = lambda t, **k: Tensor()
    torch.empty = lambda *a, **k: Tensor()
    torch.manual_seed = lambda s: None
    torch.cuda = types.SimpleNamespace(
        current_stream=lambda: types.SimpleNamespace(cuda_stream=0),
        empty_cache=lambda: None, synchronize=lambda: None, memory_allocated=lambda: 0,
        reset_peak_memory_stats=lambda: None,
        max_memory_allocated=lambda: PEAK[CALLS[-1]])

    def grad(o, inputs, g, retain_graph=False):
        CALLS.append(o.backend)
        return (Tensor(), Tensor(), Tensor())
    torch.autograd = types.SimpleNamespace(grad=grad)
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")

    def sdpa(q, k, v, is_causal=False, dropout_p=0.0):
        if STATE["sdpa"] is None:
            raise AssertionError("SDPA called outside sdpa_kernel")
        if refused(STATE["sdpa"]):
            raise RuntimeError(f"no {STATE['sdpa']} kernel for this shape (stand-in)")
        CALLS.append(STATE["sdpa"])
        return Tensor(STATE["sdpa"])
    functional.scaled_dot_product_attention = sdpa
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="torch-fa2",
                                                 CUDNN_ATTENTION="torch-cudnn",
                                                 EFFICIENT_ATTENTION="torch-efficient",
                                                 MATH="torch-math")

    @contextlib.contextmanager
    def sdpa_kernel(kernels):
        old, STATE["sdpa"] = STATE["sdpa"], kernels[0]
        try:
            yield
        finally:
            STATE["sdpa"] = old
    attention.sdpa_kernel = sdpa_kernel
    torch.nn, nn.functional, nn.attention = nn, functional, attention

    fa = types.ModuleType("fa_ctypes")

    class FaError(RuntimeError):
        pass
    fa.FaError = FaError
    fa.load = lambda path=None: path or "lib"  # a stand-in library: its path
    fa.forward_params = lambda lib, *a, **k: types.SimpleNamespace(det=False, backend=0)
    fa.backward_params = lambda lib, *a, deterministic=False, **k: types.SimpleNamespace(
        det=deterministic, backend=0)
    # vanilla needs a workspace (its scores), flash none
    fa.workspace_size = lambda lib, p, backward=False: 4096 if p.backend == VANILLA else 0

    def select_kernel(lib, p, backward=False):
        SELECTS.append((lib, p.det, backward))
        return "cuda-vanilla" if p.backend == VANILLA else FAMILY.get(lib, "cuda-sm80")
    fa.select_kernel = select_kernel

    def ours(name, lib, p, ws_bytes):
        if p.backend == VANILLA:
            name = "vanilla"
            if not ws_bytes:
                raise AssertionError("vanilla called without its workspace")
        if lib == "other.so":  # the --lib-variant build
            name = "flashattn[other]"
        if refused(name):
            raise FaError(f"{name} refused (stand-in)")
        return name
    fa.forward = lambda lib, p, stream=0, ws=None, n=0: CALLS.append(
        ours("flashattn", lib, p, n))
    fa.backward = lambda lib, p, stream=0, ws=None, n=0: CALLS.append(
        ours("flashattn-det" if p.det else "flashattn", lib, p, n))

    common = types.ModuleType("gpu_common")
    common.ceilings = lambda: {}
    common.record_header = lambda lib, commit, ceil: {"commit": commit}

    def time_fn(fns, repeats):
        fns[0]()
        backend = CALLS[-1]
        TIMED.append(backend)
        # a different figure each round, so that the median is not any single round's
        return MS[backend] * (1 + 0.01 * sum(1 for b in TIMED if b == backend))
    common.time_fn = time_fn
    for name, mod in (("torch", torch), ("torch.nn", nn), ("torch.nn.functional", functional),
                      ("torch.nn.attention", attention), ("fa_ctypes", fa),
                      ("gpu_common", common)):
        sys.modules[name] = mod


def run(args):
    """gpu_bench.main() on args; (record, timed backends, stdout table lines)."""
    import io
    import gpu_bench
    del TIMED[:]
    del SELECTS[:]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        sys.argv = ["gpu_bench.py", "--json", path] + args
        gpu_bench.VARIANTS.clear()
        gpu_bench.VARIANT_LIBS.clear()
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            gpu_bench.main()
        with open(path) as f:
            return json.load(f), list(TIMED), out.getvalue()


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def check_kernels(rec, names, cells, backward, what):
    """Each of our rows names its own build's family; PyTorch's name none; one query per cell
    and our backend, of the pass timed (and for flashattn-det, with its deterministic params)."""
    for r in rec["rows"]:
        if r["backend"].startswith("torch-"):
            check("kernel" not in r, f"{what}: {r['backend']} row has a kernel")
            continue
        want = {"flashattn[other]": FAMILY["other.so"], "vanilla": "cuda-vanilla"}.get(
            r["backend"], "cuda-sm80")
        check(r.get("kernel") == want, f"{what}: {r['backend']} kernel {r.get('kernel')}")
    ours = [n for n in names if not n.startswith("torch-")]
    check(len(SELECTS) == cells * len(ours), f"{what}: {len(SELECTS)} queries for {cells} cells")
    check(all(b == backward for _, _, b in SELECTS), f"{what}: a query of the other pass")
    check(sum(det for _, det, _ in SELECTS) == cells * ("flashattn-det" in ours),
          f"{what}: flashattn-det's family not asked with its own params {SELECTS}")


def check_rows(rec, timed, names, cells, what):
    """cells cells, each timing names (in this order) in the design's rounds."""
    check_cells(rec, timed, [names] * cells, what)


def check_cells(rec, timed, cells, what):
    """One cell per entry of cells (its backends, in order), each timed in the design's rounds
    over them; every row's ms the median of its rounds."""
    orders = [b for names in cells for o in round_orders(names) for b in o]
    check(timed == orders, f"{what}: timed {timed[:12]}... not the design's {orders[:12]}...")
    rows = sorted(rec["rows"], key=lambda r: r["s_q"])
    by_cell = [[r for r in rows if r["s_q"] == s] for s in sorted({r["s_q"] for r in rows})]
    check(len(by_cell) == len(cells), f"{what}: {len(by_cell)} cells of rows, not {len(cells)}")
    for names, got in zip(cells, by_cell):
        check(sorted(r["backend"] for r in got) == sorted(names),
              f"{what}: s{got[0]['s_q']} backends {sorted(r['backend'] for r in got)}")
        for r in got:
            n = len(round_orders(names))
            check(len(r["ms_rounds"]) == n,
                  f"{what}: {r['backend']} has {len(r['ms_rounds'])} rounds")
            check(abs(r["ms"] - round(statistics.median(r["ms_rounds"]), 4)) < 2e-4,
                  f"{what}: {r['backend']} ms {r['ms']} is not the median of {r['ms_rounds']}")


def refuse(backends=(), at=None):
    STATE["refuse"], STATE["refuse_at"] = set(backends), at


def run_fails(args, what):
    """gpu_bench refuses args with argparse's exit status 2."""
    try:
        run(args)
        check(False, f"{what}: accepted")
    except SystemExit as e:
        check(e.code == 2, f"{what}: exit {e.code}")


install_stubs()
grid = ["--seqlens", "1024,2048", "--dims", "64", "--dtypes", "bf16", "--causal", "no"]
bwd = ["flashattn", "flashattn-det", "torch-fa2", "torch-cudnn"]
rec, timed, table = run(grid + ["--op", "bwd"])
check_rows(rec, timed, bwd, 2, "bwd")
check_kernels(rec, bwd, 2, True, "bwd")
check("bf16 d64 full s1024" in table, "bwd: no table line")

rec, timed, table = run(grid + ["--op", "bwd", "--no-det", "--lib-variant", "other=other.so"])
check_rows(rec, timed, ["flashattn", "flashattn[other]", "torch-fa2", "torch-cudnn"], 2,
           "bwd --lib-variant")
check_kernels(rec, ["flashattn", "flashattn[other]"], 2, True, "bwd --lib-variant")
check(all(r["max_abs_diff_vs_torch_fa2"] is not None for r in rec["rows"]
          if r["backend"].startswith("flashattn")), "bwd --lib-variant: a build not checked")
check("[other]" in table, "bwd --lib-variant: not in the table")

rec, timed, table = run(grid + ["--op", "bwd", "--no-det", "--rounds", "2"])
check(timed == [b for o in round_orders(["flashattn", "torch-fa2", "torch-cudnn"], 2)
                for b in o] * 2, f"bwd --rounds 2: {timed}")

rec, timed, table = run(grid + ["--lib-variant", "other=other.so"])
check_rows(rec, timed, ["flashattn", "flashattn[other]", "torch-fa2", "torch-cudnn"], 2,
           "fwd --lib-variant")
check_kernels(rec, ["flashattn", "flashattn[other]"], 2, False, "fwd --lib-variant")
check(all(r["max_abs_diff_vs_torch_fa2"] is not None for r in rec["rows"]
          if r["backend"].startswith("flashattn")), "fwd --lib-variant: a build not checked")
check("[other]" in table, "fwd --lib-variant: not in the table")

# FlexAttention is timed in the forward only: asked for with the backward, refused
run_fails(grid + ["--op", "bwd", "--backends", "flashattn,torch-flex"], "bwd torch-flex")

# the environment variants are gone (the library reads no environment): refused
run_fails(grid + ["--op", "bwd", "--variant", "FA_TEST_VAR=1"], "--variant")

fwd = ["flashattn", "torch-fa2", "torch-cudnn"]
rec, timed, table = run(grid)
check_rows(rec, timed, fwd, 2, "fwd")
check_kernels(rec, fwd, 2, False, "fwd")
check(all(r["op"] == "fwd" for r in rec["rows"]), "fwd: op")
check("bf16 d64 full" in table, "fwd: no table line")

refuse(["torch-cudnn"])
rec, timed, table = run(grid)
check_rows(rec, timed, ["flashattn", "torch-fa2"], 2, "fwd without cuDNN")
check([(x["backend"], x["s_q"]) for x in rec.get("skipped", [])]
      == [("torch-cudnn", 1024), ("torch-cudnn", 2048)], f"fwd without cuDNN: {rec.get('skipped')}")
rec, timed, table = run(grid + ["--op", "bwd", "--no-det"])
check_rows(rec, timed, ["flashattn", "torch-fa2"], 2, "bwd without cuDNN")
refuse()

# Every backend, with --memory: ours (flash and vanilla), each SDPA kernel; the forward's
# SDPA timings inside their own kernel (the stand-in's calls name the active one).
every = ["flashattn", "vanilla", "torch-fa2", "torch-cudnn", "torch-efficient", "torch-math"]
listed = ["--backends", "torch-math,torch-efficient,vanilla,torch-cudnn,torch-fa2,flashattn"]
for op, names in (("fwd", every), ("bwd", every[:1] + ["flashattn-det"] + every[1:])):
    what = f"{op} every backend --memory"
    args = grid + ["--op", op, "--memory"] + (
        listed if op == "fwd" else ["--backends", ",".join(names)])
    rec, timed, table = run(args)
    check_rows(rec, timed, names, 2, what)
    check_kernels(rec, names, 2, op == "bwd", what)
    for r in rec["rows"]:
        check(r.get("peak_bytes") == PEAK[r["backend"]],
              f"{what}: {r['backend']} peak {r.get('peak_bytes')}, not its own probe's")
        ours = not r["backend"].startswith("torch-")
        check((r["max_abs_diff_vs_torch_fa2"] is not None) == ours,
              f"{what}: {r['backend']} spot check {r['max_abs_diff_vs_torch_fa2']}")
    for col in ("vanilla", "effic", "math", "peak MiB", "efficient"):
        check(col in table, f"{what}: no {col!r} in the tables")
    check("skipped" not in rec, f"{what}: skipped {rec.get('skipped')}")

rec, timed, table = run(grid)  # without --memory, no memory field or table
check(all("peak_bytes" not in r for r in rec["rows"]) and "peak MiB" not in table,
      "fwd without --memory: memory measured")

# vanilla and torch-math past --math-max-seqlen, vanilla refused by the library in the other
# cell, then torch-efficient refused by SDPA: each named in "skipped", the rest timed.
refuse(["vanilla"], at=1024)
rec, timed, table = run(grid + ["--backends", ",".join(every), "--math-max-seqlen", "1024"])
check_cells(rec, timed, [[n for n in every if n != "vanilla"],
                         ["flashattn", "torch-fa2", "torch-cudnn", "torch-efficient"]],
            "--math-max-seqlen, vanilla refused")
skipped = [(x["backend"], x["s_q"], x["why"].split(":")[0]) for x in rec.get("skipped", [])]
check(skipped == [("vanilla", 1024, "vanilla refused (stand-in)"), ("vanilla", 2048, "skipped"),
                  ("torch-math", 2048, "skipped")], f"--math-max-seqlen: skipped {skipped}")
refuse(["torch-efficient"])
rec, timed, table = run(grid + ["--op", "bwd", "--no-det",
                                "--backends", "flashattn,torch-efficient"])
check_rows(rec, timed, ["flashattn"], 2, "bwd, torch-efficient refused")
check(len(rec.get("skipped", [])) == 2, f"bwd, torch-efficient refused: {rec.get('skipped')}")
# flashattn-det refused: gone for the rest of the run, named in the cell where it was refused
refuse(["flashattn-det"])
rec, timed, table = run(grid + ["--op", "bwd"])
check_rows(rec, timed, ["flashattn", "torch-fa2", "torch-cudnn"], 2, "bwd, det refused")
check([x["backend"] for x in rec.get("skipped", [])] == ["flashattn-det"],
      f"bwd, det refused: {rec.get('skipped')}")
refuse()

run_fails(grid + ["--backends", "flashattn,torch-nope"], "--backends torch-nope")
run_fails(grid + ["--backends", "torch-fa2"], "--backends without flashattn")
run_fails(grid + ["--backends", "flashattn,flashattn-det"], "--backends flashattn-det, forward")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("gpu_bench smoke: ok")
