"""flash_attn's public functions, with its names, arguments, defaults, shapes and returns.

Shapes (FlashAttention's layout; any strides with a contiguous last dimension):
  q (batch, seqlen_q, nheads, headdim), k/v (batch, seqlen_k, nheads_k, headdim),
  nheads % nheads_k == 0 (GQA/MQA); varlen: q (total_q, nheads, headdim), k/v (total_k, ...),
  cu_seqlens_* int32 (batch + 1,) on q's device.
Returns out shaped like q; with return_attn_probs=True, (out, softmax_lse, S_dmask): softmax_lse
is fp32 (batch, nheads, seqlen_q), or (nheads, total_q) for varlen; S_dmask, as in flash_attn,
only with dropout_p > 0 (else None): the probabilities (batch, nheads, seqlen_q rounded up to
128, seqlen_k rounded up to 128) in q's dtype, negative where dropout drops the element,
materialised in torch for tests (_attn_probs.py, docs/python.md).

flash_attn_with_kvcache (inference: a KV cache, dense or paged, with new keys / values appended
in place and rotary embeddings) is forward only and not differentiable, as flash_attn's.

attn_bias (this binding's, fa_params 0.4; CPU and CUDA tensors): a bias or mask of the
scores broadcastable to (batch, nheads, seqlen_q, seqlen_k) (each dimension that size or 1, any
strides; varlen: (batch, nheads, >= max_seqlen_q, >= max_seqlen_k), indexed from each sequence's
start). float32 / float16 / bfloat16 are added after the scale and softcap, bool / int8 hide the
keys where False / 0; differentiable (its gradient sums over the broadcast dimensions).

fp8 (FlashAttention-3's interface, fa_params 0.5; CPU tensors in this build, forward only):
flash_attn_func / flash_attn_varlen_func take fp8 e4m3 q, k, v - torch.float8_e4m3fn tensors, or
flashattn.e4m3(uint8 bytes) where torch has no float8 dtype (1.13) - with the keywords
q_descale / k_descale / v_descale (float32 (batch, nheads_k)) and return bfloat16 (out_dtype=
torch.float16: fp16). See _fp8.py and docs/api.md.

kernel_family is this binding's own: which of the library's kernel families a call would run.

Dropout draws its (seed, offset) pair from torch's default CPU generator, so torch.manual_seed
makes it reproducible and a CPU run reproduces a GPU run's mask; the backward reuses the pair.
"""
import torch

from . import _attn_probs, _fp8, _kernels, _kvcache, ops
from ._library import FlashAttnError
from ._params import check_options

FA_ERROR_DTYPE, FA_ERROR_SHAPE, FA_ERROR_UNSUPPORTED = 2, 4, 18
_RNG_HIGH = 2 ** 63 - 1  # seed and offset are uint64 in the C ABI; int64 tensors hold < 2^63


def draw_dropout_rng():
    """The (seed, offset) of one dropout call: int64 CPU tensor (2,), from torch's default
    generator (documented so that a test or a user can reproduce the mask)."""
    return torch.randint(0, _RNG_HIGH, (2,), dtype=torch.int64)


class FlashAttnFunc(torch.autograd.Function):
    """Differentiable attention over the library's forward and backward (ops.fwd / ops.bwd)."""

    @staticmethod
    def forward(ctx, q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                softcap, rng, deterministic):
        out, lse = ops.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                           alibi_slopes, rng)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, rng)
        ctx.config = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                      window_right, softcap, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_q, cu_k, alibi, rng = ctx.saved_tensors
        (max_q, max_k, dropout_p, scale, causal, wl, wr, softcap, deterministic) = ctx.config
        dq, dk, dv = ops.bwd(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, dropout_p, scale,
                             causal, wl, wr, softcap, alibi, rng, deterministic)
        return (dq, dk, dv) + (None,) * 13


class FlashAttnExtFunc(torch.autograd.Function):
    """FlashAttnFunc with fa_params 0.4's fields (ops.fwd_ext / ops.bwd_ext): an attention bias or
    mask (rank 4; differentiable when it is a float tensor that requires grad) and the queries'
    shift (q_shift)."""

    @staticmethod
    def forward(ctx, q, k, v, attn_bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                softcap, rng, deterministic, q_shift):
        out, lse = ops.fwd_ext(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p, softmax_scale, causal, window_left, window_right,
                               softcap, alibi_slopes, rng, attn_bias, q_shift)
        ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, rng,
                              attn_bias)
        ctx.config = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                      window_right, softcap, deterministic, q_shift)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, cu_q, cu_k, alibi, rng, bias = ctx.saved_tensors
        (max_q, max_k, dropout_p, scale, causal, wl, wr, softcap, deterministic,
         q_shift) = ctx.config
        want_dbias = bool(ctx.needs_input_grad[3])
        dq, dk, dv, dbias = ops.bwd_ext(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k,
                                        dropout_p, scale, causal, wl, wr, softcap, alibi, rng,
                                        deterministic, bias, q_shift, want_dbias)
        return (dq, dk, dv, dbias if want_dbias else None) + (None,) * 14


