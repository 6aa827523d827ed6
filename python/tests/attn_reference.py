"""Plain materialising attention in torch, the oracle of the binding's tests.

softmax(scale * q kᵀ) v with FlashAttention's semantics written out independently of the library:
softcap, then an optional bias / mask (attn_bias), then ALiBi on the logits, masks aligned bottom-right (query i sits at key position
i + seqlen_k - seqlen_q), GQA by repeating kv heads, empty rows giving out 0 and LSE -inf, and
dropout as an explicit keep mask scaled by 1 / (1 - p).
"""
import torch


def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, scale=None,
              keep=None, dropout_p=0.0, compute=torch.float64, bias=None):
    """q (b, sq, hq, d), k/v (b, sk, hk, d) -> out (b, sq, hq, d) in `compute`, lse (b, hq, sq).

    keep: optional bool (b, hq, sq, sk) dropout keep mask. bias: optional, broadcastable to
    (b, hq, sq, sk): float added to the logits, bool / int8 hiding the keys where False / 0.
    Differentiable (autograd) in q, k, v and a float bias."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    scale = d ** -0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        if bias.dtype in (torch.bool, torch.int8):
            s = s.masked_fill(bias == 0, float("-inf"))
        else:
            s = s + bias.to(compute)
    pos = torch.arange(sq, device=q.device)[:, None] + (sk - sq)  # query i's key position
    j = torch.arange(sk, device=q.device)[None, :]
    if alibi is not None:
        slopes = alibi.to(compute).reshape(-1 if alibi.dim() == 2 else 1, hq)
        s = s - slopes[:, :, None, None] * (pos - j).abs().to(compute)
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    left, right = window
    if causal:  # causal is window_right = 0, whatever the window says
        right = 0
    if left >= 0:
        visible &= j >= pos - left
    if right >= 0:
        visible &= j <= pos + right
    s = s.masked_fill(~visible, float("-inf"))
    empty = (s == float("-inf")).all(dim=-1, keepdim=True)  # rows that see no key
    # Softmax over a row that sees nothing would be NaN (and poison autograd); give such rows
    # finite logits, then zero their probabilities.
    s_safe = s.masked_fill(empty, 0.0)
    p = torch.softmax(s_safe, dim=-1) * (~empty).to(compute)
    lse = torch.logsumexp(s_safe, dim=-1).masked_fill(empty[..., 0], float("-inf"))
    if keep is not None:
        p = p * keep.to(compute) / (1.0 - dropout_p)
    out = torch.einsum("bhqk,bkhd->bqhd", p, v)
    return out, lse


def attention_varlen(q, k, v, cu_q, cu_k, **kw):
    """Packed batches: runs attention() per sequence. q (total_q, hq, d) -> out, lse (hq, total_q)."""
    outs, lses = [], []
    for i in range(len(cu_q) - 1):
        qs = q[int(cu_q[i]):int(cu_q[i + 1])][None]
        ks = k[int(cu_k[i]):int(cu_k[i + 1])][None]
        vs = v[int(cu_k[i]):int(cu_k[i + 1])][None]
        if qs.shape[1] == 0:
            continue
        if ks.shape[1] == 0:  # no keys: every row is empty
            outs.append(torch.zeros(qs.shape[1:], dtype=kw.get("compute", torch.float64)))
            lses.append(torch.full((q.shape[1], qs.shape[1]), float("-inf"),
                                   dtype=kw.get("compute", torch.float64)))
            continue
        kw_seq = dict(kw)
        if kw.get("alibi") is not None and kw["alibi"].dim() == 2:
            kw_seq["alibi"] = kw["alibi"][i]
        o, l = attention(qs, ks, vs, **kw_seq)
        outs.append(o[0])
        lses.append(l[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def max_err(a, b):
    """max |a - b| over finite entries; -inf entries must match exactly (else inf)."""
    a, b = a.double(), b.double()
    inf_a, inf_b = torch.isinf(a), torch.isinf(b)
    if not torch.equal(inf_a, inf_b) or not torch.equal(a[inf_a], b[inf_b]):
        return float("inf")
    diff = (a - b)[~inf_a]
    return 0.0 if diff.numel() == 0 else diff.abs().max().item()
