// Row moves of the vanilla backend: packing a view whose row stride a GEMM cannot take, zeroing
// the outputs of empty sequences, and casting the fp32 dK / dV accumulators to the outputs.
// Rows are addressed like the API's views: (b, row, head) with row counted from `row0`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/kernels/vanilla/softmax.cuh"

namespace fa::cuda::vanilla {

constexpr int kCopyThreads = 256;

// The (n_b, rows, heads, d) block of elements a row kernel covers, flattened.
struct RowBlock {
  int64_t b_first, n_b, row0, rows, heads, d;
  __device__ void index(int64_t flat, int64_t& b, int64_t& r, int64_t& h, int64_t& c) const {
    c = flat % d;
    flat /= d;
    h = flat % heads;
    flat /= heads;
    r = row0 + flat % rows;
    b = b_first + flat / rows;
  }
  FA_HOST_DEVICE int64_t elems() const { return n_b * rows * heads * d; }
};

// dst[b, r, h, c] = src[b, r, h, c]; same dtype T.
template <typename T>
__global__ void copy_rows(View src, View dst, RowBlock blk) {
  const int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (flat >= blk.elems()) return;
  int64_t b, r, h, c;
  blk.index(flat, b, r, h, c);
  dst.at<T>(b, r, h)[c] = src.at<T>(b, r, h)[c];
}

template <typename T>
__global__ void zero_rows(View dst, RowBlock blk) {
  const int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (flat >= blk.elems()) return;
  int64_t b, r, h, c;
  blk.index(flat, b, r, h, c);
  dst.at<T>(b, r, h)[c] = from_float<T>(0.f);
}

// lse of every row of the block = -inf (a query with no key sees nothing).
__global__ void empty_lse(LseView lse, RowBlock blk) {
  const int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (flat >= blk.n_b * blk.rows * blk.heads) return;
  const int64_t h = flat % blk.heads, r = blk.row0 + flat / blk.heads % blk.rows,
                b = blk.b_first + flat / (blk.heads * blk.rows);
  lse.at(b, h, r) = -INFINITY;
}

// dst[b, r, h, c] = acc[((b - b_first) * heads + h) * rows + (r - row0)) * d + c]: a dense fp32
// (n_b * heads, rows, d) accumulator into a strided output.
template <typename T>
__global__ void store_accumulator(const float* acc, View dst, RowBlock blk) {
  const int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (flat >= blk.elems()) return;
  int64_t b, r, h, c;
  blk.index(flat, b, r, h, c);
  const int64_t e = (b - blk.b_first) * blk.heads + h;
  dst.at<T>(b, r, h)[c] = from_float<T>(acc[(e * blk.rows + (r - blk.row0)) * blk.d + c]);
}

inline unsigned blocks_for(int64_t n) { return unsigned((n + kCopyThreads - 1) / kCopyThreads); }

}  // namespace fa::cuda::vanilla