def _fp8_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                   scale, causal, window_left, window_right, softcap, alibi_slopes,
                   return_attn_probs, attn_bias, fp8):
    """The fp8 e4m3 forward (FlashAttention-3's descales); fp8: (q_descale, k_descale,
    v_descale, out_dtype)."""
    q_descale, k_descale, v_descale, out_dtype = fp8
    if not _fp8.is_fp8(q):
        raise FlashAttnError(FA_ERROR_DTYPE, "q_descale / k_descale / v_descale are given but "
                             f"q.dtype={q.dtype}: descales scale fp8 e4m3 inputs only")
    for what, bad in (("dropout_p > 0", dropout_p > 0), ("attn_bias", attn_bias is not None)):
        if bad:
            raise FlashAttnError(FA_ERROR_UNSUPPORTED, f"{what} with fp8 e4m3 inputs is not "
                                 "supported: the fp8 path is an inference forward")
    if torch.is_grad_enabled() and any(getattr(t, "requires_grad", False)
                                       for t in (q, k, v, q_descale, k_descale, v_descale)):
        raise FlashAttnError(FA_ERROR_UNSUPPORTED, "fp8 e4m3 inputs are forward only: no "
                             "gradient flows into q, k, v or the descales (call under "
                             "torch.no_grad())")
    out, lse = _fp8.forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            scale, bool(causal), window_left, window_right, float(softcap),
                            alibi_slopes, q_descale, k_descale, v_descale,
                            torch.bfloat16 if out_dtype is None else out_dtype,
                            return_attn_probs)
    return (out, lse, None) if return_attn_probs else out


def _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
               softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
               return_attn_probs, attn_bias=None, q_shift=0, fp8=None):
    # softmax_scale None -> 0.0, the C ABI's "1/sqrt(headdim)"; the same value reaches backward.
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    window_left, window_right = window_size
    window_left, window_right = int(window_left), int(window_right)
    # Before the custom op: torch's dispatcher turns an int past int64 into its own RuntimeError.
    check_options(max_seqlen_q, max_seqlen_k, window_left, window_right)
    if (fp8 is not None and any(x is not None for x in fp8)) or _fp8.is_fp8(q) or \
            _fp8.is_fp8(k) or _fp8.is_fp8(v):
        return _fp8_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              dropout_p, scale, causal, window_left, window_right, softcap,
                              alibi_slopes, return_attn_probs, attn_bias,
                              fp8 if fp8 is not None else (None,) * 4)
    rng = draw_dropout_rng() if dropout_p > 0 else None
    args = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, float(dropout_p), scale,
            bool(causal), window_left, window_right, float(softcap))
    if attn_bias is not None or q_shift:
        if return_attn_probs and dropout_p > 0:
            raise FlashAttnError(FA_ERROR_UNSUPPORTED, "return_attn_probs with dropout_p > 0 and "
                                 "attn_bias: S_dmask does not include the bias")
        bias = None if attn_bias is None else _kernels.bias_view(attn_bias)
        grads = (q.requires_grad or k.requires_grad or v.requires_grad or
                 (bias is not None and bias.requires_grad))
        if torch.is_grad_enabled() and grads:
            out, lse = FlashAttnExtFunc.apply(q, k, v, bias, alibi_slopes, *args, rng,
                                              bool(deterministic), int(q_shift))
        else:
            out, lse = ops.fwd_ext(q, k, v, *args, alibi_slopes, rng, bias, int(q_shift))
        return (out, lse, None) if return_attn_probs else out
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = FlashAttnFunc.apply(q, k, v, alibi_slopes, *args, rng, bool(deterministic))
    else:  # inference: skip autograd's bookkeeping (part of the overhead budget)
        out, lse = ops.fwd(q, k, v, *args, alibi_slopes, rng)
    if not return_attn_probs:
        return out
    # flash_attn returns S_dmask only with dropout (return_softmax and dropout_p > 0); a
    # materialised matrix is test-only cost (docs/python.md), so a caller asking for the LSE
    # alone never pays for it.
    s_dmask = None
    if dropout_p > 0:
        with torch.no_grad():
            s_dmask = _attn_probs.s_dmask(q.detach(), k.detach(), cu_seqlens_q, cu_seqlens_k,
                                          max_seqlen_q, max_seqlen_k, float(dropout_p), scale,
                                          bool(causal), window_left, window_right,
                                          float(softcap), alibi_slopes, rng)
    return out, lse, s_dmask


