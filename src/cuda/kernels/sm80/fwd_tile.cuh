// Warp-level parts of the sm80 forward kernel (fwd_kernel.cuh orchestrates them): tile loads,
// the two GEMMs in issue units, the logit transform and mask, the online softmax, and the
// per-warp bookkeeping of which key tiles need a mask.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/mask.h"
#include "core/params.h"
#include "core/philox.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/exp2.cuh"  // exp2_fast, kLog2e
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm80/fwd_traits.h"
#include "cuda/kernels/sm80/tile_ranges.h"
#include "cuda/tile/dropout.cuh"
#include "cuda/tile/warp_mma.cuh"

namespace fa::cuda::sm80 {

constexpr float kNegInf = -__builtin_huge_valf();
// Lazy rescaling threshold, log2 units: P may grow to 2^8 before O is rescaled (see tile_step).
constexpr float kRescaleLog2 = 8.f;


// Global -> shared, 16-byte chunks: rows [0, rows_valid) and columns [0, cols_valid) copied,
// everything else of the tile zero-filled. The first kRowStep * kChunksPerRow threads cover
// kRowStep whole rows at a time, so each thread keeps one column and its chunks sit kRowStep
// rows apart: the 64-bit source address is formed once and advanced by a loop-invariant step
// (recomputing it per chunk cost ~10 instructions a chunk and, through the registers it held,
// the spills the d = 64 / 128 kernels had). Head dims whose chunk count per row does not divide
// the thread count (96, 160, 224) leave the remaining threads idle during the copy.
template <class Tile, int kThreads>
struct TileCopy {
  static constexpr int kChunksPerRow = Tile::kColCount / Tile::kChunkElems;
  static constexpr int kRowStep = kThreads / kChunksPerRow;  // rows copied per pass
  static_assert(kRowStep >= 1, "a tile row has more chunks than the block has threads");
  // Every thread copies, whole rows per pass, each thread in one swizzle phase (kRowStep a
  // multiple of 8), and the passes cover the tile exactly: what load_tile_full needs.
  static constexpr bool kEven = kRowStep * kChunksPerRow == kThreads && kRowStep % 8 == 0 &&
                                Tile::kRowCount % kRowStep == 0;
};

template <class Tile, int kThreads>
__device__ __forceinline__ void load_tile(uint16_t* smem, const uint16_t* gmem, int64_t row_stride,
                                          int64_t rows_valid, int cols_valid, int tid) {
  constexpr int kChunksPerRow = TileCopy<Tile, kThreads>::kChunksPerRow;
  constexpr int kRowStep = TileCopy<Tile, kThreads>::kRowStep;
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

// load_tile for a tile whose rows and columns are all in range, where TileCopy::kEven: no
// per-row test and no source select (a backward step's Q / dO copies took ~150 instructions a
// warp with them), every destination an immediate offset from the first.
template <class Tile, int kThreads>
__device__ __forceinline__ void load_tile_full(uint16_t* smem, const uint16_t* gmem,
                                               int64_t row_stride, int tid) {
  using C = TileCopy<Tile, kThreads>;
  static_assert(C::kEven, "load_tile_full: rows must split evenly over the threads");
  const int row = tid / C::kChunksPerRow, col = (tid % C::kChunksPerRow) * Tile::kChunkElems;
  const uint16_t* src = gmem + row * row_stride + col;
  const uint32_t dst = smem_addr(smem + Tile::offset(row, col));
#pragma unroll
  for (int i = 0; i < Tile::kRowCount / C::kRowStep; ++i)
    cp_async_16(dst + uint32_t(i * C::kRowStep * Tile::kBlockCols * 2),
                src + i * C::kRowStep * row_stride, true);
}

// ldmatrix.x4 lane roles. For a 16x16 A fragment at (row0, col0) of a row-major tile the four
// matrices are (rows +0, cols +0), (rows +8, cols +0), (rows +0, cols +8), (rows +8, cols +8):
// lane l addresses row (l % 8) + 8 ((l / 8) % 2), column 8 (l / 16). The same order gives Vᵀ
// fragments through ldmatrix.trans. For two n-tiles of Kᵀ (B fragments) at (n0, col0) the
// matrices are (rows n0, cols +0), (n0, +8), (n0 + 8, +0), (n0 + 8, +8): row (l % 8) + 8 (l / 16),
// column 8 ((l / 8) % 2).
// The lane's (row, column) inside the 16x16 fragment, per role.
struct LanePos {
  int row, col;
};
__device__ __forceinline__ LanePos a_lane_pos(int lane) {
  return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)};
}
__device__ __forceinline__ LanePos bt_lane_pos(int lane) {
  return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
}
template <class Tile>
__device__ __forceinline__ typename Tile::LaneOffsets a_lane(int lane) {
  const LanePos q = a_lane_pos(lane);
  return Tile::lane_offsets(q.row, q.col);
}
template <class Tile>
__device__ __forceinline__ typename Tile::LaneOffsets bt_lane(int lane) {
  const LanePos q = bt_lane_pos(lane);
  return Tile::lane_offsets(q.row, q.col);
}

