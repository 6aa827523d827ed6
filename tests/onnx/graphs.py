"""The test models: real PyTorch modules exported with torch.onnx.export, and graphs built with the
onnx helper API that mirror, op for op, what newer torch exporters write for
scaled_dot_product_attention (this machine's torch is Debian's 1.13, whose exporter predates SDPA):

  sdpa_torchscript  torch.onnx's TorchScript exporter (symbolic_opset14.scaled_dot_product_attention,
                    torch >= 2.1): Mul(q, sqrt(scale)) / Mul(kᵀ, sqrt(scale)), a Trilu causal mask
                    built from Shape / Slice / Concat / Expand, Where(Equal(mask, 0), -inf, 0), Add
  sdpa_dynamo       the dynamo exporter's torchlib decomposition (opset 18-22): kᵀ as
                    Reshape -> Transpose -> Reshape, GQA as Unsqueeze -> Expand -> Reshape, CastLike,
                    Dropout(ratio 0)
  attention23       opset 23's Attention node (what that exporter writes at opset 23)

Every builder returns (onnx.ModelProto, feeds, fp64 reference output).
"""
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INT64_MAX = 9223372036854775807
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def reference(q, k, v, causal=False, scale=None, softcap=0.0, window_left=-1):
    """fp64 attention on (b, h, s, d) arrays; GQA by h // (hq // hk); causal top-left (s_q == s_k)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    hq, hk = q.shape[1], k.shape[1]
    k = np.repeat(k, hq // hk, axis=1)
    v = np.repeat(v, hq // hk, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * (scale if scale else 1.0 / math.sqrt(q.shape[-1]))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    sq, sk = s.shape[-2:]
    i = np.arange(sq)[:, None] + sk - sq
    j = np.arange(sk)[None, :]
    keep = np.ones((sq, sk), bool)
    if causal:
        keep &= j <= i
    if window_left >= 0:
        keep &= j >= i - window_left
    s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def _c(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype), name))


class _G:
    """A tiny graph builder: nodes, initializers, fresh names."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def op(self, op, inputs, n_out=1, **attrs):
        outs = [f"{op.lower()}_{self.n}_{i}" for i in range(n_out)]
        self.n += 1
        self.nodes.append(helper.make_node(op, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.int64):
        name = f"c_{self.n}"
        self.n += 1
        self.nodes.append(_c(name, value, dtype))
        return name


def _inputs(dt, b, s_q, s_k, hq, hk, d, bshd):
    if bshd:
        return [helper.make_tensor_value_info("q", dt, ["batch", s_q, hq, d]),
                helper.make_tensor_value_info("k", dt, ["batch", s_k, hk, d]),
                helper.make_tensor_value_info("v", dt, ["batch", s_k, hk, d])]
    return [helper.make_tensor_value_info("q", dt, ["batch", hq, s_q, d]),
            helper.make_tensor_value_info("k", dt, ["batch", hk, s_k, d]),
            helper.make_tensor_value_info("v", dt, ["batch", hk, s_k, d])]


def _feeds(dt, b, sq, sk, hq, hk, d, bshd, seed):
    rng = np.random.default_rng(seed)
    shp = lambda h, s: (b, s, h, d) if bshd else (b, h, s, d)
    f = {"q": rng.standard_normal(shp(hq, sq)), "k": rng.standard_normal(shp(hk, sk)),
         "v": rng.standard_normal(shp(hk, sk))}
    f = {n: x.astype(NP[dt]) for n, x in f.items()}
    bh = {n: (x.transpose(0, 2, 1, 3) if bshd else x) for n, x in f.items()}
    return f, bh


def _model(g, inputs, out, dt, opset):
    graph = helper.make_graph(g.nodes, "attention", inputs,
                              [helper.make_tensor_value_info(out, dt, None)], g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 17 else 10
    return m


def _repeat_kv(g, x, q):
    """The dynamo exporter's _attention_repeat_kv_for_group_query."""
    bsz = g.op("Shape", [q], start=0, end=1)
    hq = g.op("Shape", [q], start=1, end=2)
    hk = g.op("Shape", [x], start=1, end=2)
    hd = g.op("Shape", [x], start=3, end=4)
    sl = g.op("Shape", [x], start=2, end=3)
    rep = g.op("Div", [hq, hk])
    un = g.op("Unsqueeze", [x, g.const([2])])
    ex = g.op("Expand", [un, g.op("Concat", [bsz, hk, rep, sl, hd], axis=0)])
    return g.op("Reshape", [ex, g.op("Concat", [bsz, hq, sl, hd], axis=0)])


def sdpa_torchscript(dt=TensorProto.FLOAT, causal=True, opset=17, b=2, s=9, h=4, d=16, seed=0):
    g = _G()
    q, k, v = "q", "k", "v"
    npdt = NP[dt]
    qs = g.op("Shape", [q])
    last = g.op("Slice", [qs, g.const([-1]), g.const([INT64_MAX])])
    emb = g.op("Cast", [last], to=dt)
    scale = g.op("Cast", [g.op("Div", [g.const([1.0], npdt), g.op("Sqrt", [emb])])], to=dt)
    mask = None
    if causal:
        ks = g.op("Shape", [k])
        tl = g.op("Slice", [qs, g.const([-2]), g.const([-1])])
        sl = g.op("Slice", [ks, g.const([-2]), g.const([-1])])
        ones = g.op("Expand", [g.const([1.0], npdt), g.op("Concat", [tl, sl], axis=0)])
        tri = g.op("Trilu", [ones], upper=0)
        mask = g.op("Where", [g.op("Equal", [tri, g.const([0.0], npdt)]), g.const([-np.inf], npdt),
                              g.const([0.0], npdt)])
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    qk = g.op("MatMul", [g.op("Mul", [q, g.op("Sqrt", [scale])]), g.op("Mul", [kt, g.op("Sqrt", [scale])])])
    if mask:
        qk = g.op("Add", [qk, mask])
    out = g.op("MatMul", [g.op("Softmax", [qk], axis=-1), v])
    m = _model(g, _inputs(dt, b, "seq", "seq", h, h, d, False), out, dt, opset)
    f, bh = _feeds(dt, b, s, s, h, h, d, False, seed)
    return m, f, reference(bh["q"], bh["k"], bh["v"], causal=causal)


def sdpa_dynamo(dt=TensorProto.FLOAT, causal=True, gqa=1, opset=18, b=2, s=11, h=4, d=16, bshd=True,
                seed=1):
    """Inputs (b, s, h, d) transposed to (b, h, s, d) as an attention module's are; out back."""
    g = _G()
    hk = h // gqa
    q, k, v = "q", "k", "v"
    if bshd:
        q, k, v = (g.op("Transpose", [x], perm=[0, 2, 1, 3]) for x in (q, k, v))
    qshape = g.op("Shape", [q])
    emb = g.op("CastLike", [g.op("Gather", [qshape, g.const([-1])]), q])
    one = g.op("CastLike", [g.op("Constant", [], value_float=1.0), q])
    scale = g.op("CastLike", [g.op("Div", [one, g.op("Sqrt", [emb])]), q])
    mask = None
    if causal:
        tl = g.op("Slice", [qshape, g.const([-2]), g.const([-1])])
        sl = g.op("Slice", [g.op("Shape", [k]), g.const([-2]), g.const([-1])])
        ones = g.op("Expand", [g.op("Constant", [], value_float=1.0), g.op("Concat", [tl, sl], axis=0)])
        tri = g.op("Trilu", [ones], upper=0)
        mask = g.op("Where", [g.op("Equal", [tri, g.op("Constant", [], value_float=0.0)]),
                              g.op("Constant", [], value_float=-math.inf), g.op("Constant", [], value_float=0.0)])
        mask = g.op("CastLike", [mask, q])
    if gqa > 1:
        k, v = _repeat_kv(g, k, q), _repeat_kv(g, v, q)
    last = g.op("Shape", [k], start=-1)
    second = g.op("Shape", [k], start=-2, end=-1)
    first = g.op("Shape", [k], end=-2)
    ksq = g.op("Reshape", [k, g.op("Concat", [g.const([-1]), second, last], axis=0)])
    kt = g.op("Reshape", [g.op("Transpose", [ksq], perm=[0, 2, 1]), g.op("Concat", [first, last, second], axis=0)])
    sq = g.op("Sqrt", [scale])
    qk = g.op("MatMul", [g.op("Mul", [q, sq]), g.op("Mul", [kt, g.op("CastLike", [sq, kt])])])
    if mask:
        qk = g.op("Add", [qk, mask])
    p = g.op("Dropout", [g.op("Softmax", [qk], axis=-1), g.op("Constant", [], value_float=0.0)], n_out=2)[0]
    out = g.op("MatMul", [p, v])
    if bshd:
        out = g.op("Transpose", [out], perm=[0, 2, 1, 3])
    m = _model(g, _inputs(dt, b, "seq", "seq", h, hk, d, bshd), out, dt, opset)
    f, bh = _feeds(dt, b, s, s, h, hk, d, bshd, seed)
    ref = reference(bh["q"], bh["k"], bh["v"], causal=causal)
    return m, f, ref.transpose(0, 2, 1, 3) if bshd else ref


def attention23(dt=TensorProto.FLOAT, causal=True, gqa=1, softcap=0.0, scale=None, b=2, s=10, h=4, d=16,
                bshd=True, seed=2):
    g = _G()
    hk = h // gqa
    q, k, v = "q", "k", "v"
    if bshd:
        q, k, v = (g.op("Transpose", [x], perm=[0, 2, 1, 3]) for x in (q, k, v))
    attrs = {"is_causal": int(causal)}
    if softcap:
        attrs["softcap"] = softcap
    if scale:
        attrs["scale"] = scale
    out = g.op("Attention", [q, k, v], **attrs)
    if bshd:
        out = g.op("Transpose", [out], perm=[0, 2, 1, 3])
    m = _model(g, _inputs(dt, b, "seq", "seq", h, hk, d, bshd), out, dt, 23)
    f, bh = _feeds(dt, b, s, s, h, hk, d, bshd, seed)
    ref = reference(bh["q"], bh["k"], bh["v"], causal=causal, softcap=softcap, scale=scale)
    return m, f, ref.transpose(0, 2, 1, 3) if bshd else ref


def softmax_fp32_pair(b=2, s=12, h=2, d=32, seed=3):
    """fp16 attention whose scores go through Cast(fp32) -> Softmax -> Cast(fp16), transformers-style,
    with a sliding window mask from two Trilu (keys j in [i - 3, i])."""
    g = _G()
    dt = TensorProto.FLOAT16
    q, k, v = (g.op("Transpose", [x], perm=[0, 2, 1, 3]) for x in ("q", "k", "v"))
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    qk = g.op("Div", [g.op("MatMul", [q, kt]), g.const(math.sqrt(d), np.float16)])
    n = g.op("Shape", [q], start=2, end=3)
    ones = g.op("ConstantOfShape", [g.op("Concat", [n, n], axis=0)],
                value=numpy_helper.from_array(np.array([1], np.int64)))
    band = g.op("Trilu", [g.op("Trilu", [ones], upper=0), g.const(-3)], upper=1)
    keep = g.op("Cast", [band], to=TensorProto.BOOL)
    qk = g.op("Where", [keep, qk, g.const(-65504.0, np.float16)])
    p = g.op("Cast", [g.op("Softmax", [g.op("Cast", [qk], to=TensorProto.FLOAT)], axis=-1)], to=dt)
    out = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    m = _model(g, _inputs(dt, b, "seq", "seq", h, h, d, True), out, dt, 17)
    f, bh = _feeds(dt, b, s, s, h, h, d, True, seed)
    return m, f, reference(bh["q"], bh["k"], bh["v"], causal=True, window_left=3).transpose(0, 2, 1, 3)


# ---- graphs the tool must refuse -----------------------------------------------------------------


def refused(kind, b=2, s=8, h=2, d=16):
    """Small fp32 graphs, each with one reason to refuse; returns (model, expected reason fragment)."""
    g = _G()
    dt = TensorProto.FLOAT
    q, k, v = "q", "k", "v"
    inputs = _inputs(dt, b, "seq", "seq", h, h, d, False)
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    qk = g.op("Mul", [g.op("MatMul", [q, kt]), g.const(0.25, np.float32)])
    outputs = []
    axis = -1
    if kind == "padding_mask":
        inputs.append(helper.make_tensor_value_info("mask", dt, ["batch", 1, 1, "seq"]))
        qk = g.op("Add", [qk, "mask"])
        why = "additive mask or bias"
    elif kind == "alibi_bias":
        rng = np.random.default_rng(0)
        g.inits.append(numpy_helper.from_array(rng.standard_normal((1, h, s, s)).astype(np.float32), "bias"))
        qk = g.op("Add", [qk, "bias"])
        why = "additive mask or bias"
    elif kind == "softmax_axis":
        axis = 2
        why = "not the last"
    elif kind == "probs_output":
        why = "also used elsewhere"
    elif kind == "top_left_causal_cross":
        inputs = [helper.make_tensor_value_info("q", dt, ["batch", h, "seq_q", d]),
                  helper.make_tensor_value_info("k", dt, ["batch", h, "seq_k", d]),
                  helper.make_tensor_value_info("v", dt, ["batch", h, "seq_k", d])]
        sq = g.op("Shape", [q], start=2, end=3)
        sk = g.op("Shape", [k], start=2, end=3)
        ones = g.op("Expand", [g.const([1.0], np.float32), g.op("Concat", [sq, sk], axis=0)])
        tri = g.op("Trilu", [ones], upper=0)
        mask = g.op("Where", [g.op("Equal", [tri, g.const([0.0], np.float32)]), g.const([-np.inf], np.float32),
                              g.const([0.0], np.float32)])
        qk = g.op("Add", [qk, mask])
        why = "aligned with offset"
    else:
        raise ValueError(kind)
    p = g.op("Softmax", [qk], axis=axis)
    out = g.op("MatMul", [p, v])
    if kind == "probs_output":
        outputs.append(helper.make_tensor_value_info(p, dt, None))
    graph = helper.make_graph(g.nodes, "attention", inputs, [helper.make_tensor_value_info(out, dt, None)] + outputs,
                              g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, why


def to_fp16(model):
    """The fp16 version of an fp32 graph exported by torch (what .half() before export gives)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        for a in n.attribute:
            if a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    return m
