// The ends of the sm80 backward's main kernel (bwd_kernel.cuh): a key tile's dK and dV from the
// warps' registers to dk / dv, whole (store_dk_dv) or as one part of a split tail tile
// (tail_part_epilogue).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/arch/memory.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/bwd_sm80.h"
#include "cuda/kernels/sm80/bwd_step.cuh"
#include "cuda/kernels/sm80/bwd_traits.h"
#include "cuda/kernels/sm80/tile_ranges.h"

namespace fa::cuda::sm80 {

// Where a key tile's gradients go: dk / dv from row row0 of kv head hk, batch entry b (the
// tile's first key), its keys (rows below keys are written) and the head dim (columns below d).
// The row addresses are formed where they are stored from (an epilogue), not before. E: the
// element type, uint16_t (the inputs' 16-bit dtype) or float (fp32 dk and dv, which the
// epilogues choose at run time: no kernel of their own).
struct KvGrads {
  int64_t b, row0, hk, keys;
  int d;
  template <typename E>
  __device__ __forceinline__ E* dk0(const Params& p) const {
    return p.dk.at<E>(b, row0, hk);
  }
  template <typename E>
  __device__ __forceinline__ E* dv0(const Params& p) const {
    return p.dv.at<E>(b, row0, hk);
  }
  // dk and dv in fp32 (the CUDA checks take both fp32 or neither).
  __device__ __forceinline__ static bool f32(const Params& p) { return p.dk.dtype == DType::F32; }
};

// A block's part of a split tail tile (BwdWorkspace): the tail tile `slot`, which of the block's
// two partial sums (seg: 0 its first tile, 1 its second), its `part` steps of the tile's `steps`.
struct TailPart {
  int64_t slot;
  int seg, part, steps;
};

// The end of a part of a split tail tile (bwd_block): this block's dK / dV (dV times dv_scale)
// stored whole as its partial sum `seg` (0: its first tile, 1: its second; blocks of the tail
// span two at most), its `part` steps counted on the tile. The block whose count completes the
// tile's `steps` adds every part's sum in block order (so that dk / dv do not depend on which
// block finishes last) and writes dk / dv (KvGrads). flag: a shared int no thread reads
// meanwhile.
template <class T>
__device__ __forceinline__ void tail_part_epilogue(const Params& p, const BwdWorkspace& ws,
                                                   const BwdWarpTiles<T>& w,
                                                   const typename BwdWarpTiles<T>::KvAcc& dk,
                                                   const typename BwdWarpTiles<T>::KvAcc& dv,
                                                   float dv_scale, const TailPart& tp,
                                                   const KvGrads& out, volatile int* flag) {
  const int64_t slot = tp.slot;
  const int seg = tp.seg, part = tp.part, steps = tp.steps;
  const int kv_key0 = w.kv_key0, kv_col0 = w.kv_col0, g = w.g, t = w.t;
  const int keys = int(out.keys), d = out.d;
  using Tag = typename T::Tag;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN;
  constexpr int64_t kPart = int64_t(bwd_tail_part_elems(kD));  // dK at 0, dV at kPart / 2
  const TailShare share{ws.tail_units, ws.tail_ctas};
  auto part_of = [&](int64_t c, int sg) {
    return ws.tail_part + (kBwdTailSlots * c + sg) * kPart;
  };
  float* own = part_of(blockIdx.x, seg);
#pragma unroll
  for (int mt = 0; mt < T::kKvKeys / 16; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nd = 0; nd < T::kKvCols / 8; ++nd) {
        const int off = (kv_key0 + 16 * mt + g + 8 * r) * kD + kv_col0 + 8 * nd + 2 * t;
        *reinterpret_cast<float2*>(own + off) =
            make_float2(dk[mt][nd][2 * r], dk[mt][nd][2 * r + 1]);
        *reinterpret_cast<float2*>(own + kPart / 2 + off) =
            make_float2(dv[mt][nd][2 * r] * dv_scale, dv[mt][nd][2 * r + 1] * dv_scale);
      }
  // Every thread's stores before the count (release), the last block's reads after it (acquire,
  // then the barrier).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = add_acq_rel(ws.tail_cnt + slot, part) + part == steps;
  __syncthreads();
  if (!*flag) return;
  const int64_t c_lo = share.block_of(slot * steps);
  const int64_t c_hi = share.block_of(slot * steps + steps - 1);
  // Each thread sums kCpt chunks of 8 columns (two float4 of dK, two of dV a part), all chunks of
  // a part before the next part: 4 kCpt independent loads in flight (one part's chunk at a time
  // left the block waiting on the L2 once per chunk and part: at d 64 with 33 parts a tile, the
  // tail cost more than it saved).
  constexpr int kChunks = kD / 8, kCpt = kN * kChunks / T::kThreads;
  static_assert(kN * kChunks % T::kThreads == 0, "whole chunks a thread");
  float4 sk[kCpt][2], sv[kCpt][2];
#pragma unroll
  for (int i = 0; i < kCpt; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) sk[i][h] = sv[i][h] = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [](float4& a, const float4 b) { a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w; };
  for (int64_t q = c_lo; q <= c_hi; ++q) {
    // Block q's sum for this tile: its first (slot 0) unless its steps start in an earlier tile.
    const float* src = part_of(q, share.first(q) / steps == slot ? 0 : 1);
#pragma unroll
    for (int i = 0; i < kCpt; ++i) {
      const int c = int(threadIdx.x) + i * T::kThreads;
      const float4* k4 = reinterpret_cast<const float4*>(src + c / kChunks * kD + c % kChunks * 8);
      const float4* v4 = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(k4) +
                                                         kPart / 2);
      add(sk[i][0], __ldcg(k4));
      add(sk[i][1], __ldcg(k4 + 1));
      add(sv[i][0], __ldcg(v4));
      add(sv[i][1], __ldcg(v4 + 1));
    }
  }
  if (KvGrads::f32(p)) {  // the sums as they are, two 16-byte stores a chunk
    float* const dk0 = out.dk0<float>(p);
    float* const dv0 = out.dv0<float>(p);
#pragma unroll
    for (int i = 0; i < kCpt; ++i) {
      const int c = int(threadIdx.x) + i * T::kThreads;
      const int row = c / kChunks, col = c % kChunks * 8;
      if (row < keys && col < d) {
        float4* k4 = reinterpret_cast<float4*>(dk0 + row * p.dk.stride_s + col);
        float4* v4 = reinterpret_cast<float4*>(dv0 + row * p.dv.stride_s + col);
        k4[0] = sk[i][0], k4[1] = sk[i][1];
        v4[0] = sv[i][0], v4[1] = sv[i][1];
      }
    }
    return;
  }
  uint16_t* const dk0 = out.dk0<uint16_t>(p);
  uint16_t* const dv0 = out.dv0<uint16_t>(p);
#pragma unroll
  for (int i = 0; i < kCpt; ++i) {
    const int c = int(threadIdx.x) + i * T::kThreads;
    const int row = c / kChunks, col = c % kChunks * 8;
    if (row < keys && col < d) {
      *reinterpret_cast<uint4*>(dk0 + row * p.dk.stride_s + col) =
          make_uint4(pack2<Tag>(sk[i][0].x, sk[i][0].y), pack2<Tag>(sk[i][0].z, sk[i][0].w),
                     pack2<Tag>(sk[i][1].x, sk[i][1].y), pack2<Tag>(sk[i][1].z, sk[i][1].w));
      *reinterpret_cast<uint4*>(dv0 + row * p.dv.stride_s + col) =
          make_uint4(pack2<Tag>(sv[i][0].x, sv[i][0].y), pack2<Tag>(sv[i][0].z, sv[i][0].w),
                     pack2<Tag>(sv[i][1].x, sv[i][1].y), pack2<Tag>(sv[i][1].z, sv[i][1].w));
    }
  }
}

