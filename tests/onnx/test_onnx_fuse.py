"""fa-onnx-fuse end to end: export / build a model, fuse it, run the original and the fused graph in
ONNX Runtime (the FlashAttention node served by libfa_ort_flashattn over libflashattn's C ABI), and
hold the fused output to FlashAttention's accuracy rule against an fp64 reference:
    max |fused - ref| <= 2 * max |original - ref| + atol
where the original graph, run by ONNX Runtime in the model's own precision, is the naive
same-precision computation. Run through tests/onnx/run.py (ctest onnx_fuse).

Environment: FA_ONNX_FUSE (the tool), FA_ORT_OP (the custom-op library); FA_ONNX_DEVICE=cuda runs
the fused graph on ONNX Runtime's CUDA provider (needs onnxruntime-gpu and a CUDA build)."""
import json
import math
import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import graphs

TOOL = os.environ["FA_ONNX_FUSE"]
OP_LIB = os.environ["FA_ORT_OP"]
DEVICE = os.environ.get("FA_ONNX_DEVICE", "cpu")


def fuse(tmp_path, model, *args):
    src, dst, rep = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save(model, src)
    r = subprocess.run([TOOL, str(src), "-o", str(dst), "--report", str(rep), *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    return onnx.load(dst), json.loads(rep.read_text())


def run(model, feeds, custom=False):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    providers = ["CPUExecutionProvider"]
    if custom:
        so.register_custom_ops_library(OP_LIB)
        if DEVICE == "cuda":
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    s = ort.InferenceSession(model.SerializeToString(), so, providers=providers)
    return s.run(None, feeds)[0]


def check(tmp_path, model, feeds, ref, fused_count=1, **expect):
    fused, report = fuse(tmp_path, model)
    subs = report["subgraphs"]
    assert sum(s["fused"] for s in subs) == fused_count, subs
    for s in subs:
        if s["fused"]:
            for key, val in expect.items():
                assert s[key] == val, (key, s)
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("FlashAttention") == fused_count and "Softmax" not in ops, ops
    naive = run(model, feeds).astype(np.float64)
    got = run(fused, feeds, custom=True).astype(np.float64)
    assert got.shape == naive.shape
    atol = 1e-5 if got.dtype == np.float32 and all(x.dtype == np.float32 for x in feeds.values()) else 1e-4
    err, base = np.abs(got - ref).max(), np.abs(naive - ref).max()
    print(f"fused error {err:.3g}, original's {base:.3g}")
    assert np.isfinite(got).all()
    assert err <= 2 * base + atol, (err, base)
    return subs, ops


# ---- graphs mirroring newer torch exporters ------------------------------------------------------

@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_torchscript_exporter(tmp_path, opset, causal):
    m, f, ref = graphs.sdpa_torchscript(causal=causal, opset=opset)
    check(tmp_path, m, f, ref, causal=int(causal), layout="bhsd", scale=pytest.approx(0.25))


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("gqa", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_dynamo_exporter(tmp_path, dt, gqa, causal):
    m, f, ref = graphs.sdpa_dynamo(dt=dt, gqa=gqa, causal=causal)
    subs, ops = check(tmp_path, m, f, ref, causal=int(causal), layout="bshd", num_kv_heads=4 // gqa)
    assert "Transpose" not in ops and "Expand" not in ops, ops


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("gqa,causal,softcap", [(1, True, 0.0), (2, True, 0.0), (1, False, 5.0), (4, True, 3.0)])
def test_attention_opset23(tmp_path, dt, gqa, causal, softcap):
    m, f, ref = graphs.attention23(dt=dt, gqa=gqa, causal=causal, softcap=softcap)
    check(tmp_path, m, f, ref, causal=int(causal), num_kv_heads=4 // gqa, softcap=pytest.approx(softcap))


def test_fp16_cast_pair_and_sliding_window(tmp_path):
    m, f, ref = graphs.softmax_fp32_pair()
    check(tmp_path, m, f, ref, causal=1, window_left=3, dtype="float16")


@pytest.mark.parametrize("kind", ["padding_mask", "alibi_bias", "softmax_axis", "probs_output",
                                  "top_left_causal_cross"])
def test_refusals(tmp_path, kind):
    m, why = graphs.refused(kind)
    fused, report = fuse(tmp_path, m)
    subs = report["subgraphs"]
    assert len(subs) == 1 and not subs[0]["fused"] and why in subs[0]["reason"], subs
    assert [n.op_type for n in fused.graph.node] == [n.op_type for n in m.graph.node]


# ---- torch >= 2's exporters, the graphs as they wrote them (tests/onnx/export_torch2.py) ---------

TORCH2_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch2")
with open(os.path.join(TORCH2_DIR, "cases.json")) as _f:
    TORCH2_CASES = json.load(_f)
# The TorchScript exporter's fp16 causal graph upcasts the scores and V to fp32 and returns fp32:
# the node (q's type out) cannot stand for that without a Cast the tool does not add, so it is
# left alone, and says why.
TORCH2_REFUSED = {"ts20_causal_fp16": "no common layout and type"}


@pytest.mark.parametrize("case", TORCH2_CASES, ids=[c["name"] for c in TORCH2_CASES])
def test_torch2_exports(tmp_path, case):
    model = onnx.load(os.path.join(TORCH2_DIR, case["file"]))
    if case["name"] in TORCH2_REFUSED:
        fused, report = fuse(tmp_path, model)
        subs = report["subgraphs"]
        assert len(subs) == 1 and not subs[0]["fused"], subs
        assert TORCH2_REFUSED[case["name"]] in subs[0]["reason"], subs
        assert [n.op_type for n in fused.graph.node] == [n.op_type for n in model.graph.node]
        return
    # Other batch and sequence sizes than the export's (2, 12): the axes are dynamic.
    rng = np.random.default_rng(len(case["name"]))
    dt = np.float16 if case["dtype"] == "float16" else np.float32
    b, s, d = 3, 9, case["head_dim"]
    feeds = {"q": rng.standard_normal((b, case["heads"], s, d)).astype(dt),
             "k": rng.standard_normal((b, case["heads_kv"], s, d)).astype(dt),
             "v": rng.standard_normal((b, case["heads_kv"], s, d)).astype(dt)}
    ref = graphs.reference(feeds["q"], feeds["k"], feeds["v"], causal=case["causal"],
                           scale=case["scale"])
    check(tmp_path, model, feeds, ref, causal=int(case["causal"]), layout="bhsd",
          scale=pytest.approx(case["scale"], rel=1e-6))


# ---- real PyTorch modules exported by this machine's torch ---------------------------------------

torch = pytest.importorskip("torch")
import modules  # noqa: E402  (needs torch)


def export(module, x, opset):
    import io
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, input_names=["x"], output_names=["y"], opset_version=opset,
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("opset", [14, 17])
def test_gpt2_block(tmp_path, opset, fp16):
    torch.manual_seed(0)
    mod = modules.GPT2Block(d=64, heads=4, max_len=32).eval()
    x = torch.randn(2, 13, 64)
    m = export(mod, x, opset)
    with torch.no_grad():
        ref = mod.double()(x.double()).numpy()
    feeds = {"x": x.numpy()}
    if fp16:
        m = graphs.to_fp16(m)
        feeds = {"x": x.numpy().astype(np.float16)}
    subs, ops = check(tmp_path, m, feeds, ref, causal=1, layout="packed_qkv", num_heads=4, num_kv_heads=4,
                      head_dim=16)
    assert "Split" not in ops, ops
    # another batch and sequence length through the same fused graph (dynamic axes)
    x2 = torch.randn(3, 29, 64)
    with torch.no_grad():
        ref2 = mod(x2.double()).numpy()
    feeds2 = {"x": x2.numpy().astype(np.float16 if fp16 else np.float32)}
    fused, _ = fuse(tmp_path, m)
    naive = run(m, feeds2).astype(np.float64)
    got = run(fused, feeds2, custom=True).astype(np.float64)
    assert np.abs(got - ref2).max() <= 2 * np.abs(naive - ref2).max() + 1e-4


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_llama_block(tmp_path, kv_heads, fp16):
    torch.manual_seed(1)
    mod = modules.LlamaBlock(d=64, heads=4, kv_heads=kv_heads, max_len=32).eval()
    x = torch.randn(2, 11, 64)
    m = export(mod, x, 17)
    with torch.no_grad():
        ref = mod.double()(x.double()).numpy()
    feeds = {"x": x.numpy()}
    if fp16:
        m = graphs.to_fp16(m)
        feeds = {"x": x.numpy().astype(np.float16)}
    check(tmp_path, m, feeds, ref, causal=1, num_heads=4, num_kv_heads=kv_heads, head_dim=16,
          scale=pytest.approx(0.25))


def test_projection_packing(tmp_path):
    """Separate q / k / v Linear layers of one input become one MatMul (no rotary embedding)."""
    torch.manual_seed(2)
    mod = modules.LlamaBlock(d=64, heads=4, kv_heads=2, max_len=32, rope=False).eval()
    x = torch.randn(2, 7, 64)
    m = export(mod, x, 17)
    with torch.no_grad():
        ref = mod.double()(x.double()).numpy()
    subs, ops = check(tmp_path, m, {"x": x.numpy()}, ref, layout="packed_qkv", num_kv_heads=2)
    assert ops.count("MatMul") == 2, ops  # the packed projection and the output projection
    assert "packed from 3 projections" in subs[0]["packing"]
