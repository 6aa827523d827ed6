// The FlashAttention-2 backward for the sm80 family on the forward's primitive layer (issue 4):
// every head dim of the forward, fp16 / bf16, every mask, softcap, ALiBi, GQA / MQA, packed
// batches, dropout (the keep-mask regenerated from core/philox.h, bit for bit the CPU
// backend's) and a deterministic mode. docs/cuda-kernels.md, "Backward".
//
// Three kernels per call:
//   bwd_preprocess   scale · D (D = rowsum(dO ∘ O)) and LSE · log2 e per (query head, row),
//                    fp32, into the workspace;
//   bwd_kernel       one block of 8 warps per (key tile of kBlockN keys, kv head, batch): K and V
//                    stay in shared memory, dK and dV in registers across every query head of the
//                    group (GQA: summed without per-query-head copies) and every query tile that
//                    sees these keys; P is recomputed from Q, K and the saved LSE; dQ is
//                    accumulated in fp32 in the workspace with atomics (8-byte vector atomics on
//                    sm90); the next step's Q, dO, LSE and D stream in through cp.async during a
//                    step (two buffers), Q and dO by TMA on sm90 from d = 64 (kTmaQdo);
//   bwd_postprocess  dQ fp32 -> the input type, into the caller's dq.
//
// A step (kBlockM queries, 64 or at d <= 64 128 (bwd_wide_m), against the block's kBlockN keys:
// 128 up to d = 128, 64 above) runs five products, each with
// its own warp layout (BwdTraits), chosen so that every warp reads as few fragments from shared
// memory as the tile allows: a warp computing an (m x n) tile over k reads (m + n) k elements
// for m n k multiply-adds, so the tiles are as square as the register budget permits.
//   Sᵀ  = K Qᵀ, dPᵀ = V dOᵀ   warp tile kSKeys keys x kSQueries queries (kSWarpsN x kSWarpsM)
//                              A: K / V (ldmatrix, a_lane)  B: Q / dO as Kᵀ in the forward
//   Pᵀ, dSᵀ -> shared memory  (row = key, column = query)
//   dV += Pᵀ dO, dK += dSᵀ Q   warp tile kKvKeys keys x kKvCols columns, held in registers
//                              A: Pᵀ / dSᵀ (ldmatrix)       B: dO / Q through ldmatrix.trans
//   dQ  += dS K                warp tile kDqRows queries x kDqCols columns, reduced into the
//                              workspace in fragment order (dq_layout.h); A: dS from dSᵀ with
//                              ldmatrix.trans at bt_lane offsets, B: K through ldmatrix.trans
// in that order: dK / dV before dQ (measured 1-5% faster than dQ first); at d = 64 in the order
// dV, dQ, dK (kDvDqDk).
// At d = 128 a warp issues 144 ldmatrix.x4 a step (64 + 48 + 32); the layout before this one
// (each warp 16 keys against all 64 queries, Pᵀ and dSᵀ kept in registers for dK / dV) issued
// 184, and shared-memory reads bounded it. docs/performance.md, "Backward".
// P = exp(logit - LSE), dS = P ∘ (dP - D), with the chain rule through softcap and the softmax
// scale folded into dS before it is rounded to 16 bits (dK and dQ then need no scaling):
// dS = P ∘ (scale dP - scale D), one FFMA with scale D precomputed by the preprocess. (FA2 rounds
// the unscaled dS and scales dK and dQ at the end; that cost this kernel 1.03x the 3x-naive
// bound on one fp16 dQ case of the test grid, and saves no instruction over the FFMA.)
//
// Deterministic mode (p.deterministic): the blocks of one kv head add into a dQ row block in
// descending key-tile order. Block nb waits until a semaphore per (query head, batch, query
// tile) counts the key tiles after it that touch the query tile, adds, then increments it.
// Descending is the order in which the blocks reach a query tile (host-tested in
// tests/test_tile_ranges.cpp for causal and full attention, and for every mask without GQA): a
// block walks its query tiles upwards from the first that sees its keys, which does not
// decrease with nb, so under a causal mask the diagonal block adds first, at its first step, and
// the others follow without waiting (ascending order made them wait along a chain: 1.5-2.3x the
// default mode's time causal). In this mode blockIdx.x runs the key tiles backwards, so the
// wait depends only on lower block indices, which the hardware dispatches first, and always
// ends; a spin limit traps instead of hanging if that ever fails.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/params.h"
#include "core/dtype.h"
#include "core/mask.h"
#include "core/philox.h"
#include "cuda/bwd_sm80.h"  // kBwdBlockM, kBwdSpareRows, bwd_block_n
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/griddep.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/kernels/sm80/dq_layout.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // load_tile(_full), a_lane, bt_lane, exp2_fast, kLog2e
#include "cuda/kernels/sm80/tile_ranges.h"
#include "cuda/tensor_map.h"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm80 {

template <int kHeadDim_, typename Tag_, bool kDropout_ = false, int kBlockM_ = kBwdBlockM,
          bool kCompact_ = false>
