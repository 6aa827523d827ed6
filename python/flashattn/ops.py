"""The two operators, `fwd` and `bwd`, as torch sees them.

`fwd_ext` and `bwd_ext` are the same calls with fa_params 0.4's fields: an attention bias or mask
(attn_bias, rank 4) and its gradient, and the query shift (scaled_dot_product_attention's top-left
causal alignment); the calls without them keep the plain ops.

On torch >= 2.4 they are registered with torch.library.custom_op as `torch.ops.flashattn.fwd` and
`torch.ops.flashattn.bwd`, each with a fake (meta) implementation that only computes output shapes,
so torch.compile traces a model calling flashattn into one graph. In eager mode the call skips the
dispatcher and runs the same Python body directly: the custom op exists for tracing, and its
dispatch would cost several microseconds of the wrapper's overhead budget for nothing.

On older torch (1.13 ... 2.3) there is no custom_op; the bodies are then hidden from dynamo
(torch._dynamo.disable) where dynamo exists, so torch.compile falls back to a graph break at the
call instead of failing inside ctypes.
"""
from typing import Optional, Tuple

import torch

from . import _kernels

HAS_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")


def _compiling_fallback():
    return False


if hasattr(torch, "compiler") and hasattr(torch.compiler, "is_compiling"):
    is_compiling = torch.compiler.is_compiling
else:
    try:
        from torch._dynamo import is_compiling
    except ImportError:  # torch 1.13: no dynamo
        is_compiling = _compiling_fallback

Tensor = torch.Tensor


def _fwd_body(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
              cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
              dropout_p: float, softmax_scale: float, causal: bool, window_left: int,
              window_right: int, softcap: float, alibi_slopes: Optional[Tensor],
              rng: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    return _kernels.forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                            alibi_slopes, rng)


def _bwd_body(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
              cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              max_seqlen_q: int, max_seqlen_k: int, dropout_p: float, softmax_scale: float,
              causal: bool, window_left: int, window_right: int, softcap: float,
              alibi_slopes: Optional[Tensor], rng: Optional[Tensor],
              deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    return _kernels.backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                             max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                             window_right, softcap, alibi_slopes, rng, deterministic)


def _fwd_ext_body(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
                  cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                  dropout_p: float, softmax_scale: float, causal: bool, window_left: int,
                  window_right: int, softcap: float, alibi_slopes: Optional[Tensor],
                  rng: Optional[Tensor], attn_bias: Optional[Tensor],
                  q_shift: int) -> Tuple[Tensor, Tensor]:
    return _kernels.forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                            alibi_slopes, rng, attn_bias, q_shift)


def _bwd_ext_body(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                  cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                  max_seqlen_q: int, max_seqlen_k: int, dropout_p: float, softmax_scale: float,
                  causal: bool, window_left: int, window_right: int, softcap: float,
                  alibi_slopes: Optional[Tensor], rng: Optional[Tensor], deterministic: bool,
                  attn_bias: Optional[Tensor], q_shift: int,
                  want_dbias: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _kernels.backward_ext(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                 max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                 window_left, window_right, softcap, alibi_slopes, rng,
                                 deterministic, attn_bias, q_shift, want_dbias)


if HAS_CUSTOM_OP:
    fwd_op = torch.library.custom_op("flashattn::fwd", mutates_args=())(_fwd_body)
    bwd_op = torch.library.custom_op("flashattn::bwd", mutates_args=())(_bwd_body)
    fwd_ext_op = torch.library.custom_op("flashattn::fwd_ext", mutates_args=())(_fwd_ext_body)
    bwd_ext_op = torch.library.custom_op("flashattn::bwd_ext", mutates_args=())(_bwd_ext_body)

    @fwd_op.register_fake
    def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                  softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, rng):
        varlen = cu_seqlens_q is not None
        _kernels._rank_check(q, varlen)
        return (q.new_empty(q.shape),
                q.new_empty(_kernels._lse_shape(q, varlen), dtype=torch.float32))

    @bwd_op.register_fake
    def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                  max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                  softcap, alibi_slopes, rng, deterministic):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    @fwd_ext_op.register_fake
    def _fwd_ext_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                      alibi_slopes, rng, attn_bias, q_shift):
        return _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                         alibi_slopes, rng)

    @bwd_ext_op.register_fake
    def _bwd_ext_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                      softcap, alibi_slopes, rng, deterministic, attn_bias, q_shift, want_dbias):
        dbias = (attn_bias.new_empty(attn_bias.shape) if want_dbias and attn_bias is not None
                 else q.new_empty(0))
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dbias

    def fwd(*args):
        return fwd_op(*args) if is_compiling() else _kernels.forward(*args)

    def bwd(*args):
        return bwd_op(*args) if is_compiling() else _kernels.backward(*args)

    def fwd_ext(*args):
        return fwd_ext_op(*args) if is_compiling() else _kernels.forward(*args)

    def bwd_ext(*args):
        return bwd_ext_op(*args) if is_compiling() else _kernels.backward_ext(*args)
else:
    fwd_op = bwd_op = fwd_ext_op = bwd_ext_op = None
    try:
        from torch._dynamo import disable as _disable
    except ImportError:  # torch 1.13
        _disable = None
    fwd = _disable(_fwd_body) if _disable else _fwd_body
    bwd = _disable(_bwd_body) if _disable else _bwd_body
    fwd_ext = _disable(_fwd_ext_body) if _disable else _fwd_ext_body
    bwd_ext = _disable(_bwd_ext_body) if _disable else _bwd_ext_body
