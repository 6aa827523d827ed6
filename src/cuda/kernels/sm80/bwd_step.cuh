// The parts of one step of the sm80 backward's main kernel (bwd_kernel.cuh orchestrates them):
// each warp's place in the step's five products (BwdWarpTiles), the products on the warp-tile
// GEMM (cuda/tile/warp_mma.cuh), the dropout keep-mask, the element-wise pass that turns Sᵀ and
// dPᵀ into P and dS, the stores of Pᵀ and dSᵀ to shared memory, the dQ reductions and the
// deterministic mode's turn-taking.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/mask.h"
#include "core/params.h"
#include "core/philox.h"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/memory.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm80/bwd_dbias.cuh"
#include "cuda/kernels/sm80/bwd_traits.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // a_lane, bt_lane, exp2_fast, kLog2e
#include "cuda/kernels/sm80/tile_ranges.h"
#include "cuda/tile/warp_mma.cuh"

namespace fa::cuda::sm80 {

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


// One warp's tile in each product of a step (BwdTraits' warp layouts), made once a block
// (bwd_block), and the accumulator types. The lane offsets of its fragment loads and stores are
// arrays and stay out of it: bwd_block holds them and passes each product its own (read through
// an aggregate, with loop indices not yet unrolled, they changed the generated code: +200 PTX
// instructions in the dropout kernel at d = 128). Filled from values the block computes
// itself, for the same reason.
template <class T>
struct BwdWarpTiles {
  using KvTile = typename T::KvTile;
  using QTile = typename T::QTile;
  using STile = typename T::STile;
  static constexpr int kSMt = T::kSKeys / 16, kSNt = T::kSQueries / 8;   // Sᵀ m-tiles, n-tiles
  static constexpr int kKvMt = T::kKvKeys / 16, kKvNt = T::kKvCols / 8;  // dK / dV
  static constexpr int kDqMt = T::kDqRows / 16, kDqNt = T::kDqCols / 8;  // dQ
  using SAcc = float[kSMt][kSNt][4];     // Sᵀ, dPᵀ; then P, dS (element order: bwd_pointwise)
  using KvAcc = float[kKvMt][kKvNt][4];  // dK, dV
  using DqAcc = float[kDqMt][kDqNt][4];  // a step's dQ
  // The products whose warp tile starts at a run-time column (ColOffsets): Q / dO transposed as
  // B of dK / dV, dS from dSᵀ transposed as A of dQ (its columns are queries), K transposed as
  // B of dQ.
  using KvCols = ColOffsets<QTile, kKvNt / 2>;
  using DqRows = ColOffsets<STile, kDqMt>;
  using DqCols = ColOffsets<KvTile, kDqNt / 2>;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Pᵀ / dSᵀ stores through stmatrix: a_lane rows of the warp's 16 x 16 blocks, keys s_key0 +
  // 16 mt (added as whole rows), queries s_query0 + 16 ntp.
  using StOffsets = ColOffsets<STile, kSNt / 2>;
#else
  // This thread's Pᵀ / dSᵀ stores, bytes: key s_key0 + g, queries s_query0 + 8 nt + 2t.
  struct StOffsets {
    uint32_t v[kSNt];
  };
#endif

