"""FP8 e4m3 inputs through the binding (fa_params 0.5, issue 30), CPU tensors:

- the conversions (flashattn.fp8): every one of the 256 codes decoded by the format's formula,
  round to nearest even with saturation (and torch.float8_e4m3fn's conversion where torch has it);
- flash_attn_func / flash_attn_varlen_func with q_descale / k_descale / v_descale against the
  fp64 oracle on the dequantized inputs by FlashAttention's rule (the naive baseline: the oracle
  in fp32, out rounded to bf16 / fp16), with causal, windows, softcap, GQA, packed batches;
- the descales' indexing (q's per kv head), the default out dtype (bfloat16), the LSE;
- the refusals, each naming the feature: the backward, dropout, attn_bias, descales without fp8,
  a bare uint8 tensor, mixed dtypes, fp32 out;
- the KV-cache append with fp8 keys, also on CUDA tensors (the cuda-kvcache family);
- on an sm90 GPU, the plain forward (cuda-sm90's fp8 kernels) against the oracle, held to 2x the
  naive fp8 baseline's error (P rounded to e4m3).

torch 1.13 (Debian's) has no float8 dtype: the tests pass e4m3 bytes as flashattn.e4m3(uint8);
with torch >= 2.1 the same calls also run with torch.float8_e4m3fn tensors.
"""
import math

import pytest
import torch

import flashattn
from flashattn import fp8
from attn_reference import attention, attention_varlen
from cases import check_rule
from conftest import requires_cuda

FLOAT8 = getattr(torch, "float8_e4m3fn", None)


def decode_formula(c):
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    if e == 15 and m == 7:
        return math.nan
    mag = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if s else mag


def test_every_code_decodes_by_the_formula():
    got = fp8.from_e4m3_bytes(torch.arange(256, dtype=torch.int64).to(torch.uint8))
    for c in range(256):
        want = decode_formula(c)
        if math.isnan(want):
            assert math.isnan(got[c].item()), c
        else:
            assert got[c].item() == want, c
    assert got[0x7E].item() == 448.0 and got[0x01].item() == 2.0 ** -9


def test_rounding_and_saturation():
    finite = torch.tensor([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=torch.uint8)
    assert torch.equal(fp8.to_e4m3_bytes(fp8.from_e4m3_bytes(finite)), finite)  # round trip
    x = torch.tensor([2.0 ** -10, 1.5 * 2 ** -9, 1.0625, 1.1875, 1.9375, 449.0, 1e9,
                      float("inf"), -float("inf"), float("nan"), -0.0])
    want = [0x00, 0x02, 0x38, 0x3A, 0x40, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x80]
    assert fp8.to_e4m3_bytes(x).tolist() == want


@pytest.mark.skipif(FLOAT8 is None, reason="torch has no float8_e4m3fn (torch < 2.1)")
def test_matches_torch_float8_below_saturation():
    x = torch.randn(100000) * 50
    x = x[x.abs() < 448]
    assert torch.equal(fp8.to_e4m3_bytes(x), x.to(FLOAT8).view(torch.uint8))


def quantized(gen, b, s, h, d, group=1, scale=2.0):
    x = torch.randn(b, s, h, d, generator=gen) * scale
    return fp8.quantize_e4m3(x, group)


def dequant(bytes_, descale, group=1):
    """decode * descale[b, h // group], float64."""
    v = fp8.from_e4m3_bytes(bytes_).double()
    return v * descale.double().repeat_interleave(group, dim=1)[:, None, :, None]


def wrap(b):
    return flashattn.e4m3(b)


CASES = [
    dict(),
    dict(causal=True),
    dict(window_size=(7, 3)),
    dict(softcap=4.0),
    dict(causal=True, out_dtype=torch.float16),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "_".join(f"{k}" for k in kw) or "plain")
@pytest.mark.parametrize("heads", [(4, 4), (6, 2)], ids=["mha", "gqa"])
def test_flash_attn_func_matches_dequantized_oracle(kw, heads):
    gen = torch.Generator().manual_seed(5)
    hq, hk = heads
    group = hq // hk
    qb, qd = quantized(gen, 2, 33, hq, 40, group)
    kb, kd = quantized(gen, 2, 57, hk, 40)
    vb, vd = quantized(gen, 2, 57, hk, 40)
    out, lse, _ = flashattn.flash_attn_func(wrap(qb), wrap(kb), wrap(vb), q_descale=qd,
                                            k_descale=kd, v_descale=vd, return_attn_probs=True,
                                            **kw)
    out_dtype = kw.get("out_dtype", torch.bfloat16)
    assert out.dtype == out_dtype and out.shape == (2, 33, hq, 40)
    assert lse.dtype == torch.float32 and lse.shape == (2, hq, 33)
    ref_kw = dict(causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)),
                  softcap=kw.get("softcap", 0.0))
    q, k, v = dequant(qb, qd, group), dequant(kb, kd), dequant(vb, vd)
    ref, ref_lse = attention(q, k, v, **ref_kw)
    naive, naive_lse = attention(q, k, v, compute=torch.float32, **ref_kw)
    check_rule("out", out.double(), ref, naive.to(out_dtype).double(), 2, 1e-5)
    check_rule("lse", lse.double(), ref_lse, naive_lse.double(), 2, 1e-5)


