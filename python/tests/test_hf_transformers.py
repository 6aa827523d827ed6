"""flashattn.integrations.transformers: tiny Hugging Face models with random weights (built from
configs, nothing downloaded) give the reference implementation's logits and gradients with their
attention routed through flashattn.

Models: a Llama (GQA 4:2) and a Gemma-2-style config (attention-logit softcap, a sliding window
shorter than the sequence on every other layer, query_pre_attn_scalar != head_dim). Batches:
dense, padded (left and right padding in one batch: varlen from the attention mask) and
padding-free (two sequences packed into one row by position_ids, against each run alone).

Reference: transformers' SDPA implementation for the Llama where transformers runs it (torch >=
2.1.1), else its eager one (Debian's torch 1.13, which CI has, with transformers 4.49); Gemma-2
against eager, the implementation that applies its softcap. Judged by the library's accuracy
rule: flashattn's fp32 model is within 2x (logits) / 3x (gradients) of the reference
implementation's own fp32 distance to its fp64 model, + 1e-5 / 1e-4; only positions holding
tokens are compared.
"""
import pytest
import torch

from conftest import CUDA, import_transformers, library_has_cuda, transformers_reference_impl

transformers = import_transformers()
if transformers is None:
    pytest.skip("transformers is not installed (scripts/setup.sh puts it in .deps/hf-venv)",
                allow_module_level=True)

from flashattn.integrations import transformers as fa_hf  # noqa: E402

IMPL = fa_hf.register()
VOCAB = 257


LLAMA_REF = transformers_reference_impl(transformers)


def llama(impl, dtype, device="cpu"):
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256,
                                   attn_implementation=impl)
    torch.manual_seed(0)  # identical random weights for every implementation
    return transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype)


def gemma2(impl, dtype, device="cpu"):
    cfg = transformers.Gemma2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=16, sliding_window=8,
                                    attn_logit_softcapping=2.0, final_logit_softcapping=30.0,
                                    query_pre_attn_scalar=32, max_position_embeddings=256,
                                    initializer_range=0.3, attn_implementation=impl)
    torch.manual_seed(0)
    return transformers.Gemma2ForCausalLM(cfg).to(device=device, dtype=dtype)


MODELS = {"llama": (llama, LLAMA_REF), "gemma2": (gemma2, "eager")}


def run(build, impl, dtype, ids, weights, device="cpu", **inputs):
    """(logits fp32, gradients of sum(logits * weights) w.r.t. three parameters)."""
    model = build(impl, dtype, device)
    assert model.config._attn_implementation == impl
    logits = model(input_ids=ids, use_cache=False, **inputs).logits
    params = [model.model.layers[0].self_attn.q_proj.weight,
              model.model.layers[1].self_attn.k_proj.weight, model.model.embed_tokens.weight]
    loss = (logits * weights.to(device=device, dtype=logits.dtype)).sum()
    return logits.float().cpu(), [g.float().cpu() for g in torch.autograd.grad(loss, params)]


def err(a, b, where=None):
    d = (a.double() - b.double()).abs()
    if where is not None:
        d = d[where]
    return d.max().item()


def check(name, got, ref32, ref64, where=None):
    (lg, gg), (lr, gr), (l64, g64) = got, ref32, ref64
    e, base = err(lg, l64, where), err(lr, l64, where)
    assert e <= 2 * base + 1e-5, f"{name} logits: {e:.3g} > 2 x {base:.3g} + 1e-5"
    for i, (a, r, x) in enumerate(zip(gg, gr, g64)):
        e, base = err(a, x), err(r, x)
        assert e <= 3 * base + 1e-4, f"{name} grad {i}: {e:.3g} > 3 x {base:.3g} + 1e-4"