  int g, t;              // lane / 4, lane % 4: the fragments' row group and column pair (mma.cuh)
  int s_key0, s_query0;  // Sᵀ / dPᵀ: the warp's first key and query
  int kv_key0, kv_col0;  // dK / dV: first key, first column
  int dq_row0, dq_col0;  // dQ: first query row, first column
};

// Sᵀ = K Qᵀ or dPᵀ = V dOᵀ over the warp's (kSKeys x kSQueries) tile and the full head dim:
// A = K / V at a_base, B = Q / dO at b_base (as Kᵀ in the forward).
// kv_a: the a_lane offsets of the K / V tile, q_bt: the bt_lane offsets of the Q / dO tile.
template <class T>
__device__ __forceinline__ void s_product(const BwdWarpTiles<T>& w,
                                          const typename T::KvTile::LaneOffsets& kv_a,
                                          const typename T::QTile::LaneOffsets& q_bt,
                                          typename BwdWarpTiles<T>::SAcc& acc, uint32_t a_base,
                                          uint32_t b_base) {
  zero_acc(acc);
  warp_mma<typename T::Tag, T::kHeadDim / 16>(
      acc,
      [&](uint32_t(&a)[4], int mt, int ks) {
        ldmatrix_x4(a, a_base + T::KvTile::frag_offset(kv_a, w.s_key0 + 16 * mt, ks * 16));
      },
      [&](uint32_t(&b)[4], int ntp, int ks) {
        ldmatrix_x4(b, b_base + T::QTile::frag_offset(q_bt, w.s_query0 + ntp * 16, ks * 16));
      });
}

// The warp's dK / dV fragment loads: s_a, the a_lane offsets of the Pᵀ / dSᵀ tile; cols, the
// column offsets of the Q / dO tile (read transposed).
template <class T>
struct KvLanes {
  const typename T::STile::LaneOffsets& s_a;
  const typename BwdWarpTiles<T>::KvCols& cols;
};

// The A fragment of Pᵀ / dSᵀ (at a_base) for m-tile mt, k-step kk of dV / dK, and the B fragment
// of dO / Q (at b_base, through ldmatrix.trans) for n-tile pair ndp.
template <class T>
__device__ __forceinline__ void kv_load_a(const BwdWarpTiles<T>& w, const KvLanes<T>& l,
                                          uint32_t (&a)[4], uint32_t a_base, int mt, int kk) {
  ldmatrix_x4(a, a_base + T::STile::frag_offset(l.s_a, w.kv_key0 + 16 * mt, kk * 16));
}
template <class T>
__device__ __forceinline__ void kv_load_b(const KvLanes<T>& l, uint32_t (&b)[4], uint32_t b_base,
                                          int ndp, int kk) {
  ldmatrix_x4_trans(b, b_base + kk * 16 * kRowBytes + l.cols.v[ndp]);
}

// acc += A B over the warp's (kKvKeys x kKvCols) tile of dV (A = Pᵀ, B = dO) or dK (A = dSᵀ,
// B = Q), the step's kBlockM queries as k.
template <class T>
__device__ __forceinline__ void kv_product(const BwdWarpTiles<T>& w, const KvLanes<T>& l,
                                           typename BwdWarpTiles<T>::KvAcc& acc, uint32_t a_base,
                                           uint32_t b_base) {
  warp_mma<typename T::Tag, T::kBlockM / 16>(
      acc, [&](uint32_t(&a)[4], int mt, int kk) { kv_load_a<T>(w, l, a, a_base, mt, kk); },
      [&](uint32_t(&b)[4], int ndp, int kk) { kv_load_b<T>(l, b, b_base, ndp, kk); });
}

// dV += Pᵀ dO and dK += dSᵀ Q in one loop.
template <class T>
__device__ __forceinline__ void kv_products(const BwdWarpTiles<T>& w, const KvLanes<T>& l,
                                            typename BwdWarpTiles<T>::KvAcc& dv,
                                            typename BwdWarpTiles<T>::KvAcc& dk, uint32_t aP,
                                            uint32_t adS, uint32_t adO, uint32_t aQ) {
  warp_mma2<typename T::Tag, T::kBlockM / 16>(
      dv, dk, [&](uint32_t(&a)[4], int mt, int kk) { kv_load_a<T>(w, l, a, aP, mt, kk); },
      [&](uint32_t(&a)[4], int mt, int kk) { kv_load_a<T>(w, l, a, adS, mt, kk); },
      [&](uint32_t(&b)[4], int ndp, int kk) { kv_load_b<T>(l, b, adO, ndp, kk); },
      [&](uint32_t(&b)[4], int ndp, int kk) { kv_load_b<T>(l, b, aQ, ndp, kk); });
}

// dQ = dS K over the warp's (kDqRows x kDqCols) tile, the block's kBlockN keys as k: A = dS from
// dSᵀ (ldmatrix.trans at bt_lane offsets), B = K through ldmatrix.trans.
// rows, cols: the offsets of the warp's dS rows in the dSᵀ tile, of its columns in the K tile.
template <class T>
__device__ __forceinline__ void dq_product(const typename BwdWarpTiles<T>::DqRows& rows,
                                           const typename BwdWarpTiles<T>::DqCols& cols,
                                           typename BwdWarpTiles<T>::DqAcc& dq, uint32_t adS,
                                           uint32_t aK) {
  zero_acc(dq);
  warp_mma<typename T::Tag, T::kBlockN / 16>(
      dq,
      [&](uint32_t(&a)[4], int mt, int kk) {
        ldmatrix_x4_trans(a, adS + kk * 16 * kRowBytes + rows.v[mt]);
      },
      [&](uint32_t(&b)[4], int ndp, int kk) {
        ldmatrix_x4_trans(b, aK + kk * 16 * kRowBytes + cols.v[ndp]);
      });
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

// What the element-wise pass of a step reads besides Sᵀ and dPᵀ.
struct StepSoftmax {
  const float* lse2;   // the step's LSE · log2 e from query 0 (kLseD16: interleaved with D)
  const float* dsum;   // the step's scale · D from query 0
  float scale;         // the softmax scale
  Logit<float> logit;  // softcap and ALiBi of the step's query head
  float keep_scale;    // dropout: 1 / (1 - p)
  uint32_t kept_bits;  // dropout: keep_bits of the warp's elements
  bool masked;         // the step has masked elements (KeyTileUnmasked)
  bool transform;      // softcap or ALiBi
};

// P and dS of one step in place for the warp's Sᵀ tile: st <- P (P ∘ [kept] with dropout), dpt
// <- dS = P ∘ (scale dP - scale D) with the softcap derivative (dsum holds scale · D).
// Element e of [mt][nt]: key kr = s_key0 + 16 mt + g + 8 (e / 2), query qc = s_query0 + 8 nt +
// 2t + e % 2 of the step (StepSoftmax's lse2 and dsum point at the step's query 0; with kLseD16
// lse2 at both, interleaved); the mask and the ALiBi distance in 32-bit tile coordinates (StepWindow,
// host-tested in tests/test_tile_ranges.cpp). With dropout
// the forward's P·V saw P ∘ keep (keep = 0 or 1 / (1 - p)), so dS = P ∘ (dP ∘ keep - D) and dV
// takes P ∘ [kept], scaled by 1 / (1 - p) in fp32 at the end (as the forward does, so that no
// scaled P is rounded to 16 bits).
// kMasked / kTransform false: the step has no masked element / no logit transform, decided at
// compile time (a runtime test inside the unrolled loop cost a branch and its reconvergence per
// element); true: masked / transform, also tested at run time. (The dropout kernels took the
// general variant while the Philox code sat inside it: four copies spilled up to 1.7 KB; the
// step's keep bits now come before, from keep_bits.)
// The bias kernels (T::kBias) add sb's bias elements to the logits (after softcap, before
// ALiBi, as the forward), take P = 0 in rows past the sequence and in rows with LSE = -inf (a
// bias can hide every key of a row the masks leave visible), and with kDbias (dBias asked with
// softcap: dS before softcap's factor exists only here) hand each element's dBias = dS / scale
// to a StepDbias (bwd_dbias.cuh); without softcap step_dbias takes it from dS after the store.
template <class T, bool kMasked, bool kTransform, bool kDbias = false>
__device__ __forceinline__ void bwd_pointwise(const BwdWarpTiles<T>& w,
                                              typename BwdWarpTiles<T>::SAcc& st,
                                              typename BwdWarpTiles<T>::SAcc& dpt,
                                              const StepSoftmax& in, const StepWindow& win,
                                              const StepBias<T::kBias>& sb) {
  const float* lse2 = in.lse2;
  const float* dsum = in.dsum;
  const float scale = in.scale;
  const Logit<float>& logit = in.logit;
  const int key0 = w.s_key0, query0 = w.s_query0, g = w.g, t = w.t;
  const float scale_log2 = scale * kLog2e;
  const float inv_softcap = kTransform && logit.softcap > 0.f ? 1.f / logit.softcap : 0.f;
  [[maybe_unused]] StepDbias<T::kSKeys / 16, T::kSQueries / 8> db;
  if constexpr (kDbias) db.clear();
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
    if constexpr (T::kBias) {  // P = exp2(x - inf) = 0 in those rows, whatever the bias
      if (!sb.row_in(q2) || l2.x == kNegInf) l2.x = -kNegInf;
      if (!sb.row_in(q2 + 1) || l2.y == kNegInf) l2.y = -kNegInf;
    }
#pragma unroll
    for (int mt = 0; mt < T::kSKeys / 16; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = key0 + 16 * mt + g + 8 * (e / 2), qc = q2 + (e & 1);
        const float lse_e = e & 1 ? l2.y : l2.x, d_e = e & 1 ? dd.y : dd.x;
        float pr, dx = 1.f;
        if (kTransform && (T::kBias || in.transform)) {
          float x = st[mt][nt][e] * scale;
          if (logit.softcap > 0.f) {
            const float th = tanhf(x * inv_softcap);
            x = logit.softcap * th;
            dx = 1.f - th * th;
          }
          if constexpr (T::kBias) x += sb.at(qc, kr);
          x -= logit.alibi_slope * float(win.alibi_distance(kr, qc));
          pr = exp2_fast(fmaf(x, kLog2e, -lse_e));
        } else {
          pr = exp2_fast(fmaf(st[mt][nt][e], scale_log2, -lse_e));
        }
        if constexpr (kMasked) {
          if (in.masked && !win.visible(kr, qc)) pr = 0.f;
        }
        float dp = dpt[mt][nt][e], pk = pr;
        if constexpr (T::kDropout) {
          const bool kept = (in.kept_bits >> (4 * (mt * (T::kSQueries / 8) + nt) + e)) & 1u;
          dp = kept ? dp * in.keep_scale : 0.f;
          pk = kept ? pr : 0.f;
        }
        st[mt][nt][e] = pk;
        const float ds = pr * fmaf(dp, scale, -d_e);
        dpt[mt][nt][e] = kTransform ? ds * dx : ds;  // dx = 1 unless softcap
        if constexpr (kDbias) db.take(sb, mt, nt, e, qc, kr, ds * sb.inv_scale);
      }
  }
  if constexpr (kDbias) {
    if (sb.sum_q || sb.sum_k) db.flush(sb, key0, query0, g, t);
  }
}

// Whether the bias kernels' element-wise pass writes dBias itself (softcap: its dS carries
// softcap's factor after the pass); else step_dbias does, from dS after the Pᵀ / dSᵀ store.
template <bool kOn>
__device__ __forceinline__ bool dbias_in_pass(const StepBias<kOn>& sb, const Logit<float>& logit) {
  if constexpr (kOn) return sb.op != DbiasOp::kNone && logit.softcap > 0.f;
  return false;
}

// bwd_pointwise with the step's mask and transform decided once: four compile-time variants,
// the step's window (vis at query tile m0, key tile n0) made only where it is read. The bias
// kernels always transform, and write dBias inside the pass only with softcap (four variants).
template <class T>
__device__ __forceinline__ void step_pointwise(const BwdWarpTiles<T>& w,
                                               typename BwdWarpTiles<T>::SAcc& st,
                                               typename BwdWarpTiles<T>::SAcc& dpt,
                                               const StepSoftmax& in, const Visibility& vis,
                                               int64_t m0, int64_t n0, int64_t len_k,
                                               const StepBias<T::kBias>& sb) {
  auto run = [&](auto kMasked, auto kTransform, auto kDbias) {
    const StepWindow win(vis, m0, n0, len_k, T::kBlockN);
    bwd_pointwise<T, decltype(kMasked)::value, decltype(kTransform)::value,
                  decltype(kDbias)::value>(w, st, dpt, in, win, sb);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if constexpr (T::kBias) {
    if (dbias_in_pass(sb, in.logit))
      in.masked ? run(Yes{}, Yes{}, Yes{}) : run(No{}, Yes{}, Yes{});
    else
      in.masked ? run(Yes{}, Yes{}, No{}) : run(No{}, Yes{}, No{});
    return;
  }
  if (in.masked)
    in.transform ? run(Yes{}, Yes{}, No{}) : run(Yes{}, No{}, No{});
  else
    in.transform ? run(No{}, Yes{}, No{}) : run(No{}, No{}, No{});
}

// dBias of the warp's Sᵀ tile from dS (dpt, bwd_pointwise's element order) where the pass did not
// write it: asked, and no softcap (dS is then dBias times the scale). After the Pᵀ / dSᵀ store,
// where P no longer holds registers (inside the pass it spilled the d 128 kernel 36 -> 868
// bytes).
template <class T>
__device__ __forceinline__ void step_dbias(const BwdWarpTiles<T>& w,
                                           const typename BwdWarpTiles<T>::SAcc& dpt,
                                           const StepBias<true>& sb, const Logit<float>& logit) {
  if (sb.op == DbiasOp::kNone || dbias_in_pass(sb, logit)) return;
  // f(mt, nt, e, query, key, dBias) over the warp's elements; one loop per kind of write, each
  // with its write decided outside it.
  auto each = [&](auto f) {
#pragma unroll
    for (int nt = 0; nt < T::kSQueries / 8; ++nt)
#pragma unroll
      for (int mt = 0; mt < T::kSKeys / 16; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          f(mt, nt, e, w.s_query0 + 8 * nt + 2 * w.t + (e & 1),
            w.s_key0 + 16 * mt + w.g + 8 * (e / 2), dpt[mt][nt][e] * sb.inv_scale);
  };
  if (sb.sum_q || sb.sum_k) {
    StepDbias<T::kSKeys / 16, T::kSQueries / 8> db;
    db.clear();
    each([&](int mt, int nt, int e, int, int, float v) {
      if (sb.sum_q)
        db.k_part[mt][e / 2] += v;
      else
        db.q_part[nt][e % 2] += v;
    });
    db.flush(sb, w.s_key0, w.s_query0, w.g, w.t);
    return;
  }
  switch (sb.op) {
    case DbiasOp::kAddF32:
      each([&](int, int, int, int qc, int kr, float v) { sb.add(qc, kr, v); });
      break;
    case DbiasOp::kStoreF32:
      each([&](int, int, int, int qc, int kr, float v) { sb.store<float>(qc, kr, v); });
      break;
    case DbiasOp::kStoreF16:
      each([&](int, int, int, int qc, int kr, float v) { sb.store<half_t>(qc, kr, v); });
      break;
    case DbiasOp::kStoreBF16:
      each([&](int, int, int, int qc, int kr, float v) { sb.store<bfloat16_t>(qc, kr, v); });
      break;
    default: break;
  }
}

// Pᵀ and dSᵀ of the warp's tile to shared memory (row = key, column = query), rounded to 16 bits.
template <class T>
__device__ __forceinline__ void store_p_ds(const typename BwdWarpTiles<T>::StOffsets& offs,
                                           const typename BwdWarpTiles<T>::SAcc& st,
                                           const typename BwdWarpTiles<T>::SAcc& dpt, uint32_t aP,
                                           uint32_t adS) {
  using Tag = typename T::Tag;
  constexpr int kSMt = BwdWarpTiles<T>::kSMt, kSNt = BwdWarpTiles<T>::kSNt;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // One stmatrix per 16 x 16 block: its registers are the A fragment's (pack_a).
#pragma unroll
  for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
    for (int ntp = 0; ntp < kSNt / 2; ++ntp) {
      uint32_t r[4];
      const uint32_t off = offs.v[ntp] + 16 * mt * kRowBytes;
      pack_a<Tag>(st[mt][2 * ntp], st[mt][2 * ntp + 1], r);
      stmatrix_x4(aP + off, r);
      pack_a<Tag>(dpt[mt][2 * ntp], dpt[mt][2 * ntp + 1], r);
      stmatrix_x4(adS + off, r);
    }
#else
  // This thread's keys g, g + 8 of each m-tile, query pairs 2t, at offs.v[nt] plus whole 8-row
  // groups (the swizzle repeats every 8 rows).
#pragma unroll
  for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kSNt; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t off = offs.v[nt] + (16 * mt + 8 * r) * kRowBytes;
        st_shared_b32(aP + off, pack2<Tag>(st[mt][nt][2 * r], st[mt][nt][2 * r + 1]));
        st_shared_b32(adS + off, pack2<Tag>(dpt[mt][nt][2 * r], dpt[mt][nt][2 * r + 1]));
      }
#endif
}

// This thread's dQ pairs added into the accumulator at acc (its own pair of the step's tile, in
// the tile order of dq_layout.h): every address an immediate offset from acc, with no test.
template <class T>
__device__ __forceinline__ void reduce_dq(float* acc, const typename BwdWarpTiles<T>::DqAcc& dq) {
  using DqL = typename T::DqLayout;
#pragma unroll
  for (int j = 0; j < DqL::kReds; ++j) {
    const int mt = DqL::mt(j), r = DqL::half(j), nd = DqL::nt(j);
    red_add2(acc + DqL::pair_offset(0, 0, j), dq[mt][nd][2 * r], dq[mt][nd][2 * r + 1]);
  }
}

// Deterministic mode: waits until the key tiles after nb that add into this query tile have
// added (adds(j): key tile j exists and adds into it), on the semaphore sem of the query tile, which the
// block then hands on with dq_turn_pass. Every thread of the block calls it.
template <class T, class Adds>
__device__ __forceinline__ void dq_turn_wait(int* sem, int nb, int n_tiles, const Adds& adds) {
  const int tid = threadIdx.x;
  int before = 0;
  for (int j0 = nb + 1; j0 < n_tiles; j0 += T::kThreads) {
    const int j = j0 + tid;
    before += __syncthreads_count(adds(j));
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

// The block's dQ reductions of the step done (every thread's, release), the turn handed on.
__device__ __forceinline__ void dq_turn_pass(int* sem) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) add_release(sem, 1);
}

}  // namespace fa::cuda::sm80
