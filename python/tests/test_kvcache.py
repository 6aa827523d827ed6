"""flash_attn_with_kvcache on CPU tensors (fa_params 0.3): the caches updated in place (bit for
bit: v and unrotated k copied, rotated k as this file's own fp32 formula gives it), out and
softmax_lse against the float64 torch reference by FlashAttention's accuracy rule, over dense and
paged caches (page sizes 1, 16, 256 and one dividing nothing), cache_batch_idx, cache_leftpad,
rotary in both layouts (rotary_dim < and = headdim), causal / window / softcap / ALiBi, GQA and
MQA, num_splits 1 / forced / heuristic; the signature is flash_attn's; errors. On a GPU the same
cases run on CUDA tensors (the cuda-kvcache family)."""
import inspect

import pytest
import torch

import flashattn
from attn_reference import attention, max_err
from conftest import requires_cuda


def rope(x, cos, sin, pos, interleaved):
    """x (n, h, d) float32 rotated at positions pos (n,) in its first 2 * cos.shape[1] dims."""
    half = cos.shape[1]
    c = cos[pos].float()[:, None, :]
    s = sin[pos].float()[:, None, :]
    y = x.clone()
    if interleaved:
        x1, x2 = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        y[..., 0:2 * half:2] = x1 * c - x2 * s
        y[..., 1:2 * half:2] = x1 * s + x2 * c
    else:
        x1, x2 = x[..., :half], x[..., half:2 * half]
        y[..., :half] = x1 * c - x2 * s
        y[..., half:2 * half] = x1 * s + x2 * c
    return y


