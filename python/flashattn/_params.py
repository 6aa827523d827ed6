"""The fa_params struct of the C ABI, and filling it from torch tensors quickly.

The struct is declared once with ctypes (the layout authority here, checked against the library's
own sizeof(fa_params) at load time): the 0.2 layout, initialised by the library's
fa_params_init_v2, for every call but flash_attn_with_kvcache, which uses the 0.3 layout
(FaParamsV3, fa_params_init_v3), and calls with an attention bias or a query shift (the
scaled_dot_product_attention entry, attn_bias=) use the 0.4 layout (FaParamsV4, fa_params_init_v4),
and fp8 calls (q_descale=...) the 0.5 one (FaParamsV5, fa_params_init_v5: the C header's
fa_params_init). The fields since 0.2 default to
zero, which is also what a zeroed struct holds. Tensors are written into it with one precompiled
struct.pack_into per fa_tensor rather than field by field: a call fills up to eleven tensors, and
ctypes attribute assignment costs about 0.1 us per field, which alone would eat the wrapper's
15 us budget (docs/python.md, "Overhead").
"""
import ctypes
import struct

import torch

from ._library import FlashAttnError

FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_INT32 = 0, 1, 2, 4
FA_DTYPE_BOOL, FA_DTYPE_INT8 = 5, 6  # attn_bias only: a mask
FA_DTYPE_FP8_E4M3 = 3  # q, k, v of fp8 calls (_fp8.py)
FA_MAX_RANK = 4
FA_ERROR_DTYPE, FA_ERROR_RANK, FA_ERROR_SIZE, FA_ERROR_DEVICE, FA_ERROR_VERSION = 2, 3, 9, 15, 19
FA_ERROR_WINDOW, FA_ERROR_WORKSPACE = 11, 16
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)

# torch dtype -> fa_dtype
DTYPE_CODES = {torch.float32: FA_DTYPE_FP32, torch.float16: FA_DTYPE_FP16,
               torch.bfloat16: FA_DTYPE_BF16, torch.int32: FA_DTYPE_INT32,
               torch.bool: FA_DTYPE_BOOL, torch.int8: FA_DTYPE_INT8}
if hasattr(torch, "float8_e4m3fn"):  # torch >= 2.1; torch 1.13 passes uint8 bytes (_fp8.E4M3)
    DTYPE_CODES[torch.float8_e4m3fn] = FA_DTYPE_FP8_E4M3


class FaDevice(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("index", ctypes.c_int32)]


class FaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("shape", ctypes.c_int64 * FA_MAX_RANK), ("stride", ctypes.c_int64 * FA_MAX_RANK),
                ("device", FaDevice)]


class FaParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("backend", ctypes.c_int32),
                ("q", FaTensor), ("k", FaTensor), ("v", FaTensor), ("out", FaTensor),
                ("lse", FaTensor), ("dout", FaTensor), ("dq", FaTensor), ("dk", FaTensor),
                ("dv", FaTensor), ("cu_seqlens_q", FaTensor), ("cu_seqlens_k", FaTensor),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
                ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32),
                ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
                ("softcap", ctypes.c_float), ("alibi_slopes", FaTensor),
                ("dropout_p", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("offset", ctypes.c_uint64), ("deterministic", ctypes.c_int32),
                ("check_inputs", ctypes.c_int32),
                # Since 0.2: the KV cache (forward only) and the queries' shift.
                ("block_table", FaTensor), ("cache_seqlens", FaTensor),
                ("q_shift", ctypes.c_int64)]


class FaParamsV3(FaParams):
    """The 0.3 layout: 0.2's fields, then the rest of flash_attn_with_kvcache (forward only).
    Only flash_attn_with_kvcache fills it (_kvcache.py); every other call keeps the 0.2 layout,
    which the library accepts as it is (its struct_size says which one it is)."""
    _fields_ = [("cache_batch_idx", FaTensor), ("cache_leftpad", FaTensor),
                ("k_new", FaTensor), ("v_new", FaTensor),
                ("rotary_cos", FaTensor), ("rotary_sin", FaTensor),
                ("rotary_interleaved", ctypes.c_int32), ("num_splits", ctypes.c_int32)]


