// The sm90 forward's tile plan (src/cuda/kernels/sm90/tile_plan.h) against brute force over the
// visibility rule (windows and causal included): a work tile visits exactly the key tiles some of
// its rows sees, and a tile it runs without the mask has every (row, key) pair visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/kernels/sm90/tile_plan.h"

namespace fa::cuda::sm90 {
namespace {

// Visibility of (row, key) with the tile's bounds: the rule of core/mask.h within [0, len_k).
bool visible(const Visibility& vis, int64_t row, int64_t key, int64_t len_k) {
  return key < len_k && vis.visible(row, key);
}

TEST(Sm90TilePlan, VisitsExactlyTheSeenTilesAndMasksWhereNeeded) {
  // (window_left, window_right): none, causal, sliding windows, a right bound only.
  const std::vector<std::pair<int64_t, int64_t>> windows{{-1, -1}, {-1, 0}, {16, 0}, {70, 5},
                                                         {0, 0}, {-1, 40}, {200, -1}};
  for (const auto& [wl, wr] : windows)
    for (const int kN : {64, 128})
      for (const int rows : {64, 128})
        for (const int64_t len_q : {1, 7, 64, 130, 300})
          for (const int64_t len_k : {1, 63, 64, 129, 300, 513}) {
            const Visibility vis{len_k - len_q, wl, wr};
            for (int64_t row0 = 0; row0 < len_q; row0 += rows) {
              const int64_t real = std::min<int64_t>(rows, len_q - row0);
              const KeyTiles kt = key_tiles(vis, row0, real, len_k, kN);
              int first_seen = -1, last_seen = -1;  // brute force over the tile's real rows
              for (int64_t key = 0; key < len_k; ++key)
                for (int64_t r = row0; r < row0 + real; ++r)
                  if (visible(vis, r, key, len_k)) {
                    if (first_seen < 0 || key / kN < first_seen) first_seen = int(key / kN);
                    last_seen = std::max(last_seen, int(key / kN));
                  }
              const auto where = ::testing::Message()
                                 << "window " << wl << "," << wr << " rows " << row0 << "+" << real
                                 << " len_q " << len_q << " len_k " << len_k << " kN " << kN;
              if (last_seen < 0) {
                ASSERT_EQ(kt.begin, kt.end) << where;
                continue;
              }
              // Exactly the tiles some row sees, first to last.
              ASSERT_EQ(kt.begin, first_seen) << where;
              ASSERT_EQ(kt.end, last_seen + 1) << where;
              for (int j = kt.begin; j < kt.end; ++j) {
                // Unmasked over the padded rows too (the consumers test 64-row halves).
                for (const int64_t span : {real, int64_t(rows)}) {
                  // The closed form agrees with the tile-by-tile test.
                  const KeyTiles um = unmasked_key_tiles(vis, row0, span, len_k, kN);
                  ASSERT_EQ(j >= um.begin && j < um.end,
                            !key_tile_needs_mask(vis, row0, span, int64_t(j) * kN, len_k, kN))
                      << where << ": tile " << j << " span " << span;
                  if (key_tile_needs_mask(vis, row0, span, int64_t(j) * kN, len_k, kN)) continue;
                  for (int64_t key = int64_t(j) * kN; key < int64_t(j + 1) * kN; ++key)
                    for (int64_t r = row0; r < row0 + span; ++r)
                      ASSERT_TRUE(visible(vis, r, key, len_k))
                          << where << ": tile " << j << " unmasked but (" << r << ", " << key
                          << ") is hidden";
                }
              }
            }
          }
}

// The peeled order visits every key tile of the work tile once, the ones some row needs masked
// first; every tile after the first `masked` is unmasked for all the work tile's rows (the
// consumers run those without the mask), and without peeling the order is the identity.
TEST(Sm90TilePlan, KeyOrderPutsTheMaskedTilesFirst) {
  const std::vector<std::pair<int64_t, int64_t>> windows{{-1, -1}, {-1, 0}, {16, 0}, {70, 5},
                                                         {0, 0}, {-1, 40}, {200, -1}, {300, 300}};
  for (const auto& [wl, wr] : windows)
    for (const int kN : {64, 128})
      for (const int rows : {64, 128, 192})
        for (const int64_t len_q : {1, 7, 64, 130, 300, 1000})
          for (const int64_t len_k : {1, 63, 64, 129, 300, 513, 1024}) {
            const Visibility vis{len_k - len_q, wl, wr};
            for (int64_t row0 = 0; row0 < len_q; row0 += rows) {
              const int64_t real = std::min<int64_t>(rows, len_q - row0);
              const KeyTiles kt = key_tiles(vis, row0, real, len_k, kN);
              const KeyTiles um = unmasked_key_tiles(vis, row0, real, len_k, kN);
              const auto where = ::testing::Message()
                                 << "window " << wl << "," << wr << " rows " << row0 << "+" << real
                                 << " len_q " << len_q << " len_k " << len_k << " kN " << kN;
              const int n = kt.end - kt.begin;
              const KeyOrder plain = key_order(kt, um, false);
              ASSERT_EQ(plain.masked, n) << where;
              for (int i = 0; i < n; ++i) ASSERT_EQ(plain.tile(i), kt.begin + i) << where;
              const KeyOrder order = key_order(kt, um, true);
              ASSERT_TRUE(order.masked >= 0 && order.masked <= n) << where;
              std::vector<int> seen(size_t(n), 0);
              for (int i = 0; i < n; ++i) {
                const int j = order.tile(i);
                ASSERT_TRUE(j >= kt.begin && j < kt.end) << where << ": visit " << i;
                ++seen[size_t(j - kt.begin)];
                const bool needs = key_tile_needs_mask(vis, row0, real, int64_t(j) * kN, len_k, kN);
                // The masked ones exactly first (an unmasked tile may not come before them).
                ASSERT_EQ(i < order.masked, needs) << where << ": visit " << i << " tile " << j;
              }
              for (const int k : seen) ASSERT_EQ(k, 1) << where;
            }
          }
}

// The tile numbers cover every (m block, head, batch entry) once; causal runs a head's m blocks
// from the last.
TEST(Sm90TilePlan, TileCoordsCoverEveryTileOnce) {
  for (const bool causal : {false, true})
    for (const int m_blocks : {1, 3, 8})
      for (const int heads : {1, 5}) {
        const int batch = 3, n = m_blocks * heads * batch;
        std::vector<int> seen(size_t(n), 0);
        for (int t = 0; t < n; ++t) {
          const TileCoord c = tile_coord(t, m_blocks, heads, causal);
          ASSERT_TRUE(c.m_block >= 0 && c.m_block < m_blocks && c.head >= 0 && c.head < heads &&
                      c.batch >= 0 && c.batch < batch);
          ++seen[size_t((c.batch * heads + c.head) * m_blocks + c.m_block)];
          if (t % m_blocks == 0) EXPECT_EQ(c.m_block, causal ? m_blocks - 1 : 0);
        }
        for (const int k : seen) ASSERT_EQ(k, 1);
      }
}

// The d 64 kernel's consumer warpgroups: the knob's 2 or 3 as it says, else three only where
// queries and keys both reach the threshold.
TEST(Sm90TilePlan, D64ConsumersFollowTheKnobThenTheLengths) {
  for (const int64_t sq : {int64_t(1), int64_t(1024), kThreeConsumersMinSeqlen - 1,
                           kThreeConsumersMinSeqlen, int64_t(1) << 20})
    for (const int64_t sk : {int64_t(1), int64_t(1024), kThreeConsumersMinSeqlen - 1,
                             kThreeConsumersMinSeqlen, int64_t(1) << 20}) {
      EXPECT_EQ(d64_consumers(2, sq, sk), 2);
      EXPECT_EQ(d64_consumers(3, sq, sk), 3);
      const bool long_enough = sq >= kThreeConsumersMinSeqlen && sk >= kThreeConsumersMinSeqlen;
      EXPECT_EQ(d64_consumers(0, sq, sk), long_enough ? 3 : 2) << sq << " x " << sk;
    }
}

}  // namespace
}  // namespace fa::cuda::sm90
