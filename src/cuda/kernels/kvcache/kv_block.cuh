// The parts of a cuda-kvcache attention block that its kernel (kvcache_kernel.cuh) orchestrates:
// what a launch adds to Params, the block's keys and its rows' views of them, the raw-score
// transform and mask of a warp's S tile, the Q and K / V copies, and the merge of the block's
// warps into out (or a split's partials).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/mask.h"
#include "core/params.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/cvt_fp8.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/kernels/kvcache/kv_seq.cuh"
#include "cuda/kernels/kvcache/plan.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::kvcache {

// What a launch adds to Params.
struct KvArgs {
  int32_t row_tiles;  // 16-row tiles of a (batch entry, kv head)
  int32_t splits;     // parts of the keys; 1: the kernel writes out and lse itself
  int32_t group;      // query heads per kv head, packed into the rows
  int64_t part_rows;  // rows of the partials: total_q * heads_q
  float* part_o;      // (splits, part_rows, head_dim), normalised
  float* part_lse;    // (splits, part_rows)
  // A counter per block of a part ((batch, kv head, row tile), zeroed ahead of the kernel), when
  // the attention kernel's last part merges the partials itself; nullptr: kv_combine_kernel does.
  int32_t* counters;
};

// The query token of row qi of sequence sq (the partials' and the combine's row numbering).
__device__ __forceinline__ int64_t query_token(const Params& p, int64_t b, const KvSeq& sq,
                                               int64_t qi) {
  return p.varlen() ? sq.q_start + qi : b * p.seqlen_q + qi;
}

// The keys of a block (16 packed rows from r0, split part `split` of a.splits) and, per thread,
// its rows g and g + 8: the keys each sees within the block's, its position (ALiBi) and slope.
// Rows past the sequence see nothing. key_lo / key_hi: the keys any of the rows sees, cut into
// the split's part (parts of whole kN-key tiles).
struct BlockKeys {
  int key_lo, key_hi;
  int lo[2], hi[2], pos[2];
  float slope[2];
  bool transform;    // softcap, ALiBi or a non-positive scale: logits transformed in the mask pass
  float scale;       // softmax_scale times the block's q and k descales (fp8; else 1)
  float scale_log2;  // the softmax's factor on the (raw or transformed) scores
};
template <int kN, bool kFp8>
__device__ __forceinline__ BlockKeys block_keys(const Params& p, const KvArgs& a, const KvSeq& sq,
                                                int64_t b, int64_t hk, int r0, int rows_total,
                                                int split, int g) {
  BlockKeys k;
  const int group = a.group;
  const int q_first = r0 / group;
  const int q_last = ((r0 + kBlockM < rows_total ? r0 + kBlockM : rows_total) - 1) / group;
  const Visibility vis{sq.diag, p.window_left, p.window_right};
  k.key_lo = int(vis.key_begin(q_first, sq.len_k));
  k.key_hi = int(vis.key_end(q_last + 1, sq.len_k));
  if (k.key_hi < k.key_lo) k.key_hi = k.key_lo;
  if (a.splits > 1) {
    const int span = k.key_hi - k.key_lo;
    const int part = ((span + a.splits - 1) / a.splits + kN - 1) / kN * kN;
    const int s0 = k.key_lo + (split * part < span ? split * part : span);
    const int s1 = s0 + part < k.key_hi ? s0 + part : k.key_hi;
    k.key_lo = s0;
    k.key_hi = s1;
  }
  // fp8: the rows' q heads and the keys share one (batch, kv head) descale each (validation
  // refuses descales with other inputs).
  k.scale = kFp8 ? p.softmax_scale * p.q_descale.at(b, hk) * p.k_descale.at(b, hk) : p.softmax_scale;
  k.transform = p.softcap > 0.f || p.alibi_slopes != nullptr || k.scale <= 0.f;
  k.scale_log2 = k.transform ? kLog2e : k.scale * kLog2e;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int pr = r0 + g + 8 * r, qi = pr / group;
    const int64_t h = hk * group + pr % group;
    const int vlo = int(vis.key_begin(qi, sq.len_k)), vhi = int(vis.key_end(qi + 1, sq.len_k));
    const bool live = pr < rows_total;
    k.lo[r] = live ? (vlo > k.key_lo ? vlo : k.key_lo) : 0;
    k.hi[r] = live ? (vhi < k.key_hi ? vhi : k.key_hi) : 0;
    k.pos[r] = qi + sq.diag;
    k.slope[r] = live && p.alibi_slopes != nullptr ? p.alibi_slope(b, h) : 0.f;
  }
  return k;
}

