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
// merges them per row with core/combine.h's rule, or the last part of a block's rows to finish
// does (Tuning::kvcache_fused_merge: merge_if_last). kv_prepare_kernel runs first when the call
// appends k_new / v_new (rotary applied to the keys) or rotates q (into the workspace).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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
#include "cuda/kernels/kvcache/kv_block.cuh"
#include "cuda/kernels/kvcache/kv_seq.cuh"
#include "cuda/kernels/kvcache/plan.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::kvcache {

// The kernel's configuration: what the sm80 forward's warp-level parts (QkGemm, PvGemm,
// softmax_update, pack_p) read of a traits struct, and the block's tiles, rings and threads.
// Tag: the products' 16-bit type; kFp8: q, k, v are e4m3, converted to fp16 (Tag) as they land
// in shared memory; OutTag: out's type (Tag's unless the inputs are fp8).
template <int kHeadDim_, typename Tag_, bool kFp8_ = false, typename OutTag_ = Tag_>
struct KvTraits {
  using Tag = Tag_;
  using OutTag = OutTag_;
  static constexpr bool kFp8 = kFp8_;
  static_assert(!kFp8 || std::is_same_v<Tag, Fp16Tag>, "fp8 inputs are multiplied as fp16");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kDropout = false;       // the family serves no dropout
  static constexpr int kMTiles = 1;             // one m16 tile: the block's 16 packed rows
  static constexpr int kRowsPerWarp = kBlockM;  // every warp takes the block's 16 rows
  // No lazy rescale (sm80/fwd_tile.cuh, softmax_update): it saves arithmetic that a memory-bound
  // decode does not need, and lets a row's largest P round by up to 2^-9 of itself (emulated on
  // the CPU: the page-256 bf16 test case's 0.0042 against the rule's 0.0027 becomes 0.00135).
  static constexpr bool kLazyRescale = false;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  static constexpr int kBlockN = kvcache::kBlockN;
  static constexpr int kStages = kvcache::kStages;
  static constexpr int kWarps = warps_for(kHeadDim);
  static constexpr int kThreads = 32 * kWarps;
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  // A warp's ring, in 16-bit elements: its stages' (K, V) tiles; with fp8 inputs the stages'
  // tiles as bytes (kHeadDim a row, kStageElems each) and then the 16-bit (K, V) pair they are
  // converted into, one tile at a time.
  static constexpr int kStageElems = kBlockN * kHeadDim / 2;
  static constexpr int kWarpElems =
      kFp8 ? kStages * 2 * kStageElems + 2 * KvTile::kElems : kStages * 2 * KvTile::kElems;
  static constexpr int kSmemBytes = 2 * (QTile::kElems + kWarps * kWarpElems);
  static_assert(kSmemBytes == smem_bytes(kHeadDim, kFp8), "plan.h's shared-memory figure");
  static_assert(kSmemBytes <= kSmemLimit, "a block must fit sm86 / sm89's shared memory");
  // The merge's scratch goes over the rings (kv_block.cuh, merge_store).
  static_assert(4 * merge_floats<kHeadDim, kWarps>() <= 2 * kWarps * kWarpElems,
                "the merge fits over the rings");
};

// The split parts merged per row (core/combine.h's rule): one warp a row of out. Its lanes read
// the parts' LSEs side by side (lane j those of parts j, j + 32, ...) and reduce the merged LSE
// by shuffles; then each lane sums its columns (a float4 of each part) over the parts,
// kCombineBatch loads in flight, each part's weight taken from the lane that holds it. (Parts
// read one after another, each a branch on its LSE before its O, waited out about three L2 round
// trips a part: at 49 parts, some 25 us of a decode step.) Plain loads also when the attention
// kernel merges, while other SMs' blocks wrote the partials in the same kernel: no block of this
// SM has read those lines before (a row's partials are read once, by its last part), so its L1
// holds none of them stale. (ld.global.cg through inline assembly would serialise the batch.)
constexpr int kCombineWarps = 4;
constexpr int kCombineCols = 4;                  // columns a lane a pass: one float4 of each part
constexpr int kCombineSlots = kMaxSplits / 32;   // parts a lane holds the LSE and weight of
constexpr int kCombineBatch = 8;                 // parts whose float4 a lane loads before summing
static_assert(kMaxSplits % 32 == 0 && 32 % kCombineBatch == 0, "whole slots and batches");

