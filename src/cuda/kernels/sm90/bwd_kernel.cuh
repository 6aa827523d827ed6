// The Hopper-native backward's main kernel (sm_90a, issue 28), first version: correct first, on
// the primitives of the sm90 forward (wgmma, TMA, mbarriers, named barriers, setmaxnreg). The
// sm80 family's preprocess (scale · D, LSE · log2 e, the cleared fp32 dQ accumulator) and
// postprocess (the accumulator into dq) run around it unchanged: this kernel adds into the same
// workspace (sm80/bwd_traits.h, BwdWorkspace), in a tile order the postprocess reads through
// BwdTraits::DqLayout.
//
// A block takes one key tile (kBlockN = 128 keys) of one (kv head, batch entry) and walks every
// (query head of the group, query tile of kBlockM = 64 queries) pair whose rows see one of its
// keys (sm80/tile_ranges.h, KeyTileQueries: the visibility rule of core/mask.h, bottom-right
// aligned): K and V are loaded once, dK and dV stay in registers across the walk (GQA: summed
// over the group's query heads), dQ is added into the workspace each step.
//
//   warpgroup 0  producer: one thread issues the TMA copies (K, V once; each step's Q and dO
//                tiles) and warp 0's lanes copy the step's LSE · log2 e and scale · D rows
//                from the workspace, through a ring of kStages stages (full barriers: the
//                copies' bytes and the lanes' arrivals; empty barriers: every consumer thread's
//                release); it gives most of its registers to
//   warpgroups 1, 2  consumers: warpgroup c owns keys 64 c .. 64 c + 63 of the tile (one wgmma
//                m64), and at each step
//     Sᵀ  = K_c · Qᵀ, dPᵀ = V_c · dOᵀ   SS-wgmma, 64 keys x 64 queries, fp32 registers;
//     P   = exp2(Sᵀ · scale · log2 e - LSE · log2 e) (0 where masked; with softcap / ALiBi from
//           the transformed logit),
//     dS  = P ∘ (scale · dPᵀ - scale · D)  (the scale folded in, as the sm80 family does; times
//           softcap's derivative 1 - tanh²);
//     dV += Pᵀ · dO, dK += dSᵀ · Q          RS-wgmma: P and dS (keys as M) are the A operands
//                                          straight from the registers (their C fragments are
//                                          the A fragments, mma.cuh), dO / Q MN-major as B;
//     dS -> shared memory (row = query, column = key: the K-major A of dQ), both warpgroups'
//          halves behind one named barrier;
//     dQ  = dS · K                          SS-wgmma, 64 queries x 64 columns, K MN-major as B;
//                                          at d 128 warpgroup c takes column block (c + step) %
//                                          2 over the 128 keys, at d 64 the one block over its
//                                          own 64 keys (both add); added into the fp32 workspace
//                                          in the tile order of sm80/dq_layout.h: staged in
//                                          shared memory (16 KB a consumer) and added by one
//                                          bulk reduction (cp.reduce.async.bulk .add.f32)
//                                          that one thread issues; or, with
//                                          FA_TUNING_SM90_BWD_DQ_BULK=0, by every thread with
//                                          red.global.add.v2.f32 (each warp instruction 256
//                                          contiguous bytes).
//
// Shared memory: K, V [kBlockN x d]; kStages x (Q, dO) [kBlockM x d]; two dS buffers [kBlockM x
// kBlockN] (a warpgroup writes step s + 1's half while the other may still read step s's); the
// LSE / D rows of each stage; each consumer's dQ staging (16 KB, in the accumulator's order);
// the barriers. All tiles in the 128-byte swizzled 64-column blocks of tile/swizzle.h that TMA's
// SWIZZLE_128B writes and the wgmma descriptors read. d 128: 192 KB + 1 KB; d 64: 128 KB + 1 KB.
//
// Deterministic mode (p.deterministic, bulk dQ only): the blocks of one kv head add into a dQ
// tile in descending key-tile order, as the sm80 family's (sm80/bwd_kernel.cuh says why
// descending): a semaphore per (query head, batch, query tile) counts the consumers' bulk
// reductions that have completed; a consumer's issuer waits until every consumer of the later key
// tiles that touch the tile has added (at d 64, where both consumers add to one block, consumer 1
// also after consumer 0), issues, and publishes its own completion a step later (when it waits
// for the staging anyway), so that the wait for completion is off the step's path. blockIdx.x
// runs the key tiles backwards, so a wait depends only on blocks dispatched before it.
//
// Served (sm90_bwd_refusal in bwd_sm90.cu says why not otherwise; cuda-sm80 runs the rest):
// fp16 / bf16, head dims 64 and 128, full and causal attention (bottom-right), sliding windows,
// softcap, ALiBi, dropout, GQA / MQA, seqlen_q != seqlen_k, fixed-length and packed batches,
// the deterministic mode. Not yet: other head dims; the overlap of the products with the
// element-wise pass, a persistent scheduler. Its first GPU runs hung in the
// register hand-over (kProducerRegs below); its accuracy is checked by
// tests/test_gpu_sm90_bwd.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/mask.h"
#include "core/params.h"
#include "core/philox.h"
#include "cuda/arch/exp2.cuh"
#include "cuda/arch/ldmatrix.cuh"  // smem_addr
#include "cuda/arch/memory.cuh"    // red_add2
#include "cuda/arch/mma.cuh"       // pack2, pack_a
#include "cuda/arch/sync.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_desc.h"
#include "cuda/kernels/sm80/bwd_prepost.cuh"  // acc_row
#include "cuda/kernels/sm80/bwd_traits.h"   // BwdWorkspace
#include "cuda/kernels/sm80/dq_layout.h"
#include "cuda/kernels/sm80/tile_ranges.h"   // KeyTileQueries, KeyTileUnmasked
#include "cuda/kernels/sm90/bwd_dropout.h"
#include "cuda/tensor_map.h"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm90 {