@pytest.fixture
def calls(monkeypatch):
    """The flashattn calls the integration makes: (function, options, key rows) per call, key
    rows being k.shape[-3]: seqlen_k of every batch row for the dense function, the packed total
    for varlen."""
    seen = []

    def spy(fn, label):
        def wrapped(*args, **kw):
            seen.append((label, kw, args[1].shape[-3]))
            return fn(*args, **kw)
        return wrapped
    monkeypatch.setattr(fa_hf, "flash_attn_func", spy(fa_hf.flash_attn_func, "dense"))
    monkeypatch.setattr(fa_hf, "flash_attn_varlen_func",
                        spy(fa_hf.flash_attn_varlen_func, "varlen"))
    return seen


def three_ways(model, ids, weights, **inputs):
    build, ref = MODELS[model]
    got = run(build, IMPL, torch.float32, ids, weights, **inputs)
    ref32 = run(build, ref, torch.float32, ids, weights, **inputs)
    ref64 = run(build, ref, torch.float64, ids, weights, **inputs)
    return got, ref32, ref64


def ids_and_weights(batch, seqlen, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, VOCAB, (batch, seqlen), generator=g),
            torch.randn(batch, seqlen, VOCAB, generator=g))


@pytest.mark.parametrize("model", ["llama", "gemma2"])
def test_dense_batch(model, calls):
    ids, w = ids_and_weights(2, 37)
    got, ref32, ref64 = three_ways(model, ids, w)
    assert [c[0] for c in calls] == ["dense", "dense"], "attention was not routed to flashattn"
    if model == "gemma2":  # the config's softcap and the sliding layer's window reached it
        opts = [c[1] for c in calls]
        assert all(o["softcap"] == 2.0 and o["softmax_scale"] == 32 ** -0.5 for o in opts)
        assert sorted(o["window_size"] for o in opts) == [(-1, -1), (7, 0)]
    check(model, got, ref32, ref64)


def padded_batch():
    ids, w = ids_and_weights(3, 30)
    mask = torch.ones(3, 30, dtype=torch.long)
    mask[1, 19:] = 0  # right padding
    mask[2, :11] = 0  # left padding
    # Positions count tokens, as generate() sets them; outputs at padding carry no weight.
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, w * mask[:, :, None], mask, position_ids


def rows_alone(build, impl, dtype, ids, w, mask):
    """Each row's tokens run alone (no padding): logits at the tokens' places, summed grads.
    The reference of padded batches: transformers' eager attention in fp64 gives NaN for a
    left-padded row (its fully masked rows' minimum turns -inf in the fp32 softmax)."""
    logits, grads = torch.zeros(ids.shape + (VOCAB,)), None
    for r in range(ids.shape[0]):
        sel = mask[r].bool()
        lg, gr = run(build, impl, dtype, ids[r:r + 1, sel], w[r:r + 1, sel])
        logits[r, sel] = lg[0]
        grads = gr if grads is None else [a + b for a, b in zip(grads, gr)]
    return logits, grads


@pytest.mark.parametrize("model", ["llama", "gemma2"])
def test_padded_batch_runs_varlen(model, calls):
    ids, w, mask, position_ids = padded_batch()
    build, ref = MODELS[model]
    got = run(build, IMPL, torch.float32, ids, w, attention_mask=mask, position_ids=position_ids)
    assert [c[0] for c in calls] == ["varlen", "varlen"]
    ref32 = rows_alone(build, ref, torch.float32, ids, w, mask)
    ref64 = rows_alone(build, ref, torch.float64, ids, w, mask)
    check(model, got, ref32, ref64, where=mask.bool())
    # And the reference implementation's own padded fp32 run agrees at the tokens.
    same = run(build, ref, torch.float32, ids, w, attention_mask=mask, position_ids=position_ids)
    assert err(got[0], same[0], mask.bool()) < 1e-4


@pytest.mark.parametrize("model", ["llama", "gemma2"])
def test_padding_free_row_equals_sequences_run_alone(model, calls):
    lens = (23, 14)
    ids, w = ids_and_weights(1, sum(lens))
    position_ids = torch.cat([torch.arange(n) for n in lens])[None]
    build, ref = MODELS[model]
    got = run(build, IMPL, torch.float32, ids, w, position_ids=position_ids)
    assert [c[0] for c in calls] == ["varlen", "varlen"]

    def alone(impl, dtype):
        logits, grads, start = [], None, 0
        for n in lens:
            lg, gr = run(build, impl, dtype, ids[:, start:start + n], w[:, start:start + n])
            logits.append(lg)
            grads = gr if grads is None else [a + b for a, b in zip(grads, gr)]
            start += n
        return torch.cat(logits, dim=1), grads
    check(model, got, alone(ref, torch.float32), alone(ref, torch.float64))