// Raw-score transform (scale, softcap, ALiBi) and mask of one warp's S tile: element e of
// s[0][nt] is row g + 8 (e / 2) of the block, key k0 + 8 nt + 2 t + e % 2; row r sees the keys
// [keys.lo[r], keys.hi[r]) and sits at key position keys.pos[r] (ALiBi's distance), with
// keys.slope[r].
template <class T>
__device__ __forceinline__ void kv_transform_mask(const Params& p, const BlockKeys& keys, int k0,
                                                  float (&s)[1][T::kBlockN / 8][4], int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = k0 + 8 * nt + 2 * t + e;
        float x = s[0][nt][2 * r + e];
        if (keys.transform) {
          x *= keys.scale;
          if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
          x -= keys.slope[r] * fabsf(float(keys.pos[r] - key));
        }
        s[0][nt][2 * r + e] = key >= keys.lo[r] && key < keys.hi[r] ? x : sm80::kNegInf;
      }
}

// The block's 16 rows of Q into sQ (T::QTile layout), by `threads` threads from tid, cp.async
// (the caller commits); rows past the sequence and columns past head_dim arrive as
// zeros. q is the rotated copy when rotary is on.
template <class T>
__device__ __forceinline__ void copy_q_tile(const Params& p, const KvArgs& a, const KvSeq& sq,
                                            int64_t b, int64_t hk, int r0, int rows_total,
                                            uint16_t* sQ, int tid, int threads) {
  const int d = int(p.head_dim), group = a.group;
  if constexpr (T::kFp8) {
    // 16 e4m3 a chunk, loaded, converted and stored as two 16-byte fp16 chunks (no cp.async:
    // the __syncthreads after the first K / V stages' wait publishes them).
    constexpr int kCpr8 = T::kHeadDim / 16;
    for (int c = tid; c < kBlockM * kCpr8; c += threads) {
      const int r = c / kCpr8, col = (c % kCpr8) * 16, pr = r0 + r;
      uint4 raw = make_uint4(0u, 0u, 0u, 0u);
      if (pr < rows_total && col < d)
        raw = *reinterpret_cast<const uint4*>(
            p.q.at<const uint8_t>(b, sq.q_start + pr / group, hk * group + pr % group) + col);
      uint4 half[2];
      e4m3x16_to_f16x16(raw, half);
      *reinterpret_cast<uint4*>(sQ + T::QTile::offset(r, col)) = half[0];
      *reinterpret_cast<uint4*>(sQ + T::QTile::offset(r, col + 8)) = half[1];
    }
    return;
  }
  constexpr int kCpr = T::kHeadDim / 8;  // 16-byte chunks a row
  for (int c = tid; c < kBlockM * kCpr; c += threads) {
    const int r = c / kCpr, col = (c % kCpr) * 8, pr = r0 + r;
    const bool valid = pr < rows_total && col < d;
    const uint16_t* src = static_cast<const uint16_t*>(p.q.data);
    if (valid)
      src = p.q.at<const uint16_t>(b, sq.q_start + pr / group, hk * group + pr % group) + col;
    cp_async_16(smem_addr(sQ + T::QTile::offset(r, col)), src, valid);
  }
}

// The K and V rows of a tile of keys [k0, k0 + kBlockN) as one warp holds them: lane j < kBlockN
// has key k0 + j's element offsets in k and v (a paged cache's block table and cache_batch_idx
// looked up, kv_seq.cuh); rows_ok has bit j set for the keys below key_hi.
struct KvRows {
  int64_t ok, ov;
  unsigned rows_ok;
};
template <class T>
__device__ __forceinline__ KvRows lookup_rows(const Params& p, const KvSeq& sq, int64_t b,
                                              int64_t hk, int k0, int key_hi, int lane) {
  static_assert(T::kBlockN % 16 == 0 && T::kBlockN <= 32, "a tile's rows are looked up by one lane each");
  KvRows r{0, 0, 0u};
  const bool row_ok = lane < T::kBlockN && k0 + lane < key_hi;
  if (row_ok) {
    const int row = sq.k_start + k0 + lane;  // the cache row of this lane's key
    r.ok = cache_row_offset(p, p.k, b, row, hk);
    r.ov = cache_row_offset(p, p.v, b, row, hk);
  }
  r.rows_ok = __ballot_sync(0xffffffffu, row_ok);
  return r;
}

