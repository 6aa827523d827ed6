"""Greedy generation through flash_attn_with_kvcache: a tiny decoder (random weights, GQA 4:2,
rotary, written here in a few lines of torch) generates 32 tokens per prompt for two prompts of
different lengths, once by recomputing every step from scratch with the float32 torch reference
attention (rotary applied by torch), once incrementally: each prompt prefilled into a paged cache
(page 16; the library appends k / v in place and rotates them and q), then both entries decoded
together, one token a step, with ragged cache_seqlens. In fp32 on the CPU the tokens must be the
same (the issue's check; a bf16 model would part ways at a near-tie, so tokens are compared in
fp32 only)."""
import torch

import flashattn
from attn_reference import attention

VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM, LAYERS, MAX_LEN, PAGE = 97, 64, 4, 2, 16, 2, 64, 16


def weights():
    g = torch.Generator().manual_seed(3)

    def w(*shape):
        return torch.randn(*shape, generator=g) / shape[0] ** 0.5
    layers = [dict(q=w(DIM, HEADS * HEAD_DIM), k=w(DIM, KV_HEADS * HEAD_DIM),
                   v=w(DIM, KV_HEADS * HEAD_DIM), o=w(HEADS * HEAD_DIM, DIM),
                   up=w(DIM, 2 * DIM), down=w(2 * DIM, DIM)) for _ in range(LAYERS)]
    return dict(emb=torch.randn(VOCAB, DIM, generator=g), out=w(DIM, VOCAB), layers=layers)


def rope_table():
    angle = torch.arange(MAX_LEN, dtype=torch.float64)[:, None] * \
        10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    return angle.cos().float(), angle.sin().float()


def rope(x, cos, sin, pos):
    """GPT-NeoX rotary of x (b, t, h, d) at positions pos (t,): what rotary_interleaved=False is."""
    half = HEAD_DIM // 2
    c, s = cos[pos][None, :, None, :], sin[pos][None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def block(h, lw, attend):
    b, t, _ = h.shape
    q = (h @ lw["q"]).view(b, t, HEADS, HEAD_DIM)
    k = (h @ lw["k"]).view(b, t, KV_HEADS, HEAD_DIM)
    v = (h @ lw["v"]).view(b, t, KV_HEADS, HEAD_DIM)
    h = h + attend(q, k, v).reshape(b, t, HEADS * HEAD_DIM) @ lw["o"]
    return h + torch.nn.functional.gelu(h @ lw["up"]) @ lw["down"]


def generate_reference(w, prompt, steps, cos, sin):
    tokens = list(prompt)
    for _ in range(steps):
        ids = torch.tensor([tokens])
        pos = torch.arange(len(tokens))
        h = w["emb"][ids]

        def attend(q, k, v):
            out, _ = attention(rope(q, cos, sin, pos), rope(k, cos, sin, pos), v, causal=True,
                               compute=torch.float32)
            return out
        for lw in w["layers"]:
            h = block(h, lw, attend)
        tokens.append(int((h[0, -1] @ w["out"]).argmax()))
    return tokens[len(prompt):]


def generate_with_cache(w, prompts, steps, cos, sin):
    batch = len(prompts)
    per = MAX_LEN // PAGE
    blocks = batch * per + 1
    g = torch.Generator().manual_seed(5)
    table = torch.randperm(blocks, generator=g)[:batch * per].reshape(batch, per).to(torch.int32)
    caches = [(torch.zeros(blocks, PAGE, KV_HEADS, HEAD_DIM),
               torch.zeros(blocks, PAGE, KV_HEADS, HEAD_DIM)) for _ in range(LAYERS)]
    lens = torch.zeros(batch, dtype=torch.int32)

    def run(ids, rows, seqlens):
        h = w["emb"][ids]
        for lw, (kc, vc) in zip(w["layers"], caches):
            def attend(q, k, v):
                return flashattn.flash_attn_with_kvcache(
                    q, kc, vc, k=k, v=v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens,
                    block_table=table[rows], causal=True, rotary_interleaved=False)
            h = block(h, lw, attend)
        return (h[:, -1] @ w["out"]).argmax(dim=-1)

    nxt = torch.zeros(batch, dtype=torch.long)
    for b, prompt in enumerate(prompts):  # prefill, one entry at a time (lengths differ)
        nxt[b] = run(torch.tensor([prompt]), slice(b, b + 1), lens[b:b + 1].clone())[0]
        lens[b] = len(prompt)
    out = [[int(nxt[b])] for b in range(batch)]
    for _ in range(steps - 1):  # decode: both entries, one new token each, ragged lengths
        nxt = run(nxt[:, None], slice(0, batch), lens.clone())
        lens += 1
        for b in range(batch):
            out[b].append(int(nxt[b]))
    return out


def test_greedy_generation_matches_recompute():
    w = weights()
    cos, sin = rope_table()
    prompts = [[5, 17, 3, 88, 41], [9, 2, 60, 60, 13, 71, 30, 4, 96]]
    got = generate_with_cache(w, prompts, 32, cos, sin)
    for prompt, tokens in zip(prompts, got):
        assert tokens == generate_reference(w, prompt, 32, cos, sin)
