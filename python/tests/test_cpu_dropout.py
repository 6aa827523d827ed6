"""Dropout through the binding, on CPU tensors.

The keep mask is observed exactly through the public API: with q = 0 every visible key has
probability 1/seqlen_k, and with V = identity (seqlen_k = headdim, V[j] = e_j) output column j of
query row i is keep[i, j] / ((1 - p) * seqlen_k). The mask depends only on (seed, offset, batch,
head, row, column) (docs/dropout.md), so the mask observed this way is the one a call with real
inputs and the same seed applies; that call is then checked against the reference with the mask.
"""
import math

import pytest
import torch

from attn_reference import attention
from cases import check_rule

import flashattn
from flashattn import _kernels
from flashattn.flash_attn_interface import draw_dropout_rng

B, SQ, HQ, HK, SK = 2, 96, 4, 2, 64  # SK is also the head dim (V = identity)


def observe_mask(p, seed, device="cpu", dtype=torch.float32):
    """(keep (B, HQ, SQ, SK) bool, out, lse, kept value) of a call made after
    torch.manual_seed(seed)."""
    q = torch.zeros(B, SQ, HQ, SK, device=device, dtype=dtype)
    k = torch.randn(B, SK, HK, SK, device=device, dtype=dtype)  # irrelevant: q = 0 zeroes logits
    eye = torch.eye(SK, device=device, dtype=dtype)
    v = eye.expand(B, HK, SK, SK).permute(0, 2, 1, 3)  # v[b, j, h] = e_j, a strided view
    torch.manual_seed(seed)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    kept_value = 1.0 / ((1.0 - p) * SK)
    keep = out.permute(0, 2, 1, 3) > 0.5 * kept_value  # (B, HQ, SQ, SK)
    return keep, out, lse, kept_value


@pytest.mark.parametrize("p", [0.1, 0.17, 0.5])
def test_keep_rate_and_scaling(p):
    keep, out, lse, kept_value = observe_mask(p, seed=7)
    rate = keep.double().mean().item()
    # 49k draws: the standard deviation of the rate is < 0.003; 0.015 is ~6 of them.
    assert abs(rate - (1 - p)) < 0.015, f"keep rate {rate:.4f}, expected {1 - p}"
    # Kept probabilities are scaled by 1/(1-p), dropped ones are exactly 0.
    vals = out.flatten()
    assert torch.all((vals == 0) | ((vals - kept_value).abs() < 1e-6 * kept_value + 1e-7))
    # The LSE is the softmax normaliser before dropout: log(SK) for uniform logits.
    torch.testing.assert_close(lse, torch.full_like(lse, math.log(SK)))


def test_mask_follows_torch_seed_and_varies_over_heads_rows_batches():
    a, *_ = observe_mask(0.3, seed=11)
    b, *_ = observe_mask(0.3, seed=11)
    c, *_ = observe_mask(0.3, seed=12)
    assert torch.equal(a, b), "same torch.manual_seed must give the same mask"
    assert (a != c).double().mean() > 0.2, "another seed must give an independent mask"
    # Independent streams per (batch, head, row): no two share a mask.
    assert not torch.equal(a[0, 0], a[0, 1]) and not torch.equal(a[0, 0], a[1, 0])
    assert not torch.equal(a[0, 0, 0], a[0, 0, 1])


def test_seed_is_drawn_from_torchs_default_generator():
    # The documented scheme: (seed, offset) = draw_dropout_rng() right after the seed is set.
    q, k, v = (torch.randn(1, 20, 2, 8) for _ in range(3))
    torch.manual_seed(99)
    out = flashattn.flash_attn_func(q, k, v, dropout_p=0.25)
    torch.manual_seed(99)
    rng = draw_dropout_rng()
    direct, _ = _kernels.forward(q, k, v, None, None, 0, 0, 0.25, 0.0, False, -1, -1, 0.0, None,
                                 rng)
    assert torch.equal(out, direct)


@pytest.mark.parametrize("causal", [False, True])
def test_forward_backward_with_dropout_match_reference(causal, gen):
    p, seed = 0.17, 5
    keep, *_ = observe_mask(p, seed)
    q = torch.randn(B, SQ, HQ, SK, generator=gen)
    k, v = torch.randn(B, SK, HK, SK, generator=gen), torch.randn(B, SK, HK, SK, generator=gen)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(seed)
    out = flashattn.flash_attn_func(*leaves, dropout_p=p, causal=causal)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    naive_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    kw = dict(causal=causal, keep=keep, dropout_p=p)
    ref_out, _ = attention(*ref_leaves, compute=torch.float64, **kw)
    naive_out, _ = attention(*naive_leaves, compute=torch.float32, **kw)
    check_rule("out", out, ref_out, naive_out, 2, 1e-5)
    dout = torch.randn(out.shape, generator=gen)
    # The backward must regenerate the forward's mask from the saved (seed, offset) even though
    # the global generator has moved on since.
    torch.manual_seed(1000)
    got = torch.autograd.grad(out, leaves, dout)
    ref = torch.autograd.grad(ref_out, ref_leaves, dout.double())
    naive = torch.autograd.grad(naive_out, naive_leaves, dout)
    for name, g, r, n in zip(("dq", "dk", "dv"), got, ref, naive):
        check_rule(name, g, r, n, 3, 1e-4)
