"""Attention bias and masks (fa_params 0.4) through the binding, CPU tensors (and CUDA tensors,
cuda-sm80's bias kernels, forward and backward with dbias, where a GPU is present):

- flashattn.scaled_dot_product_attention against PyTorch's own SDPA (F.scaled_dot_product_attention
  on torch >= 2.0, its private predecessor F._scaled_dot_product_attention on Debian's 1.13),
  forward and backward (the mask's gradient included), by FlashAttention's accuracy rule with
  PyTorch's SDPA in fp64 as the reference and in fp32 as the naive baseline: masks bool / float,
  broadcast shapes, is_causal (top-left) with seqlen_q below and above seqlen_k, enable_gqa, scale,
  3-D inputs, 16-bit inputs;
- flash_attn_func / flash_attn_varlen_func(attn_bias=...) against the binding's fp64 oracle
  (attn_reference.attention with its bias), with causal, windows, softcap, ALiBi and GQA;
- rows every key of which is masked (out 0, finite gradients), no dbias unless the bias requires
  grad, and the errors (each names the argument).
"""
import pytest
import torch
import torch.nn.functional as F

import flashattn
from attn_reference import attention, max_err
from cases import check_rule
from conftest import requires_cuda


def torch_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
               compute=torch.float64):
    """PyTorch's SDPA computed in `compute`: GQA by repeating kv heads and `scale` by scaling q
    (torch 1.13's function has neither argument)."""
    q, k, v = (t.to(compute) for t in (q, k, v))
    if attn_mask is not None and attn_mask.is_floating_point():
        attn_mask = attn_mask.to(compute)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    if scale is not None:
        q = q * (scale * q.shape[-1] ** 0.5)
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    return F._scaled_dot_product_attention(q, k, v, attn_mask, 0.0, False, is_causal)[0]


