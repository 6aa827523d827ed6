// Forward attention, FlashAttention-2 algorithm, for the sm80 family (Ampere, Ada, and Hopper
// until its native kernel lands).
//
// One thread block = (block of kBlockM query rows, query head, batch entry); warp w owns the
// kMTiles m16 tiles of query rows [w R, (w + 1) R), R = 16 kMTiles. Per K/V tile of kBlockN keys:
//   S = Q·Kᵀ (mma.m16n8k16, fp32)   ->   logits (softcap / ALiBi when on; mask on boundary tiles)
//   -> online softmax in fp32 with exp2 and the log2(e)-premultiplied scale
//   -> P converted to 16-bit in registers (C layout == A layout)   ->   O += P·V
// K/V tiles stream through a two-stage cp.async pipeline: tile j+1 loads while tile j computes.
// O is normalised once at the end (deferred normalisation); LSE is written per row.
//
// History (H200, bf16, d = 128, s = 16k, ratio to PyTorch's FA2 measured in the same run):
//   v1 8 warps x 1 m-tile, Q fragments in registers                          0.58
//   v2 4 warps x 2 m-tiles: every K/V fragment serves both m-tiles            0.78
//   v3 per-lane precomputed swizzled offsets, 32-bit tile-relative masking,
//      LSE / rescale from differences (exact for long ALiBi rows)            0.72 (d = 64: 0.79)
// Run: scripts/gpu-check.sh OUTDIR --full-bench; verdicts and limits in docs/performance.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "api/params.h"
#include "common/mask.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm80/fwd_traits.h"

namespace fa::cuda::sm80 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();
// Lazy rescaling threshold, log2 units: P may grow to 2^8 before O is rescaled (see tile_step).
constexpr float kRescaleLog2 = 8.f;

__device__ __forceinline__ float exp2_fast(float x) {  // ex2.approx: 2^-inf = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Global -> shared, 16-byte chunks: rows [0, rows_valid) and columns [0, cols_valid) copied,
// everything else of the tile zero-filled. The first kRowStep * kChunksPerRow threads cover
// kRowStep whole rows at a time, so each thread keeps one column and its chunks sit kRowStep
// rows apart: the 64-bit source address is formed once and advanced by a loop-invariant step
// (recomputing it per chunk cost ~10 instructions a chunk and, through the registers it held,
// the spills the d = 64 / 128 kernels had). Head dims whose chunk count per row does not divide
// the thread count (96, 160, 224) leave the remaining threads idle during the copy.
template <class Tile, int kThreads>
__device__ __forceinline__ void load_tile(uint16_t* smem, const uint16_t* gmem, int64_t row_stride,
                                          int64_t rows_valid, int cols_valid, int tid) {
  constexpr int kChunksPerRow = Tile::kColCount / Tile::kChunkElems;
  constexpr int kRowStep = kThreads / kChunksPerRow;  // rows copied per pass
  static_assert(kRowStep >= 1, "a tile row has more chunks than the block has threads");
  constexpr int kPasses = (Tile::kRowCount + kRowStep - 1) / kRowStep;
  if (kRowStep * kChunksPerRow != kThreads && tid >= kRowStep * kChunksPerRow) return;
  const int rows = int(rows_valid < Tile::kRowCount ? (rows_valid < 0 ? 0 : rows_valid)
                                                    : Tile::kRowCount);
  const int row = tid / kChunksPerRow, col = (tid % kChunksPerRow) * Tile::kChunkElems;
  const bool col_ok = col < cols_valid;
  const uint16_t* src = gmem + row * row_stride + col;
  const int64_t step = kRowStep * row_stride;
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = row + i * kRowStep;
    if (Tile::kRowCount % kRowStep != 0 && r >= Tile::kRowCount) break;
    const bool valid = col_ok && r < rows;
    cp_async_16(smem_addr(smem + Tile::offset(r, col)), valid ? src : gmem, valid);
    src += step;
  }
}

