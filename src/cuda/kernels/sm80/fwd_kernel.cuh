// Forward attention, FlashAttention-2 algorithm, for the sm80 family (Ampere, Ada, and Hopper
// until its native kernel lands).
//
// One thread block = (block of kBlockM query rows, query head, batch entry); warp w owns the
// kMTiles m16 tiles of query rows [w R, (w + 1) R), R = 16 kMTiles. Per K/V tile of kBlockN keys:
//   S = Q·Kᵀ (mma.m16n8k16, fp32) -> logits (softcap / bias / ALiBi when on; mask on edge tiles)
//   -> online softmax in fp32 with exp2 and the log2(e)-premultiplied scale
//   -> P converted to 16-bit in registers (C layout == A layout)   ->   O += P·V
// K/V tiles stream through one of three cp.async pipelines (fwd_traits.h, enum Pipeline); the
// warp-level parts (loads, GEMM units, mask, softmax) are in fwd_tile.cuh. O is normalised once
// at the end (deferred normalisation); LSE is written per row.
//
// History (H200, bf16, d = 128, s = 16k, ratio to PyTorch's FA2 measured in the same run):
//   v1 8 warps x 1 m-tile, Q fragments in registers                          0.58
//   v2 4 warps x 2 m-tiles: every K/V fragment serves both m-tiles            0.78
//   v3 per-lane precomputed swizzled offsets, 32-bit tile-relative masking,
//      LSE / rescale from differences (exact for long ALiBi rows)            0.72 (d = 64: 0.79)
//   v4 tile loads step one precomputed source address (no spills in the loop) 1.02 (d = 64: 1.01)
//   v5 per-warp mask ranges, split pipeline with 64 keys above d = 128,
//      Q·K(j+1)ᵀ interleaved with P(j)·V(j) at d = 128                        1.03 (d = 256: 1.02)
// Run: scripts/gpu-check.sh OUTDIR --full-bench; verdicts and limits in docs/performance.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "core/mask.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm80/fwd_tile.cuh"
#include "cuda/kernels/sm80/fwd_traits.h"

