#!/usr/bin/env python3
"""bench/gpu_bench.py's control flow without a GPU: torch, the library's ctypes wrapper and the
timer are replaced by stand-ins that record which backend each timing ran, so that the test
checks what a GPU run cannot show cheaply - every backend is timed in the rounds' orders of
bench/round_order.py (forward and backward, with a --lib-variant and with cuDNN refused), each row's
figure is the median of its rounds, each of our rows names the kernel family its own build's
fa_select_kernel gave once per cell (the main build's and a --lib-variant's stand-ins answer
differently), and the record and the tables come out. The numbers are the stand-ins'; nothing
here measures anything."""
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
STATE = {"sdpa": None, "refuse_cudnn": False}
MS = {"flashattn": 1.0, "flashattn-det": 1.3, "torch-fa2": 1.1, "torch-cudnn": 0.7,
      "flashattn[FA_TEST_VAR=1]": 0.9, "flashattn[other]": 0.95}


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


def install_stubs():
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float16, torch.float32, torch.uint8 = "bf16", "fp16", "fp32", "u8"
    torch.randn = lambda *a, **k: Tensor()
    torch.randn_like = torch.empty_like = lambda t, **k: Tensor()
    torch.empty = lambda *a, **k: Tensor()
    torch.manual_seed = lambda s: None
    torch.cuda = types.SimpleNamespace(
        current_stream=lambda: types.SimpleNamespace(cuda_stream=0),
        empty_cache=lambda: None, synchronize=lambda: None)

    def grad(o, inputs, g, retain_graph=False):
        CALLS.append(o.backend)
        return (Tensor(), Tensor(), Tensor())
    torch.autograd = types.SimpleNamespace(grad=grad)
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")

    def sdpa(q, k, v, is_causal=False, dropout_p=0.0):
        if STATE["sdpa"] is None:
            raise AssertionError("SDPA called outside sdpa_kernel")
        if STATE["sdpa"] == "torch-cudnn" and STATE["refuse_cudnn"]:
            raise RuntimeError("no cuDNN kernel for this shape (stand-in)")
        CALLS.append(STATE["sdpa"])
        return Tensor(STATE["sdpa"])
    functional.scaled_dot_product_attention = sdpa
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="torch-fa2",
                                                 CUDNN_ATTENTION="torch-cudnn")

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
    fa.forward_params = lambda lib, *a, **k: {"det": False}
    fa.backward_params = lambda lib, *a, deterministic=False, **k: {"det": deterministic}
    fa.workspace_size = lambda lib, p, backward=False: 0

    def select_kernel(lib, p, backward=False):
        SELECTS.append((lib, p["det"], backward))
        return FAMILY.get(lib, "cuda-sm80")
    fa.select_kernel = select_kernel

    def ours(name, lib):
        var = os.environ.get("FA_TEST_VAR")
        if lib == "other.so":  # the --lib-variant build
            return "flashattn[other]"
        return f"{name}[FA_TEST_VAR={var}]" if var else name
    fa.forward = lambda lib, p, stream=0, *a: CALLS.append(ours("flashattn", lib))
    fa.backward = lambda lib, p, stream=0, *a: CALLS.append(
        ours("flashattn-det" if p["det"] else "flashattn", lib))

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
        if not r["backend"].startswith("flashattn"):
            check("kernel" not in r, f"{what}: {r['backend']} row has a kernel")
            continue
        want = FAMILY["other.so"] if r["backend"] == "flashattn[other]" else "cuda-sm80"
        check(r.get("kernel") == want, f"{what}: {r['backend']} kernel {r.get('kernel')}")
    ours = [n for n in names if n.startswith("flashattn")]
    check(len(SELECTS) == cells * len(ours), f"{what}: {len(SELECTS)} queries for {cells} cells")
    check(all(b == backward for _, _, b in SELECTS), f"{what}: a query of the other pass")
    check(sum(det for _, det, _ in SELECTS) == cells * ("flashattn-det" in ours),
          f"{what}: flashattn-det's family not asked with its own params {SELECTS}")


def check_rows(rec, timed, names, cells, what):
    orders = [b for o in round_orders(names) for b in o]
    check(timed == orders * cells, f"{what}: timed {timed[:12]}... not the design's {orders}")
    for r in rec["rows"]:
        n = len(round_orders(names))
        check(len(r["ms_rounds"]) == n, f"{what}: {r['backend']} has {len(r['ms_rounds'])} rounds")
        check(abs(r["ms"] - round(statistics.median(r["ms_rounds"]), 4)) < 2e-4,
              f"{what}: {r['backend']} ms {r['ms']} is not the median of {r['ms_rounds']}")
    check(sorted({r["backend"] for r in rec["rows"]}) == sorted(names),
          f"{what}: backends {sorted({r['backend'] for r in rec['rows']})}")


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

try:  # the environment variants are gone (the library reads no environment): refused
    run(grid + ["--op", "bwd", "--variant", "FA_TEST_VAR=1"])
    check(False, "--variant: accepted")
except SystemExit as e:
    check(e.code == 2, f"--variant: exit {e.code}")

fwd = ["flashattn", "torch-fa2", "torch-cudnn"]
rec, timed, table = run(grid)
check_rows(rec, timed, fwd, 2, "fwd")
check_kernels(rec, fwd, 2, False, "fwd")
check(all(r["op"] == "fwd" for r in rec["rows"]), "fwd: op")
check("bf16 d64 full" in table, "fwd: no table line")

STATE["refuse_cudnn"] = True
rec, timed, table = run(grid)
check_rows(rec, timed, ["flashattn", "torch-fa2"], 2, "fwd without cuDNN")
rec, timed, table = run(grid + ["--op", "bwd", "--no-det"])
check_rows(rec, timed, ["flashattn", "torch-fa2"], 2, "bwd without cuDNN")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("gpu_bench smoke: ok")