template <int kHeadDim_, typename Tag_, bool kTransform_ = false, bool kDropout_ = false>
struct BwdTraits {
  using Tag = Tag_;
  static constexpr int kHeadDim = kHeadDim_;
  // Softcap or ALiBi: a kernel of its own, so that the plain one keeps its registers (both element
  // passes in one kernel, behind a run-time branch, spilled 28 bytes at d 128; the transform
  // kernel alone spills 20 at d 128, none at d 64).
  static constexpr bool kTransform = kTransform_;
  // Dropout (core/philox.h's keep-mask, the forward's): kernels of their own, as kTransform.
  static constexpr bool kDropout = kDropout_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "first version: head dims 64 and 128");
  static constexpr int kConsumers = 2;    // consumer warpgroups
  static constexpr int kWgThreads = 128;  // a warpgroup: four warps
  static constexpr int kThreads = kWgThreads * (1 + kConsumers);
  static constexpr int kWgKeys = 64;  // keys a consumer: the M of one wgmma for Sᵀ, dPᵀ, dK, dV
  // Keys a block: two consumers' 64. dK + dV then hold d fp32 registers a thread (128 at d 128),
  // Sᵀ + dPᵀ 64 more, within the consumers' 240.
  static constexpr int kBlockN = kWgKeys * kConsumers;
  // Queries a step: the N of Sᵀ / dPᵀ (kBlockM / 2 fp32 registers each), the K of dV / dK, the
  // M of dQ (one wgmma m64 a 64-row block); FlashAttention-3's choice at d 128 too. At d 64
  // FA_TUNING_SM90_BWD_D64_BLOCK_M (64 or 128) for the plain kernels (dropout's keep bits are 32
  // a thread: 64 queries).
  static constexpr int kBlockM =
      kHeadDim == 64 && !kTransform && !kDropout ? FA_TUNING_SM90_BWD_D64_BLOCK_M : 64;
  static_assert(kBlockM == 64 || kBlockM == 128, "64 or 128 queries a step");
  // The overlapped schedule within a consumer (FA_TUNING_SM90_BWD_OVERLAP): P while dPᵀ runs,
  // dS while dV runs. Not with a logit transform (its dS needs softcap's derivative of the
  // logit, which P's pass would have to keep: 32 registers more where 20 bytes spill already),
  // nor with 128 queries a step (Sᵀ, dPᵀ and Pᵀ live beside dV and dK: ptxas serialized the
  // wgmmas for want of registers, C7512).
  static constexpr bool kOverlap = FA_TUNING_SM90_BWD_OVERLAP != 0 && !kTransform && kBlockM == 64;
  // Stages of the Q / dO ring: two let step s + 1's copies land under step s (a third fits at
  // d 128, 193 KB; not measured).
  static constexpr int kStages = 2;
  // Registers a thread after the hand-over: 128 x 24 + 256 x 240 = 64512, what the block starts
  // with (384 x 168). (32 / 240 asked 1024 more than the producer gives back: the consumers'
  // setmaxnreg.inc waited for them forever, the hang of the first GPU runs.)
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(register_split_fits(kProducerRegs, kConsumers, kConsumerRegs),
                "the block's register pool (sync.cuh, setmaxnreg_inc)");
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;  // Q and dO
  using DsTile = SwizzledTile<kBlockM, kBlockN>;  // dS: row = query, column = key
  static constexpr int kKvBytes = KvTile::kElems * 2, kQBytes = QTile::kElems * 2;
  static constexpr int kDsBytes = DsTile::kElems * 2;
  // dQ a wgmma: 64 queries x 64 columns (32 fp32 registers). At d 128 the two consumers take one
  // column block each over the tile's 128 keys; at d 64 each takes the one block over its own 64
  // keys, and both add (twice the reductions of one block over 128 keys: a block alternating
  // between the consumers, behind a branch on the warpgroup, made ptxas serialize every wgmma of
  // the kernel, C7520).
  static constexpr int kDqCols = 64;
  static constexpr int kDqBlocks = kHeadDim / kDqCols;
  static_assert(kDqBlocks == 1 || kDqBlocks == 2, "one or two dQ column blocks");
  // dQ's 64-row blocks: with 128 queries a step (d 64) consumer c takes row block c over all
  // 128 keys, so that no two consumers add the same block.
  static constexpr int kDqRowBlocks = kBlockM / 64;
  static_assert(kDqBlocks * kDqRowBlocks <= kConsumers, "a dQ block a consumer at most");
  static constexpr bool kDqShared = kDqBlocks * kDqRowBlocks == 1;  // both consumers add it
  static constexpr int kDqKeys = kDqShared ? kWgKeys : kBlockN;  // the K of a dQ product
  // The accumulator's tile order (kBlockM rows x kHeadDim columns a tile): warp w of the
  // consumer taking column block blk adds the pairs of "warp" 4 blk + w (rows 16 w .. 16 w + 15).
  // (128 queries a step: "warp" 4 rblk + w, rows 64 rblk + 16 w .. + 15, of row block rblk.)
  using DqLayout = sm80::DqTileLayout<16, kDqCols, kBlockM / 16>;
  static_assert(kBlockM % 64 == 0, "the dQ layout's warps cover the step's rows");
  // dQ through one bulk reduction a consumer and step (FA_TUNING_SM90_BWD_DQ_BULK): its block
  // of kBlockM x kDqCols fp32 is 16 KB of the accumulator, contiguous in the tile order (the
  // pairs of "warps" 4 blk .. 4 blk + 3), staged in shared memory in that order.
  static constexpr bool kDqBulk = FA_TUNING_SM90_BWD_DQ_BULK != 0;
  static constexpr int kDqStageBytes = 64 * kDqCols * 4;
  static_assert(kDqStageBytes == 4 * DqLayout::kReds * 32 * 2 * 4,
                "a consumer's dQ block: four warps' pairs of the tile order, back to back");
  // Shared memory: K, V, kStages Q, kStages dO, two dS buffers, kStages x (LSE, D) rows of
  // kBlockM floats, each consumer's dQ staging (kDqBulk), then the barriers: kv_full,
  // full[kStages], empty[kStages].
  static constexpr int kKOffset = 0, kVOffset = kKvBytes, kQOffset = 2 * kKvBytes;
  static constexpr int kDoOffset = kQOffset + kStages * kQBytes;
  static constexpr int kDsOffset = kDoOffset + kStages * kQBytes;
  static constexpr int kStatsOffset = kDsOffset + 2 * kDsBytes;
  static constexpr int kDqStageOffset = kStatsOffset + kStages * 2 * kBlockM * 4;
  static constexpr int kBarOffset = kDqStageOffset + (kDqBulk ? kConsumers * kDqStageBytes : 0);
  static constexpr int kSmemBytes = kBarOffset + 8 * (1 + 2 * kStages);
  static_assert(kDqStageOffset % 16 == 0, "bulk copies: 16-byte aligned shared memory");
  static_assert(kKvBytes % 1024 == 0 && kQBytes % 1024 == 0 && kDsBytes % 1024 == 0,
                "tiles on 1024-byte boundaries (the 128-byte swizzle's atoms)");
  static_assert(kSmemBytes <= kSm90SmemPerBlock, "the H200's shared memory a block (227 KB)");
};

