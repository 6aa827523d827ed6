"""S_dmask for return_attn_probs=True: the attention probabilities with the dropout mask in their
sign, materialised in torch, for tests.

The library never forms the (seqlen_q, seqlen_k) matrix and its C ABI has no output for it, so the
probabilities are computed here from the call's inputs with the library's semantics (docs/api.md:
scale, softcap, ALiBi, causal / windows aligned bottom-right, GQA). The dropout mask is not
recomputed here: it is read from the library itself, so it is by construction the one its
forward and backward apply. A probe call on the CPU backend with q = 0 (every visible key gets
probability 1 / seqlen_k) and V = a block of the identity (output column t is key c0 + t's value)
exposes keep[b, h, i, c0 + t] as out[b, i, h, t] = keep / ((1 - p) seqlen_k); the mask depends only
on (seed, offset, sequence, head, row, column) (docs/dropout.md), not on the inputs, the masks or
the device, so this is the mask of the real call on CPU and CUDA alike.

Cost: the probability matrix in fp32 on q's device, and on the CPU ceil(seqlen_k / 256) probe
calls of the shape (batch, seqlen_q, heads, 256) against seqlen_k keys. Test-only.
"""
import torch

from . import _kernels

_ROUND = 128  # flash_attn rounds both sequence dimensions of S_dmask up to a multiple of 128
_PROBE_COLUMNS = 256  # the probe's head dim: key columns exposed per call (the library's maximum)


def _round_up(n):
    return (n + _ROUND - 1) // _ROUND * _ROUND


def _keep_mask(batch, heads, seqlen_q, seqlen_k, dropout_p, rng, cu_q=None, cu_k=None):
    """bool (batch, heads, seqlen_q, seqlen_k) on the CPU: the library's keep-mask of a call with
    this (seed, offset). Varlen (cu_q, cu_k given): total rows and keys are cu_q[-1] / cu_k[-1],
    each sequence indexed from 0 inside the result (rows and columns past it False)."""
    keep = torch.zeros(batch, heads, seqlen_q, seqlen_k, dtype=torch.bool)
    varlen = cu_q is not None
    if varlen:
        cu_q, cu_k = cu_q.cpu().tolist(), cu_k.cpu().tolist()
        rows, keys = cu_q[-1], cu_k[-1]
        key_pos = torch.cat([torch.arange(cu_k[s + 1] - cu_k[s]) for s in range(batch)])
    else:
        rows, keys = seqlen_q, seqlen_k
        key_pos = torch.arange(seqlen_k)
    if rows == 0 or keys == 0:
        return keep
    lead_q = (rows,) if varlen else (batch, rows)
    lead_k = (keys,) if varlen else (batch, keys)
    for c0 in range(0, seqlen_k, _PROBE_COLUMNS):
        width = min(_PROBE_COLUMNS, seqlen_k - c0)
        q = torch.zeros(*lead_q, heads, width)
        k = torch.zeros(*lead_k, heads, width)
        # v[key, :, t] = 1 where the key's position in its sequence is c0 + t.
        onehot = (key_pos[:, None] == torch.arange(c0, c0 + width)[None, :]).float()
        if not varlen:
            onehot = onehot.expand(batch, keys, width)
        v = onehot.reshape(*lead_k, 1, width).expand(*lead_k, heads, width).contiguous()
        if varlen:
            out, _ = _kernels.forward(q, k, v, torch.tensor(cu_q, dtype=torch.int32),
                                      torch.tensor(cu_k, dtype=torch.int32), seqlen_q, seqlen_k,
                                      dropout_p, 0.0, False, -1, -1, 0.0, None, rng)
            for s in range(batch):
                n_q, n_k = cu_q[s + 1] - cu_q[s], cu_k[s + 1] - cu_k[s]
                if n_q == 0 or n_k <= c0:
                    continue
                kept = 0.5 / ((1.0 - dropout_p) * n_k)
                cols = min(width, n_k - c0)
                part = out[cu_q[s]:cu_q[s + 1], :, :cols].permute(1, 0, 2)  # (heads, n_q, cols)
                keep[s, :, :n_q, c0:c0 + cols] = part > kept
        else:
            out, _ = _kernels.forward(q, k, v, None, None, 0, 0, dropout_p, 0.0, False, -1, -1,
                                      0.0, None, rng)
            kept = 0.5 / ((1.0 - dropout_p) * seqlen_k)
            keep[:, :, :, c0:c0 + width] = out.permute(0, 2, 1, 3) > kept
    return keep


