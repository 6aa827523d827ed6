// Backward attention on Turing (cuda-sm75): the sm80 family's FlashAttention-2 backward
// (sm80/bwd_kernel.cuh: the algorithm, the five products, the element-wise pass, the dQ
// reductions, the deterministic mode) in Turing's instruction stream - mma.sync.m16n8k8 (each
// k16 step issued as two, Fp16K8Tag), ldmatrix, and copies staged through registers instead of
// cp.async / TMA - with tiles sized for 64 KB of shared memory (bwd_traits.h).
//
// Three kernels a call, as in the sm80 family: the sm80 preprocess (scale · D, LSE · log2 e, the
// dQ accumulator cleared; plain loads and stores), this file's main kernel, and the sm80
// postprocess instantiated with this family's traits (the accumulator's tile order is this
// kernel's). The step's parts are the sm80 family's (sm80/bwd_step.cuh) on this family's traits;
// what differs is the block below: one buffer of everything, no split tail, no programmatic
// launch, no rotated start, no attention bias.
//
// A block = (key tile of kBlockN keys, kv head, batch entry), 4 warps. K and V are loaded once;
// each step (query head of the GQA group, 64-query tile) then:
//   barrier: every warp has left the previous step (its Q, dO, LSE, D, Pᵀ, dSᵀ are free)
//   Q, dO global -> registers -> shared memory; LSE · log2 e and scale · D into shared memory
//   barrier
//   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ; P and dS (element-wise); Pᵀ, dSᵀ -> shared memory
//   barrier
//   dV += Pᵀ dO, dK += dSᵀ Q (registers); dQ = dS K, added into the fp32 accumulator
// The copies do not overlap the products (a correctness-first pipeline: Turing's one block of 4
// warps an SM at 48.5 / 56.5 KB hides little of their latency; see docs/cuda-kernels.md).
//
// Not yet run on a GPU: compiled for sm_75 and compute_75, ptxas's figures in docs/cuda-kernels.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/mask.h"
#include "core/params.h"
#include "core/philox.h"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/memory.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm75/bwd_traits.h"
#include "cuda/kernels/sm75/tile_stage.cuh"
#include "cuda/kernels/sm80/bwd_epilogue.cuh"
#include "cuda/kernels/sm80/bwd_prepost.cuh"  // acc_row
#include "cuda/kernels/sm80/bwd_step.cuh"
#include "cuda/kernels/sm80/tile_ranges.h"

