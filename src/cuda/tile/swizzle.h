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

#include "common/host_device.h"

namespace fa::cuda {

template <int kRows, int kCols>
struct SwizzledTile {
  static constexpr int kRowCount = kRows;
  static constexpr int kColCount = kCols;
  static constexpr int kBlockCols = 64;  // 128-byte rows inside a column block
  static constexpr int kChunkElems = 8;  // 16 bytes of 16-bit elements
  static constexpr int kBlocks = (kCols + kBlockCols - 1) / kBlockCols;
  static constexpr int kElems = kBlocks * kRows * kBlockCols;  // storage, padding included
  static_assert(kRows % 8 == 0, "the swizzle period is 8 rows");

  // Element offset of (row, col); col % 8 is preserved inside the chunk.
  FA_HOST_DEVICE static int offset(int row, int col) {
    const int block = col / kBlockCols, c = col % kBlockCols;
    const int chunk = (c / kChunkElems) ^ (row % 8);
    return block * kRows * kBlockCols + row * kBlockCols + chunk * kChunkElems + c % kChunkElems;
  }
};

}  // namespace fa::cuda