def rows_of(cache, table, b, start, end):
    """Keys [start, end) of entry b: a (n, hk, d) view-copy of a dense row or gathered pages."""
    if table is None:
        return cache[b, start:end]
    page = cache.shape[1]
    t = torch.arange(start, end)
    return cache[table[b, t // page].long(), t % page]


def make(gen, dtype, b, hq, hk, d, sq, cap, lens, page=0, rows=None, new=0, rd=0, leftpad=None):
    """Inputs of one call; caches NaN outside each entry's old keys (so a stray read shows)."""
    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)
    q = rnd(b, sq, hq, d)
    table = None
    if page:
        per = -(-cap // page)
        blocks = b * per + 2
        k_cache = torch.full((blocks, page, hk, d), float("nan"), dtype=dtype)
        table = torch.randperm(blocks, generator=gen)[:b * per].reshape(b, per).to(torch.int32)
    else:
        k_cache = torch.full((rows or b, cap, hk, d), float("nan"), dtype=dtype)
    v_cache = k_cache.clone()
    idx = None if rows is None else torch.randperm(rows, generator=gen)[:b].to(torch.int32)
    for i in range(b):
        start = 0 if leftpad is None else int(leftpad[i])
        n = int(lens[i]) - start
        if n <= 0:
            continue
        target = i if idx is None else int(idx[i])
        if page:
            t = torch.arange(start, int(lens[i]))
            blk, r = table[i, t // page].long(), t % page
            k_cache[blk, r] = rnd(n, hk, d)
            v_cache[blk, r] = rnd(n, hk, d)
        else:
            k_cache[target, start:int(lens[i])] = rnd(n, hk, d)
            v_cache[target, start:int(lens[i])] = rnd(n, hk, d)
    k = rnd(b, new, hk, d) if new else None
    v = rnd(b, new, hk, d) if new else None
    cos = sin = None
    if rd:
        ro = cap + sq
        angle = torch.arange(ro, dtype=torch.float64)[:, None] * \
            10000.0 ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
        cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    return q, k_cache, v_cache, k, v, cos, sin, table, idx


def expected(q, k_cache, v_cache, k, v, cos, sin, lens, table, idx, leftpad, interleaved,
             advance, **kw):
    """(k_cache, v_cache after the call, ref out / lse in float64, the same-precision naive
    out (rounded to the dtype) / lse in float32)."""
    dtype = q.dtype
    kc, vc = k_cache.clone(), v_cache.clone()
    b, sq = q.shape[0], q.shape[1]
    new = 0 if k is None else k.shape[1]
    outs, lses, naives, naive_lses = [], [], [], []
    for i in range(b):
        cl = int(lens[i])
        row = i if idx is None else int(idx[i])
        if new:
            kn = k[i].float()
            if cos is not None:
                kn = rope(kn, cos, sin, torch.arange(cl, cl + new), interleaved)
            t = torch.arange(cl, cl + new)
            if table is None:
                kc[row, cl:cl + new] = kn.to(dtype)
                vc[row, cl:cl + new] = v[i]
            else:
                page = kc.shape[1]
                blk, r = table[i, t // page].long(), t % page
                kc[blk, r] = kn.to(dtype)
                vc[blk, r] = v[i]
        qi = q[i].float()
        if cos is not None:
            qi = rope(qi, cos, sin, cl + (torch.arange(sq) if advance else torch.zeros(sq, dtype=torch.long)), interleaved)
        qi = qi.to(dtype)[None]
        start = 0 if leftpad is None else int(leftpad[i])
        src_k = kc if table is not None else kc[row:row + 1].expand(b, *kc.shape[1:])
        src_v = vc if table is not None else vc[row:row + 1].expand(b, *vc.shape[1:])
        ki = rows_of(src_k, table, i, start, cl + new)[None]
        vi = rows_of(src_v, table, i, start, cl + new)[None]
        alibi = kw.get("alibi")
        kwi = dict(kw, alibi=None if alibi is None else (alibi[i] if alibi.dim() == 2 else alibi))
        if ki.shape[1] == 0:
            hq = q.shape[2]
            outs.append(torch.zeros(1, sq, hq, q.shape[3], dtype=torch.float64))
            lses.append(torch.full((1, hq, sq), float("-inf"), dtype=torch.float64))
            naives.append(torch.zeros(1, sq, hq, q.shape[3], dtype=dtype))
            naive_lses.append(lses[-1].float())
            continue
        o, l = attention(qi, ki, vi, compute=torch.float64, **kwi)
        n, nl = attention(qi, ki, vi, compute=torch.float32, **kwi)
        outs.append(o)
        lses.append(l)
        naives.append(n.to(dtype))
        naive_lses.append(nl)
    return (kc, vc, torch.cat(outs), torch.cat(lses), torch.cat(naives), torch.cat(naive_lses))


def same_bytes(a, b):
    return torch.equal(a.view(torch.int16) if a.element_size() == 2 else a.view(torch.int32),
                       b.view(torch.int16) if b.element_size() == 2 else b.view(torch.int32))


CASES = [
    # dtype, b, hq, hk, d, sq, cap, lens, page, rows, new, rd, interleaved, leftpad, options
    (torch.bfloat16, 3, 8, 2, 64, 1, 300, [200, 0, 113], 16, None, 1, 64, True, None,
     dict(causal=True), 1),
    (torch.float16, 3, 4, 4, 32, 1, 300, [299, 0, 5], 256, None, 1, 16, False, None,
     dict(causal=True, alibi="h"), 0),
    (torch.float32, 2, 8, 1, 40, 4, 120, [50, 77], 37, None, 4, 24, True, None,
     dict(window=(9, 0)), 3),
    (torch.float32, 2, 2, 2, 16, 3, 40, [10, 30], 1, None, 3, 0, False, None,
     dict(causal=True, softcap=4.0), 1),
    (torch.float16, 3, 8, 8, 32, 2, 150, [148, 64, 9], 0, 5, 2, 32, False, [5, 0, 9],
     dict(causal=True, alibi="bh"), 7),
    (torch.float32, 3, 4, 2, 32, 5, 90, [90, 0, 33], 0, None, 0, 0, False, [10, 0, 33],
     dict(), 1),
    (torch.bfloat16, 1, 4, 1, 64, 1, 2000, [1600], 16, None, 1, 32, True, None,
     dict(causal=True), 0),
    (torch.bfloat16, 1, 4, 1, 64, 1, 2000, [1600], 16, None, 1, 32, True, None,
     dict(causal=True), 9),
]


def check_case(case, gen, device):
    """One case on `device`: the inputs made (and the expected results computed) on the CPU, the
    call on `device` (CUDA: fp32 cases in bf16, the kernels' 16-bit inputs)."""
    (dtype, b, hq, hk, d, sq, cap, lens, page, rows, new, rd, interleaved, leftpad, opts,
     splits) = case
    if device == "cuda" and dtype == torch.float32:
        dtype = torch.bfloat16
    lens_t = torch.tensor(lens, dtype=torch.int32)
    lp = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32)
    q, k_cache, v_cache, k, v, cos, sin, table, idx = make(
        gen, dtype, b, hq, hk, d, sq, cap, lens, page, rows, new, rd, lp)
    alibi = None
    if opts.get("alibi") == "h":
        alibi = torch.rand(hq, generator=gen) + 0.1
    elif opts.get("alibi") == "bh":
        alibi = torch.rand(b, hq, generator=gen) + 0.1
    window = opts.get("window", (-1, -1))
    causal = opts.get("causal", False)
    softcap = opts.get("softcap", 0.0)
    kc, vc, ref_out, ref_lse, naive, naive_lse = expected(
        q, k_cache, v_cache, k, v, cos, sin, lens, table, idx, lp, interleaved,
        causal or window != (-1, -1), causal=causal, window=window, softcap=softcap, alibi=alibi)
    on = (lambda t: None if t is None else t.to(device))
    q, k_cache, v_cache, k, v, cos, sin, table, idx, lens_t, lp, alibi = (
        on(t) for t in (q, k_cache, v_cache, k, v, cos, sin, table, idx, lens_t, lp, alibi))
    out, lse = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens_t,
        cache_batch_idx=idx, cache_leftpad=lp, block_table=table, causal=causal,
        window_size=window, softcap=softcap, rotary_interleaved=interleaved, alibi_slopes=alibi,
        num_splits=splits, return_softmax_lse=True)
    assert out.device == q.device and lse.device == q.device
    out, lse, k_cache, v_cache = (t.cpu() for t in (out, lse, k_cache, v_cache))
    assert same_bytes(k_cache, kc) and same_bytes(v_cache, vc), "cache after the append"
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (b, hq, sq) and lse.dtype == torch.float32
    assert max_err(out, ref_out) <= 2 * max_err(naive, ref_out) + 1e-5
    assert max_err(lse, ref_lse) <= 2 * max_err(naive_lse, ref_lse) + 1e-5


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_with_kvcache_cpu(case, gen):
    check_case(case, gen, "cpu")


@requires_cuda
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_with_kvcache_cuda(case, gen):
    """The same calls on CUDA tensors (the cuda-kvcache family): the caches bit for bit, out and
    lse by the rule."""
    check_case(case, gen, "cuda")


def test_int_cache_seqlens_and_no_lse(gen):
    q, k_cache, v_cache, *_ = make(gen, torch.float32, 2, 2, 2, 16, 1, 20, [12, 12])
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=12)
    out2, _ = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=torch.tensor([12, 12], dtype=torch.int32),
        return_softmax_lse=True)
    assert torch.is_tensor(out) and torch.equal(out, out2)