class FaParamsV4(FaParamsV3):
    """The 0.4 layout: 0.3's fields, then the attention bias or mask and its gradient. Only calls
    with a bias or a query shift fill it (_kernels.forward / backward_ext); the others keep the
    0.2 layout."""
    _fields_ = [("attn_bias", FaTensor), ("dbias", FaTensor)]


class FaParamsV5(FaParamsV4):
    """The 0.5 layout: 0.4's fields, then the fp32 (batch, heads_kv) descales of fp8 e4m3 q, k,
    v. Only fp8 calls fill it (_fp8.forward); the others keep their layouts."""
    _fields_ = [("q_descale", FaTensor), ("k_descale", FaTensor), ("v_descale", FaTensor)]


# data, dtype, rank, shape[4], stride[4], device.type, device.index in native layout.
_TENSOR = struct.Struct("@P2i4q4q2i")
OFFSET = {name: getattr(FaParams, name).offset for name, _ in FaParams._fields_}
OFFSET.update({name: getattr(FaParamsV3, name).offset for name, _ in FaParamsV3._fields_})
OFFSET.update({name: getattr(FaParamsV4, name).offset for name, _ in FaParamsV4._fields_})
OFFSET.update({name: getattr(FaParamsV5, name).offset for name, _ in FaParamsV5._fields_})
_PAD = [(0,) * n for n in range(FA_MAX_RANK + 1)]
_TENSOR_FIELDS = [name for name, kind in FaParams._fields_ if kind is FaTensor]
# The fa_tensor fields from a given one on, in struct order (put_run's consecutive run).
_FIELDS_FROM = {f: _TENSOR_FIELDS[i:] for i, f in enumerate(_TENSOR_FIELDS)}
# The run of scalars max_seqlen_q ... softcap, written with one pack_into (put_options; inline in
# _kernels.forward).
OPTIONS = struct.Struct("@qqfiiif")
_OPTION_FIELDS = ("max_seqlen_q", "max_seqlen_k", "softmax_scale", "causal", "window_left",
                  "window_right", "softcap")


def check_layout(lib):
    """Refuses a library whose fa_params differs from this mirror (a header change)."""
    if _TENSOR.size != ctypes.sizeof(FaTensor):
        raise FlashAttnError(FA_ERROR_VERSION, f"fa_tensor packs to {_TENSOR.size} bytes, "
                             f"ctypes says {ctypes.sizeof(FaTensor)}")
    offsets = [OFFSET[f] - OFFSET[_OPTION_FIELDS[0]] for f in _OPTION_FIELDS]
    packed = [struct.calcsize("@" + OPTIONS.format[1:i + 1]) - struct.calcsize(c)
              for i, c in enumerate(OPTIONS.format[1:], start=1)]
    if offsets != packed:
        raise FlashAttnError(FA_ERROR_VERSION, f"fa_params scalar offsets {offsets} differ from "
                             f"the packed run {packed}")
    run = _FIELDS_FROM["q"][:9]  # q k v out lse dout dq dk dv: put_run packs them as one run
    if [OFFSET[f] - OFFSET["q"] for f in run] != [i * _TENSOR.size for i in range(len(run))]:
        raise FlashAttnError(FA_ERROR_VERSION, f"fa_params tensors {run} are not consecutive")
    for init, mirror in ((lib.fa_params_init_v2, FaParams), (lib.fa_params_init_v3, FaParamsV3),
                         (lib.fa_params_init_v4, FaParamsV4), (lib.fa_params_init_v5, FaParamsV5)):
        p = mirror()
        init(ctypes.byref(p))
        if p.struct_size != ctypes.sizeof(mirror):
            raise FlashAttnError(FA_ERROR_VERSION, f"the library's fa_params has {p.struct_size} "
                                 f"bytes, this binding's mirror {ctypes.sizeof(mirror)}: rebuild "
                                 "or reinstall the binding that matches the library")


def new_params():
    """fa_params with fa_params_init's defaults (AUTO backend, windows -1, the 0.2 fields zero),
    without a C call."""
    p = FaParams()
    p.struct_size = ctypes.sizeof(FaParams)
    p.window_left = -1
    p.window_right = -1
    return p


