"""Eager forward and backward: torch tensors in, one C ABI call, torch tensors out.

These are the bodies of the custom ops (ops.py). Everything that reads a data pointer lives here,
inside the op, because torch.compile cannot trace data_ptr(); the op is opaque to it.
Outputs and workspace are allocated through torch (its caching allocator on the GPU) in the memory
of q's device; CUDA work is queued on torch's current stream of that device.
"""
import ctypes
import struct
import threading

import torch

from . import _library
from ._params import (DTYPE_CODES, FA_DTYPE_FP32, FA_ERROR_DEVICE, FA_ERROR_RANK,
                      FA_ERROR_WORKSPACE, OFFSET, OPTIONS, FaParams, FaParamsV4, check_options,
                      put, put_options, put_run, run_struct, tensor_values)

# CPU workspaces up to this size are kept per thread and reused: allocating and first-touching
# ~50 KB per call costs microseconds of the overhead budget. Larger ones (long-sequence backward)
# are allocated per call so that a process does not hold them.
_CPU_WORKSPACE_CACHE_BYTES = 1 << 20
_tls = threading.local()

# CUDA workspaces up to this size are kept per (device, stream) and handed to every call on that
# stream: work on one stream runs in order, so a block reused only there is never in use twice at
# once. The sm90 forward asks for 16 bytes (its tile scheduler's counter) on most calls; without
# the cached block each of them went out, was refused, queried its size, allocated and went out
# again (~50 us). Larger workspaces (the backward's dq accumulator, long split-KV decodes) come
# from torch's caching allocator per call. Under CUDA graph capture no cached block is used: a
# captured graph keeps the addresses it was given, and its replays may run beside eager calls.
_CUDA_WORKSPACE_CACHE_BYTES = 1 << 16
_CUDA_WORKSPACE_STREAMS = 64  # cached streams at most; past it the cache starts again
_cuda_workspaces = {}  # (device index, raw stream) -> uint8 tensor on that device

try:
    _capturing = torch._C._cuda_isCurrentStreamCapturing
except AttributeError:
    def _capturing():
        return torch.cuda.is_current_stream_capturing()

try:  # the raw stream handle without building a torch.cuda.Stream object (saves ~2 us a call)
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _device_of(t, name):
    if t.is_cuda:
        return True
    if t.is_cpu:
        return False
    raise _library.FlashAttnError(
        FA_ERROR_DEVICE, f"{name} is on device '{t.device}'; flashattn runs CPU and CUDA tensors")


def _usable(t, name, cuda):
    """t as the library accepts it: the same tensor when it can (any strides), else a copy.

    The C ABI takes every stride except a non-contiguous last dimension. The CUDA kernels also
    need 16-byte aligned data and strides in multiples of 8 elements; a view breaking that is
    copied when a copy can satisfy it (head_dim a multiple of 8), otherwise the library's own
    message explains the rule."""
    if _device_of(t, name) != cuda:
        return t  # the library reports the device mismatch with both devices named
    if t.dim() == 0 or t.stride(-1) != 1:
        return t.contiguous()
    if cuda and t.shape[-1] % 8 == 0:
        low = t.data_ptr() & 15  # the OR of the strides has a low bit set iff one stride does
        for s in t.stride()[:-1]:
            low |= s & 7
        if low:
            return t.clone(memory_format=torch.contiguous_format)
    return t


def _rank_check(q, varlen):
    want = 3 if varlen else 4
    if q.dim() != want:
        layout = "(total_q, heads_q, head_dim)" if varlen else "(batch, seqlen_q, heads_q, head_dim)"
        raise _library.FlashAttnError(FA_ERROR_RANK, f"q.dim()={q.dim()} must be {want}: {layout}")


def _lse_shape(q, varlen):
    # FlashAttention's convention: (batch, heads, seqlen_q), or (heads, total_q) when packed.
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])