def rnd(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


# (N, H, H_kv, L, S, E), mask kind, SDPA options
SDPA_CASES = [
    ((2, 4, 4, 37, 50, 32), None, {}),
    ((2, 4, 4, 37, 50, 32), "bool-full", {}),
    ((2, 4, 4, 37, 50, 32), "bool-LS", {}),
    ((2, 4, 4, 37, 50, 32), "float-1HLS", {}),
    ((2, 4, 4, 37, 50, 32), "float-N11S", {}),
    ((1, 2, 2, 64, 17, 40), "float-LS", {}),
    ((2, 4, 4, 37, 50, 32), None, dict(is_causal=True)),    # L < S: top-left
    ((1, 2, 2, 64, 17, 40), None, dict(is_causal=True)),    # L > S: every row sees key 0
    ((1, 3, 3, 20, 20, 16), None, dict(is_causal=True)),
    ((2, 8, 2, 33, 47, 32), "bool-full", dict(enable_gqa=True)),
    ((2, 8, 2, 33, 47, 32), None, dict(enable_gqa=True, is_causal=True)),
    ((2, 4, 4, 37, 50, 32), "float-1HLS", dict(scale=0.3)),
    ((1, 2, 2, 9, 11, 8), "float-LS", dict(scale=0.0)),
]


def make_mask(kind, n, h, l, s, gen):
    if kind is None:
        return None
    shapes = {"full": (n, h, l, s), "LS": (l, s), "1HLS": (1, h, l, s), "N11S": (n, 1, 1, s)}
    dtype, where = kind.split("-")
    shape = shapes[where]
    if dtype == "bool":
        return torch.rand(*shape, generator=gen) < 0.7
    mask = torch.randn(*shape, generator=gen)
    if where == "N11S":  # a padding mask: the last keys of the second entry hidden
        mask[-1, ..., -7:] = float("-inf")
    return mask.requires_grad_()


def case_id(c):
    (n, h, hk, l, s, e), kind, opts = c
    return f"n{n}h{h}x{hk}l{l}s{s}e{e}-{kind}-" + "-".join(f"{k}{v}" for k, v in opts.items())


@pytest.mark.parametrize("case", SDPA_CASES, ids=case_id)
def test_sdpa_matches_torch(case, gen):
    (n, h, hk, l, s, e), kind, opts = case
    q = rnd(gen, n, h, l, e).requires_grad_()
    k, v = (rnd(gen, n, hk, s, e).requires_grad_() for _ in range(2))
    mask = make_mask(kind, n, h, l, s, gen)
    out = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, **opts)
    assert out.shape == (n, h, l, e)
    leaves = [q, k, v] + ([mask] if mask is not None and mask.requires_grad else [])
    dout = rnd(gen, n, h, l, e)
    got = torch.autograd.grad(out, leaves, dout)
    refs = {}
    for compute in (torch.float64, torch.float32):
        ref_leaves = [t.detach().to(compute).requires_grad_() for t in leaves]
        rq, rk, rv = ref_leaves[:3]
        rmask = ref_leaves[3] if len(ref_leaves) > 3 else mask
        ref_out = torch_sdpa(rq, rk, rv, rmask, compute=compute, **opts)
        refs[compute] = (ref_out, torch.autograd.grad(ref_out, ref_leaves, dout.to(compute)))
    (ref_out, ref_grads), (naive_out, naive_grads) = refs[torch.float64], refs[torch.float32]
    check_rule("out", out, ref_out, naive_out, 2, 1e-5)
    for name, g, r, nv in zip(("dq", "dk", "dv", "dmask"), got, ref_grads, naive_grads):
        assert g.shape == r.shape, name
        check_rule(name, g, r, nv, 3, 1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_sdpa_16_bit_matches_torch(dtype, gen):
    q = rnd(gen, 2, 4, 37, 32, dtype=dtype).requires_grad_()
    k, v = (rnd(gen, 2, 2, 50, 32, dtype=dtype).requires_grad_() for _ in range(2))
    mask = rnd(gen, 1, 4, 37, 50, dtype=dtype).requires_grad_()
    out = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert out.dtype == dtype
    dout = rnd(gen, 2, 4, 37, 32, dtype=dtype)
    got = torch.autograd.grad(out, (q, k, v, mask), dout)
    assert got[3].dtype == dtype and got[3].shape == mask.shape
    refs = {}
    for compute in (torch.float64, torch.float32):
        leaves = [t.detach().to(compute).requires_grad_() for t in (q, k, v, mask)]
        o = torch_sdpa(*leaves[:3], leaves[3], enable_gqa=True, compute=compute)
        refs[compute] = (o, torch.autograd.grad(o, leaves, dout.to(compute)))
    (ref_out, ref_grads), (naive_out, naive_grads) = refs[torch.float64], refs[torch.float32]
    check_rule("out", out, ref_out, naive_out.to(dtype), 2, 1e-5)
    for name, g, r, nv in zip(("dq", "dk", "dv", "dmask"), got, ref_grads, naive_grads):
        check_rule(name, g, r, nv.to(dtype), 3, 1e-4)


def test_sdpa_three_dimensional_inputs(gen):
    q = rnd(gen, 3, 20, 16)
    k, v = rnd(gen, 3, 33, 16), rnd(gen, 3, 33, 16)
    mask = torch.rand(3, 20, 33, generator=gen) < 0.8
    out = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (3, 20, 16)
    ref = torch_sdpa(q, k, v, mask)
    assert max_err(out, ref) < 2e-5


def test_sdpa_is_causal_is_top_left_and_flash_attn_func_bottom_right(gen):
    # seqlen_q 5 < seqlen_k 12: SDPA's first query sees key 0 only, flash_attn's sees keys 0..7.
    q = rnd(gen, 1, 2, 5, 16)
    k, v = rnd(gen, 1, 2, 12, 16), rnd(gen, 1, 2, 12, 16)
    sdpa = flashattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(sdpa[:, :, 0], v[:, :, 0], atol=1e-6)  # one key: its value
    fa = flashattn.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                   causal=True).transpose(1, 2)
    assert not torch.allclose(fa[:, :, 0], v[:, :, 0], atol=1e-3)
    assert max_err(fa, torch_sdpa(q, k, v, torch.ones(5, 12, dtype=torch.bool).tril(7))) < 2e-5


