"""flash_attn_with_kvcache over the C ABI (fa_params 0.3): one fa_forward call that appends the
new keys and values into the caller's cache in place, applies rotary embeddings, and attends.

The caches are written in place, so they are never copied: a cache whose last dimension is not
contiguous is the library's to refuse. q and the new keys / values are copied only as the other
calls copy their inputs (a non-contiguous last dimension). CPU tensors run on the CPU backend,
CUDA tensors on the library's cuda-kvcache family; with CUDA tensors the index arrays
(cache_seqlens, block_table, ...) stay on the device and are never read on the host, so the call
never synchronises (CUDA-graph capturable).
"""
import ctypes

import torch

from . import _library
from ._kernels import _call, _device_of, _usable
from ._params import (FA_DTYPE_FP8_E4M3, FA_ERROR_DTYPE, FA_ERROR_SIZE, FaParamsV3, FaParamsV5,
                      put, put_options)

FA_ERROR_RANK = 3


def _index(t, name, batch, device):
    """An int32 (batch) index tensor as the library takes it: an int is every entry's value."""
    if isinstance(t, int):
        return torch.full((batch,), t, dtype=torch.int32, device=device)
    if t.dtype != torch.int32:
        raise _library.FlashAttnError(FA_ERROR_DTYPE, f"{name}.dtype={t.dtype} must be "
                                      "torch.int32")
    return t.contiguous()


def forward(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
            cache_leftpad, block_table, softmax_scale, causal, window_left, window_right, softcap,
            rotary_interleaved, alibi_slopes, num_splits, want_lse, fp8=None):
    """(out, lse or None); k_cache / v_cache updated in place when k, v are given. fp8: None, or
    (q_descale, k_descale, v_descale, out_dtype) for fp8 e4m3 q, caches and new keys (the 0.5
    layout; the bytes of e4m3 markers are what the library reads and writes)."""
    from . import _fp8  # late: _fp8 imports _kernels, as this module does
    lib = _library.load()
    code = None
    if fp8 is not None:
        code = FA_DTYPE_FP8_E4M3
        q, k_cache, v_cache, k, v = (None if t is None else _fp8._raw(t)
                                     for t in (q, k_cache, v_cache, k, v))
    if q.dim() != 4:
        raise _library.FlashAttnError(FA_ERROR_RANK, f"q.dim()={q.dim()} must be 4: "
                                      "(batch, seqlen_q, nheads, headdim)")
    cuda = _device_of(q, "q")
    batch = q.shape[0]
    q = _usable(q, "q", cuda)
    keep = [q, k_cache, v_cache]  # everything the C call reads stays alive until it returns
    layout = FaParamsV3 if fp8 is None else FaParamsV5
    p = layout()
    p.struct_size = ctypes.sizeof(layout)
    out_dtype = q.dtype if fp8 is None else fp8[3]
    out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    put(p, "q", q, "q", code)
    put(p, "k", k_cache, "k_cache", code)
    put(p, "v", v_cache, "v_cache", code)
    put(p, "out", out, "out")
    lse = None
    if want_lse:
        lse = torch.empty((batch, q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
        put(p, "lse", lse, "softmax_lse")
    for field, t, name in (("k_new", k, "k"), ("v_new", v, "v"), ("rotary_cos", rotary_cos,
                           "rotary_cos"), ("rotary_sin", rotary_sin, "rotary_sin"),
                           ("alibi_slopes", alibi_slopes, "alibi_slopes")):
        if t is not None:
            t = _usable(t, name, cuda)
            keep.append(t)
            put(p, field, t, name, code if field in ("k_new", "v_new") else None)
    if fp8 is not None:
        for field, t in zip(("q_descale", "k_descale", "v_descale"), fp8[:3]):
            if t is not None:
                t = _usable(t, field, cuda)
                keep.append(t)
                put(p, field, t, field)
    for field, t, name in (("cache_seqlens", cache_seqlens, "cache_seqlens"),
                           ("cache_batch_idx", cache_batch_idx, "cache_batch_idx"),
                           ("cache_leftpad", cache_leftpad, "cache_leftpad"),
                           ("block_table", block_table, "block_table")):
        if t is not None:
            t = _index(t, name, batch, q.device)
            keep.append(t)
            put(p, field, t, name)
    put_options(p, 0, 0, 0.0 if softmax_scale is None else softmax_scale, bool(causal),
                window_left, window_right, softcap)
    p.rotary_interleaved = 1 if rotary_interleaved else 0
    if not -(1 << 31) <= num_splits < (1 << 31):
        raise _library.FlashAttnError(FA_ERROR_SIZE, f"num_splits={num_splits} does not fit the "
                                      "library's int32 field")
    p.num_splits = num_splits
    _call(lib, p, lib.fa_forward_workspace_size, lib.fa_forward, "flashattn with_kvcache", cuda,
          q.get_device())
    del keep
    return out, lse


def paged_varlen_forward(q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, block_table, softmax_scale, causal, window_left,
                         window_right, softcap, alibi_slopes):
    """flash_attn_varlen_func with block_table (chunked prefill against a paged cache), forward
    only: q (total_q, nheads, headdim) packed by cu_seqlens_q; k_cache / v_cache (num_blocks,
    page_block_size, nheads_k, headdim); sequence b's keys are the first
    cu_seqlens_k[b + 1] - cu_seqlens_k[b] rows of its pages block_table[b]. (out, lse)."""
    lib = _library.load()
    if q.dim() != 3:
        raise _library.FlashAttnError(FA_ERROR_RANK, f"q.dim()={q.dim()} must be 3: "
                                      "(total_q, nheads, headdim)")
    cuda = _device_of(q, "q")
    q = _usable(q, "q", cuda)
    cu_q = _usable(cu_seqlens_q, "cu_seqlens_q", cuda)
    cu_k = _usable(cu_seqlens_k, "cu_seqlens_k", cuda)
    table = _usable(block_table, "block_table", cuda)
    keep = [q, k_cache, v_cache, cu_q, cu_k, table]
    p = FaParamsV3()
    p.struct_size = ctypes.sizeof(FaParamsV3)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    put(p, "q", q, "q")
    put(p, "k", k_cache, "k_cache")
    put(p, "v", v_cache, "v_cache")
    put(p, "out", out, "out")
    put(p, "lse", lse, "softmax_lse")
    put(p, "cu_seqlens_q", cu_q, "cu_seqlens_q")
    put(p, "cu_seqlens_k", cu_k, "cu_seqlens_k")
    put(p, "block_table", table, "block_table")
    if alibi_slopes is not None:
        alibi_slopes = _usable(alibi_slopes, "alibi_slopes", cuda)
        keep.append(alibi_slopes)
        put(p, "alibi_slopes", alibi_slopes, "alibi_slopes")
    put_options(p, int(max_seqlen_q), int(max_seqlen_k),
                0.0 if softmax_scale is None else softmax_scale, bool(causal), window_left,
                window_right, softcap)
    _call(lib, p, lib.fa_forward_workspace_size, lib.fa_forward, "flashattn varlen (paged)", cuda,
          q.get_device())
    del keep
    return out, lse
