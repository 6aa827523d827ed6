// The cuda-kvcache family's launch plan (src/cuda/kernels/kvcache/plan.h), on the host: the row
// tiles of GQA packing, the split count (forced, capped, and the heuristic filling the SMs' resident
// blocks with parts of at least min_keys_per_split keys), shared memory, and the workspace layout.
#include <gtest/gtest.h>

#include "cuda/kernels/kvcache/plan.h"

namespace fa::cuda::kvcache {
namespace {

constexpr int kH200Sms = 132, kH200Optin = 232448;  // 227 KB

TEST(KvCachePlan, SharedMemoryFitsEveryPart) {
  for (int d : {32, 64, 96, 128, 160, 192, 224, 256}) {
    SCOPED_TRACE(d);
    EXPECT_LE(smem_bytes(d), kSmemLimit);
  }
  EXPECT_EQ(smem_bytes(128), 2 * 128 * (16 + 4 * kStages * 2 * kBlockN));
}

TEST(KvCachePlan, RowTilesPackTheGroup) {
  // 32 query heads over 8: 4 rows a query; 1 query -> 1 tile, 5 queries -> 2 tiles.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 4096, 1, 128, kH200Sms, kH200Optin).row_tiles, 1);
  EXPECT_EQ(make_plan(1, 8, 5, 4, 4096, 1, 128, kH200Sms, kH200Optin).row_tiles, 2);
  // MQA with 32 heads: 32 rows a query, 2 tiles.
  EXPECT_EQ(make_plan(2, 1, 1, 32, 4096, 1, 128, kH200Sms, kH200Optin).row_tiles, 2);
  EXPECT_EQ(make_plan(2, 1, 1, 32, 4096, 1, 128, kH200Sms, kH200Optin).blocks, 4);
}

TEST(KvCachePlan, ForcedSplitsAreCapped) {
  EXPECT_EQ(make_plan(1, 8, 1, 4, 4096, 7, 128, kH200Sms, kH200Optin).splits, 7);
  EXPECT_EQ(make_plan(1, 8, 1, 4, 1 << 20, 500, 128, kH200Sms, kH200Optin).splits, kMaxSplits);
  // More parts than key tiles: one part a tile.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 40, 128, 128, kH200Sms, kH200Optin).splits, 3);
}

TEST(KvCachePlan, HeuristicFillsTheResidentBlocks) {
  // d 128: 68 KB a block, 3 an SM on the H200: 396 resident blocks.
  const int64_t per_sm = kH200Optin / smem_bytes(128);
  ASSERT_EQ(per_sm, 3);
  // batch 1, 8 kv heads, 32k keys: 8 blocks -> ceil(396 / 8) = 50 parts of 656 keys.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 32768, 0, 128, kH200Sms, kH200Optin).splits, 50);
  // 1k keys: at most 1024 / 256 = 4 parts.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 1024, 0, 128, kH200Sms, kH200Optin).splits, 4);
  // Below two parts' worth of keys, or with enough blocks: no split.
  EXPECT_EQ(make_plan(1, 8, 1, 4, 300, 0, 128, kH200Sms, kH200Optin).splits, 1);
  EXPECT_EQ(make_plan(64, 8, 1, 4, 4096, 0, 128, kH200Sms, kH200Optin).splits, 1);
  // One block, a huge cache: kMaxSplits.
  EXPECT_EQ(make_plan(1, 1, 1, 1, 1 << 24, 0, 128, kH200Sms, kH200Optin).splits, kMaxSplits);
}

TEST(KvCachePlan, WorkspaceLayout) {
  const WorkspaceLayout none = workspace_layout(8, 32, 128, false, 1);
  EXPECT_EQ(none.bytes(), 0u);
  const WorkspaceLayout w = workspace_layout(3, 32, 128, true, 5);
  EXPECT_EQ(w.rotated_q, workspace_align(3 * 32 * 128 * 2));
  EXPECT_EQ(w.part_o, workspace_align(5 * 3 * 32 * 128 * 4));
  EXPECT_EQ(w.part_lse, workspace_align(5 * 3 * 32 * 4));
  EXPECT_EQ(w.bytes() % kWorkspaceAlign, 0u);
}

}  // namespace
}  // namespace fa::cuda::kvcache
