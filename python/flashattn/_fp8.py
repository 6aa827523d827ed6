"""FP8 e4m3 inputs (fa_params 0.5, issue 30): FlashAttention-3's q_descale / k_descale / v_descale.

flash_attn_func(q, k, v, ..., q_descale=None, k_descale=None, v_descale=None) takes fp8 e4m3
q, k, v (all three) and returns a bfloat16 out (FlashAttention-3's choice for fp8; out_dtype=
torch.float16 for fp16). Each descale is an optional float32 (batch, nheads_k) tensor (any
strides) multiplying its tensor's decoded values; query head h uses q_descale[:, h // (nheads //
nheads_k)]. Forward only: no autograd, no dropout, no attn_bias.

How to pass e4m3 data:
  - torch >= 2.1: tensors of dtype torch.float8_e4m3fn, as FlashAttention-3 takes them;
  - any torch (1.13 has no float8 dtype): flashattn.e4m3(t) on a torch.uint8 tensor holding the
    e4m3 bytes (1 sign, 4 exponent bits bias 7, 3 mantissa bits; 0x7F / 0xFF NaN; max 448). A
    bare uint8 tensor is refused: the marker says the bytes are e4m3 (and not, say, int8 data).
flashattn.fp8 has the conversions (to_e4m3_bytes: round to nearest even with saturation to ±448,
as the GPU's cvt.rn.satfinite.e4m3x2.f32; from_e4m3_bytes: exact) and quantize_e4m3, which picks
the per-(batch, kv head) descales amax / 448.

The CPU backend runs fp8 (exact decoding, fp32 accumulation); on CUDA tensors the library's
sm90 kernels (H100 / H200) and its KV-cache kernels (sm80 and later) do; elsewhere the call
raises FlashAttnError naming fp8.
"""
import ctypes

import torch

from . import _library
from ._kernels import _call, _device_of, _usable
from ._params import (FA_DTYPE_FP8_E4M3, FA_ERROR_DTYPE, FaParamsV5, put, put_options)

FA_ERROR_UNSUPPORTED = 18
FLOAT8_E4M3FN = getattr(torch, "float8_e4m3fn", None)  # None on torch < 2.1


class E4M3:
    """Marks a torch.uint8 tensor as holding fp8 e4m3 bytes (for torch without
    torch.float8_e4m3fn). .bytes is the tensor; shape, dim(), is_cuda and friends are its."""

    __slots__ = ("bytes",)

    def __init__(self, t):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
            raise _library.FlashAttnError(
                FA_ERROR_DTYPE, f"flashattn.e4m3 takes a torch.uint8 tensor of e4m3 bytes, got "
                f"{type(t).__name__ if not isinstance(t, torch.Tensor) else t.dtype}")
        self.bytes = t

    shape = property(lambda self: self.bytes.shape)
    device = property(lambda self: self.bytes.device)
    is_cuda = property(lambda self: self.bytes.is_cuda)
    requires_grad = property(lambda self: False)

    def dim(self):
        return self.bytes.dim()

    def __repr__(self):
        return f"flashattn.e4m3({self.bytes!r})"


def e4m3(t):
    """t (torch.uint8, e4m3 bytes) marked as fp8 e4m3 for flash_attn_func (see the module)."""
    return E4M3(t)


def is_fp8(t):
    """Whether t is fp8 e4m3 input: an e4m3(...) marker or a torch.float8_e4m3fn tensor."""
    return isinstance(t, E4M3) or (FLOAT8_E4M3FN is not None and isinstance(t, torch.Tensor)
                                   and t.dtype == FLOAT8_E4M3FN)


def _raw(t):
    """The tensor whose memory holds t's bytes."""
    return t.bytes if isinstance(t, E4M3) else t


# ---- conversions -------------------------------------------------------------------------------

def _table():
    """The 256 codes' values (float32), by the format's definition."""
    vals = []
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            vals.append(float("nan"))
            continue
        mag = (m / 8.0) * 2.0 ** -6 if e == 0 else (1.0 + m / 8.0) * 2.0 ** (e - 7)
        vals.append(-mag if s else mag)
    return torch.tensor(vals, dtype=torch.float32)


