// The FlashAttention-2 backward for the sm80 family on the forward's primitive layer (issue 4):
// every head dim of the forward, fp16 / bf16, every mask, softcap, ALiBi, GQA / MQA, packed
// batches, dropout (the keep-mask regenerated from common/philox.h, bit for bit the CPU
// backend's) and a deterministic mode. docs/cuda-kernels.md, "Backward".
//
// Three kernels per call:
//   bwd_preprocess   scale · D (D = rowsum(dO ∘ O)) and LSE · log2 e per (query head, row),
//                    fp32, into the workspace;
//   bwd_kernel       one block per (key tile of kBlockN keys, kv head, batch): K and V stay in
//                    shared memory, dK and dV in registers across every query head of the group
//                    (GQA: summed without per-query-head copies) and every query tile that sees
//                    these keys; P is recomputed from Q, K and the saved LSE; dQ is accumulated in
//                    fp32 in the workspace with atomics (8-byte vector atomics on sm90); the next
//                    step's Q, dO, LSE and D stream in through cp.async during a step (two
//                    buffers; one, refilled during the dQ product, at d = 192 / 256);
//   bwd_postprocess  dQ fp32 -> the input type, into the caller's dq.
//
// Head dims above 128: dK and dV of a warp's 16 keys would cost d fp32 registers a thread on
// top of Sᵀ and dPᵀ, so each key tile runs as kSplitD = 2 blocks, each owning half of the head
// dim's columns of dK, dV and dQ. Both recompute Sᵀ and dPᵀ over the full head dim, which
// costs 7/5 of the unsplit FLOPs (two of the five GEMMs twice).
//
// Deterministic mode (p.deterministic): the blocks of one kv head add into a dQ row block in
// key-tile order. Block nb waits until a semaphore per (split, query head, batch, query tile)
// counts the key tiles before it that touch the query tile, adds, then increments it. The
// wait depends only on lower block indices, which the hardware dispatches first, so it always
// ends; a spin limit traps instead of hanging if that ever fails.
//
// Warp w of the main kernel owns keys 16w .. 16w + 15 of the tile, so the transposed products
// come out in registers in the layout the next mma wants (mma.cuh: the C layout of two n-tiles is
// the A layout of one k-step):
//   Sᵀ_w  = K_w Qᵀ      A: K (ldmatrix, a_lane)        B: Q as Kᵀ is in the forward (bt_lane)
//   dPᵀ_w = V_w dOᵀ     A: V                            B: dO likewise
//   dV_w += Pᵀ_w dO     A: Pᵀ from registers            B: dO through ldmatrix.trans (as V in P·V)
//   dK_w += dSᵀ_w Q     A: dSᵀ from registers           B: Q through ldmatrix.trans
//   dQ   += dS K        dS has query rows: warps exchange it through shared memory (dSᵀ stored
//                       row = key), and each warp then takes 16 query rows (and, with 8 warps,
//                       half of the columns): A is dS read from dSᵀ with ldmatrix.trans at
//                       bt_lane offsets, B is K through ldmatrix.trans.
// with P = exp(logit - LSE), dS = P ∘ (dP - D), and the chain rule through softcap and the
// softmax scale folded into dS before it is rounded to 16 bits (dK and dQ then need no scaling):
// dS = P ∘ (scale dP - scale D), one FFMA with scale D precomputed by the preprocess. (FA2 rounds
// the unscaled dS and scales dK and dQ at the end; that cost this kernel 1.03x the 3x-naive
// bound on one fp16 dQ case of the test grid, and saves no instruction over the FFMA.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "api/params.h"
#include "common/dtype.h"
#include "common/mask.h"
#include "common/philox.h"
#include "cuda/bwd_sm80.h"  // kBwdBlockM
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // load_tile(_full), a_lane, bt_lane, exp2_fast, kLog2e
#include "cuda/kernels/sm80/tile_ranges.h"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm80 {

