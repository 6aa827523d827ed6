// Global -> registers -> shared copies of a swizzled tile (cuda/tile/swizzle.h), for Turing, which
// has no cp.async. load() issues this thread's 16-byte global loads into registers and returns
// without waiting for them; store() writes them into shared memory (the first use of the
// registers, so that is where a thread waits). Between the two the caller computes: the loads'
// latency hides under the tile in flight, at the price of the registers the chunks occupy
// (kPasses x 4 a thread). Chunk distribution as the sm80 family's cp.async copies
// (sm80::TileCopy): kRowStep whole rows a pass, each thread one 16-byte column, so the source
// address is formed once and stepped. A copy may cover kRows rows of the tile only (a part, from
// a row0 that is a multiple of 8), so that a wide tile passes through half the registers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/sm80/fwd_tile.cuh"  // sm80::TileCopy

namespace fa::cuda::sm75 {

template <class Tile, int kThreads, int kRows = Tile::kRowCount>
struct StagedTile {
  using Copy = sm80::TileCopy<Tile, kThreads>;
  static constexpr int kRowStep = Copy::kRowStep;
  static constexpr int kChunksPerRow = Copy::kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowStep - 1) / kRowStep;
  static_assert(kRows % 8 == 0 && Tile::kRowCount % kRows == 0, "whole swizzle periods a part");
  // Threads past the last whole row of a pass (head dims whose chunk count does not divide the
  // block: 96, 160, 224) hold nothing.
  static constexpr bool kAllThreads = kRowStep * kChunksPerRow == kThreads;

  uint4 chunk[kPasses];  // (kPasses) 16-byte chunks: rows row0 + i kRowStep, one column

  // Rows [0, rows_valid) and columns [0, cols_valid) of the part from gmem (its first row,
  // row-major, row_stride elements); every other chunk is zero (padding rows and head-dim
  // columns).
  __device__ __forceinline__ void load(const uint16_t* gmem, int64_t row_stride,
                                       int64_t rows_valid, int cols_valid, int tid) {
    const int rows = int(rows_valid < kRows ? (rows_valid < 0 ? 0 : rows_valid) : kRows);
    const int row = tid / kChunksPerRow, col = (tid % kChunksPerRow) * Tile::kChunkElems;
    const bool col_ok = (kAllThreads || tid < kRowStep * kChunksPerRow) && col < cols_valid;
    const uint16_t* src = gmem + row * row_stride + col;
    const int64_t step = kRowStep * row_stride;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      if (col_ok && row + i * kRowStep < rows)
        chunk[i] = __ldg(reinterpret_cast<const uint4*>(src));
      else
        chunk[i] = make_uint4(0u, 0u, 0u, 0u);
      src += step;
    }
  }

  // Into the tile's rows [row0, row0 + kRows).
  __device__ __forceinline__ void store(uint16_t* smem, int tid, int row0 = 0) const {
    if (!kAllThreads && tid >= kRowStep * kChunksPerRow) return;
    const int row = row0 + tid / kChunksPerRow, col = (tid % kChunksPerRow) * Tile::kChunkElems;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row + i * kRowStep;
      if (kRows % kRowStep != 0 && r >= row0 + kRows) break;
      *reinterpret_cast<uint4*>(smem + Tile::offset(r, col)) = chunk[i];
    }
  }
};

}  // namespace fa::cuda::sm75
