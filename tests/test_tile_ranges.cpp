// Host checks of the sm80 kernels' mask bookkeeping (src/cuda/kernels/sm80/tile_ranges.h)
// against Visibility::visible by brute force, over lengths, windows and tile shapes:
//   WarpTiles:  a warp skips a key tile exactly when none of its rows sees a key of it, and runs it
//               unmasked exactly when every row sees every key of it (and all of it is < len_k);
//   RowKeys:    the per-row key range of a masked tile is exactly the visible keys;
//   StepWindow: the backward's per-element mask of a (key tile, query tile) step is exactly
//               visibility, and its ALiBi distance is |i + offset - j|;
//   KeyTileQueries: the backward's query tiles of a key tile are exactly those with a row that
//               sees one of its keys, and a query tile's key tiles form one run (what the
//               deterministic mode's count of later key tiles assumes of the blocks' order);
//               higher key tiles reach a query tile first (why that order is the fast one);
//   KeyTileUnmasked: the backward's steps without a mask are exactly those whose every (row, key)
//               pair is visible and whose keys are all below len_k.
// Rows past len_q (a block's padding) belong to the warp's range, as in the kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/mask.h"
#include "cuda/kernels/sm80/tile_ranges.h"

namespace fa::cuda::sm80 {
namespace {

struct Shape {
  int64_t len_q, len_k, window_left, window_right;
};

std::string describe(const Shape& s, int rows, int block_n, int64_t row0, int64_t tile) {
  return "len_q=" + std::to_string(s.len_q) + " len_k=" + std::to_string(s.len_k) +
         " window=(" + std::to_string(s.window_left) + "," + std::to_string(s.window_right) +
         ") rows=" + std::to_string(rows) + " block_n=" + std::to_string(block_n) +
         " row0=" + std::to_string(row0) + " tile=" + std::to_string(tile);
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  const int64_t lens[][2] = {{1, 1}, {37, 37}, {100, 260}, {260, 100}, {128, 128}, {5, 300}};
  const int64_t windows[][2] = {{-1, -1}, {-1, 0}, {0, 0}, {7, 0}, {40, 3}, {-1, 9}, {3, -1}};
  for (const auto& l : lens)
    for (const auto& w : windows) out.push_back({l[0], l[1], w[0], w[1]});
  return out;
}

TEST(TileRanges, WarpTilesMatchBruteForce) {
  for (const Shape& s : shapes())
    for (int rows : {16, 32})
      for (int block_n : {32, 48, 64, 96}) {
        const Visibility vis{s.len_k - s.len_q, s.window_left, s.window_right};
        const int64_t tiles = (s.len_k + block_n - 1) / block_n;
        for (int64_t row0 = 0; row0 < s.len_q; row0 += rows) {
          const WarpTiles w(vis, row0, rows, s.len_k, block_n);
          for (int64_t nb = 0; nb < tiles; ++nb) {
            const int64_t n0 = nb * block_n, n1 = n0 + block_n;
            bool any = false, all = n1 <= s.len_k;
            for (int64_t i = row0; i < row0 + rows; ++i)
              for (int64_t j = n0; j < n1; ++j) {
                const bool seen = j < s.len_k && vis.visible(i, j);
                any = any || seen;
                all = all && seen;
              }
            const bool idle = nb < w.active_begin || nb >= w.active_end;
            const bool masked = nb < w.full_begin || nb >= w.full_end;
            ASSERT_EQ(idle, !any) << describe(s, rows, block_n, row0, nb);
            ASSERT_EQ(masked, !all) << describe(s, rows, block_n, row0, nb);
          }
        }
      }
}

TEST(TileRanges, RowKeysGiveExactlyTheVisibleKeysOfATile) {
  for (const Shape& s : shapes())
    for (int block_n : {32, 48, 64}) {
      const Visibility vis{s.len_k - s.len_q, s.window_left, s.window_right};
      for (int64_t row_g = 0; row_g < s.len_q; ++row_g) {
        const RowKeys rk(vis, row_g, s.len_k);
        for (int dr : {0, 8, 16, 24})
          for (int n0 = 0; n0 < s.len_k; n0 += block_n) {
            int lo = 0, hi = 0;
            rk.tile_range(dr, n0, block_n, &lo, &hi);
            for (int c = 0; c < block_n; ++c) {
              const int64_t j = n0 + c;
              const bool want = j < s.len_k && vis.visible(row_g + dr, j);
              ASSERT_EQ(c >= lo && c < hi, want)
                  << describe(s, 0, block_n, row_g + dr, n0 / block_n) << " key=" << j;
            }
          }
        EXPECT_EQ(rk.diag, row_g + s.len_k - s.len_q);  // ALiBi's distance origin
      }
    }
}

TEST(TileRanges, StepWindowIsExactlyVisibility) {
  std::vector<Shape> all = shapes();
  // Offsets far beyond the tile (long prompts against short queries and the reverse), and a
  // window wider than the sequence.
  all.push_back({3, 5000, -1, 0});
  all.push_back({5000, 3, 2, -1});
  all.push_back({300, 4000, 5000, 7});
  for (const Shape& s : all)
    for (int tile : {32, 64}) {
      const Visibility vis{s.len_k - s.len_q, s.window_left, s.window_right};
      for (int64_t m0 = 0; m0 < s.len_q; m0 += tile)
        for (int64_t n0 = 0; n0 < s.len_k; n0 += tile) {
          const StepWindow w(vis, m0, n0, s.len_k, tile);
          for (int qc = 0; qc < tile; ++qc)
            for (int kr = 0; kr < tile; ++kr) {
              const int64_t i = m0 + qc, j = n0 + kr;
              const bool want = j < s.len_k && vis.visible(i, j);
              ASSERT_EQ(w.visible(kr, qc), want)
                  << describe(s, tile, tile, m0, n0 / tile) << " query=" << i << " key=" << j;
              const int64_t dist = i + vis.offset - j;
              ASSERT_EQ(w.alibi_distance(kr, qc), dist < 0 ? -dist : dist);
            }
        }
    }
}

TEST(TileRanges, KeyTileUnmaskedIsExactlyTheStepsWithoutAMaskedElement) {
  std::vector<Shape> all = shapes();
  all.push_back({3, 900, -1, 0});
  all.push_back({900, 3, 2, -1});
  all.push_back({300, 1000, 500, 7});
  all.push_back({1000, 300, 7, 500});
  all.push_back({512, 768, -1, 0});     // whole tiles: unmasked steps off the diagonal
  all.push_back({768, 512, 100, 40});
  all.push_back({640, 640, -1, -1});
  // Every window bound near the tile edges, one side at a time, with and without an offset.
  for (int64_t w = 0; w <= 130; ++w)
    for (int64_t len_k : {256, 300}) {
      all.push_back({256, len_k, w, -1});
      all.push_back({256, len_k, -1, w});
    }
  for (const Shape& s : all)
    for (int block_n : {64, 128})
      for (int block_m : {64, 128}) {
        const Visibility vis{s.len_k - s.len_q, s.window_left, s.window_right};
        for (int64_t n0 = 0; n0 < s.len_k; n0 += block_n) {
          const KeyTileUnmasked u(vis, s.len_q, s.len_k, int(n0 / block_n), block_n, block_m);
          ASSERT_LE(u.begin, u.end);
          for (int64_t m0 = 0; m0 < s.len_q; m0 += block_m) {
            bool all_visible = n0 + block_n <= s.len_k;
            for (int64_t i = m0; all_visible && i < m0 + block_m && i < s.len_q; ++i)
              for (int64_t j = n0; all_visible && j < n0 + block_n; ++j)
                all_visible = vis.visible(i, j);
            const int64_t mb = m0 / block_m;
            ASSERT_EQ(mb >= u.begin && mb < u.end, all_visible)
                << describe(s, block_m, block_n, m0, n0 / block_n);
          }
        }
      }
}

TEST(TileRanges, KeyTileQueriesAreExactlyTheTilesThatSeeTheKeys) {
  std::vector<Shape> all = shapes();
  all.push_back({3, 900, -1, 0});
  all.push_back({900, 3, 2, -1});
  all.push_back({300, 1000, 500, 7});
  for (const Shape& s : all)
    for (int block_n : {64, 128})
      for (int block_m : {64, 128}) {
        const Visibility vis{s.len_k - s.len_q, s.window_left, s.window_right};
        const int64_t key_tiles = (s.len_k + block_n - 1) / block_n;
        const int64_t query_tiles = (s.len_q + block_m - 1) / block_m;
        // seen[nb][mb]: some row of query tile mb sees some key of key tile nb.
        auto seen = std::vector<std::vector<bool>>(size_t(key_tiles),
                                                   std::vector<bool>(size_t(query_tiles)));
        for (int64_t i = 0; i < s.len_q; ++i)
          for (int64_t j = 0; j < s.len_k; ++j)
            if (vis.visible(i, j)) seen[size_t(j / block_n)][size_t(i / block_m)] = true;
        for (int64_t nb = 0; nb < key_tiles; ++nb) {
          const KeyTileQueries q(vis, s.len_q, s.len_k, int(nb), block_n, block_m);
          ASSERT_LE(q.begin, q.end);
          for (int64_t mb = 0; mb < query_tiles; ++mb)
            ASSERT_EQ(mb >= q.begin && mb < q.end, bool(seen[size_t(nb)][size_t(mb)]))
                << describe(s, block_m, block_n, mb * block_m, nb);
        }
        for (int64_t mb = 0; mb < query_tiles; ++mb) {  // one run of key tiles per query tile
          int runs = 0;
          for (int64_t nb = 0; nb < key_tiles; ++nb)
            runs += seen[size_t(nb)][size_t(mb)] && (nb == 0 || !seen[size_t(nb - 1)][size_t(mb)]);
          ASSERT_LE(runs, 1) << describe(s, block_m, block_n, mb * block_m, 0);
        }
      }
}

// The deterministic mode adds into a query tile in descending key-tile order because that is the
// order in which the blocks reach it: a block walks (GQA head, query tile) steps head-major over
// its KeyTileQueries range, so it reaches (head h, tile mb) at step h (end - begin) + mb - begin.
// Checked here: a higher key tile touching the query tile reaches it no later than a lower one,
// for causal and full attention with any GQA group, and for every mask without GQA. (With GQA
// under a window that ends - window_left >= 0 - ranges of different widths break it for later
// heads; the order stays deterministic, only some waiting returns.)
TEST(TileRanges, KeyTilesReachAQueryTileInDescendingOrder) {
  std::vector<Shape> all = shapes();
  all.push_back({1000, 1000, -1, 0});
  all.push_back({2048, 1000, -1, 0});
  all.push_back({1000, 2048, -1, 0});
  all.push_back({300, 1000, 500, 7});
  for (const Shape& s : all)
    for (int block_n : {64, 128})
      for (int block_m : {64, 128})
        for (int group : {1, 4}) {
          if (group > 1 && s.window_left >= 0) continue;
          const Visibility vis{s.len_k - s.len_q, s.window_left, s.window_right};
          const int key_tiles = int((s.len_k + block_n - 1) / block_n);
          const int query_tiles = int((s.len_q + block_m - 1) / block_m);
          for (int mb = 0; mb < query_tiles; ++mb)
            for (int h = 0; h < group; ++h) {
              int64_t later = -1;  // the step at which the next higher key tile reaches (h, mb)
              for (int nb = key_tiles - 1; nb >= 0; --nb) {
                const KeyTileQueries q(vis, s.len_q, s.len_k, nb, block_n, block_m);
                if (mb < q.begin || mb >= q.end) continue;
                const int64_t step = int64_t(h) * (q.end - q.begin) + (mb - q.begin);
                ASSERT_GE(step, later) << describe(s, block_m, block_n, int64_t(mb) * block_m, nb)
                                       << " group=" << group << " head=" << h;
                later = step;
              }
            }
        }
}


// The backward's split tail (bwd_tail_split, TailShare): the plan covers every tile once, leaves
// whole waves to the whole-tile kernel, and shares the tail's steps out so that every block gets
// at least one, no block spans more than two tiles (the kernel keeps two partial sums a block),
// and a tile's parts are exactly the blocks block_of names, in the slot the epilogue reads.
TEST(TileRanges, SplitTailSharesEveryStepOnceOverAtMostTwoTilesABlock) {
  int planned = 0;
  for (int sms : {1, 7, 132})
    for (int64_t steps : {1, 2, 3, 8, 17})
      for (int64_t tiles = 1; tiles <= 300; ++tiles) {
        const BwdTail plan = bwd_tail_split(tiles, steps, sms, 1);
        // Tiles of fewer steps than the minimum: whole-tile blocks only.
        const BwdTail short_tiles = bwd_tail_split(tiles, steps, sms, int(steps) + 1);
        EXPECT_EQ(short_tiles.ctas, 0) << tiles;
        EXPECT_EQ(short_tiles.dp_tiles, tiles) << tiles;
        const std::string what = "sms=" + std::to_string(sms) + " steps=" + std::to_string(steps) +
                                 " tiles=" + std::to_string(tiles);
        const int64_t rem = tiles % sms;
        if (plan.ctas == 0) {
          EXPECT_EQ(plan.dp_tiles, tiles) << what;
          EXPECT_TRUE(rem == 0 || 4 * rem > 3 * sms) << what;
          continue;
        }
        ++planned;
        ASSERT_EQ(plan.tiles, rem) << what;
        ASSERT_EQ(plan.dp_tiles + plan.tiles, tiles) << what;
        ASSERT_EQ(plan.dp_tiles % sms, 0) << what;
        ASSERT_EQ(plan.units, plan.tiles * steps) << what;
        ASSERT_LE(plan.ctas, sms) << what;
        const TailShare share{plan.units, plan.ctas};
        ASSERT_EQ(share.first(0), 0) << what;
        ASSERT_EQ(share.first(plan.ctas), plan.units) << what;
        // Per tile: (block, partial-sum slot) of each block whose steps touch it.
        std::vector<std::vector<std::pair<int64_t, int>>> parts(size_t(plan.tiles));
        for (int64_t c = 0; c < plan.ctas; ++c) {
          const int64_t u0 = share.first(c), u1 = share.first(c + 1);
          ASSERT_LT(u0, u1) << what << " block " << c << " has no step";
          for (int64_t v = u0; v < u1; ++v) ASSERT_EQ(share.block_of(v), c) << what << " v=" << v;
          const int64_t t0 = u0 / steps, t1 = (u1 - 1) / steps;
          ASSERT_LE(t1 - t0, 1) << what << " block " << c << " spans more than two tiles";
          for (int64_t t = t0; t <= t1; ++t) parts[size_t(t)].push_back({c, t == t0 ? 0 : 1});
        }
        for (int64_t t = 0; t < plan.tiles; ++t) {
          const int64_t lo = share.block_of(t * steps), hi = share.block_of(t * steps + steps - 1);
          ASSERT_EQ(int64_t(parts[size_t(t)].size()), hi - lo + 1) << what << " tile " << t;
          for (int64_t c = lo; c <= hi; ++c) {
            const auto& part = parts[size_t(t)][size_t(c - lo)];
            EXPECT_EQ(part.first, c) << what << " tile " << t;
            // The epilogue's slot rule: the block's first tile is its slot 0.
            EXPECT_EQ(part.second, share.first(c) / steps == t ? 0 : 1) << what << " tile " << t;
          }
        }
      }
  EXPECT_GT(planned, 100);
  // The tail kernel decodes tile indices in 32 bits: no split from 2^31 tiles, though every
  // other condition holds there (69 tiles past the last whole wave of 132, 64 steps each); one
  // wave fewer, below 2^31, splits.
  const int64_t big = (int64_t(1) << 31) + 1;
  EXPECT_EQ(bwd_tail_split(big, 64, 132, 1).ctas, 0);
  EXPECT_EQ(bwd_tail_split(big, 64, 132, 1).dp_tiles, big);
  EXPECT_GT(bwd_tail_split(big - 132, 64, 132, 1).ctas, 0);
}

}  // namespace
}  // namespace fa::cuda::sm80
