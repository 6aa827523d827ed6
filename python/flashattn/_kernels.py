"""Eager forward and backward: torch tensors in, one C ABI call, torch tensors out.

These are the bodies of the custom ops (ops.py). Everything that reads a data pointer lives here,
inside the op, because torch.compile cannot trace data_ptr(); the op is opaque to it.
Outputs and workspace are allocated through torch (its caching allocator on the GPU) in the memory
of q's device; CUDA work is queued on torch's current stream of that device.
"""
import ctypes
import threading

import torch

from . import _library
from ._params import (FA_ERROR_DEVICE, FA_ERROR_RANK, FA_ERROR_WORKSPACE, new_params, put,
                      put_options, put_run)

# CPU workspaces up to this size are kept per thread and reused: allocating and first-touching
# ~50 KB per call costs microseconds of the overhead budget. Larger ones (long-sequence backward)
# are allocated per call so that a process does not hold them. CUDA workspaces always come from
# torch's caching allocator, which is already fast and orders reuse by stream.
_CPU_WORKSPACE_CACHE_BYTES = 1 << 20
_tls = threading.local()

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


def _fill_common(p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                 softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, rng):
    if cu_seqlens_q is not None:
        put(p, "cu_seqlens_q", cu_seqlens_q, "cu_seqlens_q")
    if cu_seqlens_k is not None:
        put(p, "cu_seqlens_k", cu_seqlens_k, "cu_seqlens_k")
    if alibi_slopes is not None:
        put(p, "alibi_slopes", alibi_slopes, "alibi_slopes")
    put_options(p, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right,
                softcap)
    if dropout_p:
        p.dropout_p = dropout_p
    if rng is not None:
        p.seed, p.offset = rng.tolist()


def _call(lib, p, query, entry, what, device, cuda):
    """Runs entry (fa_forward / fa_backward) with a workspace.

    CUDA: optimistic - the call goes out without a workspace (the flash forward needs none) and
    the library refuses it with FA_ERROR_WORKSPACE, before touching any output, when one is
    needed; only then is the size queried and a block allocated. That spares the common call a
    second validation pass (~2-3 us of the overhead budget). CPU: the size is queried first,
    because the CPU backend runs with a smaller workspace than it asks for by using fewer
    threads - handing it whatever block is at hand would silently cost parallelism."""
    pref = ctypes.byref(p)
    if cuda:
        stream = _raw_stream(device.index)
        status = entry(pref, None, 0, stream)
        if status != FA_ERROR_WORKSPACE:
            _library.check(lib, status, what)
            return
    size = ctypes.c_size_t()
    _library.check(lib, query(pref, ctypes.byref(size)), what)
    nbytes = size.value
    if cuda:
        # uint8 so the byte count is the element count. On the GPU the block may be freed right
        # after the launch: the caching allocator reuses it only in stream order.
        ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
        _library.check(lib, entry(pref, ws.data_ptr(), nbytes, stream), what)
        return
    if nbytes <= _CPU_WORKSPACE_CACHE_BYTES:
        ws = getattr(_tls, "workspace", None)
        if ws is None:
            ws = _tls.workspace = torch.empty(_CPU_WORKSPACE_CACHE_BYTES, dtype=torch.uint8)
    else:
        ws = torch.empty(nbytes, dtype=torch.uint8)
    _library.check(lib, entry(pref, ws.data_ptr() if nbytes else None, nbytes, None), what)


def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, rng):
    """(out, lse): out like q (contiguous), lse fp32 in FlashAttention's layout."""
    lib = _library.load()
    varlen = cu_seqlens_q is not None
    _rank_check(q, varlen)
    cuda = _device_of(q, "q")
    q, k, v = _usable(q, "q", cuda), _usable(k, "k", cuda), _usable(v, "v", cuda)
    # Contiguous, as flash_attn returns it. empty_like parses no shape argument: ~1.6 us less
    # than new_empty(q.shape) per tensor (bench/python_overhead.py's budget is 15 us a call).
    out = torch.empty_like(q, memory_format=_CONTIGUOUS)
    lse = q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)
    p = new_params()
    put_run(p, "q", (q, k, v, out, lse), _FWD_NAMES)
    _fill_common(p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                 softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, rng)
    _call(lib, p, lib.fa_forward_workspace_size, lib.fa_forward, "flashattn forward", q.device,
          cuda)
    return out, lse


def backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
             dropout_p, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
             rng, deterministic):
    """(dq, dk, dv), contiguous, shaped like q, k, v."""
    lib = _library.load()
    varlen = cu_seqlens_q is not None
    _rank_check(q, varlen)
    cuda = _device_of(q, "q")
    q, k, v = _usable(q, "q", cuda), _usable(k, "k", cuda), _usable(v, "v", cuda)
    dout, out = _usable(dout, "dout", cuda), _usable(out, "out", cuda)
    dq, dk, dv = (torch.empty_like(t, memory_format=_CONTIGUOUS) for t in (q, k, v))
    p = new_params()
    put_run(p, "q", (q, k, v, out, lse, dout, dq, dk, dv), _BWD_NAMES)
    _fill_common(p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                 softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, rng)
    p.deterministic = deterministic
    _call(lib, p, lib.fa_backward_workspace_size, lib.fa_backward, "flashattn backward",
          q.device, cuda)
    return dq, dk, dv
