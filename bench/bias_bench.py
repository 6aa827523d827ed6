#!/usr/bin/env python3
"""Attention bias and mask benchmark (issue 31): flashattn with attn_bias against PyTorch SDPA's
CUDNN_ATTENTION and EFFICIENT_ATTENTION with the same attn_mask, and FlexAttention (the bias as a
score_mod, the padding as a block_mask), same process, same cells, same rounds.

Cells: bf16, d 128, 16 heads, seqlen s in 2k / 4k / 8k / 16k with batch 16384 / s, each with
  none     no bias (every backend's plain call: the reference point),
  bias     a (1, heads, s, s) bf16 bias, shared by the batch (T5 / ALiBi-like relative biases),
  padding  a boolean key-padding mask (batch, 1, 1, s): batch entry i sees its first len_i keys,
           len_i drawn in [s / 2, s] (seeded); FlexAttention gets it as a block mask (it skips
           the blocks past len_i), the others as attn_mask;
and --passes fwd, fwdbwd: the forward alone, and forward + backward of q, k, v (and the bias
when it is a float; a backend that refuses one is left out of the cell and named in the record's
"skipped", with its message).
TFLOP/s = 4 b h s^2 d (fwd; x 3.5 for fwdbwd) / median time, the nominal count whatever a mask
hides. Timing: CUDA events (gpu_common.time_fn: >= 200 ms of untimed calls, then the median of
--repeats), each backend once a round in a Williams order (round_order.py), the median of the
rounds. peak_bytes: torch.cuda.max_memory_allocated above what was allocated before, over one
call (its outputs and workspace; the backward's gradients), apart from the timing: the memory
beyond the inputs and the bias.

  python3 bench/bias_bench.py --json out.json [--commit SHA] [--seqlens 2048,...]
      [--masks none,bias,padding] [--passes fwd,fwdbwd] [--heads 16] [--tokens 16384]
      [--backends flashattn,torch-cudnn,torch-efficient,torch-flex] [--repeats 20] [--rounds N]
      [--device cpu]   (a smoke run on the CPU backend: ours, and SDPA's math where torch has it)
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashattn  # noqa: E402
from gpu_common import median_ms  # noqa: E402
from round_order import round_orders  # noqa: E402

D = 128
SDPA = {"torch-cudnn": "CUDNN_ATTENTION", "torch-efficient": "EFFICIENT_ATTENTION",
        "torch-math": "MATH"}


def make_cell(b, h, s, mask, dtype, device, gen):
    """Inputs of a cell: q, k, v in both layouts (ours (b, s, h, d); SDPA's and Flex's (b, h, s,
    d), the same values), dout, and the mask's forms: ours and SDPA's tensor, Flex's lengths."""
    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)
    q, k, v, dout = rnd(b, s, h, D), rnd(b, s, h, D), rnd(b, s, h, D), rnd(b, s, h, D)
    cell = dict(q=q, k=k, v=v, dout=dout, bias=None, lengths=None)
    if mask == "bias":
        cell["bias"] = rnd(1, h, s, s)
    elif mask == "padding":
        lengths = torch.randint(s // 2, s + 1, (b,), generator=gen)
        keep = torch.arange(s)[None, :] < lengths[:, None]
        cell["bias"] = keep[:, None, None, :].to(device)
        cell["lengths"] = lengths.to(device)
    return cell


def leaves(cell, layout, grad):
    """q, k, v (and a float bias) as fresh leaves in the layout a backend takes."""
    qkv = [cell[n] if layout == "bshd" else cell[n].transpose(1, 2).contiguous()
           for n in ("q", "k", "v")]
    out = [t.detach().requires_grad_(grad) for t in qkv]
    bias = cell["bias"]
    if bias is not None and bias.is_floating_point():
        bias = bias.detach().requires_grad_(grad)
    return out, bias


def ours(cell, grad):
    (q, k, v), bias = leaves(cell, "bshd", grad)
    dout = cell["dout"]
    wrt = [q, k, v] + ([bias] if grad and bias is not None and bias.requires_grad else [])

    def call():
        with torch.set_grad_enabled(grad):
            out = flashattn.flash_attn_func(q, k, v, attn_bias=bias)
            if grad:
                torch.autograd.grad(out, wrt, dout)
    return call


def sdpa(cell, grad, backend):
    (q, k, v), mask = leaves(cell, "bhsd", grad)
    dout = cell["dout"].transpose(1, 2).contiguous()
    wrt = [q, k, v] + ([mask] if grad and mask is not None and mask.requires_grad else [])
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind = getattr(SDPBackend, SDPA[backend])

    def call():
        with torch.set_grad_enabled(grad), sdpa_kernel(kind):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            if grad:
                torch.autograd.grad(out, wrt, dout)
    return call


def flex(cell, grad, compiled):
    (q, k, v), bias = leaves(cell, "bhsd", grad)
    dout = cell["dout"].transpose(1, 2).contiguous()
    from torch.nn.attention.flex_attention import create_block_mask
    b, h, s = q.shape[0], q.shape[1], q.shape[2]
    score_mod, block_mask, wrt = None, None, [q, k, v]
    if cell["lengths"] is not None:
        lengths = cell["lengths"]
        block_mask = create_block_mask(lambda bi, hi, qi, ki: ki < lengths[bi], b, None, s, s,
                                       device=q.device)
    elif bias is not None:
        def score_mod(score, bi, hi, qi, ki):
            return score + bias[0, hi, qi, ki]
        if grad:
            wrt.append(bias)

    def call():
        with torch.set_grad_enabled(grad):
            out = compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)
            if grad:
                torch.autograd.grad(out, wrt, dout)
    return call


