"""Greedy generation of a Hugging Face Llama (random weights, built from a config: nothing
downloaded) through the library's paged KV-cache path gives the tokens of the same model run by
transformers (its SDPA attention where torch has it, else eager), in fp32 on the CPU.

The decode loop runs the model's own modules (embedding, norms, projections, MLP, head) and
replaces attention and the cache with flash_attn_with_kvcache: each layer's keys and values live
in one paged cache (page 16, the blocks a random permutation), the new keys and q are rotated by
the library from the model's rotary frequencies (NeoX layout, rotary_interleaved=False), prompts
of different lengths are prefilled one entry at a time and then decoded together with ragged
cache_seqlens. transformers decodes each prompt alone with its own cache (the model's forward
with past_key_values, greedy). 32 tokens each.

In bf16, on the CPU backend and on CUDA (where greedy tokens part ways at near-ties between any two exact
implementations) the same loop is teacher-forced with the fp32 reference's tokens and its logits
are held to the accuracy rule: their largest distance from the float64 model's logits is at most
twice that of the same model run by transformers' eager attention in bf16, plus 1e-5.
"""
import pytest
import torch

import flashattn
from conftest import import_transformers, requires_cuda, transformers_reference_impl

transformers = import_transformers()
if transformers is None:
    pytest.skip("transformers is not installed (scripts/setup.sh puts it in .deps/hf-venv)",
                allow_module_level=True)

STEPS, PAGE, MAX_LEN = 32, 16, 128


def make_model(impl):
    cfg = transformers.LlamaConfig(vocab_size=211, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=3, num_attention_heads=8,
                                   num_key_value_heads=2, max_position_embeddings=MAX_LEN,
                                   attn_implementation=impl)
    torch.manual_seed(3)  # the same random weights for both runs
    return transformers.LlamaForCausalLM(cfg).eval()


def rotary_tables(model):
    """cos / sin (positions, head_dim / 2) of the model's rotary embedding, fp32."""
    rot = model.model.rotary_emb
    angle = torch.arange(MAX_LEN, dtype=torch.float32)[:, None] * rot.inv_freq.float().cpu()[None, :]
    scale = float(getattr(rot, "attention_scaling", 1.0))
    return angle.cos() * scale, angle.sin() * scale


def generate_paged(model, prompts, forced=None):
    """Greedy tokens of each prompt (STEPS each) and the logits that chose them (a list of
    (batch, vocab) float32 tensors, one a step), through flash_attn_with_kvcache on the model's
    device and dtype. forced: tokens to feed instead of the greedy choice (teacher forcing; one
    list per prompt, STEPS - 1 long at least)."""
    cfg = model.config
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = cfg.hidden_size // heads
    device, dtype = model.lm_head.weight.device, model.lm_head.weight.dtype
    batch, per = len(prompts), MAX_LEN // PAGE
    blocks = batch * per + 3
    gen = torch.Generator().manual_seed(11)
    table = torch.randperm(blocks, generator=gen)[:batch * per].reshape(batch, per)
    table = table.to(device=device, dtype=torch.int32)
    caches = [(torch.zeros(blocks, PAGE, kv_heads, head_dim, device=device, dtype=dtype),
               torch.zeros(blocks, PAGE, kv_heads, head_dim, device=device, dtype=dtype))
              for _ in model.model.layers]
    cos, sin = (t.to(device) for t in rotary_tables(model))
    lens = torch.zeros(batch, dtype=torch.int32, device=device)

    def run(ids, rows, seqlens):
        h = model.model.embed_tokens(ids)
        b, t = ids.shape
        for layer, (kc, vc) in zip(model.model.layers, caches):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(b, t, heads, head_dim)
            k = attn.k_proj(x).view(b, t, kv_heads, head_dim)
            v = attn.v_proj(x).view(b, t, kv_heads, head_dim)
            o = flashattn.flash_attn_with_kvcache(
                q, kc, vc, k=k, v=v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens,
                block_table=table[rows], causal=True, rotary_interleaved=False,
                softmax_scale=head_dim ** -0.5)
            h = h + attn.o_proj(o.reshape(b, t, heads * head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return model.lm_head(model.model.norm(h))[:, -1].float()

    out, logits = [[] for _ in prompts], []
    with torch.no_grad():
        step = torch.zeros(batch, cfg.vocab_size, device=device)
        for b, prompt in enumerate(prompts):  # prefill one entry at a time (lengths differ)
            step[b] = run(torch.tensor([prompt], device=device), slice(b, b + 1),
                          lens[b:b + 1].clone())[0]
            lens[b] = len(prompt)
        for i in range(STEPS):
            logits.append(step.cpu())
            nxt = step.argmax(dim=-1)
            for b in range(batch):
                out[b].append(int(nxt[b]))
            if i == STEPS - 1:
                break
            if forced is not None:
                nxt = torch.tensor([f[i] for f in forced], device=device)
            step = run(nxt[:, None], slice(0, batch), lens.clone())  # both entries together
            lens += 1
    return out, logits


def generate_transformers(model, prompt):
    """Greedy decoding by the model's own forward with its own KV cache (past_key_values), one
    token a step (model.generate needs torch.distributed pieces Debian's torch 1.13 lacks)."""
    tokens, past = [], None
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(STEPS):
            res = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = int(res.logits[0, -1].argmax())
            tokens.append(nxt)
            ids = torch.tensor([[nxt]])
    return tokens


PROMPTS = [[5, 17, 3, 88, 41, 7, 200], [9, 2, 60, 60, 13, 71, 30, 4, 96, 150, 1, 33, 8]]


def test_paged_greedy_generation_matches_transformers():
    prompts = PROMPTS
    ours, _ = generate_paged(make_model("eager"), prompts)  # attention replaced: impl unused
    reference = make_model(transformers_reference_impl(transformers))
    for prompt, tokens in zip(prompts, ours):
        assert len(tokens) == STEPS
        assert tokens == generate_transformers(reference, prompt)


def full_logits(model, sequence):
    """The model's logits (positions, vocab) over one whole sequence, float32 on the CPU."""
    ids = torch.tensor([sequence], device=model.lm_head.weight.device)
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits[0].float().cpu()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_paged_bf16_logits_meet_the_rule(device):
    # The tokens: the fp32 reference's greedy continuation of each prompt, fed to every run.
    reference = make_model(transformers_reference_impl(transformers))
    tokens = [generate_transformers(reference, prompt) for prompt in PROMPTS]
    ours_model = make_model("eager").to(device=device, dtype=torch.bfloat16)
    _, ours = generate_paged(ours_model, PROMPTS, forced=tokens)
    exact = make_model("eager").double()  # the oracle: float64 on the CPU
    naive = make_model("eager").to(device=device, dtype=torch.bfloat16)  # bf16, eager attention
    err_ours = err_naive = 0.0
    for b, (prompt, toks) in enumerate(zip(PROMPTS, tokens)):
        seq = prompt + toks[:-1]  # position len(prompt) - 1 + i chose token i
        want = full_logits(exact, seq)[len(prompt) - 1:]
        got_naive = full_logits(naive, seq)[len(prompt) - 1:]
        got_ours = torch.stack([step[b] for step in ours])
        assert got_ours.shape == want.shape and torch.isfinite(got_ours).all()
        err_ours = max(err_ours, float((got_ours.double() - want).abs().max()))
        err_naive = max(err_naive, float((got_naive.double() - want).abs().max()))
    assert err_naive > 0  # bf16 rounding shows: the check can fail
    assert err_ours <= 2 * err_naive + 1e-5, (err_ours, err_naive)