// fp32 dk / dv of a whole key tile (16-bit inputs): 8-byte stores straight from the fragments.
// A call, not inlined: inlined into bwd_block, these stores raised the 16-bit tail kernel's
// spills (sm_90a, bf16 d 128, bytes stored: 436 -> 584; staged through sK / sV as the 16-bit
// path does, 840); called, 408, the accumulators passing through the stack on this path only.
template <class T>
__device__ __noinline__ void store_dk_dv_f32(const Params& p, const BwdWarpTiles<T>& w,
                                             const typename BwdWarpTiles<T>::KvAcc& dk,
                                             const typename BwdWarpTiles<T>::KvAcc& dv,
                                             float dv_scale, const KvGrads& out) {
  constexpr int kKvMt = BwdWarpTiles<T>::kKvMt, kKvNt = BwdWarpTiles<T>::kKvNt;
  float* const dk0 = out.dk0<float>(p);
  float* const dv0 = out.dv0<float>(p);
#pragma unroll
  for (int mt = 0; mt < kKvMt; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = w.kv_key0 + 16 * mt + w.g + 8 * r;
#pragma unroll
      for (int nd = 0; nd < kKvNt; ++nd) {
        const int col = w.kv_col0 + 8 * nd + 2 * w.t;
        if (row < out.keys && col < out.d) {
          *reinterpret_cast<float2*>(dk0 + row * p.dk.stride_s + col) =
              make_float2(dk[mt][nd][2 * r], dk[mt][nd][2 * r + 1]);
          *reinterpret_cast<float2*>(dv0 + row * p.dv.stride_s + col) =
              make_float2(dv[mt][nd][2 * r] * dv_scale, dv[mt][nd][2 * r + 1] * dv_scale);
        }
      }
    }
}