// The TMA maps of q, dout (boxes of 64 columns x kBlockM rows of one head) and k, v (64 columns
// x kBlockN rows).
struct BwdMaps {
  CUtensorMap q, dout, k, v;
};

template <int kN>
__device__ __forceinline__ float (&bwd_frag4(float (&acc)[kN], int j))[4] {
  return *reinterpret_cast<float(*)[4]>(&acc[4 * j]);
}

// What a step's element-wise pass reads besides Sᵀ and dPᵀ: the stage's LSE · log2 e and scale · D
// rows, the mask, the logit transform of the step's query head, and this thread's place (keys
// key0, key0 + 8 of its C fragments, queries m0 + 8 j + 2 t, + 1).
struct BwdPointwise {
  const float* lse;
  const float* dsum;
  Visibility vis;
  Logit<float> logit;
  float scale;
  int key0, m0, len_q, len_k, t;
  bool masked;         // the step has masked elements (KeyTileUnmasked)
  float keep_scale;    // dropout: 1 / (1 - p)
  uint32_t kept_bits;  // dropout: bwd_keep_bits of this thread's elements
};

// P and dS of one step in place (st <- P, dpt <- dS = P ∘ (scale dP - scale D), through softcap's
// derivative). Element 4 j + e: key key0 + 8 (e / 2), query m0 + 8 j + 2 t + e % 2. A masked step
// tests each element: keys past len_k, queries past len_q, pairs the visibility rule hides.
// kTransform: softcap or ALiBi (core/mask.h's Logit, as the forward applies them: P from
// exp(logit - LSE)), BwdTraits::kTransform.
template <class T, bool kTransform>
__device__ __forceinline__ void bwd_pointwise(const BwdPointwise& in, float (&st)[T::kBlockM / 2],
                                              float (&dpt)[T::kBlockM / 2]) {
  constexpr int kM = T::kBlockM;
  const float scale_log2 = in.scale * kLog2e;
  const float inv_softcap = kTransform && in.logit.softcap > 0.f ? 1.f / in.logit.softcap : 0.f;
#pragma unroll
  for (int j = 0; j < kM / 8; ++j) {
    const int q_loc = 8 * j + 2 * in.t;
    const float2 l2 = *reinterpret_cast<const float2*>(in.lse + q_loc);
    const float2 dd = *reinterpret_cast<const float2*>(in.dsum + q_loc);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = in.key0 + 8 * (e >> 1), q = in.m0 + q_loc + (e & 1);
      const float lse_e = (e & 1) ? l2.y : l2.x, d_e = (e & 1) ? dd.y : dd.x;
      float pr, dx = 1.f;
      if constexpr (kTransform) {
        float x = st[4 * j + e] * in.scale;
        if (in.logit.softcap > 0.f) {
          const float th = tanhf(x * inv_softcap);
          x = in.logit.softcap * th;
          dx = 1.f - th * th;
        }
        const int dist = q + int(in.logit.offset) - key;
        x -= in.logit.alibi_slope * float(dist < 0 ? -dist : dist);
        pr = exp2_fast(fmaf(x, kLog2e, -lse_e));
      } else {
        pr = exp2_fast(fmaf(st[4 * j + e], scale_log2, -lse_e));
      }
      if (in.masked && (key >= in.len_k || q >= in.len_q || !in.vis.visible(q, key))) pr = 0.f;
      // Dropout: the forward's P·V saw P ∘ keep (keep = 0 or 1 / (1 - p)), so dS = P ∘ (dP ∘ keep
      // - D), and dV takes P ∘ [kept], scaled by 1 / (1 - p) in fp32 when it is stored (as the
      // sm80 family does, so that no scaled P is rounded to 16 bits).
      float dp = dpt[4 * j + e], pk = pr;
      if constexpr (T::kDropout) {
        const bool kept = (in.kept_bits >> (4 * j + e)) & 1u;
        dp = kept ? dp * in.keep_scale : 0.f;
        pk = kept ? pr : 0.f;
      }
      st[4 * j + e] = pk;
      const float ds = pr * fmaf(dp, in.scale, -d_e);
      dpt[4 * j + e] = kTransform ? ds * dx : ds;  // dx = 1 unless softcap
    }
  }
}

