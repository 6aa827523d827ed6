// Visibility ranges (src/core/mask.h) against brute force.
#include <gtest/gtest.h>

#include <random>

#include "core/mask.h"

namespace fa {
namespace {

TEST(Mask, RangesMatchBruteForce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t sq = 1 + rng() % 40, sk = 1 + rng() % 40;
    const int64_t wl = int64_t(rng() % 12) - 1, wr = int64_t(rng() % 12) - 1;
    const Visibility vis{sk - sq, wl, wr};
    const int64_t r0 = rng() % sq, r1 = r0 + 1 + rng() % (sq - r0);
    // key_begin / key_end bound every visible key of rows [r0, r1), tightly.
    int64_t lo = sk, hi = 0;
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = 0; j < sk; ++j)
        if (vis.visible(i, j)) {
          lo = std::min(lo, j);
          hi = std::max(hi, j + 1);
        }
    if (lo < hi) {
      EXPECT_EQ(vis.key_begin(r0, sk), lo);
      EXPECT_EQ(vis.key_end(r1, sk), hi);
    } else {
      EXPECT_GE(vis.key_begin(r0, sk), vis.key_end(r1, sk));
    }
    // row_begin / row_end bound every row that sees keys [c0, c1).
    const int64_t c0 = rng() % sk, c1 = c0 + 1 + rng() % (sk - c0);
    lo = sq;
    hi = 0;
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = c0; j < c1; ++j)
        if (vis.visible(i, j)) {
          lo = std::min(lo, i);
          hi = std::max(hi, i + 1);
        }
    if (lo < hi) {
      EXPECT_EQ(vis.row_begin(c0, sq), lo);
      EXPECT_EQ(vis.row_end(c1, sq), hi);
    } else {
      EXPECT_GE(vis.row_begin(c0, sq), vis.row_end(c1, sq));
    }
    // block_unmasked is exact.
    bool all = true;
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < c1; ++j) all = all && vis.visible(i, j);
    EXPECT_EQ(vis.block_unmasked(r0, r1, c0, c1), all);
  }
}

TEST(Mask, CausalIsBottomRightAligned) {
  const Visibility vis{5 - 3, -1, 0};  // seqlen_q 3, seqlen_k 5, causal
  EXPECT_TRUE(vis.visible(0, 2));
  EXPECT_FALSE(vis.visible(0, 3));
  EXPECT_TRUE(vis.visible(2, 4));
  const Visibility short_k{2 - 4, -1, 0};  // more queries than keys: first rows see nothing
  EXPECT_FALSE(short_k.visible(1, 0));
  EXPECT_TRUE(short_k.visible(2, 0));
}

TEST(Mask, LogitSoftcapAndAlibi) {
  const Logit<double> lg{2.0, 0.5, 3};
  double slope = 0;
  const double x = lg(1.0, 1, 2, &slope);  // softcap 2 tanh(0.5) - 0.5 * |1 + 3 - 2|
  EXPECT_NEAR(x, 2.0 * std::tanh(0.5) - 1.0, 1e-15);
  EXPECT_NEAR(slope, 1.0 - std::tanh(0.5) * std::tanh(0.5), 1e-15);
}

}  // namespace
}  // namespace fa
