// The order of the backward's fp32 dQ accumulator inside one step's tile of kBlockM (64) query
// rows x kD columns (bwd_kernel.cuh). The main kernel adds its dQ fragments there in fragment
// order: warp w's reduction j of lane l lands on the float pair at ((w kReds + j) 32 + l) 2, so
// each red.v2 instruction of a warp covers 256 contiguous bytes. (Row-major, a warp's
// instruction touched 8 rows x 32 bytes: 8 sectors in 8 lines, and the burst stalled the warps on
// the memory pipe's queue.) The layout is private to the backward: the postprocess reads it back
// through offset(). Host-tested: tests/test_dq_layout.cpp.
#pragma once

#include "core/host_device.h"

namespace fa::cuda::sm80 {

// kWarpsM x (8 / kWarpsM) warps, each owning a kRows x kCols block of the tile (BwdTraits:
// kDqWarpsM, kDqRows, kDqCols): warp w's block starts at row (w % kWarpsM) kRows, column
// (w / kWarpsM) kCols. Inside it the mma C layout: lane l = 4 g + t holds, for m-tile mt, row
// half r and n-tile nd, the pair (row 16 mt + 8 r + g, columns 8 nd + 2t, +1).
template <int kRows, int kCols, int kWarpsM>
struct DqTileLayout {
  static constexpr int kMt = kRows / 16, kNt = kCols / 8;
  static constexpr int kReds = kMt * 2 * kNt;  // float pairs a thread adds per step
  // Reduction j of a thread: m-tile, row half and n-tile of its fragment.
  FA_HOST_DEVICE static constexpr int mt(int j) { return j / (2 * kNt); }
  FA_HOST_DEVICE static constexpr int half(int j) { return (j / kNt) % 2; }
  FA_HOST_DEVICE static constexpr int nt(int j) { return j % kNt; }
  // Float offset of the pair (warp, lane, j) in the tile.
  FA_HOST_DEVICE static constexpr int pair_offset(int warp, int lane, int j) {
    return ((warp * kReds + j) * 32 + lane) * 2;
  }
  // Float offset of element (row, col) of the tile: the inverse of the fragment map.
  FA_HOST_DEVICE static constexpr int offset(int row, int col) {
    const int warp = row / kRows + kWarpsM * (col / kCols);
    const int rr = row % kRows, cc = col % kCols;
    const int j = (rr / 16) * 2 * kNt + ((rr % 16) / 8) * kNt + cc / 8;
    const int lane = 4 * (rr % 8) + (cc % 8) / 2;
    return pair_offset(warp, lane, j) + cc % 2;
  }
};

}  // namespace fa::cuda::sm80