// ldmatrix.x4 lane roles. For a 16x16 A fragment at (row0, col0) of a row-major tile the four
// matrices are (rows +0, cols +0), (rows +8, cols +0), (rows +0, cols +8), (rows +8, cols +8):
// lane l addresses row (l % 8) + 8 ((l / 8) % 2), column 8 (l / 16). The same order gives Vᵀ
// fragments through ldmatrix.trans. For two n-tiles of Kᵀ (B fragments) at (n0, col0) the
// matrices are (rows n0, cols +0), (n0, +8), (n0 + 8, +0), (n0 + 8, +8): row (l % 8) + 8 (l / 16),
// column 8 ((l / 8) % 2).
template <class Tile>
__device__ __forceinline__ typename Tile::LaneOffsets a_lane(int lane) {
  return Tile::lane_offsets(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16));
}
template <class Tile>
__device__ __forceinline__ typename Tile::LaneOffsets bt_lane(int lane) {
  return Tile::lane_offsets(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2));
}

// Per thread: rows g and g + 8 of each of the warp's m-tiles.
template <int kMTiles>
struct FwdState {
  float m[kMTiles][2];  // running max of the (raw or logit) scores
  float l[kMTiles][2];  // this thread's partial row sums of exp2; reduced over the quad at the end
};

// The keys this thread's first row (row_g) sees, in 32-bit key coordinates, for the masked
// tiles and the ALiBi distance: the row's rows row_g + dr (dr = 16 mt + 8 r) see keys
// [begin + dr, min(end + dr, len_k)) on the diagonal diag + dr. 32 bits because the loop keeps
// these live: the 64-bit Visibility and row index cost ~8 registers, enough to spill.
// begin / end are clamped to [-kSlack, len_k + kSlack]: adding dr < kSlack to a clamped value
// stays on the same side of [0, len_k], so clamping never changes a visible range.
struct RowKeys {
  static constexpr int kSlack = 64;
  int begin, end, diag, len_k;

  __device__ RowKeys(const Visibility& vis, int64_t row_g, int64_t len_k64) {
    auto clamp = [&](int64_t x) {
      return int(x < -kSlack ? -kSlack : (x > len_k64 + kSlack ? len_k64 + kSlack : x));
    };
    diag = int(row_g + vis.offset);
    begin = vis.window_left < 0 ? -kSlack : clamp(row_g + vis.offset - vis.window_left);
    end = vis.window_right < 0 ? int(len_k64) + kSlack
                               : clamp(row_g + vis.offset + vis.window_right + 1);
    len_k = int(len_k64);
  }
};

// One warp's scores for one K/V tile: S = Q·Kᵀ, logit transform, and the mask (kMask: the tile
// straddles a mask or sequence boundary).
// Element e of s[mt][nt]: row row_g + 16 mt + 8 (e / 2), key n0 + 8 nt + 2t + e % 2.
template <class T, bool kMask>
__device__ __forceinline__ void scores(const Params& p, const RowKeys& rk,
                                       const Logit<float>& logit, bool transform, int n0,
                                       uint32_t sQ, uint32_t sK,
                                       const typename T::QTile::LaneOffsets& q_lane,
                                       const typename T::KvTile::LaneOffsets& k_lane,
                                       float (&s)[T::kMTiles][T::kBlockN / 8][4], int warp,
                                       int lane) {
  using Tag = typename T::Tag;
  constexpr int kM = T::kMTiles;
  constexpr int kNt = T::kBlockN / 8;  // n-tiles of S
  const int t = lane % 4;

  // S (kM x 16 rows, kBlockN) = Q Kᵀ; each K fragment serves every m-tile of the warp.
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < T::kHeadDim / 16; ++ks) {
    uint32_t a[kM][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
      ldmatrix_x4(a[mt], sQ + T::QTile::frag_offset(q_lane, warp * T::kRowsPerWarp + 16 * mt,
                                                     ks * 16));
#pragma unroll
    for (int nt = 0; nt < kNt; nt += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, sK + T::KvTile::frag_offset(k_lane, nt * 8, ks * 16));
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        mma_m16n8k16<Tag>(s[mt][nt], a[mt], {b[0], b[1]});
        mma_m16n8k16<Tag>(s[mt][nt + 1], a[mt], {b[2], b[3]});
      }
    }
  }

  // Logit transform and mask in 32-bit tile-relative coordinates: key n0 + c with
  // c = 8 nt + 2t + e % 2 (so c is a constant plus 2t), one diagonal / key range per row.
  if (transform) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int diag = rk.diag + 16 * mt + 8 * r - n0;  // the row's diagonal - n0
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float x = s[mt][nt][2 * r + e] * p.softmax_scale;
            if (logit.softcap > 0.f) x = logit.softcap * tanhf(x / logit.softcap);
            x -= logit.alibi_slope * fabsf(float(diag - (8 * nt + 2 * t + e)));
            s[mt][nt][2 * r + e] = x;
          }
      }
  }
  if constexpr (kMask) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Visible keys of this row, relative to n0 and clamped to the tile: [lo, hi).
        const int dr = 16 * mt + 8 * r;
        const int end = rk.end + dr < rk.len_k ? rk.end + dr : rk.len_k;
        const int lo = min(max(rk.begin + dr - n0, 0), T::kBlockN);
        const int hi = min(max(end - n0, 0), T::kBlockN);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = 8 * nt + 2 * t + e;
            if (c < lo || c >= hi) s[mt][nt][2 * r + e] = kNegInf;
          }
      }
  }
}

