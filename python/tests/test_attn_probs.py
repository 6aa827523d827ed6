"""return_attn_probs=True with dropout: S_dmask as flash_attn returns it.

Layout (batch, nheads, seqlen_q rounded up to 128, seqlen_k rounded up to 128), q's dtype, zero in
the rounding margin; inside, the softmax probabilities of the masked scores, negative where the
dropout mask drops the element. Checked: the sign pattern equals the library's keep-mask as
test_cpu_dropout observes it (q = 0, V = identity); |S_dmask| equals softmax of the masked
scores of the float64 reference by the accuracy rule; the output rebuilt from S_dmask the way
flash_attn's users do (kept probabilities / (1 - p) times V) equals the call's own output.
"""
import pytest
import torch

from attn_reference import attention, max_err
from cases import check_rule
from conftest import requires_cuda
from test_cpu_dropout import B, HK, HQ, SK, SQ, observe_mask

import flashattn


def probs_reference(q, k, compute, **kw):
    """softmax of the masked scores (b, hq, sq, sk) in `compute`: attention() with V = identity
    over the keys gives exactly the probability matrix."""
    b, sk, hk = k.shape[0], k.shape[1], k.shape[2]
    eye = torch.eye(sk, dtype=compute).expand(b, hk, sk, sk).permute(0, 2, 1, 3)
    qc, kc = q.to(compute), k.to(compute)
    # Head dim of V = sk: the einsum does not need V's head dim to equal q's.
    out, _ = attention(qc, kc, eye, compute=compute, **kw)  # (b, sq, hq, sk)
    return out.permute(0, 2, 1, 3)


def rebuild_out(s_dmask, v, p, sq, sk):
    """out from S_dmask as flash_attn's tests rebuild it: kept probabilities / (1 - p) times V."""
    hq = s_dmask.shape[1]
    probs = s_dmask[:, :, :sq, :sk].double().clamp(min=0) / (1 - p)
    vv = v.double().repeat_interleave(hq // v.shape[2], dim=2)
    return torch.einsum("bhqk,bkhd->bqhd", probs, vv)


@pytest.mark.parametrize("causal", [False, True])
def test_sign_is_the_keep_mask_and_values_the_probabilities(causal, gen):
    p, seed = 0.17, 5
    keep, *_ = observe_mask(p, seed)
    q = torch.randn(B, SQ, HQ, SK, generator=gen)
    k, v = torch.randn(B, SK, HK, SK, generator=gen), torch.randn(B, SK, HK, SK, generator=gen)
    torch.manual_seed(seed)
    out, lse, s = flashattn.flash_attn_func(q, k, v, dropout_p=p, causal=causal,
                                            return_attn_probs=True)
    assert s.shape == (B, HQ, 128, 128) and s.dtype == q.dtype and not s.requires_grad
    inner = s[:, :, :SQ, :SK]
    assert torch.equal(torch.signbit(inner), ~keep)  # exactly, masked-out elements (±0) included
    assert torch.all(s[:, :, SQ:] == 0) and torch.all(s[:, :, :, SK:] == 0)
    ref = probs_reference(q, k, torch.float64, causal=causal)
    naive = probs_reference(q, k, torch.float32, causal=causal)
    check_rule("|S_dmask|", inner.abs(), ref, naive, 2, 1e-5)
    if causal:  # the masked-out elements are zeros, of either sign
        assert torch.all(inner[ref == 0] == 0)
    rebuilt = rebuild_out(s, v, p, SQ, SK)
    torch.testing.assert_close(out.double(), rebuilt, rtol=0, atol=1e-5)


OPTIONS = [
    dict(),
    dict(window_size=(7, 3)),
    dict(softcap=4.0),
    dict(causal=True, softmax_scale=0.3),
    dict(alibi="h"),
    dict(alibi="bh", causal=True),
]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items())
                         or "plain")