template <int kHeadDim_, typename Tag_, bool kDropout_ = false>
struct BwdTraits {
  using Tag = Tag_;
  static constexpr int kHeadDim = kHeadDim_;
  // The keep-mask's Philox words cost registers and instructions inside the step: a separate
  // kernel, so that calls without dropout pay for none of it.
  static constexpr bool kDropout = kDropout_;
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "instantiated head dims: 32..256");
  // dK and dV of a warp's 16 keys cost 2 kAccD / 4 fp32 registers a thread: above d = 128 each
  // key tile is split into two blocks of half the columns (header comment).
  static constexpr int kSplitD = kHeadDim > 128 ? 2 : 1;
  static constexpr int kAccD = kHeadDim / kSplitD;
  static_assert(kAccD % 16 == 0, "column halves are whole mma n-tile pairs");
  // Warp w owns keys 16 w .. 16 w + 15, so a block of kWarps warps covers kBlockN = 16 kWarps
  // keys, and every step of kBlockM = 64 queries costs kBlockM x kAccD dQ atomics and one Q /
  // dO tile load whatever kBlockN is: 8 warps (128 keys) halve both per FLOP against 4. With 8
  // warps dQ's columns split into two groups of whole n-tile pairs, which the half-widths of
  // d = 160 / 224 (80 / 112 columns) do not allow: those keep 4 warps.
  static constexpr int kWarps = kAccD % 32 == 0 ? 8 : 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * kWarps;  // keys per block
  static constexpr int kBlockM = 64;           // queries per step
  // Q / dO / LSE / D buffers: two (the next step loads during the whole step) unless 128 wide
  // keys leave no room for the second (d = 192 / 256); one buffer is refilled once the step's
  // dK / dV products have read it, during the dQ product.
  static constexpr int kQBuffers = kWarps == 8 && kHeadDim > 128 ? 1 : 2;
  // Step order after the element-wise pass: dQ (product and reductions) before the dK / dV
  // products, so that the reductions drain to L2 during the MMAs, with two buffers above
  // d = 64 (d = 128 +1-2%; the next step's first instruction had waited on their registers).
  // At d <= 64 the dK / dV products are too short to hide them and dQ first lost ~5%; with one
  // buffer the dK / dV products must read Q and dO before the buffer is refilled during dQ.
  static constexpr bool kDqFirst = kQBuffers == 2 && kHeadDim > 64;
  // dQ (kBlockM x kAccD) of a step: kBlockM / 16 row groups of 16; with 8 warps each row group
  // is split into two column groups.
  static constexpr int kDqColGroups = kWarps / (kBlockM / 16);
  static constexpr int kDqCols = kAccD / kDqColGroups;
  static_assert(kDqCols % 16 == 0, "dQ column groups are whole mma n-tile pairs");
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;  // Q and dO, two buffers each
  using STile = SwizzledTile<kBlockN, kBlockM>;   // dSᵀ: row = key, column = query
  static constexpr int kSmemBytes =
      2 * (2 * KvTile::kElems + 2 * kQBuffers * QTile::kElems + STile::kElems) +
      2 * kQBuffers * kBlockM * 4;
};

// The workspace as the kernels see it (layout: bwd_sm80.h, bwd_workspace_bytes): the fp32 dQ
// accumulator [heads_q][rows][kHeadDim], the deterministic mode's semaphores
// [kSplitD][heads_q][batch][m_blocks], then scale · D and LSE · log2(e) [heads_q][rows] each.
// Rows: acc_row. Each sequence has kBwdBlockM spare rows after its own, so that the main
// kernel's dQ reductions for a partial last query tile need no row test: the rows past the
// sequence take dS = 0 rows (their Q, dO, D are zero-filled) and are never read.
struct BwdWorkspace {
  float* dq_acc;
  int* sem;
  float* dsum;  // softmax scale · D
  float* lse2;  // the saved LSE · log2 e: P = exp2(s · scale · log2 e - lse2), one FFMA
  int64_t rows;  // rows of one head: total_q + batch * kBwdBlockM
  int m_blocks;  // query tiles of the longest sequence
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
  return (p.varlen() ? sq.q_start : b * p.seqlen_q) + b * kBwdBlockM;
}