namespace fa::cuda::sm75 {

using sm80::BwdWarpTiles;
using sm80::BwdWorkspace;

// Key tile nb of kv head hk, batch entry b: every step of it, then dK / dV out.
template <class T>
__device__ __forceinline__ void bwd_block(const Params& p, const BwdWorkspace& ws, int nb,
                                          int64_t hk, int64_t b, uint16_t* smem) {
  using KvTile = typename T::KvTile;
  using QTile = typename T::QTile;
  using STile = typename T::STile;
  using W = BwdWarpTiles<T>;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN, kM = T::kBlockM;
  uint16_t* sK = smem;
  uint16_t* sV = sK + KvTile::kElems;
  uint16_t* sQ = sV + KvTile::kElems;
  uint16_t* sdO = sQ + QTile::kElems;
  uint16_t* sP = sdO + QTile::kElems;
  uint16_t* sdS = sP + STile::kElems;
  float* sLse = reinterpret_cast<float*>(sdS + STile::kElems);  // [kM] LSE · log2 e
  float* sD = sLse + kM;                                        // [kM] scale · D

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  const int64_t n0 = int64_t(nb) * kN;
  if (n0 >= sq.len_k) return;
  const int d = int(p.head_dim);
  const int64_t keys = sq.len_k - n0 < kN ? sq.len_k - n0 : kN;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  int m_begin, m_end;  // query tiles that see a key of this tile
  sm80::key_tile_rows<T>(vis, sq.len_q, sq.len_k, nb, &m_begin, &m_end);
  const int m_steps = m_end - m_begin;
  const sm80::KeyTileUnmasked unmasked(vis, sq.len_q, sq.len_k, nb, kN, kM);
  const int group = int(p.group());
  const int steps = m_steps * group;  // (query head, query tile) pairs, head-major
  const int64_t acc0 = sm80::acc_row(p, b, sq);
  DropoutStream drop{};
  if constexpr (T::kDropout) drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const bool deterministic = p.deterministic;

  {  // K and V, once; rows past the sequence and columns past d arrive as zeros
    StagedTile<KvTile, T::kThreads> kv;
    kv.load(p.k.at<const uint16_t>(b, sq.k_start + n0, hk), p.k.stride_s, keys, d, tid);
    kv.store(sK, tid);
    kv.load(p.v.at<const uint16_t>(b, sq.k_start + n0, hk), p.v.stride_s, keys, d, tid);
    kv.store(sV, tid);
  }

  typename W::KvAcc dk, dv;
  zero_acc(dk);
  zero_acc(dv);

  const auto kv_a = sm80::a_lane<KvTile>(lane);  // K / V as A (Sᵀ, dPᵀ)
  const auto q_bt = sm80::bt_lane<QTile>(lane);  // Q / dO as B of Sᵀ / dPᵀ
  const auto s_a = sm80::a_lane<STile>(lane);    // Pᵀ / dSᵀ as A of dV / dK
  const uint32_t aK0 = smem_addr(sK), aV0 = smem_addr(sV), aQ0 = smem_addr(sQ);
  const uint32_t adO0 = smem_addr(sdO), aP0 = smem_addr(sP), adS0 = smem_addr(sdS);
  const float scale = p.softmax_scale;
  const W w{g,
            t,
            (warp % T::kSWarpsN) * T::kSKeys,
            (warp / T::kSWarpsN) * T::kSQueries,
            (warp % T::kKvWarpsN) * T::kKvKeys,
            (warp / T::kKvWarpsN) * T::kKvCols,
            (warp % T::kDqWarpsM) * T::kDqRows,
            (warp / T::kDqWarpsM) * T::kDqCols};
  const typename W::KvCols kv_cols(lane, false, w.kv_col0);
  const typename W::DqRows dq_rows(lane, true, w.dq_row0);
  const typename W::DqCols dq_cols(lane, false, w.dq_col0);
  const sm80::KvLanes<T> kv_lanes{s_a, kv_cols};
  // This thread's Pᵀ / dSᵀ stores (32-bit: stmatrix is sm90), key s_key0 + g, queries
  // s_query0 + 8 nt + 2t (store_p_ds adds whole 8-row groups).
  typename W::StOffsets st_offs;
#pragma unroll
  for (int nt = 0; nt < W::kSNt; ++nt)
    st_offs.v[nt] = 2 * uint32_t(STile::offset(w.s_key0 + g, w.s_query0 + 8 * nt + 2 * t));

  // Step s is (query head `head` of the group, query tile mb), head-major, counted.
  int head = 0, mb = m_begin;
  for (int s = 0; s < steps; ++s) {
    const int64_t hq = hk * group + head;
    const int64_t m0 = int64_t(mb) * kM;
    const int64_t rows = sq.len_q - m0 < kM ? sq.len_q - m0 : kM;
    // Every warp has left step s - 1 (and, at s = 0, stored its K / V chunks).
    __syncthreads();
    {
      // Q and dO, rows past the sequence as zeros: their P is exp2(0 - 0) = 1, but with dO = 0,
      // Q = 0 and D = 0 they add nothing to dV, dK or dS, and their dQ rows are never read.
      StagedTile<QTile, T::kThreads> qs;
      qs.load(p.q.at<const uint16_t>(b, sq.q_start + m0, hq), p.q.stride_s, rows, d, tid);
      StagedTile<QTile, T::kThreads> dos;
      dos.load(p.dout.at<const uint16_t>(b, sq.q_start + m0, hq), p.dout.stride_s, rows, d, tid);
      if (tid < kM) {
        const bool ok = tid < rows;
        const int64_t r = hq * ws.rows + acc0 + (ok ? m0 + tid : 0);
        sLse[tid] = ok ? ws.lse2[r] : 0.f;
        sD[tid] = ok ? ws.dsum[r] : 0.f;
      }
      qs.store(sQ, tid);
      dos.store(sdO, tid);
    }
    __syncthreads();  // the step's Q, dO, LSE and D in shared memory

    // The base addresses pass through an opaque move each step, as in the sm80 family (ptxas
    // otherwise hoists every fragment address of the unrolled step out of the loop).
    const uint32_t aK = opaque(aK0), aV = opaque(aV0), aP = opaque(aP0), adS = opaque(adS0);
    const uint32_t aQ = opaque(aQ0), adO = opaque(adO0);
    const Logit<float> logit{p.softcap, p.alibi_slope(b, hq), sq.len_k - sq.len_q};
    const bool transform = logit.softcap > 0.f || logit.alibi_slope != 0.f;
    const sm80::StepBias<false> sb{};

    typename W::SAcc st, dpt;
    uint32_t kept_bits = 0;
    if constexpr (T::kDropout)
      kept_bits = sm80::keep_bits<T>(drop, uint32_t(b * p.heads_q + hq), m0, n0, w.s_key0,
                                     w.s_query0, w.g, w.t);
    sm80::s_product<T>(w, kv_a, q_bt, st, aK, aQ);
    sm80::s_product<T>(w, kv_a, q_bt, dpt, aV, adO);
    const bool masked = mb < unmasked.begin || mb >= unmasked.end;
    sm80::step_pointwise<T>(w, st, dpt,
                            sm80::StepSoftmax{sLse, sD, scale, logit, drop.keep_scale, kept_bits,
                                              masked, transform},
                            vis, m0, n0, sq.len_k, sb);
    sm80::store_p_ds<T>(st_offs, st, dpt, aP, adS);
    __syncthreads();  // Pᵀ and dSᵀ complete

    sm80::kv_products<T>(w, kv_lanes, dv, dk, aP, adS, adO, aQ);

    // dQ of the step = dS K, then (deterministic mode) this query tile's turn, the reductions
    // and the turn handed on. A partial last query tile adds its rows past the sequence (dS = 0
    // there) into the sequence's spare rows; columns past d hold K's zero columns' products.
    // The postprocess reads neither.
    using DqL = typename T::DqLayout;
    float* acc = ws.dq_acc + (hq * ws.rows + acc0 + m0) * kD + DqL::pair_offset(warp, lane, 0);
    typename W::DqAcc dq;
    sm80::dq_product<T>(dq_rows, dq_cols, dq, adS, aK);
    int* sem = nullptr;
    if (deterministic) {
      sem = ws.sem + (hq * p.batch + b) * ws.m_blocks + mb;
      const int n_tiles = int((sq.len_k + kN - 1) / kN);
      sm80::dq_turn_wait<T>(sem, nb, n_tiles, [&](int j) {
        int jb = 0, je = 0;
        if (j < n_tiles) sm80::key_tile_rows<T>(vis, sq.len_q, sq.len_k, j, &jb, &je);
        return jb <= mb && mb < je;
      });
    }
    sm80::reduce_dq<T>(acc, dq);
    if (deterministic) sm80::dq_turn_pass(sem);

    const bool wrap = mb + 1 == m_end;
    mb = wrap ? m_begin : mb + 1;
    head = wrap ? head + 1 : head;
  }

  __syncthreads();  // every warp's last reads of K and V are done (K / V stored, if no step)
  const float dv_scale = T::kDropout ? drop.keep_scale : 1.f;
  sm80::store_dk_dv<T>(p, w, dk, dv, dv_scale, sm80::KvGrads{b, sq.k_start + n0, hk, keys, d},
                       sK, sV);
}

// Block (x, y, z) takes key tile x of kv head y, batch entry z; in deterministic mode the key
// tiles are counted from the last, so that a block waits only on blocks dispatched before it
// (sm80/bwd_kernel.cuh has the argument).
template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    bwd_kernel(const __grid_constant__ Params p, BwdWorkspace ws) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  extern __shared__ __align__(128) uint16_t smem[];
  const int nb = int(blockIdx.x);
  bwd_block<T>(p, ws, p.deterministic ? int(gridDim.x) - 1 - nb : nb, blockIdx.y, blockIdx.z,
               smem);
#endif
}

}  // namespace fa::cuda::sm75
