"""flashattn.ring.ring_attn_func over torch.distributed (gloo, CPU): 2 and 3 processes.

Every process builds the same full problem (same seed), runs the ring on its shard, and puts the
shards' out / dq / dk / dv back together (unshard). They must be as accurate as the library's
single-device call on the full sequence, by FlashAttention's rule against the fp64 reference:
error <= 2 x the single-device error + 1e-5 (out), 3 x + 1e-4 (gradients). Lengths are not
multiples of the ranks (or of 2R), GQA, causal and not, both layouts, fp32 and bf16.
"""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import flashattn
from flashattn import ring
from attn_reference import attention, max_err

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def _grads(fn, q, k, v, dout):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    return [out.detach(), q.grad, k.grad, v.grad]


def _check_case(case, world):
    dtype, b, hq, hk, L, d, causal, layout, seed = case
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, L, h, d, generator=g).to(dtype) for h in (hq, hk, hk))
    dout = torch.randn(b, L, hq, d, generator=g).to(dtype)

    # fp64 leaves: the reference's gradients unrounded (a bf16 leaf would round them).
    ref = _grads(lambda q, k, v: attention(q, k, v, causal=causal)[0], q.double(), k.double(),
                 v.double(), dout.double())
    single = _grads(lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=causal), q, k, v,
                    dout)

    local = [ring.shard(t, layout=layout).requires_grad_() for t in (q, k, v)]
    out = ring.ring_attn_func(*local, seqlen=L, causal=causal, layout=layout)
    assert out.shape == local[0].shape
    out.backward(ring.shard(dout, layout=layout))
    got = [ring.unshard(t, L, layout=layout) for t in (out.detach(), *(x.grad for x in local))]

    for name, gt, sd, rf, factor, atol in zip(("out", "dq", "dk", "dv"), got, single, ref,
                                              (2, 3, 3, 3), (1e-5, 1e-4, 1e-4, 1e-4)):
        err, base = max_err(gt, rf), max_err(sd, rf)
        assert err <= factor * base + atol, (
            f"{case} world {world}: {name} error {err:.3g} vs single-device {base:.3g}")


def _worker(rank, world, init_file, cases, errors):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        for case in cases:
            _check_case(case, world)
        # A shard of the wrong length: every rank is refused before any transfer, naming q.
        q = torch.randn(1, 5, 2, 8)
        with pytest.raises(flashattn.FlashAttnError, match=r"q\.shape\[1\]=5 must be"):
            ring.ring_attn_func(q, q, q, seqlen=23)
        with pytest.raises(ValueError, match="layout"):
            ring.ring_attn_func(q, q, q, seqlen=23, layout="spiral")
    except BaseException as e:  # the parent reports it
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise
    finally:
        dist.destroy_process_group()


def _spawn(world, cases):
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        try:
            mp.spawn(_worker, args=(world, init_file, cases, errors), nprocs=world, join=True)
        except Exception as e:
            messages = []
            while not errors.empty():
                messages.append(errors.get())
            pytest.fail("\n".join(messages) or str(e))


def test_ring_two_ranks():
    _spawn(2, [
        (torch.float32, 2, 4, 2, 37, 16, True, "zigzag", 1),
        (torch.float32, 1, 3, 1, 41, 24, False, "contiguous", 2),
        (torch.bfloat16, 1, 2, 2, 29, 32, True, "contiguous", 3),
    ])


def test_ring_three_ranks():
    _spawn(3, [
        (torch.bfloat16, 2, 6, 2, 43, 32, True, "zigzag", 4),
        (torch.float32, 1, 2, 1, 50, 8, False, "zigzag", 5),
    ])


def test_shard_rows_partition():
    for layout in ("zigzag", "contiguous"):
        for world in (1, 2, 3, 4):
            rows = sorted(r for rank in range(world)
                          for s, n in ring.shard_rows(23, world, rank, layout)
                          for r in range(s, s + n))
            assert rows == list(range(23)), (layout, world)
    # zig-zag over 2 ranks, 4 chunks of 10 rows: rank 1 holds chunks 1 and 2.
    assert ring.shard_rows(10, 2, 1) == [(2, 3), (5, 2)]
    with pytest.raises(flashattn.FlashAttnError, match=r"rank=2 must be in \[0, 2\)"):
        ring.shard_rows(10, 2, 2)