_CONTIGUOUS = torch.contiguous_format
_FWD_NAMES = ("q", "k", "v", "out", "lse")
_BWD_NAMES = _FWD_NAMES + ("dout", "dq", "dk", "dv")
# q ... dv are consecutive fa_tensor fields: a call packs them with one pack_into.
_FWD_RUN, _BWD_RUN, _Q = run_struct(len(_FWD_NAMES)), run_struct(len(_BWD_NAMES)), OFFSET["q"]
_STRUCT_SIZE = ctypes.sizeof(FaParams)
_STRUCT_SIZE_V4 = ctypes.sizeof(FaParamsV4)
_OPTIONS_AT = OFFSET["max_seqlen_q"]


def _operand(t, name, cuda):
    """(t, its fa_tensor values) for a rank-3 or rank-4 input the library takes as it is, each
    torch attribute read once (the fast path of _usable + put). Otherwise (_usable(t, name, cuda),
    None), which sends the call down put_run's general path: a copy, a device mismatch, or a
    dtype, rank or empty tensor for put() or the library to report."""
    if cuda:
        if not t.is_cuda:
            return _usable(t, name, cuda), None
        dev, index = 1, t.get_device()
    elif t.is_cpu:
        dev = index = 0
    else:
        return _usable(t, name, cuda), None
    code = DTYPE_CODES.get(t.dtype)
    shape = t.shape
    rank = len(shape)
    ptr = t.data_ptr()
    if code is None or ptr == 0 or (rank != 4 and rank != 3):
        return _usable(t, name, cuda), None
    # A copy for a non-contiguous last dimension, and _usable's CUDA alignment rule (the OR of
    # the other strides has a low bit set iff one of them does).
    if rank == 4:
        s0, s1, s2, s3 = shape
        t0, t1, t2, t3 = t.stride()
        if t3 != 1 or (cuda and s3 % 8 == 0 and ((ptr & 15) or (t0 | t1 | t2) & 7)):
            return _usable(t, name, cuda), None
        return t, (ptr, code, 4, s0, s1, s2, s3, t0, t1, t2, 1, dev, index)
    s0, s1, s2 = shape
    t0, t1, t2 = t.stride()
    if t2 != 1 or (cuda and s2 % 8 == 0 and ((ptr & 15) or (t0 | t1) & 7)):
        return _usable(t, name, cuda), None
    return t, (ptr, code, 3, s0, s1, s2, 0, t0, t1, 1, 0, dev, index)


def _empty_like(t, vals):
    """(a contiguous empty tensor like t, its fa_tensor values), t of rank 3 or 4 with values
    vals from _operand: the strides are computed from the shape, not read back from torch. The
    values' data is 0 when the tensor has none (t has no elements)."""
    _, code, rank, s0, s1, s2, s3, t0, t1, t2, t3, dev, index = vals
    strides = (s1 * s2 * s3, s2 * s3, s3, 1) if rank == 4 else (s1 * s2, s2, 1, 0)
    # A contiguous t: empty_like keeps its strides, and skips parsing memory_format (~0.2 us).
    if strides == (t0, t1, t2, t3):
        new = torch.empty_like(t)
    else:
        new = torch.empty_like(t, memory_format=_CONTIGUOUS)
    return new, (new.data_ptr(), code, rank, s0, s1, s2, s3, *strides, dev, index)


def _pack_forward(p, q, qv, kv, vv, varlen):
    """Allocates out and lse for inputs with values qv, kv, vv from _operand and writes q ... lse
    into p: (out, lse), or (None, None) when an output has no data (q has no elements)."""
    _, code, rank, s0, s1, s2, s3, t0, t1, t2, t3, dev, index = qv
    # out as _empty_like makes it, inline (the call and its tuples cost ~0.4 us here). lse: fp32,
    # contiguous, in _lse_shape's layout; sizes as separate arguments, since a shape tuple costs
    # ~0.8 us more on torch 2.x.
    if varlen:  # q (total, heads, dim) -> lse (heads, total)
        strides = (s1 * s2, s2, 1, 0)
        lse = q.new_empty(s1, s0, dtype=torch.float32)
        lse_dims = (2, s1, s0, 0, 0, s0, 1, 0, 0)
    else:  # q (batch, seqlen, heads, dim) -> lse (batch, heads, seqlen)
        strides = (s1 * s2 * s3, s2 * s3, s3, 1)
        lse = q.new_empty(s0, s2, s1, dtype=torch.float32)
        lse_dims = (3, s0, s2, s1, 0, s2 * s1, s1, 1, 0)
    if strides == (t0, t1, t2, t3):
        out = torch.empty_like(q)
    else:
        out = torch.empty_like(q, memory_format=_CONTIGUOUS)
    out_ptr, lse_ptr = out.data_ptr(), lse.data_ptr()
    if not (out_ptr and lse_ptr):
        return None, None
    _FWD_RUN.pack_into(p, _Q, *qv, *kv, *vv, out_ptr, code, rank, s0, s1, s2, s3, *strides, dev,
                       index, lse_ptr, FA_DTYPE_FP32, *lse_dims, dev, index)
    return out, lse


