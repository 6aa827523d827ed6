// Knobs of the kernels' choices that experiments and tests vary: compiled-in defaults, never read
// from the environment (a workspace size or a kernel choice that followed a variable would break
// the query-then-run contract of CUDA graphs and TensorRT). Dispatch hands the launchers a
// Context holding them; the public entry points use the defaults, tests pass their own through
// the internal entry points (api/internal.h), and an experiment's build changes a default with
// the CMake cache variable of the same name (e.g. -DFA_TUNING_SM80_BWD_PDL=0, for a benchmark's
// --lib-variant).
#pragma once

#include "core/device.h"

#ifndef FA_TUNING_SM80_BWD_SMEM_LIMIT
#define FA_TUNING_SM80_BWD_SMEM_LIMIT 0
#endif
#ifndef FA_TUNING_SM80_BWD_TAIL_MIN_STEPS
#define FA_TUNING_SM80_BWD_TAIL_MIN_STEPS 32
#endif
#ifndef FA_TUNING_SM80_BWD_PDL
#define FA_TUNING_SM80_BWD_PDL 1
#endif
#ifndef FA_TUNING_SM90_FWD
#define FA_TUNING_SM90_FWD 1
#endif
#ifndef FA_TUNING_SM90_BWD
#define FA_TUNING_SM90_BWD 2
#endif
#ifndef FA_TUNING_SM90_FWD_SCHEDULE
#define FA_TUNING_SM90_FWD_SCHEDULE 2
#endif
// Keys a tile of the sm90 forward at d 256 without dropout (a compile-time choice: the kernel's
// register and shared-memory layout follow it): 64, or 80 for the ablation (ptxas, schedule 2:
// 52 bytes spilled at 64, 128 at 80).
#ifndef FA_TUNING_SM90_FWD_D256_BLOCK_N
#define FA_TUNING_SM90_FWD_D256_BLOCK_N 64
#endif
// Keys a tile of the sm90 forward at d 64 (compile-time, as above): 128, or 192 for the ablation
// (FlashAttention-3's d 64 tile without a causal mask: a third more keys a tile for each Q·Kᵀ's
// fixed costs, the softmax's exponentials unchanged per key).
// Q buffers of the sm90 forward (compile-time): 2 (the default, where shared memory holds two:
// d 64, d 128) loads the next work tile's Q a tile ahead and stages O in the finished tile's
// buffer for a TMA store; 1 (the ablation, and d 256 always) loads the next tile's Q once this
// tile's last Q·Kᵀ is done and stores O from registers. Measured on the H200 at 72ae3f7, one
// run against one buffer (docs/performance-log.md, twenty-fourth session): +2 to +8% at s 1k,
// -1 to +2% from 4k except d 128 causal 4k (+4%).
#ifndef FA_TUNING_SM90_FWD_Q_BUFFERS
#define FA_TUNING_SM90_FWD_Q_BUFFERS 2
#endif
// The sm90 forward's peeled key loop (compile-time; d 64 and d 128, d 256 keeps one loop): 1
// visits a work tile's masked key tiles first (a causal tile's diagonal, the ragged last tile, a
// window's edges) and runs the rest in a loop whose softmax has no mask, softcap or ALiBi code;
// 0 (the ablation) runs one loop that checks each tile. Measured on the H200 against 0, one run
// (docs/performance-log.md, twenty-fifth session): +0 to +4%.
#ifndef FA_TUNING_SM90_FWD_PEEL
#define FA_TUNING_SM90_FWD_PEEL 1
#endif
// The sm90 backward's dQ (compile-time): 1 each consumer writes its 64 x 64 fp32 block of a
// step into shared memory in the accumulator's tile order and one thread adds the 16 KB to the
// workspace with one bulk reduction (cp.reduce.async.bulk .add.f32); 0 (the ablation) every
// thread adds its fragment with red.global.add.v2.f32 (sm90/bwd_kernel.cuh).
#ifndef FA_TUNING_SM90_BWD_DQ_BULK
#define FA_TUNING_SM90_BWD_DQ_BULK 1
#endif
// Queries a step of the sm90 backward at d 64 (compile-time; kernels without dropout, softcap or
// ALiBi): 64, or 128 for the ablation (FlashAttention-3's d 64 tile: Sᵀ and dPᵀ 64 x 128 a
// consumer, half the steps' fixed costs per query, and dQ's two 64-row blocks one a consumer
// over all 128 keys instead of both consumers adding the same block over 64 keys each).
#ifndef FA_TUNING_SM90_BWD_D64_BLOCK_M
#define FA_TUNING_SM90_BWD_D64_BLOCK_M 64
#endif
// The sm90 backward's products within a consumer (compile-time; kernels without softcap or ALiBi):
// 1 Sᵀ and dPᵀ are committed as two groups, P is formed as soon as Sᵀ has landed (dPᵀ still in
// flight), dV += Pᵀ·dO is issued before dS is formed (under it), and the dropout keep-mask is
// drawn while Sᵀ and dPᵀ run; 0 (the ablation) waits for both products, then forms P and dS in
// one pass and issues dV, dK and dQ together (sm90/bwd_kernel.cuh).
#ifndef FA_TUNING_SM90_BWD_OVERLAP
#define FA_TUNING_SM90_BWD_OVERLAP 1
#endif
#ifndef FA_TUNING_SM90_FWD_TMA_STORE
#define FA_TUNING_SM90_FWD_TMA_STORE 1
#endif
#ifndef FA_TUNING_SM90_FWD_D64_BLOCK_N
#define FA_TUNING_SM90_FWD_D64_BLOCK_N 128
#endif
#ifndef FA_TUNING_SM90_FWD_D64_CONSUMERS
#define FA_TUNING_SM90_FWD_D64_CONSUMERS 0
#endif
#ifndef FA_TUNING_SM90_FWD_PACK_GQA
#define FA_TUNING_SM90_FWD_PACK_GQA 1
#endif
#ifndef FA_TUNING_KVCACHE_ALL
#define FA_TUNING_KVCACHE_ALL 0
#endif
#ifndef FA_TUNING_KVCACHE_PDL
#define FA_TUNING_KVCACHE_PDL 0
#endif
#ifndef FA_TUNING_KVCACHE_FUSED_MERGE
#define FA_TUNING_KVCACHE_FUSED_MERGE 0
#endif
#ifndef FA_TUNING_SM75
#define FA_TUNING_SM75 0
#endif
#ifndef FA_TUNING_SM90_FWD_PERSISTENT
#define FA_TUNING_SM90_FWD_PERSISTENT 1
#endif

