"""flashattn.kernel_family: the library's kernel family (fa_select_kernel) for the call that
flash_attn_func / flash_attn_varlen_func would make - "cpu-flash" for CPU tensors (the binding
always asks for FA_BACKEND_AUTO, so the reference family is never the answer), "cuda-sm90" for
CUDA forwards on an sm90 GPU with a build holding sm_90a code, "cuda-sm80" for other CUDA calls -
refused with the same status and library message as that call, and never asked by
the calls themselves."""
import re

import pytest
import torch

from conftest import requires_cuda

import flashattn
from flashattn import FlashAttnError, _library


def r(*shape, **kw):
    return torch.randn(*shape, **kw)


def i32(*xs, device="cpu"):
    return torch.tensor(xs, dtype=torch.int32, device=device)


def test_signature_is_keyword_only_after_the_tensors():
    import inspect
    params = inspect.signature(flashattn.kernel_family).parameters
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["q", "k", "v"]
    assert params["backward"].default is False and params["cu_seqlens_q"].default is None


# (id, kwargs of kernel_family besides q, k, v and backward)
OPTIONS = [
    ("plain", {}),
    ("causal", {"causal": True}),
    ("window", {"window_size": (3, 0)}),
    ("softcap-scale", {"softcap": 20.0, "softmax_scale": 0.3}),
    ("alibi", {"alibi_slopes": torch.rand(4)}),
    ("dropout", {"dropout_p": 0.25}),
    ("deterministic", {"deterministic": True}),
]


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("kw", [o[1] for o in OPTIONS], ids=[o[0] for o in OPTIONS])
def test_cpu_tensors_run_cpu_flash(kw, dtype, backward):
    q = r(2, 9, 4, 32, dtype=dtype)
    k, v = r(2, 13, 2, 32, dtype=dtype), r(2, 13, 2, 32, dtype=dtype)  # GQA 4 / 2
    assert flashattn.kernel_family(q, k, v, backward=backward, **kw) == "cpu-flash"


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_cpu_varlen_and_strided_views(backward):
    qkv = r(7, 3, 2, 16)
    q, k, v = qkv.unbind(1)  # strided views, as flash_attn_varlen_qkvpacked_func passes them
    cu = i32(0, 3, 3, 7)  # an empty sequence included
    assert flashattn.kernel_family(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4,
                                   max_seqlen_k=4, causal=True, backward=backward) == "cpu-flash"
    t = r(1, 16, 5, 2).transpose(1, 3)  # last dimension not contiguous: the calls copy it
    assert flashattn.kernel_family(t, t, t, backward=backward) == "cpu-flash"


def _library_text(e):
    """The library's message without the binding's prefix naming the entry point."""
    return re.sub(r"^flashattn (forward|backward|kernel_family \((forward|backward)\)): ", "",
                  str(e))


# Inputs the calls refuse: (id, q, k, v, varlen arguments or None, options).
def _bad_cases():
    x = r(1, 4, 2, 16)
    packed = r(6, 2, 16)
    return [
        ("heads", r(1, 4, 8, 16), r(1, 4, 3, 16), r(1, 4, 3, 16), None, {}),
        ("head-dim-too-big", r(1, 4, 2, 300), r(1, 4, 2, 300), r(1, 4, 2, 300), None, {}),
        ("float64", x.double(), x, x, None, {}),
        ("mixed-dtypes", x, x.half(), x, None, {}),
        ("rank", r(4, 2, 16), x, x, None, {}),
        ("empty", r(1, 0, 2, 16), x, x, None, {}),
        ("device", r(1, 4, 2, 16, device="meta"), x, x, None, {}),
        ("dropout-1", x, x, x, None, {"dropout_p": 1.0}),
        ("window", x, x, x, None, {"window_size": (-2, 0)}),
        ("window-2e31", x, x, x, None, {"window_size": (1 << 31, 0)}),
        ("softcap", x, x, x, None, {"softcap": -1.0}),
        ("scale-nan", x, x, x, None, {"softmax_scale": float("nan")}),
        ("alibi-shape", x, x, x, None, {"alibi_slopes": r(3)}),
        ("cu-seqlens-order", packed, packed, packed, (i32(0, 4, 2, 6), i32(0, 2, 4, 6), 4, 2),
         {}),
        ("cu-seqlens-int64", packed, packed, packed, (torch.tensor([0, 6]), i32(0, 6), 6, 6),
         {}),
        ("max-seqlen-0", packed, packed, packed, (i32(0, 6), i32(0, 6), 0, 6), {}),
    ]


