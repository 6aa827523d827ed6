"""The binding's fast path (each input read once, output strides computed, one pack) hands the
library the same fa_params as the general path (put_run over torch's own attributes), for the
layouts users pass: contiguous, strided views, packed qkv, GQA, varlen, every option set.

The library's entry points are replaced by recorders, so nothing is computed; only the params are
compared, with the data pointers of freshly allocated tensors (outputs, copies) blanked."""
import ctypes

import pytest
import torch

from conftest import CUDA, library_has_cuda

from flashattn import _kernels, _library
from flashattn._params import OFFSET, FaParams

DEVICES = ["cpu"] + (["cuda"] if CUDA and library_has_cuda() else [])
FRESH = {"forward": ("out", "lse"), "backward": ("dq", "dk", "dv")}


def record_params(monkeypatch, pass_, copied):
    """Swaps fa_<pass_> and its workspace query for recorders; returns the list they fill."""
    lib = _library.load()
    seen = []

    def snapshot(params):
        raw = bytearray(ctypes.string_at(ctypes.addressof(params._obj), ctypes.sizeof(FaParams)))
        n = ctypes.sizeof(ctypes.c_void_p)  # fa_tensor.data opens each fa_tensor
        for field in FRESH[pass_] + copied:
            raw[OFFSET[field]:OFFSET[field] + n] = bytes(n)
        return bytes(raw)

    def query(params, size):
        seen.append(snapshot(params))
        size._obj.value = 0
        return 0

    def entry(params, workspace, nbytes, stream):
        seen.append(snapshot(params))
        return 0

    monkeypatch.setattr(lib, f"fa_{pass_}_workspace_size", query)
    monkeypatch.setattr(lib, f"fa_{pass_}", entry)
    return seen


def general_path(t, name, cuda):
    return _kernels._usable(t, name, cuda), None


def both_paths(monkeypatch, pass_, call, copied=()):
    seen = record_params(monkeypatch, pass_, copied)
    fast = call()
    n = len(seen)
    with monkeypatch.context() as m:
        m.setattr(_kernels, "_operand", general_path)
        general = call()
    assert n > 0 and seen[:n] == seen[n:], f"{pass_}: the fast path packed different params"
    for a, b in zip(fast, general):
        assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
        assert a.device == b.device


def layouts(device, dtype):
    def r(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    qkv = r(2, 9, 3, 4, 16)
    base = r(3, 2, 4, 9, 16)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32, device=device)
    return {
        "contiguous": (r(2, 9, 4, 16), r(2, 11, 4, 16), r(2, 11, 4, 16), None),
        "gqa": (r(1, 5, 6, 32), r(1, 7, 2, 32), r(1, 7, 2, 32), None),
        "qkv-views": (*qkv.unbind(2), None),
        "transposed-views": (*(base[i].transpose(1, 2) for i in range(3)), None),
        "varlen": (r(9, 4, 16), r(9, 2, 16), r(9, 2, 16), (cu, cu, 5, 5)),
        "copied-last-dim": (r(1, 4, 2, 32)[..., ::2], r(1, 4, 2, 16), r(1, 4, 2, 16), None),
    }


OPTIONS = [
    dict(),
    dict(causal=True, softmax_scale=0.3, window_left=7, window_right=2, softcap=4.0),
    dict(dropout_p=0.25, alibi=True),
]


def forward_args(q, k, v, varlen, dropout_p=0.0, softmax_scale=0.0, causal=False,
                 window_left=-1, window_right=-1, softcap=0.0, alibi=False):
    cu_q, cu_k, max_q, max_k = varlen or (None, None, 0, 0)
    heads = q.shape[-2]
    slopes = torch.rand(heads, device=q.device) if alibi else None
    rng = torch.tensor([3, 5]) if dropout_p else None
    return (cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal, window_left,
            window_right, softcap, slopes, rng)


@pytest.mark.parametrize("options", OPTIONS, ids=["plain", "masks", "dropout-alibi"])
@pytest.mark.parametrize("layout", ["contiguous", "gqa", "qkv-views", "transposed-views",
                                    "varlen", "copied-last-dim"])
@pytest.mark.parametrize("device", DEVICES)
def test_forward_params_match_the_general_path(monkeypatch, device, layout, options):
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v, varlen = layouts(device, dtype)[layout]
    args = forward_args(q, k, v, varlen, **options)
    copied = ("q",) if layout == "copied-last-dim" else ()
    both_paths(monkeypatch, "forward", lambda: _kernels.forward(q, k, v, *args), copied)


@pytest.mark.parametrize("layout", ["contiguous", "gqa", "qkv-views", "varlen"])
@pytest.mark.parametrize("device", DEVICES)
def test_backward_params_match_the_general_path(monkeypatch, device, layout):
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v, varlen = layouts(device, dtype)[layout]
    args = forward_args(q, k, v, varlen, causal=True)
    out, lse = _kernels.forward(q, k, v, *args)
    dout = torch.randn_like(out)
    both_paths(monkeypatch, "backward",
               lambda: _kernels.backward(dout, q, k, v, out, lse, *args, True))