def kv_cache(model, batch, max_len):
    """The cache generate() gives the model. Gemma-2: transformers 4.x's HybridCache (static slots,
    a window on the sliding layers); 5.x has none, and there generate() and Gemma2Model itself make
    DynamicCache(config=...), whose sliding layers keep the last sliding_window - 1 tokens."""
    if isinstance(model, transformers.Gemma2ForCausalLM):
        if hasattr(transformers, "HybridCache"):
            return transformers.HybridCache(model.config, max_batch_size=batch,
                                            max_cache_len=max_len, dtype=torch.float32)
        return transformers.DynamicCache(config=model.config)
    return transformers.DynamicCache()


def greedy(model, ids, mask, steps):
    """Greedy decoding with a KV cache, one token a step (a loop rather than generate(), whose
    imports fail on Debian's torch 1.13): every step after the prompt is a seqlen_q = 1 call
    against the cached keys."""
    cache = kv_cache(model, ids.shape[0], ids.shape[1] + steps)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    cache_position = torch.arange(ids.shape[1])
    step_ids, out = ids, []
    for _ in range(steps):
        logits = model(input_ids=step_ids, attention_mask=mask, position_ids=position_ids,
                       past_key_values=cache, use_cache=True,
                       cache_position=cache_position).logits
        step_ids = logits[:, -1].argmax(-1, keepdim=True)
        out.append(step_ids)
        mask = torch.cat([mask, torch.ones_like(step_ids)], dim=1)
        position_ids = position_ids[:, -1:] + 1
        cache_position = cache_position[-1:] + 1
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("model", ["llama", "gemma2"])
def test_greedy_decoding_with_a_kv_cache_left_padded(model, calls):
    if model == "gemma2" and not hasattr(torch, "_dynamo"):
        pytest.skip("transformers' Gemma-2 hybrid cache needs torch._dynamo (torch >= 2.0), and "
                    "its eager attention fails with a dynamic cache")
    build, ref = MODELS[model]
    g = torch.Generator().manual_seed(5)
    prompt, pad, steps = 13, 4, 12
    ids = torch.randint(0, VOCAB, (2, prompt), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :pad] = 0
    tokens = {}
    for impl in (IMPL, ref):
        with torch.no_grad():
            tokens[impl] = greedy(build(impl, torch.float32).eval(), ids, mask, steps)
    # One call per layer and step (2 layers); the first two are the prompt's.
    assert len(calls) == 2 * steps
    assert [c[0] for c in calls[:2]] == ["varlen", "varlen"], "the left-padded prompt ran dense"
    # A decode step may run dense only when the keys it is handed (the cache's latest tokens)
    # hold none of row 1's padding, as transformers' own flash path does (5.17:
    # masking_utils.flash_attention_mask gives no mask then, and _flash_attention_forward unpads
    # whenever it has one, at any query length). Full-attention layers see the padding at every
    # step, so they run varlen in every version; Gemma-2's sliding layers (window 8) are handed
    # the last 8 tokens from the first decode step on (4.49 HybridCache: 8 rolling slots; 5.17
    # DynamicCache(config=...): the 7 cached + the new one), which lie past the padding.
    for i, (fn, _, keys) in enumerate(calls[2:]):
        tokens_so_far = prompt + 1 + i // 2  # padding included
        assert fn == "varlen" or keys <= tokens_so_far - pad, (
            f"decode call {i} ran dense over {keys} keys, which include row 1's {pad} padded "
            "ones: did the padding mask reach the integration? (transformers 5.x hands none to "
            "an attention function not registered in AttentionMaskInterface)")
    assert torch.equal(tokens[IMPL], tokens[ref]), (tokens[IMPL], tokens[ref])


