// The cuda-kvcache family: attention against a KV cache (dense or paged with any page size,
// cache_seqlens, cache_batch_idx, cache_leftpad), split-KV, GQA packing, the append of new keys
// and values with rotary, on mma.sync + cp.async (sm80 and later: decode is memory-bound, and
// these instructions run on Hopper too).
//
// Attention, one block = (16 packed query rows, kv head, batch entry, split part). The rows pack
// the group of query heads that share the kv head: row r is query r / group of head
// hk * group + r % group, so every K / V byte a block reads serves all of them (GQA packing).
// The block's keys (the rows' visible range, cut into the split's part) are dealt out to its
// warps tile by tile (warp w takes tiles w, w + W, ...); each warp streams its tiles through its
// own ring of cp.async stages, synchronised by the warp alone (no block barrier in the loop), and
// runs the sm80 forward's online softmax over them (sm80/fwd_tile.cuh: Q·Kᵀ, softmax, P·V). The
// block then merges its warps' (O, m, l) through shared memory, as the combine step does parts.
// A paged cache is gathered row by row: lanes 0..15 of a warp look up the 16 rows of a tile
// (block table, page, cache row map) and the copy's lanes take their row's address by shuffle,
// so a page of any size, down to one row, costs the same as a dense row.
//
// Split calls write each part's normalised O (fp32) and LSE into the workspace; kv_combine_kernel
// merges them per row with core/combine.h's rule. kv_prepare_kernel runs first when the call
// appends k_new / v_new (rotary applied to the keys) or rotates q (into the workspace).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/combine.h"
#include "core/dtype.h"
#include "core/mask.h"
#include "core/params.h"
#include "core/rotary.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/exp2.cuh"
#include "cuda/arch/griddep.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/kvcache/kv_seq.cuh"
#include "cuda/kernels/kvcache/plan.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::kvcache {

// The sm80 forward's warp-level parts (QkGemm, PvGemm, softmax_update, pack_p) read these
// members of a traits struct.
template <int kHeadDim_, typename Tag_>
struct KvTraits {
  using Tag = Tag_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kDropout = false;
  static constexpr int kMTiles = 1;
  static constexpr int kRowsPerWarp = kBlockM;  // every warp computes the block's 16 rows
  static constexpr int kBlockN = kvcache::kBlockN;
  static constexpr int kStages = kvcache::kStages;
  static constexpr int kWarps = warps_for(kHeadDim);
  static constexpr int kThreads = 32 * kWarps;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
  static constexpr int kWarpElems = kStages * 2 * KvTile::kElems;  // a warp's ring
  static constexpr int kSmemBytes = 2 * (QTile::kElems + kWarps * kWarpElems);
  static_assert(kSmemBytes == smem_bytes(kHeadDim), "plan.h's shared-memory figure");
  static_assert(kSmemBytes <= kSmemLimit, "a block must fit sm86 / sm89's shared memory");
  // The merge's scratch over the rings: per warp its O rows (padded by 8 floats against bank
  // conflicts), then per warp its row maxima and sums.
  static constexpr int kMergeStride = kHeadDim + 8;
  static constexpr int kMergeFloats = kWarps * kBlockM * (kMergeStride + 2);
  static_assert(4 * kMergeFloats <= 2 * kWarps * kWarpElems, "the merge fits over the rings");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 32, "a tile's rows are looked up by one lane each");
  static_assert((kBlockN * kChunksPerRow) % 32 == 0, "every lane copies as many chunks");
  static_assert(kThreads % kBlockM == 0, "whole threads per row in the merge");
};

// What a launch adds to Params.
struct KvArgs {
  int32_t row_tiles;  // 16-row tiles of a (batch entry, kv head)
  int32_t splits;     // parts of the keys; 1: the kernel writes out and lse itself
  int32_t group;      // query heads per kv head, packed into the rows
  int64_t part_rows;  // rows of the partials: total_q * heads_q
  float* part_o;      // (splits, part_rows, head_dim), normalised
  float* part_lse;    // (splits, part_rows)
};

// The query token of row qi of sequence sq (the partials' and the combine's row numbering).
__device__ __forceinline__ int64_t query_token(const Params& p, int64_t b, const KvSeq& sq,
                                               int64_t qi) {
  return p.varlen() ? sq.q_start + qi : b * p.seqlen_q + qi;
}