def _split(packed, dim, count, name, layout):
    if packed.dim() <= dim or packed.shape[dim] != count:
        got = tuple(packed.shape)
        raise FlashAttnError(FA_ERROR_SHAPE, f"{name}.shape={got} must be {layout}")
    return packed.unbind(dim)  # views: no copy, the library takes their strides


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, *, attn_bias=None, q_descale=None, k_descale=None,
                    v_descale=None, out_dtype=None):
    """Attention over q (batch, seqlen_q, nheads, headdim), k/v (batch, seqlen_k, nheads_k,
    headdim). causal and window_size=(left, right) are bottom-right aligned (query i sits at key
    position i + seqlen_k - seqlen_q; -1 = unbounded). alibi_slopes: fp32 (nheads,) or
    (batch, nheads). attn_bias: see the module's docstring. fp8 e4m3 q, k, v with q_descale /
    k_descale / v_descale (float32 (batch, nheads_k), FlashAttention-3's) and out_dtype
    (bfloat16 by default, or float16): see the module's docstring. Returns out, or
    (out, softmax_lse, None) with return_attn_probs."""
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size,
                      softcap, alibi_slopes, deterministic, return_attn_probs, attn_bias,
                      fp8=(q_descale, k_descale, v_descale, out_dtype))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *, attn_bias=None):
    """flash_attn_func with qkv (batch, seqlen, 3, nheads, headdim); the gradient comes back
    into qkv."""
    q, k, v = _split(qkv, 2, 3, "qkv", "(batch, seqlen, 3, nheads, headdim)")
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size,
                      softcap, alibi_slopes, deterministic, return_attn_probs, attn_bias)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False, *, attn_bias=None):
    """flash_attn_func with kv (batch, seqlen_k, 2, nheads_k, headdim)."""
    k, v = _split(kv, 2, 2, "kv", "(batch, seqlen_k, 2, nheads_k, headdim)")
    return _attention(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size,
                      softcap, alibi_slopes, deterministic, return_attn_probs, attn_bias)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, attn_bias=None,
                           q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    """Packed variable-length batch: q (total_q, nheads, headdim), k/v (total_k, nheads_k,
    headdim), cu_seqlens_q/k int32 (batch + 1,) prefix sums. With block_table (batch,
    max_num_blocks) int32, k/v are a paged cache (num_blocks, page_block_size, nheads_k, headdim)
    and sequence b's keys are the first cu_seqlens_k[b + 1] - cu_seqlens_k[b] rows of its pages
    (chunked prefill; forward only, no dropout or attn_bias). fp8 e4m3 q, k, v and the descales
    (float32 (batch, nheads_k)) as flash_attn_func's (not with block_table in this binding)."""
    if block_table is not None:
        if _fp8.is_fp8(q) or q_descale is not None:
            raise FlashAttnError(FA_ERROR_UNSUPPORTED, "block_table with fp8 e4m3 inputs is not "
                                 "supported by this binding yet")
        if dropout_p > 0 or attn_bias is not None:
            raise FlashAttnError(FA_ERROR_UNSUPPORTED, "block_table with dropout_p > 0 or attn_bias "
                                 "is not supported (a paged cache is an inference path)")
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            raise FlashAttnError(FA_ERROR_UNSUPPORTED, "block_table is forward-only: no gradient "
                                 "flows into a paged cache (call under torch.no_grad())")
        window_left, window_right = (int(w) for w in window_size)
        out, lse = _kvcache.paged_varlen_forward(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table,
            softmax_scale, causal, window_left, window_right, float(softcap), alibi_slopes)
        return (out, lse, None) if return_attn_probs else out
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                      dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, attn_bias,
                      fp8=(q_descale, k_descale, v_descale, out_dtype))


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, attn_bias=None):
    """Varlen with qkv (total, 3, nheads, headdim); one cu_seqlens for queries and keys."""
    q, k, v = _split(qkv, 1, 3, "qkv", "(total, 3, nheads, headdim)")
    return _attention(q, k, v, cu_seqlens, cu_seqlens, int(max_seqlen), int(max_seqlen),
                      dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, attn_bias)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False, *,
                                    attn_bias=None):
    """Varlen with kv (total_k, 2, nheads_k, headdim)."""
    k, v = _split(kv, 1, 2, "kv", "(total_k, 2, nheads_k, headdim)")
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                      dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, attn_bias)


