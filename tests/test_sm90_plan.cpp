// The sm90 forward's tile plan (src/cuda/kernels/sm90/tile_plan.h) against brute force over the
// visibility rule: a block visits exactly the key tiles some row sees (none past the last), and a
// tile it runs without the mask has every (row, key) pair visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels/sm90/tile_plan.h"

namespace fa::cuda::sm90 {
namespace {

bool visible(int64_t row, int64_t key, int64_t shift, int64_t len_k, bool causal) {
  return key < len_k && (!causal || key <= row + shift);
}

TEST(Sm90TilePlan, VisitsExactlyTheSeenTilesAndMasksWhereNeeded) {
  for (const bool causal : {false, true})
    for (const int kN : {64, 128})
      for (const int rows : {64, 128})
        for (const int64_t len_q : {1, 7, 64, 130, 300})
          for (const int64_t len_k : {1, 63, 64, 129, 300, 513}) {
            const int64_t shift = len_k - len_q;
            for (int64_t row0 = 0; row0 < len_q; row0 += rows) {
              const int n = key_tiles_seen(row0, rows, shift, len_k, kN, causal);
              int last_seen = -1;  // brute force: the last tile any row of the block sees
              for (int64_t key = 0; key < len_k; ++key)
                for (int64_t r = row0; r < row0 + rows; ++r)
                  if (visible(r, key, shift, len_k, causal)) last_seen = int(key / kN);
              // Rows past len_q (the block's padding) may add tiles, never drop one.
              ASSERT_GE(n, last_seen + 1) << "causal " << causal << " rows " << row0 << "+" << rows
                                         << " len_q " << len_q << " len_k " << len_k;
              ASSERT_LE(n, int((len_k + kN - 1) / kN));
              for (int j = 0; j < n; ++j) {
                if (key_tile_needs_mask(row0, int64_t(j) * kN, shift, len_k, kN, causal)) continue;
                for (int64_t key = int64_t(j) * kN; key < int64_t(j + 1) * kN; ++key)
                  for (int64_t r = row0; r < row0 + rows; ++r)
                    ASSERT_TRUE(visible(r, key, shift, len_k, causal))
                        << "tile " << j << " unmasked but (" << r << ", " << key << ") is hidden";
              }
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

}  // namespace
}  // namespace fa::cuda::sm90