def _pack_backward(p, q, k, v, out, lse, dout, qv, kv, vv, ov, dov):
    """Allocates dq, dk, dv and writes q ... dv into p: (dq, dk, dv)."""
    if qv is None or kv is None or vv is None:
        dq, dk, dv = (torch.empty_like(t, memory_format=_CONTIGUOUS) for t in (q, k, v))
        put_run(p, "q", (q, k, v, out, lse, dout, dq, dk, dv), _BWD_NAMES)
        return dq, dk, dv
    dq, dqv = _empty_like(q, qv)
    dk, dkv = _empty_like(k, kv)
    dv, dvv = _empty_like(v, vv)
    lv = tensor_values(lse)  # as it is: the library takes any lse strides
    if ov is not None and lv is not None and dov is not None and dqv[0] and dkv[0] and dvv[0]:
        _BWD_RUN.pack_into(p, _Q, *qv, *kv, *vv, *ov, *lv, *dov, *dqv, *dkv, *dvv)
    else:
        put_run(p, "q", (q, k, v, out, lse, dout, dq, dk, dv), _BWD_NAMES)
    return dq, dk, dv


def _put_extras(p, cu_seqlens_q, cu_seqlens_k, alibi_slopes, dropout_p, rng):
    """The optional inputs: packed batches, ALiBi, dropout."""
    if cu_seqlens_q is not None:
        put(p, "cu_seqlens_q", cu_seqlens_q, "cu_seqlens_q")
    if cu_seqlens_k is not None:
        put(p, "cu_seqlens_k", cu_seqlens_k, "cu_seqlens_k")
    if alibi_slopes is not None:
        put(p, "alibi_slopes", alibi_slopes, "alibi_slopes")
    if dropout_p:
        p.dropout_p = dropout_p
    if rng is not None:
        p.seed, p.offset = rng.tolist()


def _call(lib, p, query, entry, what, cuda, index):
    """Runs entry (fa_forward / fa_backward) with a workspace; index: the CUDA device (q's).

    CUDA: optimistic - the call goes out with the stream's cached block (or none) and the library
    refuses it with FA_ERROR_WORKSPACE, before touching any output, when it needs more; only then
    is the size queried and a block allocated (and cached when small). That spares the common call
    a second validation pass. CPU: the size is queried first, because the CPU backend runs with a
    smaller workspace than it asks for by using fewer threads - handing it whatever block is at
    hand would silently cost parallelism."""
    pref = ctypes.byref(p)
    if cuda:
        _cuda_call(lib, pref, query, entry, what, index)
        return
    size = ctypes.c_size_t()
    _library.check(lib, query(pref, ctypes.byref(size)), what)
    nbytes = size.value
    if nbytes <= _CPU_WORKSPACE_CACHE_BYTES:
        ws = getattr(_tls, "workspace", None)
        if ws is None:
            ws = _tls.workspace = torch.empty(_CPU_WORKSPACE_CACHE_BYTES, dtype=torch.uint8)
    else:
        ws = torch.empty(nbytes, dtype=torch.uint8)
    _library.check(lib, entry(pref, ws.data_ptr() if nbytes else None, nbytes, None), what)