// One warp's copy of a tile's K and V rows (lookup_rows) into sK and sV, cp.async in 16-byte
// chunks of E elements (the caller commits): lane j takes chunks j, j + 32, ... and its rows'
// offsets by shuffle, so a page of any size costs what a dense row does; chunk (r, col) goes to
// element dst(r, col) of sK / sV. Keys from key_hi and columns past head_dim arrive as zeros
// (finite, so a masked score's P = 0 times them stays 0).
template <class T, typename E, typename Dst>
__device__ __forceinline__ void copy_chunks(const Params& p, const KvRows& rows, E* sK, E* sV,
                                            int lane, Dst dst) {
  constexpr int kChunk = 16 / int(sizeof(E));
  constexpr int kN = T::kBlockN, kCpr = T::kHeadDim / kChunk;
  static_assert((kN * kCpr) % 32 == 0, "every lane copies as many chunks");
  const int d = int(p.head_dim);
  const E* kbase = static_cast<const E*>(p.k.data);
  const E* vbase = static_cast<const E*>(p.v.data);
#pragma unroll
  for (int i = 0; i < kN * kCpr / 32; ++i) {
    const int c = lane + 32 * i, r = c / kCpr, col = (c % kCpr) * kChunk;
    const int64_t rk = __shfl_sync(0xffffffffu, rows.ok, r), rv = __shfl_sync(0xffffffffu, rows.ov, r);
    const bool valid = ((rows.rows_ok >> r) & 1u) != 0 && col < d;
    cp_async_16(smem_addr(sK + dst(r, col)), valid ? kbase + rk + col : kbase, valid);
    cp_async_16(smem_addr(sV + dst(r, col)), valid ? vbase + rv + col : vbase, valid);
  }
}

// 16-bit inputs: the rows straight into the T::KvTile layouts.
template <class T>
__device__ __forceinline__ void copy_rows(const Params& p, const KvRows& rows, uint16_t* sK,
                                          uint16_t* sV, int lane) {
  copy_chunks<T>(p, rows, sK, sV, lane, [](int r, int col) { return T::KvTile::offset(r, col); });
}

// fp8 inputs: the rows as bytes (kHeadDim a row, row-major) into stK and stV, 16 e4m3 a chunk,
// which convert_rows_fp8 then converts with the same chunks a lane (so a lane reads back only
// what it copied).
template <class T>
__device__ __forceinline__ void copy_rows_fp8(const Params& p, const KvRows& rows, uint8_t* stK,
                                              uint8_t* stV, int lane) {
  copy_chunks<T>(p, rows, stK, stV, lane, [](int r, int col) { return r * T::kHeadDim + col; });
}

// A staged fp8 tile (copy_rows_fp8's layout) into a 16-bit KvTile, each lane its own chunks.
template <class T>
__device__ __forceinline__ void convert_rows_fp8(const uint8_t* st, uint16_t* tile, int lane) {
  constexpr int kN = T::kBlockN, kCpr = T::kHeadDim / 16;
#pragma unroll
  for (int i = 0; i < kN * kCpr / 32; ++i) {
    const int c = lane + 32 * i, r = c / kCpr, col = (c % kCpr) * 16;
    uint4 half[2];
    e4m3x16_to_f16x16(*reinterpret_cast<const uint4*>(st + r * T::kHeadDim + col), half);
    *reinterpret_cast<uint4*>(tile + T::KvTile::offset(r, col)) = half[0];
    *reinterpret_cast<uint4*>(tile + T::KvTile::offset(r, col + 8)) = half[1];
  }
}

// The merge's scratch (floats): per warp its O rows (padded by 8 floats against bank conflicts),
// then per warp its row maxima and sums.
template <int kHeadDim, int kWarps>
constexpr int merge_floats() { return kWarps * kBlockM * (kHeadDim + 8 + 2); }