namespace fa::cuda::sm80 {

// One K/V tile for one warp, computed start to finish (two-stage and split pipelines): S, then
// `between` (the split pipeline's barrier and next-K load; nothing in the two-stage one), then
// transform / mask, softmax and P·V. Softmax and P·V stay in one straight-line region per mask
// variant so that the scheduler can interleave the exp2 of P with the P·V mma (calling P·V
// after the masked / unmasked branches joined cost 6% at d = 64 and 256).
template <class T, bool kMask, class Between>
__device__ __forceinline__ void tile_step(const Params& p, const RowKeys& rk,
                                          const Logit<float>& logit, bool transform,
                                          float scale_log2, int n0, const QkGemm<T>& qk,
                                          const PvGemm<T>& pv,
                                          float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                          FwdState<T::kMTiles>& st, const FwdDropout& dr,
                                          int lane, Between&& between) {
  float s[T::kMTiles][T::kBlockN / 8][4];  // S, then P: (kRowsPerWarp, kBlockN) fp32 per warp
  qk.run(s);
  between();
  transform_mask<T, kMask>(p, rk, logit, transform, n0, s, lane);
  softmax_update<T>(s, o, st, scale_log2);
  if constexpr (T::kDropout) apply_dropout<T::kMTiles, T::kBlockN>(dr, n0, s, lane);
  PackedP<T> pp;
  pack_p<T>(s, pp);
  pv.run(o, pp);
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm) fwd_kernel(const __grid_constant__ Params p) {
  using Tag = typename T::Tag;
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  constexpr int kM = T::kMTiles;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + QTile::kElems;
  uint16_t* sV = sK + T::kStages * KvTile::kElems;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq(b);
  const int64_t m0 = fwd_block_m0<T>();  // long causal blocks first
  if (m0 >= sq.len_q) return;
  const int64_t hk = h / p.group();
  const int64_t rows = sq.len_q - m0 < T::kBlockM ? sq.len_q - m0 : T::kBlockM;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  const Logit<float> logit{p.softcap, p.alibi_slope(b, h), sq.len_k - sq.len_q};
  // A negative scale takes the logit path too: its running max must be over the scaled scores
  // (the largest logit sits at the smallest raw score); so does a zero scale (a factor of 0 in
  // exp2 would turn the mask's -inf into NaN), and an attention bias (added to scaled scores;
  // only the T::kBias kernels get one). The run-time bias test stays in the other kernels:
  // without it ptxas allocates the dropout kernels at d 192 / 224 differently on sm_90a.
  const bool transform = T::kBias || p.softcap > 0.f || logit.alibi_slope != 0.f ||
                         p.softmax_scale <= 0.f || p.bias.kind != Params::Bias::Kind::None;
  // Raw scores are scaled inside exp2; logits (softcap / ALiBi applied, or scaled) already are.
  const float scale_log2 = transform ? kLog2e : p.softmax_scale * kLog2e;
  const int d = int(p.head_dim);

  const uint16_t* q = p.q.at<const uint16_t>(b, sq.q_start + m0, h);
  const uint16_t* k = p.k.at<const uint16_t>(b, sq.k_start, hk);
  const uint16_t* v = p.v.at<const uint16_t>(b, sq.k_start, hk);
  const int64_t key_begin = vis.key_begin(m0, sq.len_k), key_end = vis.key_end(m0 + rows, sq.len_k);
  const int n_begin = int(key_begin / T::kBlockN);  // key tiles [n_begin, n_end)
  const int n_end = key_begin < key_end ? int((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;

  auto load_k = [&](int nb, int stage) {
    const int64_t n0 = nb * T::kBlockN;
    load_tile<KvTile, T::kThreads>(sK + stage * KvTile::kElems, k + n0 * p.k.stride_s,
                                   p.k.stride_s, sq.len_k - n0, d, tid);
  };
  auto load_v = [&](int nb, int stage) {
    const int64_t n0 = nb * T::kBlockN;
    load_tile<KvTile, T::kThreads>(sV + stage * KvTile::kElems, v + n0 * p.v.stride_s,
                                   p.v.stride_s, sq.len_k - n0, d, tid);
  };
  // Q and the first K tile form the first group; the first V tile joins them except in the
  // split pipeline (loaded inside its loop). The overlapped pipeline also starts tile 2.
  // A block without key tiles (every row masked) loads nothing: its epilogue writes O = 0 and
  // LSE = -inf through the Q tile, which no copy may still be landing in. With T::kQAlways the
  // block copies Q in any case and such a block waits for it at a barrier before the epilogue.
  if constexpr (T::kQAlways) load_tile<QTile, T::kThreads>(sQ, q, p.q.stride_s, rows, d, tid);
  if (n_begin < n_end) {
    if constexpr (!T::kQAlways) load_tile<QTile, T::kThreads>(sQ, q, p.q.stride_s, rows, d, tid);
    load_k(n_begin, 0);
    if constexpr (T::kPipeline != Pipeline::kSplit) load_v(n_begin, 0);
  }
  cp_async_commit();
  if constexpr (T::kPipeline == Pipeline::kOverlap) {
    if (n_begin + 1 < n_end) {
      load_k(n_begin + 1, 1);
      load_v(n_begin + 1, 1);
    }
    cp_async_commit();
  }

  float o[kM][T::kHeadDim / 8][4];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int nd = 0; nd < T::kHeadDim / 8; ++nd)
      o[mt][nd][0] = o[mt][nd][1] = o[mt][nd][2] = o[mt][nd][3] = 0.f;
  FwdState<kM> st;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    st.m[mt][0] = st.m[mt][1] = kNegInf;
    st.l[mt][0] = st.l[mt][1] = 0.f;
  }
  const auto q_lane = a_lane<QTile>(lane);
  const auto k_lane = bt_lane<KvTile>(lane);
  const auto v_lane = a_lane<KvTile>(lane);
  // This thread's first row; the others are row_g + 8 and + 16 mt.
  const int64_t row_g = fwd_thread_row0<T>();
  const RowKeys rk(vis, row_g, sq.len_k);
  FwdDropout dr{};
  if constexpr (T::kDropout)
    dr = FwdDropout{DropoutStream::make(p.seed, p.offset, p.dropout_p),
                    uint32_t(b * p.heads_q + h), int(row_g)};
  const WarpTiles warp_tiles(vis, m0 + warp * T::kRowsPerWarp, T::kRowsPerWarp, sq.len_k,
                             T::kBlockN);

  auto tile_idle = [&](int nb) { return nb < warp_tiles.active_begin || nb >= warp_tiles.active_end; };
  auto tile_masked = [&](int nb) { return nb < warp_tiles.full_begin || nb >= warp_tiles.full_end; };
  auto k_stage = [&](int stage) { return smem_addr(sK + stage * KvTile::kElems); };
  auto v_stage = [&](int stage) { return smem_addr(sV + stage * KvTile::kElems); };
  // Transform, mask and softmax of a finished S, leaving P in 16 bits for the next P·V.
  auto finish_scores = [&](float (&s)[kM][T::kBlockN / 8][4], int nb, PackedP<T>& pp) {
    if (tile_masked(nb))
      transform_mask<T, true>(p, rk, logit, transform, nb * T::kBlockN, s, lane);
    else
      transform_mask<T, false>(p, rk, logit, transform, nb * T::kBlockN, s, lane);
    softmax_update<T>(s, o, st, scale_log2);
    if constexpr (T::kDropout) apply_dropout<T::kMTiles, T::kBlockN>(dr, nb * T::kBlockN, s, lane);
    pack_p<T>(s, pp);
  };

  if constexpr (T::kPipeline == Pipeline::kOverlap) {
    // Tile nb's P·V is issued together with tile nb + 1's Q·Kᵀ (qk_pv_fused), so at iteration
    // nb the warps read V(nb) and K(nb + 1) while tile nb + 2 streams into the third stage.
    if (n_begin < n_end) {
      cp_async_wait<1>();  // Q and tile n_begin landed (tile n_begin + 1 may still be in flight)
      __syncthreads();
    }
    PackedP<T> pp;
    bool have_p = false;  // pp holds this warp's P of tile nb
    float s[kM][T::kBlockN / 8][4];
    if (n_begin < n_end && !tile_idle(n_begin)) {
      QkGemm<T>{smem_addr(sQ), k_stage(0), q_lane, k_lane, warp}.run(s);
      finish_scores(s, n_begin, pp);
      have_p = true;
    }
    int stage = 0;  // stage of tile nb
    for (int nb = n_begin; nb < n_end; ++nb) {
      const int next = stage == T::kStages - 1 ? 0 : stage + 1;
      const int after = next == T::kStages - 1 ? 0 : next + 1;
      cp_async_wait<0>();
      __syncthreads();  // tile nb + 1 landed; everyone is done with iteration nb - 1, whose
                        // stage (V(nb - 1)) is now free for tile nb + 2
      if (nb + 2 < n_end) {
        load_k(nb + 2, after);
        load_v(nb + 2, after);
      }
      cp_async_commit();
      const bool next_live = nb + 1 < n_end && !tile_idle(nb + 1);
      const QkGemm<T> qk{smem_addr(sQ), k_stage(next), q_lane, k_lane, warp};
      const PvGemm<T> pv{v_stage(stage), v_lane};
      if (have_p && next_live)
        qk_pv_fused<T>(qk, pv, s, o, pp);
      else if (have_p)
        pv.run(o, pp);
      else if (next_live)
        qk.run(s);
      if (next_live) finish_scores(s, nb + 1, pp);
      have_p = next_live;
      stage = next;
    }
  } else {
    for (int nb = n_begin; nb < n_end; ++nb) {
      constexpr bool kSplit = T::kPipeline == Pipeline::kSplit;
      const int stage = kSplit ? 0 : (nb - n_begin) % T::kStages;
      cp_async_wait<0>();
      // Two-stage: tile nb (K and V) landed for everyone and everyone is done with tile nb - 1,
      // so tile nb + 1 streams into the other stage during this step. Split: K nb landed and
      // every warp finished P·V of tile nb - 1, so V nb streams in during Q·Kᵀ.
      __syncthreads();
      if constexpr (kSplit) {
        load_v(nb, 0);
      } else if (nb + 1 < n_end) {
        load_k(nb + 1, stage ^ 1);
        load_v(nb + 1, stage ^ 1);
      }
      cp_async_commit();
      auto between = [&] {
        if constexpr (kSplit) {
          cp_async_wait<0>();
          __syncthreads();  // V nb landed; every warp is done reading K nb: K nb + 1 streams in
          if (nb + 1 < n_end) load_k(nb + 1, 0);
          cp_async_commit();
        }
      };
      const QkGemm<T> qk{smem_addr(sQ), k_stage(stage), q_lane, k_lane, warp};
      const PvGemm<T> pv{v_stage(stage), v_lane};
      const int n0 = nb * T::kBlockN;
      if (tile_idle(nb))
        between();
      else if (tile_masked(nb))
        tile_step<T, true>(p, rk, logit, transform, scale_log2, n0, qk, pv, o, st, dr, lane,
                           between);
      else
        tile_step<T, false>(p, rk, logit, transform, scale_log2, n0, qk, pv, o, st, dr, lane,
                            between);
    }
  }
  cp_async_wait<0>();
  // Q is copied by every thread of the block, not by each warp for its own rows, and the wait
  // above covers only this thread's copies: a barrier of the loop ordered all of them before
  // the staging below (a block without key tiles copied no Q, or with T::kQAlways waits here;
  // n_begin and n_end depend only on the block, so the barrier is uniform).
  if constexpr (T::kQAlways)
    if (n_begin == n_end) __syncthreads();
  // The staging below overwrites Q rows that other lanes of this warp read with ldmatrix in the
  // last Q·Kᵀ; order those reads before the writes explicitly (racecheck reports the warp-
  // synchronous assumption otherwise).
  __syncwarp();

  // Epilogue: finish the row sums over the quad, normalise, write LSE, and stage O (16-bit)
  // in this warp's own rows of the Q tile - rows no other warp reads - so that it leaves in
  // 16-byte, row-contiguous stores instead of 4-byte ones spread over 8 rows per instruction.
  // An fp32 out (16-bit inputs: the unrounded result, e.g. ring attention's partials) is a
  // run-time choice of this epilogue only, so that it adds no kernel: its 8-byte stores go
  // straight from the fragments (a row's 4 lanes fill 32 contiguous bytes per column block).
  const bool out_f32 = p.out.dtype == DType::F32;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = st.l[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool empty = l == 0.f;  // no visible key: O = 0, LSE = -inf
      float inv = empty ? 0.f : 1.f / l;
      if constexpr (T::kDropout) inv *= dr.drop.keep_scale;  // kept P's 1 / (1 - p)
      const int local = warp * T::kRowsPerWarp + 16 * mt + 8 * r + g;  // row in the block
      const int64_t row = m0 + local;
      if (out_f32) {
        float* dst = p.out.at<float>(b, sq.q_start + row, h);
#pragma unroll
        for (int nd = 0; nd < T::kHeadDim / 8; ++nd)
          if (row < sq.len_q && nd * 8 + 2 * t < d)
            *reinterpret_cast<float2*>(dst + nd * 8 + 2 * t) =
                make_float2(o[mt][nd][2 * r] * inv, o[mt][nd][2 * r + 1] * inv);
      } else {
#pragma unroll
        for (int nd = 0; nd < T::kHeadDim / 8; ++nd)
          *reinterpret_cast<uint32_t*>(sQ + QTile::offset(local, nd * 8 + 2 * t)) =
              pack2<Tag>(o[mt][nd][2 * r] * inv, o[mt][nd][2 * r + 1] * inv);
      }
      // LSE = max logit + ln(l), the max in natural units (scale applied unless logits already
      // are): exact where going through log2 units would lose ~|m| * 2^-23 twice.
      const float m_nat = transform ? st.m[mt][r] : st.m[mt][r] * p.softmax_scale;
      if (t == 0 && row < sq.len_q && p.lse.data != nullptr)  // NULL: the caller wants none
        p.lse.at(b, h, sq.q_start + row) = empty ? kNegInf : m_nat + logf(l);
    }
  __syncwarp();
  constexpr int kChunksPerRow = T::kHeadDim / 8;  // 16-byte chunks
  constexpr int kChunks = T::kRowsPerWarp * kChunksPerRow;
  const int chunks_used = d / 8;                  // head_dim may be below the instantiation's
#pragma unroll
  for (int c = lane; c < kChunks; c += 32) {
    const int local = warp * T::kRowsPerWarp + c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int64_t row = m0 + local;
    if (!out_f32 && row < sq.len_q && chunk < chunks_used)
      *reinterpret_cast<uint4*>(p.out.at<uint16_t>(b, sq.q_start + row, h) + chunk * 8) =
          *reinterpret_cast<const uint4*>(sQ + QTile::offset(local, chunk * 8));
  }
}

}  // namespace fa::cuda::sm80