// scale · rowsum(dO ∘ O) and LSE · log2(e) per row, in the workspace's row order: one warp per
// row; grid (ceil(seqlen_q / kWarps), heads_q, batch).
template <typename Tag, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) bwd_preprocess(const __grid_constant__ Params p,
                                                              BwdWorkspace ws) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = int64_t(blockIdx.x) * kWarps + warp, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq(b);
  if (i >= sq.len_q) return;
  const uint16_t* o = p.out.at<const uint16_t>(b, sq.q_start + i, h);
  const uint16_t* dout = p.dout.at<const uint16_t>(b, sq.q_start + i, h);
  float sum = 0.f;
  for (int c = lane; c < p.head_dim; c += 32) sum += load_float<Tag>(o + c) * load_float<Tag>(dout + c);
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (lane == 0) {
    const int64_t row = h * ws.rows + acc_row(p, b, sq) + i;
    ws.dsum[row] = sum * p.softmax_scale;
    ws.lse2[row] = p.lse.at(b, h, sq.q_start + i) * kLog2e;
  }
}

// dq = dQ accumulator in the input type: one thread per element pair; grid as the preprocess.
template <typename Tag, int kHeadDimPad, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) bwd_postprocess(const __grid_constant__ Params p,
                                                               BwdWorkspace ws) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = int64_t(blockIdx.x) * kWarps + warp, h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq(b);
  if (i >= sq.len_q) return;
  const float* acc = ws.dq_acc + (h * ws.rows + acc_row(p, b, sq) + i) * kHeadDimPad;
  uint16_t* dq = p.dq.at<uint16_t>(b, sq.q_start + i, h);
  for (int c = 2 * lane; c < p.head_dim; c += 64)
    *reinterpret_cast<uint32_t*>(dq + c) = pack2<Tag>(acc[c], acc[c + 1]);
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