def _cuda_call(lib, pref, query, entry, what, index):
    """_call on CUDA: the cached block first (see _CUDA_WORKSPACE_CACHE_BYTES), then the size."""
    stream = _raw_stream(index)
    key = (index, stream)
    cached = None if _capturing() else _cuda_workspaces.get(key)
    if cached is None:
        status = entry(pref, None, 0, stream)
    else:
        status = entry(pref, cached.data_ptr(), _CUDA_WORKSPACE_CACHE_BYTES, stream)
    if status != FA_ERROR_WORKSPACE:
        if status:
            _library.check(lib, status, what)
        return
    size = ctypes.c_size_t()
    _library.check(lib, query(pref, ctypes.byref(size)), what)
    nbytes = size.value
    device = torch.device("cuda", index)
    if nbytes <= _CUDA_WORKSPACE_CACHE_BYTES and cached is None and not _capturing():
        # uint8 so the byte count is the element count; allocated on (and only ever used on)
        # this stream, so the caching allocator's stream order covers its reuse after a reset.
        if len(_cuda_workspaces) >= _CUDA_WORKSPACE_STREAMS:
            _cuda_workspaces.clear()
        ws = _cuda_workspaces[key] = torch.empty(_CUDA_WORKSPACE_CACHE_BYTES, dtype=torch.uint8,
                                                 device=device)
        nbytes = _CUDA_WORKSPACE_CACHE_BYTES
    else:
        # The block may be freed right after the launch: the caching allocator reuses it only in
        # stream order.
        ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
    _library.check(lib, entry(pref, ws.data_ptr(), nbytes, stream), what)


def _new_params(ext=False):
    """Zeroed fa_params (no cu_seqlens, alibi or dropout; AUTO backend): the 0.2 layout, or with
    ext the 0.4 one (an attention bias, a query shift)."""
    p = FaParamsV4() if ext else FaParams()
    p.struct_size = _STRUCT_SIZE_V4 if ext else _STRUCT_SIZE  # the windows come with put_options
    return p


def bias_view(attn_bias, name="attn_bias"):
    """attn_bias as the library's rank-4 view: leading dimensions of size 1 prepended (a view, no
    copy). Broadcasting itself is the library's (each dimension 1 or full, any strides)."""
    dims = attn_bias.dim()
    if dims > 4:
        raise _library.FlashAttnError(FA_ERROR_RANK, f"{name}.dim()={dims} must be <= 4: "
                                      "broadcastable to (batch, heads, seqlen_q, seqlen_k)")
    return attn_bias[(None,) * (4 - dims)] if dims < 4 else attn_bias


def _put_ext(p, attn_bias, q_shift):
    """0.4's bias (rank 4, see bias_view) and 0.2's q_shift into a FaParamsV4."""
    if attn_bias is not None:
        put(p, "attn_bias", attn_bias, "attn_bias")
    if q_shift:
        p.q_shift = q_shift


def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, rng,
            attn_bias=None, q_shift=0):
    """(out, lse): out like q (contiguous), lse fp32 in FlashAttention's layout. attn_bias: a
    rank-4 bias or mask (bias_view), q_shift: fa_params' (both through the 0.4 layout)."""
    lib = _library.load()
    varlen = cu_seqlens_q is not None
    _rank_check(q, varlen)
    cuda = _device_of(q, "q")
    q, qv = _operand(q, "q", cuda)
    k, kv = _operand(k, "k", cuda)
    v, vv = _operand(v, "v", cuda)
    # fa_params inline (as _new_params and put_options make it): ~0.2 us of calls saved.
    ext = attn_bias is not None or q_shift
    if ext:
        p = FaParamsV4()
        p.struct_size = _STRUCT_SIZE_V4
    else:
        p = FaParams()
        p.struct_size = _STRUCT_SIZE
    out = None
    if qv is not None and kv is not None and vv is not None:
        out, lse = _pack_forward(p, q, qv, kv, vv, varlen)
    if out is None:  # the general path: put() and the library judge the unusual input
        out = torch.empty_like(q, memory_format=_CONTIGUOUS)
        lse = q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)
        put_run(p, "q", (q, k, v, out, lse), _FWD_NAMES)
    try:  # put_options inline; an exception costs nothing until raised
        OPTIONS.pack_into(p, _OPTIONS_AT, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                          window_left, window_right, softcap)
    except struct.error:
        check_options(max_seqlen_q, max_seqlen_k, window_left, window_right)
        raise
    if (varlen or cu_seqlens_k is not None or alibi_slopes is not None or dropout_p
            or rng is not None):
        _put_extras(p, cu_seqlens_q, cu_seqlens_k, alibi_slopes, dropout_p, rng)
    if ext:
        _put_ext(p, attn_bias, q_shift)
    _call(lib, p, lib.fa_forward_workspace_size, lib.fa_forward, "flashattn forward", cuda,
          q.get_device())
    return out, lse


def backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
             rng, deterministic):
    """(dq, dk, dv), contiguous, shaped like q, k, v."""
    return _backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                     softcap, alibi_slopes, rng, deterministic, None, 0, False)[:3]


def backward_ext(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                 alibi_slopes, rng, deterministic, attn_bias, q_shift, want_dbias):
    """backward with 0.4's fields: (dq, dk, dv, dbias), dbias shaped like the rank-4 attn_bias
    (contiguous, its dtype) when want_dbias, else an empty tensor (nothing computed)."""
    return _backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                     softcap, alibi_slopes, rng, deterministic, attn_bias, q_shift, want_dbias)


def _backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
              dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
              rng, deterministic, attn_bias, q_shift, want_dbias):
    lib = _library.load()
    varlen = cu_seqlens_q is not None
    _rank_check(q, varlen)
    cuda = _device_of(q, "q")
    q, qv = _operand(q, "q", cuda)
    k, kv = _operand(k, "k", cuda)
    v, vv = _operand(v, "v", cuda)
    dout, dov = _operand(dout, "dout", cuda)
    out, ov = _operand(out, "out", cuda)
    ext = attn_bias is not None or q_shift
    p = _new_params(ext)
    dq, dk, dv = _pack_backward(p, q, k, v, out, lse, dout, qv, kv, vv, ov, dov)
    put_options(p, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right,
                softcap)
    _put_extras(p, cu_seqlens_q, cu_seqlens_k, alibi_slopes, dropout_p, rng)
    p.deterministic = deterministic
    dbias = None
    if ext:
        _put_ext(p, attn_bias, q_shift)
        if want_dbias:
            dbias = torch.empty(attn_bias.shape, dtype=attn_bias.dtype, device=attn_bias.device)
            put(p, "dbias", dbias, "dbias")
    _call(lib, p, lib.fa_backward_workspace_size, lib.fa_backward, "flashattn backward", cuda,
          q.get_device())
    if dbias is None:
        dbias = q.new_empty(0)
    return dq, dk, dv, dbias


def kernel_family(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                  softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
                  deterministic, backward):
    """The kernel family (fa_select_kernel) that forward(...) would run on these inputs and
    options, or backward(...) with backward=True: "cpu-flash", "cuda-sm80"; FlashAttnError, with
    the library's message, where that call would be refused. On no call's path: they never ask.

    q, k and v go in as the calls pass them (_usable: the same copies, so the same strides and
    alignment). fa_select_kernel validates but reads no tensor's data and writes none, so q, k and
    v stand in for the outputs and gradients of their shapes and dtype (out, dout and dq as q; dk
    and dv as k and v): only the small lse is allocated."""
    lib = _library.load()
    varlen = cu_seqlens_q is not None
    _rank_check(q, varlen)
    cuda = _device_of(q, "q")
    q, k, v = _usable(q, "q", cuda), _usable(k, "k", cuda), _usable(v, "v", cuda)
    lse = q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)
    p = _new_params()
    if backward:
        put_run(p, "q", (q, k, v, q, lse, q, q, k, v), _BWD_NAMES)
    else:
        put_run(p, "q", (q, k, v, q, lse), _FWD_NAMES)
    put_options(p, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right,
                softcap)
    _put_extras(p, cu_seqlens_q, cu_seqlens_k, alibi_slopes, dropout_p, None)
    p.deterministic = deterministic
    name = ctypes.c_char_p()
    status = lib.fa_select_kernel(ctypes.byref(p), 1 if backward else 0, ctypes.byref(name))
    _library.check(lib, status, "flashattn kernel_family " + ("(backward)" if backward else
                                                              "(forward)"))
    return name.value.decode()