def test_signature_matches_flash_attn():
    params = inspect.signature(flashattn.flash_attn_with_kvcache).parameters
    flash_attn = [p for p in params.values() if p.kind != inspect.Parameter.KEYWORD_ONLY]
    assert [(p.name, p.default) for p in flash_attn] == [
        ("q", inspect.Parameter.empty), ("k_cache", inspect.Parameter.empty),
        ("v_cache", inspect.Parameter.empty), ("k", None), ("v", None), ("rotary_cos", None),
        ("rotary_sin", None), ("cache_seqlens", None), ("cache_batch_idx", None),
        ("cache_leftpad", None), ("block_table", None), ("softmax_scale", None),
        ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0),
        ("rotary_interleaved", True), ("alibi_slopes", None), ("num_splits", 0),
        ("return_softmax_lse", False)]
    # This binding's keyword-only additions: FlashAttention-3's fp8 descales, and out_dtype.
    assert [(p.name, p.default) for p in params.values()
            if p.kind == inspect.Parameter.KEYWORD_ONLY] == [
        ("q_descale", None), ("k_descale", None), ("v_descale", None), ("out_dtype", None)]
    assert flashattn.flash_attn_interface.flash_attn_with_kvcache is \
        flashattn.flash_attn_with_kvcache
    assert "flash_attn_with_kvcache" in flashattn.__all__


def test_errors_leave_the_cache(gen):
    q, k_cache, v_cache, k, v, *_ = make(gen, torch.float32, 2, 2, 2, 16, 1, 20, [19, 3], new=2)
    before = k_cache.clone(), v_cache.clone()
    with pytest.raises(flashattn.FlashAttnError) as e:  # 19 + 2 keys do not fit in 20
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v,
                                          cache_seqlens=torch.tensor([19, 3], dtype=torch.int32))
    assert e.value.status_name == "FA_ERROR_CU_SEQLENS"
    assert "cache_seqlens[0]=19 + k_new.shape[1]=2 (seqlen_new) must be <= 20" in str(e.value)
    assert same_bytes(k_cache, before[0]) and same_bytes(v_cache, before[1])
    with pytest.raises(flashattn.FlashAttnError) as e:
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v,
                                          cache_seqlens=torch.tensor([1, 3]))  # int64
    assert e.value.status_name == "FA_ERROR_DTYPE" and "torch.int32" in str(e.value)
    with pytest.raises(flashattn.FlashAttnError) as e:
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, None, cache_seqlens=1)
    assert "v_new.data is NULL while k_new is given" in str(e.value)