def test_fully_masked_rows_give_zero(gen):
    # Rows 3 and 10 hide every key: out 0 there (PyTorch's math SDPA gives NaN), the other rows as
    # PyTorch's, gradients finite, no gradient through the hidden rows.
    q = rnd(gen, 2, 4, 16, 32).requires_grad_()
    k, v = (rnd(gen, 2, 4, 24, 32).requires_grad_() for _ in range(2))
    bias = torch.randn(2, 1, 16, 24, generator=gen)
    bias[:, :, [3, 10]] = float("-inf")
    bias.requires_grad_()
    out = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert torch.equal(out[:, :, [3, 10]], torch.zeros_like(out[:, :, [3, 10]]))
    keep = [i for i in range(16) if i not in (3, 10)]
    ref = torch_sdpa(q.detach()[:, :, keep], k.detach(), v.detach(), bias.detach()[:, :, keep])
    assert max_err(out[:, :, keep], ref) < 2e-5
    grads = torch.autograd.grad(out.sum(), (q, k, v, bias))
    for g in grads:
        assert torch.isfinite(g).all()
    assert torch.equal(grads[0][:, :, [3, 10]], torch.zeros_like(grads[0][:, :, [3, 10]]))
    assert torch.equal(grads[3][:, :, [3, 10]], torch.zeros_like(grads[3][:, :, [3, 10]]))
    # A bool mask hiding whole rows: the same.
    mask = torch.ones(16, 24, dtype=torch.bool)
    mask[5] = False
    out = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[:, :, 5], torch.zeros_like(out[:, :, 5]))


def test_no_dbias_unless_the_bias_requires_grad(gen, monkeypatch):
    from flashattn import _kernels
    asked = []
    real = _kernels.backward_ext

    def spy(*args):
        asked.append(args[-1])  # want_dbias
        return real(*args)

    monkeypatch.setattr(_kernels, "backward_ext", spy)
    q = rnd(gen, 1, 2, 8, 16).requires_grad_()
    k, v = rnd(gen, 1, 2, 9, 16), rnd(gen, 1, 2, 9, 16)
    bias = rnd(gen, 1, 2, 8, 9)
    flashattn.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward()
    assert bias.grad is None and q.grad is not None
    bias.requires_grad_()
    flashattn.scaled_dot_product_attention(q, k, v, attn_mask=bias).sum().backward()
    assert bias.grad is not None and bias.grad.shape == bias.shape
    assert asked == [False, True]


def test_sdpa_dropout_reproducible_with_torch_seed(gen):
    q = rnd(gen, 1, 2, 20, 16)
    k, v = rnd(gen, 1, 2, 30, 16), rnd(gen, 1, 2, 30, 16)
    mask = torch.rand(1, 2, 20, 30, generator=gen) < 0.8
    torch.manual_seed(7)
    a = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3)
    torch.manual_seed(7)
    b = flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3)
    assert torch.equal(a, b)
    assert not torch.allclose(a, flashattn.scaled_dot_product_attention(q, k, v, attn_mask=mask))


# ---- flash_attn_func(attn_bias=...) against the oracle --------------------------------------

FA_CASES = [
    dict(bias=(2, 4, 37, 50)),
    dict(bias=(1, 4, 37, 50), causal=True),
    dict(bias=(2, 1, 1, 50), window=(8, 4), mask=True),
    dict(bias=(37, 50), softcap=3.0),
    dict(bias=(4, 1, 50), alibi=True, causal=True),
    dict(bias=(2, 4, 37, 50), mask=True, softcap=2.0, alibi=True),
]