// Raw-score transform (scale, softcap, ALiBi) and mask of one warp's S tile: element e of
// s[0][nt] is row g + 8 (e / 2) of the block, key k0 + 8 nt + 2 t + e % 2; row r sees the keys
// [lo[r], hi[r]) and sits at key position pos[r] (ALiBi's distance), with slope[r].
template <class T>
__device__ __forceinline__ void kv_transform_mask(const Params& p, bool transform, int k0,
                                                  const int (&lo)[2], const int (&hi)[2],
                                                  const int (&pos)[2], const float (&slope)[2],
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
        if (transform) {
          x *= p.softmax_scale;
          if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
          x -= slope[r] * fabsf(float(pos[r] - key));
        }
        s[0][nt][2 * r + e] = key >= lo[r] && key < hi[r] ? x : sm80::kNegInf;
      }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads) kv_fwd_kernel(const __grid_constant__ Params p,
                                                             const KvArgs a) {
  using Tag = typename T::Tag;
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  constexpr int kW = T::kWarps, kN = T::kBlockN, kS = T::kStages, kCpr = T::kChunksPerRow;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  // Launched as a programmatic dependent (Tuning::kvcache_pdl, kvcache_launch.cuh): the combine
  // may be launched once every block is running, and nothing is read before the kernel ahead on
  // the stream (the prepare kernel's appended keys, or the caller's last kernel) has completed.
  // Launched plainly, both are no-ops.
  grid_launch_dependents();
  grid_dependency_wait();

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4;
  const int tile = int(blockIdx.x % unsigned(a.row_tiles)), split = int(blockIdx.x / unsigned(a.row_tiles));
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  const KvSeq sq = kv_sequence(p, b);
  const int group = a.group, rows_total = sq.len_q * group, r0 = tile * kBlockM;
  if (r0 >= rows_total) return;  // past this sequence's rows (packed batches: a shorter one)
  const int d = int(p.head_dim);

  // The keys any of the block's queries [q_first, q_last] sees, then the split's part of them.
  const int q_first = r0 / group;
  const int q_last = ((r0 + kBlockM < rows_total ? r0 + kBlockM : rows_total) - 1) / group;
  const Visibility vis{sq.diag, p.window_left, p.window_right};
  int key_lo = int(vis.key_begin(q_first, sq.len_k));
  int key_hi = int(vis.key_end(q_last + 1, sq.len_k));
  if (key_hi < key_lo) key_hi = key_lo;
  if (a.splits > 1) {
    const int span = key_hi - key_lo;
    const int part = ((span + a.splits - 1) / a.splits + kN - 1) / kN * kN;
    const int s0 = key_lo + (split * part < span ? split * part : span);
    const int s1 = s0 + part < key_hi ? s0 + part : key_hi;
    key_lo = s0;
    key_hi = s1;
  }

  // Per thread, rows g and g + 8 of the block: their visible keys within the block's, their
  // position (ALiBi) and slope. Rows past the sequence see nothing.
  const bool transform = p.softcap > 0.f || p.alibi_slopes != nullptr || p.softmax_scale <= 0.f;
  const float scale_log2 = transform ? kLog2e : p.softmax_scale * kLog2e;
  int lo[2], hi[2], pos[2];
  float slope[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int pr = r0 + g + 8 * r, qi = pr / group;
    const int64_t h = hk * group + pr % group;
    const int vlo = int(vis.key_begin(qi, sq.len_k)), vhi = int(vis.key_end(qi + 1, sq.len_k));
    const bool live = pr < rows_total;
    lo[r] = live ? (vlo > key_lo ? vlo : key_lo) : 0;
    hi[r] = live ? (vhi < key_hi ? vhi : key_hi) : 0;
    pos[r] = qi + sq.diag;
    slope[r] = live && p.alibi_slopes != nullptr ? p.alibi_slope(b, h) : 0.f;
  }

  // Q: the block's 16 rows, copied by every thread (q is the rotated copy when rotary is on).
  for (int c = tid; c < kBlockM * kCpr; c += T::kThreads) {
    const int r = c / kCpr, col = (c % kCpr) * 8, pr = r0 + r;
    const bool valid = pr < rows_total && col < d;
    const uint16_t* src = static_cast<const uint16_t*>(p.q.data);
    if (valid)
      src = p.q.at<const uint16_t>(b, sq.q_start + pr / group, hk * group + pr % group) + col;
    cp_async_16(smem_addr(sQ + QTile::offset(r, col)), src, valid);
  }
  cp_async_commit();

  // This warp's key tiles: i-th at key key_lo + (warp + i kW) kN.
  const int n_tiles = (key_hi - key_lo + kN - 1) / kN;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kW - 1) / kW : 0;
  uint16_t* ring = smem + QTile::kElems + warp * T::kWarpElems;
  const uint16_t* kbase = static_cast<const uint16_t*>(p.k.data);
  const uint16_t* vbase = static_cast<const uint16_t*>(p.v.data);
  auto load_kv = [&](int i, int stage) {
    const int k0 = key_lo + (warp + i * kW) * kN;
    int64_t ok = 0, ov = 0;
    const bool row_ok = lane < kN && k0 + lane < key_hi;
    if (row_ok) {
      const int row = sq.k_start + k0 + lane;  // the cache row of this lane's key
      ok = cache_row_offset(p, p.k, b, row, hk);
      ov = cache_row_offset(p, p.v, b, row, hk);
    }
    const unsigned rows_ok = __ballot_sync(0xffffffffu, row_ok);
    uint16_t* sK = ring + stage * 2 * KvTile::kElems;
    uint16_t* sV = sK + KvTile::kElems;
#pragma unroll
    for (int i = 0; i < kN * kCpr / 32; ++i) {
      const int c = lane + 32 * i, r = c / kCpr, col = (c % kCpr) * 8;
      const int64_t rk = __shfl_sync(0xffffffffu, ok, r), rv = __shfl_sync(0xffffffffu, ov, r);
      const bool valid = ((rows_ok >> r) & 1u) != 0 && col < d;
      cp_async_16(smem_addr(sK + KvTile::offset(r, col)), valid ? kbase + rk + col : kbase, valid);
      cp_async_16(smem_addr(sV + KvTile::offset(r, col)), valid ? vbase + rv + col : vbase, valid);
    }
  };
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    if (i < my_tiles) load_kv(i, i);
    cp_async_commit();
  }
  cp_async_wait<kS - 1>();  // Q (the oldest group) landed for this thread's copies
  __syncthreads();          // ... and for everyone's

  float o[1][T::kHeadDim / 8][4];
