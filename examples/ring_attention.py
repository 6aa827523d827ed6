"""Ring attention over torch.distributed: one sequence sharded across the processes of a group.

    torchrun --nproc-per-node 2 examples/ring_attention.py [--seqlen 4099] [--causal]

Every process builds the same full q, k, v (same seed), keeps its zig-zag shard, runs
flashattn.ring.ring_attn_func forward and backward on it, and rank 0 checks the gathered result
against the library's single-process call on the whole sequence, on CPU tensors over gloo (the
library also takes CUDA tensors over nccl, a GPU per process: not run yet); see
docs/context-parallel.md.
"""
import argparse

import torch
import torch.distributed as dist

import flashattn
from flashattn import ring


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=4099)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--layout", default="zigzag", choices=["zigzag", "contiguous"])
    args = ap.parse_args()

    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR / PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    L, d = args.seqlen, args.head_dim
    q = torch.randn(1, L, args.heads, d, generator=g, dtype=torch.bfloat16)
    k, v = (torch.randn(1, L, args.kv_heads, d, generator=g, dtype=torch.bfloat16)
            for _ in range(2))

    # This rank's rows (zig-zag: chunks rank and 2R-1-rank), as leaves for autograd.
    ql, kl, vl = (ring.shard(t, layout=args.layout).requires_grad_() for t in (q, k, v))
    out = ring.ring_attn_func(ql, kl, vl, seqlen=L, causal=args.causal, layout=args.layout)
    out.float().square().sum().backward()
    print(f"rank {rank}/{world}: rows {ring.shard_rows(L, world, rank, args.layout)}, "
          f"out {tuple(out.shape)}, dq {tuple(ql.grad.shape)}")

    full = ring.unshard(out.detach(), L, layout=args.layout)
    if rank == 0:
        single = flashattn.flash_attn_func(q, k, v, causal=args.causal)
        err = (full.float() - single.float()).abs().max().item()
        print(f"max |ring - single-process| = {err:.3g} (bf16)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
