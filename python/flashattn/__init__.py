"""flashattn for PyTorch: FlashAttention through the library's stable C ABI.

A drop-in for the `flash_attn` package's functions (same names, arguments, defaults and returns):

    import flashattn as flash_attn          # existing code keeps calling flash_attn.flash_attn_func
    from flashattn import flash_attn_func   # or import the functions directly

Code that imports `flash_attn` itself (a library you do not edit) can be pointed here with
`flashattn.install_as_flash_attn()` before that import; `flash_attn.bert_padding` (pad_input,
unpad_input, index_first_axis, ...) comes with it. `flashattn.kernel_family(q, k, v, ...)`
names the library's kernel family a call would run. `flashattn.scaled_dot_product_attention` is
PyTorch's F.scaled_dot_product_attention (attn_mask, is_causal, scale, enable_gqa; the
(batch, heads, seq, dim) layout) over the library. fp8 e4m3 inputs (FlashAttention-3's
q_descale / k_descale / v_descale keywords; forward only, CPU in this build): torch.float8_e4m3fn
tensors, or `flashattn.e4m3(uint8_bytes)` on torch without that dtype; `flashattn.fp8` has the
conversions. See docs/python.md.
"""
import sys

from ._library import FlashAttnError, build_info, library_path
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
    kernel_family,
)
from .sdpa import scaled_dot_product_attention
from ._fp8 import e4m3
from . import _fp8 as fp8
from . import bert_padding, flash_attn_interface

__version__ = "0.5.0"

__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache", "FlashAttnError", "build_info", "library_path",
    "install_as_flash_attn", "kernel_family", "bert_padding", "scaled_dot_product_attention",
    "e4m3", "fp8",
]


def install_as_flash_attn():
    """Makes `import flash_attn`, `from flash_attn.flash_attn_interface import ...` and
    `from flash_attn.bert_padding import ...` resolve to this package for the rest of the
    process. Refuses when a real flash_attn is already
    imported, so that two implementations are never mixed silently."""
    mod = sys.modules[__name__]
    existing = sys.modules.get("flash_attn")
    if existing is not None and existing is not mod:
        raise ImportError("a different flash_attn is already imported; call "
                          "install_as_flash_attn() before anything imports flash_attn")
    sys.modules["flash_attn"] = mod
    sys.modules["flash_attn.flash_attn_interface"] = flash_attn_interface
    sys.modules["flash_attn.bert_padding"] = bert_padding
    return mod