// Row prow of the partials (query token * heads_q + head) merged into out and lse by one warp.
template <typename Tag>
__device__ __forceinline__ void combine_row(const Params& p, const KvArgs& a, int64_t prow,
                                            int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  constexpr float kNegInf = -INFINITY;
  const int n = a.splits;
  float lse_i[kCombineSlots], top = kNegInf;
#pragma unroll
  for (int k = 0; k < kCombineSlots; ++k) {
    const int s = lane + 32 * k;
    lse_i[k] = s < n ? a.part_lse[int64_t(s) * a.part_rows + prow] : kNegInf;
    top = fmaxf(top, lse_i[k]);
  }
#pragma unroll
  for (int m = 16; m > 0; m /= 2) top = fmaxf(top, __shfl_xor_sync(kAll, top, m));
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kCombineSlots; ++k) sum += lse_term(lse_i[k], top);
#pragma unroll
  for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(kAll, sum, m);
  const float lse = lse_from(top, sum);
  float w[kCombineSlots];
#pragma unroll
  for (int k = 0; k < kCombineSlots; ++k) w[k] = part_weight(lse_i[k], lse);

  const int64_t token = prow / p.heads_q, h = prow % p.heads_q;
  // Fixed-length batches number their rows b * seqlen_q + i; packed ones by their packed row.
  const int64_t b = p.varlen() ? 0 : token / p.seqlen_q, row = p.varlen() ? token : token % p.seqlen_q;
  const int d = int(p.head_dim);
  const int64_t part_stride = a.part_rows * d;  // floats from a part's row to the next part's
  for (int c0 = 0; c0 < d; c0 += kCombineCols * 32) {  // every lane takes every pass (shuffles)
    const int c = c0 + kCombineCols * lane;
    const bool live = c < d;
    // Lanes past head_dim read column 0 and parts past the last read the last: every load is
    // in bounds and unpredicated, so the batch's loads go out together; their values are not used.
    const float* col = a.part_o + prow * d + (live ? c : 0);
    float acc[kCombineCols] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kCombineSlots; ++k) {
      if (32 * k >= n) break;
      for (int j0 = 0; j0 < 32 && 32 * k + j0 < n; j0 += kCombineBatch) {
        // The batch's loads first; an empty part's O (weight 0) is loaded but never used
        // (core/combine.h: it may hold anything).
        float4 v[kCombineBatch];
#pragma unroll
        for (int u = 0; u < kCombineBatch; ++u) {
          const int s = min(32 * k + j0 + u, n - 1);
          v[u] = *reinterpret_cast<const float4*>(col + s * part_stride);
        }
#pragma unroll
        for (int u = 0; u < kCombineBatch; ++u) {
          const float wu = __shfl_sync(kAll, w[k], j0 + u);  // 0 past the parts (LSE -inf)
          if (wu != 0.f) {
            acc[0] += wu * v[u].x;
            acc[1] += wu * v[u].y;
            acc[2] += wu * v[u].z;
            acc[3] += wu * v[u].w;
          }
        }
      }
    }
    if (live) {
      uint2 packed;
      packed.x = pack2<Tag>(acc[0], acc[1]);
      packed.y = pack2<Tag>(acc[2], acc[3]);
      *reinterpret_cast<uint2*>(p.out.at<uint16_t>(b, row, h) + c) = packed;
    }
  }
  if (lane == 0 && p.lse.data != nullptr) p.lse.at(b, h, row) = lse;
}

template <typename Tag>
__global__ void __launch_bounds__(32 * kCombineWarps) kv_combine_kernel(
    const __grid_constant__ Params p, const KvArgs a) {
  grid_dependency_wait();  // the attention kernel's parts (a no-op when launched plainly)
  const int64_t prow = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (prow >= a.part_rows) return;  // the whole warp: prow is the warp's
  combine_row<Tag>(p, a, prow, int(threadIdx.x % 32));
}