@requires_cuda
def test_cuda_cache_on_another_device_is_refused(gen):
    """A cache on the CPU with q on CUDA: the library names the tensor (nothing is written)."""
    q, k_cache, v_cache, k, v, *_ = make(gen, torch.float16, 2, 2, 2, 64, 1, 32, [9, 3], new=1)
    before = k_cache.clone()
    with pytest.raises(flashattn.FlashAttnError) as e:
        flashattn.flash_attn_with_kvcache(q.cuda(), k_cache, v_cache, k.cuda(), v.cuda(),
                                          cache_seqlens=5)
    assert e.value.status_name == "FA_ERROR_DEVICE" and "k.device=" in str(e.value)
    assert same_bytes(k_cache, before)

def paged_copy(k, cu_k, page, gen):
    """The packed keys k (total_k, hk, d) as a paged cache: each sequence's rows in its own
    pages, the pages a random permutation among NaN spare ones; (cache, block_table)."""
    lens = (cu_k[1:] - cu_k[:-1]).tolist()
    per = max(1, -(-max(lens) // page))
    blocks = len(lens) * per + 2
    cache = torch.full((blocks, page) + tuple(k.shape[1:]), float("nan"), dtype=k.dtype)
    table = torch.randperm(blocks, generator=gen)[:len(lens) * per].reshape(len(lens), per)
    for b, n in enumerate(lens):
        t = torch.arange(n)
        cache[table[b, t // page].long(), t % page] = k[int(cu_k[b]):int(cu_k[b]) + n]
    return cache, table.to(torch.int32)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
@pytest.mark.parametrize("page", [1, 16, 37])
def test_varlen_block_table(device, page, gen):
    """flash_attn_varlen_func with block_table (chunked prefill): the packed batch against its
    paged keys by the rule against the float64 reference of the same keys packed densely."""
    from attn_reference import attention_varlen
    dtype = torch.bfloat16
    lens_q, lens_k = [7, 0, 40, 1], [300, 5, 40, 90]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), 4, 64, generator=gen).to(dtype)
    k = torch.randn(int(cu_k[-1]), 2, 64, generator=gen).to(dtype)
    v = torch.randn(int(cu_k[-1]), 2, 64, generator=gen).to(dtype)
    k_cache, table = paged_copy(k, cu_k, page, gen)
    v_cache = torch.full_like(k_cache, float("nan"))
    lens = (cu_k[1:] - cu_k[:-1]).tolist()
    for b, n in enumerate(lens):
        t = torch.arange(n)
        v_cache[table[b, t // page].long(), t % page] = v[int(cu_k[b]):int(cu_k[b]) + n]
    ref, ref_lse = attention_varlen(q, k, v, cu_q, cu_k, causal=True, compute=torch.float64)
    naive, naive_lse = attention_varlen(q, k, v, cu_q, cu_k, causal=True, compute=torch.float32)
    on = (lambda t: t.to(device))
    with torch.no_grad():
        out, lse, _ = flashattn.flash_attn_varlen_func(
            on(q), on(k_cache), on(v_cache), on(cu_q), on(cu_k), max(lens_q), max(lens_k),
            causal=True, block_table=on(table), return_attn_probs=True)
    out, lse = out.cpu(), lse.cpu()
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    assert max_err(out, ref) <= 2 * max_err(naive.to(dtype), ref) + 1e-5
    assert max_err(lse, ref_lse) <= 2 * max_err(naive_lse, ref_lse) + 1e-5


def test_varlen_block_table_is_forward_only(gen):
    q = torch.randn(5, 2, 16, requires_grad=True)
    cache = torch.randn(4, 8, 2, 16)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(flashattn.FlashAttnError) as e:
        flashattn.flash_attn_varlen_func(q, cache, cache, cu, cu, 5, 5,
                                         block_table=torch.zeros(1, 1, dtype=torch.int32))
    assert "forward-only" in str(e.value)