// Online softmax with lazy rescaling, turning S into P (fp32, not yet rounded) in place. Each
// row keeps a reference max m; P = 2^((s - m) c) with c = scale_log2. O and l are rescaled only
// when some row's tile max exceeds its m by more than kRescaleLog2 (then P <= 2^kRescaleLog2 =
// 256 stays far inside fp16 / bf16 range and fp32 accumulation), so once the maxima settle most
// tiles skip the d-wide rescale of O - which costs as many instructions as the tile's P·V mma
// at d = 128. The vote keeps it warp-uniform.
template <class T>
__device__ __forceinline__ void softmax_update(float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                               float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                               FwdState<T::kMTiles>& st, float scale_log2) {
  constexpr int kM = T::kMTiles;
  constexpr int kNt = T::kBlockN / 8;
  float tile_max[kM][2];
  bool need = false;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      tile_max[mt][r] = mx;
      // First visible key (m = -inf) or a max that grew too much; -inf - -inf is NaN: false.
      need |= (mx - st.m[mt][r]) * scale_log2 > kRescaleLog2;
    }
  if (__any_sync(0xffffffffu, need)) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(st.m[mt][r], tile_max[mt][r]);
        if (m_new == kNegInf) continue;  // nothing visible yet: O and l are still 0
        // Difference first, then scale: with |logits| ~ 1e3 (ALiBi over long rows) two rounded
        // products would each be ~1e-4 off, and the error would compound over the rescales.
        const float alpha = exp2_fast((st.m[mt][r] - m_new) * scale_log2);
        st.m[mt][r] = m_new;
        st.l[mt][r] *= alpha;
#pragma unroll
        for (int nd = 0; nd < T::kHeadDim / 8; ++nd) {
          o[mt][nd][2 * r] *= alpha;
          o[mt][nd][2 * r + 1] *= alpha;
        }
      }
  }
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_use = st.m[mt][r] == kNegInf ? 0.f : st.m[mt][r];  // exp -> 0, not NaN
      const float m_scaled = m_use * scale_log2;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        s[mt][nt][2 * r] = exp2_fast(fmaf(s[mt][nt][2 * r], scale_log2, -m_scaled));
        s[mt][nt][2 * r + 1] = exp2_fast(fmaf(s[mt][nt][2 * r + 1], scale_log2, -m_scaled));
        st.l[mt][r] += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
      }
    }
}

// The second half: O += P·V for one warp, P rounded to 16 bits in registers.
template <class T>
__device__ __forceinline__ void accumulate_pv(const float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                              uint32_t sV,
                                              const typename T::KvTile::LaneOffsets& v_lane,
                                              float (&o)[T::kMTiles][T::kHeadDim / 8][4]) {
  using Tag = typename T::Tag;
  constexpr int kM = T::kMTiles;
  // O += P V, P straight from registers: n-tiles 2kk, 2kk+1 of S are k-step kk's A fragment;
  // each V fragment serves every m-tile.
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
    uint32_t a[kM][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      a[mt][0] = pack2<Tag>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      a[mt][1] = pack2<Tag>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      a[mt][2] = pack2<Tag>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      a[mt][3] = pack2<Tag>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int nd = 0; nd < T::kHeadDim / 8; nd += 2) {
      uint32_t b[4];  // Vᵀ fragments via ldmatrix.trans: same quadrant order as an A fragment
      ldmatrix_x4_trans(b, sV + T::KvTile::frag_offset(v_lane, kk * 16, nd * 8));
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        mma_m16n8k16<Tag>(o[mt][nd], a[mt], {b[0], b[1]});
        mma_m16n8k16<Tag>(o[mt][nd + 1], a[mt], {b[2], b[3]});
      }
    }
  }
}

