"""ctest tensorrt.fused_node_fields: the FlashAttention nodes fa-onnx-fuse writes map 1:1 onto the
TensorRT plugin, as TensorRT's ONNX parser maps them (no TensorRT needed):
- the parser looks the plugin up by the node's op type, its plugin_version attribute (default "1")
  and its plugin_namespace attribute (default ""): the node has neither, and the plugin is
  FlashAttention version 1, registered in the default namespace too (plugins/tensorrt/plugin.h,
  plugin.cpp);
- it passes the attributes named by the creator's fields (plugins/tensorrt/fields.h, kFieldSpecs),
  INT as kINT32, FLOAT as kFLOAT32, STRING as kCHAR: every attribute of the node must be a field of
  that kind (an attribute the plugin does not name would be dropped), and INT values must fit in
  int32;
- the values must be ones the plugin's creator accepts (fields.cpp, check_config), and the inputs
  as many as the layout takes (1 for packed_qkv, else 3).
Fuses graphs of tests/onnx (op-for-op copies of torch's exporters' attention, opset 23's
Attention) and, with torch, GPT-2 / Llama blocks exported here (packed_qkv, GQA).
usage: fused_node_test.py FA_ONNX_FUSE_BINARY REPO_ROOT   (exit 77: skipped, without onnx)"""
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import onnx
    import numpy  # noqa: F401  (graphs.py)
except ImportError as e:
    print(f"skipped: {e.name} not importable by {sys.executable} (scripts/setup.sh installs it into "
          ".deps/onnx-venv)")
    sys.exit(77)

TOOL, ROOT = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
import graphs  # noqa: E402

fields_h = open(os.path.join(ROOT, "plugins", "tensorrt", "fields.h"), encoding="utf-8").read()
plugin_h = open(os.path.join(ROOT, "plugins", "tensorrt", "plugin.h"), encoding="utf-8").read()
plugin_cpp = open(os.path.join(ROOT, "plugins", "tensorrt", "plugin.cpp"), encoding="utf-8").read()
KIND = {"Int": onnx.AttributeProto.INT, "Float": onnx.AttributeProto.FLOAT,
        "String": onnx.AttributeProto.STRING}
spec_block = fields_h[fields_h.index("kFieldSpecs{{"):]
spec_block = spec_block[:spec_block.index("}};")]
FIELDS = {name: KIND[kind] for name, kind in re.findall(r'\{"(\w+)", FieldKind::(\w+)', spec_block)}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


check(len(FIELDS) == 8, f"kFieldSpecs read as {FIELDS}")
check(re.search(r'kPluginName = "FlashAttention"', plugin_h), "plugin.h: the plugin is not named FlashAttention")
check(re.search(r'kPluginVersion = "1"', plugin_h), "plugin.h: the plugin's version is not \"1\"")
check(re.search(r'Creator own\(fa_trt::kPluginNamespace\), default_namespace\(""\)', plugin_cpp),
      "plugin.cpp: getCreators does not register a creator in the default namespace")


def accepted(a):
    """The creator's checks (plugins/tensorrt/fields.cpp, check_config) on the node's values."""
    why = []
    if a["causal"] not in (0, 1):
        why.append("causal")
    if a["window_left"] < -1 or a["window_right"] < -1:
        why.append("window")
    if not (math.isfinite(a["softcap"]) and a["softcap"] >= 0):
        why.append("softcap")
    if not math.isfinite(a["scale"]):
        why.append("scale")
    h, hk = a["num_heads"], a["num_kv_heads"]
    if h < 0 or hk < 0 or (h > 0 and hk > 0 and h % hk) or (a["layout"] == "packed_qkv" and not (h and hk)):
        why.append("heads")
    if a["layout"] not in ("bshd", "bhsd", "packed_qkv"):
        why.append("layout")
    return why


def fused_nodes(name, model):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.onnx"), os.path.join(d, "out.onnx")
        onnx.save(model, src)
        r = subprocess.run([TOOL, src, "-o", dst, "--quiet"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"{name}: fa-onnx-fuse failed: {r.stderr}")
        if r.returncode:
            return []
        nodes = [n for n in onnx.load(dst).graph.node if n.op_type == "FlashAttention"]
    check(nodes, f"{name}: no FlashAttention node")
    return nodes


models = [
    ("sdpa_torchscript", graphs.sdpa_torchscript()[0]),
    ("sdpa_torchscript_fp16", graphs.to_fp16(graphs.sdpa_torchscript()[0])),
    ("sdpa_dynamo_gqa", graphs.sdpa_dynamo(gqa=2)[0]),
    ("sdpa_dynamo_bhsd", graphs.sdpa_dynamo(bshd=False, causal=False)[0]),
    ("attention23_softcap", graphs.attention23(gqa=2, softcap=30.0, scale=0.2)[0]),
]
with_torch = False
try:
    import io

    import torch
    import modules

    def export(module, x):
        buf = io.BytesIO()
        torch.onnx.export(module, (x,), buf, input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
        return onnx.load_from_string(buf.getvalue())

    torch.manual_seed(0)
    models.append(("gpt2_block", export(modules.GPT2Block(d=64, heads=4, max_len=32).eval(), torch.randn(2, 13, 64))))
    models.append(("llama_block_gqa", export(modules.LlamaBlock(d=64, heads=4, kv_heads=2, max_len=32).eval(),
                                             torch.randn(2, 11, 64))))
    models.append(("llama_packed", export(modules.LlamaBlock(d=64, heads=4, kv_heads=2, max_len=32, rope=False)
                                          .eval(), torch.randn(2, 7, 64))))
    with_torch = True
except ImportError as e:
    print(f"note: {e.name} not importable: the exported PyTorch blocks are left out")

layouts = set()
for name, model in models:
    for n in fused_nodes(name, model):
        attrs = {a.name: a for a in n.attribute}
        check(n.domain == "flashattn", f"{name}: the node's domain is '{n.domain}'")
        check("plugin_version" not in attrs and "plugin_namespace" not in attrs,
              f"{name}: the node names a plugin version / namespace; the plugin expects the parser's defaults")
        for a in n.attribute:
            check(a.name in FIELDS, f"{name}: attribute {a.name} is no field of the plugin (the parser would drop it)")
            check(FIELDS.get(a.name) == a.type,
                  f"{name}: attribute {a.name} has type {onnx.AttributeProto.AttributeType.Name(a.type)}; "
                  f"the plugin's field takes {FIELDS.get(a.name)}")
            if a.type == onnx.AttributeProto.INT:
                check(-2**31 <= a.i < 2**31, f"{name}: {a.name}={a.i} does not fit the parser's int32")
        values = {k: onnx.helper.get_attribute_value(a) for k, a in attrs.items()}
        values = {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}
        missing = set(FIELDS) - set(values)
        check(not missing, f"{name}: the node lacks {sorted(missing)} (the plugin would take its defaults)")
        if missing:
            continue
        why = accepted(values)
        check(not why, f"{name}: the plugin would refuse {why}: {values}")
        want = 1 if values["layout"] == "packed_qkv" else 3
        check(len(n.input) == want, f"{name}: layout {values['layout']} with {len(n.input)} inputs")
        layouts.add(values["layout"])
        print(f"{name}: {n.name}: {values}")

check({"bshd", "bhsd"} | ({"packed_qkv"} if with_torch else set()) <= layouts, f"layouts seen: {sorted(layouts)}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"fused_node_fields: ok ({len(models)} models, layouts {sorted(layouts)})")
