// The backward's small kernels around the main one (bwd_kernel.cuh): bwd_preprocess (scale · D,
// LSE · log2 e and the cleared dQ accumulator, per query row) and bwd_postprocess (the fp32 dQ
// accumulator in the input type, into dq), with the row addressing they share with it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/params.h"
#include "cuda/arch/griddep.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/kernels/sm80/bwd_traits.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // kLog2e

namespace fa::cuda::sm80 {

template <typename Tag>
__device__ __forceinline__ float load_float(const uint16_t* x);
template <>
__device__ __forceinline__ float load_float<Bf16Tag>(const uint16_t* x) {
  return to_float(bfloat16_t{*x});
}
template <>
__device__ __forceinline__ float load_float<Fp16Tag>(const uint16_t* x) {
  return to_float(half_t{*x});
}

// The workspace row of sequence b's first query (+ the row inside the sequence).
__device__ __forceinline__ int64_t acc_row(const Params& p, int64_t b, const SeqInfo& sq) {
  return (p.varlen() ? sq.q_start : b * p.seqlen_q) + b * kBwdSpareRows;
}

// Lanes that share one row in the pre- and postprocess: a power of two covering the row's
// chunks (16 bytes of O / dO, or 4 floats of the dQ accumulator), at most a warp.
constexpr int row_lanes(int chunks) {
  return chunks > 16 ? 32 : chunks > 8 ? 16 : chunks > 4 ? 8 : 4;
}
constexpr int kRowWarps = 4;  // warps a block of the pre- / postprocess
// Query rows a block of the preprocess / postprocess of kernel head dim kD covers.
template <int kD>
constexpr int kPreRows = kRowWarps * (32 / row_lanes(kD / 8));
template <int kD>
constexpr int kPostRows = kRowWarps * (32 / row_lanes(kD / 4));

// Sum of the products of two 16-byte chunks of 8 elements, in fp32.
template <typename Tag>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint16_t a0 = uint16_t(aw[k] & 0xffffu), a1 = uint16_t(aw[k] >> 16);
    const uint16_t b0 = uint16_t(bw[k] & 0xffffu), b1 = uint16_t(bw[k] >> 16);
    s = fmaf(load_float<Tag>(&a0), load_float<Tag>(&b0), s);
    s = fmaf(load_float<Tag>(&a1), load_float<Tag>(&b1), s);
  }
  return s;
}

// Rows of a sequence of len_q queries whose dQ accumulator the preprocess clears: whole query
// tiles of either step size (kBwdWideBlockM is a multiple of kBwdBlockM), since a tile's rows
// are interleaved in memory (DqTileLayout) and the main kernel adds into all of its rows.
__host__ __device__ constexpr int64_t bwd_clear_rows(int64_t len_q) {
  return (len_q + kBwdWideBlockM - 1) / kBwdWideBlockM * kBwdWideBlockM;
}
static_assert(kBwdWideBlockM % kBwdBlockM == 0 && kBwdSpareRows >= kBwdWideBlockM - 1,
              "the cleared tiles cover both step sizes and fit in a sequence's rows");