struct BwdTraits {
  using Tag = Tag_;
  static constexpr int kHeadDim = kHeadDim_;
  // The keep-mask's Philox words cost registers and instructions inside the step: a separate
  // kernel, so that calls without dropout pay for none of it.
  static constexpr bool kDropout = kDropout_;
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "instantiated head dims: 32..256");
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = kBlockM_;                 // queries per step (bwd_wide_m)
  // The compact configuration (bwd_compact, for devices with less shared memory a block): 64
  // keys, one buffer of Q / dO / LSE / D.
  static constexpr bool kCompact = kCompact_;
  static_assert(!kCompact || kBlockM_ == kBwdBlockM, "the compact configuration takes 64 queries");
  // keys per block: 128, 64 above d 128 or compact
  static constexpr int kBlockN = kCompact ? kBwdCompactBlockN : bwd_block_n(kHeadDim);
  static constexpr int kQBufs = kCompact ? 1 : 2;  // buffers of the step's Q, dO, LSE, D
  // Sᵀ / dPᵀ: 4 warps along the keys, 2 along the queries (kBlockN / 4 keys x kBlockM / 2
  // queries); Sᵀ and dPᵀ cost 2 kSKeys kSQueries / 32 fp32 registers a thread.
  // With dropout and 64 keys, 2 x 4 (32 keys x kBlockM / 4 queries): the warp tile then spans
  // whole 32-key blocks of the keep-mask (keep_bits); the same fragment reads a k-step.
  static constexpr int kSWarpsN = kDropout_ && kBlockN == 64 ? 2 : 4, kSWarpsM = kWarps / kSWarpsN;
  static constexpr int kSKeys = kBlockN / kSWarpsN, kSQueries = kBlockM / kSWarpsM;
  // dK / dV: 2 kKvKeys kKvCols / 32 fp32 registers a thread for the whole block's life (128 at
  // d = 128 and 256). 4 x 2 warps, or 2 x 4 at 64 keys where a quarter of the head dim is whole
  // n-tile pairs (d = 192 / 256: 32 keys x d / 4 reads fewer fragments than 16 x d / 2).
  static constexpr int kKvWarpsN = kBlockN == 64 && (kHeadDim / 4) % 16 == 0 ? 2 : 4;
  static constexpr int kKvWarpsD = kWarps / kKvWarpsN;
  static constexpr int kKvKeys = kBlockN / kKvWarpsN, kKvCols = kHeadDim / kKvWarpsD;
  // dQ (kBlockM x kHeadDim a step): kDqWarpsM warps along the rows, the rest along the columns,
  // whole m-tiles by whole n-tile pairs, as square as they go (a warp reads kDqRows / 16 +
  // kDqCols / 16 fragments a k-step): 2 x 4 at d = 64 / 128 / 192 / 256, 4 x 2 at d = 32 / 96 /
  // 160 / 224 and with 128 rows.
  static constexpr int kNoSplit = 1 << 20;  // dq_cost of a split into partial fragments
  static constexpr int dq_cost(int wm) {
    return kBlockM % (16 * wm) != 0 || kHeadDim % (16 * (kWarps / wm)) != 0
               ? kNoSplit
               : kBlockM / wm / 16 + kHeadDim / (kWarps / wm) / 16;
  }
  static constexpr int kDqWarpsM = dq_cost(2) <= dq_cost(4) ? 2 : 4;
  static constexpr int kDqWarpsD = kWarps / kDqWarpsM;
  static constexpr int kDqRows = kBlockM / kDqWarpsM, kDqCols = kHeadDim / kDqWarpsD;
  using DqLayout = DqTileLayout<kDqRows, kDqCols, kDqWarpsM>;  // the accumulator's tile order
  static_assert(kSKeys % 16 == 0 && kSQueries % 16 == 0 && kKvKeys % 16 == 0 &&
                    kKvCols % 16 == 0 && kDqRows % 16 == 0 && kDqCols % 16 == 0,
                "warp tiles are whole m-tiles by whole n-tile pairs");
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;  // Q and dO, two buffers each
  using STile = SwizzledTile<kBlockN, kBlockM>;   // Pᵀ and dSᵀ: row = key, column = query
  // Step addresses from a block base (load_step): +1-4% at d = 64 (the per-step 64-bit products
  // cost ~100 instructions), but ptxas then spilled d = 256 80 -> 212 bytes (15% slower) and
  // d = 128 40 -> 88 (1% slower). Not with dropout (d = 64: 0 -> 20 bytes; unmeasured).
  static constexpr bool kStepBase = kHeadDim <= 64 && !kDropout;
  // LSE and D interleaved in the order the Sᵀ fragments read them (lse_slot): one 16-byte load an
  // n-tile instead of two 8-byte ones. Above d = 128 only: there ptxas then spilled less (d = 256
  // 80 -> 52 bytes) and it measured +1-2%; at d = 64 / 128 it spilled more (128 -> 200, 40 ->
  // 112 bytes) and measured 1-4% slower. Not with dropout (d = 256: 48 -> 64 bytes; unmeasured).
  static constexpr bool kLseD16 = kHeadDim > 128 && !kDropout;
  // The step's products in the order dV, dQ (and its reductions), dK, so that the reductions
  // drain behind dK's MMAs, instead of dK / dV as one loop and then dQ. Measured (H200, quick
  // grid, same run): d = 64 +2-5%, d = 128 -0.5-2%, d = 256 -2-4% (d = 32 and dropout not
  // measured, so not used there). Not with one Q / dO buffer (the next step's copies would
  // then wait for dK's reads of Q).
  static constexpr bool kDvDqDk = kHeadDim == 64 && !kDropout && kQBufs == 2;
  // sm90: the step's Q and dO tiles by TMA where the host made their maps (bwd_block). Measured
  // (H200, quick grid, same run): d = 128 +3-5%, d = 256 +4-7%. At d = 64 (128-query steps) it
  // first measured -1 to -3% (ptxas spilled the kernel 116 -> 204 bytes); with the cp.async
  // fallback's addresses as full products (kBase in bwd_block: 44 bytes) -0.3 to +1.7%, and
  // with kRotate too (36 bytes) +1.0-3.4%. At d = 32 both together measured -1.5 to +1.0% (TMA
  // alone -2.8 to +0.1%), so d = 32 keeps cp.async. d = 96 / 160 / 192 / 224 tested, not
  // benchmarked. Not in the compact configuration, which only parts without TMA choose (and the
  // tests under a shared-memory cap).
  static constexpr bool kTmaQdo = kHeadDim >= 64 && !kCompact;
  // The rotated start of the query-tile walk (bwd_block), with TMA (sm90) at d = 64 and 128:
  // where it measured a gain (H200, bf16 quick grid, same run, two runs each). d = 64 +1.0-3.4%
  // (with the TMA loads, above); d = 128 +1.2-2.2% and +1.5-2.1% at 4k / 16k. Not at d = 96
  // (-0.5 to -0.9% at 4k / 16k) nor 256 (-0.1 to +0.4%); d = 160-224 not measured. On the
  // cp.async path (sm80 / 86 / 89) with the row-base epilogue it spilled more and measured -3.4
  // to +0.4% at d = 64 (on the H200); without TMA at d = 128 -0.5 to +0.8%.
  static constexpr bool kRotate = (kHeadDim == 64 || kHeadDim == 128) && !kDropout && kTmaQdo;
  // With kLseD16, the float slot of query q's LSE among a step's 2 kBlockM values (D two floats
  // later): query 8 nt + 2t + e of a warp's kSQueries columns at 2 (t kSQueries / 4 + 2 nt) + e,
  // so a lane's four values of an n-tile are one aligned float4 (lanes of one t read the same).
  static constexpr int lse_slot(int q) {
    const int w = q / kSQueries * kSQueries, r = q % kSQueries;
    return 2 * (w + (r % 8) / 2 * (kSQueries / 4) + r / 8 * 2) + r % 2;
  }
  // The order's LSE and D slots (lse_slot, + 2) are distinct and inside the step's 2 kBlockM.
  static constexpr bool lse_slots_disjoint() {
    for (int a = 0; a < kBlockM; ++a) {
      if (lse_slot(a) < 0 || lse_slot(a) + 2 >= 2 * kBlockM) return false;
      for (int b = 0; b < kBlockM; ++b)
        if ((a != b && lse_slot(a) == lse_slot(b)) || lse_slot(a) == lse_slot(b) + 2) return false;
    }
    return true;
  }
  static_assert(!kLseD16 || lse_slots_disjoint(), "LSE / D slots overlap");
  static constexpr int kSmemBytes =
      2 * (2 * KvTile::kElems + 2 * kQBufs * QTile::kElems + 2 * STile::kElems) +
      kQBufs * 2 * kBlockM * 4 + kQBufs * 8;  // + the buffers' TMA barriers
};

// The workspace as the kernels see it (layout: bwd_sm80.h, bwd_workspace_bytes): the fp32 dQ
// accumulator [heads_q][rows][kHeadDim], the deterministic mode's semaphores
// [heads_q][batch][m_blocks], then scale · D and LSE · log2(e) [heads_q][rows] each.
// Rows: acc_row. Each sequence has kBwdSpareRows spare rows after its own, so that the main
// kernel's dQ reductions for a partial last query tile need no row test: the rows past the
// sequence take dS = 0 rows (their Q, dO, D are zero-filled) and are never read.
struct BwdWorkspace {
  float* dq_acc;
  int* sem;
  float* dsum;  // softmax scale · D
  float* lse2;  // the saved LSE · log2 e: P = exp2(s · scale · log2 e - lse2), one FFMA
  int64_t rows;  // rows of one head: total_q + batch * kBwdSpareRows
  int m_blocks;  // 64-row query tiles of the longest sequence (128-row steps index fewer)
  int tma;       // sm90: Q and dO arrive by TMA through the kernel's QdoMaps (else cp.async)
  // The split tail (bwd_sm80.h, BwdTail): blocks below tail_dp take one whole key tile each
  // (tile index = block index); the tail_ctas after them share the tail's tail_units steps
  // (tail_steps a tile), storing a part of a tile's dK / dV whole in tail_part (two per block,
  // tail_part_epilogue) and counting its steps in tail_cnt (per tail tile).
  float* tail_part;
  int* tail_cnt;
  int64_t tail_dp, tail_units;
  int tail_steps, tail_ctas;
};

template <typename Tag>
__device__ __forceinline__ float load_float(const uint16_t* x);
template <>
__device__ __forceinline__ float load_float<Bf16Tag>(const uint16_t* x) {
  return to_float(bfloat16_t{*x});
}
template <>
__device__ __forceinline__ float load_float<Fp16Tag>(const uint16_t* x) {
  return to_float(half_t{*x});
}

// The workspace row of sequence b's first query (+ the row inside the sequence).
__device__ __forceinline__ int64_t acc_row(const Params& p, int64_t b, const SeqInfo& sq) {
  return (p.varlen() ? sq.q_start : b * p.seqlen_q) + b * kBwdSpareRows;
}

// Lanes that share one row in the pre- and postprocess: a power of two covering the row's
// chunks (16 bytes of O / dO, or 4 floats of the dQ accumulator), at most a warp.
constexpr int row_lanes(int chunks) {
  return chunks > 16 ? 32 : chunks > 8 ? 16 : chunks > 4 ? 8 : 4;
}
constexpr int kRowWarps = 4;  // warps a block of the pre- / postprocess
// Query rows a block of the preprocess / postprocess of kernel head dim kD covers.
template <int kD>
constexpr int kPreRows = kRowWarps * (32 / row_lanes(kD / 8));
template <int kD>
constexpr int kPostRows = kRowWarps * (32 / row_lanes(kD / 4));

