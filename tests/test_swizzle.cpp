// Host checks of the sm80 shared-memory layout (src/cuda/tile/swizzle.h): a bijection onto the
// tile's storage, chunks stay whole, and every ldmatrix / cp.async access pattern the kernels use
// is free of bank conflicts.
#include <gtest/gtest.h>

#include <set>

#include "cuda/tile/swizzle.h"

namespace fa::cuda {
namespace {

template <int kRows, int kCols>
void check_layout() {
  using Tile = SwizzledTile<kRows, kCols>;
  std::set<int> seen;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const int off = Tile::offset(r, c);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, Tile::kElems);
      ASSERT_TRUE(seen.insert(off).second) << "(" << r << ", " << c << ") collides";
      if (c % 8) {
        ASSERT_EQ(off, Tile::offset(r, c - c % 8) + c % 8);  // 16-byte chunks stay whole
      }
    }
  // ldmatrix: 8 consecutive rows at one 8-column chunk are one 8x8 matrix; their 16-byte rows
  // must fall in 8 distinct bank groups (4 banks of 4 bytes each: 32 banks / 8).
  for (int r0 = 0; r0 < kRows; r0 += 8)
    for (int c = 0; c < kCols; c += 8) {
      std::set<int> groups;
      for (int r = r0; r < r0 + 8; ++r) groups.insert((Tile::offset(r, c) * 2 / 16) % 8);
      EXPECT_EQ(groups.size(), 8u) << "rows " << r0 << "+, col " << c;
    }
}

// The kernels' precomputed per-lane addressing equals the layout function, byte for byte.
template <int kRows, int kCols>
void check_lane_offsets() {
  using Tile = SwizzledTile<kRows, kCols>;
  for (int lr = 0; lr < 16; ++lr)
    for (int lc : {0, 8}) {
      const auto lo = Tile::lane_offsets(lr, lc);
      for (int row0 = 0; row0 + 16 <= kRows; row0 += 8)
        for (int col0 = 0; col0 + 16 <= kCols; col0 += 16)
          ASSERT_EQ(Tile::frag_offset(lo, row0, col0), uint32_t(2 * Tile::offset(row0 + lr, col0 + lc)))
              << "lr " << lr << " lc " << lc << " row0 " << row0 << " col0 " << col0;
      // The run-time column form (the backward's per-warp column offsets) adds rows as row0 * 128.
      for (int col0 = 0; col0 + 16 <= kCols; col0 += 16)
        for (int row0 = 0; row0 + 16 <= kRows; row0 += 8)
          ASSERT_EQ(Tile::lane_offset_at(lr, lc, col0) + uint32_t(row0 * 128),
                    uint32_t(2 * Tile::offset(row0 + lr, col0 + lc)))
              << "lr " << lr << " lc " << lc << " row0 " << row0 << " col0 " << col0;
    }
}

TEST(Swizzle, LaneOffsetsMatchLayout) {
  check_lane_offsets<128, 64>();
  check_lane_offsets<128, 96>();
  check_lane_offsets<64, 256>();
  check_lane_offsets<32, 224>();
}

TEST(Swizzle, LayoutsOfEveryInstantiatedTile) {
  check_layout<128, 32>();
  check_layout<128, 64>();
  check_layout<128, 96>();
  check_layout<128, 128>();
  check_layout<64, 160>();
  check_layout<32, 192>();
  check_layout<32, 224>();
  check_layout<32, 256>();
}

}  // namespace
}  // namespace fa::cuda
