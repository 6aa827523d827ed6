"""Bad input raises FlashAttnError (a RuntimeError) carrying the library's status and a message
that names the argument and its value; nothing crashes."""
import os
import subprocess
import sys

import pytest
import torch

import flashattn
from flashattn import FlashAttnError


def r(*shape, **kw):
    return torch.randn(*shape, **kw)


def i32(*xs):
    return torch.tensor(xs, dtype=torch.int32)


def dense(**kw):
    return lambda: flashattn.flash_attn_func(r(1, 4, 2, 16), r(1, 4, 2, 16), r(1, 4, 2, 16), **kw)


# (id, call, status name, regex the message must contain)
CASES = [
    ("heads", lambda: flashattn.flash_attn_func(r(1, 4, 8, 16), r(1, 4, 3, 16), r(1, 4, 3, 16)),
     "FA_ERROR_HEADS", r"k\.shape\[2\]=3.*q\.shape\[2\]=8"),
    ("head-dim-mismatch", lambda: flashattn.flash_attn_func(r(1, 4, 2, 32), r(1, 4, 2, 16),
                                                            r(1, 4, 2, 16)),
     "FA_ERROR_SHAPE", r"k\.shape\[3\]=16"),
    ("kv-seqlen-mismatch", lambda: flashattn.flash_attn_func(r(1, 4, 2, 16), r(1, 5, 2, 16),
                                                             r(1, 4, 2, 16)),
     "FA_ERROR_SHAPE", r"v\.shape\[1\]=4.*k\.shape\[1\]=5"),
    ("head-dim-too-big", lambda: flashattn.flash_attn_func(r(1, 4, 2, 300), r(1, 4, 2, 300),
                                                           r(1, 4, 2, 300)),
     "FA_ERROR_HEAD_DIM", r"q\.shape\[3\]=300 \(head_dim\)"),
    ("float64", lambda: flashattn.flash_attn_func(r(1, 4, 2, 16).double(), r(1, 4, 2, 16),
                                                  r(1, 4, 2, 16)),
     "FA_ERROR_DTYPE", r"q\.dtype=torch\.float64"),
    ("mixed-dtypes", lambda: flashattn.flash_attn_func(r(1, 4, 2, 16), r(1, 4, 2, 16).half(),
                                                       r(1, 4, 2, 16)),
     "FA_ERROR_DTYPE", r"k\.dtype"),
    ("dropout-1", dense(dropout_p=1.0), "FA_ERROR_DROPOUT", r"dropout_p=1"),
    ("window", dense(window_size=(-2, 0)), "FA_ERROR_WINDOW", r"window_left=-2"),
    ("softcap", dense(softcap=-1.0), "FA_ERROR_SOFTCAP", r"softcap=-1"),
    ("scale-nan", dense(softmax_scale=float("nan")), "FA_ERROR_SCALE", r"softmax_scale=nan"),
    ("alibi-shape", dense(alibi_slopes=r(3)), "FA_ERROR_ALIBI", r"alibi_slopes\.shape"),
    ("rank", lambda: flashattn.flash_attn_func(r(4, 2, 16), r(1, 4, 2, 16), r(1, 4, 2, 16)),
     "FA_ERROR_RANK", r"q\.dim\(\)=3 must be 4"),
    ("empty", lambda: flashattn.flash_attn_func(r(1, 0, 2, 16), r(1, 4, 2, 16), r(1, 4, 2, 16)),
     "FA_ERROR_SIZE", r"q\.shape=\(1, 0, 2, 16\)"),
    ("device", lambda: flashattn.flash_attn_func(r(1, 4, 2, 16, device="meta"), r(1, 4, 2, 16),
                                                 r(1, 4, 2, 16)),
     "FA_ERROR_DEVICE", r"meta"),
    ("qkv-packing", lambda: flashattn.flash_attn_qkvpacked_func(r(1, 4, 2, 2, 16)),
     "FA_ERROR_SHAPE", r"qkv\.shape=\(1, 4, 2, 2, 16\)"),
    ("kv-packing", lambda: flashattn.flash_attn_kvpacked_func(r(1, 4, 2, 16), r(1, 4, 3, 2, 16)),
     "FA_ERROR_SHAPE", r"kv\.shape"),
    ("cu-seqlens-order", lambda: flashattn.flash_attn_varlen_func(
        r(6, 2, 16), r(6, 2, 16), r(6, 2, 16), i32(0, 4, 2, 6), i32(0, 2, 4, 6), 4, 2),
     "FA_ERROR_CU_SEQLENS", r"cu_seqlens_q\[2\]=2"),
    ("cu-seqlens-int64", lambda: flashattn.flash_attn_varlen_func(
        r(6, 2, 16), r(6, 2, 16), r(6, 2, 16), torch.tensor([0, 6]), i32(0, 6), 6, 6),
     "FA_ERROR_DTYPE", r"cu_seqlens_q\.dtype=torch\.int64.*torch\.int32"),
    # Integers past their fa_params field (issue 23: these surfaced as struct.error).
    ("window-2e31", dense(window_size=(1 << 31, 0)), "FA_ERROR_WINDOW",
     r"window_size\[0\]=2147483648 does not fit the library's int32 field"),
    ("window-negative-2e31", dense(window_size=(0, -(1 << 31) - 1)), "FA_ERROR_WINDOW",
     r"window_size\[1\]=-2147483649"),
    ("max-seqlen-2e64", lambda: flashattn.flash_attn_varlen_func(
        r(6, 2, 16), r(6, 2, 16), r(6, 2, 16), i32(0, 6), i32(0, 6), 1 << 64, 6),
     "FA_ERROR_SIZE", r"max_seqlen_q=18446744073709551616 does not fit the library's int64"),
    ("max-seqlen-k-2e63", lambda: flashattn.flash_attn_varlen_func(
        r(6, 2, 16), r(6, 2, 16), r(6, 2, 16), i32(0, 6), i32(0, 6), 6, 1 << 63),
     "FA_ERROR_SIZE", r"max_seqlen_k=9223372036854775808"),
    # block_table makes k, v a paged cache (num_blocks, page_block_size, nheads_k, headdim)
    ("block-table-dense-k", lambda: flashattn.flash_attn_varlen_func(
        r(6, 2, 16), r(6, 2, 16), r(6, 2, 16), i32(0, 6), i32(0, 6), 6, 6, block_table=i32(0)),
     "FA_ERROR_RANK", r"k\.rank=3 must be 4"),
]