@pytest.mark.parametrize("shape", [(2, 37, 50, 4, 2, 24), (1, 130, 9, 3, 1, 16)],
                         ids=["b2s37x50h4/2", "b1s130x9h3/1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_features_layout_and_rebuilt_output(opts, shape, dtype, gen):
    b, sq, sk, hq, hk, d = shape
    p = 0.3
    q = torch.randn(b, sq, hq, d, generator=gen).to(dtype)
    k = torch.randn(b, sk, hk, d, generator=gen).to(dtype)
    v = torch.randn(b, sk, hk, d, generator=gen).to(dtype)
    opts = dict(opts)
    alibi = opts.pop("alibi", "")
    if alibi:
        opts["alibi_slopes"] = torch.rand((b, hq) if alibi == "bh" else (hq,), generator=gen)
    torch.manual_seed(3)
    out, _, s = flashattn.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True, **opts)
    rq, rk = (sq + 127) // 128 * 128, (sk + 127) // 128 * 128
    assert s.shape == (b, hq, rq, rk) and s.dtype == dtype
    kw = dict(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
              softcap=opts.get("softcap", 0.0), alibi=opts.get("alibi_slopes"),
              scale=opts.get("softmax_scale"))
    ref = probs_reference(q, k, torch.float64, **kw)
    naive = probs_reference(q, k, torch.float32, **kw).to(dtype)
    check_rule("|S_dmask|", s[:, :, :sq, :sk].abs(), ref, naive, 2, 1e-5)
    dropped = torch.signbit(s[:, :, :sq, :sk])
    rate = dropped.double().mean().item()
    assert abs(rate - p) < 0.08, rate
    # Rebuilt in float64 from S_dmask: within the rule of the call's own output.
    if dtype == torch.float32:
        rebuilt = rebuild_out(s, v, p, sq, sk)
        assert max_err(out, rebuilt) < 1e-5


def test_varlen_sequences_start_at_zero_and_match_their_dense_calls(gen):
    p, hq, hk, d = 0.25, 2, 1, 16
    lens_q, lens_k = [5, 0, 70, 3], [9, 4, 66, 0]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(lens_q), hq, d, generator=gen)
    k, v = (torch.randn(sum(lens_k), hk, d, generator=gen) for _ in range(2))
    torch.manual_seed(21)
    out, _, s = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                                 dropout_p=p, causal=True,
                                                 return_attn_probs=True)
    assert s.shape == (4, hq, 128, 128)
    for i, (nq, nk) in enumerate(zip(lens_q, lens_k)):
        part = s[i]
        if nq == 0 or nk == 0:
            assert torch.all(part == 0)
            continue
        assert torch.all(part[:, nq:] == 0) and torch.all(part[:, :, nk:] == 0)
        qs = q[cu_q[i]:cu_q[i + 1]][None]
        ks = k[cu_k[i]:cu_k[i + 1]][None]
        vs = v[cu_k[i]:cu_k[i + 1]][None]
        ref = probs_reference(qs, ks, torch.float64, causal=True)[0]
        naive = probs_reference(qs, ks, torch.float32, causal=True)[0]
        check_rule(f"seq {i}", part[:, :nq, :nk].abs(), ref, naive, 2, 1e-5)
        rebuilt = rebuild_out(part[None], vs, p, nq, nk)[0]
        assert max_err(out[cu_q[i]:cu_q[i + 1]], rebuilt) < 1e-5


def test_wide_key_range_spans_several_probe_blocks(gen):
    # seqlen_k 300 > 256: the mask is read from the library in two blocks of columns.
    q = torch.randn(1, 4, 2, 8, generator=gen)
    k, v = (torch.randn(1, 300, 2, 8, generator=gen) for _ in range(2))
    torch.manual_seed(8)
    out, _, s = flashattn.flash_attn_func(q, k, v, dropout_p=0.4, return_attn_probs=True)
    assert s.shape == (1, 2, 128, 384)
    assert max_err(out, rebuild_out(s, v, 0.4, 4, 300)) < 1e-5


def test_without_dropout_the_third_element_is_none():
    q, k, v = (torch.randn(1, 9, 2, 16) for _ in range(3))
    for fn_out in (flashattn.flash_attn_func(q, k, v, return_attn_probs=True),
                   flashattn.flash_attn_qkvpacked_func(torch.stack([q, k, v], 2),
                                                       return_attn_probs=True)):
        assert fn_out[2] is None


def test_gradients_unaffected_and_packed_variants(gen):
    q, k, v = (torch.randn(1, 20, 2, 8, generator=gen, requires_grad=True) for _ in range(3))
    torch.manual_seed(4)
    out, _, s = flashattn.flash_attn_func(q, k, v, dropout_p=0.2, return_attn_probs=True)
    torch.manual_seed(4)
    plain = flashattn.flash_attn_func(q, k, v, dropout_p=0.2)
    assert torch.equal(out, plain)
    g = torch.randn(out.shape, generator=gen)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                                                 torch.autograd.grad(plain, (q, k, v), g)))
    qkv = torch.stack([q, k, v], 2).detach()
    torch.manual_seed(4)
    _, _, s_packed = flashattn.flash_attn_qkvpacked_func(qkv, dropout_p=0.2,
                                                         return_attn_probs=True)
    assert torch.equal(s_packed, s)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_s_dmask_sign_equals_cpu_mask_and_rebuilds_out(dtype, gen):
    q = torch.randn(2, 77, 4, 64, generator=gen).to(dtype)
    k, v = (torch.randn(2, 90, 2, 64, generator=gen).to(dtype) for _ in range(2))
    torch.manual_seed(6)
    out, _, s = flashattn.flash_attn_func(q.cuda(), k.cuda(), v.cuda(), dropout_p=0.17,
                                          causal=True, return_attn_probs=True)
    torch.manual_seed(6)
    _, _, s_cpu = flashattn.flash_attn_func(q.float(), k.float(), v.float(), dropout_p=0.17,
                                            causal=True, return_attn_probs=True)
    assert s.is_cuda and s.shape == (2, 4, 128, 128)
    assert torch.equal(torch.signbit(s.cpu()), torch.signbit(s_cpu))
    ref = rebuild_out(s_cpu, v.float(), 0.17, 77, 90)
    naive = rebuild_out(s.cpu(), v, 0.17, 77, 90)
    assert max_err(out.cpu(), ref) <= 2 * max_err(naive.to(dtype), ref) + 1e-3