// Per thread: rows g and g + 8 of each of the warp's m-tiles.
template <int kMTiles>
struct FwdState {
  float m[kMTiles][2];  // running max of the (raw or logit) scores
  float l[kMTiles][2];  // this thread's partial row sums of exp2; reduced over the quad at the end
};

// S (kRowsPerWarp, kBlockN) = Q·Kᵀ for one warp, in units: unit (ks, ntp) is k-step ks of
// n-tile pair ntp, 2 kMTiles mma sharing one K fragment; each Q fragment serves every n-tile.
// Element e of s[mt][nt]: row row_g + 16 mt + 8 (e / 2), key n0 + 8 nt + 2t + e % 2.
template <class T>
struct QkGemm {
  static constexpr int kPairs = T::kBlockN / 16;  // n-tile pairs per k-step
  static constexpr int kSteps = T::kHeadDim / 16;
  uint32_t sQ, sK;
  const typename T::QTile::LaneOffsets& q_lane;
  const typename T::KvTile::LaneOffsets& k_lane;
  int warp;

  // The A fragment of m-tile mt (Q), the B fragment of n-tile pair ntp (K), k-step ks.
  __device__ __forceinline__ void load_a(uint32_t (&a)[4], int mt, int ks) const {
    ldmatrix_x4(a, sQ + T::QTile::frag_offset(q_lane, warp * T::kRowsPerWarp + 16 * mt, ks * 16));
  }
  __device__ __forceinline__ void load_b(uint32_t (&b)[4], int ntp, int ks) const {
    ldmatrix_x4(b, sK + T::KvTile::frag_offset(k_lane, ntp * 16, ks * 16));
  }
  __device__ __forceinline__ void load_q(uint32_t (&a)[T::kMTiles][4], int ks) const {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) load_a(a[mt], mt, ks);
  }
  __device__ __forceinline__ void unit(float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                       const uint32_t (&a)[T::kMTiles][4], int ks, int ntp) const {
    uint32_t b[4];
    load_b(b, ntp, ks);
    mma_unit<typename T::Tag>(s, a, b, ntp);
  }
  __device__ __forceinline__ static void zero(float (&s)[T::kMTiles][T::kBlockN / 8][4]) {
    zero_acc(s);
  }
  __device__ __forceinline__ void run(float (&s)[T::kMTiles][T::kBlockN / 8][4]) const {
    zero(s);
    warp_mma<typename T::Tag, kSteps>(
        s, [this](uint32_t(&a)[4], int mt, int ks) { load_a(a, mt, ks); },
        [this](uint32_t(&b)[4], int ntp, int ks) { load_b(b, ntp, ks); });
  }
};

// P of one tile rounded to 16 bits: k-step kk of P·V takes n-tiles 2kk, 2kk+1 of S, whose C
// layout is exactly the A layout (mma.cuh). (kMTiles, kBlockN / 16, 4) registers.
template <class T>
using PackedP = uint32_t[T::kMTiles][T::kBlockN / 16][4];

template <class T>
__device__ __forceinline__ void pack_p(const float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                       PackedP<T>& pp) {
  using Tag = typename T::Tag;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk)
      pack_a<Tag>(s[mt][2 * kk], s[mt][2 * kk + 1], pp[mt][kk]);
}

// O += P·V for one warp, in units: unit (kk, ndp) is k-step kk of output n-tile pair ndp, one
// Vᵀ fragment (ldmatrix.trans: same quadrant order as an A fragment) for every m-tile.
template <class T>
struct PvGemm {
  static constexpr int kPairs = T::kHeadDim / 16;  // output n-tile pairs
  static constexpr int kSteps = T::kBlockN / 16;
  static constexpr int kUnits = kPairs * kSteps;
  uint32_t sV;
  const typename T::KvTile::LaneOffsets& v_lane;

  __device__ __forceinline__ void unit(float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                       const PackedP<T>& pp, int u) const {
    const int kk = u / kPairs, ndp = u % kPairs;
    uint32_t b[4];
    ldmatrix_x4_trans(b, sV + T::KvTile::frag_offset(v_lane, kk * 16, ndp * 16));
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) mma_pair<typename T::Tag>(o[mt], pp[mt][kk], b, ndp);
  }
  __device__ __forceinline__ void run(float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                      const PackedP<T>& pp) const {
#pragma unroll
    for (int u = 0; u < kUnits; ++u) unit(o, pp, u);
  }
};

