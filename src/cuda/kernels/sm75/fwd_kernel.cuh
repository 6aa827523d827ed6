// Forward attention on Turing (cuda-sm75): the FlashAttention-2 algorithm of the sm80 family with
// Turing's instruction stream - mma.sync.m16n8k8 (each k16 step of the sm80 warp GEMMs issued as
// two, Fp16K8Tag), ldmatrix, and K / V staged through registers instead of cp.async.
//
// One thread block = (kBlockM query rows, query head, batch entry); warp w owns the kMTiles m16
// tiles of rows [w R, (w + 1) R), R = 16 kMTiles. The warp-level parts - Q·Kᵀ and P·V in units,
// logit transform and mask, online softmax with lazy rescaling, dropout, the per-warp mask
// ranges - are the sm80 family's (sm80/fwd_tile.cuh, cuda/tile/), instantiated with this family's
// traits (fwd_traits.h); what differs is the copy pipeline and the epilogue's conversion.
//
// Pipeline, one K and one V buffer in shared memory, the next tile in registers (tile_stage.cuh):
//   V(j) global loads issued          S = Q·K(j)ᵀ (reads sK)        V(j) -> sV
//   K(j+1) global loads issued        barrier A: sV is V(j); every warp is done with sK
//   mask / softmax / dropout, O += P·V(j) (reads sV)                K(j+1) -> sK
//   barrier B: sK is K(j+1); every warp is done with sV
// so each global load has a GEMM to hide under, and a tile costs two barriers (FlashAttention-2's
// split scheme, with registers in place of the second stage). The wide dims stage a tile in two
// halves (T::kStageParts): the first half is stored and the second's loads issued halfway through
// the GEMM. O is normalised once at the end;
// LSE is written per row.
//
// Not yet run on a GPU (docs/cuda-kernels.md): compiled for sm_75 and compute_75 with ptxas's
// figures in the family's section.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/mask.h"
#include "core/params.h"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm75/fwd_traits.h"
#include "cuda/kernels/sm75/tile_stage.cuh"
#include "cuda/kernels/sm80/fwd_tile.cuh"
#include "cuda/tile/dropout.cuh"

namespace fa::cuda::sm75 {

using sm80::FwdState;
using sm80::kNegInf;
using sm80::PackedP;
using sm80::PvGemm;
using sm80::QkGemm;
using sm80::RowKeys;
using sm80::WarpTiles;

// S = Q·Kᵀ with mid(i) issued before the i-th of kParts equal shares of the k-steps, 0 < i <
// kParts (a staged copy's part i - 1 stored, part i loaded). QkGemm::run's order otherwise.
template <class T, int kParts, class Mid>
__device__ __forceinline__ void qk_with(const QkGemm<T>& qk,
                                        float (&s)[T::kMTiles][T::kBlockN / 8][4], Mid&& mid) {
  constexpr int kSteps = QkGemm<T>::kSteps;
  QkGemm<T>::zero(s);
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
    for (int i = 1; i < kParts; ++i)
      if (ks == i * kSteps / kParts) mid(i);
    uint32_t a[T::kMTiles][4];
    qk.load_q(a, ks);
#pragma unroll
    for (int ntp = 0; ntp < QkGemm<T>::kPairs; ++ntp) qk.unit(s, a, ks, ntp);
  }
}

// O += P·V with mid(i) issued before the i-th of kParts equal shares of the units.
template <class T, int kParts, class Mid>
__device__ __forceinline__ void pv_with(const PvGemm<T>& pv,
                                        float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                        const PackedP<T>& pp, Mid&& mid) {
#pragma unroll
  for (int u = 0; u < PvGemm<T>::kUnits; ++u) {
#pragma unroll
    for (int i = 1; i < kParts; ++i)
      if (u == i * PvGemm<T>::kUnits / kParts) mid(i);
    pv.unit(o, pp, u);
  }
}

// Transform / mask, softmax, dropout and P·V of one finished S (kMask: the tile straddles a
// mask or sequence boundary for this warp), in one straight-line region so that the exp2 of P
// can interleave with the P·V mma.
template <class T, bool kMask, class Mid>
__device__ __forceinline__ void finish_tile(const Params& p, const RowKeys& rk,
                                            const Logit<float>& logit, bool transform,
                                            float scale_log2, int n0,
                                            float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                            const PvGemm<T>& pv,
                                            float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                            FwdState<T::kMTiles>& st, const FwdDropout& dr,
                                            int lane, Mid&& mid) {
  sm80::transform_mask<T, kMask>(p, rk, logit, transform, n0, s, lane);
  sm80::softmax_update<T>(s, o, st, scale_log2);
  if constexpr (T::kDropout) apply_dropout<T::kMTiles, T::kBlockN>(dr, n0, s, lane);
  PackedP<T> pp;
  sm80::pack_p<T>(s, pp);
  pv_with<T, T::kStageParts>(pv, o, pp, mid);
}