// Sum of the products of two 16-byte chunks of 8 elements, in fp32.
template <typename Tag>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint16_t a0 = uint16_t(aw[k] & 0xffffu), a1 = uint16_t(aw[k] >> 16);
    const uint16_t b0 = uint16_t(bw[k] & 0xffffu), b1 = uint16_t(bw[k] >> 16);
    s = fmaf(load_float<Tag>(&a0), load_float<Tag>(&b0), s);
    s = fmaf(load_float<Tag>(&a1), load_float<Tag>(&b1), s);
  }
  return s;
}

// Rows of a sequence of len_q queries whose dQ accumulator the preprocess clears: whole query
// tiles of either step size (kBwdWideBlockM is a multiple of kBwdBlockM), since a tile's rows
// are interleaved in memory (DqTileLayout) and the main kernel adds into all of its rows.
__host__ __device__ constexpr int64_t bwd_clear_rows(int64_t len_q) {
  return (len_q + kBwdWideBlockM - 1) / kBwdWideBlockM * kBwdWideBlockM;
}
static_assert(kBwdWideBlockM % kBwdBlockM == 0 && kBwdSpareRows >= kBwdWideBlockM - 1,
              "the cleared tiles cover both step sizes and fit in a sequence's rows");

// scale · rowsum(dO ∘ O) and LSE · log2(e) per row, in the workspace's row order, and the dQ
// accumulator cleared: row_lanes(kD / 8) lanes a row, each loading 16-byte chunks (the views are
// 16-byte aligned with strides a multiple of 8 elements: check_view_alignment) and storing
// 16-byte zeros over the row's kD floats; the rows from len_q to bwd_clear_rows(len_q) are only
// cleared. Grid (ceil(bwd_clear_rows(seqlen_q) / kPreRows), heads_q, batch). (One warp a row
// with 2-byte loads took 148 us at d = 64, 16k tokens x 32 heads, against FA2's 73 us, which
// also clears its accumulator; 43 us with 16-byte loads plus a 34 us memset before this.)
template <typename Tag, int kD>
__global__ void __launch_bounds__(32 * kRowWarps) bwd_preprocess(const __grid_constant__ Params p,
                                                                 BwdWorkspace ws) {
  constexpr int kLanes = row_lanes(kD / 8);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % kLanes;
  const int64_t row0 = (int64_t(blockIdx.x) * kRowWarps + warp) * (32 / kLanes);
  const int64_t i = row0 + lane / kLanes, h = blockIdx.y, b = blockIdx.z;
  // The main kernel, launched as this one's programmatic dependent (bwd_pdl), may start once
  // every block here has: its blocks load their K / V tiles as this grid's last wave drains.
  grid_launch_dependents();
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  const int64_t clear_rows = bwd_clear_rows(sq.len_q);
  if (row0 >= clear_rows) return;  // the whole warp: the shuffles below need every lane
  if (i < clear_rows) {
    float4* acc =
        reinterpret_cast<float4*>(ws.dq_acc + (h * ws.rows + acc_row(p, b, sq) + i) * kD);
#pragma unroll
    for (int c = sub; c < kD / 4; c += kLanes) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const bool live = i < sq.len_q;
  float sum = 0.f;
  if (live) {
    const uint16_t* o = p.out.at<const uint16_t>(b, sq.q_start + i, h);
    const uint16_t* dout = p.dout.at<const uint16_t>(b, sq.q_start + i, h);
    for (int c = 8 * sub; c < p.head_dim; c += 8 * kLanes)
      sum += dot8<Tag>(*reinterpret_cast<const uint4*>(o + c),
                       *reinterpret_cast<const uint4*>(dout + c));
  }
#pragma unroll
  for (int m = kLanes / 2; m >= 1; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (live && sub == 0) {
    const int64_t row = h * ws.rows + acc_row(p, b, sq) + i;
    ws.dsum[row] = sum * p.softmax_scale;
    ws.lse2[row] = p.lse.at(b, h, sq.q_start + i) * kLog2e;
  }
}

// dq = dQ accumulator in the input type: row_lanes(kHeadDim / 4) lanes a query row, each taking
// 4 columns at a time, which lie in one 16-byte piece of the tile order (DqTileLayout::offset,
// host-tested) and leave as one 8-byte store; grid (ceil(seqlen_q / kPostRows), heads_q, batch).
template <class T>
__global__ void __launch_bounds__(32 * kRowWarps) bwd_postprocess(const __grid_constant__ Params p,
                                                                  BwdWorkspace ws) {
  using Tag = typename T::Tag;
  using DqL = typename T::DqLayout;
  constexpr int kLanes = row_lanes(T::kHeadDim / 4);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % kLanes;
  const int64_t i = (int64_t(blockIdx.x) * kRowWarps + warp) * (32 / kLanes) + lane / kLanes;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  if (i >= sq.len_q) return;
  const int row = int(i % T::kBlockM);
  const float* tile =
      ws.dq_acc + (h * ws.rows + acc_row(p, b, sq) + (i - row)) * T::kHeadDim;
  uint16_t* dq = p.dq.at<uint16_t>(b, sq.q_start + i, h);
  for (int c = 4 * sub; c < p.head_dim; c += 4 * kLanes) {
    const float4 v = *reinterpret_cast<const float4*>(tile + DqL::offset(row, c));
    *reinterpret_cast<uint2*>(dq + c) = make_uint2(pack2<Tag>(v.x, v.y), pack2<Tag>(v.z, v.w));
  }
}

// Query tiles of key tile nb (KeyTileQueries, tile_ranges.h) at this kernel's tile sizes. The
// block's own loop and the deterministic mode's wait both use it, so they agree on which blocks
// add into a query tile.
template <class T>
__device__ __forceinline__ void key_tile_rows(const Visibility& vis, int64_t len_q, int64_t len_k,
                                              int nb, int* begin, int* end) {
  const KeyTileQueries q(vis, len_q, len_k, nb, T::kBlockN, T::kBlockM);
  *begin = q.begin;
  *end = q.end;
}

// The deterministic mode's wait: polls kSpinSleepNs apart (a block's step takes microseconds),
// and a trap after kSpinLimit polls (over a minute), which only a broken dispatch order reaches.
constexpr unsigned kSpinSleepNs = 64;
constexpr long long kSpinLimit = 1ll << 30;

// x, through an instruction the compiler can neither fold nor hoist out of a loop.
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  uint32_t y;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// The fp32 pair at dst += (a, b), returning nothing: one 8-byte vector reduction on sm90
// (atomicAdd on a float2 compiles to an ATOMG that returns the old pair), two scalar ones before.
__device__ __forceinline__ void red_add2(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// A warp's column offsets in one tile: v[c] is the byte offset of this lane's ldmatrix row piece
// for the 16 columns col0 + 16 c, row 0 (add row0 * 128 for row0, a multiple of 8), in the a_lane
// (kBt false) or bt_lane role (fwd_tile.cuh). The warp's col0 is known only at run time; indexing
// LaneOffsets by it would put that array in local memory.
template <class Tile, int kChunks>
struct ColOffsets {
  uint32_t v[kChunks];
  __device__ __forceinline__ ColOffsets(int lane, bool bt, int col0) {
    const LanePos q = bt ? bt_lane_pos(lane) : a_lane_pos(lane);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) v[c] = Tile::lane_offset_at(q.row, q.col, col0 + 16 * c);
  }
};
constexpr uint32_t kRowBytes = SwizzledTile<8, 64>::kRowBytes;  // any tile's: one column block

// Every fragment accumulator of a warp tile to zero.
template <int kM, int kN>
__device__ __forceinline__ void zero_frags(float (&a)[kM][kN][4]) {
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) a[m][n][e] = 0.f;
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// The dropout keep-mask of a thread's Sᵀ elements, bit 4 (mt kSNt + nt) + e (bwd_pointwise's
// element order). Element e of group (mt, nt) of lane 4 g + t is key 16 mt + 8 (e / 2) + g and
// query 8 nt + 2t + e % 2 of the warp's tile (32 keys from a 32-key boundary, queries from a
// 16-query one): for each n-tile pair and e % 2, the eight elements (n-tiles 2 ntp + a, keys
// g + 8 c) of one Philox block (core/philox.h), so the lane evaluates its own blocks and
// exchanges nothing: one evaluation (~60 instructions) per eight elements.
template <class T>
__device__ __forceinline__ uint32_t keep_bits(const DropoutStream& drop, uint32_t bh, int64_t m0,
                                              int64_t n0, int key0, int query0, int g, int t) {
  constexpr int kSMt = T::kSKeys / 16, kSNt = T::kSQueries / 8;
  static_assert(kSMt == 2 && kSNt % 2 == 0 && kSMt * kSNt * 4 <= 32,
                "warp tiles of whole dropout blocks, one bit per element in a 32-bit word");
  const uint32_t row0 = uint32_t(m0 + query0 + 2 * t), col = uint32_t(n0 + key0 + g);
  uint32_t bits = 0;
#pragma unroll
  for (int ntp = 0; ntp < kSNt / 2; ++ntp)
#pragma unroll
    for (int eq = 0; eq < 2; ++eq) {
      const Philox4 w = drop.block(bh, row0 + DropoutStream::kRows * ntp + eq, col);
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            bits |= uint32_t(drop.keep_in(w, a, 2 * mt + r))
                    << (4 * (mt * kSNt + 2 * ntp + a) + 2 * r + eq);
    }
  return bits;
}

// P and dS of one step in place for the warp's Sᵀ tile: st <- P (P ∘ [kept] with dropout), dpt
// <- dS = P ∘ (scale dP - scale D) with the softcap derivative (dsum holds scale · D).
// Element e of [mt][nt]: key kr = key0 + 16 mt + g + 8 (e / 2), query qc = query0 + 8 nt + 2t +
// e % 2 of the step (lse2 and dsum point at the step's query 0; with kLseD16 lse2 at both,
// interleaved); the mask and the ALiBi distance in 32-bit tile coordinates (StepWindow,
// host-tested in tests/test_tile_ranges.cpp). With dropout
// the forward's P·V saw P ∘ keep (keep = 0 or 1 / (1 - p)), so dS = P ∘ (dP ∘ keep - D) and dV
// takes P ∘ [kept], scaled by 1 / (1 - p) in fp32 at the end (as the forward does, so that no
// scaled P is rounded to 16 bits).
// kMasked / kTransform false: the step has no masked element / no logit transform, decided at
// compile time (a runtime test inside the unrolled loop cost a branch and its reconvergence per
// element); true: masked / transform, also tested at run time. (The dropout kernels took the
// general variant while the Philox code sat inside it: four copies spilled up to 1.7 KB; the
// step's keep bits now come before, from keep_bits.)
template <class T, bool kMasked, bool kTransform>
__device__ __forceinline__ void bwd_pointwise(float (&st)[T::kSKeys / 16][T::kSQueries / 8][4],
                                              float (&dpt)[T::kSKeys / 16][T::kSQueries / 8][4],
                                              const float* lse2, const float* dsum, float scale,
                                              const Logit<float>& logit, const StepWindow& win,
                                              float keep_scale, uint32_t kept_bits, int key0,
                                              int query0, int g, int t, bool masked,
                                              bool transform) {
  const float scale_log2 = scale * kLog2e;
  const float inv_softcap = kTransform && logit.softcap > 0.f ? 1.f / logit.softcap : 0.f;
#pragma unroll
  for (int nt = 0; nt < T::kSQueries / 8; ++nt) {
    const int q2 = query0 + 8 * nt + 2 * t;
    float2 l2, dd;
    if constexpr (T::kLseD16) {
      const float4 ld = reinterpret_cast<const float4*>(
          lse2 + 2 * (query0 + t * (T::kSQueries / 4)))[nt];  // T::lse_slot
      l2 = make_float2(ld.x, ld.y);
      dd = make_float2(ld.z, ld.w);
    } else {
      l2 = *reinterpret_cast<const float2*>(lse2 + q2);
      dd = *reinterpret_cast<const float2*>(dsum + q2);
    }
#pragma unroll
    for (int mt = 0; mt < T::kSKeys / 16; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = key0 + 16 * mt + g + 8 * (e / 2), qc = q2 + (e & 1);
        const float lse_e = e & 1 ? l2.y : l2.x, d_e = e & 1 ? dd.y : dd.x;
        float pr, dx = 1.f;
        if (kTransform && transform) {
          float x = st[mt][nt][e] * scale;
          if (logit.softcap > 0.f) {
            const float th = tanhf(x * inv_softcap);
            x = logit.softcap * th;
            dx = 1.f - th * th;
          }
          x -= logit.alibi_slope * float(win.alibi_distance(kr, qc));
          pr = exp2_fast(fmaf(x, kLog2e, -lse_e));
        } else {
          pr = exp2_fast(fmaf(st[mt][nt][e], scale_log2, -lse_e));
        }
        if constexpr (kMasked) {
          if (masked && !win.visible(kr, qc)) pr = 0.f;
        }
        float dp = dpt[mt][nt][e], pk = pr;
        if constexpr (T::kDropout) {
          const bool kept = (kept_bits >> (4 * (mt * (T::kSQueries / 8) + nt) + e)) & 1u;
          dp = kept ? dp * keep_scale : 0.f;
          pk = kept ? pr : 0.f;
        }
        st[mt][nt][e] = pk;
        const float ds = pr * fmaf(dp, scale, -d_e);
        dpt[mt][nt][e] = kTransform ? ds * dx : ds;  // dx = 1 unless softcap
      }
  }
}

__device__ __forceinline__ int add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

// The end of a part of a split tail tile (bwd_block): this block's dK / dV (dV times dv_scale)
// stored whole as its partial sum `seg` (0: its first tile, 1: its second; blocks of the tail
// span two at most), its `part` steps counted on the tile. The block whose count completes the
// tile's `steps` adds every part's sum in block order (so that dk / dv do not depend on which
// block finishes last) and writes dk / dv (rows below keys, columns below d; dk0 / dv0: the
// tile's first key row). flag: a shared int no thread reads meanwhile.
template <class T>
__device__ __forceinline__ void tail_part_epilogue(
    const Params& p, const BwdWorkspace& ws,
    const float (&dk)[T::kKvKeys / 16][T::kKvCols / 8][4],
    const float (&dv)[T::kKvKeys / 16][T::kKvCols / 8][4], float dv_scale, int64_t slot, int seg,
    int part, int steps, int kv_key0, int kv_col0, int g, int t, uint16_t* dk0, uint16_t* dv0,
    int keys, int d, volatile int* flag) {
  using Tag = typename T::Tag;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN;
  constexpr int64_t kPart = int64_t(bwd_tail_part_elems(kD));  // dK at 0, dV at kPart / 2
  const TailShare share{ws.tail_units, ws.tail_ctas};
  auto part_of = [&](int64_t c, int sg) {
    return ws.tail_part + (kBwdTailSlots * c + sg) * kPart;
  };
  float* own = part_of(blockIdx.x, seg);
#pragma unroll
  for (int mt = 0; mt < T::kKvKeys / 16; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nd = 0; nd < T::kKvCols / 8; ++nd) {
        const int off = (kv_key0 + 16 * mt + g + 8 * r) * kD + kv_col0 + 8 * nd + 2 * t;
        *reinterpret_cast<float2*>(own + off) =
            make_float2(dk[mt][nd][2 * r], dk[mt][nd][2 * r + 1]);
        *reinterpret_cast<float2*>(own + kPart / 2 + off) =
            make_float2(dv[mt][nd][2 * r] * dv_scale, dv[mt][nd][2 * r + 1] * dv_scale);
      }
  // Every thread's stores before the count (release), the last block's reads after it (acquire,
  // then the barrier).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = add_acq_rel(ws.tail_cnt + slot, part) + part == steps;
  __syncthreads();
  if (!*flag) return;
  const int64_t c_lo = share.block_of(slot * steps);
  const int64_t c_hi = share.block_of(slot * steps + steps - 1);
  // Each thread sums kCpt chunks of 8 columns (two float4 of dK, two of dV a part), all chunks of
  // a part before the next part: 4 kCpt independent loads in flight (one part's chunk at a time
  // left the block waiting on the L2 once per chunk and part: at d 64 with 33 parts a tile, the
  // tail cost more than it saved).
  constexpr int kChunks = kD / 8, kCpt = kN * kChunks / T::kThreads;
  static_assert(kN * kChunks % T::kThreads == 0, "whole chunks a thread");
  float4 sk[kCpt][2], sv[kCpt][2];
#pragma unroll
  for (int i = 0; i < kCpt; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) sk[i][h] = sv[i][h] = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [](float4& a, const float4 b) { a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w; };
  for (int64_t q = c_lo; q <= c_hi; ++q) {
    // Block q's sum for this tile: its first (slot 0) unless its steps start in an earlier tile.
    const float* src = part_of(q, share.first(q) / steps == slot ? 0 : 1);
#pragma unroll
    for (int i = 0; i < kCpt; ++i) {
      const int c = int(threadIdx.x) + i * T::kThreads;
      const float4* k4 = reinterpret_cast<const float4*>(src + c / kChunks * kD + c % kChunks * 8);
      const float4* v4 = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(k4) +
                                                         kPart / 2);
      add(sk[i][0], __ldcg(k4));
      add(sk[i][1], __ldcg(k4 + 1));
      add(sv[i][0], __ldcg(v4));
      add(sv[i][1], __ldcg(v4 + 1));
    }
  }
#pragma unroll
  for (int i = 0; i < kCpt; ++i) {
    const int c = int(threadIdx.x) + i * T::kThreads;
    const int row = c / kChunks, col = c % kChunks * 8;
    if (row < keys && col < d) {
      *reinterpret_cast<uint4*>(dk0 + row * p.dk.stride_s + col) =
          make_uint4(pack2<Tag>(sk[i][0].x, sk[i][0].y), pack2<Tag>(sk[i][0].z, sk[i][0].w),
                     pack2<Tag>(sk[i][1].x, sk[i][1].y), pack2<Tag>(sk[i][1].z, sk[i][1].w));
      *reinterpret_cast<uint4*>(dv0 + row * p.dv.stride_s + col) =
          make_uint4(pack2<Tag>(sv[i][0].x, sv[i][0].y), pack2<Tag>(sv[i][0].z, sv[i][0].w),
                     pack2<Tag>(sv[i][1].x, sv[i][1].y), pack2<Tag>(sv[i][1].z, sv[i][1].w));
    }
  }
}

// The main kernel is launched as the preprocess's programmatic dependent (bwd_pdl): before it
// reads LSE / D or adds into the dQ accumulator, and before any block leaves early, it waits for
// the preprocess's grid. With every block waiting, this grid cannot complete before the
// preprocess has, whatever its blocks find, so the postprocess after it never reads an
// accumulator still being cleared. (Today some block always has keys, since validation refuses
// empty tensors; the invariant does not lean on that.) Where launched plainly, the wait returns
// at once.
__device__ __forceinline__ void wait_for_preprocess() { grid_dependency_wait(); }

// Key tile nb of kv head hk, batch entry b: its steps [s_first, s_last) (clipped to its own
// steps; a whole tile: 0, INT_MAX). The steps walk (query head of the group, query tile) pairs;
// the Q, dO, LSE and D of step s + 1 stream into the other buffer while step s computes. A part
// of a tile (the split tail, BwdWorkspace; tail_slot: the tail tile, -1 for a whole-tile block)
// ends in tail_part_epilogue. first: the block's first call, which sets up the TMA barriers;
// phase: their parities, kept across calls.
template <class T>
__device__ __forceinline__ void bwd_block(const Params& p, const BwdWorkspace& ws,
                                          const QdoMaps& maps, int nb, int64_t hk, int64_t b,
                                          int s_first, int s_last, int64_t tail_slot, bool first,
                                          uint32_t& phase, uint16_t* smem) {
  using Tag = typename T::Tag;
  using KvTile = typename T::KvTile;
  using QTile = typename T::QTile;
  using STile = typename T::STile;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN, kM = T::kBlockM;
  constexpr int kSMt = T::kSKeys / 16, kSNt = T::kSQueries / 8;   // Sᵀ m-tiles, n-tiles
  constexpr int kKvMt = T::kKvKeys / 16, kKvNt = T::kKvCols / 8;  // dK / dV
  constexpr int kDqMt = T::kDqRows / 16, kDqNt = T::kDqCols / 8;  // dQ
  uint16_t* sK = smem;
  uint16_t* sV = sK + KvTile::kElems;
  constexpr int kBufs = T::kQBufs;
  uint16_t* sQ = sV + KvTile::kElems;          // [kBufs][QTile]
  uint16_t* sdO = sQ + kBufs * QTile::kElems;  // [kBufs][QTile]
  uint16_t* sP = sdO + kBufs * QTile::kElems;
  uint16_t* sdS = sP + STile::kElems;
  // [kBufs][kM] LSE · log2 e, then [kBufs][kM] scale · D; with kLseD16 [kBufs][2 kM] in
  // lse_slot order.
  float* sLse = reinterpret_cast<float*>(sdS + STile::kElems);
  float* sD = sLse + kBufs * kM;
  // [kBufs] the barriers the TMA copies of each buffer's Q and dO complete on (sm90), one
  // 8-byte mbarrier each; a copy's box is one 64-column block of a tile (kM rows of 128 bytes).
  constexpr int kBarBytes = 8, kBoxCols = QTile::kBlockCols;
  const uint32_t bar0 = smem_addr(sLse + 2 * kBufs * kM);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  const int64_t n0 = int64_t(nb) * kN;
  if (n0 >= sq.len_k) {
    wait_for_preprocess();
    return;
  }
  const int d = int(p.head_dim);
  const int64_t keys = sq.len_k - n0 < kN ? sq.len_k - n0 : kN;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  int m_begin, m_end;  // query tiles that see a key of this tile
  key_tile_rows<T>(vis, sq.len_q, sq.len_k, nb, &m_begin, &m_end);
  const int m_steps = m_end - m_begin;
  // The query tiles at whose steps this key tile needs no mask: two int compares a step instead
  // of the 64-bit visibility of the step's corners (~100 uniform instructions a step at d = 256).
  const KeyTileUnmasked unmasked(vis, sq.len_q, sq.len_k, nb, kN, kM);
  const int group = int(p.group());
  const int steps = m_steps * group;  // (query head, query tile) pairs, head-major
  const int s_begin = s_first, s_end = s_last < steps ? s_last : steps;  // this call's
  const int64_t acc0 = acc_row(p, b, sq);
  DropoutStream drop{};
  if constexpr (T::kDropout) drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const bool deterministic = p.deterministic;
  // sm90: a step's Q and dO tiles arrive by TMA (two bulk copies per 64-column block, issued by
  // one thread) instead of every thread's cp.async chunks and their addresses (~100 instructions
  // a warp-step at d = 256). A packed batch's partial query tile would read the next sequence's
  // rows, which must arrive as zeros: those steps keep the cp.async copies. phase: each buffer's
  // barrier parity, flipped at each wait.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kSm90 = true;
#else
  constexpr bool kSm90 = false;  // no TMA (its branches compiled out), no rotated start
#endif
  constexpr bool kTma = kSm90 && T::kTmaQdo;
  const bool tma = kTma && ws.tma != 0;
  const int tma_tiles = !tma ? 0 : p.varlen() ? int(sq.len_q / kM) : INT_MAX;  // mb below: TMA
  auto tma_step = [&](int mb) { return kTma && mb < tma_tiles; };
  if (tma && first) {
    if (tid == 0) {
      for (int i = 0; i < kBufs; ++i) mbar_init(bar0 + kBarBytes * i, 1);
      mbar_init_fence();
    }
    __syncthreads();  // the barriers initialised before any thread waits on them
  }

  // Q, dO, LSE and D of the step (query head head of the group, query tile mb) into buffer buf.
  // Rows past the sequence arrive as zeros: their P is exp(0 - 0) = 1, but with dO = 0, Q = 0
  // and D = 0 they add nothing to dV, dK or dS, and their dQ is never read.
  // With kBase the addresses are relative to the group's first query head, row 0 (a
  // head / tile index times a stride each); without, the full (b, row, head) products.
  // With TMA (sm90) the cp.async copies serve only a packed batch's partial tiles: their full
  // address products there, rather than a block base held across the loop (d = 64 with 128
  // queries: 204 -> 44 bytes of spills, 36 with kRotate).
  constexpr bool kBase = T::kStepBase && !kTma;
  const uint16_t* q_blk = p.q.at<const uint16_t>(b, sq.q_start, hk * group);
  const uint16_t* do_blk = p.dout.at<const uint16_t>(b, sq.q_start, hk * group);
  const int64_t ws_blk = hk * group * ws.rows + acc0;  // workspace row of (head 0, row 0)
  auto load_step = [&](int head, int mb, int buf) {
    const int64_t m0 = int64_t(mb) * kM;
    const int64_t rows = sq.len_q - m0 < kM ? sq.len_q - m0 : kM;
    const int64_t hq = hk * group + head;
    if (tma_step(mb)) {
      if (tid == 0) {
        const uint32_t bar = bar0 + kBarBytes * buf;
        const int row = int(p.varlen() ? sq.q_start + m0 : m0), bc = p.varlen() ? 0 : int(b);
        // The Q and dO tiles, whole boxes (columns past the head dim arrive too, as zeros).
        mbar_arrive_expect_tx(bar, 2 * QTile::kElems * uint32_t(sizeof(uint16_t)));
#pragma unroll
        for (int blk = 0; blk < QTile::kBlocks; ++blk) {
          const int off = blk * kM * kBoxCols, col = blk * kBoxCols;
          tma_load_4d(smem_addr(sQ + buf * QTile::kElems + off), &maps.q, col, int(hq), row, bc,
                      bar);
          tma_load_4d(smem_addr(sdO + buf * QTile::kElems + off), &maps.dout, col, int(hq), row,
                      bc, bar);
        }
      }
    } else {
      const uint16_t* q = kBase ? q_blk + head * p.q.stride_h + m0 * p.q.stride_s
                                : p.q.at<const uint16_t>(b, sq.q_start + m0, hq);
      const uint16_t* dout = kBase ? do_blk + head * p.dout.stride_h + m0 * p.dout.stride_s
                                   : p.dout.at<const uint16_t>(b, sq.q_start + m0, hq);
      auto load_partial = [&] {
        load_tile<QTile, T::kThreads>(sQ + buf * QTile::kElems, q, p.q.stride_s, rows, d, tid);
        load_tile<QTile, T::kThreads>(sdO + buf * QTile::kElems, dout, p.dout.stride_s, rows, d,
                                      tid);
      };
      if constexpr (TileCopy<QTile, T::kThreads>::kEven) {
        if (rows == kM && d == kD) {
          load_tile_full<QTile, T::kThreads>(sQ + buf * QTile::kElems, q, p.q.stride_s, tid);
          load_tile_full<QTile, T::kThreads>(sdO + buf * QTile::kElems, dout, p.dout.stride_s,
                                             tid);
        } else {
          load_partial();
        }
      } else {
        load_partial();
      }
    }
    if (tid < kM) {
      const bool ok = tid < rows;
      const int64_t row = ok ? m0 + tid : 0;
      const int64_t r = kBase ? ws_blk + head * ws.rows + row : hq * ws.rows + acc0 + row;
      const int lse_at = T::kLseD16 ? buf * 2 * kM + T::lse_slot(tid) : buf * kM + tid;
      const int d_at = T::kLseD16 ? lse_at + 2 : kBufs * kM + buf * kM + tid;
      cp_async_4(smem_addr(sLse + lse_at), ws.lse2 + r, ok);
      cp_async_4(smem_addr(sLse + d_at), ws.dsum + r, ok);
    }
  };

  load_tile<KvTile, T::kThreads>(sK, p.k.at<const uint16_t>(b, sq.k_start + n0, hk), p.k.stride_s,
                                 keys, d, tid);
  load_tile<KvTile, T::kThreads>(sV, p.v.at<const uint16_t>(b, sq.k_start + n0, hk), p.v.stride_s,
                                 keys, d, tid);
  wait_for_preprocess();  // the K / V copies issued, everything below reads the preprocess's rows
  // Default mode at d = 64 / 128 on sm90 (kRotate): block nb starts at query tile m_begin + nb %
  // m_steps and wraps around, so that under full attention the blocks of a head, which run in
  // lockstep, add into different dQ tiles at each step. Deterministic mode keeps the order.
  constexpr bool kRotate = kSm90 && T::kRotate;
  const int m_first = kRotate && !deterministic && m_steps > 0 ? m_begin + nb % m_steps : m_begin;
  // Step s_begin's (query head, query tile): the walk from (0, m_first), m_steps tiles a head.
  int head = 0, mb = m_first;
  if (s_begin > 0 && m_steps > 0) {
    head = s_begin / m_steps;
    mb = m_begin + (m_first - m_begin + s_begin % m_steps) % m_steps;
  }
  if (s_begin < s_end) load_step(head, mb, 0);
  cp_async_commit();

  float dk[kKvMt][kKvNt][4], dv[kKvMt][kKvNt][4];
  zero_frags(dk);
  zero_frags(dv);

  const auto kv_a = a_lane<KvTile>(lane);  // K / V as A (Sᵀ, dPᵀ)
  const auto q_bt = bt_lane<QTile>(lane);  // Q / dO as B of Sᵀ / dPᵀ
  const auto s_a = a_lane<STile>(lane);    // Pᵀ / dSᵀ as A of dV / dK
  const uint32_t aK0 = smem_addr(sK), aV0 = smem_addr(sV);
  const uint32_t aP0 = smem_addr(sP), adS0 = smem_addr(sdS);
  const float scale = p.softmax_scale;
  // The warp's tile in each product (BwdTraits).
  const int s_key0 = (warp % T::kSWarpsN) * T::kSKeys;
  const int s_query0 = (warp / T::kSWarpsN) * T::kSQueries;
  const int kv_key0 = (warp % T::kKvWarpsN) * T::kKvKeys;
  const int kv_col0 = (warp / T::kKvWarpsN) * T::kKvCols;
  const int dq_row0 = (warp % T::kDqWarpsM) * T::kDqRows;
  const int dq_col0 = (warp / T::kDqWarpsM) * T::kDqCols;
  // The products whose warp tile starts at a run-time column: Q / dO transposed as B of dK / dV,
  // dS from dSᵀ transposed as A of dQ (its columns are queries), K transposed as B of dQ.
  const ColOffsets<QTile, kKvNt / 2> kv_cols(lane, false, kv_col0);
  const ColOffsets<STile, kDqMt> dq_rows(lane, true, dq_row0);
  const ColOffsets<KvTile, kDqNt / 2> dq_cols(lane, false, dq_col0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Pᵀ / dSᵀ stores through stmatrix: a_lane rows of the warp's 16 x 16 blocks, keys s_key0 +
  // 16 mt (added as whole rows), queries s_query0 + 16 ntp.
  ColOffsets<STile, kSNt / 2> st_cols(lane, false, s_query0);
#pragma unroll
  for (int c = 0; c < kSNt / 2; ++c) st_cols.v[c] += uint32_t(s_key0) * kRowBytes;
#else
  // This thread's Pᵀ / dSᵀ stores, bytes: key s_key0 + g, queries s_query0 + 8 nt + 2t.
  uint32_t st_off[kSNt];
#pragma unroll
  for (int nt = 0; nt < kSNt; ++nt)
    st_off[nt] = 2 * uint32_t(STile::offset(s_key0 + g, s_query0 + 8 * nt + 2 * t));
#endif

  // Step s is (query head head of the group, query tile mb), head-major; (nhead, nmb) is step
  // s + 1, counted rather than divided out of s (an integer division per step).
  for (int s = s_begin; s < s_end; ++s) {
    const int buf = kBufs == 2 ? (s - s_begin) & 1 : 0;
    const bool wrap = mb + 1 == m_end;
    const int nmb = wrap ? m_begin : mb + 1;
    // (nmb == m_first holds for both walks; `wrap` keeps the unrotated kernels' SASS as measured.)
    const int nhead = (kRotate ? nmb == m_first : wrap) ? head + 1 : head;
    const int64_t hq = hk * group + head;
    const int64_t m0 = int64_t(mb) * kM;
    cp_async_wait<0>();
    if (tma_step(mb)) {  // this step's Q and dO copies, issued a step ago
      mbar_wait(bar0 + kBarBytes * buf, (phase >> buf) & 1u);
      phase ^= 1u << buf;
    }
    // Step s landed for every thread, and every warp has finished step s - 1, so no one reads
    // buffer buf ^ 1 (step s - 1's Q / dO, LSE, D), Pᵀ or dSᵀ any more. (Compact: step s + 1's
    // copies start after the dK / dV product, below.)
    __syncthreads();
    if (kBufs == 2 && s + 1 < s_end) load_step(nhead, nmb, buf ^ 1);
    cp_async_commit();
    // The base addresses pass through an opaque move each step: loop-invariant, ptxas hoisted
    // every fragment address of the unrolled step out of the loop into registers of their own
    // (d = 256: 1040 bytes of spills, against 272 with the per-step base).
    const uint32_t aK = opaque(aK0), aV = opaque(aV0), aP = opaque(aP0), adS = opaque(adS0);
    const uint32_t aQ = opaque(smem_addr(sQ + buf * QTile::kElems));
    const uint32_t adO = opaque(smem_addr(sdO + buf * QTile::kElems));
    const float* lse = T::kLseD16 ? sLse + buf * 2 * kM : sLse + buf * kM;
    const float* dsum = sD + buf * kM;
    const Logit<float> logit{p.softcap, p.alibi_slope(b, hq), sq.len_k - sq.len_q};
    const bool transform = logit.softcap > 0.f || logit.alibi_slope != 0.f;

    // Sᵀ = K Qᵀ, then dPᵀ = V dOᵀ, over the warp's (kSKeys x kSQueries) tile, full head dim:
    // one after the other, so that only one product's fragments are live next to Sᵀ (at 9ff4169,
    // d = 128: interleaved spilled 192 bytes, sequential 144, and interleaved measured 1-2%
    // slower).
    float st[kSMt][kSNt][4], dpt[kSMt][kSNt][4];
    auto s_gemm = [&](float(&acc)[kSMt][kSNt][4], uint32_t a_base, uint32_t b_base) {
      zero_frags(acc);
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t a[kSMt][4];
#pragma unroll
        for (int mt = 0; mt < kSMt; ++mt)
          ldmatrix_x4(a[mt], a_base + KvTile::frag_offset(kv_a, s_key0 + 16 * mt, ks * 16));
#pragma unroll
        for (int ntp = 0; ntp < kSNt / 2; ++ntp) {
          uint32_t bf[4];
          ldmatrix_x4(bf, b_base + QTile::frag_offset(q_bt, s_query0 + ntp * 16, ks * 16));
#pragma unroll
          for (int mt = 0; mt < kSMt; ++mt) {
            mma_m16n8k16<Tag>(acc[mt][2 * ntp], a[mt], {bf[0], bf[1]});
            mma_m16n8k16<Tag>(acc[mt][2 * ntp + 1], a[mt], {bf[2], bf[3]});
          }
        }
      }
    };
    // The step's keep-mask first, while only dK / dV hold registers (after the two products,
    // next to Sᵀ and dPᵀ, ptxas spilled d = 128 200 bytes).
    uint32_t kept_bits = 0;
    if constexpr (T::kDropout)
      kept_bits = keep_bits<T>(drop, uint32_t(b * p.heads_q + hq), m0, n0, s_key0, s_query0, g, t);
    s_gemm(st, aK, aQ);
    s_gemm(dpt, aV, adO);

    const bool masked = mb < unmasked.begin || mb >= unmasked.end;
    auto pointwise = [&](auto kMasked, auto kTransform) {
      // The step's window only where it is read (a mask or ALiBi's distance).
      const StepWindow win(vis, m0, n0, sq.len_k, kN);
      bwd_pointwise<T, decltype(kMasked)::value, decltype(kTransform)::value>(
          st, dpt, lse, dsum, scale, logit, win, drop.keep_scale, kept_bits, s_key0, s_query0, g,
          t, masked, transform);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (masked)
      transform ? pointwise(Yes{}, Yes{}) : pointwise(Yes{}, No{});
    else
      transform ? pointwise(No{}, Yes{}) : pointwise(No{}, No{});

    // Pᵀ and dSᵀ to shared memory.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // One stmatrix per 16 x 16 block: its registers are the A fragment's (pack_a).
#pragma unroll
    for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
      for (int ntp = 0; ntp < kSNt / 2; ++ntp) {
        uint32_t r[4];
        const uint32_t off = st_cols.v[ntp] + 16 * mt * kRowBytes;
        pack_a<Tag>(st[mt][2 * ntp], st[mt][2 * ntp + 1], r);
        stmatrix_x4(aP + off, r);
        pack_a<Tag>(dpt[mt][2 * ntp], dpt[mt][2 * ntp + 1], r);
        stmatrix_x4(adS + off, r);
      }
#else
    // This thread's keys g, g + 8 of each m-tile, query pairs 2t, at st_off[nt] plus whole 8-row
    // groups (the swizzle repeats every 8 rows).
#pragma unroll
    for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
      for (int nt = 0; nt < kSNt; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t off = st_off[nt] + (16 * mt + 8 * r) * kRowBytes;
          st_shared_b32(aP + off, pack2<Tag>(st[mt][nt][2 * r], st[mt][nt][2 * r + 1]));
          st_shared_b32(adS + off, pack2<Tag>(dpt[mt][nt][2 * r], dpt[mt][nt][2 * r + 1]));
        }
#endif

    __syncthreads();  // Pᵀ and dSᵀ complete

    // dQ of the step (the warp's kDqRows x kDqCols tile) = dS K, into registers; in
    // deterministic mode, then the wait for this query tile's turn.
    float dq[kDqMt][kDqNt][4];
    int* sem = nullptr;
    auto dq_gemm = [&] {
      zero_frags(dq);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        uint32_t a[kDqMt][4];
#pragma unroll
        for (int mt = 0; mt < kDqMt; ++mt)
          ldmatrix_x4_trans(a[mt], adS + kk * 16 * kRowBytes + dq_rows.v[mt]);
#pragma unroll
        for (int ndp = 0; ndp < kDqNt / 2; ++ndp) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, aK + kk * 16 * kRowBytes + dq_cols.v[ndp]);
#pragma unroll
          for (int mt = 0; mt < kDqMt; ++mt) {
            mma_m16n8k16<Tag>(dq[mt][2 * ndp], a[mt], {bk[0], bk[1]});
            mma_m16n8k16<Tag>(dq[mt][2 * ndp + 1], a[mt], {bk[2], bk[3]});
          }
        }
      }
      if (deterministic) {
        // Wait for the key tiles after this one that add into this query tile.
        sem = ws.sem + (hq * p.batch + b) * ws.m_blocks + mb;
        const int n_tiles = int((sq.len_k + kN - 1) / kN);
        int before = 0;
        for (int j0 = nb + 1; j0 < n_tiles; j0 += T::kThreads) {
          const int j = j0 + tid;
          int jb = 0, je = 0;
          if (j < n_tiles) key_tile_rows<T>(vis, sq.len_q, sq.len_k, j, &jb, &je);
          before += __syncthreads_count(jb <= mb && mb < je);
        }
        if (tid == 0) {
          long long spins = 0;
          while (load_acquire(sem) < before) {
            __nanosleep(kSpinSleepNs);
            if (++spins > kSpinLimit) __trap();  // a block dispatched earlier never ran
          }
        }
        __syncthreads();
      }
    };
    // This thread's dQ pairs, in the accumulator's tile order (dq_layout.h): every address an
    // immediate offset from acc, with no test. A partial last query tile adds its rows past the
    // sequence (dS = 0 there) into the sequence's spare rows (BwdWorkspace); columns past d (a
    // padded head dim) hold K's zero columns' products. The postprocess reads neither.
    using DqL = typename T::DqLayout;
    float* acc = ws.dq_acc + (hq * ws.rows + acc0 + m0) * kD + DqL::pair_offset(warp, lane, 0);
    auto reduce_dq = [&] {
#pragma unroll
      for (int j = 0; j < DqL::kReds; ++j) {
        const int mt = DqL::mt(j), r = DqL::half(j), nd = DqL::nt(j);
        red_add2(acc + DqL::pair_offset(0, 0, j), dq[mt][nd][2 * r], dq[mt][nd][2 * r + 1]);
      }
    };

    // dV += Pᵀ dO and dK += dSᵀ Q over the warp's (kKvKeys x kKvCols) tile, in one loop
    // (kDvDqDk false) or one product at a time (kv_gemm: acc += A B, A = Pᵀ / dSᵀ at a_base,
    // B = dO / Q at b_base).
    auto kv_gemm = [&](float(&acc)[kKvMt][kKvNt][4], uint32_t a_base, uint32_t b_base) {
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk) {
        uint32_t a[kKvMt][4];
#pragma unroll
        for (int mt = 0; mt < kKvMt; ++mt)
          ldmatrix_x4(a[mt], a_base + STile::frag_offset(s_a, kv_key0 + 16 * mt, kk * 16));
#pragma unroll
        for (int ndp = 0; ndp < kKvNt / 2; ++ndp) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, b_base + kk * 16 * kRowBytes + kv_cols.v[ndp]);
#pragma unroll
          for (int mt = 0; mt < kKvMt; ++mt) {
            mma_m16n8k16<Tag>(acc[mt][2 * ndp], a[mt], {bf[0], bf[1]});
            mma_m16n8k16<Tag>(acc[mt][2 * ndp + 1], a[mt], {bf[2], bf[3]});
          }
        }
      }
    };
    auto kv_gemm_both = [&] {
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk) {
        uint32_t pa[kKvMt][4], da[kKvMt][4];
#pragma unroll
        for (int mt = 0; mt < kKvMt; ++mt) {
          ldmatrix_x4(pa[mt], aP + STile::frag_offset(s_a, kv_key0 + 16 * mt, kk * 16));
          ldmatrix_x4(da[mt], adS + STile::frag_offset(s_a, kv_key0 + 16 * mt, kk * 16));
        }
#pragma unroll
        for (int ndp = 0; ndp < kKvNt / 2; ++ndp) {
          uint32_t bo[4], bq[4];
          ldmatrix_x4_trans(bo, adO + kk * 16 * kRowBytes + kv_cols.v[ndp]);
          ldmatrix_x4_trans(bq, aQ + kk * 16 * kRowBytes + kv_cols.v[ndp]);
#pragma unroll
          for (int mt = 0; mt < kKvMt; ++mt) {
            mma_m16n8k16<Tag>(dv[mt][2 * ndp], pa[mt], {bo[0], bo[1]});
            mma_m16n8k16<Tag>(dv[mt][2 * ndp + 1], pa[mt], {bo[2], bo[3]});
            mma_m16n8k16<Tag>(dk[mt][2 * ndp], da[mt], {bq[0], bq[1]});
            mma_m16n8k16<Tag>(dk[mt][2 * ndp + 1], da[mt], {bq[2], bq[3]});
          }
        }
      }
    };
    // dQ, its reductions and (deterministic mode) this tile's turn handed on.
    auto dq_step = [&] {
      dq_gemm();
      reduce_dq();
      if (deterministic) {
        __threadfence();
        __syncthreads();
        if (tid == 0) add_release(sem, 1);
      }
    };
    if constexpr (T::kDvDqDk) {
      // dV, dQ and its reductions, dK: the reductions drain while dK's MMAs run.
      kv_gemm(dv, aP, adO);
      dq_step();
      kv_gemm(dk, adS, aQ);
    } else {
      // dK / dV, then dQ: measured 1-5% faster than dQ first with the reductions spread over
      // the dK / dV product (d = 64 / 128 / 256, 4bf5759), which ptxas hoisted to its start
      // anyway to free dQ's registers.
      kv_gemm_both();
      if constexpr (kBufs == 1) {
        // Every warp's dK / dV product has read this step's Q and dO (and its element-wise pass
        // LSE and D): step s + 1's copies into the one buffer overlap the dQ product.
        __syncthreads();
        if (s + 1 < s_end) load_step(nhead, nmb, 0);
        cp_async_commit();
      }
      dq_step();
    }
    head = nhead;
    mb = nmb;
  }

  cp_async_wait<0>();  // a tile no query sees ran no step: its K / V copies may be in flight
  __syncthreads();     // every warp's last reads of K and V are done
  const float dv_scale = T::kDropout ? drop.keep_scale : 1.f;
  if (tail_slot >= 0 && (s_begin > 0 || s_end < steps)) {
    // (sK as the flag: K is read no more.)
    tail_part_epilogue<T>(p, ws, dk, dv, dv_scale, tail_slot, first ? 0 : 1, s_end - s_begin,
                          steps, kv_key0, kv_col0, g, t, p.dk.at<uint16_t>(b, sq.k_start + n0, hk),
                          p.dv.at<uint16_t>(b, sq.k_start + n0, hk), int(keys), d,
                          reinterpret_cast<volatile int*>(sK));
    return;
  }

  // dK, dV of the warp's keys and columns (zero for keys no query sees), staged as 16-bit values
  // in the K and V tiles, so that they leave in 16-byte row-contiguous stores: 4-byte stores
  // straight from the fragments touch each row's sector 8 times over and took 2-3x FA2's
  // epilogue stall samples (ncu, d = 64 / 256, 1k).
