"""torch.compile traces flashattn without graph breaks (torch >= 2.4: custom ops + fake impls).

CPU tensors use the aot_eager backend (tracing, fake tensors and AOT autograd without waiting
for a C++ compile on a small CI machine); CUDA tensors use the default inductor backend."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import CUDA, library_has_cuda

import flashattn
from flashattn import FlashAttnError, ops

pytestmark = pytest.mark.skipif(not ops.HAS_CUSTOM_OP,
                                reason="torch.library.custom_op needs torch >= 2.4")

DEVICES = [pytest.param(("cpu", torch.float32, "aot_eager"), id="cpu")]
if CUDA and library_has_cuda():
    DEVICES.append(pytest.param(("cuda", torch.float16, "inductor"), id="cuda"))


def block(q, k, v, alibi):
    # Some torch ops around the attention so the graph has something to fuse.
    out = flashattn.flash_attn_func(q * 1.5, k, v, causal=True, window_size=(32, 0),
                                    alibi_slopes=alibi)
    return torch.nn.functional.gelu(out).sum(dim=-1)


def inputs(device, dtype, grad):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 40, 4, 64, generator=g).to(device, dtype).requires_grad_(grad)
    k = torch.randn(2, 56, 2, 64, generator=g).to(device, dtype).requires_grad_(grad)
    v = torch.randn(2, 56, 2, 64, generator=g).to(device, dtype).requires_grad_(grad)
    alibi = torch.rand(4, generator=g).to(device)
    return q, k, v, alibi


@pytest.mark.parametrize("dev", DEVICES)
def test_no_graph_breaks(dev):
    device, dtype, _ = dev
    torch._dynamo.reset()
    explained = torch._dynamo.explain(block)(*inputs(device, dtype, False))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("dev", DEVICES)
def test_fullgraph_forward_matches_eager(dev):
    device, dtype, backend = dev
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    args = inputs(device, dtype, False)
    torch.testing.assert_close(compiled(*args), block(*args), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dev", DEVICES)
def test_fullgraph_backward_matches_eager(dev):
    device, dtype, backend = dev
    if device == "cuda" and not os.environ.get("FA_TEST_CHILD"):
        # On the H200 (torch 2.11, inductor) this case died with a segmentation fault inside the
        # library's backward workspace query, taking the rest of the suite with it. The cause
        # (found with a probe script, since removed, 2026-11-30): that machine's g++ linked
        # libstdc++ statically into the library, which exported its symbols, and formatting an error message mixed the
        # copy's locale state with the process's libstdc++; the library now exports only its C
        # ABI (src/api/exports.map). The child process stays: a crash fails this test alone.
        # The child's pytest exits 0 on pass or xfail.
        node = f"{os.path.abspath(__file__)}::test_fullgraph_backward_matches_eager[cuda]"
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                           env={**os.environ, "FA_TEST_CHILD": "1"}, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, f"child exited {r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}"
        return
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    q, k, v, alibi = inputs(device, dtype, True)
    try:
        got = torch.autograd.grad(compiled(q, k, v, alibi).sum(), (q, k, v))
    except FlashAttnError as e:
        if e.status_name == "FA_ERROR_BACKEND":
            pytest.xfail(f"no backward on this device yet (issue 4): {e}")
        raise
    want = torch.autograd.grad(block(q, k, v, alibi).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)


def test_dropout_and_varlen_trace_without_breaks():
    def f(q, k, v, cu):
        return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 9, 9, dropout_p=0.1, causal=True)
    q, k, v = (torch.randn(15, 2, 16) for _ in range(3))
    cu = torch.tensor([0, 6, 15], dtype=torch.int32)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(q, k, v, cu)
    assert explained.graph_break_count == 0, explained.break_reasons
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, cu)
    assert out.shape == q.shape and torch.isfinite(out).all()


def test_opcheck_fwd_and_bwd():
    # torch's own consistency checks of a custom op: schema, fake impl vs real, dynamic shapes.
    opcheck = getattr(torch.library, "opcheck", None)
    if opcheck is None:
        pytest.skip("torch.library.opcheck missing")
    q, k, v = (torch.randn(1, 12, 2, 16) for _ in range(3))
    fwd_args = (q, k, v, None, None, 0, 0, 0.0, 0.0, True, -1, -1, 0.0, None, None)
    opcheck(torch.ops.flashattn.fwd.default, fwd_args)
    out, lse = torch.ops.flashattn.fwd(*fwd_args)
    bwd_args = (torch.randn_like(out), q, k, v, out, lse, None, None, 0, 0, 0.0, 0.0, True, -1,
                -1, 0.0, None, None, False)
    opcheck(torch.ops.flashattn.bwd.default, bwd_args)
