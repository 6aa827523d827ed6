"""Ring attention (context parallelism) over torch.distributed, as an autograd function.

Each rank of a process group holds a shard of one long sequence's q, k, v (batch, rows, heads,
head_dim); `ring_attn_func` returns this rank's rows of attention over the whole sequence, and
its backward gives this rank's rows of dq, dk, dv. The schedule is the library's
(fa_ring_forward / fa_ring_backward in include/flashattn/ring.h): K/V blocks go around the ring
while each rank attends to the block in hand, partial results are merged by the library's combine
step, dK/dV travel back home behind their K/V. This module only supplies the communicator: the
library's start / wait callbacks become torch.distributed.batch_isend_irecv / wait on byte views
of the library's buffers.

Shards: `layout="zigzag"` (default; rank r holds chunks r and 2R-1-r of 2R, balanced causal
work) or `"contiguous"` (chunk r of R). `shard(x)` cuts a full tensor into this rank's rows,
`unshard(x)` puts the ranks' rows back together (an all-gather).

CPU tensors take any process group that can send CPU tensors (gloo). CUDA tensors: the library
queues its work on the current CUDA stream and this module's callbacks keep its order. Over an
NCCL group (one GPU per rank) the transfers are NCCL's, ordered with the stream by
torch.distributed itself, with no host synchronisation. Over any other group (gloo: e.g. several
ranks sharing one GPU, which NCCL refuses) each transfer is staged through host memory, which
synchronises the host with the stream at every start: correct, not fast. See
docs/context-parallel.md (what has run where).
"""
import ctypes

import torch
import torch.distributed as dist

from ._library import FlashAttnError, check, load
from ._params import new_params, put, put_options

__all__ = ["ring_attn_func", "shard", "unshard", "shard_rows"]

_LAYOUTS = {"contiguous": 0, "zigzag": 1}
FA_ERROR_COMM = 23

_START = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                          ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t, ctypes.c_void_p)
_WAIT = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


class _FaComm(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("size", ctypes.c_int32), ("ctx", ctypes.c_void_p),
                ("start", _START), ("wait", _WAIT)]


class _FaRing(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("seqlen", ctypes.c_int64),
                ("layout", ctypes.c_int32), ("comm", _FaComm)]


_declared = None


def _lib():
    global _declared
    if _declared is None:
        lib = load()
        c = ctypes
        lib.fa_ring_init.argtypes = [c.c_void_p]
        lib.fa_ring_init.restype = None
        lib.fa_ring_shard.argtypes = [c.c_void_p, c.c_int32, c.POINTER(c.c_int64)]
        lib.fa_ring_shard.restype = c.c_int
        for name in ("fa_ring_forward_workspace_size", "fa_ring_backward_workspace_size"):
            getattr(lib, name).argtypes = [c.c_void_p, c.c_void_p, c.POINTER(c.c_size_t)]
            getattr(lib, name).restype = c.c_int
        for name in ("fa_ring_forward", "fa_ring_backward"):
            getattr(lib, name).argtypes = [c.c_void_p, c.c_void_p, c.c_void_p, c.c_size_t,
                                           c.c_void_p]
            getattr(lib, name).restype = c.c_int
        probe = _FaRing()
        lib.fa_ring_init(ctypes.byref(probe))
        if probe.struct_size != ctypes.sizeof(_FaRing):
            raise FlashAttnError(19, f"the library's fa_ring has {probe.struct_size} bytes, this "
                                 f"binding's mirror {ctypes.sizeof(_FaRing)}")
        _declared = lib
    return _declared


def _layout_code(layout):
    if layout not in _LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {sorted(_LAYOUTS)}")
    return _LAYOUTS[layout]


def _ring_struct(seqlen, layout, size, rank=0):
    r = _FaRing()
    _lib().fa_ring_init(ctypes.byref(r))
    r.seqlen = seqlen
    r.layout = _layout_code(layout)
    r.comm.size = size
    r.comm.rank = rank
    return r


