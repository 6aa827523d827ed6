"""The binding hands the library the workspace the library asked for.

On the CPU the backend runs with a smaller workspace than it asks for by using fewer threads, so
the binding must query the size and pass all of it - not a cached block that merely suffices."""
import torch

import flashattn
from flashattn import _library


def test_cpu_calls_get_the_queried_workspace(monkeypatch):
    lib = _library.load()
    for shape, pass_ in (((1, 40, 2, 16), "forward"), ((1, 700, 4, 64), "forward"),
                         ((1, 700, 4, 64), "backward")):
        asked, given = [], []
        query, entry = getattr(lib, f"fa_{pass_}_workspace_size"), getattr(lib, f"fa_{pass_}")

        def record_query(params, size, query=query):
            status = query(params, size)
            asked.append(size._obj.value)  # size is ctypes.byref(c_size_t)
            return status

        def record_call(params, workspace, nbytes, stream, entry=entry):
            given.append(nbytes)
            return entry(params, workspace, nbytes, stream)

        monkeypatch.setattr(lib, f"fa_{pass_}_workspace_size", record_query)
        monkeypatch.setattr(lib, f"fa_{pass_}", record_call)
        q, k, v = (torch.randn(*shape, requires_grad=pass_ == "backward") for _ in range(3))
        out = flashattn.flash_attn_func(q, k, v, causal=True)
        if pass_ == "backward":
            out.sum().backward()
        monkeypatch.undo()
        assert len(asked) == 1 and asked[0] > 0, (shape, pass_, asked)
        assert given == asked, (shape, pass_, given, asked)