#pragma unroll
  for (int nd = 0; nd < T::kHeadDim / 8; ++nd) o[0][nd][0] = o[0][nd][1] = o[0][nd][2] = o[0][nd][3] = 0.f;
  sm80::FwdState<1> st;
  st.m[0][0] = st.m[0][1] = sm80::kNegInf;
  st.l[0][0] = st.l[0][1] = 0.f;
  const auto q_lane = sm80::a_lane<QTile>(lane);
  const auto k_lane = sm80::bt_lane<KvTile>(lane);
  const auto v_lane = sm80::a_lane<KvTile>(lane);

  for (int i = 0; i < my_tiles; ++i) {
    const int stage = i % kS;
    // The stage tile i + kS - 1 goes to was read in iteration i - 1, which every lane finished.
    if (i + kS - 1 < my_tiles) load_kv(i + kS - 1, (i + kS - 1) % kS);
    cp_async_commit();
    cp_async_wait<kS - 1>();  // tile i landed for this lane's copies
    __syncwarp();             // ... and for the warp's
    const uint32_t sK = smem_addr(ring + stage * 2 * KvTile::kElems);
    const uint32_t sV = sK + 2 * KvTile::kElems;
    float s[1][kN / 8][4];
    sm80::QkGemm<T>{smem_addr(sQ), sK, q_lane, k_lane, 0}.run(s);
    kv_transform_mask<T>(p, transform, key_lo + (warp + i * kW) * kN, lo, hi, pos, slope, s, lane);
    sm80::softmax_update<T>(s, o, st, scale_log2);
    sm80::PackedP<T> pp;
    sm80::pack_p<T>(s, pp);
    sm80::PvGemm<T>{sV, v_lane}.run(o, pp);
    __syncwarp();  // every lane done reading this stage before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp done with its ring: the merge's scratch goes over them

  // Merge the warps: row maxima m_w (the softmax's units), sums l_w and O_w; with M = max m_w
  // and f_w = 2^((m_w - M) scale_log2), O = Σ f_w O_w / Σ f_w l_w.
  float* red_o = reinterpret_cast<float*>(smem + QTile::kElems);
  float* red_m = red_o + kW * kBlockM * T::kMergeStride;
  float* red_l = red_m + kW * kBlockM;
  const int t = lane % 4;
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
      red_o[row * T::kMergeStride + nd * 8 + 2 * t] = o[0][nd][2 * r];
      red_o[row * T::kMergeStride + nd * 8 + 2 * t + 1] = o[0][nd][2 * r + 1];
    }
  }
  __syncthreads();

  constexpr int kPerRow = T::kThreads / kBlockM;  // threads a row
  const int r = tid / kPerRow, pr = r0 + r;
  if (pr >= rows_total) return;
  float m_top = sm80::kNegInf;