// Which key tiles a warp must compute, and which of those need no mask, classified once per
// block as tile-index ranges: per warp, not per block, because on a causal diagonal most warps'
// rows see a key tile entirely or not at all, so only one or two of the four take the masked
// path and the others run the unmasked one or skip the tile. The ranges are loop-invariant so
// that each tile's branch costs two integer compares (testing the mask per tile in 64-bit
// arithmetic sat on the loop's critical path, right after the barrier, and cost ~7% at d = 128).
// Padding rows past len_q widen the warp's row range, which only makes both tests conservative.
struct WarpTiles {
  // Tile indices fit 32 bits (validation caps seqlen_k far below 2^31 tiles); 64-bit copies
  // held for the whole loop pushed the d = 64 kernel into a spill.
  int active_begin, active_end;  // tiles holding a key some row of the warp sees
  int full_begin, full_end;      // tiles every row of the warp sees entirely (and < len_k)

  __device__ WarpTiles(const Visibility& vis, int64_t row0, int rows, int64_t len_k, int block_n) {
    // Rows see key ranges [begin(i), end(i)) with both bounds non-decreasing in i.
    const int64_t any_begin = vis.key_begin(row0, len_k);
    const int64_t any_end = vis.key_end(row0 + rows, len_k);
    const int64_t all_begin = vis.key_begin(row0 + rows - 1, len_k);
    const int64_t all_end = vis.key_end(row0 + 1, len_k);
    active_begin = int(any_begin / block_n);
    active_end = any_begin < any_end ? int((any_end + block_n - 1) / block_n) : active_begin;
    full_begin = int((all_begin + block_n - 1) / block_n);
    full_end = int(all_end / block_n);
  }
};