_TABLE = _table()
_POSITIVE = _TABLE[:0x7F].double()  # codes 0x00 .. 0x7E: increasing, 0 to 448


def from_e4m3_bytes(b):
    """float32 values of uint8 e4m3 bytes (exact)."""
    return _TABLE.to(b.device)[b.long()]


def to_e4m3_bytes(x):
    """uint8 e4m3 bytes of x: round to nearest, ties to even, magnitudes >= 448 (and inf) to
    ±448, NaN to 0x7F - as the GPU's cvt.rn.satfinite.e4m3x2.f32 (and torch's float8_e4m3fn
    conversion for finite values below the saturation point)."""
    a = x.detach().to(torch.float64)
    mag = a.abs().clamp(max=448.0)
    pos = _POSITIVE.to(a.device)
    hi = torch.searchsorted(pos, mag.contiguous()).clamp(max=0x7E)  # first code >= |x|
    lo = (hi - 1).clamp(min=0)
    d_hi, d_lo = pos[hi] - mag, mag - pos[lo]
    # nearest; on a tie the even code (the mantissa's last bit is the code's)
    take_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = torch.where(take_lo, lo, hi)
    code = code | (torch.signbit(a).long() << 7)
    code = torch.where(torch.isnan(a), torch.full_like(code, 0x7F), code)
    return code.to(torch.uint8)


def quantize_e4m3(x, group=1):
    """(e4m3 bytes, descale) of x (batch, seqlen, nheads, headdim): one descale per (batch,
    head group), amax / 448 (1 where the block is zero), for group = nheads // nheads_k on q and 1
    on k, v; descale is float32 (batch, nheads // group), FlashAttention-3's shape."""
    b, s, h, d = x.shape
    blocks = x.detach().float().reshape(b, s, h // group, group, d)
    amax = blocks.abs().amax(dim=(1, 3, 4))
    descale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    scaled = blocks / descale[:, None, :, None, None]
    return to_e4m3_bytes(scaled.reshape(b, s, h, d)), descale.float()


# ---- the call ----------------------------------------------------------------------------------

def forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
            causal, window_left, window_right, softcap, alibi_slopes, q_descale, k_descale,
            v_descale, out_dtype, want_lse):
    """(out, lse or None) of fp8 e4m3 q, k, v (fa_params 0.5)."""
    lib = _library.load()
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not is_fp8(t):
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise _library.FlashAttnError(
                FA_ERROR_DTYPE, f"{name} is {got} while q, k or v is fp8 e4m3: all three must be "
                "(torch.float8_e4m3fn or flashattn.e4m3(uint8 bytes))")
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise _library.FlashAttnError(FA_ERROR_DTYPE, f"out_dtype={out_dtype} must be "
                                      "torch.bfloat16 or torch.float16 with fp8 inputs")
    qb, kb, vb = _raw(q), _raw(k), _raw(v)
    cuda = _device_of(qb, "q")
    qb, kb, vb = _usable(qb, "q", cuda), _usable(kb, "k", cuda), _usable(vb, "v", cuda)
    keep = [qb, kb, vb]
    p = FaParamsV5()
    p.struct_size = ctypes.sizeof(FaParamsV5)
    out = torch.empty(qb.shape, dtype=out_dtype, device=qb.device)
    for field, t in (("q", qb), ("k", kb), ("v", vb)):
        put(p, field, t, field, FA_DTYPE_FP8_E4M3)
    put(p, "out", out, "out")
    lse = None
    if want_lse:
        shape = ((qb.shape[1], qb.shape[0]) if cu_seqlens_q is not None
                 else (qb.shape[0], qb.shape[2], qb.shape[1]))
        lse = torch.empty(shape, dtype=torch.float32, device=qb.device)
        put(p, "lse", lse, "softmax_lse")
    for field, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                     ("alibi_slopes", alibi_slopes), ("q_descale", q_descale),
                     ("k_descale", k_descale), ("v_descale", v_descale)):
        if t is not None:
            t = _usable(t, field, cuda)
            keep.append(t)
            put(p, field, t, field)
    put_options(p, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right,
                softcap)
    _call(lib, p, lib.fa_forward_workspace_size, lib.fa_forward, "flashattn forward (fp8)", cuda,
          qb.get_device())
    del keep
    return out, lse