// dQ rows 16 rg .. 16 rg + 15 of the step, columns kC0 + kCg kDqCols + [0, kDqCols), += dS K
// (A: dS read from dSᵀ with ldmatrix.trans at bt_lane offsets, B: K through ldmatrix.trans).
// kCg is a template argument so that every fragment offset stays a compile-time lane offset.
template <class T, int kC0, int kCg>
__device__ __forceinline__ void dq_gemm(float (&dq)[T::kDqCols / 8][4], uint32_t adS, uint32_t aK,
                                        const typename T::STile::LaneOffsets& s_bt,
                                        const typename T::KvTile::LaneOffsets& kv_a, int rg) {
#pragma unroll
  for (int nd = 0; nd < T::kDqCols / 8; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[nd][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4_trans(a, adS + T::STile::frag_offset(s_bt, kk * 16, rg * 16));
#pragma unroll
    for (int ndp = 0; ndp < T::kDqCols / 16; ++ndp) {
      uint32_t bk[4];
      ldmatrix_x4_trans(bk, aK + T::KvTile::frag_offset(kv_a, kk * 16,
                                                        kC0 + kCg * T::kDqCols + ndp * 16));
      mma_m16n8k16<typename T::Tag>(dq[2 * ndp], a, {bk[0], bk[1]});
      mma_m16n8k16<typename T::Tag>(dq[2 * ndp + 1], a, {bk[2], bk[3]});
    }
  }
}

// P and dS of one step in place: st <- P (P ∘ [kept] with dropout), dpt <- dS =
// P ∘ (scale dP - scale D) with the softcap derivative (dsum holds scale · D).
// Element e of tile nt: key kr = 16 warp + g + 8 (e / 2), query qc = 8 nt + 2t + e % 2 of the
// step; the mask and the ALiBi distance in 32-bit tile coordinates (StepWindow, host-tested in
// tests/test_tile_ranges.cpp). With dropout the forward's P·V saw P ∘ keep (keep = 0 or
// 1 / (1 - p)), so dS = P ∘ (dP ∘ keep - D) and dV takes P ∘ [kept], scaled by 1 / (1 - p) in
// fp32 at the end (as the forward does, so that no scaled P is rounded to 16 bits).
// kMasked / kTransform false: the step has no masked element / no logit transform, decided at
// compile time (a runtime test inside the unrolled loop cost a branch and its reconvergence per
// element); true: masked / transform, also tested at run time, for the dropout kernels, whose
// Philox code in four copies spilled up to 1.7 KB.
template <class T, bool kMasked, bool kTransform>
__device__ __forceinline__ void bwd_pointwise(float (&st)[T::kBlockM / 8][4],
                                              float (&dpt)[T::kBlockM / 8][4], const float* lse2,
                                              const float* dsum, float scale,
                                              const Logit<float>& logit, const StepWindow& win,
                                              const DropoutStream& drop, uint32_t bh, int64_t m0,
                                              int64_t n0, int warp, int g, int t, bool masked,
                                              bool transform) {
  const float scale_log2 = scale * kLog2e;
  const float inv_softcap = kTransform && logit.softcap > 0.f ? 1.f / logit.softcap : 0.f;
#pragma unroll
  for (int nt = 0; nt < T::kBlockM / 8; ++nt) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * nt + 2 * t);
    const float2 dd = *reinterpret_cast<const float2*>(dsum + 8 * nt + 2 * t);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int kr = warp * 16 + g + 8 * (e / 2), qc = 8 * nt + 2 * t + (e & 1);
      const float lse_e = e & 1 ? l2.y : l2.x, d_e = e & 1 ? dd.y : dd.x;
      float pr, dx = 1.f;
      if (kTransform && transform) {
        float x = st[nt][e] * scale;
        if (logit.softcap > 0.f) {
          const float th = tanhf(x * inv_softcap);
          x = logit.softcap * th;
          dx = 1.f - th * th;
        }
        x -= logit.alibi_slope * float(win.alibi_distance(kr, qc));
        pr = exp2_fast(fmaf(x, kLog2e, -lse_e));
      } else {
        pr = exp2_fast(fmaf(st[nt][e], scale_log2, -lse_e));
      }
      if constexpr (kMasked) {
        if (masked && !win.visible(kr, qc)) pr = 0.f;
      }
      float dp = dpt[nt][e], pk = pr;
      if constexpr (T::kDropout) {
        const bool kept = drop.keep(bh, uint32_t(m0 + qc), uint32_t(n0 + kr));
        dp = kept ? dp * drop.keep_scale : 0.f;
        pk = kept ? pr : 0.f;
      }
      st[nt][e] = pk;
      const float ds = pr * fmaf(dp, scale, -d_e);
      dpt[nt][e] = kTransform ? ds * dx : ds;  // dx = 1 unless softcap
    }
  }
}

