"""flashattn as a Hugging Face transformers attention implementation.

    import flashattn.integrations.transformers as fa_hf
    name = fa_hf.register()                       # "fa_library"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=name)

register() adds `attention_forward` under `name` to transformers' attention functions
(AttentionInterface.register, transformers >= 4.50; the ALL_ATTENTION_FUNCTIONS dict of 4.48 and
4.49). The name must not contain "flash": transformers 5.x reads such a name as a request for a
hub kernel or its own flash-attention integration.

What the model hands over and what flashattn runs:
  * query (batch, heads, seqlen_q, head_dim), key / value (batch, heads_kv, seqlen_k, head_dim):
    passed as transposed views (no copy), GQA as it is;
  * causality from module.is_causal (default True; an is_causal keyword wins), the scale from
    `scaling`, dropout from `dropout`, softcap from `softcap` (else module.attn_logit_softcapping),
    the sliding window from `sliding_window` (else module.sliding_window): transformers' window
    of w tokens (a query sees itself and the w - 1 before it) is flashattn's window_size
    (w - 1, 0) when causal, (w - 1, w - 1) when not;
  * padded batches: from attention_mask, either the 2D (batch, seqlen_k) padding mask or the 4D
    (batch, 1, seqlen_q, seqlen_k) mask of the eager / SDPA paths (bool, True = attend, or
    additive float, 0 = attend). The tokens are packed with bert_padding.unpad_input and run
    through flash_attn_varlen_func; padded query rows come back as zeros. A 4D mask is read as
    causal / window structure plus key padding and checked: a call would never attend to an
    element that the mask forbids, and raises ValueError (naming what differs) for a mask that is
    not of that form (e.g. an additive bias);
  * with a KV cache (seqlen_q < seqlen_k) the queries are the last seqlen_q keys in use, as in
    transformers' flash-attention path; a static cache's unused slots (masked in every row) are
    dropped first;
  * padding-free batches (sequences packed into a row, as DataCollatorWithFlattening makes them):
    from cu_seq_lens_q / cu_seq_lens_k / max_length_q / max_length_k keywords when given, else,
    when no token is padded, from position_ids that restart inside a row (each restart begins a
    sequence); with such boundaries a mask may allow more (a plain causal mask) than the
    sequences do.
Returns (attn_output (batch, seqlen_q, heads, head_dim), None): no attention weights.
"""
import torch

from .. import flash_attn_func, flash_attn_varlen_func
from ..bert_padding import pad_input, unpad_input

IMPLEMENTATION = "fa_library"

__all__ = ["IMPLEMENTATION", "register", "attention_forward"]


def register(name=IMPLEMENTATION):
    """Registers flashattn as transformers attention implementation `name` (returned)."""
    if "flash" in name.lower():
        raise ValueError(f"name={name!r}: transformers 5.x takes a name containing 'flash' as a "
                         "request for a hub kernel; pick one without it")
    import transformers
    interface = getattr(transformers, "AttentionInterface", None)
    if interface is not None:
        interface.register(name, attention_forward)
    else:  # 4.48 and 4.49: a plain dict, which the models index by config._attn_implementation
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        ALL_ATTENTION_FUNCTIONS[name] = attention_forward
    # transformers 5 builds a model's mask with the function registered under the attention's
    # name, and hands an implementation it has none for no mask at all (padding then unseen):
    # register SDPA's, the 4D boolean mask (padding, cache slots, windows) attention_forward reads.
    masks = getattr(transformers, "AttentionMaskInterface", None)
    if masks is not None:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
        masks.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return name


def _window(sliding_window, causal):
    if not sliding_window:
        return (-1, -1)
    w = int(sliding_window) - 1
    return (w, 0) if causal else (w, w)


def _allowed_from_4d(mask, seqlen_k):
    """bool (batch, seqlen_q, seqlen_k): the elements a 4D mask lets a query attend to."""
    if mask.dim() != 4:
        raise ValueError(f"attention_mask.dim()={mask.dim()} must be 2 (batch, seqlen_k) or 4 "
                         "(batch, 1 or heads, seqlen_q, seqlen_k)")
    if mask.shape[-1] >= seqlen_k:
        mask = mask[..., :seqlen_k]  # a static cache's mask may run past the keys in use
    else:  # a mask cut to its last columns (Gemma-2's sliding layers): earlier keys are outside
        pad = mask.new_zeros(mask.shape[:-1] + (seqlen_k - mask.shape[-1],)) \
            if mask.dtype == torch.bool else \
            mask.new_full(mask.shape[:-1] + (seqlen_k - mask.shape[-1],),
                          torch.finfo(mask.dtype).min)
        mask = torch.cat([pad, mask], dim=-1)
    if mask.dtype == torch.bool:
        allowed = mask
    else:
        allowed = mask == 0
        blocked = mask <= torch.finfo(mask.dtype).min / 2
        if not bool((allowed | blocked).all()):
            raise ValueError("attention_mask holds values other than 0 and the dtype's minimum "
                             "(an additive bias): flashattn takes masks, not biases")
    if allowed.shape[1] != 1 and not bool((allowed == allowed[:, :1]).all()):
        raise ValueError("attention_mask differs between heads; flashattn takes one mask for "
                         "all heads")
    return allowed[:, 0]


def _structure(batch, seqlen_q, seqlen_k, causal, window, device):
    """bool (seqlen_q, seqlen_k): causal / window visibility, bottom-right aligned."""
    pos = torch.arange(seqlen_q, device=device)[:, None] + (seqlen_k - seqlen_q)
    j = torch.arange(seqlen_k, device=device)[None, :]
    left, right = window
    if causal:
        right = 0
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        visible &= j >= pos - left
    if right >= 0:
        visible &= j <= pos + right
    return visible