def put(p, field, t, name, code=None):
    """Writes a view of torch tensor t into p.<field>. No copy; t must outlive the C call. code:
    the fa_dtype to declare instead of t's own (fp8 bytes held in a uint8 tensor)."""
    if code is None:
        code = DTYPE_CODES.get(t.dtype)
    if code is None:
        want = ("torch.int32" if name.startswith("cu_seqlens") else
                "float32, float16, bfloat16 or bool" if name == "attn_bias" else
                "float32, float16 or bfloat16")
        raise FlashAttnError(FA_ERROR_DTYPE, f"{name}.dtype={t.dtype} is not supported "
                             f"(expected {want})")
    shape = t.shape
    rank = len(shape)
    if rank > FA_MAX_RANK:
        raise FlashAttnError(FA_ERROR_RANK, f"{name}.dim()={rank} exceeds {FA_MAX_RANK}")
    ptr = t.data_ptr()
    if ptr == 0 and t.numel() == 0:
        # An empty tensor has no data pointer; say so rather than let the C ABI report NULL.
        raise FlashAttnError(FA_ERROR_SIZE, f"{name}.shape={tuple(shape)} has no elements")
    index = t.get_device()  # -1 for CPU tensors
    pad = _PAD[FA_MAX_RANK - rank]
    _TENSOR.pack_into(p, OFFSET[field], ptr, code, rank, *shape, *pad, *t.stride(), *pad,
                      1 if index >= 0 else 0, index if index >= 0 else 0)


_RUNS = {}  # n -> struct.Struct packing n consecutive fa_tensor fields


def run_struct(n):
    """The struct.Struct packing n consecutive fa_tensor fields (each value as in tensor_values)."""
    run = _RUNS.get(n)
    if run is None:
        run = _RUNS[n] = struct.Struct("@" + _TENSOR.format[1:] * n)
    return run


def tensor_values(t):
    """The fa_tensor values of t (data, dtype, rank, shape, stride, device) in _TENSOR's order,
    read from torch once; None where put() must judge t (dtype, rank or no data)."""
    code = DTYPE_CODES.get(t.dtype)
    shape = t.shape
    rank = len(shape)
    ptr = t.data_ptr()
    if code is None or rank > FA_MAX_RANK or ptr == 0:
        return None
    index = t.get_device()
    pad = _PAD[FA_MAX_RANK - rank]
    return (ptr, code, rank, *shape, *pad, *t.stride(), *pad,
            1 if index >= 0 else 0, index if index >= 0 else 0)


def put_run(p, first, tensors, names):
    """put() for tensors filling consecutive fa_tensor fields from `first` on (q, k, v, out, lse,
    dout, dq, dk, dv are consecutive in fa_params) with one pack_into: a call per tensor cost
    ~0.7 us more each. Anything unusual (dtype, rank, no data) goes through put() for its error."""
    values = []
    for t in tensors:
        vals = tensor_values(t)
        if vals is None:
            for field, u, name in zip(_FIELDS_FROM[first], tensors, names):
                put(p, field, u, name)
            return
        values += vals
    run_struct(len(tensors)).pack_into(p, OFFSET[first], *values)


def check_options(max_seqlen_q, max_seqlen_k, window_left, window_right):
    """FlashAttnError naming the first integer option that does not fit its fa_params field
    (int64 max_seqlen, int32 windows); the library judges the values that fit."""
    for name, value, (lo, hi), status in (
            ("max_seqlen_q", max_seqlen_q, _INT64, FA_ERROR_SIZE),
            ("max_seqlen_k", max_seqlen_k, _INT64, FA_ERROR_SIZE),
            ("window_size[0]", window_left, _INT32, FA_ERROR_WINDOW),
            ("window_size[1]", window_right, _INT32, FA_ERROR_WINDOW)):
        if value is not None and not lo <= value <= hi:
            raise FlashAttnError(status, f"{name}={value} does not fit the library's "
                                 f"{'int64' if hi == _INT64[1] else 'int32'} field "
                                 f"[{lo}, {hi}]")


def put_options(p, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
                window_right, softcap):
    """The scalars max_seqlen_q ... softcap into p with one pack_into; an integer that does not
    fit its field becomes FlashAttnError naming it (struct.error says only "out of range")."""
    try:
        OPTIONS.pack_into(p, OFFSET["max_seqlen_q"], max_seqlen_q, max_seqlen_k, softmax_scale,
                          causal, window_left, window_right, softcap)
    except struct.error:
        check_options(max_seqlen_q, max_seqlen_k, window_left, window_right)
        raise