#pragma unroll
  for (int mt = 0; mt < kKvMt; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = kv_key0 + 16 * mt + g + 8 * r;
#pragma unroll
      for (int nd = 0; nd < kKvNt; ++nd) {
        const int off = KvTile::offset(row, kv_col0 + 8 * nd + 2 * t);
        *reinterpret_cast<uint32_t*>(sK + off) =
            pack2<Tag>(dk[mt][nd][2 * r], dk[mt][nd][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(sV + off) =
            pack2<Tag>(dv[mt][nd][2 * r] * dv_scale, dv[mt][nd][2 * r + 1] * dv_scale);
      }
    }
  __syncthreads();
  constexpr int kChunksPerRow = kD / 8;  // 16-byte chunks
  const int chunks_used = d / 8;         // head_dim may be below the instantiation's
  // Row addresses from the block's first key row (one 64-bit product a row instead of the full
  // (b, row, head) product): ptxas then spilled less in the step loop (sm_90a, bytes stored, at
  // 4832f96: d 64 with 128 queries 128 -> 116, d 128 48 -> 36, d 256 12 -> 0; d 32 with 128
  // queries 32 -> 56, d 192 0 -> 4, d 224 60 -> 64) and measured 0-1.3% faster.
  uint16_t* dk0 = p.dk.at<uint16_t>(b, sq.k_start + n0, hk);
  uint16_t* dv0 = p.dv.at<uint16_t>(b, sq.k_start + n0, hk);
  const int rows_out = int(keys);
#pragma unroll
  for (int c = tid; c < kN * kChunksPerRow; c += T::kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    if (row < rows_out && chunk < chunks_used) {
      const int off = KvTile::offset(row, chunk * 8);
      *reinterpret_cast<uint4*>(dk0 + row * p.dk.stride_s + chunk * 8) =
          *reinterpret_cast<const uint4*>(sK + off);
      *reinterpret_cast<uint4*>(dv0 + row * p.dv.stride_s + chunk * 8) =
          *reinterpret_cast<const uint4*>(sV + off);
    }
  }
}

// Without kTail: block (x, y, z) takes key tile x of kv head y, batch entry z (the key tiles
// counted from the last in deterministic mode), for the ws.tail_dp tiles before the split tail
// (x fastest). With kTail, a one-dimensional grid: block x takes its share of the split tail's
// steps (BwdWorkspace), which spans two tiles at most, one bwd_block call each (one call site,
// so that the step loop is compiled once; a kernel of its own, so that the loop and the 64-bit
// tile decode around it stay out of the whole-tile kernel's register allocation).
// maps: Q and dO for TMA where ws.tma (sm90); the 128-byte swizzle of their boxes needs the
// 1024-byte alignment of the tiles.
template <class T, bool kTail>
__global__ void __launch_bounds__(T::kThreads, 1) bwd_kernel(const __grid_constant__ Params p,
                                                             BwdWorkspace ws,
                                                             const __grid_constant__ QdoMaps maps) {
  extern __shared__ __align__(1024) uint16_t smem[];
  const int n_tiles = int((p.seqlen_k + T::kBlockN - 1) / T::kBlockN);
  uint32_t phase = 0;
  if constexpr (!kTail) {
    // Grid (key tiles, kv heads, batch): the blocks past the tail_dp-th (x fastest) leave at once.
    const int nb = int(blockIdx.x);
    if (nb + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z) >= ws.tail_dp) {
      wait_for_preprocess();
      return;
    }
    bwd_block<T>(p, ws, maps, p.deterministic ? int(gridDim.x) - 1 - nb : nb, blockIdx.y,
                 blockIdx.z, 0, INT_MAX, -1, true, phase, smem);
  } else {
    // 32-bit step counts (bwd_tail_split keeps units below 2^31).
    const TailShare share{ws.tail_units, ws.tail_ctas};
    int u = int(share.first(blockIdx.x));
    const int u_end = int(share.first(blockIdx.x + 1)), steps = ws.tail_steps;
#pragma unroll 1
    for (bool first = true; u < u_end; first = false) {
      const int slot = u / steps;  // tail tile
      const int s_first = u - slot * steps;
      const int s_last = min(u_end - slot * steps, steps);
      u = slot * steps + s_last;
      // 32-bit tile decode (bwd_tail_split keeps every tile index below 2^31 when it splits).
      const int tile = int(ws.tail_dp) + slot, hb = tile / n_tiles, heads = int(p.heads_kv);
      bwd_block<T>(p, ws, maps, tile - hb * n_tiles, hb % heads, hb / heads, s_first, s_last,
                   slot, first, phase, smem);
      __syncthreads();  // every thread done with this tile's shared memory
    }
  }
}

}  // namespace fa::cuda::sm80
