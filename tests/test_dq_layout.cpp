// The backward's dQ accumulator order (src/cuda/kernels/sm80/dq_layout.h): the main kernel's
// fragment map and the postprocess's inverse agree, together they cover the tile exactly once, and
// the postprocess's 4-column pieces are contiguous and 16-byte aligned.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/kernels/sm80/dq_layout.h"

namespace {

using fa::cuda::sm80::DqTileLayout;

// Every (warp, lane, reduction, element) the kernel adds, at the (row, col) the mma C layout gives
// it, must be where offset(row, col) says, and the kM x kD floats must be hit once each.
template <int kM, int kD, int kRows, int kCols, int kWarpsM>
void check_layout() {
  using L = DqTileLayout<kRows, kCols, kWarpsM>;
  static_assert(kWarpsM * kRows == kM && (8 / kWarpsM) * kCols == kD, "the tile is kM x kD");
  std::vector<int> hits(kM * kD, 0);
  for (int warp = 0; warp < 8; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < L::kReds; ++j)
        for (int e = 0; e < 2; ++e) {
          const int g = lane / 4, t = lane % 4;
          const int row = (warp % kWarpsM) * kRows + 16 * L::mt(j) + 8 * L::half(j) + g;
          const int col = (warp / kWarpsM) * kCols + 8 * L::nt(j) + 2 * t + e;
          const int off = L::pair_offset(warp, lane, j) + e;
          ASSERT_EQ(L::offset(row, col), off) << "d " << kD << " warp " << warp << " lane " << lane
                                              << " j " << j << " e " << e;
          ASSERT_GE(off, 0);
          ASSERT_LT(off, kM * kD);
          ++hits[off];
        }
  for (int i = 0; i < kM * kD; ++i) ASSERT_EQ(hits[i], 1) << "d " << kD << " float " << i;
  // The postprocess reads 4 columns c .. c + 3 (c a multiple of 4) of a row as one float4.
  for (int row = 0; row < kM; ++row)
    for (int c = 0; c < kD; c += 4) {
      ASSERT_EQ(L::offset(row, c) % 4, 0) << "d " << kD << " row " << row << " col " << c;
      for (int k = 1; k < 4; ++k)
        ASSERT_EQ(L::offset(row, c + k), L::offset(row, c) + k)
            << "d " << kD << " row " << row << " col " << c + k;
    }
}

}  // namespace

// The head dims' dQ warp tiles (BwdTraits::kDqWarpsM), 64-row steps and, at d <= 64, 128-row
// ones.
TEST(DqLayout, FragmentMapAndInverseCoverTheTileOnce) {
  check_layout<64, 32, 16, 16, 4>();
  check_layout<64, 64, 32, 16, 2>();
  check_layout<64, 96, 16, 48, 4>();
  check_layout<64, 128, 32, 32, 2>();
  check_layout<64, 160, 16, 80, 4>();
  check_layout<64, 192, 32, 48, 2>();
  check_layout<64, 224, 16, 112, 4>();
  check_layout<64, 256, 32, 64, 2>();
  check_layout<128, 32, 32, 16, 4>();
  check_layout<128, 64, 32, 32, 4>();
}