// dK, dV of a whole key tile (dV times dv_scale) into dk / dv, through sK / sV (whose K and V
// no warp reads any more).
template <class T>
__device__ __forceinline__ void store_dk_dv(const Params& p, const BwdWarpTiles<T>& w,
                                            const typename BwdWarpTiles<T>::KvAcc& dk,
                                            const typename BwdWarpTiles<T>::KvAcc& dv,
                                            float dv_scale, const KvGrads& out, uint16_t* sK,
                                            uint16_t* sV) {
  using Tag = typename T::Tag;
  using KvTile = typename T::KvTile;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN;
  constexpr int kKvMt = BwdWarpTiles<T>::kKvMt, kKvNt = BwdWarpTiles<T>::kKvNt;
  if (KvGrads::f32(p)) return store_dk_dv_f32<T>(p, w, dk, dv, dv_scale, out);
  const int tid = threadIdx.x, kv_key0 = w.kv_key0, kv_col0 = w.kv_col0, g = w.g, t = w.t;
  // dK, dV of the warp's keys and columns (zero for keys no query sees), staged as 16-bit values
  // in the K and V tiles, so that they leave in 16-byte row-contiguous stores: 4-byte stores
  // straight from the fragments touch each row's sector 8 times over and took 2-3x FA2's
  // epilogue stall samples (ncu, d = 64 / 256, 1k).
#pragma unroll
  for (int mt = 0; mt < kKvMt; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = kv_key0 + 16 * mt + g + 8 * r;
#pragma unroll
      for (int nd = 0; nd < kKvNt; ++nd) {
        const int off = KvTile::offset(row, kv_col0 + 8 * nd + 2 * t);
        *reinterpret_cast<uint32_t*>(sK + off) =
            pack2<Tag>(dk[mt][nd][2 * r], dk[mt][nd][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(sV + off) =
            pack2<Tag>(dv[mt][nd][2 * r] * dv_scale, dv[mt][nd][2 * r + 1] * dv_scale);
      }
    }
  __syncthreads();
  constexpr int kChunksPerRow = kD / 8;  // 16-byte chunks
  const int chunks_used = out.d / 8;     // head_dim may be below the instantiation's
  // Row addresses from the block's first key row (one 64-bit product a row instead of the full
  // (b, row, head) product): ptxas then spilled less in the step loop (sm_90a, bytes stored, at
  // 4832f96: d 64 with 128 queries 128 -> 116, d 128 48 -> 36, d 256 12 -> 0; d 32 with 128
  // queries 32 -> 56, d 192 0 -> 4, d 224 60 -> 64) and measured 0-1.3% faster.
  uint16_t* const dk0 = out.dk0<uint16_t>(p);
  uint16_t* const dv0 = out.dv0<uint16_t>(p);
  const int rows_out = int(out.keys);
#pragma unroll
  for (int c = tid; c < kN * kChunksPerRow; c += T::kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    if (row < rows_out && chunk < chunks_used) {
      const int off = KvTile::offset(row, chunk * 8);
      *reinterpret_cast<uint4*>(dk0 + row * p.dk.stride_s + chunk * 8) =
          *reinterpret_cast<const uint4*>(sK + off);
      *reinterpret_cast<uint4*>(dv0 + row * p.dv.stride_s + chunk * 8) =
          *reinterpret_cast<const uint4*>(sV + off);
    }
  }
}


}  // namespace fa::cuda::sm80