def peak_bytes(fn, device):
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--seqlens", default="2048,4096,8192,16384")
    ap.add_argument("--masks", default="none,bias,padding")
    ap.add_argument("--passes", default="fwd,fwdbwd")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    ap.add_argument("--backends", default="flashattn,torch-cudnn,torch-efficient,torch-flex")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()
    dev = a.device
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    backends = a.backends.split(",")
    if dev == "cpu":  # the smoke run: ours, and SDPA's math backend where this torch has it
        backends = ["flashattn"] + (["torch-math"] if hasattr(F, "scaled_dot_product_attention")
                                    and hasattr(torch.nn, "attention") else [])
    header = {"commit": a.commit, "command": " ".join(sys.argv)}
    if dev == "cuda":
        from gpu_common import ceilings, record_header
        header = record_header(flashattn._library.load(), a.commit, ceilings())
    compiled = None
    if "torch-flex" in backends:
        from torch.nn.attention.flex_attention import flex_attention
        compiled = torch.compile(flex_attention)
    rows, skipped = [], []
    gen = torch.Generator().manual_seed(31)
    for s in (int(x) for x in a.seqlens.split(",")):
        b = max(1, a.tokens // s)
        for mask in a.masks.split(","):
            cell_in = make_cell(b, a.heads, s, mask, dtype, dev, gen)
            for pas in a.passes.split(","):
                grad = pas == "fwdbwd"
                cell = dict(op=pas, dtype=str(dtype).replace("torch.", ""), d=D, b=b, h=a.heads,
                            s=s, mask=mask)
                calls = {}
                for name in backends:
                    try:
                        if name == "flashattn":
                            fn = ours(cell_in, grad)
                        elif name == "torch-flex":
                            fn = flex(cell_in, grad, compiled)
                        else:
                            fn = sdpa(cell_in, grad, name)
                        fn()  # compiles Flex's kernels; a refusal shows here, not in the timing
                        calls[name] = fn
                    except (RuntimeError, NotImplementedError, flashattn.FlashAttnError) as e:
                        skipped.append(dict(cell, backend=name, why=str(e)[:300]))
                times = {n: [] for n in calls}
                for order in round_orders(list(calls), a.rounds):
                    for n in order:
                        times[n].append(median_ms([calls[n]], a.repeats, dev))
                flops = 4 * b * a.heads * s * s * D * (3.5 if grad else 1.0)
                for n, fn in calls.items():
                    ms = statistics.median(times[n])
                    row = dict(cell, backend=n, ms=ms, ms_rounds=times[n],
                               tflops=flops / (ms * 1e-3) / 1e12, peak_bytes=peak_bytes(fn, dev))
                    rows.append(row)
                    print(f"s{s:<6} b{b:<3} {mask:8} {pas:7} {n:16} {ms:9.3f} ms "
                          f"{row['tflops']:7.1f} TFLOP/s", flush=True)
            del cell_in
            if dev == "cuda":
                torch.cuda.empty_cache()
    with open(a.json, "w") as f:
        json.dump(dict(header, rows=rows, skipped=skipped), f, indent=1)


if __name__ == "__main__":
    main()