def test_padding_free_from_cu_seq_lens_keywords():
    # FlashAttentionKwargs: boundaries handed over directly (batch 1, packed).
    q = torch.randn(1, 4, 20, 16)
    k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16)
    cu = torch.tensor([0, 7, 20], dtype=torch.int32)

    class Attn(torch.nn.Module):
        is_causal = True
    out, weights = fa_hf.attention_forward(Attn(), q, k, v, None, cu_seq_lens_q=cu,
                                           cu_seq_lens_k=cu, max_length_q=13, max_length_k=13)
    assert weights is None and out.shape == (1, 20, 4, 16)
    pid = torch.cat([torch.arange(7), torch.arange(13)])[None]
    by_positions, _ = fa_hf.attention_forward(Attn(), q, k, v, None, position_ids=pid)
    torch.testing.assert_close(out, by_positions, rtol=0, atol=0)


def test_static_cache_slots_past_the_tokens_are_dropped():
    # A static cache: 10 slots, 6 in use (row 1 left-padded by 2), one new query at slot 5; the
    # 4D mask masks the unused slots in every row. Expected: each row's attention over its keys.
    class Attn(torch.nn.Module):
        is_causal = True
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 1, 16, generator=g)
    k, v = torch.randn(2, 2, 10, 16, generator=g), torch.randn(2, 2, 10, 16, generator=g)
    j = torch.arange(10)
    allowed = torch.stack([(j < 6), (j < 6) & (j >= 2)])[:, None, None, :]
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    for mask in (allowed, additive):
        out, _ = fa_hf.attention_forward(Attn(), q, k, v, mask)
        for r, start in enumerate((0, 2)):
            ref = fa_hf.flash_attn_func(q[r:r + 1].transpose(1, 2),
                                        k[r:r + 1, :, start:6].transpose(1, 2),
                                        v[r:r + 1, :, start:6].transpose(1, 2), causal=True)
            torch.testing.assert_close(out[r:r + 1], ref, rtol=0, atol=1e-6)


def test_masks_it_cannot_honour_are_refused():
    class Attn(torch.nn.Module):
        is_causal = True
    q = k = v = torch.randn(1, 2, 6, 8)
    bias = torch.zeros(1, 1, 6, 6)
    bias[..., 0] = -1.0  # an additive bias, not a mask
    with pytest.raises(ValueError, match="bias"):
        fa_hf.attention_forward(Attn(), q, k, v, bias)
    stricter = torch.tril(torch.ones(6, 6, dtype=torch.bool))[None, None].clone()
    stricter[..., 5, 2] = False  # a hole the causal structure does not have
    with pytest.raises(ValueError, match="would attend"):
        fa_hf.attention_forward(Attn(), q, k, v, stricter)
    with pytest.raises(ValueError, match="flash"):
        fa_hf.register("my_flash_impl")


@pytest.mark.skipif(not (CUDA and library_has_cuda()),
                    reason="needs a CUDA device and a library built with CUDA")
@pytest.mark.parametrize("model", ["llama", "gemma2"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
def test_cuda_by_the_rule(model, dtype, padded):
    build, ref = MODELS[model]
    ids, w, mask, position_ids = padded_batch()
    if not padded:
        mask = torch.ones_like(mask)
        position_ids = torch.arange(ids.shape[1]).expand(ids.shape)
    kw = dict(attention_mask=mask.cuda(), position_ids=position_ids.cuda())
    got = run(build, IMPL, dtype, ids.cuda(), w, device="cuda", **kw)
    low = run(build, ref, dtype, ids.cuda(), w, device="cuda", **kw)
    high = run(build, ref, torch.float32, ids.cuda(), w, device="cuda", **kw)
    (lg, gg), (lr, gr), (lh, gh) = got, low, high
    where = mask.bool()
    assert err(lg, lh, where) <= 2 * err(lr, lh, where) + 1e-3
    for a, r, x in zip(gg, gr, gh):
        assert err(a, x) <= 3 * err(r, x) + 1e-3