def kernel_family(q, k, v, *, backward=False, cu_seqlens_q=None, cu_seqlens_k=None,
                  max_seqlen_q=None, max_seqlen_k=None, dropout_p=0.0, softmax_scale=None,
                  causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                  deterministic=False):
    """The library's kernel family that flash_attn_func (flash_attn_varlen_func with cu_seqlens)
    would run on these tensors and options - its forward, or with backward=True its backward:
    "cuda-sm80" or "cpu-flash" (the library's fa_select_kernel; docs/api.md lists the families).
    The arguments are those functions' (max_seqlen_q / _k required with cu_seqlens); the call is
    validated as they validate it, and FlashAttnError raised where they would raise it. Nothing
    is computed: the query costs about one validation (the calls themselves never make it)."""
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    window_left, window_right = window_size
    window_left, window_right = int(window_left), int(window_right)
    max_seqlen_q = 0 if max_seqlen_q is None else int(max_seqlen_q)
    max_seqlen_k = 0 if max_seqlen_k is None else int(max_seqlen_k)
    check_options(max_seqlen_q, max_seqlen_k, window_left, window_right)
    return _kernels.kernel_family(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  float(dropout_p), scale, bool(causal), window_left,
                                  window_right, float(softcap), alibi_slopes,
                                  bool(deterministic), bool(backward))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    """flash_attn's flash_attn_with_kvcache: attention of q against a KV cache, forward only.

    q (batch, seqlen_q, nheads, headdim); k_cache / v_cache (batch_cache, seqlen_cache,
    nheads_k, headdim), or paged (num_blocks, page_block_size, nheads_k, headdim) with an int32
    block_table (batch, max_num_blocks_per_seq) (any page size). With k, v
    (batch, seqlen_new, nheads_k, headdim) the caches are updated IN PLACE at cache_seqlens
    before attending (cache_seqlens is then required and is not itself advanced); rotary_cos /
    rotary_sin (seqlen_ro, rotary_dim / 2) rotate k at positions cache_seqlens + j and q at
    cache_seqlens + i (causal or windowed) or cache_seqlens, interleaved (GPT-J) or not
    (GPT-NeoX). cache_seqlens: int32 (batch,) or an int; cache_batch_idx: int32 (batch,) rows of
    a dense cache; cache_leftpad: int32 (batch,) where each entry's keys start. num_splits: 0
    heuristic, 1 none, n > 1 forced split-KV. Returns out (like q), and with
    return_softmax_lse=True (out, softmax_lse (batch, nheads, seqlen_q) fp32). Errors name the
    library's fields: k_cache is `k`, k is `k_new` (docs/api.md). CUDA tensors: the library
    refuses the KV-cache fields for now (FlashAttnError naming the feature).

    fp8 e4m3 (this binding's keywords, FlashAttention-3's names; CPU in this build): q, the caches
    and k / v as torch.float8_e4m3fn or flashattn.e4m3(uint8 bytes), all of them, with
    q_descale / k_descale / v_descale float32 (batch, nheads_k) and out_dtype (bfloat16 by
    default, or float16); new keys are appended bit for bit; no rotary."""
    window_left, window_right = window_size
    check_options(None, None, window_left, window_right)
    fp8 = None
    if (_fp8.is_fp8(q) or _fp8.is_fp8(k_cache) or q_descale is not None or
            k_descale is not None or v_descale is not None):
        for t, name in ((q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache"), (k, "k"), (v, "v")):
            if t is not None and not _fp8.is_fp8(t):
                raise FlashAttnError(FA_ERROR_DTYPE, f"{name} is not fp8 e4m3 while q, the caches "
                                     "or the descales are: all of q, k_cache, v_cache, k, v must "
                                     "be (torch.float8_e4m3fn or flashattn.e4m3(uint8 bytes))")
        if out_dtype not in (None, torch.bfloat16, torch.float16):
            raise FlashAttnError(FA_ERROR_DTYPE, f"out_dtype={out_dtype} must be torch.bfloat16 "
                                 "or torch.float16 with fp8 inputs")
        fp8 = (q_descale, k_descale, v_descale,
               torch.bfloat16 if out_dtype is None else out_dtype)
    out, lse = _kvcache.forward(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                cache_batch_idx, cache_leftpad, block_table, softmax_scale,
                                causal, window_left, window_right, softcap, rotary_interleaved,
                                alibi_slopes, num_splits, return_softmax_lse, fp8)
    return (out, lse) if return_softmax_lse else out