@pytest.mark.parametrize("c", FA_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_flash_attn_func_attn_bias_matches_oracle(c, gen):
    b, sq, sk, hq, hk, d = 2, 37, 50, 4, 2, 32
    q = rnd(gen, b, sq, hq, d).requires_grad_()
    k, v = (rnd(gen, b, sk, hk, d).requires_grad_() for _ in range(2))
    if c.get("mask"):
        bias = torch.rand(*c["bias"], generator=gen) < 0.75
    else:
        bias = rnd(gen, *c["bias"]).requires_grad_()
    alibi = (torch.rand(hq, generator=gen) * 0.5 + 0.1) if c.get("alibi") else None
    kw = dict(causal=c.get("causal", False), window=c.get("window", (-1, -1)),
              softcap=c.get("softcap", 0.0))
    out = flashattn.flash_attn_func(q, k, v, causal=kw["causal"], window_size=kw["window"],
                                    softcap=kw["softcap"], alibi_slopes=alibi, attn_bias=bias)
    leaves = [q, k, v] + ([bias] if bias.requires_grad else [])
    dout = rnd(gen, b, sq, hq, d)
    got = torch.autograd.grad(out, leaves, dout)
    results = {}
    for compute in (torch.float64, torch.float32):
        ref_leaves = [t.detach().to(compute).requires_grad_() for t in leaves]
        rb = ref_leaves[3] if len(ref_leaves) > 3 else bias
        o, _ = attention(*ref_leaves[:3], alibi=alibi, bias=rb, compute=compute, **kw)
        results[compute] = (o, torch.autograd.grad(o, ref_leaves, dout.to(compute)))
    (ref_out, ref_grads), (naive_out, naive_grads) = results[torch.float64], results[torch.float32]
    check_rule("out", out, ref_out, naive_out, 2, 1e-5)
    for name, g, r, nv in zip(("dq", "dk", "dv", "dbias"), got, ref_grads, naive_grads):
        assert g.shape == r.shape, name
        check_rule(name, g, r, nv, 3, 1e-4)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("c", FA_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_flash_attn_func_attn_bias_on_cuda(c, dtype, gen):
    """CUDA tensors: the forward with a bias or mask (cuda-sm80's bias kernels) against the fp64
    oracle by the rule, the naive baseline computed in fp32 and rounded to the inputs' dtype."""
    b, sq, sk, hq, hk, d = 2, 37, 50, 4, 2, 32
    q = rnd(gen, b, sq, hq, d, dtype=dtype)
    k, v = (rnd(gen, b, sk, hk, d, dtype=dtype) for _ in range(2))
    if c.get("mask"):
        bias = torch.rand(*c["bias"], generator=gen) < 0.75
    else:
        bias = rnd(gen, *c["bias"], dtype=dtype)
    alibi = (torch.rand(hq, generator=gen) * 0.5 + 0.1) if c.get("alibi") else None
    kw = dict(causal=c.get("causal", False), window=c.get("window", (-1, -1)),
              softcap=c.get("softcap", 0.0))
    with torch.no_grad():
        out = flashattn.flash_attn_func(
            q.cuda(), k.cuda(), v.cuda(), causal=kw["causal"], window_size=kw["window"],
            softcap=kw["softcap"], alibi_slopes=None if alibi is None else alibi.cuda(),
            attn_bias=bias.cuda())
    assert out.is_cuda and out.dtype == dtype and out.shape == q.shape
    ref_out, _ = attention(q, k, v, alibi=alibi, bias=bias, compute=torch.float64, **kw)
    naive_out, _ = attention(q, k, v, alibi=alibi, bias=bias, compute=torch.float32, **kw)
    check_rule("out", out.cpu(), ref_out, naive_out.to(dtype), 2, 1e-5)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("c", FA_CASES + [dict(bias=(2, 4, 37, 50), dropout=True)],
                         ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_flash_attn_func_attn_bias_backward_on_cuda(c, dtype, gen):
    """CUDA tensors: dq, dk, dv and (a float bias that requires grad) dbias from cuda-sm80's bias
    kernels, by the rule against the same math in fp32 (CPU), the naive baseline run in the
    inputs' dtype on the GPU (test_gpu.py's). With dropout: the same keep-mask on both sides
    (the GPU's, as the CPU backend reproduces it bit for bit), checked through the CPU backend."""
    b, sq, sk, hq, hk, d = 2, 37, 50, 4, 2, 32
    q = rnd(gen, b, sq, hq, d, dtype=dtype)
    k, v = (rnd(gen, b, sk, hk, d, dtype=dtype) for _ in range(2))
    if c.get("mask"):
        bias = torch.rand(*c["bias"], generator=gen) < 0.75
    else:
        bias = rnd(gen, *c["bias"], dtype=dtype)
    alibi = (torch.rand(hq, generator=gen) * 0.5 + 0.1) if c.get("alibi") else None
    kw = dict(causal=c.get("causal", False), window=c.get("window", (-1, -1)),
              softcap=c.get("softcap", 0.0))
    dropout_p = 0.17 if c.get("dropout") else 0.0
    dout = rnd(gen, b, sq, hq, d, dtype=dtype)

    def run(device):
        leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
        tb = bias.to(device)
        if not c.get("mask"):
            tb.requires_grad_()
            leaves.append(tb)
        torch.manual_seed(5)
        out = flashattn.flash_attn_func(
            *leaves[:3], dropout_p=dropout_p, causal=kw["causal"], window_size=kw["window"],
            softcap=kw["softcap"], alibi_slopes=None if alibi is None else alibi.to(device),
            attn_bias=tb)
        return out, torch.autograd.grad(out, leaves, dout.to(device))

    out, got = run("cuda")
    assert all(g.is_cuda for g in got)
    if not c.get("mask"):
        assert got[3].dtype == dtype and got[3].shape == bias.shape
    if dropout_p:
        # The CPU backend (fp32 math on the same 16-bit inputs) with the same seed draws the same
        # mask: it is the reference; the naive baseline is the GPU's own run in fp32 inputs.
        ref_out, ref_grads = run("cpu")
        for name, g, r in zip(("dq", "dk", "dv", "dbias"), got, ref_grads):
            assert max_err(g.cpu().float(), r.float()) < 0.05 * max(1.0, float(r.abs().max())), name
        return
    results = {}
    for compute, device in ((torch.float32, "cpu"), (dtype, "cuda")):
        leaves = [t.to(device).to(compute if compute == torch.float32 else t.dtype)
                  .requires_grad_() for t in (q, k, v)]
        rb = bias.to(device)
        if not c.get("mask"):
            rb = rb.to(compute).requires_grad_()
            leaves.append(rb)
        o, _ = attention(*leaves[:3], alibi=None if alibi is None else alibi.to(device), bias=rb,
                         compute=compute, **kw)
        results[compute] = (o, torch.autograd.grad(o, leaves, dout.to(device).to(compute)))
    (ref_out, ref_grads), (naive_out, naive_grads) = results[torch.float32], results[dtype]
    check_rule("out", out.cpu(), ref_out, naive_out.cpu(), 2, 1e-5)
    for name, g, r, nv in zip(("dq", "dk", "dv", "dbias"), got, ref_grads, naive_grads):
        assert g.shape == r.shape, name
        check_rule(name, g.cpu(), r, nv.cpu(), 3, 1e-4)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(1, 4, 37, 50), (2, 1, 1, 50), (37, 50)], ids=str)
def test_sdpa_mask_gradient_on_cuda(shape, dtype, gen):
    """flashattn.scaled_dot_product_attention on CUDA with a float mask that requires grad: every
    gradient (the mask's summed over its broadcast dimensions) by the rule against PyTorch's SDPA
    in fp32 on the CPU, the naive baseline PyTorch's SDPA in the inputs' dtype on the GPU."""
    q = rnd(gen, 2, 4, 37, 64, dtype=dtype)
    k, v = (rnd(gen, 2, 2, 50, 64, dtype=dtype) for _ in range(2))
    mask = rnd(gen, *shape, dtype=dtype)
    dout = rnd(gen, 2, 4, 37, 64, dtype=dtype)
    leaves = [t.cuda().requires_grad_() for t in (q, k, v, mask)]
    out = flashattn.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3],
                                                 enable_gqa=True)
    got = torch.autograd.grad(out, leaves, dout.cuda())
    assert got[3].shape == mask.shape and got[3].dtype == dtype
    refs = {}
    for compute, device in ((torch.float32, "cpu"), (dtype, "cuda")):
        ls = [t.detach().to(device).to(compute).requires_grad_() for t in (q, k, v, mask)]
        o = torch_sdpa(*ls[:3], ls[3], enable_gqa=True, compute=compute)
        refs[compute] = (o, torch.autograd.grad(o, ls, dout.to(device).to(compute)))
    (ref_out, ref_grads), (naive_out, naive_grads) = refs[torch.float32], refs[dtype]
    check_rule("out", out.cpu(), ref_out, naive_out.cpu(), 2, 1e-5)
    for name, g, r, nv in zip(("dq", "dk", "dv", "dmask"), got, ref_grads, naive_grads):
        check_rule(name, g.cpu(), r, nv.cpu(), 3, 1e-4)


