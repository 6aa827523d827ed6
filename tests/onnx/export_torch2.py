#!/usr/bin/env python3
"""Exports the `scaled_dot_product_attention` graphs that torch >= 2's exporters write, as files
the ONNX tests read (tests/onnx/torch2/: each model and one line of torch2/cases.json saying what
fa-onnx-fuse must find in it). CI's interpreter has Debian's torch 1.13, which has no SDPA, so the
graphs were exported once with a torch >= 2 venv and are committed; rerun to refresh them:

    python3 -m venv /tmp/t2 && /tmp/t2/bin/pip install torch onnx onnxscript
    /tmp/t2/bin/python tests/onnx/export_torch2.py tests/onnx/torch2

Each model is attention alone: q (batch, heads, seq_q, d), k and v (batch, heads_kv, seq_k, d),
batch and sequence axes dynamic, d = 16, scale 1 / sqrt(d) unless a case sets one."""
import json
import os
import sys

import torch
import torch.nn.functional as F


class Sdpa(torch.nn.Module):
    def __init__(self, causal, gqa, scale):
        super().__init__()
        self.causal, self.gqa, self.scale = causal, gqa, scale

    def forward(self, q, k, v):
        kw = {"is_causal": self.causal}
        if self.gqa:
            kw["enable_gqa"] = True
        if self.scale is not None:
            kw["scale"] = self.scale
        return F.scaled_dot_product_attention(q, k, v, **kw)


# name, exporter ("torchscript" | "dynamo"), opset, causal, heads / heads_kv, dtype, scale
CASES = [
    ("ts17", "torchscript", 17, False, (4, 4), torch.float32, None),
    ("ts17_causal", "torchscript", 17, True, (4, 4), torch.float32, None),
    ("ts20_causal_fp16", "torchscript", 20, True, (4, 4), torch.float16, None),
    ("dynamo18_gqa", "dynamo", 18, False, (4, 2), torch.float32, None),
    ("dynamo18_gqa_causal", "dynamo", 18, True, (8, 2), torch.float32, 0.2),
    ("dynamo23_causal", "dynamo", 23, True, (4, 4), torch.float32, None),
    ("dynamo23_gqa_fp16", "dynamo", 23, False, (4, 1), torch.float16, None),
]


def export(out_dir, name, exporter, opset, causal, heads, dtype, scale):
    hq, hk = heads
    d, batch, seq = 16, 2, 12
    q = torch.randn(batch, hq, seq, d, dtype=dtype)
    k = torch.randn(batch, hk, seq, d, dtype=dtype)
    v = torch.randn(batch, hk, seq, d, dtype=dtype)
    model = Sdpa(causal, hq != hk, scale).eval()
    path = os.path.join(out_dir, name + ".onnx")
    if exporter == "torchscript":
        axes = {"q": {0: "batch", 2: "seq"}, "k": {0: "batch", 2: "seq"}, "v": {0: "batch", 2: "seq"},
                "out": {0: "batch", 2: "seq"}}
        torch.onnx.export(model, (q, k, v), path, input_names=["q", "k", "v"], output_names=["out"],
                          dynamic_axes=axes, opset_version=opset, dynamo=False)
    else:
        b, s = torch.export.Dim("batch"), torch.export.Dim("seq")
        shapes = {"q": {0: b, 2: s}, "k": {0: b, 2: s}, "v": {0: b, 2: s}}
        prog = torch.onnx.export(model, (q, k, v), input_names=["q", "k", "v"],
                                 output_names=["out"], dynamic_shapes=shapes, opset_version=opset,
                                 dynamo=True)
        prog.save(path)
    return {"name": name, "file": name + ".onnx", "exporter": exporter, "opset": opset,
            "causal": causal, "heads": hq, "heads_kv": hk, "head_dim": d,
            "dtype": "float16" if dtype == torch.float16 else "float32",
            "scale": scale if scale is not None else d ** -0.5, "torch": torch.__version__}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "torch2")
    os.makedirs(out_dir, exist_ok=True)
    cases = [export(out_dir, *c) for c in CASES]
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    for c in cases:
        print(c["name"], os.path.getsize(os.path.join(out_dir, c["file"])), "bytes")


if __name__ == "__main__":
    main()
