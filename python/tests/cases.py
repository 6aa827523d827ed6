"""One attention case run three ways (flashattn, high-precision oracle, same-precision naive) and
judged by FlashAttention's accuracy rule. Shared by the CPU and GPU test modules.

Rule: max |flashattn - ref| <= 2 x max |naive - ref| + 1e-5 for out and LSE, and 3x + 1e-4 for
dq, dk, dv, where `ref` is attn_reference.attention in `ref_compute` (fp64 on the CPU, fp32 on the
GPU as the issue asks) and `naive` the same math in `naive_compute`, stored in the inputs' dtype.
"""
from dataclasses import dataclass, field

import torch

from attn_reference import attention, max_err

import flashattn


@dataclass
class Case:
    b: int = 2
    sq: int = 37
    sk: int = 50
    hq: int = 4
    hk: int = 4
    d: int = 32
    causal: bool = False
    window: tuple = (-1, -1)
    softcap: float = 0.0
    alibi: str = ""  # "", "h" (nheads,) or "bh" (batch, nheads)
    scale: float = None
    extra: dict = field(default_factory=dict)

    def id(self):
        parts = [f"b{self.b}s{self.sq}x{self.sk}h{self.hq}/{self.hk}d{self.d}"]
        if self.causal:
            parts.append("causal")
        if self.window != (-1, -1):
            parts.append(f"win{self.window[0]},{self.window[1]}")
        if self.softcap:
            parts.append(f"cap{self.softcap}")
        if self.alibi:
            parts.append(f"alibi-{self.alibi}")
        if self.scale is not None:
            parts.append(f"scale{self.scale}")
        return "-".join(parts)


def check_rule(name, got, ref, naive, factor, atol):
    err, base = max_err(got, ref), max_err(naive, ref)
    assert err <= factor * base + atol, (
        f"{name}: max error {err:.3g} > {factor} x naive error {base:.3g} + {atol}")
    return err, base


def make_inputs(c, dtype, device, gen):
    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)
    q, k, v = rnd(c.b, c.sq, c.hq, c.d), rnd(c.b, c.sk, c.hk, c.d), rnd(c.b, c.sk, c.hk, c.d)
    alibi = None
    if c.alibi:
        shape = (c.b, c.hq) if c.alibi == "bh" else (c.hq,)
        alibi = (torch.rand(*shape, generator=gen) * 0.5).to(device)  # fp32, as flash_attn
    return q, k, v, alibi


def run_case(c, dtype, device, gen, backward, ref_compute, naive_compute):
    q, k, v, alibi = make_inputs(c, dtype, device, gen)
    kw = dict(causal=c.causal, window=c.window, softcap=c.softcap, alibi=alibi, scale=c.scale)
    leaves = [t.clone().requires_grad_(backward) for t in (q, k, v)]
    out, lse, third = flashattn.flash_attn_func(
        *leaves, softmax_scale=c.scale, causal=c.causal, window_size=c.window,
        softcap=c.softcap, alibi_slopes=alibi, return_attn_probs=True)
    assert third is None
    assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
    assert lse.shape == (c.b, c.hq, c.sq) and lse.dtype == torch.float32

    ref_leaves = [t.to(ref_compute).requires_grad_(backward) for t in (q, k, v)]
    naive_leaves = [t.to(naive_compute).requires_grad_(backward) for t in (q, k, v)]
    ref_out, ref_lse = attention(*ref_leaves, compute=ref_compute, **kw)
    naive_out, naive_lse = attention(*naive_leaves, compute=naive_compute, **kw)
    check_rule("out", out, ref_out, naive_out.to(dtype), 2, 1e-5)
    check_rule("lse", lse, ref_lse, naive_lse.float(), 2, 1e-5)
    if not backward:
        return
    dout = torch.randn(out.shape, generator=gen).to(device=device, dtype=dtype)
    got = torch.autograd.grad(out, leaves, dout)
    ref = torch.autograd.grad(ref_out, ref_leaves, dout.to(ref_compute))
    naive = torch.autograd.grad(naive_out, naive_leaves, dout.to(naive_compute))
    for name, g, r, n, t in zip(("dq", "dk", "dv"), got, ref, naive, (q, k, v)):
        assert g.shape == t.shape and g.dtype == dtype
        check_rule(name, g, r, n.to(dtype), 3, 1e-4)
