"""flashattn.scaled_dot_product_attention: PyTorch's torch.nn.functional.scaled_dot_product_attention
(its arguments, defaults, (batch, heads, seq, dim) layout and semantics) over the library.

    from flashattn import scaled_dot_product_attention   # instead of F.scaled_dot_product_attention

The tensors are viewed in FlashAttention's (batch, seq, heads, dim) layout (a transpose: no copy;
the library takes any strides with a contiguous last dimension) and the output is returned as a
(batch, heads, seq, dim) view. Differences from PyTorch, all documented in docs/python.md:

- is_causal is SDPA's top-left alignment (query i sees keys j <= i), which this entry passes to
  the library as a query shift (q_shift = seqlen_q - seqlen_k); flash_attn_func's causal is
  FlashAttention's bottom-right alignment. The two agree when seqlen_q == seqlen_k.
- a query row that sees no key (a mask hiding every key of the row) outputs 0 (and gradient 0),
  where PyTorch's math backend gives NaN;
- dropout draws its mask from the library's Philox stream (seeded from torch's generator, so
  torch.manual_seed reproduces it), not torch's: the same distribution, other bits;
- value's head dimension must equal query's; float masks may have any of fp32 / fp16 / bf16.
"""
import torch

from ._library import FlashAttnError
from .flash_attn_interface import _attention

FA_ERROR_RANK, FA_ERROR_SHAPE, FA_ERROR_HEADS, FA_ERROR_UNSUPPORTED = 3, 4, 6, 18


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query @ key^T * scale + attn_mask) @ value, as PyTorch's SDPA.

    query (N, H, L, E), key / value (N, H_kv, S, E) (or (N, L, E) / (N, S, E) without heads);
    H_kv == H, or with enable_gqa H % H_kv == 0 (query head h reads key head h // (H / H_kv)).
    attn_mask: broadcastable to (N, H, L, S): bool (True = takes part) or float (added to the
    scaled scores); differentiable when it requires grad. is_causal: query i sees keys j <= i
    (top-left; not with attn_mask). scale: None = 1 / sqrt(E). Returns (N, H, L, E)."""
    dims = query.dim()
    if dims not in (3, 4) or key.dim() != dims or value.dim() != dims:
        raise FlashAttnError(FA_ERROR_RANK, f"query.dim()={dims}, key.dim()={key.dim()}, "
                             f"value.dim()={value.dim()}: expected (N, H, L, E) / (N, H, S, E) "
                             "for all three, or (N, L, E) / (N, S, E)")
    if is_causal and attn_mask is not None:
        raise FlashAttnError(FA_ERROR_UNSUPPORTED, "attn_mask and is_causal=True together: SDPA "
                             "refuses the pair too; put the causal mask into attn_mask")
    if dims == 3:  # one head
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if attn_mask is not None and attn_mask.dim() == 3:  # (N, L, S)
            attn_mask = attn_mask.unsqueeze(1)
    heads, heads_k = query.shape[1], key.shape[1]
    if value.shape[1] != heads_k:
        raise FlashAttnError(FA_ERROR_SHAPE, f"value.shape[1]={value.shape[1]} must equal "
                             f"key.shape[1]={heads_k} (heads of key and value)")
    if heads != heads_k and not enable_gqa:
        raise FlashAttnError(FA_ERROR_HEADS, f"query.shape[1]={heads} heads but key.shape[1]="
                             f"{heads_k}: pass enable_gqa=True for grouped-query attention")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if scale is None:
        softmax_scale = None  # the library's 1 / sqrt(E)
    elif float(scale) == 0.0:  # the C ABI reads 0 as "default": zero scores exactly instead
        q, softmax_scale = q * 0.0, 1.0
    else:
        softmax_scale = float(scale)
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    # SDPA's causal is top-left: query i at key position i, i.e. the library's bottom-right
    # position i + seqlen_k - seqlen_q shifted by seqlen_q - seqlen_k.
    q_shift = seqlen_q - seqlen_k if is_causal else 0
    out = _attention(q, k, v, None, None, 0, 0, float(dropout_p), softmax_scale, bool(is_causal),
                     (-1, -1), 0.0, None, False, False, attn_bias=attn_mask, q_shift=q_shift)
    out = out.transpose(1, 2)
    return out.squeeze(1) if dims == 3 else out