def test_descales_default_to_one_and_scale_linearly():
    gen = torch.Generator().manual_seed(6)
    qb, _ = quantized(gen, 1, 9, 2, 16)
    kb, _ = quantized(gen, 1, 12, 2, 16)
    vb, _ = quantized(gen, 1, 12, 2, 16)
    plain = flashattn.flash_attn_func(wrap(qb), wrap(kb), wrap(vb))
    ones = torch.ones(1, 2)
    assert torch.equal(plain, flashattn.flash_attn_func(wrap(qb), wrap(kb), wrap(vb),
                                                        q_descale=ones, k_descale=ones,
                                                        v_descale=ones))
    doubled = flashattn.flash_attn_func(wrap(qb), wrap(kb), wrap(vb), v_descale=ones * 2)
    assert torch.equal(doubled.float(), plain.float() * 2)


def test_varlen():
    gen = torch.Generator().manual_seed(7)
    lens_q, lens_k = [5, 11, 1], [9, 11, 30]
    cu_q = torch.tensor([0, 5, 16, 17], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 20, 50], dtype=torch.int32)
    q = torch.randn(17, 4, 32, generator=gen) * 2
    k = torch.randn(50, 2, 32, generator=gen) * 2
    v = torch.randn(50, 2, 32, generator=gen)
    qb, kb, vb = fp8.to_e4m3_bytes(q), fp8.to_e4m3_bytes(k), fp8.to_e4m3_bytes(v)
    qd, kd, vd = torch.full((3, 2), 0.5), torch.full((3, 2), 1.5), torch.rand(3, 2, generator=gen) + 0.5
    out = flashattn.flash_attn_varlen_func(wrap(qb), wrap(kb), wrap(vb), cu_q, cu_k, 11, 30,
                                           causal=True, q_descale=qd, k_descale=kd,
                                           v_descale=vd)
    # per sequence: v's descale is that sequence's
    deq_v = fp8.from_e4m3_bytes(vb).double()
    for i in range(3):
        deq_v[cu_k[i]:cu_k[i + 1]] *= vd[i].double()[None, :, None]
    args = (fp8.from_e4m3_bytes(qb).double() * 0.5, fp8.from_e4m3_bytes(kb).double() * 1.5, deq_v,
            cu_q, cu_k)
    ref, _ = attention_varlen(*args, causal=True)
    naive, _ = attention_varlen(*args, causal=True, compute=torch.float32)
    check_rule("out", out.double(), ref, naive.to(torch.bfloat16).double(), 2, 1e-5)


@pytest.mark.skipif(FLOAT8 is None, reason="torch has no float8_e4m3fn (torch < 2.1)")
def test_float8_tensors_equal_marked_bytes():
    gen = torch.Generator().manual_seed(8)
    qb, qd = quantized(gen, 1, 8, 2, 16)
    kb, kd = quantized(gen, 1, 8, 2, 16)
    a = flashattn.flash_attn_func(wrap(qb), wrap(kb), wrap(kb), q_descale=qd, k_descale=kd)
    f = [t.view(FLOAT8) for t in (qb, kb, kb)]
    assert torch.equal(a, flashattn.flash_attn_func(*f, q_descale=qd, k_descale=kd))


def errors_of(**kw):
    gen = torch.Generator().manual_seed(9)
    qb, qd = quantized(gen, 1, 4, 2, 8)
    kb, kd = quantized(gen, 1, 6, 2, 8)
    args = dict(q=wrap(qb), k=wrap(kb), v=wrap(kb))
    args.update(kw)
    with pytest.raises(flashattn.FlashAttnError) as e:
        flashattn.flash_attn_func(**args)
    return str(e.value)


def test_refusals_name_the_feature():
    assert "dropout_p > 0 with fp8" in errors_of(dropout_p=0.1)
    assert "attn_bias with fp8" in errors_of(attn_bias=torch.zeros(1, 2, 4, 6))
    assert "out_dtype=torch.float32 must be" in errors_of(out_dtype=torch.float32)
    bf = torch.randn(1, 4, 2, 8).bfloat16()
    assert "descales scale fp8 e4m3 inputs only" in errors_of(q=bf, k=bf, v=bf,
                                                              q_descale=torch.ones(1, 2))
    assert "k is torch.bfloat16 while q, k or v is fp8" in errors_of(k=bf)
    assert "torch.uint8 is not supported" in errors_of(q=torch.zeros(1, 4, 2, 8,
                                                                     dtype=torch.uint8),
                                                       k=torch.zeros(1, 6, 2, 8, dtype=torch.uint8),
                                                       v=torch.zeros(1, 6, 2, 8, dtype=torch.uint8))
    # the library's own checks name the descale
    assert "q_descale.shape=(1, 3) must be (1, 2)" in errors_of(q_descale=torch.ones(1, 3))
    assert "k_descale.dtype=fp16 must be fp32" in errors_of(k_descale=torch.ones(1, 2).half())
    with pytest.raises(flashattn.FlashAttnError, match="takes a torch.uint8 tensor"):
        flashattn.e4m3(torch.zeros(3))