// One block: key tile nb, columns [kC0, kC0 + kAccD) of dK, dV and dQ (the whole head dim when
// kSplitD = 1). Its steps walk (query head of the group, query tile) pairs; the Q, dO, LSE and D
// of step s + 1 stream into the other buffer while step s computes.
template <class T, int kSplit>
__device__ __forceinline__ void bwd_block(const Params& p, const BwdWorkspace& ws, int nb,
                                          uint16_t* smem) {
  using Tag = typename T::Tag;
  using KvTile = typename T::KvTile;
  using QTile = typename T::QTile;
  using STile = typename T::STile;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN, kM = T::kBlockM, kAccD = T::kAccD;
  constexpr int kC0 = kSplit * kAccD;
  constexpr int kNtS = kM / 8;     // n-tiles of Sᵀ (queries)
  constexpr int kNtD = kAccD / 8;  // n-tiles of dK / dV along this block's columns
  uint16_t* sK = smem;
  uint16_t* sV = sK + KvTile::kElems;
  constexpr int kBufs = T::kQBuffers;
  uint16_t* sQ = sV + KvTile::kElems;         // [kBufs][QTile]
  uint16_t* sdO = sQ + kBufs * QTile::kElems;  // [kBufs][QTile]
  uint16_t* sdS = sdO + kBufs * QTile::kElems;
  float* sLse = reinterpret_cast<float*>(sdS + STile::kElems);  // [kBufs][kM], LSE · log2 e
  float* sD = sLse + kBufs * kM;                                  // [kBufs][kM]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq(b);
  const int64_t n0 = int64_t(nb) * kN;
  if (n0 >= sq.len_k) return;
  const int d = int(p.head_dim);
  const int64_t keys = sq.len_k - n0 < kN ? sq.len_k - n0 : kN;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  int m_begin, m_end;  // query tiles that see a key of this tile
  key_tile_rows<T>(vis, sq.len_q, sq.len_k, nb, &m_begin, &m_end);
  const int m_steps = m_end - m_begin;
  const int group = int(p.group());
  const int steps = m_steps * group;  // (query head, query tile) pairs, head-major
  const int64_t acc0 = acc_row(p, b, sq);
  DropoutStream drop{};
  if constexpr (T::kDropout) drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const bool deterministic = p.deterministic;

  // Q, dO, LSE and D of the step (query head head of the group, query tile mb) into buffer buf.
  // Rows past the sequence arrive as zeros: their P is exp(0 - 0) = 1, but with dO = 0, Q = 0
  // and D = 0 they add nothing to dV, dK or dS, and their dQ is never written.
  auto load_step = [&](int head, int mb, int buf) {
    const int64_t hq = hk * group + head;
    const int64_t m0 = int64_t(mb) * kM;
    const int64_t rows = sq.len_q - m0 < kM ? sq.len_q - m0 : kM;
    const uint16_t* q = p.q.at<const uint16_t>(b, sq.q_start + m0, hq);
    const uint16_t* dout = p.dout.at<const uint16_t>(b, sq.q_start + m0, hq);
    auto load_partial = [&] {
      load_tile<QTile, T::kThreads>(sQ + buf * QTile::kElems, q, p.q.stride_s, rows, d, tid);
      load_tile<QTile, T::kThreads>(sdO + buf * QTile::kElems, dout, p.dout.stride_s, rows, d,
                                    tid);
    };
    if constexpr (TileCopy<QTile, T::kThreads>::kEven) {
      if (rows == kM && d == kD) {
        load_tile_full<QTile, T::kThreads>(sQ + buf * QTile::kElems, q, p.q.stride_s, tid);
        load_tile_full<QTile, T::kThreads>(sdO + buf * QTile::kElems, dout, p.dout.stride_s, tid);
      } else {
        load_partial();
      }
    } else {
      load_partial();
    }
    if (tid < kM) {
      const bool ok = tid < rows;
      const int64_t row = ok ? m0 + tid : 0;
      cp_async_4(smem_addr(sLse + buf * kM + tid), ws.lse2 + hq * ws.rows + acc0 + row, ok);
      cp_async_4(smem_addr(sD + buf * kM + tid), ws.dsum + hq * ws.rows + acc0 + row, ok);
    }
  };

  load_tile<KvTile, T::kThreads>(sK, p.k.at<const uint16_t>(b, sq.k_start + n0, hk), p.k.stride_s,
                                 keys, d, tid);
  load_tile<KvTile, T::kThreads>(sV, p.v.at<const uint16_t>(b, sq.k_start + n0, hk), p.v.stride_s,
                                 keys, d, tid);
  if (steps > 0) load_step(0, m_begin, 0);
  cp_async_commit();

  float dk[kNtD][4], dv[kNtD][4];
#pragma unroll
  for (int nd = 0; nd < kNtD; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nd][e] = dv[nd][e] = 0.f;

  const auto kv_a = a_lane<KvTile>(lane);   // K / V as A (Sᵀ, dPᵀ) and, transposed, as B (dQ)
  const auto q_bt = bt_lane<QTile>(lane);   // Q / dO as B of Sᵀ / dPᵀ
  const auto q_a = a_lane<QTile>(lane);     // Q / dO transposed as B of dK / dV
  const auto s_bt = bt_lane<STile>(lane);   // dS from dSᵀ, transposed, as A of dQ
  const uint32_t aK0 = smem_addr(sK), aV0 = smem_addr(sV), adS0 = smem_addr(sdS);
  const float scale = p.softmax_scale;
  // dQ: warp w takes query rows 16 (w % kRowGroups) .. + 15 and column group w / kRowGroups.
  constexpr int kRowGroups = kM / 16;
  const int rg = warp % kRowGroups, cg = warp / kRowGroups;

  // Step s is (query head head of the group, query tile mb), head-major; (nhead, nmb) is step
  // s + 1, counted rather than divided out of s (an integer division per step).
  int head = 0, mb = m_begin;
  for (int s = 0; s < steps; ++s) {
    const int buf = kBufs == 2 ? s & 1 : 0;
    const bool wrap = mb + 1 == m_end;
    const int nhead = wrap ? head + 1 : head, nmb = wrap ? m_begin : mb + 1;
    const int64_t hq = hk * group + head;
    const int64_t m0 = int64_t(mb) * kM;
    const int64_t rows = sq.len_q - m0 < kM ? sq.len_q - m0 : kM;
    cp_async_wait<0>();
    // Step s landed for every thread, and every warp has finished step s - 1 (whichever of its
    // dQ and dK / dV products came last), so no one reads buffer buf ^ 1 (step s - 1's Q / dO,
    // LSE, D) or dSᵀ any more.
    __syncthreads();
    if constexpr (kBufs == 2) {
      if (s + 1 < steps) load_step(nhead, nmb, buf ^ 1);
      cp_async_commit();
    }
    // The buffers' base addresses pass through an opaque move each step: with one buffer they
    // are loop-invariant, and ptxas then hoisted every fragment address of the unrolled step
    // out of the loop into registers of their own (d = 256: 1040 bytes of spills, against 272
    // with the per-step base).
    const uint32_t aK = opaque(aK0), aV = opaque(aV0), adS = opaque(adS0);
    const uint32_t aQ = opaque(smem_addr(sQ + buf * QTile::kElems));
    const uint32_t adO = opaque(smem_addr(sdO + buf * QTile::kElems));
    const float* lse = sLse + buf * kM;
    const float* dsum = sD + buf * kM;
    const Logit<float> logit{p.softcap, p.alibi_slope(b, hq), sq.len_k - sq.len_q};
    const bool transform = logit.softcap > 0.f || logit.alibi_slope != 0.f;

    // Sᵀ_w = K_w Qᵀ and dPᵀ_w = V_w dOᵀ, both (16 keys) x (kM queries), over the full head dim.
    float st[kNtS][4], dpt[kNtS][4];
#pragma unroll
    for (int nt = 0; nt < kNtS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] = dpt[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t ak[4], av[4];
      ldmatrix_x4(ak, aK + KvTile::frag_offset(kv_a, warp * 16, ks * 16));
      ldmatrix_x4(av, aV + KvTile::frag_offset(kv_a, warp * 16, ks * 16));
#pragma unroll
      for (int ntp = 0; ntp < kM / 16; ++ntp) {
        uint32_t bq[4], bo[4];
        ldmatrix_x4(bq, aQ + QTile::frag_offset(q_bt, ntp * 16, ks * 16));
        ldmatrix_x4(bo, adO + QTile::frag_offset(q_bt, ntp * 16, ks * 16));
        mma_m16n8k16<Tag>(st[2 * ntp], ak, {bq[0], bq[1]});
        mma_m16n8k16<Tag>(st[2 * ntp + 1], ak, {bq[2], bq[3]});
        mma_m16n8k16<Tag>(dpt[2 * ntp], av, {bo[0], bo[1]});
        mma_m16n8k16<Tag>(dpt[2 * ntp + 1], av, {bo[2], bo[3]});
      }
    }

    const bool masked = n0 + kN > sq.len_k || !vis.block_unmasked(m0, m0 + rows, n0, n0 + kN);
    const StepWindow win(vis, m0, n0, sq.len_k, kN);
    const uint32_t bh = uint32_t(b * p.heads_q + hq);  // the dropout stream's matrix
    auto pointwise = [&](auto kMasked, auto kTransform) {
      bwd_pointwise<T, decltype(kMasked)::value, decltype(kTransform)::value>(
          st, dpt, lse, dsum, scale, logit, win, drop, bh, m0, n0, warp, g, t, masked, transform);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if constexpr (T::kDropout)
      pointwise(Yes{}, Yes{});
    else if (masked)
      transform ? pointwise(Yes{}, Yes{}) : pointwise(Yes{}, No{});
    else
      transform ? pointwise(No{}, Yes{}) : pointwise(No{}, No{});

    // P and dS in the A-fragment layout (k-step kk covers queries 16 kk .. 16 kk + 15), and dSᵀ
    // to shared memory for dQ: this thread's rows g, g + 8 of the warp's keys.
    uint32_t pa[kM / 16][4], da[kM / 16][4];
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk) {
      pack_a<Tag>(st[2 * kk], st[2 * kk + 1], pa[kk]);
      pack_a<Tag>(dpt[2 * kk], dpt[2 * kk + 1], da[kk]);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2)
          *reinterpret_cast<uint32_t*>(
              sdS + STile::offset(warp * 16 + g + 8 * r, 16 * kk + 8 * h2 + 2 * t)) =
              da[kk][2 * h2 + r];
    }

    // dV_w += Pᵀ_w dO, dK_w += dSᵀ_w Q over this block's columns.
    auto dkdv_gemm = [&] {
#pragma unroll
      for (int kk = 0; kk < kM / 16; ++kk)
#pragma unroll
        for (int ndp = 0; ndp < kAccD / 16; ++ndp) {
          uint32_t bo[4], bq[4];
          ldmatrix_x4_trans(bo, adO + QTile::frag_offset(q_a, kk * 16, kC0 + ndp * 16));
          ldmatrix_x4_trans(bq, aQ + QTile::frag_offset(q_a, kk * 16, kC0 + ndp * 16));
          mma_m16n8k16<Tag>(dv[2 * ndp], pa[kk], {bo[0], bo[1]});
          mma_m16n8k16<Tag>(dv[2 * ndp + 1], pa[kk], {bo[2], bo[3]});
          mma_m16n8k16<Tag>(dk[2 * ndp], da[kk], {bq[0], bq[1]});
          mma_m16n8k16<Tag>(dk[2 * ndp + 1], da[kk], {bq[2], bq[3]});
        }
    };
    // dQ of the step from dSᵀ in shared memory, added to the accumulator.
    auto dq_phase = [&] {
      float dq[T::kDqCols / 8][4];
      if constexpr (T::kDqColGroups == 1) {
        dq_gemm<T, kC0, 0>(dq, adS, aK, s_bt, kv_a, rg);
      } else {
        static_assert(T::kDqColGroups == 2, "one or two dQ column groups");
        if (cg == 0)
          dq_gemm<T, kC0, 0>(dq, adS, aK, s_bt, kv_a, rg);
        else
          dq_gemm<T, kC0, 1>(dq, adS, aK, s_bt, kv_a, rg);
      }
      int* sem = nullptr;
      if (deterministic) {
        // Wait for the key tiles before this one that add into this query tile.
        sem = ws.sem + ((int64_t(kSplit) * p.heads_q + hq) * p.batch + b) * ws.m_blocks + mb;
        int before = 0;
        for (int j0 = 0; j0 < nb; j0 += T::kThreads) {
          const int j = j0 + tid;
          int jb = 0, je = 0;
          if (j < nb) key_tile_rows<T>(vis, sq.len_q, sq.len_k, j, &jb, &je);
          before += __syncthreads_count(jb <= mb && mb < je);
        }
        if (tid == 0) {
          long long spins = 0;
          while (load_acquire(sem) < before) {
            __nanosleep(kSpinSleepNs);
            if (++spins > kSpinLimit) __trap();  // a lower block never ran: not a hang
          }
        }
        __syncthreads();
      }
      // This thread's dQ elements: rows i0 and i0 + 8, columns col0 + 8 nd + 2t (+1), every
      // address an immediate offset from acc, with no test: rows past the sequence land in its
      // spare rows (BwdWorkspace), columns past d (a padded head dim) in the accumulator's padded
      // columns (K's padded columns are zeros in shared memory); the postprocess reads neither.
      // (A test per row compiled to a branch around each reduction, ~4 instructions each.)
      const int col0 = kC0 + cg * T::kDqCols;
      float* acc = ws.dq_acc + (hq * ws.rows + acc0 + m0 + rg * 16 + g) * kD + col0 + 2 * t;
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int nd = 0; nd < T::kDqCols / 8; ++nd)
          red_add2(acc + r * 8 * kD + 8 * nd, dq[nd][2 * r], dq[nd][2 * r + 1]);
      if (deterministic) {
        __threadfence();
        __syncthreads();
        if (tid == 0) add_release(sem, 1);
      }
    };
    if constexpr (T::kDqFirst) {  // BwdTraits: why this order, and where
      __syncthreads();  // dSᵀ complete
      dq_phase();
      dkdv_gemm();
    } else {
      dkdv_gemm();
      __syncthreads();  // dSᵀ complete; with one buffer, Q, dO, LSE and D of this step are read
      if constexpr (kBufs == 1) {
        if (s + 1 < steps) load_step(nhead, nmb, 0);
        cp_async_commit();
      }
      dq_phase();
    }
    head = nhead;
    mb = nmb;
  }

  cp_async_wait<0>();  // a tile no query sees ran no step: its K / V copies may be in flight

  // dK, dV of the warp's keys (zero for keys no query sees).
  const float dv_scale = T::kDropout ? drop.keep_scale : 1.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = n0 + warp * 16 + g + 8 * r;
    if (j >= sq.len_k) continue;
    uint16_t* dkp = p.dk.at<uint16_t>(b, sq.k_start + j, hk) + kC0;
    uint16_t* dvp = p.dv.at<uint16_t>(b, sq.k_start + j, hk) + kC0;
#pragma unroll
    for (int nd = 0; nd < kNtD; ++nd) {
      const int c = 8 * nd + 2 * t;
      if (kC0 + c < d) {
        *reinterpret_cast<uint32_t*>(dkp + c) = pack2<Tag>(dk[nd][2 * r], dk[nd][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(dvp + c) =
            pack2<Tag>(dv[nd][2 * r] * dv_scale, dv[nd][2 * r + 1] * dv_scale);
      }
    }
  }
}

// Grid (key tiles x kSplitD, kv heads, batch); block x = key tile nb, column half x % kSplitD.
template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) bwd_kernel(const __grid_constant__ Params p,
                                                             BwdWorkspace ws) {
  extern __shared__ __align__(128) uint16_t smem[];
  if constexpr (T::kSplitD == 1) {
    bwd_block<T, 0>(p, ws, int(blockIdx.x), smem);
  } else {
    static_assert(T::kSplitD == 2, "two column halves");
    if (blockIdx.x % 2 == 0)
      bwd_block<T, 0>(p, ws, int(blockIdx.x / 2), smem);
    else
      bwd_block<T, 1>(p, ws, int(blockIdx.x / 2), smem);
  }
}

}  // namespace fa::cuda::sm80