def test_varlen_attn_bias_indexed_per_sequence(gen):
    # Two packed sequences (9 and 14 queries, 12 and 20 keys); the bias is (batch, heads,
    # max_seqlen_q + 1, max_seqlen_k): sequence i reads bias[i, :, :len_q, :len_k].
    lens_q, lens_k, hq, d = [9, 14], [12, 20], 2, 16
    cu_q = torch.tensor([0, 9, 23], dtype=torch.int32)
    cu_k = torch.tensor([0, 12, 32], dtype=torch.int32)
    q = rnd(gen, 23, hq, d).requires_grad_()
    k, v = (rnd(gen, 32, hq, d).requires_grad_() for _ in range(2))
    bias = rnd(gen, 2, hq, 15, 20).requires_grad_()
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 14, 20, causal=True,
                                           attn_bias=bias)
    dq, dk, dv, dbias = torch.autograd.grad(out, (q, k, v, bias), torch.ones_like(out))
    for i in range(2):
        qs, ks = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        leaves = [t.detach().double().requires_grad_()
                  for t in (q[qs], k[ks], v[ks], bias[i, :, :lens_q[i], :lens_k[i]])]
        o, _ = attention(*(t[None] for t in leaves[:3]), causal=True, bias=leaves[3][None])
        assert max_err(out[qs], o[0]) < 2e-5
        g = torch.autograd.grad(o, leaves, torch.ones_like(o))
        assert max_err(dq[qs], g[0]) < 1e-4
        assert max_err(dbias[i, :, :lens_q[i], :lens_k[i]], g[3]) < 1e-4
    # Rows and columns no sequence reads get a zero gradient.
    assert torch.equal(dbias[0, :, 9:], torch.zeros_like(dbias[0, :, 9:]))
    assert torch.equal(dbias[0, :, :, 12:], torch.zeros_like(dbias[0, :, :, 12:]))