BAD = _bad_cases()


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_refused_as_the_call_refuses_it(case, backward):
    _, q, k, v, varlen, kw = case
    if varlen is None:
        def call():
            return flashattn.flash_attn_func(q, k, v, **kw)
        query = dict(kw)
    else:
        cu_q, cu_k, max_q, max_k = varlen

        def call():
            return flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kw)
        query = dict(kw, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q,
                     max_seqlen_k=max_k)
    with pytest.raises(FlashAttnError) as want:
        call()
    with pytest.raises(FlashAttnError) as got:
        flashattn.kernel_family(q, k, v, backward=backward, **query)
    assert got.value.status_name == want.value.status_name
    assert _library_text(got.value) == _library_text(want.value)
    if str(got.value).startswith("flashattn kernel_family"):  # the library's refusal
        assert ("(backward)" if backward else "(forward)") in str(got.value)


def test_varlen_without_max_seqlen_is_refused_naming_it():
    cu = i32(0, 6)
    with pytest.raises(FlashAttnError, match=r"max_seqlen_q=0 must be > 0") as info:
        flashattn.kernel_family(r(6, 2, 16), r(6, 2, 16), r(6, 2, 16), cu_seqlens_q=cu,
                                cu_seqlens_k=cu)
    assert info.value.status_name == "FA_ERROR_SIZE"


def test_the_calls_never_ask(monkeypatch):
    """The calls' per-call overhead is unchanged: neither the forward nor the backward queries
    the family."""
    lib = _library.load()

    def refuse(*args):
        raise AssertionError("fa_select_kernel called on a call's path")
    monkeypatch.setattr(lib, "fa_select_kernel", refuse)
    q, k, v = (r(1, 8, 2, 16, requires_grad=True) for _ in range(3))
    flashattn.flash_attn_func(q, k, v, causal=True).sum().backward()
    cu = i32(0, 3, 8)
    flashattn.flash_attn_varlen_func(*(r(8, 2, 16) for _ in range(3)), cu, cu, 5, 5)
    assert q.grad is not None


def forward_family():
    """The flash family a plain CUDA forward runs here: the Hopper-native one on an sm90 GPU when
    the library holds sm_90a code (its build info lists the architectures, e.g. cuda(80,90a))."""
    archs = re.search(r"cuda\(([^)]*)\)", flashattn.build_info())
    hopper = archs is not None and "90a" in archs.group(1).split(",")
    return "cuda-sm90" if hopper and torch.cuda.get_device_capability()[0] == 9 else "cuda-sm80"


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_cuda_tensors_run_a_flash_family(dtype):
    q, k, v = (torch.randn(2, 64, 4, 64, device="cuda", dtype=dtype) for _ in range(3))
    assert flashattn.kernel_family(q, k, v, causal=True) == forward_family()
    cu = i32(0, 40, 128, device="cuda")
    p = torch.randn(128, 4, 64, device="cuda", dtype=dtype)
    assert flashattn.kernel_family(p, p, p, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=88,
                                   max_seqlen_k=88) == forward_family()
    try:
        family = flashattn.kernel_family(q, k, v, backward=True, deterministic=True)
    except FlashAttnError as e:  # a library configured without CUDA backward kernels
        assert e.status_name == "FA_ERROR_BACKEND"
        with pytest.raises(FlashAttnError):
            flashattn.flash_attn_func(*(t.requires_grad_() for t in (q, k, v))).sum().backward()
        pytest.xfail(f"library configured without CUDA backward kernels: {e}")
    assert family == "cuda-sm80"


@requires_cuda
def test_cuda_refusal_is_the_calls():
    q = torch.randn(1, 16, 2, 64, device="cuda")  # fp32: the CUDA kernels take fp16 / bf16
    with pytest.raises(FlashAttnError) as want:
        flashattn.flash_attn_func(q, q, q)
    with pytest.raises(FlashAttnError) as got:
        flashattn.kernel_family(q, q, q)
    assert got.value.status_name == want.value.status_name
    assert _library_text(got.value) == _library_text(want.value)
