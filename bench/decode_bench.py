#!/usr/bin/env python3
"""Decode benchmark (shared/BENCH.md's decode grid): flashattn.flash_attn_with_kvcache against
PyTorch SDPA's CUDNN_ATTENTION and FLASH_ATTENTION, one query step against a KV cache, same
process, same cells, same rounds.

Cells: bf16, d 128, heads_q 32 over heads_kv 8 (Llama-3-8B) and 32 over 32, batch
{1, 8, 32, 64, 128} x cache {1k, 4k, 16k, 64k, 128k} (cells whose K / V pass --max-gb left out),
seqlen_q 1 and 4, the cache dense and paged (page 16 and 256; ours only: SDPA takes no block
table). Every cell's cache is full (cache_seqlens = cache length) and the queries see every key
(not causal: SDPA's is_causal aligns top-left, so a causal 4-query step would mean something else
there; the 4 x 3 / 2 masked scores are noise at these lengths).
--append adds, per dense cell, ours with the step's seqlen_q new keys / values appended and
rotary (rotary_dim 128) on them and q: the flash_attn_with_kvcache call a decoding model makes.
--dtype fp8: q, the cache and the new keys in e4m3 (torch.float8_e4m3fn), out bf16, ours only
(SDPA takes no e4m3), the append without rotary; K / V bytes count one byte an element.

Timing: every backend by CUDA-graph replay (one graph per input set, captured after a warm-up
call), as serving engines run decode, so that host overhead does not decide the small cells;
eager (a plain call) beside it (ms_eager). Median of --repeats replays after >= 200 ms of warm-up
(gpu_common.time_fn), rotating over input sets where the cache is small enough for the L2 to
flatter it (3 sets below 256 MB of K / V, else 1). Rounds: each backend once a round in a Williams
order (round_order.py), the median of the rounds' medians.
Bytes = K and V read + q and out; TB/s = bytes / time, next to the copy bandwidth measured in the
same run (ceilings). SDPA gets GQA through enable_gqa=True where it takes it, else K / V expanded
to heads_q (then its bytes are still counted as the logical K / V: what a user reads).

  python3 bench/decode_bench.py --json out.json [--quick] [--commit SHA] [--append]
      [--batches 1,8] [--caches 1024,...] [--heads 32/8,32/32] [--sq 1,4] [--pages 0,16,256]
      [--backends flashattn,torch-cudnn,torch-fa2] [--splits 1,3,8] [--repeats 30] [--rounds N]
      [--max-gb 40] [--dtype fp8]
      [--device cpu]   (a smoke run on the CPU backend: eager, ours only)
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
DTYPE = torch.bfloat16


def cell_sets(b, s, hq, hk, sq, page, append, device, nsets, fp8=False):
    """nsets input sets of one cell: q, the cache (dense (b, s, hk, d) or paged with a random
    block table), cache_seqlens, and with append the new keys / values and rotary tables (fp8:
    q, the cache and the new keys / values in e4m3, no rotary: the library refuses it with fp8)."""
    sets = []
    for _ in range(nsets):
        st = {"q": torch.randn(b, sq, hq, D, device=device, dtype=DTYPE)}
        if page:
            per = -(-s // page)
            st["k"] = torch.randn(b * per, page, hk, D, device=device, dtype=DTYPE)
            st["v"] = torch.randn_like(st["k"])
            st["table"] = torch.randperm(b * per, device=device).reshape(b, per).to(torch.int32)
        else:
            st["k"] = torch.randn(b, s, hk, D, device=device, dtype=DTYPE)
            st["v"] = torch.randn_like(st["k"])
            st["table"] = None
        cached = s - sq if append else s
        st["seqlens"] = torch.full((b,), cached, device=device, dtype=torch.int32)
        if append:
            st["k_new"] = torch.randn(b, sq, hk, D, device=device, dtype=DTYPE)
            st["v_new"] = torch.randn_like(st["k_new"])
            angle = torch.arange(s + sq, device=device, dtype=torch.float32)[:, None] * \
                10000.0 ** (-torch.arange(0, D, 2, device=device, dtype=torch.float32) / D)
            st["cos"], st["sin"] = angle.cos().to(DTYPE), angle.sin().to(DTYPE)
        if fp8:
            for key in ("q", "k", "v", "k_new", "v_new"):
                if key in st:
                    st[key] = st[key].to(torch.float8_e4m3fn)
            st.pop("cos", None)
            st.pop("sin", None)
        sets.append(st)
    return sets


def ours(st, append, splits=0):
    if append:
        return flashattn.flash_attn_with_kvcache(
            st["q"], st["k"], st["v"], k=st["k_new"], v=st["v_new"], rotary_cos=st.get("cos"),
            rotary_sin=st.get("sin"), cache_seqlens=st["seqlens"], block_table=st["table"],
            num_splits=splits)
    return flashattn.flash_attn_with_kvcache(st["q"], st["k"], st["v"],
                                             cache_seqlens=st["seqlens"],
                                             block_table=st["table"], num_splits=splits)


def our_splits(name):
    """num_splits of one of our backends: flashattn (the library's choice, 0) or flashattn-sN."""
    return 0 if name == "flashattn" else int(name[len("flashattn-s"):])


def sdpa_call(st, backend):
    """SDPA on the dense cache in its (b, h, s, d) view; GQA through enable_gqa where accepted."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind = {"torch-cudnn": SDPBackend.CUDNN_ATTENTION, "torch-fa2": SDPBackend.FLASH_ATTENTION}
    q, k, v = st["q"].transpose(1, 2), st["k"].transpose(1, 2), st["v"].transpose(1, 2)
    with sdpa_kernel([kind[backend]]):
        try:
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            torch.cuda.synchronize()
            return lambda: _sdpa(kind[backend], q, k, v, True), "enable_gqa"
        except RuntimeError:
            pass
        group = q.shape[1] // k.shape[1]
        ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        F.scaled_dot_product_attention(q, ke, ve)  # raises if this backend cannot run it at all
        return lambda: _sdpa(kind[backend], q, ke, ve, False), "expanded heads"


def _sdpa(kind, q, k, v, gqa):
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel([kind]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa) if gqa else \
            F.scaled_dot_product_attention(q, k, v)


def graphed(fn):
    """fn captured in a CUDA graph (after one eager warm-up call on a side stream, as capture
    wants); returns the replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--quick", action="store_true", help="batch 1, 64 x cache 4k, 128k")
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--caches", default="1024,4096,16384,65536,131072")
    ap.add_argument("--heads", default="32/8,32/32")
    ap.add_argument("--sq", default="1,4")
    ap.add_argument("--pages", default="0,16,256")
    ap.add_argument("--backends", default="flashattn,torch-cudnn,torch-fa2")
    ap.add_argument("--splits", default="",
                    help="also time ours with these num_splits (e.g. 1,3,8), as flashattn-sN, "
                         "on the dense cache without append: the split heuristic's ablation")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--max-gb", type=float, default=40.0)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"),
                    help="fp8: q, the cache and appended keys in e4m3 (out bf16), ours only; "
                         "append without rotary")
    a = ap.parse_args()
    if a.quick:
        a.batches, a.caches = "1,64", "4096,131072"
    dev = a.device
    backends = a.backends.split(",") if dev == "cuda" else ["flashattn"]
    fp8 = a.dtype == "fp8"
    if fp8:  # SDPA takes no e4m3 inputs
        backends = [n for n in backends if n.startswith("flashattn")]
    elem = 1 if fp8 else 2  # bytes of an input element (out stays bf16)
    if a.splits and "flashattn" in backends:
        at = backends.index("flashattn") + 1
        backends[at:at] = [f"flashattn-s{int(n)}" for n in a.splits.split(",")]
    header = {"commit": a.commit, "command": " ".join(sys.argv)}
    if dev == "cuda":
        from gpu_common import ceilings, record_header
        header = record_header(flashattn._library.load(), a.commit, ceilings())
    rows, skipped = [], []
    for heads in a.heads.split(","):
        hq, hk = (int(x) for x in heads.split("/"))
        for b in (int(x) for x in a.batches.split(",")):
            for s in (int(x) for x in a.caches.split(",")):
                kv_bytes = 2 * b * s * hk * D * elem
                if kv_bytes > a.max_gb * 1e9:
                    continue
                for sq in (int(x) for x in a.sq.split(",")):
                    for page in (int(x) for x in a.pages.split(",")):
                        for append in ([False, True] if a.append and page == 0 else [False]):
                            nsets = 3 if kv_bytes < 256e6 else 1
                            sets = cell_sets(b, s, hq, hk, sq, page, append, dev, nsets, fp8)
                            cell = dict(op="decode", dtype=a.dtype, d=D, b=b, h=hq, h_k=hk, s_q=sq,
                                        s_k=s, paged=page > 0, page_size=page, append=append)
                            calls = {}
                            for name in backends:
                                if name != "flashattn" and (page or append):
                                    continue
                                try:
                                    if name.startswith("flashattn"):
                                        n = our_splits(name)
                                        fns = [lambda st=st, n=n: ours(st, append, n) for st in sets]
                                        how = None
                                    else:
                                        made = [sdpa_call(st, name) for st in sets]
                                        fns, how = [m[0] for m in made], made[0][1]
                                    eager = list(fns)
                                    replay = [graphed(f) for f in fns] if dev == "cuda" else fns
                                    calls[name] = (eager, replay, how)
                                except (RuntimeError, flashattn.FlashAttnError) as e:
                                    skipped.append(dict(cell, backend=name, why=str(e)[:300]))
                            times = {n: [] for n in calls}
                            for order in round_orders(list(calls), a.rounds):
                                for n in order:
                                    times[n].append(median_ms(calls[n][1], a.repeats, dev))
                            nbytes = kv_bytes + b * sq * hq * D * (elem + 2)  # q, out
                            for n, (eager, _, how) in calls.items():
                                ms = statistics.median(times[n])
                                row = dict(cell, backend=n, ms=ms, ms_rounds=times[n],
                                           ms_eager=median_ms(eager, a.repeats, dev),
                                           bytes=nbytes, tbps=nbytes / (ms * 1e-3) / 1e12)
                                if how:
                                    row["gqa"] = how
                                rows.append(row)
                                print(f"b{b:<4} s{s:<7} h{hq}/{hk} sq{sq} page{page:<4}"
                                      f"{' append' if append else '       '} {n:12} {ms:9.4f} ms"
                                      f" {row['tbps']:6.3f} TB/s", flush=True)
                            del sets
                            if dev == "cuda":
                                torch.cuda.empty_cache()
    with open(a.json, "w") as f:
        json.dump(dict(header, rows=rows, skipped=skipped), f, indent=1)


if __name__ == "__main__":
    main()