def shard_rows(seqlen, world_size, rank, layout="zigzag"):
    """The global rows `rank` holds: a list of (start, length), in shard order."""
    r = _ring_struct(seqlen, layout, world_size)
    rows = (ctypes.c_int64 * 4)()
    lib = _lib()
    check(lib, lib.fa_ring_shard(ctypes.byref(r), rank, rows), "shard_rows")
    return [(rows[0], rows[1])] + ([(rows[2], rows[3])] if rows[3] > 0 else [])


def _group_info(group):
    return dist.get_rank(group), dist.get_world_size(group)


def shard(x, group=None, layout="zigzag", dim=1):
    """This rank's rows of a full (batch, seqlen, ...) tensor along `dim`, contiguous."""
    rank, size = _group_info(group)
    parts = [x.narrow(dim, s, n) for s, n in shard_rows(x.shape[dim], size, rank, layout)]
    return torch.cat(parts, dim=dim).contiguous()


def unshard(x, seqlen, group=None, layout="zigzag", dim=1):
    """The full tensor from every rank's shard x (an all-gather; the inverse of shard)."""
    rank, size = _group_info(group)
    rows = [shard_rows(seqlen, size, r, layout) for r in range(size)]
    longest = max(sum(n for _, n in spans) for spans in rows)
    pad = list(x.shape)
    pad[dim] = longest - x.shape[dim]
    padded = torch.cat([x, x.new_zeros(pad)], dim=dim).contiguous()
    if padded.dtype in (torch.float16, torch.bfloat16):
        padded = padded.float()  # exact; gloo has no bf16 collectives on older torch
    gathered = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(gathered, padded, group=group)
    shape = list(x.shape)
    shape[dim] = seqlen
    full = x.new_empty(shape)
    for r, spans in enumerate(rows):
        local = 0
        for start, n in spans:
            full.narrow(dim, start, n).copy_(gathered[r].narrow(dim, local, n))
            local += n
    return full


class _TorchComm:
    """The library's fa_comm over a torch.distributed group: start posts batch_isend_irecv on
    byte views of the library's buffers, wait waits for them. An exception inside a callback is
    kept and raised after the library returns (it cannot cross the C call).

    Every buffer the library transfers lies in its workspace, so a CUDA buffer is a slice of the
    workspace tensor. NCCL orders its transfers after the work queued on the current stream and
    req.wait() makes that stream wait for them: flashattn/ring.h's contract as it is. Other
    backends send host copies: start copies the send buffer to the host (the host waits for the
    stream), wait receives into host memory, then queues the copy into the receive buffer on the
    stream."""

    def __init__(self, group, workspace):
        self.group = group
        self.rank, self.size = _group_info(group)
        self.workspace = workspace
        self.staged = workspace.is_cuda and dist.get_backend(group) != "nccl"
        self.pending = []
        self.arrivals = []  # staged receives: (device slice, host tensor), copied in at wait
        self.error = None
        # The C function pointers must stay alive as long as the library may call them.
        self._start = _START(self._start_cb)
        self._wait = _WAIT(self._wait_cb)

    def _peer(self, group_rank):
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        # torch >= 2.0 names it get_global_rank; 1.13 has the private spelling.
        to_global = getattr(dist, "get_global_rank", None)
        if to_global is None:
            to_global = dist.distributed_c10d._get_global_rank
        return to_global(self.group, group_rank)

    def _bytes(self, ptr, n):
        if not self.workspace.is_cuda:
            return torch.frombuffer((ctypes.c_uint8 * n).from_address(ptr), dtype=torch.uint8)
        offset = ptr - self.workspace.data_ptr()
        if not 0 <= offset <= self.workspace.numel() - n:
            raise RuntimeError(f"a transfer of {n} bytes at {ptr:#x} is outside the workspace")
        return self.workspace.narrow(0, offset, n)

    def _start_cb(self, ctx, send, send_peer, recv, recv_peer, nbytes, stream):
        try:
            send_t, recv_t = self._bytes(send, nbytes), self._bytes(recv, nbytes)
            if self.staged:
                send_t = send_t.cpu()  # waits for the work queued on the stream so far
                host = torch.empty(nbytes, dtype=torch.uint8)
                self.arrivals.append((recv_t, host))
                recv_t = host
            ops = [dist.P2POp(dist.isend, send_t, self._peer(send_peer), self.group),
                   dist.P2POp(dist.irecv, recv_t, self._peer(recv_peer), self.group)]
            self.pending.extend(dist.batch_isend_irecv(ops))
            return 0
        except BaseException as e:  # noqa: BLE001 (kept, raised after the C call)
            self.error = e
            return 1

    def _wait_cb(self, ctx, stream):
        try:
            for req in self.pending:
                req.wait()
            self.pending.clear()
            for device, host in self.arrivals:
                device.copy_(host)  # queued on the stream, before the library's next work
            self.arrivals.clear()
            return 0
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return 1

    def ring(self, seqlen, layout):
        r = _ring_struct(seqlen, layout, self.size, self.rank)
        r.comm.start = self._start
        r.comm.wait = self._wait
        return r


