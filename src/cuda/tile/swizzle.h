// Shared-memory tile layout of the sm80 kernels. A (kRows, kCols) tile of 16-bit elements is
// stored as column blocks of 64 elements (128 bytes); inside a block, rows are 8 chunks of 16
// bytes whose chunk index is XOR-swizzled with the row:
//     chunk' = chunk ^ (row % 8)
// ldmatrix reads 8 rows x 16 bytes at one chunk column; unswizzled those rows are 128 bytes apart
// and all hit the same 4 banks (an 8-way conflict); swizzled, the 8 rows land in 8 distinct
// 16-byte bank groups. cp.async writes whole chunks, so it sees the same mapping. Head dims that
// are not a multiple of 64 (96, 160, 224) leave part of the last block unused.
// Host-testable: tests/test_swizzle.cpp.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa::cuda {

template <int kRows, int kCols>
struct SwizzledTile {
  static constexpr int kRowCount = kRows;
  static constexpr int kColCount = kCols;
  static constexpr int kBlockCols = 64;  // 128-byte rows inside a column block
  static constexpr int kRowBytes = 2 * kBlockCols;
  static constexpr int kChunkElems = 8;  // 16 bytes of 16-bit elements
  static constexpr int kBlocks = (kCols + kBlockCols - 1) / kBlockCols;
  static constexpr int kElems = kBlocks * kRows * kBlockCols;  // storage, padding included
  static_assert(kRows % 8 == 0, "the swizzle period is 8 rows");

  // Fragment addressing without per-fragment swizzle arithmetic. For the byte offset of
  // (row0 + lr, col0 + lc) with row0 % 8 == 0, col0 % 16 == 0 and lc in {0, 8}:
  //   block(col0) * kRows * 128 + row0 * 128 + [(lr * 128 + lc * 2 + j * 32) ^ ((lr % 8) << 4)]
  // where j = (col0 % 64) / 16. The bracket depends only on the lane (lr, lc) and j, so a thread
  // computes its four values once; every fragment address is then one of them plus a constant.
  struct LaneOffsets {
    uint32_t v[4];  // bytes, for j = 0..3
  };
  FA_HOST_DEVICE static LaneOffsets lane_offsets(int lr, int lc) {
    LaneOffsets lo;
    for (int j = 0; j < 4; ++j)
      lo.v[j] = uint32_t((lr * kRowBytes + lc * 2 + j * 32) ^ ((lr % 8) << 4));
    return lo;
  }
  FA_HOST_DEVICE static uint32_t frag_offset(const LaneOffsets& lo, int row0, int col0) {
    return uint32_t((col0 / kBlockCols) * kRows * kRowBytes + row0 * kRowBytes) +
           lo.v[(col0 % kBlockCols) / 16];
  }

  // frag_offset(lane_offsets(lr, lc), 0, col0) for a col0 (a multiple of 16) known only at run
  // time, without indexing LaneOffsets::v by it (a dynamic index puts the array in local memory).
  FA_HOST_DEVICE static uint32_t lane_offset_at(int lr, int lc, int col0) {
    return uint32_t((col0 / kBlockCols) * kRows * kRowBytes) +
           uint32_t((lr * kRowBytes + lc * 2 + (col0 % kBlockCols) * 2) ^ ((lr % 8) << 4));
  }

  // Element offset of (row, col); col % 8 is preserved inside the chunk.
  FA_HOST_DEVICE static int offset(int row, int col) {
    const int block = col / kBlockCols, c = col % kBlockCols;
    const int chunk = (c / kChunkElems) ^ (row % 8);
    return block * kRows * kBlockCols + row * kBlockCols + chunk * kChunkElems + c % kChunkElems;
  }
};

}  // namespace fa::cuda