// scale · rowsum(dO ∘ O) and LSE · log2(e) per row, in the workspace's row order, and the dQ
// accumulator cleared: row_lanes(kD / 8) lanes a row, each loading 16-byte chunks (the views are
// 16-byte aligned with strides a multiple of 8 elements: check_view_alignment) and storing
// 16-byte zeros over the row's kD floats; the rows from len_q to bwd_clear_rows(len_q) are only
// cleared. Grid (ceil(bwd_clear_rows(seqlen_q) / kPreRows), heads_q, batch). (One warp a row
// with 2-byte loads took 148 us at d = 64, 16k tokens x 32 heads, against FA2's 73 us, which
// also clears its accumulator; 43 us with 16-byte loads plus a 34 us memset before this.)
template <typename Tag, int kD>
__global__ void __launch_bounds__(32 * kRowWarps) bwd_preprocess(const __grid_constant__ Params p,
                                                                 BwdWorkspace ws) {
  constexpr int kLanes = row_lanes(kD / 8);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % kLanes;
  const int64_t row0 = (int64_t(blockIdx.x) * kRowWarps + warp) * (32 / kLanes);
  const int64_t i = row0 + lane / kLanes, h = blockIdx.y, b = blockIdx.z;
  // The main kernel, launched as this one's programmatic dependent (bwd_pdl), may start once
  // every block here has: its blocks load their K / V tiles as this grid's last wave drains.
  grid_launch_dependents();
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  const int64_t clear_rows = bwd_clear_rows(sq.len_q);
  if (row0 >= clear_rows) return;  // the whole warp: the shuffles below need every lane
  if (i < clear_rows) {
    float4* acc =
        reinterpret_cast<float4*>(ws.dq_acc + (h * ws.rows + acc_row(p, b, sq) + i) * kD);
#pragma unroll
    for (int c = sub; c < kD / 4; c += kLanes) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const bool live = i < sq.len_q;
  float sum = 0.f;
  if (live) {
    const uint16_t* o = p.out.at<const uint16_t>(b, sq.q_start + i, h);
    const uint16_t* dout = p.dout.at<const uint16_t>(b, sq.q_start + i, h);
    for (int c = 8 * sub; c < p.head_dim; c += 8 * kLanes)
      sum += dot8<Tag>(*reinterpret_cast<const uint4*>(o + c),
                       *reinterpret_cast<const uint4*>(dout + c));
  }
#pragma unroll
  for (int m = kLanes / 2; m >= 1; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (live && sub == 0) {
    const int64_t row = h * ws.rows + acc_row(p, b, sq) + i;
    ws.dsum[row] = sum * p.softmax_scale;
    ws.lse2[row] = p.lse.at(b, h, sq.q_start + i) * kLog2e;
  }
}

// dq = dQ accumulator in dq's dtype: row_lanes(kHeadDim / 4) lanes a query row, each taking
// 4 columns at a time, which lie in one 16-byte piece of the tile order (DqTileLayout::offset,
// host-tested) and leave as one 8-byte store (16-bit dq) or one 16-byte store (an fp32 dq with
// 16-bit inputs, the accumulator as it is: a run-time branch, no kernel of its own); grid
// (ceil(seqlen_q / kPostRows), heads_q, batch).
template <class T>
__global__ void __launch_bounds__(32 * kRowWarps) bwd_postprocess(const __grid_constant__ Params p,
                                                                  BwdWorkspace ws) {
  using Tag = typename T::Tag;
  using DqL = typename T::DqLayout;
  constexpr int kLanes = row_lanes(T::kHeadDim / 4);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % kLanes;
  const int64_t i = (int64_t(blockIdx.x) * kRowWarps + warp) * (32 / kLanes) + lane / kLanes;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  if (i >= sq.len_q) return;
  const int row = int(i % T::kBlockM);
  const float* tile =
      ws.dq_acc + (h * ws.rows + acc_row(p, b, sq) + (i - row)) * T::kHeadDim;
  if (p.dq.dtype == DType::F32) {
    float* dq = p.dq.at<float>(b, sq.q_start + i, h);
    for (int c = 4 * sub; c < p.head_dim; c += 4 * kLanes)
      *reinterpret_cast<float4*>(dq + c) =
          *reinterpret_cast<const float4*>(tile + DqL::offset(row, c));
    return;
  }
  uint16_t* dq = p.dq.at<uint16_t>(b, sq.q_start + i, h);
  for (int c = 4 * sub; c < p.head_dim; c += 4 * kLanes) {
    const float4 v = *reinterpret_cast<const float4*>(tile + DqL::offset(row, c));
    *reinterpret_cast<uint2*>(dq + c) = make_uint2(pack2<Tag>(v.x, v.y), pack2<Tag>(v.z, v.w));
  }
}

}  // namespace fa::cuda::sm80