// The epilogue: row sums finished over the quad, O normalised (and scaled by 1 / (1 - p) under
// dropout), LSE written, and O staged as fp16 in this warp's own rows of the Q tile - rows no
// other warp reads - so that it leaves in 16-byte row-contiguous stores.
template <class T>
__device__ __forceinline__ void store_output(const Params& p, int64_t b, int64_t h,
                                             const SeqInfo& sq, int64_t m0, bool transform,
                                             float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                             const FwdState<T::kMTiles>& st,
                                             const FwdDropout& dr, uint16_t* sQ, int warp,
                                             int lane) {
  using QTile = typename T::QTile;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = st.l[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool empty = l == 0.f;  // no visible key: O = 0, LSE = -inf
      float inv = empty ? 0.f : 1.f / l;
      if constexpr (T::kDropout) inv *= dr.drop.keep_scale;
      const int local = warp * T::kRowsPerWarp + 16 * mt + 8 * r + g;  // row in the block
#pragma unroll
      for (int nd = 0; nd < T::kHeadDim / 8; ++nd)
        *reinterpret_cast<uint32_t*>(sQ + QTile::offset(local, nd * 8 + 2 * t)) =
            pack2<typename T::Tag>(o[mt][nd][2 * r] * inv, o[mt][nd][2 * r + 1] * inv);
      const int64_t row = m0 + local;
      // LSE = max logit + ln(l) in natural units (the max scaled unless logits already are).
      const float m_nat = transform ? st.m[mt][r] : st.m[mt][r] * p.softmax_scale;
      if (t == 0 && row < sq.len_q && p.lse.data != nullptr)
        p.lse.at(b, h, sq.q_start + row) = empty ? kNegInf : m_nat + logf(l);
    }
  __syncwarp();
  constexpr int kChunksPerRow = T::kHeadDim / 8;  // 16-byte chunks
  constexpr int kChunks = T::kRowsPerWarp * kChunksPerRow;
  const int chunks_used = int(p.head_dim) / 8;    // head_dim may be below the instantiation's
#pragma unroll
  for (int c = lane; c < kChunks; c += 32) {
    const int local = warp * T::kRowsPerWarp + c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int64_t row = m0 + local;
    if (row < sq.len_q && chunk < chunks_used)
      *reinterpret_cast<uint4*>(p.out.at<uint16_t>(b, sq.q_start + row, h) + chunk * 8) =
          *reinterpret_cast<const uint4*>(sQ + QTile::offset(local, chunk * 8));
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    fwd_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  constexpr int kM = T::kMTiles;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + QTile::kElems;
  uint16_t* sV = sK + KvTile::kElems;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq(b);
  const int64_t m0 = sm80::fwd_block_m0<T>();  // long causal blocks first
  if (m0 >= sq.len_q) return;
  const int64_t hk = h / p.group();
  const int64_t rows = sq.len_q - m0 < T::kBlockM ? sq.len_q - m0 : T::kBlockM;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  const Logit<float> logit{p.softcap, p.alibi_slope(b, h), sq.len_k - sq.len_q};
  // The logit path as in the sm80 family: softcap, ALiBi, and a scale <= 0 (the running max
  // must be over scaled scores; a zero factor in exp2 would make the mask's -inf a NaN).
  const bool transform = p.softcap > 0.f || logit.alibi_slope != 0.f || p.softmax_scale <= 0.f;
  const float scale_log2 = transform ? kLog2e : p.softmax_scale * kLog2e;
  const int d = int(p.head_dim);

  const uint16_t* q = p.q.at<const uint16_t>(b, sq.q_start + m0, h);
  const uint16_t* k = p.k.at<const uint16_t>(b, sq.k_start, hk);
  const uint16_t* v = p.v.at<const uint16_t>(b, sq.k_start, hk);
  const int64_t key_begin = vis.key_begin(m0, sq.len_k), key_end = vis.key_end(m0 + rows, sq.len_k);
  const int n_begin = int(key_begin / T::kBlockN);  // key tiles [n_begin, n_end)
  const int n_end = key_begin < key_end ? int((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;

  constexpr int kParts = T::kStageParts, kPartRows = T::kBlockN / kParts;
  StagedTile<KvTile, T::kThreads, kPartRows> kv;  // the next K or V tile (part), in registers
  auto load_kv = [&](const uint16_t* base, int64_t stride, int nb, int part) {
    const int64_t n0 = int64_t(nb) * T::kBlockN + part * kPartRows;
    kv.load(base + n0 * stride, stride, sq.len_k - n0, d, tid);
  };
  auto store_kv = [&](uint16_t* tile, int part) { kv.store(tile, tid, part * kPartRows); };
  // A block without key tiles (every row masked) loads nothing: its epilogue writes O = 0 and
  // LSE = -inf. n_begin and n_end depend only on the block, so every barrier below is uniform.
  if (n_begin < n_end) {
    {
      StagedTile<QTile, T::kThreads> qs;
      qs.load(q, p.q.stride_s, rows, d, tid);
      qs.store(sQ, tid);
    }
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      load_kv(k, p.k.stride_s, n_begin, part);
      store_kv(sK, part);
    }
    __syncthreads();  // Q and K(n_begin) in shared memory
  }

  float o[kM][T::kHeadDim / 8][4];
  zero_acc(o);
  FwdState<kM> st;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    st.m[mt][0] = st.m[mt][1] = kNegInf;
    st.l[mt][0] = st.l[mt][1] = 0.f;
  }
  const auto q_lane = sm80::a_lane<QTile>(lane);
  const auto k_lane = sm80::bt_lane<KvTile>(lane);
  const auto v_lane = sm80::a_lane<KvTile>(lane);
  const int64_t row_g = sm80::fwd_thread_row0<T>();  // this thread's first row
  const RowKeys rk(vis, row_g, sq.len_k);
  FwdDropout dr{};
  if constexpr (T::kDropout)
    dr = FwdDropout{DropoutStream::make(p.seed, p.offset, p.dropout_p),
                    uint32_t(b * p.heads_q + h), int(row_g)};
  const WarpTiles warp_tiles(vis, m0 + warp * T::kRowsPerWarp, T::kRowsPerWarp, sq.len_k,
                             T::kBlockN);
  const QkGemm<T> qk{smem_addr(sQ), smem_addr(sK), q_lane, k_lane, warp};
  const PvGemm<T> pv{smem_addr(sV), v_lane};

  for (int nb = n_begin; nb < n_end; ++nb) {
    // Idle: no row of this warp sees a key of the tile; it still copies and meets the barriers.
    const bool live = nb >= warp_tiles.active_begin && nb < warp_tiles.active_end;
    const bool masked = nb < warp_tiles.full_begin || nb >= warp_tiles.full_end;
    const bool next = nb + 1 < n_end;
    // Inside a copy of several parts: part i - 1 stored, part i's loads issued.
    auto mid_v = [&](int i) {
      store_kv(sV, i - 1);
      load_kv(v, p.v.stride_s, nb, i);
    };
    auto mid_k = [&](int i) {
      if (next) {
        store_kv(sK, i - 1);
        load_kv(k, p.k.stride_s, nb + 1, i);
      }
    };
    load_kv(v, p.v.stride_s, nb, 0);
    float s[kM][T::kBlockN / 8][4];  // S, then P: (kRowsPerWarp, kBlockN) fp32 per warp
    if (live) {
      qk_with<T, kParts>(qk, s, mid_v);
    } else {
#pragma unroll
      for (int i = 1; i < kParts; ++i) mid_v(i);
    }
    store_kv(sV, kParts - 1);  // every warp finished P·V(nb - 1) before the last barrier B
    if (next) load_kv(k, p.k.stride_s, nb + 1, 0);
    __syncthreads();  // A: V(nb) visible; every warp is done reading K(nb)
    const int n0 = nb * T::kBlockN;
    if (!live) {
#pragma unroll
      for (int i = 1; i < kParts; ++i) mid_k(i);
    } else if (masked)
      finish_tile<T, true>(p, rk, logit, transform, scale_log2, n0, s, pv, o, st, dr, lane, mid_k);
    else
      finish_tile<T, false>(p, rk, logit, transform, scale_log2, n0, s, pv, o, st, dr, lane, mid_k);
    if (next) store_kv(sK, kParts - 1);
    __syncthreads();  // B: K(nb + 1) visible; every warp is done reading V(nb)
  }
  // The staging below overwrites Q rows that other lanes of this warp read with ldmatrix in the
  // last Q·Kᵀ: order those reads before the writes (racecheck reports the warp-synchronous
  // assumption otherwise).
  __syncwarp();
  store_output<T>(p, b, h, sq, m0, transform, o, st, dr, sQ, warp, lane);
#endif
}

}  // namespace fa::cuda::sm75
