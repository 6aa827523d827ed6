"""flashattn.ring.ring_attn_func over torch.distributed (gloo, CPU): 2 and 3 processes.

Every process builds the same full problem (same seed), runs the ring on its shard, and puts the
shards' out / dq / dk / dv back together (unshard). They must be as accurate as the library's
single-device call on the full sequence, by FlashAttention's rule against the fp64 reference:
error <= 2 x the single-device error + 1e-5 (out), 3 x + 1e-4 (gradients). Lengths are not
multiples of the ranks (or of 2R), GQA, causal and not, both layouts, fp32 and bf16.

On CUDA (skipped without a GPU): the same check with CUDA tensors, bf16 / fp16, through NCCL with
one GPU per rank where the machine has as many GPUs, else through gloo with every rank on GPU 0
(NCCL refuses two ranks on one GPU; flashattn.ring then stages each transfer through the host).
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
from conftest import requires_cuda

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def _grads(fn, q, k, v, dout):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    return [out.detach(), q.grad, k.grad, v.grad]


def _check_case(case, world, device="cpu"):
    dtype, b, hq, hk, L, d, causal, layout, seed = case
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, L, h, d, generator=g).to(dtype) for h in (hq, hk, hk))
    dout = torch.randn(b, L, hq, d, generator=g).to(dtype)

    # fp64 leaves: the reference's gradients unrounded (a bf16 leaf would round them).
    ref = _grads(lambda q, k, v: attention(q, k, v, causal=causal)[0], q.double(), k.double(),
                 v.double(), dout.double())
    q, k, v, dout = (t.to(device) for t in (q, k, v, dout))
    single = [t.cpu() for t in _grads(
        lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=causal), q, k, v, dout)]

    local = [ring.shard(t, layout=layout).requires_grad_() for t in (q, k, v)]
    out = ring.ring_attn_func(*local, seqlen=L, causal=causal, layout=layout)
    assert out.shape == local[0].shape and out.device == local[0].device
    out.backward(ring.shard(dout, layout=layout))
    # put back together on the host (every backend gathers CPU tensors)
    got = [ring.unshard(t.cpu(), L, layout=layout)
           for t in (out.detach(), *(x.grad for x in local))]

    for name, gt, sd, rf, factor, atol in zip(("out", "dq", "dk", "dv"), got, single, ref,
                                              (2, 3, 3, 3), (1e-5, 1e-4, 1e-4, 1e-4)):
        err, base = max_err(gt, rf), max_err(sd, rf)
        assert err <= factor * base + atol, (
            f"{case} world {world}: {name} error {err:.3g} vs single-device {base:.3g}")


def _worker(rank, world, init_file, cases, errors, device="cpu", backend="gloo"):
    if device == "cuda":
        device = f"cuda:{rank if backend == 'nccl' else 0}"
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        for case in cases:
            _check_case(case, world, device)
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


def _spawn(world, cases, device="cpu", backend="gloo"):
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        try:
            mp.spawn(_worker, args=(world, init_file, cases, errors, device, backend),
                     nprocs=world, join=True)
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


def _cuda_backend(world):
    """nccl with a GPU per rank, else gloo with every rank on GPU 0."""
    if torch.cuda.device_count() >= world and dist.is_nccl_available():
        return "nccl"
    return "gloo"


@requires_cuda
@pytest.mark.parametrize("world", [2, 3])
def test_ring_cuda(world):
    _spawn(world, [
        (torch.bfloat16, 2, 4, 2, 4 * world + 37, 64, True, "zigzag", 10 + world),
        (torch.float16, 1, 3, 1, 101, 128, False, "contiguous", 20 + world),
        (torch.bfloat16, 1, 2, 2, 77, 64, False, "zigzag", 30 + world),
        (torch.float16, 1, 4, 4, 389, 64, True, "contiguous", 40 + world),
    ], "cuda", _cuda_backend(world))


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