def test_forward_only():
    gen = torch.Generator().manual_seed(10)
    qb, qd = quantized(gen, 1, 4, 2, 8)
    qd.requires_grad_(True)
    with pytest.raises(flashattn.FlashAttnError, match="forward only"):
        flashattn.flash_attn_func(wrap(qb), wrap(qb), wrap(qb), q_descale=qd)
    with torch.no_grad():
        out = flashattn.flash_attn_func(wrap(qb), wrap(qb), wrap(qb), q_descale=qd)
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_kvcache_appends_fp8_keys_bit_for_bit(device):
    """On CUDA tensors the cuda-kvcache family runs it (fp8 converted to fp16 on load)."""
    gen = torch.Generator().manual_seed(11)
    b, hq, hk, d, cap = 2, 4, 2, 16, 20
    kc, kd = quantized(gen, b, cap, hk, d)
    vc, vd = quantized(gen, b, cap, hk, d)
    kn, _ = quantized(gen, b, 3, hk, d)
    vn, _ = quantized(gen, b, 3, hk, d)
    qb, qd = quantized(gen, b, 3, hq, d, hq // hk)
    lens = torch.tensor([4, 15], dtype=torch.int32)
    on = [t.to(device) for t in (qb, kc, vc, kn, vn, qd, kd, vd, lens)]
    out = flashattn.flash_attn_with_kvcache(wrap(on[0]), wrap(on[1]), wrap(on[2]), wrap(on[3]),
                                            wrap(on[4]), cache_seqlens=on[8], causal=True,
                                            q_descale=on[5], k_descale=on[6], v_descale=on[7])
    assert out.dtype == torch.bfloat16
    out, kc, vc = out.cpu(), on[1].cpu(), on[2].cpu()
    for i in range(b):
        n = int(lens[i])
        assert torch.equal(kc[i, n:n + 3], kn[i]) and torch.equal(vc[i, n:n + 3], vn[i])
        q = dequant(qb[i:i + 1], qd[i:i + 1], hq // hk)
        k, v = dequant(kc[i:i + 1, :n + 3], kd[i:i + 1]), dequant(vc[i:i + 1, :n + 3], vd[i:i + 1])
        ref, _ = attention(q, k, v, causal=True)
        naive, _ = attention(q, k, v, causal=True, compute=torch.float32)
        check_rule("out", out[i:i + 1].double(), ref, naive.to(torch.bfloat16).double(), 2, 1e-5)
    bf = torch.zeros(b, cap, hk, d, dtype=torch.bfloat16)
    with pytest.raises(flashattn.FlashAttnError, match="k_cache is not fp8 e4m3"):
        flashattn.flash_attn_with_kvcache(wrap(qb), bf, wrap(vc), cache_seqlens=lens)


def naive_fp8(q, k, v, causal):
    """The naive fp8 baseline: fp32, the probabilities (<= 1) rounded to e4m3 before P·V."""
    sq, hq, d = q.shape[1], q.shape[2], q.shape[3]
    sk, group = k.shape[1], q.shape[2] // k.shape[2]
    q, k, v = q.float(), k.float().repeat_interleave(group, 2), v.float().repeat_interleave(group, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * d ** -0.5
    if causal:  # bottom-right aligned
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + (sk - sq), float("-inf"))
    p = fp8.from_e4m3_bytes(fp8.to_e4m3_bytes(torch.softmax(s, dim=-1)))
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] == 9


@requires_cuda
@pytest.mark.skipif(not sm90(), reason="needs an sm90 GPU (cuda-sm90's fp8 forward)")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_cuda_sm90_forward_matches_dequantized_oracle(d, causal):
    """On sm90 the plain forward runs cuda-sm90's fp8 kernels (e4m3 products, P rounded to
    e4m3): held to 2x the naive fp8 baseline's error, as the C++ GPU tests are."""
    gen = torch.Generator().manual_seed(12 + d)
    hq, hk = 4, 2
    qb, qd = quantized(gen, 2, 97, hq, d, hq // hk)
    kb, kd = quantized(gen, 2, 150, hk, d)
    vb, vd = quantized(gen, 2, 150, hk, d)
    on = [t.cuda() for t in (qb, kb, vb, qd, kd, vd)]
    out = flashattn.flash_attn_func(wrap(on[0]), wrap(on[1]), wrap(on[2]), causal=causal,
                                    q_descale=on[3], k_descale=on[4], v_descale=on[5])
    assert out.dtype == torch.bfloat16 and out.is_cuda
    q, k, v = dequant(qb, qd, hq // hk), dequant(kb, kd), dequant(vb, vd)
    ref, _ = attention(q, k, v, causal=causal)
    naive = naive_fp8(q, k, v, causal)
    check_rule("out", out.cpu().double(), ref, naive.to(torch.bfloat16).double(), 2, 1e-5)