// The merge inside the attention kernel (KvArgs::counters): after a part's block has written its
// partials, it counts itself in on its rows' counter (its writes fenced first, so that whoever
// sees the count sees them); the block that brings the count to a.splits is the last of its rows'
// parts and merges them, a warp a row, as kv_combine_kernel would. flag: a word of shared memory
// that nothing else uses any more (the Q tile's first).
template <typename Tag, int kW>
__device__ __forceinline__ void merge_if_last(const Params& p, const KvArgs& a, const KvSeq& sq,
                                              int64_t b, int64_t hk, int tile, int r0,
                                              int rows_total, int tid, int* flag) {
  __threadfence();  // this thread's partials, device-wide, before the count
  __syncthreads();  // ... every thread's
  if (tid == 0) {
    int32_t* counter = a.counters + (b * p.heads_kv + hk) * a.row_tiles + tile;
    *flag = atomicAdd(counter, 1) == a.splits - 1;
  }
  __syncthreads();
  if (!*flag) return;
  __threadfence();  // the other parts' partials, whose counts came before ours
  const int warp = tid / 32, lane = tid % 32;
  for (int r = warp; r < kBlockM && r0 + r < rows_total; r += kW) {
    const int pr = r0 + r;
    const int64_t h = hk * a.group + pr % a.group;
    combine_row<Tag>(p, a, query_token(p, b, sq, pr / a.group) * p.heads_q + h, lane);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads) kv_fwd_kernel(const __grid_constant__ Params p,
                                                             const KvArgs a) {
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  constexpr int kW = T::kWarps, kN = T::kBlockN, kS = T::kStages;
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

  const BlockKeys keys = block_keys<kN, T::kFp8>(p, a, sq, b, hk, r0, rows_total, split, g);
  const int key_lo = keys.key_lo, key_hi = keys.key_hi;

  // Q: the block's 16 rows, copied by every thread.
  copy_q_tile<T>(p, a, sq, b, hk, r0, rows_total, sQ, tid, T::kThreads);
  cp_async_commit();

  // This warp's key tiles: i-th at key key_lo + (warp + i kW) kN.
  const int n_tiles = (key_hi - key_lo + kN - 1) / kN;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kW - 1) / kW : 0;
  uint16_t* ring = smem + QTile::kElems + warp * T::kWarpElems;
  // A stage's K and V (16-bit tiles, or fp8 rows of bytes), and with fp8 the converted pair.
  constexpr int kStagePair = T::kFp8 ? 2 * T::kStageElems : 2 * KvTile::kElems;
  constexpr int kStageV = kStagePair / 2;
  uint16_t* converted = ring + kS * kStagePair;  // fp8 only
  auto load_kv = [&](int i, int stage) {
    uint16_t* st_k = ring + stage * kStagePair;
    const KvRows rows = lookup_rows<T>(p, sq, b, hk, key_lo + (warp + i * kW) * kN, key_hi, lane);
    if constexpr (T::kFp8)
      copy_rows_fp8<T>(p, rows, reinterpret_cast<uint8_t*>(st_k),
                       reinterpret_cast<uint8_t*>(st_k + kStageV), lane);
    else
      copy_rows<T>(p, rows, st_k, st_k + kStageV, lane);
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
    uint16_t* tile_k = ring + stage * kStagePair;
    if constexpr (T::kFp8) {  // each lane converts the chunks it copied
      convert_rows_fp8<T>(reinterpret_cast<const uint8_t*>(tile_k), converted, lane);
      convert_rows_fp8<T>(reinterpret_cast<const uint8_t*>(tile_k + kStageV),
                          converted + KvTile::kElems, lane);
      tile_k = converted;
    }
    __syncwarp();  // ... landed (and converted) for the warp's
    const uint32_t sK = smem_addr(tile_k);
    const uint32_t sV = sK + 2 * KvTile::kElems;
    float s[1][kN / 8][4];
    sm80::QkGemm<T>{smem_addr(sQ), sK, q_lane, k_lane, 0}.run(s);
    kv_transform_mask<T>(p, keys, key_lo + (warp + i * kW) * kN, s, lane);
    sm80::softmax_update<T, T::kLazyRescale>(s, o, st, keys.scale_log2);
    sm80::PackedP<T> pp;
    sm80::pack_p<T>(s, pp);
    sm80::PvGemm<T>{sV, v_lane}.run(o, pp);
    __syncwarp();  // every lane done reading this stage before the next iteration refills it
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp done with its ring: the merge's scratch goes over them

  merge_store<T, kW>(p, a, sq, b, hk, r0, rows_total, split, keys, st, o,
                     reinterpret_cast<float*>(smem + QTile::kElems), tid, [] { __syncthreads(); });
  if (a.splits > 1 && a.counters != nullptr)
    merge_if_last<typename T::OutTag, kW>(p, a, sq, b, hk, tile, r0, rows_total, tid,
                                       reinterpret_cast<int*>(sQ));
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