def _run(backward, tensors, seqlen, causal, softmax_scale, softcap, layout, group):
    """One fa_ring_forward / fa_ring_backward call on this rank's tensors (a dict by field)."""
    lib = _lib()
    p = new_params()
    for field, t in tensors.items():
        put(p, field, t, field)
    put_options(p, 0, 0, 0.0 if softmax_scale is None else softmax_scale, bool(causal), -1, -1,
                softcap)
    device = tensors["q"].device
    what = "ring_attn_func backward" if backward else "ring_attn_func"
    query = lib.fa_ring_backward_workspace_size if backward else lib.fa_ring_forward_workspace_size
    nbytes = ctypes.c_size_t(0)
    ring = _TorchComm(group, torch.empty(0)).ring(seqlen, layout)  # the query calls no callback
    check(lib, query(ctypes.byref(p), ctypes.byref(ring), ctypes.byref(nbytes)), what)
    ws = torch.empty(max(nbytes.value, 1), dtype=torch.uint8, device=device)
    comm = _TorchComm(group, ws)
    ring = comm.ring(seqlen, layout)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    call = lib.fa_ring_backward if backward else lib.fa_ring_forward
    status = call(ctypes.byref(p), ctypes.byref(ring), ws.data_ptr(), nbytes.value, stream)
    if status == FA_ERROR_COMM and comm.error is not None:
        msg = lib.fa_last_error().decode("utf-8", "replace")
        raise FlashAttnError(status, f"{what}: {msg}: {comm.error!r}") from comm.error
    check(lib, status, what)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, seqlen, causal, softmax_scale, softcap, layout, group):
        b, rows, hq, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(b, hq, rows, dtype=torch.float32, device=q.device)
        _run(False, {"q": q, "k": k, "v": v, "out": out, "lse": lse}, seqlen, causal,
             softmax_scale, softcap, layout, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        ctx.options = (seqlen, causal, softmax_scale, softcap, layout, group)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _run(True, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "dout": dout.contiguous(),
                    "dq": dq, "dk": dk, "dv": dv}, *ctx.options)
        return dq, dk, dv, None, None, None, None, None, None


def ring_attn_func(q, k, v, seqlen=None, causal=False, softmax_scale=None, softcap=0.0,
                   layout="zigzag", group=None, return_lse=False):
    """This rank's rows of attention over a sequence sharded across `group` (default: the world).

    q (batch, rows, heads_q, d), k and v (batch, rows, heads_kv, d): this rank's shard (see
    `shard`). seqlen: the whole sequence's length (None: the sum of every rank's rows, one
    all-reduce). Collective: every rank of the group calls it, with the same options.
    Differentiable in q, k, v. return_lse: also this rank's rows of the log-sum-exp
    (batch, heads_q, rows), fp32."""
    _layout_code(layout)
    if seqlen is None:
        n = torch.tensor([q.shape[1]], dtype=torch.int64, device=q.device)
        dist.all_reduce(n, group=group)
        seqlen = int(n.item())
    out, lse = _RingAttention.apply(q, k, v, seqlen, causal, softmax_scale, softcap, layout,
                                    group)
    return (out, lse) if return_lse else out