#pragma unroll
  for (int w = 0; w < kW; ++w) m_top = fmaxf(m_top, red_m[w * kBlockM + r]);
  float f[kW], l_sum = 0.f;
#pragma unroll
  for (int w = 0; w < kW; ++w) {
    const float mw = red_m[w * kBlockM + r];
    f[w] = mw == sm80::kNegInf ? 0.f : exp2f((mw - m_top) * scale_log2);
    l_sum += f[w] * red_l[w * kBlockM + r];
  }
  const bool empty = l_sum == 0.f;  // no visible key in this part: O = 0, LSE = -inf
  const float inv = empty ? 0.f : 1.f / l_sum;
  const int qi = pr / group;
  const int64_t h = hk * group + pr % group;
  const int64_t prow = query_token(p, b, sq, qi) * p.heads_q + h;
  for (int chunk = tid % kPerRow; chunk < kCpr && chunk * 8 < d; chunk += kPerRow) {
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
    for (int w = 0; w < kW; ++w)
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] += f[w] * red_o[(w * kBlockM + r) * T::kMergeStride + chunk * 8 + e];
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
    const float m_nat = transform ? m_top : m_top * p.softmax_scale;
    const float lse = empty ? sm80::kNegInf : m_nat + logf(l_sum);
    if (a.splits > 1)
      a.part_lse[split * a.part_rows + prow] = lse;
    else if (p.lse.data != nullptr)
      p.lse.at(b, h, sq.q_start + qi) = lse;
  }
}

// The split parts merged per row (core/combine.h): one warp a row of out, kCombineCols columns
// a lane per pass (one float4 of each part).
constexpr int kCombineWarps = 4;
constexpr int kCombineCols = 4;
template <typename Tag>
__global__ void __launch_bounds__(32 * kCombineWarps) kv_combine_kernel(
    const __grid_constant__ Params p, const KvArgs a) {
  grid_dependency_wait();  // the attention kernel's parts (a no-op when launched plainly)
  const int lane = threadIdx.x % 32;
  const int64_t prow = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (prow >= a.part_rows) return;
  const int64_t token = prow / p.heads_q, h = prow % p.heads_q;
  const float* lse_col = a.part_lse + prow;
  const auto lse_of = [&](int64_t s) { return lse_col[s * a.part_rows]; };
  const float lse = merged_lse<float>(lse_of, a.splits);
  const int d = int(p.head_dim);
  // Fixed-length batches number their rows b * seqlen_q + i; packed ones by their packed row.
  const int64_t b = p.varlen() ? 0 : token / p.seqlen_q, row = p.varlen() ? token : token % p.seqlen_q;
  for (int c = kCombineCols * lane; c < d; c += kCombineCols * 32) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < a.splits; ++s) {
      const float w = part_weight(lse_of(s), lse);
      if (w == 0.f) continue;  // an empty part: its O is not read
      const float4 v = *reinterpret_cast<const float4*>(a.part_o + (s * a.part_rows + prow) * d + c);
      acc[0] += w * v.x;
      acc[1] += w * v.y;
      acc[2] += w * v.z;
      acc[3] += w * v.w;
    }
    uint2 packed;
    packed.x = pack2<Tag>(acc[0], acc[1]);
    packed.y = pack2<Tag>(acc[2], acc[3]);
    *reinterpret_cast<uint2*>(p.out.at<uint16_t>(b, row, h) + c) = packed;
  }
  if (lane == 0 && p.lse.data != nullptr) p.lse.at(b, h, row) = lse;
}

// Element j of a rotary table row (fp32 or the inputs' 16-bit type).
__device__ __forceinline__ float rotary_at(const void* base, DType t, int64_t stride, int64_t pos,
                                           int j) {
  switch (t) {
    case DType::F16: return to_float(static_cast<const half_t*>(base)[pos * stride + j]);
    case DType::BF16: return to_float(static_cast<const bfloat16_t*>(base)[pos * stride + j]);
    default: return static_cast<const float*>(base)[pos * stride + j];
  }
}