def _probabilities(q, k, scale, causal, window_left, window_right, softcap, alibi):
    """fp32 softmax probabilities (heads, seqlen_q, seqlen_k) of one sequence: q (sq, hq, d),
    k (sk, hk, d); alibi None or fp32 (hq,). Rows that see no key are 0."""
    sq, hq, d = q.shape
    sk, hk = k.shape[0], k.shape[1]
    qf = q.float()
    kf = k.float().repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("qhd,khd->hqk", qf, kf) * (scale if scale else d ** -0.5)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    pos = torch.arange(sq, device=q.device)[:, None] + (sk - sq)  # query i's key position
    j = torch.arange(sk, device=q.device)[None, :]
    if alibi is not None:
        s = s - alibi.float()[:, None, None] * (pos - j).abs().float()
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    right = 0 if causal else window_right
    if window_left >= 0:
        visible &= j >= pos - window_left
    if right >= 0:
        visible &= j <= pos + right
    s = s.masked_fill(~visible, float("-inf"))
    empty = ~visible.any(dim=-1)
    p = torch.softmax(s.masked_fill(empty[:, None], 0.0), dim=-1)
    return p.masked_fill(empty[:, None], 0.0)


def s_dmask(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, scale,
            causal, window_left, window_right, softcap, alibi_slopes, rng):
    """(batch, heads_q, round128(seqlen_q), round128(seqlen_k)) in q's dtype: softmax
    probabilities before dropout's 1/(1-p) scale, negated where dropout drops the element
    (-0.0 for a dropped element whose probability is 0); zero in the rounding margin."""
    varlen = cu_seqlens_q is not None
    heads = q.shape[-2]
    if varlen:
        batch = cu_seqlens_q.numel() - 1
        sq, sk = max_seqlen_q, max_seqlen_k
        cu_q, cu_k = cu_seqlens_q.cpu().tolist(), cu_seqlens_k.cpu().tolist()
        seqs = [(q[cu_q[s]:cu_q[s + 1]], k[cu_k[s]:cu_k[s + 1]]) for s in range(batch)]
    else:
        batch, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        seqs = [(q[b], k[b]) for b in range(batch)]
    keep = _keep_mask(batch, heads, sq, sk, dropout_p, rng, cu_seqlens_q if varlen else None,
                      cu_seqlens_k if varlen else None).to(q.device)
    probs = torch.zeros(batch, heads, _round_up(sq), _round_up(sk), dtype=torch.float32,
                        device=q.device)
    for b, (qs, ks) in enumerate(seqs):
        if qs.shape[0] == 0 or ks.shape[0] == 0:
            continue
        alibi = None
        if alibi_slopes is not None:
            alibi = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
        probs[b, :, :qs.shape[0], :ks.shape[0]] = _probabilities(
            qs, ks, scale, causal, window_left, window_right, softcap, alibi)
    margin = probs[:, :, :sq, :sk]
    margin.copy_(torch.where(keep, margin, -margin))
    return probs.to(q.dtype)


try:  # test-only and data-dependent (.tolist(), per-sequence loops): never traced by dynamo
    from torch._dynamo import disable as _dynamo_disable
    s_dmask = _dynamo_disable(s_dmask)
except ImportError:  # torch 1.13: no dynamo
    pass
