"""Shared set-up of the binding's tests.

The tests import the package from this checkout (python/flashattn) unless FA_TEST_INSTALLED=1,
which tests whatever `import flashattn` finds (e.g. after `pip install ./python`). The library is
found as the package finds it: $FA_LIBRARY (CTest sets it to the library it just built), else the
checkout's build directories.
"""
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("FA_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import flashattn  # noqa: E402  (after the path set-up above)

CUDA = torch.cuda.is_available()
TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def pytest_report_header(config):
    return [f"flashattn library: {flashattn.library_path()} ({flashattn.build_info()})",
            f"torch {torch.__version__}, CUDA available: {CUDA}"]


def library_has_cuda():
    return "cuda(" in flashattn.build_info()


requires_cuda = pytest.mark.skipif(
    not CUDA or not library_has_cuda(),
    reason="needs a CUDA device and a library built with CUDA")


def randn(*shape, dtype=torch.float32, device="cpu", grad=False, gen=None):
    t = torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


@pytest.fixture
def gen():
    """A fresh, seeded generator per test: inputs do not depend on test order."""
    g = torch.Generator()
    g.manual_seed(1234)
    return g


def import_transformers():
    """transformers, or None. Where the interpreter has none, scripts/setup.sh's venv over
    Debian's python3 (.deps/hf-venv, transformers from PyPI beside Debian's torch) is added to
    the path when this interpreter is the one the venv was made from."""
    try:
        import transformers
        return transformers
    except ImportError:
        pass
    repo = os.path.dirname(os.path.dirname(HERE))
    venv = os.path.join(repo, ".deps", "hf-venv")
    site = os.path.join(venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                        "site-packages")
    base = os.path.realpath(os.path.join(venv, "bin", "python3"))
    if not os.path.isdir(site) or base != os.path.realpath(sys.executable):
        return None
    sys.path.append(site)  # after the interpreter's own packages: Debian's torch stays first
    try:
        import transformers
        return transformers
    except ImportError:
        sys.path.remove(site)
        return None


def transformers_reference_impl(transformers):
    """The attention implementation transformers runs as the reference: "sdpa" where it runs it
    (torch >= 2.1.1), else "eager" (Debian's torch 1.13 with transformers 4.49)."""
    try:
        cfg = transformers.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=16,
                                       num_hidden_layers=1, num_attention_heads=2,
                                       attn_implementation="sdpa")
        model = transformers.LlamaForCausalLM(cfg)
        return "sdpa" if model.config._attn_implementation == "sdpa" else "eager"
    except (ImportError, ValueError):  # torch without SDPA
        return "eager"