// The overlapped schedule's two halves of bwd_pointwise (no logit transform). P in place (st <-
// P, 0 where masked; dropout's keep-mask is applied where P is packed for dV, since dS needs P
// itself), from Sᵀ alone, while dPᵀ may still be in flight.
template <class T>
__device__ __forceinline__ void bwd_probs(const BwdPointwise& in, float (&st)[T::kBlockM / 2]) {
  constexpr int kM = T::kBlockM;
  const float scale_log2 = in.scale * kLog2e;
#pragma unroll
  for (int j = 0; j < kM / 8; ++j) {
    const int q_loc = 8 * j + 2 * in.t;
    const float2 l2 = *reinterpret_cast<const float2*>(in.lse + q_loc);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = in.key0 + 8 * (e >> 1), q = in.m0 + q_loc + (e & 1);
      float pr = exp2_fast(fmaf(st[4 * j + e], scale_log2, (e & 1) ? -l2.y : -l2.x));
      if (in.masked && (key >= in.len_k || q >= in.len_q || !in.vis.visible(q, key))) pr = 0.f;
      st[4 * j + e] = pr;
    }
  }
}

// dS in place (dpt <- P ∘ (scale dP ∘ keep - scale D)) from the P of bwd_probs.
template <class T>
__device__ __forceinline__ void bwd_dscores(const BwdPointwise& in, const float (&st)[T::kBlockM / 2],
                                            float (&dpt)[T::kBlockM / 2]) {
  constexpr int kM = T::kBlockM;
#pragma unroll
  for (int j = 0; j < kM / 8; ++j) {
    const float2 dd = *reinterpret_cast<const float2*>(in.dsum + 8 * j + 2 * in.t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float dp = dpt[4 * j + e];
      if constexpr (T::kDropout)
        dp = (in.kept_bits >> (4 * j + e)) & 1u ? dp * in.keep_scale : 0.f;
      dpt[4 * j + e] = st[4 * j + e] * fmaf(dp, in.scale, (e & 1) ? -dd.y : -dd.x);
    }
  }
}

// Deterministic mode's turns (one thread, the consumer's dQ issuer). Wait until the semaphore
// counts `turn` completed reductions, then order this thread's bulk reduction after them. The
// wait always ends (it depends only on blocks dispatched earlier); should that ever fail, it
// gives up after about a minute rather than hang (a trap here, as the sm80 family's, made ptxas
// spill ~900 bytes of the consumers' accumulators).
__device__ __forceinline__ void dq_wait_turn(const int* sem, int turn) {
  for (int spins = 0; load_acquire(sem) < turn && spins < (1 << 30); ++spins) __nanosleep(64);
  fence_proxy_async_global();
}

