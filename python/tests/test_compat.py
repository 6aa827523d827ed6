"""The drop-in contract with flash_attn: names, argument names and defaults, return conventions,
the import switch, and the eager fast path."""
import inspect
import os
import subprocess
import sys

import torch

import flashattn

COMMON = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False),
          ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
          ("deterministic", False), ("return_attn_probs", False)]
REQUIRED = object()
# flash_attn 2.x's signatures (the facts the drop-in promise rests on).
SIGNATURES = {
    "flash_attn_func": ["q", "k", "v"],
    "flash_attn_qkvpacked_func": ["qkv"],
    "flash_attn_kvpacked_func": ["q", "kv"],
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                               "max_seqlen_k"],
    "flash_attn_varlen_qkvpacked_func": ["qkv", "cu_seqlens", "max_seqlen"],
    "flash_attn_varlen_kvpacked_func": ["q", "kv", "cu_seqlens_q", "cu_seqlens_k",
                                        "max_seqlen_q", "max_seqlen_k"],
}


# This binding's own additions: keyword-only, after every flash_attn parameter.
EXTENSIONS = [("attn_bias", None)]
# FlashAttention-3's fp8 keywords (fa_params 0.5) and this binding's out_dtype, on the functions
# that take q, k, v separately.
FP8_EXTENSIONS = [("q_descale", None), ("k_descale", None), ("v_descale", None),
                  ("out_dtype", None)]
FP8_FUNCTIONS = ("flash_attn_func", "flash_attn_varlen_func")


def test_signatures_match_flash_attn():
    for name, required in SIGNATURES.items():
        params = inspect.signature(getattr(flashattn, name)).parameters
        expected = [(p, REQUIRED) for p in required] + COMMON
        if name == "flash_attn_varlen_func":
            expected.append(("block_table", None))
        got = [(p.name, REQUIRED if p.default is inspect.Parameter.empty else p.default)
               for p in params.values() if p.kind != inspect.Parameter.KEYWORD_ONLY]
        assert got == expected, name
        extra = [(p.name, p.default) for p in params.values()
                 if p.kind == inspect.Parameter.KEYWORD_ONLY]
        assert extra == EXTENSIONS + (FP8_EXTENSIONS if name in FP8_FUNCTIONS else []), name


def test_import_as_flash_attn_and_interface_module():
    import flashattn as flash_attn
    assert flash_attn.flash_attn_interface.flash_attn_func is flash_attn.flash_attn_func
    assert callable(flash_attn.flash_attn_varlen_func)


def test_install_as_flash_attn_redirects_imports():
    code = ("import flashattn\nflashattn.install_as_flash_attn()\n"
            "from flash_attn import flash_attn_func\n"
            "from flash_attn.flash_attn_interface import flash_attn_varlen_func\n"
            "from flash_attn import flash_attn_with_kvcache\n"
            "assert flash_attn_func is flashattn.flash_attn_func\n"
            "assert flash_attn_varlen_func is flashattn.flash_attn_varlen_func\n"
            "assert flash_attn_with_kvcache is flashattn.flash_attn_with_kvcache\nprint('ok')\n")
    pkg = os.path.dirname(os.path.dirname(flashattn.__file__))
    res = subprocess.run([sys.executable, "-c", code], cwd=pkg, capture_output=True, text=True,
                         timeout=120)
    assert res.stdout.strip() == "ok", res.stdout + res.stderr


def test_return_conventions_and_default_scale():
    q, k, v = (torch.randn(2, 9, 2, 16) for _ in range(3))
    out = flashattn.flash_attn_func(q, k, v)
    assert isinstance(out, torch.Tensor) and out.is_contiguous()
    res = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert isinstance(res, tuple) and len(res) == 3 and res[2] is None
    assert torch.equal(res[0], out)
    explicit = flashattn.flash_attn_func(q, k, v, softmax_scale=16 ** -0.5)
    torch.testing.assert_close(explicit, out, rtol=0, atol=1e-6)
    other = flashattn.flash_attn_func(q, k, v, softmax_scale=0.5)
    assert not torch.allclose(other, out)


def test_eager_fast_path_only_without_grad():
    q, k, v = (torch.randn(1, 5, 1, 8, requires_grad=True) for _ in range(3))
    assert flashattn.flash_attn_func(q, k, v).grad_fn is not None
    with torch.no_grad():
        assert flashattn.flash_attn_func(q, k, v).grad_fn is None
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert not lse.requires_grad  # the LSE is an output, not differentiable (as in flash_attn)
