// The cuda-kvcache family's launch plan (src/cuda/kernels/kvcache/plan.h), on the host: the row
// tiles of GQA packing, the split count (forced, capped, and the heuristic filling whole waves of
// the SMs' resident blocks with parts of at least min_keys_per_split keys), shared memory, and
// the workspace layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cuda/kernels/kvcache/plan.h"

namespace fa::cuda::kvcache {
namespace {

constexpr int kH200Sms = 132, kH200Optin = 232448;  // 227 KB
constexpr Shape kSm80 = sm80_shape(128);

TEST(KvCachePlan, SharedMemoryFitsEveryPart) {
  for (int d : {32, 64, 96, 128, 160, 192, 224, 256}) {
    SCOPED_TRACE(d);
    EXPECT_LE(smem_bytes(d), kSmemLimit);
  }
  EXPECT_EQ(smem_bytes(128), 2 * 128 * (16 + 4 * kStages * 2 * kBlockN));
  // fp8 inputs: a warp's stages as bytes and one converted 16-bit (K, V) pair; never more than
  // the 16-bit ring with two stages, less where head_dim is below its 64-column padding.
  for (int d : {32, 64, 96, 128, 160, 192, 224, 256}) {
    SCOPED_TRACE(d);
    EXPECT_LE(smem_bytes(d, true), smem_bytes(d));
    EXPECT_EQ(smem_bytes(d, true) - 2 * padded_cols(d) * kBlockM,
              warps_for(d) * (kStages * 2 * kBlockN * d + 2 * 2 * kBlockN * padded_cols(d)));
  }
  EXPECT_LT(smem_bytes(32, true), smem_bytes(32));
  EXPECT_EQ(sm80_shape(128, true).smem, smem_bytes(128, true));
}

TEST(KvCachePlan, RowTilesPackTheGroup) {
  // 32 query heads over 8: 4 rows a query; 1 query -> 1 tile, 5 queries -> 2 tiles.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 4096, 1, kSm80, kH200Sms, kH200Optin).row_tiles, 1);
  EXPECT_EQ(make_plan(1, 8, 5, 4, 4096, 1, kSm80, kH200Sms, kH200Optin).row_tiles, 2);
  // MQA with 32 heads: 32 rows a query, 2 tiles.
  EXPECT_EQ(make_plan(2, 1, 1, 32, 4096, 1, kSm80, kH200Sms, kH200Optin).row_tiles, 2);
  EXPECT_EQ(make_plan(2, 1, 1, 32, 4096, 1, kSm80, kH200Sms, kH200Optin).blocks, 4);
}

TEST(KvCachePlan, ForcedSplitsAreCapped) {
  EXPECT_EQ(make_plan(1, 8, 1, 4, 4096, 7, kSm80, kH200Sms, kH200Optin).splits, 7);
  EXPECT_EQ(make_plan(1, 8, 1, 4, 1 << 20, 500, kSm80, kH200Sms, kH200Optin).splits, kMaxSplits);
  // More parts than key tiles: one part a tile.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 40, 128, kSm80, kH200Sms, kH200Optin).splits, 3);
}

TEST(KvCachePlan, HeuristicFillsTheResidentBlocks) {
  // d 128: 68 KB a block, 3 an SM on the H200: 396 resident blocks.
  const int64_t per_sm = kH200Optin / smem_bytes(128);
  ASSERT_EQ(per_sm, 3);
  // batch 1, 8 kv heads, 32k keys: 8 blocks -> 49 parts, 392 blocks in one wave (50 would be
  // 400, a second wave of 4; 99 parts fill two waves, no more than 3% better).
  EXPECT_EQ(make_plan(1, 8, 1, 4, 32768, 0, kSm80, kH200Sms, kH200Optin).splits, 49);
  // 1k keys: at most 1024 / 256 = 4 parts.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 1024, 0, kSm80, kH200Sms, kH200Optin).splits, 4);
  // Below two parts' worth of keys: no split.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 300, 0, kSm80, kH200Sms, kH200Optin).splits, 1);
  // 512 blocks (batch 64, 8 kv heads) are 1.3 waves: 3 parts make 1536, 3.9 waves.
  EXPECT_EQ(make_plan(64, 8, 1, 4, 4096, 0, kSm80, kH200Sms, kH200Optin).splits, 3);
  // From four waves on, no split (batch 64, 32 kv heads: 2048 blocks, 5.2 waves).
  EXPECT_EQ(make_plan(64, 32, 1, 1, 4096, 0, kSm80, kH200Sms, kH200Optin).splits, 1);
  // One block, a huge cache: the smallest count within 3% of kMaxSplits' one wave.
  EXPECT_EQ(make_plan(1, 1, 1, 1, 1 << 24, 0, kSm80, kH200Sms, kH200Optin).splits, 125);
}

// The heuristic's choice against every count it could make: never more than 3% slower by its
// own measure (waves / parts) than the best, and no smaller count as good.
TEST(KvCachePlan, HeuristicIsTheSmallestWithinThreePercent) {
  const int64_t workers = kH200Sms * (kH200Optin / smem_bytes(128));
  for (int64_t batch : {1, 2, 3, 8, 13, 32, 64})
    for (int64_t heads : {1, 8, 32})
      for (int64_t keys : {512, 4096, 65536}) {
        const Plan pl = make_plan(batch, heads, 1, 4, keys, 0, kSm80, kH200Sms, kH200Optin);
        SCOPED_TRACE(std::to_string(batch) + " x " + std::to_string(heads) + " x " + std::to_string(keys));
        const int64_t cap = std::min<int64_t>(keys / kSm80.min_keys, kMaxSplits);
        if (pl.blocks >= kSplitWavesBelow * workers || cap <= 1) {
          EXPECT_EQ(pl.splits, 1);
          continue;
        }
        auto cost = [&](int64_t n) { return double(waves_of(n * pl.blocks, workers)) / double(n); };
        double best = cost(1);
        for (int64_t n = 2; n <= cap; ++n) best = std::min(best, cost(n));
        ASSERT_GE(pl.splits, 1);
        ASSERT_LE(pl.splits, cap);
        EXPECT_LE(cost(pl.splits), 1.03 * best + 1e-12);
        for (int64_t n = 1; n < pl.splits; ++n) EXPECT_GT(cost(n), 1.03 * best - 1e-12) << n;
      }
}

TEST(KvCachePlan, WorkspaceLayout) {
  const WorkspaceLayout none = workspace_layout(8, 32, 128, false, 1, 16);
  EXPECT_EQ(none.bytes(), 0u);
  const WorkspaceLayout w = workspace_layout(3, 32, 128, true, 5, 70);
  EXPECT_EQ(w.rotated_q, workspace_align(3 * 32 * 128 * 2));
  EXPECT_EQ(w.part_o, workspace_align(5 * 3 * 32 * 128 * 4));
  EXPECT_EQ(w.part_lse, workspace_align(5 * 3 * 32 * 4));
  EXPECT_EQ(w.counters, workspace_align(70 * 4));  // a counter per block of a part
  EXPECT_EQ(w.bytes(), w.rotated_q + w.part_o + w.part_lse + w.counters);
  EXPECT_EQ(w.bytes() % kWorkspaceAlign, 0u);
}

}  // namespace
}  // namespace fa::cuda::kvcache