// The block's kWarps warps merged and stored, by the kWarps * 32 threads tid = 32 warp + lane:
// row maxima m_w (the softmax's units), sums l_w and O_w; with M = max m_w and
// f_w = 2^((m_w - M) scale_log2), O = sum f_w O_w / sum f_w l_w, written to out (and lse) or,
// in a split call, to the part's partials. `scratch` (merge_floats floats) is free for every
// merging thread when the call starts; sync() is a barrier of exactly those threads.
template <class T, int kWarps, class Sync>
__device__ __forceinline__ void merge_store(const Params& p, const KvArgs& a, const KvSeq& sq,
                                            int64_t b, int64_t hk, int r0, int rows_total,
                                            int split, const BlockKeys& keys,
                                            const sm80::FwdState<1>& st,
                                            const float (&o)[1][T::kHeadDim / 8][4],
                                            float* scratch, int tid, Sync sync) {
  using Tag = typename T::OutTag;
  constexpr int kStride = T::kHeadDim + 8, kCpr = T::kHeadDim / 8;
  float* red_o = scratch;
  float* red_m = red_o + kWarps * kBlockM * kStride;
  float* red_l = red_m + kWarps * kBlockM;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.l[0][r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = warp * kBlockM + g + 8 * r;
    if (t == 0) {
      red_m[row] = st.m[0][r];
      red_l[row] = l;
    }
#pragma unroll
    for (int nd = 0; nd < T::kHeadDim / 8; ++nd) {
      red_o[row * kStride + nd * 8 + 2 * t] = o[0][nd][2 * r];
      red_o[row * kStride + nd * 8 + 2 * t + 1] = o[0][nd][2 * r + 1];
    }
  }
  sync();

  constexpr int kPerRow = kWarps * 32 / kBlockM;  // threads a row
  static_assert(kWarps * 32 % kBlockM == 0, "whole threads per row in the merge");
  const int r = tid / kPerRow, pr = r0 + r;
  if (pr >= rows_total) return;
  const float scale_log2 = keys.scale_log2;
  float m_top = sm80::kNegInf;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_top = fmaxf(m_top, red_m[w * kBlockM + r]);
  float f[kWarps], l_sum = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float mw = red_m[w * kBlockM + r];
    f[w] = mw == sm80::kNegInf ? 0.f : exp2f((mw - m_top) * scale_log2);
    l_sum += f[w] * red_l[w * kBlockM + r];
  }
  const bool empty = l_sum == 0.f;  // no visible key in this part: O = 0, LSE = -inf
  // v's descale (fp8; else 1) scales O: a split's partials carry it into the merge.
  const float inv = empty ? 0.f : (T::kFp8 ? p.v_descale.at(b, hk) : 1.f) / l_sum;
  const int d = int(p.head_dim);
  const int qi = pr / a.group;
  const int64_t h = hk * a.group + pr % a.group;
  const int64_t prow = query_token(p, b, sq, qi) * p.heads_q + h;
  for (int chunk = tid % kPerRow; chunk < kCpr && chunk * 8 < d; chunk += kPerRow) {
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] += f[w] * red_o[(w * kBlockM + r) * kStride + chunk * 8 + e];
    if (a.splits == 1) {
      uint4 packed;
      packed.x = pack2<Tag>(acc[0] * inv, acc[1] * inv);
      packed.y = pack2<Tag>(acc[2] * inv, acc[3] * inv);
      packed.z = pack2<Tag>(acc[4] * inv, acc[5] * inv);
      packed.w = pack2<Tag>(acc[6] * inv, acc[7] * inv);
      *reinterpret_cast<uint4*>(p.out.at<uint16_t>(b, sq.q_start + qi, h) + chunk * 8) = packed;
    } else {
      float4* dst = reinterpret_cast<float4*>(a.part_o + (split * a.part_rows + prow) * p.head_dim + chunk * 8);
      dst[0] = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
      dst[1] = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
    }
  }
  if (tid % kPerRow == 0) {
    // LSE in natural units: the max is in raw-score units unless the logits were transformed.
    const float m_nat = keys.transform ? m_top : m_top * keys.scale;
    const float lse = empty ? sm80::kNegInf : m_nat + logf(l_sum);
    if (a.splits > 1)
      a.part_lse[split * a.part_rows + prow] = lse;
    else if (p.lse.data != nullptr)
      p.lse.at(b, h, sq.q_start + qi) = lse;
  }
}

}  // namespace fa::cuda::kvcache
