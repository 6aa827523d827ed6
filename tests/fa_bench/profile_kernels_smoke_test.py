#!/usr/bin/env python3
"""bench/profile_kernels.py's control flow on stand-ins for torch and the library's ctypes
wrapper: in the profiler mode every --backend makes --calls calls of the pass asked for (a
backward after one forward for its inputs; SDPA inside its own kernel), on the grid's shape for
--d / --s, each of ours with the workspace its size query asked for; --kernel-times prints each case of --cases with each backend's kernels (the
stand-in profiler's events); bad arguments are refused. Nothing is measured."""
import contextlib
import io
import os
import runpy
import sys
import types

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "profile_kernels.py")
CALLS = []   # every call: "flashattn-fwd", "flashattn-bwd", "fa2-fwd", "fa2-bwd", ...
SHAPES = []  # every torch.randn shape
WORKSPACES = []  # (pass, workspace bytes) of every call of ours
FWD_WORKSPACE = 16  # what the stand-in's forward asks for (the sm90 forward's tile counter)
STATE = {"sdpa": None, "profiling": None}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


class Tensor:
    def __init__(self, shape=(1, 1, 1, 1), kernel=None):
        self.shape, self.kernel = shape, kernel

    def transpose(self, *_):
        return self

    def detach(self):
        return self

    def requires_grad_(self, on=True):
        return self

    def data_ptr(self):
        return 0


def call(name):
    CALLS.append(name)
    if STATE["profiling"] is not None:
        STATE["profiling"].append(types.SimpleNamespace(device_type="cuda", name=f"k-{name}",
                                                        device_time=10.0))


def install_stubs():
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float16, torch.float32, torch.uint8 = "bf16", "fp16", "fp32", "u8"

    def randn(*shape, **k):
        SHAPES.append(shape)
        return Tensor(shape)
    torch.randn = randn
    torch.randn_like = torch.empty_like = lambda t, **k: Tensor(t.shape)
    torch.empty = lambda *a, **k: Tensor()
    torch.cuda = types.SimpleNamespace(
        current_stream=lambda: types.SimpleNamespace(cuda_stream=0), synchronize=lambda: None)

    def grad(o, inputs, g, retain_graph=False):
        call(f"{o.kernel}-bwd")
    torch.autograd = types.SimpleNamespace(grad=grad, DeviceType=types.SimpleNamespace(CUDA="cuda"))

    @contextlib.contextmanager
    def profile(activities=()):
        events = STATE["profiling"] = []
        try:
            yield types.SimpleNamespace(events=lambda: events)
        finally:
            STATE["profiling"] = None
    torch.profiler = types.SimpleNamespace(profile=profile,
                                           ProfilerActivity=types.SimpleNamespace(CUDA="cuda"))
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")

    def sdpa(q, k, v, is_causal=False):
        if STATE["sdpa"] is None:
            raise AssertionError("SDPA called outside sdpa_kernel")
        call(f"{STATE['sdpa']}-fwd")
        return Tensor(q.shape, STATE["sdpa"])
    functional.scaled_dot_product_attention = sdpa
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="fa2", CUDNN_ATTENTION="cudnn")

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
    fa.load = lambda path=None: path
    fa.forward_params = lambda lib, *a, **k: "fwd"
    fa.backward_params = lambda lib, *a, deterministic=False, **k: "bwd"
    fa.workspace_size = lambda lib, p, backward=False: 0 if backward else FWD_WORKSPACE

    def forward(lib, p, stream=0, workspace=None, workspace_bytes=0):
        WORKSPACES.append(("fwd", workspace_bytes))
        call("flashattn-fwd")

    def backward(lib, p, stream=0, workspace=None, workspace_bytes=0):
        WORKSPACES.append(("bwd", workspace_bytes))
        call("flashattn-bwd")
    fa.forward, fa.backward = forward, backward
    for name, mod in (("torch", torch), ("torch.nn", nn), ("torch.nn.functional", functional),
                      ("torch.nn.attention", attention), ("fa_ctypes", fa)):
        sys.modules[name] = mod


def run(args):
    """profile_kernels.py's main on args: (exit status, stdout)."""
    del CALLS[:], SHAPES[:], WORKSPACES[:]
    sys.argv = ["profile_kernels.py"] + args
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            runpy.run_path(SCRIPT, run_name="__main__")
        except SystemExit as e:
            code = e.code
    return code, out.getvalue()


install_stubs()
code, text = run([])
check(code == 0 and CALLS == ["flashattn-fwd"] * 3, f"default: {code} {CALLS}")
check(SHAPES == [(4, 4096, 16, 128)] * 3, f"default: shapes {SHAPES}")
# The forward gets the workspace its size query asks for (a forward without one is refused).
check(WORKSPACES == [("fwd", FWD_WORKSPACE)] * 3, f"default: workspaces {WORKSPACES}")

code, text = run(["--op", "bwd", "--backend", "flashattn,fa2", "--d", "64", "--s", "1024",
                  "--calls", "2"])
check(CALLS == ["flashattn-fwd", "fa2-fwd"] + ["flashattn-bwd"] * 2 + ["fa2-bwd"] * 2,
      f"bwd flashattn,fa2: {CALLS}")
check(SHAPES[0] == (16, 1024, 32, 64), f"bwd: shape {SHAPES[0]}")
check(WORKSPACES[0][0] == "fwd" and all(w[0] == "bwd" for w in WORKSPACES[1:]),
      f"bwd: workspaces {WORKSPACES}")

code, text = run(["--backend", "cudnn"])
check(CALLS == ["cudnn-fwd"] * 3, f"fwd cudnn: {CALLS}")

code, text = run(["--kernel-times", "--op", "bwd", "--backend", "flashattn,fa2",
                  "--cases", "64:1024:0,128:2048:1", "--dtype", "fp16"])
heads = [line for line in text.splitlines() if line.startswith("==")]
check(code == 0 and heads == ["== fp16 bwd d64 s1024 causal=0: flashattn 10 us, fa2 10 us",
                              "== fp16 bwd d128 s2048 causal=1: flashattn 10 us, fa2 10 us"],
      f"--kernel-times: {code} {heads}")
check("k-flashattn-bwd" in text and "k-fa2-bwd" in text, f"--kernel-times: kernels {text}")

for args, what in ((["--cases", "64:1024:0"], "--cases without --kernel-times"),
                   (["--backend", "flashattn,nope"], "an unknown backend")):
    code, text = run(args)
    check(code == 2 and not CALLS, f"{what}: exit {code}, calls {CALLS}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("profile_kernels smoke: ok")