// The issuer's last reduction has completed (cp.async.bulk.wait_group 0): publish it.
__device__ __forceinline__ void dq_publish(int*& sem) {
  if (sem == nullptr) return;
  fence_proxy_async_global();
  __threadfence();
  add_release(sem, 1);
  sem = nullptr;
}

// Grid (key tiles of kBlockN, kv heads, batch); T::kThreads threads, T::kSmemBytes of dynamic
// shared memory. ws: the sm80 backward's workspace, after its preprocess (stream order).
template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    bwd_kernel(const __grid_constant__ Params p, const __grid_constant__ BwdMaps maps,
               const sm80::BwdWorkspace ws) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tag = typename T::Tag;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN, kM = T::kBlockM, kStages = T::kStages;
  constexpr int kBoxCols = T::QTile::kBlockCols;  // a TMA box: one 64-column block
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = smem_addr(smem);
  const uint32_t sK = base + T::kKOffset, sV = base + T::kVOffset;
  auto sQ = [&](int s) { return base + uint32_t(T::kQOffset + s * T::kQBytes); };
  auto sdO = [&](int s) { return base + uint32_t(T::kDoOffset + s * T::kQBytes); };
  float* const stats = reinterpret_cast<float*>(smem + T::kStatsOffset);
  auto lse_of = [&](int s) { return stats + s * 2 * kM; };       // LSE · log2 e, kM rows
  auto dsum_of = [&](int s) { return stats + s * 2 * kM + kM; };  // scale · D, kM rows
  const uint32_t bars = base + T::kBarOffset;
  const uint32_t kv_full = bars;
  auto full = [&](int s) { return bars + 8u * uint32_t(1 + s); };
  auto empty = [&](int s) { return bars + 8u * uint32_t(1 + kStages + s); };
  // The producer warp's lanes each arrive on a stage's full barrier after their LSE / D stores,
  // lane 0 once more with the copies' bytes.
  constexpr uint32_t kFullArrivals = 1 + 32;
  constexpr uint32_t kEmptyArrivals = T::kConsumers * T::kWgThreads;  // every consumer thread

  const int tid = threadIdx.x, wg = tid / T::kWgThreads, lane = tid % 32;
  const int warp = (tid % T::kWgThreads) / 32;  // in the warpgroup
  const bool deterministic = T::kDqBulk && p.deterministic;
  const int nb = deterministic ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int hk = int(blockIdx.y), b = int(blockIdx.z);
  const SeqInfo sq = p.seq(b);
  // The maps' batch coordinate: a packed batch is one entry of its total rows (bwd_sm90.cu), each
  // sequence at its start. A tile past a sequence's end reads the next one's rows (zeros past the
  // last): their keys and queries are masked (P = 0: partial key tiles always are, a partial
  // query tile of a packed batch below), so they add nothing, and the dQ rows they reach are the
  // sequence's spare ones (sm80/bwd_traits.h).
  const int tb = p.varlen() ? 0 : b;
  const int64_t n0 = int64_t(nb) * kN;
  const int len_q = int(sq.len_q), len_k = int(sq.len_k);
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  // The query tiles whose rows see a key of this tile, and those at which no element is masked.
  const sm80::KeyTileQueries qt(vis, sq.len_q, sq.len_k, nb, kN, kM);
  const sm80::KeyTileUnmasked um(vis, sq.len_q, sq.len_k, nb, kN, kM);
  const int m_steps = n0 < sq.len_k ? qt.end - qt.begin : 0;
  const int group = int(p.group());
  const int steps = m_steps * group;  // (query head of the group, query tile), head-major
  const int64_t acc0 = sm80::acc_row(p, b, sq);
  // Step i's query head and first query row, as producer and consumers both walk them.
  auto step_head = [&](int i) { return hk * group + i / m_steps; };
  auto step_m0 = [&](int i) { return (qt.begin + i % m_steps) * kM; };

  if (tid == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), kFullArrivals);
      mbar_init(empty(s), kEmptyArrivals);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producer
    setmaxnreg_dec<T::kProducerRegs>();
    // A tile no query sees issues no copy (the block must not end with copies in flight).
    if (warp == 0 && steps > 0) {
      if (lane == 0) {
        mbar_arrive_expect_tx(kv_full, uint32_t(2 * T::kKvBytes));
#pragma unroll
        for (int blk = 0; blk < T::KvTile::kBlocks; ++blk) {
          const uint32_t off = uint32_t(blk * kN) * kSw128RowBytes;
          tma_load_4d(sK + off, &maps.k, blk * kBoxCols, hk, int(sq.k_start + n0), tb, kv_full);
          tma_load_4d(sV + off, &maps.v, blk * kBoxCols, hk, int(sq.k_start + n0), tb, kv_full);
        }
      }
      for (int i = 0; i < steps; ++i) {
        const int s = i % kStages;
        const int hq = step_head(i), m0 = step_m0(i);
        if (i >= kStages) mbar_wait(empty(s), uint32_t(((i / kStages) & 1) ^ 1));
        if (lane == 0) {
          mbar_arrive_expect_tx(full(s), uint32_t(2 * T::kQBytes));
#pragma unroll
          for (int blk = 0; blk < T::QTile::kBlocks; ++blk) {
            const uint32_t off = uint32_t(blk * kM) * kSw128RowBytes;
            tma_load_4d(sQ(s) + off, &maps.q, blk * kBoxCols, hq, int(sq.q_start + m0), tb, full(s));
            tma_load_4d(sdO(s) + off, &maps.dout, blk * kBoxCols, hq, int(sq.q_start + m0), tb,
                        full(s));
          }
        }
        // Rows past the sequence take LSE = D = 0 (their Q and dO arrive as zeros): P = 1 there
        // but dV, dK and dS get nothing from them, and their dQ rows are spare ones.
        float* lse = lse_of(s);
        float* dsum = dsum_of(s);
#pragma unroll
        for (int r = lane; r < kM; r += 32) {
          const int row = m0 + r;
          const bool ok = row < len_q;
          const int64_t at = int64_t(hq) * ws.rows + acc0 + row;
          lse[r] = ok ? ws.lse2[at] : 0.f;
          dsum[r] = ok ? ws.dsum[at] : 0.f;
        }
        mbar_arrive(full(s));  // releases this lane's stores to the consumers' wait
      }
    }
    return;
  }

  // ---- consumers: warpgroup c owns keys n0 + 64 c .. + 63; this thread keys
  // key0 = n0 + 64 c + 16 warp + g and key0 + 8 (its C-fragment rows), queries 8 j + 2 t, + 1.
  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = wg - 1, g = lane / 4, t = lane % 4;
  const uint32_t sKc = sK + uint32_t(T::kWgKeys * c) * kSw128RowBytes;  // this consumer's keys
  const uint32_t sVc = sV + uint32_t(T::kWgKeys * c) * kSw128RowBytes;
  const int key0 = int(n0) + T::kWgKeys * c + 16 * warp + g;
  const bool dq_issuer = tid % T::kWgThreads == 0;  // issues the warpgroup's dQ bulk reductions
  // Deterministic mode: the semaphore of the issuer's reduction in flight (published once it has
  // completed), and the key tiles of the sequence.
  int* pending_sem = nullptr;
  const int n_tiles = int((sq.len_k + kN - 1) / kN);
  const float scale = p.softmax_scale;
  const DropoutStream drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  // dV, dK: this consumer's 64 keys x d, fp32, accumulated over the whole walk.
  float dv[kD / 2], dk[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dv[i] = dk[i] = 0.f;
  if (steps > 0) mbar_wait(kv_full, 0);

  for (int i = 0; i < steps; ++i) {
    const int s = i % kStages;
    const int hq = step_head(i), m0 = step_m0(i), mb = m0 / kM;
    mbar_wait(full(s), uint32_t((i / kStages) & 1));

    // Sᵀ = K_c · Qᵀ and dPᵀ = V_c · dOᵀ: (64 keys x kM queries) each, over the head dim
    // (kOverlap: two groups, so that P can be formed from Sᵀ while dPᵀ runs).
    float st[kM / 2], dpt[kM / 2];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      wgmma_ss<Tag, kM>(st, kmajor_sw128_desc(sKc, kN, 16 * ks),
                        kmajor_sw128_desc(sQ(s), kM, 16 * ks), ks > 0);
    if constexpr (T::kOverlap) wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      wgmma_ss<Tag, kM>(dpt, kmajor_sw128_desc(sVc, kN, 16 * ks),
                        kmajor_sw128_desc(sdO(s), kM, 16 * ks), ks > 0);
    wgmma_commit();
    wgmma_acc_fence(st);
    wgmma_acc_fence(dpt);

    // P and dS (st <- P, dpt <- dS); softcap and ALiBi of the step's query head.
    // A packed batch's partial last query tile too: its rows past the sequence are the next
    // sequence's queries, not the zeros that make them harmless in a fixed-length batch (P = 1
    // there with LSE = D = 0, but zero dO and Q add nothing), so they are masked.
    const bool masked = mb < um.begin || mb >= um.end || (p.varlen() && m0 + kM > len_q);
    const Logit<float> logit{p.softcap, p.alibi_slope(b, hq), int64_t(len_k - len_q)};
    const uint32_t bh = uint32_t(b * p.heads_q + hq);
    if constexpr (!T::kOverlap) {
      wgmma_wait<0>();
      wgmma_acc_fence(st);
      wgmma_acc_fence(dpt);
    }
    // kOverlap: the keep-mask's Philox draws run under the products.
    const uint32_t kept_bits = T::kDropout ? bwd_keep_bits<T::kBlockM>(drop, bh, m0, key0, t) : 0u;
    const BwdPointwise pw{lse_of(s), dsum_of(s), vis,    logit,           scale,
                          key0,      m0,         len_q,  len_k,           t,
                          masked,    drop.keep_scale,    kept_bits};
    // Pᵀ and dSᵀ as the A operands of dV and dK (keys as M, the step's queries as K): the C
    // fragments of n-tiles 2 kk, 2 kk + 1 are the A fragment of k-step kk.
    uint32_t pf[kM / 16][4], dsf[kM / 16][4];
    if constexpr (T::kOverlap) {
      wgmma_wait<1>();  // Sᵀ
      wgmma_acc_fence(st);
      bwd_probs<T>(pw, st);
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk) {
        float c0[4], c1[4];  // P ∘ [kept]: what the forward's P·V saw, unscaled
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          c0[e] = st[8 * kk + e], c1[e] = st[8 * kk + 4 + e];
          if constexpr (T::kDropout) {
            if (!((kept_bits >> (8 * kk + e)) & 1u)) c0[e] = 0.f;
            if (!((kept_bits >> (8 * kk + 4 + e)) & 1u)) c1[e] = 0.f;
          }
        }
        pack_a<Tag>(c0, c1, pf[kk]);
      }
      // dV += Pᵀ · dO (dO MN-major: the step's queries are K) runs under dS's pass.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk)
        wgmma_rs<Tag, kD, 1>(dv, pf[kk], mnmajor_sw128_desc(sdO(s), kM, 16 * kk), true);
      wgmma_commit();
      wgmma_acc_fence(dv);
      wgmma_wait<1>();  // dPᵀ (dV may still run)
      wgmma_acc_fence(dpt);
      bwd_dscores<T>(pw, st, dpt);
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk)
        pack_a<Tag>(bwd_frag4(dpt, 2 * kk), bwd_frag4(dpt, 2 * kk + 1), dsf[kk]);
    } else {
      bwd_pointwise<T, T::kTransform>(pw, st, dpt);
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk) {
        pack_a<Tag>(bwd_frag4(st, 2 * kk), bwd_frag4(st, 2 * kk + 1), pf[kk]);
        pack_a<Tag>(bwd_frag4(dpt, 2 * kk), bwd_frag4(dpt, 2 * kk + 1), dsf[kk]);
      }
    }
    // dS (row = query, column = key) into buffer i % 2 for dQ, the same 16-bit values as dsf:
    // element (query q, key k) at the swizzled byte offset of DsTile (wgmma_desc.h).
    const int buf = i & 1;
    unsigned char* const ds_tile = smem + T::kDsOffset + buf * T::kDsBytes;
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        // dsf[kk][r]: n-tile 2 kk + r / 2, key row half r % 2, queries 2 t, + 1 (pack_a).
        const int q = 16 * kk + 8 * (r >> 1) + 2 * t;
        const int key = T::kWgKeys * c + 16 * warp + g + 8 * (r & 1);
        *reinterpret_cast<uint16_t*>(ds_tile + sw128_byte_offset(kM, q, key)) =
            uint16_t(dsf[kk][r] & 0xffffu);
        *reinterpret_cast<uint16_t*>(ds_tile + sw128_byte_offset(kM, q + 1, key)) =
            uint16_t(dsf[kk][r] >> 16);
      }
    fence_proxy_async_shared();  // the stores, before wgmma reads them
    // The dQ staging of this consumer is free once the last step's bulk reduction has read it:
    // its issuer waits for that before the barrier below, which the warpgroup's threads pass
    // before they write the staging again (kDqBulk).
    // Deterministic mode: the whole reduction, then its completion published.
    if (T::kDqBulk && dq_issuer) {
      if (deterministic) {
        tma_store_wait<0>();
        dq_publish(pending_sem);
      } else {
        tma_store_wait_read<0>();
      }
    }
    // Both consumers' halves of dS are in place. (Buffer i % 2 is free: the other consumer read
    // it at step i - 2 and waited for that before arriving here at step i - 1.)
    named_barrier_sync(NamedBarrier::kConsumers, T::kConsumers * T::kWgThreads);

    // dV += Pᵀ · dO, dK += dSᵀ · Q (dO, Q MN-major: the step's queries are K), and this
    // consumer's dQ block = dS · K (dS K-major, K MN-major) over keys dq_key0 .. + kDqKeys - 1.
    const int dq_blk = T::kDqBlocks == 2 ? (c + i) & 1 : 0;  // column block
    const int dq_rblk = T::kDqRowBlocks == 2 ? c : 0;         // row block
    const int dq_key0 = T::kDqShared ? T::kWgKeys * c : 0;
    const int dq_warp0 = 4 * (dq_blk + dq_rblk);  // its first "warp" in the tile order
    const uint32_t sDs = base + uint32_t(T::kDsOffset + buf * T::kDsBytes);
    float dq[T::kDqCols / 2];
    wgmma_fence();
    if constexpr (!T::kOverlap) {
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk)
        wgmma_rs<Tag, kD, 1>(dv, pf[kk], mnmajor_sw128_desc(sdO(s), kM, 16 * kk), true);
    }
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk)
      wgmma_rs<Tag, kD, 1>(dk, dsf[kk], mnmajor_sw128_desc(sQ(s), kM, 16 * kk), true);
    {
      const uint32_t sKb = sK + uint32_t(dq_blk * kN) * kSw128RowBytes;
#pragma unroll
      for (int kk = 0; kk < T::kDqKeys / 16; ++kk)
        wgmma_ss<Tag, T::kDqCols, 0, 1>(dq, kmajor_sw128_desc(sDs + uint32_t(64 * dq_rblk) * kSw128RowBytes,
                                                              kM, dq_key0 + 16 * kk),
                                        mnmajor_sw128_desc(sKb, kN, dq_key0 + 16 * kk), kk > 0);
    }
    wgmma_commit();
    wgmma_acc_fence(dv);
    wgmma_acc_fence(dk);
    wgmma_acc_fence(dq);
    wgmma_wait<0>();
    wgmma_acc_fence(dv);
    wgmma_acc_fence(dk);
    wgmma_acc_fence(dq);
    wgmma_keep(pf);
    wgmma_keep(dsf);
    mbar_arrive(empty(s));  // this thread is done with the stage's Q, dO, LSE and D
    {
      // The step's tile of the accumulator: rows m0 .. m0 + kM - 1 of head hq (a partial last
      // tile adds its rows past the sequence, zeros, into the sequence's spare rows).
      using DqL = typename T::DqLayout;
      float* acc = ws.dq_acc + (int64_t(hq) * ws.rows + acc0 + m0) * kD;
      if constexpr (T::kDqBulk) {
        // This consumer's block in the tile order, pairs of "warp" w at pair_offset(w, ...):
        // each warp's store covers 256 contiguous bytes (no bank conflict), then one thread adds
        // the 16 KB at the block's place in the tile (pair_offset(dq_warp0, 0, 0)).
        float* const stage =
            reinterpret_cast<float*>(smem + T::kDqStageOffset + c * T::kDqStageBytes);
#pragma unroll
        for (int j = 0; j < DqL::kReds; ++j) {
          const int nt = DqL::nt(j), r = DqL::half(j);
          *reinterpret_cast<float2*>(stage + DqL::pair_offset(warp, lane, j)) =
              make_float2(dq[4 * nt + 2 * r], dq[4 * nt + 2 * r + 1]);
        }
        fence_proxy_async_shared();
        // Deterministic mode: warp 0 counts the later key tiles whose queries include this tile
        // (KeyTileQueries, the walk's own rule), while the others store.
        int later = 0;
        if (deterministic && warp == 0) {
          for (int j0 = nb + 1; j0 < n_tiles; j0 += 32) {
            const int j = j0 + lane;
            bool adds = false;
            if (j < n_tiles) {
              const sm80::KeyTileQueries qj(vis, sq.len_q, sq.len_k, j, kN, kM);
              adds = qj.begin <= mb && mb < qj.end;
            }
            later += __popc(__ballot_sync(0xffffffffu, adds));
          }
        }
        named_barrier_sync(c == 0 ? NamedBarrier::kBwdDq0 : NamedBarrier::kBwdDq1, T::kWgThreads);
        if (dq_issuer) {
          if (deterministic) {
            int* sem = ws.sem + (int64_t(hq) * p.batch + b) * ws.m_blocks + mb;
            dq_wait_turn(sem, T::kConsumers * later + (T::kDqShared ? c : 0));
            pending_sem = sem;
          }
          bulk_reduce_add_f32(acc + DqL::pair_offset(dq_warp0, 0, 0),
                              smem_addr(stage), uint32_t(T::kDqStageBytes));
          tma_store_commit();
        }
      } else {
        const int wq = dq_warp0 + warp;
#pragma unroll
        for (int j = 0; j < DqL::kReds; ++j) {
          const int nt = DqL::nt(j), r = DqL::half(j);
          red_add2(acc + DqL::pair_offset(wq, lane, j), dq[4 * nt + 2 * r], dq[4 * nt + 2 * r + 1]);
        }
      }
    }
  }
  // The block's shared memory must outlive the last bulk reduction's reads.
  if (T::kDqBulk && dq_issuer) {
    tma_store_wait<0>();
    if (deterministic) dq_publish(pending_sem);
  }

  // dK, dV out: this thread's keys key0, key0 + 8, columns 8 j + 2 t, + 1 (keys past len_k are
  // not written). A tile no query sees writes zeros.
  const int d = int(p.head_dim);
  if constexpr (T::kDropout) {
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) dv[i] *= drop.keep_scale;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= len_k) continue;
    uint16_t* dk_row = p.dk.at<uint16_t>(b, sq.k_start + key, hk);
    uint16_t* dv_row = p.dv.at<uint16_t>(b, sq.k_start + key, hk);
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int col = 8 * j + 2 * t;
      if (col >= d) continue;
      *reinterpret_cast<uint32_t*>(dk_row + col) = pack2<Tag>(dk[4 * j + 2 * r], dk[4 * j + 2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv_row + col) = pack2<Tag>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
#else
  (void)p, (void)maps, (void)ws;
#endif
}

}  // namespace fa::cuda::sm90
