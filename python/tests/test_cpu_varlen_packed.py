"""CPU tensors: packed variable-length batches against a per-sequence reference, the packed
qkv/kv variants against the unpacked call, and stride handling (views pass through uncopied)."""
import pytest
import torch

from attn_reference import attention_varlen
from cases import check_rule

import flashattn
from flashattn import _kernels


def cu(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)


VARLEN = [
    dict(lens_q=[5, 17, 33], lens_k=[9, 17, 40]),
    dict(lens_q=[7, 0, 12, 1], lens_k=[3, 5, 0, 64]),  # an empty sequence and a sequence with no keys
]
FEATURES = [dict(), dict(causal=True), dict(window=(4, 2)), dict(softcap=2.0, alibi="bh")]


@pytest.mark.parametrize("feat", FEATURES, ids=lambda f: ",".join(f) or "plain")
@pytest.mark.parametrize("lens", VARLEN, ids=["three", "with-empty"])
def test_varlen_forward_backward(lens, feat, gen):
    hq, hk, d = 4, 2, 24
    cu_q, cu_k = cu(lens["lens_q"]), cu(lens["lens_k"])
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    q = torch.randn(tq, hq, d, generator=gen)
    k, v = torch.randn(tk, hk, d, generator=gen), torch.randn(tk, hk, d, generator=gen)
    alibi = None
    if feat.get("alibi"):
        alibi = torch.rand(len(lens["lens_q"]), hq, generator=gen)
    kw = dict(causal=feat.get("causal", False), window=feat.get("window", (-1, -1)),
              softcap=feat.get("softcap", 0.0), alibi=alibi)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse, _ = flashattn.flash_attn_varlen_func(
        *leaves, cu_q, cu_k, max(lens["lens_q"]), max(lens["lens_k"]), causal=kw["causal"],
        window_size=kw["window"], softcap=kw["softcap"], alibi_slopes=alibi,
        return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (hq, tq)

    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    naive_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = attention_varlen(*ref_leaves, cu_q, cu_k, compute=torch.float64, **kw)
    naive_out, naive_lse = attention_varlen(*naive_leaves, cu_q, cu_k, compute=torch.float32, **kw)
    check_rule("out", out, ref_out, naive_out, 2, 1e-5)
    check_rule("lse", lse, ref_lse, naive_lse, 2, 1e-5)

    dout = torch.randn(out.shape, generator=gen)
    got = torch.autograd.grad(out, leaves, dout)
    # Leaves of empty sequences take no part in the reference graph: their gradient is zero.
    ref = torch.autograd.grad(ref_out, ref_leaves, dout.double(), allow_unused=True)
    naive = torch.autograd.grad(naive_out, naive_leaves, dout, allow_unused=True)
    for name, g, r, n in zip(("dq", "dk", "dv"), got, ref, naive):
        r = torch.zeros_like(g, dtype=torch.float64) if r is None else r
        n = torch.zeros_like(g) if n is None else n
        check_rule(name, g, r, n, 3, 1e-4)


def _grads(out, leaves, dout):
    return torch.autograd.grad(out, leaves, dout)


def test_qkvpacked_matches_unpacked(gen):
    qkv = torch.randn(2, 33, 3, 4, 16, generator=gen, requires_grad=True)
    out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True, softcap=4.0)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    ref = flashattn.flash_attn_func(q, k, v, causal=True, softcap=4.0)
    assert torch.equal(out, ref)
    dout = torch.randn(out.shape, generator=gen)
    (dqkv,) = _grads(out, [qkv], dout)
    assert torch.equal(dqkv, torch.stack(_grads(ref, [q, k, v], dout), dim=2))


def test_kvpacked_matches_unpacked_with_gqa(gen):
    q = torch.randn(2, 20, 6, 16, generator=gen, requires_grad=True)
    kv = torch.randn(2, 31, 2, 3, 16, generator=gen, requires_grad=True)
    out = flashattn.flash_attn_kvpacked_func(q, kv, window_size=(5, 5))
    k, v = (kv.detach()[:, :, i].clone().requires_grad_() for i in range(2))
    q2 = q.detach().clone().requires_grad_()
    ref = flashattn.flash_attn_func(q2, k, v, window_size=(5, 5))
    assert torch.equal(out, ref)
    dout = torch.randn(out.shape, generator=gen)
    dq, dkv = _grads(out, [q, kv], dout)
    rq, rk, rv = _grads(ref, [q2, k, v], dout)
    assert torch.equal(dq, rq) and torch.equal(dkv, torch.stack([rk, rv], dim=2))


def test_varlen_packed_variants_match_varlen(gen):
    cu_s = cu([4, 11, 6])
    qkv = torch.randn(21, 3, 2, 8, generator=gen)
    out = flashattn.flash_attn_varlen_qkvpacked_func(qkv, cu_s, 11, causal=True)
    ref = flashattn.flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_s, cu_s, 11, 11,
                                           causal=True)
    assert torch.equal(out, ref)
    q = torch.randn(21, 2, 8, generator=gen)
    cu_k = cu([5, 2, 9])
    kv = torch.randn(16, 2, 1, 8, generator=gen)
    out = flashattn.flash_attn_varlen_kvpacked_func(q, kv, cu_s, cu_k, 11, 9)
    ref = flashattn.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_s, cu_k, 11, 9)
    assert torch.equal(out, ref)


def test_strided_views_are_not_copied_and_give_the_same_result(gen):
    # (batch, heads, seq, dim) memory viewed as (batch, seq, heads, dim): strides, no copy.
    base = torch.randn(3, 2, 4, 19, 16, generator=gen)
    q, k, v = (base[i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    assert _kernels._usable(q, "q", cuda=False) is q
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    ref = flashattn.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


def test_non_contiguous_last_dim_is_copied(gen):
    wide = torch.randn(1, 10, 2, 32, generator=gen)
    q = wide[..., ::2]  # last-dim stride 2: the C ABI cannot take it
    assert q.stride(-1) == 2
    fixed = _kernels._usable(q, "q", cuda=False)
    assert fixed.stride(-1) == 1 and torch.equal(fixed, q)
    k = torch.randn(1, 12, 2, 16, generator=gen)
    out = flashattn.flash_attn_func(q, k, k)
    torch.testing.assert_close(out, flashattn.flash_attn_func(q.contiguous(), k, k), rtol=0,
                               atol=0)