# ---- errors ------------------------------------------------------------------------------------

def test_errors_name_the_argument(gen):
    q = rnd(gen, 1, 2, 8, 16)
    k = v = rnd(gen, 1, 2, 9, 16)
    with pytest.raises(flashattn.FlashAttnError, match=r"attn_bias.shape\[1\]=3 must be 1 or"):
        flashattn.scaled_dot_product_attention(q, k, v, attn_mask=rnd(gen, 1, 3, 8, 9))
    with pytest.raises(flashattn.FlashAttnError, match=r"attn_bias.shape\[3\]=8 must be 1 or"):
        flashattn.scaled_dot_product_attention(q, k, v, attn_mask=rnd(gen, 8, 8))
    with pytest.raises(flashattn.FlashAttnError, match=r"attn_bias.dim\(\)=5 must be <= 4"):
        flashattn.scaled_dot_product_attention(q, k, v, attn_mask=rnd(gen, 1, 1, 2, 8, 9))
    with pytest.raises(flashattn.FlashAttnError, match="attn_bias.dtype=int32"):
        flashattn.scaled_dot_product_attention(q, k, v,
                                               attn_mask=torch.zeros(8, 9, dtype=torch.int32))
    with pytest.raises(flashattn.FlashAttnError, match="attn_mask and is_causal=True"):
        flashattn.scaled_dot_product_attention(q, k, v, attn_mask=rnd(gen, 8, 9), is_causal=True)
    with pytest.raises(flashattn.FlashAttnError, match="enable_gqa=True"):
        flashattn.scaled_dot_product_attention(rnd(gen, 1, 4, 8, 16), k, v)
    with pytest.raises(flashattn.FlashAttnError, match="query.dim"):
        flashattn.scaled_dot_product_attention(rnd(gen, 8, 16), k, v)