def _segments(position_ids, batch, seqlen):
    """int64 (batch, seqlen) sequence ids from position ids that restart inside a row, or None
    when every row is one sequence."""
    if position_ids is None or seqlen <= 1:
        return None
    pos = position_ids.expand(batch, seqlen) if position_ids.shape[0] == 1 else position_ids
    restart = torch.zeros(batch, seqlen, dtype=torch.bool, device=pos.device)
    restart[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
    if not bool(restart.any()):
        return None
    restart[:, 0] = True
    return torch.cumsum(restart.flatten().long(), 0).reshape(batch, seqlen)


def _cu_from_segments(seg, valid):
    """int32 cu_seqlens and max length of the valid tokens grouped by consecutive sequence ids."""
    ids = seg.flatten()[valid.flatten()]
    if ids.numel() == 0:
        return torch.zeros(1, dtype=torch.int32, device=seg.device), 0
    _, counts = torch.unique_consecutive(ids, return_counts=True)
    cu = torch.zeros(counts.numel() + 1, dtype=torch.int32, device=seg.device)
    cu[1:] = torch.cumsum(counts, 0)
    return cu, int(counts.max().item())


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      sliding_window=None, softcap=None, **kwargs):
    """transformers' attention-function signature over flashattn: see the module docstring."""
    batch, _, seqlen_q, _ = query.shape
    seqlen_k = key.shape[2]
    causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", True)))
    if sliding_window is None:
        sliding_window = getattr(module, "sliding_window", None)
    if softcap is None:
        softcap = getattr(module, "attn_logit_softcapping", None)
    window = _window(sliding_window, causal)
    opts = dict(dropout_p=float(dropout or 0.0), softmax_scale=scaling, causal=causal,
                window_size=window, softcap=float(softcap or 0.0))
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None:  # padding-free, boundaries given
        max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
        if max_q is None or max_k is None:
            max_q = int((cu_q[1:] - cu_q[:-1]).max().item())
            max_k = int((cu_k[1:] - cu_k[:-1]).max().item())
        out = flash_attn_varlen_func(q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:]),
                                     v.reshape(-1, *v.shape[2:]), cu_q.int(), cu_k.int(),
                                     int(max_q), int(max_k), **opts)
        return out.reshape(batch, seqlen_q, *out.shape[1:]), None

    key_valid, allowed = None, None
    if attention_mask is not None:
        if attention_mask.dim() == 2:
            key_valid = attention_mask[:, -seqlen_k:].bool()
        else:
            allowed = _allowed_from_4d(attention_mask, seqlen_k).expand(batch, seqlen_q, seqlen_k)
            key_valid = allowed.any(dim=1)
    if key_valid is not None and seqlen_q < seqlen_k:
        # A static cache's slots past the current tokens are masked in every row: drop them, so
        # that the queries are the last seqlen_q keys (bottom-right alignment) as with a
        # dynamic cache.
        used = key_valid.any(dim=0).nonzero()
        end = max(int(used[-1].item()) + 1, seqlen_q) if used.numel() else seqlen_k
        if end < seqlen_k:
            k, v, key_valid = k[:, :end], v[:, :end], key_valid[:, :end]
            if allowed is not None:
                allowed = allowed[:, :, :end]
            seqlen_k = end
    if key_valid is not None and bool(key_valid.all()):
        key_valid = None
    # Sequences packed by position_ids only where nothing is padded (transformers' rule too).
    segments = None
    if key_valid is None and seqlen_q == seqlen_k:
        segments = _segments(kwargs.get("position_ids"), batch, seqlen_q)
    query_valid = None if key_valid is None else key_valid[:, seqlen_k - seqlen_q:]

    if allowed is not None:  # never attend to what the mask forbids
        ours = _structure(batch, seqlen_q, seqlen_k, causal, window, query.device)[None]
        if key_valid is not None:
            ours = ours & key_valid[:, None, :] & query_valid[:, :, None]
        if segments is not None:
            ours = ours & (segments[:, :, None] == segments[:, None, :])
        if bool((ours & ~allowed).any()):
            raise ValueError("attention_mask is not the causal / sliding-window structure of "
                             "this layer plus key padding (or sequences packed by position_ids): "
                             "flashattn would attend to elements it masks")

    if key_valid is None and segments is None:
        return flash_attn_func(q, k, v, **opts), None

    if segments is not None:  # padding-free rows (seqlen_q == seqlen_k, nothing padded)
        valid = torch.ones(batch, seqlen_q, dtype=torch.bool, device=query.device)
        q_tok, indices, _, _, _ = unpad_input(q, valid)
        k_tok, v_tok = unpad_input(k, valid)[0], unpad_input(v, valid)[0]
        cu, max_len = _cu_from_segments(segments, valid)
        out = flash_attn_varlen_func(q_tok, k_tok, v_tok, cu, cu, max_len, max_len, **opts)
        return pad_input(out, indices, batch, seqlen_q), None

    q_tok, indices, cu_q, max_q, _ = unpad_input(q, query_valid)
    k_tok, _, cu_k, max_k, _ = unpad_input(k, key_valid)
    v_tok = unpad_input(v, key_valid)[0]
    out = flash_attn_varlen_func(q_tok, k_tok, v_tok, cu_q, cu_k, max_q, max_k, **opts)
    return pad_input(out, indices, batch, seqlen_q), None