// One K/V tile for one warp: scores, then `between` (the split pipeline's barrier and next-K
// load; nothing in the two-stage one), then softmax and P·V. Softmax and P·V stay in one
// straight-line region per mask variant so that the scheduler can interleave the exp2 of P with
// the P·V mma (calling P·V after the masked / unmasked branches join cost 6% at d = 64 and 256).
template <class T, bool kMask, class Between>
__device__ __forceinline__ void tile_step(const Params& p, const RowKeys& rk,
                                          const Logit<float>& logit, bool transform,
                                          float scale_log2, int n0, uint32_t sQ, uint32_t sK,
                                          uint32_t sV,
                                          const typename T::QTile::LaneOffsets& q_lane,
                                          const typename T::KvTile::LaneOffsets& k_lane,
                                          const typename T::KvTile::LaneOffsets& v_lane,
                                          float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                          FwdState<T::kMTiles>& st, int warp, int lane,
                                          Between&& between) {
  float s[T::kMTiles][T::kBlockN / 8][4];  // S, then P: (kRowsPerWarp, kBlockN) fp32 per warp
  scores<T, kMask>(p, rk, logit, transform, n0, sQ, sK, q_lane, k_lane, s, warp, lane);
  between();
  softmax_update<T>(s, o, st, scale_log2);
  accumulate_pv<T>(s, sV, v_lane, o);
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
  const int64_t m_block = int64_t(gridDim.x) - 1 - blockIdx.x;  // long causal blocks first
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq(b);
  const int64_t m0 = m_block * T::kBlockM;
  if (m0 >= sq.len_q) return;
  const int64_t hk = h / p.group();
  const int64_t rows = sq.len_q - m0 < T::kBlockM ? sq.len_q - m0 : T::kBlockM;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  const Logit<float> logit{p.softcap, p.alibi_slope(b, h), sq.len_k - sq.len_q};
  const bool transform = p.softcap > 0.f || logit.alibi_slope != 0.f;
  // Raw scores are scaled inside exp2; logits (softcap / ALiBi applied) already are.
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
  // Q and the first K tile form the first group; in the two-stage pipeline the first V tile
  // joins them, in the split pipeline it is loaded inside the loop.
  load_tile<QTile, T::kThreads>(sQ, q, p.q.stride_s, rows, d, tid);
  if (n_begin < n_end) {
    load_k(n_begin, 0);
    if constexpr (!T::kSplitKV) load_v(n_begin, 0);
  }
  cp_async_commit();

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
  const int64_t row_g = m0 + warp * T::kRowsPerWarp + g;
  const RowKeys rk(vis, row_g, sq.len_k);
  const WarpTiles warp_tiles(vis, m0 + warp * T::kRowsPerWarp, T::kRowsPerWarp, sq.len_k,
                             T::kBlockN);

  for (int nb = n_begin; nb < n_end; ++nb) {
    const int stage = T::kSplitKV ? 0 : (nb - n_begin) % T::kStages;
    cp_async_wait<0>();
    // Two-stage: tile nb (K and V) landed for everyone and everyone is done with tile nb - 1, so
    // tile nb + 1 streams into the other stage during this step. Split: K nb landed and every
    // warp finished P·V of tile nb - 1, so V nb streams in during Q·Kᵀ and the softmax.
    __syncthreads();
    if constexpr (T::kSplitKV) {
      load_v(nb, 0);
    } else if (nb + 1 < n_end) {
      load_k(nb + 1, stage ^ 1);
      load_v(nb + 1, stage ^ 1);
    }
    cp_async_commit();
    const int n0 = nb * T::kBlockN;
    const bool idle = nb < warp_tiles.active_begin || nb >= warp_tiles.active_end;
    const bool masked = nb < warp_tiles.full_begin || nb >= warp_tiles.full_end;
    const uint32_t sKs = smem_addr(sK + stage * KvTile::kElems);
    const uint32_t sVs = smem_addr(sV + stage * KvTile::kElems);
    auto between = [&] {
      if constexpr (T::kSplitKV) {
        cp_async_wait<0>();
        __syncthreads();  // V nb landed; every warp is done reading K nb: K nb + 1 streams in
        if (nb + 1 < n_end) load_k(nb + 1, 0);
        cp_async_commit();
      }
    };
    if (idle)
      between();
    else if (masked)
      tile_step<T, true>(p, rk, logit, transform, scale_log2, n0, smem_addr(sQ), sKs, sVs,
                         q_lane, k_lane, v_lane, o, st, warp, lane, between);
    else
      tile_step<T, false>(p, rk, logit, transform, scale_log2, n0, smem_addr(sQ), sKs, sVs,
                          q_lane, k_lane, v_lane, o, st, warp, lane, between);
  }
  cp_async_wait<0>();

  // Epilogue: finish the row sums over the quad, normalise, store O and LSE.
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = st.l[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int64_t row = row_g + 16 * mt + 8 * r;
      if (row >= sq.len_q) continue;
      const bool empty = l == 0.f;  // no visible key: O = 0, LSE = -inf
      const float inv = empty ? 0.f : 1.f / l;
      uint16_t* out = p.out.at<uint16_t>(b, sq.q_start + row, h);
#pragma unroll
      for (int nd = 0; nd < T::kHeadDim / 8; ++nd) {
        const int col = nd * 8 + 2 * t;
        if (col < d)
          *reinterpret_cast<uint32_t*>(out + col) =
              pack2<Tag>(o[mt][nd][2 * r] * inv, o[mt][nd][2 * r + 1] * inv);
      }
      // LSE = max logit + ln(l), the max in natural units (scale applied unless logits already
      // are): exact where going through log2 units would lose ~|m| * 2^-23 twice.
      const float m_nat = transform ? st.m[mt][r] : st.m[mt][r] * p.softmax_scale;
      if (t == 0) p.lse.at(b, h, sq.q_start + row) = empty ? kNegInf : m_nat + logf(l);
    }
}

}  // namespace fa::cuda::sm80