// dst[c] for c < d: src rotated at pos in its first rotary.dim elements (core/rotary.h), copied
// beyond. src and dst do not overlap.
template <typename E>
__device__ __forceinline__ void rotate_row(const Params::Rotary& ro, int32_t pos, const E* src,
                                           E* dst, int d, int c0, int step) {
  const int half = int(ro.dim / 2);
  for (int c = c0; c < d; c += step) {
    if (c >= ro.dim) {
      dst[c] = src[c];
      continue;
    }
    const int j = ro.interleaved ? c / 2 : (c < half ? c : c - half);
    const bool first = ro.interleaved ? c % 2 == 0 : c < half;
    float x1 = to_float(src[rotary_first(j, ro.interleaved)]);
    float x2 = to_float(src[rotary_second(j, ro.dim, ro.interleaved)]);
    rotate_pair(x1, x2, rotary_at(ro.cos, ro.dtype, ro.cos_stride_s, pos, j),
                rotary_at(ro.sin, ro.dtype, ro.sin_stride_s, pos, j));
    dst[c] = convert<E>(first ? x1 : x2);
  }
}

// Before the attention: blocks x in [0, batch * seqlen_new) append row j of entry b's k_new /
// v_new at cache row cache_seqlens[b] + j, the keys rotated at that position; the next
// batch * seqlen_q blocks (rotary only) write q rotated into q_rot (batch, seqlen_q, heads_q, d).
// Block y takes heads y, y + gridDim.y, ... (kv heads for an append, query heads for q): one row
// a block, so the rows' loads are in flight together (a block walking every head of its row
// waited out one load latency a head: +20 to +45 us a call on the H200 at 8 / 32 kv heads).
// Positions are clamped into the rotary tables (validation checks them only where it can read
// cache_seqlens).
constexpr int kPrepareThreads = 128;  // a row's head_dim elements
template <typename E>
__global__ void __launch_bounds__(kPrepareThreads) kv_prepare_kernel(
    const __grid_constant__ Params p, E* q_rot) {
  grid_launch_dependents();  // the attention kernel may be launched (it waits for this one)
  const int d = int(p.head_dim);
  const Params::Rotary& ro = p.rotary;
  const int32_t last_pos = ro.dim > 0 ? int32_t(ro.seqlen) - 1 : 0;
  const int64_t appends = p.batch * p.seqlen_new;
  if (int64_t(blockIdx.x) < appends) {
    const int64_t b = blockIdx.x / p.seqlen_new, j = blockIdx.x % p.seqlen_new;
    const KvSeq sq = kv_sequence(p, b);
    const int32_t row = sq.cached + int32_t(j);
    const int32_t rpos = row < last_pos ? row : last_pos;
    for (int64_t hk = blockIdx.y; hk < p.heads_kv; hk += gridDim.y) {
      const E* kn = p.k_new.at<const E>(b, j, hk);
      const E* vn = p.v_new.at<const E>(b, j, hk);
      E* kd = static_cast<E*>(p.k.data) + cache_row_offset(p, p.k, b, row, hk);
      E* vd = static_cast<E*>(p.v.data) + cache_row_offset(p, p.v, b, row, hk);
      for (int c = threadIdx.x; c < d; c += blockDim.x) vd[c] = vn[c];
      if (ro.dim > 0) {
        rotate_row<E>(ro, rpos, kn, kd, d, threadIdx.x, blockDim.x);
      } else {
        for (int c = threadIdx.x; c < d; c += blockDim.x) kd[c] = kn[c];
      }
    }
    return;
  }
  const int64_t t = int64_t(blockIdx.x) - appends;  // < batch * seqlen_q
  const int64_t b = t / p.seqlen_q, i = t % p.seqlen_q;
  const KvSeq sq = kv_sequence(p, b);
  int32_t qpos = int32_t(rotary_query_position(sq.cached, i, ro.q_positions_advance));
  qpos = qpos < last_pos ? qpos : last_pos;
  for (int64_t h = blockIdx.y; h < p.heads_q; h += gridDim.y)
    rotate_row<E>(ro, qpos, p.q.at<const E>(b, i, h),
                  q_rot + ((b * p.seqlen_q + i) * p.heads_q + h) * d, d, threadIdx.x, blockDim.x);
}

}  // namespace fa::cuda::kvcache