namespace fa {

struct Tuning {
  // Shared memory per block the sm80 backward's configuration choices assume, in bytes; 0: the
  // device's opt-in limit. Below it, the configurations of smaller parts run on a larger one
  // (sm86 / sm89: 101376, A100: 166912): how the GPU tests cover them on the H200.
  int sm80_bwd_smem_limit = FA_TUNING_SM80_BWD_SMEM_LIMIT;
  // The fewest steps a key tile needs for the sm80 backward's split tail (bwd_tail); 0: no split
  // tail. 32 from the H200 (docs/performance-log.md, twelfth session: tiles of 8 steps -6.0 to
  // -1.1%, of 16 -2.5 to +0.7%, of 32 -0.9 to +3.1%, of 64-256 +0.2 to +3.8%).
  int sm80_bwd_tail_min_steps = FA_TUNING_SM80_BWD_TAIL_MIN_STEPS;
  // The sm80 backward's main kernel as the preprocess's programmatic dependent (sm90 and later).
  bool sm80_bwd_pdl = FA_TUNING_SM80_BWD_PDL != 0;
  // The Hopper-native forward family (cuda-sm90) takes the calls it serves on sm90 (on by
  // default; off sends every forward to cuda-sm80, as before the family).
  bool sm90_fwd = FA_TUNING_SM90_FWD != 0;
  // Which backwards cuda-sm90 takes on sm90 (kernels/sm90/bwd_kernel.cuh serves fp16 / bf16, d 64
  // / 128, fixed-length and packed batches): 0 none (cuda-sm80 runs every backward), 1 every one
  // it serves (the tests' setting), 2 (the default) those where it measured faster than cuda-sm80:
  // kernel head dim 128 outside the deterministic mode (H100, 2026-12-08: 1.06-1.17x cuda-sm80 at
  // d 128, 0.84-0.89x at d 64; its deterministic mode 1.4-1.6x its default at d 128).
  int sm90_bwd = FA_TUNING_SM90_BWD;
  // cuda-sm90's consumer schedule, each a lever on the previous (sm90/fwd_kernel.cuh, Schedule):
  // 0 one key tile at a time (the ablation's baseline, and a reference when debugging), 1 the
  // intra-warpgroup overlap, 2 overlap and ping-pong between the two consumer warpgroups.
  int sm90_fwd_schedule = FA_TUNING_SM90_FWD_SCHEDULE;
  // cuda-sm90's launch: one block a tile, or persistent blocks (one an SM, the next tile's Q and K
  // loaded and its first Q·Kᵀ issued under this one's tail) taking their tiles from a dynamic
  // scheduler (an atomic counter in the workspace: in the order blocks free up, longest first
  // where tiles differ) or a static walk. 0 one block a tile; 1 dynamic (the default; without a
  // workspace, as 3); 2 static always; 3 static for tiles of one length (no causal mask, window
  // or packed batch), else one block a tile. Measured on the H200 (74fd42d, bf16 quick grid),
  // static vs one block a tile: without the mask +2 to +9% at s 1k, even at 16k; causal -4 to
  // +10% at 1k-4k and -27 to -30% at 16k (tiles of unequal length: the blocks drift apart over
  // heads and lose the L2 reuse of one head's K / V that in-order dispatch keeps), hence 3 and
  // the dynamic scheduler (not yet measured).
  int sm90_fwd_persistent = FA_TUNING_SM90_FWD_PERSISTENT;
  // cuda-sm90's consumer warpgroups at d 64: 2 (128 queries a block), 3 (192: a third
  // warpgroup's products fill more of each one's softmax, whose exponentials cost most against
  // the GEMMs at d 64; 160 registers a consumer thread instead of 232), or 0 (the default) by
  // length: 3 from 2048 queries and keys (sm90/tile_plan.h, d64_consumers, with the measurements).
  int sm90_fwd_d64_consumers = FA_TUNING_SM90_FWD_D64_CONSUMERS;
  // cuda-sm90's GQA packing: with seqlen_q < 128 and a power-of-two group up to 32, one work tile
  // holds the group's query heads (fwd_sm90.cu, pack_log2), so K / V are read once a KV head.
  bool sm90_fwd_pack_gqa = FA_TUNING_SM90_FWD_PACK_GQA != 0;
  // cuda-sm90's epilogue where the kernel has two Q buffers (FA_TUNING_SM90_FWD_Q_BUFFERS): O
  // through shared memory (stmatrix into the finished tile's Q buffer) and a TMA store, issued by
  // one thread a warpgroup and waited for a tile later; off (the ablation), or where TMA cannot
  // serve (out's strides or address; a packed batch's last tile of a sequence), stores straight
  // from the registers.
  bool sm90_fwd_tma_store = FA_TUNING_SM90_FWD_TMA_STORE != 0;
  // The KV-cache family (cuda-kvcache) takes every CUDA forward it serves (no dropout), not only
  // those with a KV cache's fields or num_splits > 1: the GPU tests' way to run the plain grid
  // through it.
  bool kvcache_all = FA_TUNING_KVCACHE_ALL != 0;
  // cuda-kvcache's attention and combine kernels as programmatic dependent launches on sm90
  // (kvcache_launch.cuh): their blocks start while the kernel ahead finishes, hiding a launch
  // gap each in a decode step (b1 x 4k: 20 us a call against cuDNN's 15). Off: measured on the
  // H200 with the (since removed) warp-specialised kernel (078cbba), 0.88-0.94x at batch 1 x 4k,
  // even elsewhere; again on an H100 with today's kernels (b65d959, batch 1 / 8 x 1k-16k, heads
  // 32 over 8): no cell faster beyond the run's drift.
  bool kvcache_pdl = FA_TUNING_KVCACHE_PDL != 0;
  // cuda-kvcache's split calls merge their parts inside the attention kernel: each part counts
  // itself in on a counter of its block's rows (zeroed by a memset ahead of the kernel), and the
  // last to finish merges the partials, in place of the combine kernel's launch (one kernel and a
  // memset a step instead of two kernels). Off: measured on an H100 (b65d959, batch 1 / 8 x
  // 1k-16k, heads 32 over 8 and 32 over 32, CUDA-graph replay) within 1% of the combine kernel
  // in geometric mean, not the 4-6 us a step predicted: under graph replay the combine's launch
  // gap was small, and the memset is a graph node of its own.
  bool kvcache_fused_merge = FA_TUNING_KVCACHE_FUSED_MERGE != 0;
  // The Turing family (cuda-sm75) takes the flash calls on any device of compute capability >=
  // 7.5, ahead of the other flash families, and its refusals are then the call's (none runs in
  // its place): how the GPU tests run Turing's instruction stream on a newer GPU, from a build
  // with compute_75 PTX (FA_ARCHS 75-virtual). On sm75 devices the family is in play anyway.
  // -DFA_TUNING_SM75=1 sets it in a whole build: how the benchmark times the family on a newer
  // GPU (the performance model's sm75 calibration, issue 33).
  bool sm75 = FA_TUNING_SM75 != 0;
};

// What a call's launchers need beyond its Params: the device's properties (queried once per
// device and process, by dispatch: launchers never query the device) and the knobs.
struct Context {
  DeviceProps device;  // zeros for the CPU
  Tuning tuning;
};

}  // namespace fa
