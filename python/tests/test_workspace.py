"""The binding hands the library the workspace the library asked for.

On the CPU the backend runs with a smaller workspace than it asks for by using fewer threads, so
the binding must query the size and pass all of it - not a cached block that merely suffices."""
import torch

import flashattn
from conftest import requires_cuda
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


def _recording(monkeypatch, lib, pass_="forward"):
    """Counts the size queries and the calls of one pass (monkeypatched on lib)."""
    counts = {"query": 0, "call": 0}
    query, entry = getattr(lib, f"fa_{pass_}_workspace_size"), getattr(lib, f"fa_{pass_}")

    def record_query(params, size):
        counts["query"] += 1
        return query(params, size)

    def record_call(params, workspace, nbytes, stream):
        counts["call"] += 1
        return entry(params, workspace, nbytes, stream)

    monkeypatch.setattr(lib, f"fa_{pass_}_workspace_size", record_query)
    monkeypatch.setattr(lib, f"fa_{pass_}", record_call)
    return counts


@requires_cuda
def test_cuda_forward_goes_out_once_with_the_streams_block(monkeypatch):
    """After a stream's first call, a forward whose workspace is small (the sm90 forward's tile
    counter, or none) is one library call: no refusal, no size query, no allocation."""
    lib = _library.load()
    q, k, v = (torch.randn(2, 300, 4, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    expected = flashattn.flash_attn_func(q, k, v, causal=True)  # the stream's first call
    counts = _recording(monkeypatch, lib)
    for _ in range(3):
        out = flashattn.flash_attn_func(q, k, v, causal=True)
    monkeypatch.undo()
    assert counts == {"query": 0, "call": 3}, counts
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2).float() for t in (q, k, v)), is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


@requires_cuda
def test_cuda_large_workspace_is_queried_and_allocated(monkeypatch):
    """A backward needs more than the cached block (its dq accumulator): refused, queried, run."""
    lib = _library.load()
    q, k, v = (torch.randn(1, 1000, 4, 128, device="cuda", dtype=torch.float16,
                           requires_grad=True) for _ in range(3))
    out = flashattn.flash_attn_func(q, k, v)
    counts = _recording(monkeypatch, lib, "backward")
    out.sum().backward()
    monkeypatch.undo()
    assert counts == {"query": 1, "call": 2}, counts
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@requires_cuda
def test_cuda_graph_capture_and_replay_match_eager():
    """A forward captured in a CUDA graph (its workspace from the graph's pool, not the eager
    cache) replays on new inputs to the eager result."""
    shape = (2, 515, 4, 128)
    static = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    flashattn.flash_attn_func(*static, causal=True)  # warm-up outside the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flashattn.flash_attn_func(*static, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = flashattn.flash_attn_func(*static, causal=True)
    for _ in range(2):
        fresh = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        eager = flashattn.flash_attn_func(*fresh, causal=True)
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, eager, rtol=0, atol=0)