// S(j+1) = Q·K(j+1)ᵀ and O += P(j)·V(j) issued interleaved, unit by unit. Alone, Q·Kᵀ has only
// 2 kMTiles kBlockN / 16 independent accumulator chains per warp (8 at d = 128), too few to
// cover the mma latency: ncu showed its mma stalled on the previous mma of the chain, where
// FlashAttention-2's stall on the busy tensor pipe. P·V's 2 kMTiles d / 8 independent chains
// fill the gaps. Both loops have (d / 16) (kBlockN / 16) units.
template <class T>
__device__ __forceinline__ void qk_pv_fused(const QkGemm<T>& qk, const PvGemm<T>& pv,
                                            float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                            float (&o)[T::kMTiles][T::kHeadDim / 8][4],
                                            const PackedP<T>& pp) {
  static_assert(QkGemm<T>::kSteps * QkGemm<T>::kPairs == PvGemm<T>::kUnits, "unit counts");
  QkGemm<T>::zero(s);
#pragma unroll
  for (int ks = 0; ks < QkGemm<T>::kSteps; ++ks) {
    uint32_t a[T::kMTiles][4];
    qk.load_q(a, ks);
#pragma unroll
    for (int ntp = 0; ntp < QkGemm<T>::kPairs; ++ntp) {
      qk.unit(s, a, ks, ntp);
      pv.unit(o, pp, ks * QkGemm<T>::kPairs + ntp);
    }
  }
}

// The forward's block of query rows: blocks run in reverse row order, so that the longest causal
// blocks start first; a thread's rows are row0 + 8 r + 16 mt of its warp's.
template <class T>
__device__ __forceinline__ int64_t fwd_block_m0() {
  return (int64_t(gridDim.x) - 1 - blockIdx.x) * T::kBlockM;
}
template <class T>
__device__ __forceinline__ int64_t fwd_thread_row0() {
  return fwd_block_m0<T>() + int64_t(threadIdx.x / 32) * T::kRowsPerWarp + (threadIdx.x % 32) / 4;
}

// Where a thread's rows read the attention bias (Params::Bias): batch entry (the sequence of a
// packed batch) and query head, the thread's first row row_g, and the sequence's lengths, made
// from the block's coordinates where a tile needs them. Rows and keys are clamped into the
// sequence when read: a tile's rows and keys past it are masked or never stored.
struct BiasRows {
  int b, h, row_g, len_q, len_k;
  template <class T>
  __device__ __forceinline__ static BiasRows of(const Params& p) {
    const int64_t b = blockIdx.z;
    const SeqInfo sq = p.seq(b);
    return {int(b), int(blockIdx.y), int(fwd_thread_row0<T>()), int(sq.len_q), int(sq.len_k)};
  }
  // The bias element (row_g + dr, key) as a term of the logit: the value, or for a mask 0 (seen)
  // or -inf (hidden).
  __device__ __forceinline__ float at(const Params::Bias& bias, int dr, int key) const {
    const int row = row_g + dr < len_q ? row_g + dr : len_q - 1;
    const int64_t o = bias.offset(b, h, row, key < len_k ? key : len_k - 1);
    switch (bias.kind) {
      case Params::Bias::Kind::F32: return static_cast<const float*>(bias.data)[o];
      case Params::Bias::Kind::F16: return to_float(static_cast<const half_t*>(bias.data)[o]);
      case Params::Bias::Kind::BF16: return to_float(static_cast<const bfloat16_t*>(bias.data)[o]);
      case Params::Bias::Kind::Mask:
        return static_cast<const uint8_t*>(bias.data)[o] != 0 ? 0.f : kNegInf;
      default: return 0.f;
    }
  }
};

// Logit transform (softcap, the attention bias in T::kBias kernels, ALiBi, when on; in
// core/mask.h's order) and mask (kMask: the tile straddles a mask or sequence boundary) in 32-bit
// tile-relative coordinates: key n0 + c with c = 8 nt + 2t + e % 2 (so c is a constant plus 2t),
// one diagonal / key range per row.
template <class T, bool kMask>
__device__ __forceinline__ void transform_mask(const Params& p, const RowKeys& rk,
                                               const Logit<float>& logit, bool transform, int n0,
                                               float (&s)[T::kMTiles][T::kBlockN / 8][4],
                                               int lane) {
  constexpr int kM = T::kMTiles;
  constexpr int kNt = T::kBlockN / 8;  // n-tiles of S
  const int t = lane % 4;
  if (transform) {
    [[maybe_unused]] BiasRows br;
    if constexpr (T::kBias) br = BiasRows::of<T>(p);
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
            if constexpr (T::kBias) x += br.at(p.bias, 16 * mt + 8 * r, n0 + 8 * nt + 2 * t + e);
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
        int lo, hi;  // visible keys of this row, relative to n0 and clamped to the tile
        rk.tile_range(16 * mt + 8 * r, n0, T::kBlockN, &lo, &hi);
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
// at d = 128. The vote keeps it warp-uniform. kLazy = false rescales whenever a max grows, so that
// a row's largest P is 2^0 = 1 exactly when it is rounded to 16 bits (lazily, the largest P is
// some 2^x up to 256, rounded by up to 2^-9 of itself: the error of a row one key dominates).
template <class T, bool kLazy = true>
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
      need |= (mx - st.m[mt][r]) * scale_log2 > (kLazy ? kRescaleLog2 : 0.f);
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

}  // namespace fa::cuda::sm80