@pytest.mark.parametrize("call,status,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_library_message(call, status, pattern):
    with pytest.raises(FlashAttnError, match=pattern) as info:
        call()
    assert info.value.status_name == status
    assert isinstance(info.value, RuntimeError)


def test_backward_errors_surface_too():
    # A forward that succeeds, then a backward the library rejects: dout shaped unlike out.
    from flashattn import _kernels
    q = r(1, 4, 2, 16)
    out, lse = _kernels.forward(q, q, q, None, None, 0, 0, 0.0, 0.0, False, -1, -1, 0.0, None,
                                None)
    with pytest.raises(FlashAttnError, match=r"flashattn backward: .*dout") as info:
        _kernels.backward(r(1, 5, 2, 16), q, q, q, out, lse, None, None, 0, 0, 0.0, 0.0, False,
                          -1, -1, 0.0, None, None, False)
    assert info.value.status_name == "FA_ERROR_SHAPE"


def test_missing_library_is_reported_with_the_path():
    env = dict(os.environ, FA_LIBRARY="/nonexistent/libflashattn.so")
    code = ("import torch, flashattn\n"
            "try:\n    flashattn.flash_attn_func(*(torch.randn(1, 2, 1, 8),) * 3)\n"
            "except OSError as e:\n    print('OSError', e)\n")
    pkg = os.path.dirname(os.path.dirname(flashattn.__file__))
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=pkg, capture_output=True,
                         text=True, timeout=120)
    assert "OSError FA_LIBRARY=/nonexistent/libflashattn.so does not exist" in res.stdout, (
        res.stdout + res.stderr)


def test_huge_max_seqlen_within_int64_is_a_true_bound():
    """max_seqlen only bounds the longest sequence: a far larger one that fits int64 gives the
    same results as the true bound, at the same cost (issue 23: 1e9 cost 0.41 s)."""
    import time
    torch.manual_seed(0)
    q, k, v = (r(6, 2, 16, requires_grad=True) for _ in range(3))
    cu = i32(0, 2, 6)
    want = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 4, 4)
    want.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for m in (10**9, (1 << 62), (1 << 63) - 1):
        for t in (q, k, v):
            t.grad = None
        t0 = time.perf_counter()
        got = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, m, m)
        got.sum().backward()
        assert time.perf_counter() - t0 < 0.25
        assert torch.equal(got, want)
        for t, g in zip((q, k, v), grads):
            assert torch.equal(t.grad, g)
