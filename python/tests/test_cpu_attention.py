"""CPU tensors: forward and backward against the fp64 reference, over shapes (GQA/MQA, seqlen_q
above and below seqlen_k, odd lengths) x features (causal bottom-right, windows, softcap, ALiBi)."""
import pytest
import torch

from cases import Case, run_case

SHAPES = [
    dict(b=2, sq=37, sk=50, hq=4, hk=4, d=32),
    dict(b=1, sq=64, sk=17, hq=6, hk=2, d=40),   # sq > sk: causal leaves the first rows empty
    dict(b=3, sq=1, sk=129, hq=8, hk=1, d=64),   # decode-like step, MQA
    dict(b=1, sq=128, sk=128, hq=2, hk=2, d=128),
]
FEATURES = [
    dict(),
    dict(causal=True),
    dict(window=(8, 4)),
    dict(window=(16, -1)),
    dict(window=(-1, 0)),                        # same mask as causal, through the window path
    dict(softcap=3.0),
    dict(alibi="h"),
    dict(alibi="bh"),
    dict(causal=True, softcap=5.0, alibi="h", scale=0.3),
]
CASES = [Case(**s, **f) for s in SHAPES for f in FEATURES]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id())
def test_fp32_forward_backward(case, gen):
    run_case(case, torch.float32, "cpu", gen, backward=True, ref_compute=torch.float64,
             naive_compute=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [Case(), Case(b=1, sq=64, sk=17, hq=6, hk=2, d=40, causal=True)],
                         ids=lambda c: c.id())
def test_half_forward_backward(case, dtype, gen):
    # The CPU backend accumulates in fp32 and rounds the outputs; the naive baseline does the same.
    run_case(case, dtype, "cpu", gen, backward=True, ref_compute=torch.float64,
             naive_compute=torch.float32)


def test_causal_is_bottom_right_aligned(gen):
    # With seqlen_q < seqlen_k the last query sees every key: its row equals full attention's.
    import flashattn
    q, k, v = (torch.randn(1, n, 2, 16, generator=gen) for n in (5, 12, 12))
    causal = flashattn.flash_attn_func(q, k, v, causal=True)
    full = flashattn.flash_attn_func(q, k, v)
    torch.testing.assert_close(causal[:, -1], full[:, -1])
    # ...and the first query sees keys 0..7 only: changing key 8 must not move it.
    k2, v2 = k.clone(), v.clone()
    k2[:, 8:] += 1.0
    v2[:, 8:] -= 1.0
    moved = flashattn.flash_attn_func(q, k2, v2, causal=True)
    assert torch.equal(moved[:, 0], causal[:, 0])
    assert not torch.allclose(moved[:, -1], causal[:, -1])


def test_fully_masked_rows_give_zero_and_minus_inf(gen):
    import flashattn
    q, k, v = (torch.randn(1, n, 2, 16, generator=gen, requires_grad=True) for n in (9, 4, 4))
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    # Query i sits at key position i - 5: rows 0..4 see no key.
    assert torch.all(out[:, :5] == 0) and torch.all(lse[:, :, :5] == float("-inf"))
    assert torch.all(torch.isfinite(lse[:, :, 5:]))
    out.sum().backward()
    assert torch.all(q.grad[:, :5] == 0) and torch.isfinite(k.grad).all()


def test_deterministic_backward_is_bit_identical(gen):
    import flashattn
    q, k, v = (torch.randn(2, 70, 8, 32, generator=gen).requires_grad_() for _ in range(3))
    k2, v2 = k.detach()[:, :, :2].clone().requires_grad_(), v.detach()[:, :, :2].clone().requires_grad_()
    grads = []
    for _ in range(2):
        out = flashattn.flash_attn_func(q, k2, v2, causal=True, deterministic=True)
        grads.append(torch.autograd.grad(out, (q, k2, v2), torch.ones_like(out)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
