// The cuda-kvcache family's launch plan: its tile shape, how many blocks an SM holds, how many
// parts split-KV cuts the keys into, and the workspace those parts take. Host code only (the
// kernels see the result as KvArgs); host-tested by tests/test_kvcache_plan.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/splits.h"
#include "cuda/workspace_align.h"

namespace fa::cuda::kvcache {

// Keys of one warp's K / V tile, and the tiles in flight per warp. Compile-time choices, exposed
// for tuning builds (the kernels' shared memory follows them).
#ifndef FA_KVCACHE_BLOCK_N
#define FA_KVCACHE_BLOCK_N 16
#endif
#ifndef FA_KVCACHE_STAGES
#define FA_KVCACHE_STAGES 2
#endif

constexpr int kBlockM = 16;  // packed query rows of a block (one m16 tile)
// The most dynamic shared memory a block may take on every part the family serves (sm86 / sm89:
// 99 KB; A100 163 KB, H100 / H200 227 KB).
constexpr int64_t kSmemLimit = 99 * 1024;
// Resident threads an SM holds (sm80 through sm90).
constexpr int64_t kMaxThreadsPerSm = 2048;
constexpr int kBlockN = FA_KVCACHE_BLOCK_N;
constexpr int kStages = FA_KVCACHE_STAGES;

// Warps of a block: each streams its own key tiles through its own ring of kStages (K, V) tiles
// and keeps its own online softmax; the block merges them at the end. Four up to d 128, two above
// (so that the ring stays under sm86 / sm89's 99 KB).
constexpr int warps_for(int kernel_d) { return kernel_d <= 128 ? 4 : 2; }

// Shared memory of a block: the Q tile and the warps' rings (16-bit elements; column blocks of
// 64 as cuda/tile/swizzle.h stores them). With fp8 inputs (fp8) a warp's ring holds its stages'
// K / V tiles as bytes, kernel_d a row, and one 16-bit (K, V) pair they are converted into.
constexpr int64_t padded_cols(int kernel_d) { return (kernel_d + 63) / 64 * 64; }
constexpr int64_t ring_bytes(int kernel_d, bool fp8) {
  return fp8 ? kStages * 2 * kBlockN * int64_t(kernel_d) + 2 * 2 * kBlockN * padded_cols(kernel_d)
             : 2 * kStages * 2 * kBlockN * padded_cols(kernel_d);
}
constexpr int64_t smem_bytes(int kernel_d, bool fp8 = false) {
  return 2 * padded_cols(kernel_d) * kBlockM + warps_for(kernel_d) * ring_bytes(kernel_d, fp8);
}

// Keys a part of a split call should have at least: below it the partials' traffic and the
// combine cost more than the parallelism gains (a warp then streams about four tiles).
constexpr int64_t min_keys_per_split(int kernel_d) { return 4 * warps_for(kernel_d) * kBlockN; }

// What the plan needs of the attention kernel.
struct Shape {
  int block_n = 0;       // keys of a tile
  int threads = 0;       // threads of a block
  int64_t smem = 0;      // its dynamic shared memory
  int64_t min_keys = 0;  // keys a split part should have at least
};
constexpr Shape sm80_shape(int kernel_d, bool fp8 = false) {
  return {kBlockN, 32 * warps_for(kernel_d), smem_bytes(kernel_d, fp8), min_keys_per_split(kernel_d)};
}

struct Plan {
  int64_t row_tiles = 0;  // 16-row tiles of one (batch entry, kv head): seqlen_q * group rows
  int64_t splits = 1;     // parts of the keys (1: no split, no combine)
  int64_t blocks = 0;     // row_tiles * batch * heads_kv, before the split
};

// Waves of the device's resident blocks that `blocks` blocks take (whole waves; a last one
// partly filled counts as one).
inline int64_t waves_of(int64_t blocks, int64_t workers) { return (blocks + workers - 1) / workers; }

// From this many waves on, a call is not split for the waves' sake: its last wave's tail is under
// a quarter of its time.
constexpr int64_t kSplitWavesBelow = 4;
// The heuristic takes the smallest split count within this many percent of the best one's
// waves per part: each further part costs its partials' write and a share of the combine.
constexpr int64_t kSplitSlackPercent = 3;

// The parts of a call: the caller's num_splits (capped at kMaxSplits and at one per tile of keys),
// else the count whose blocks fill the device's resident blocks (`workers`) best. A decode is
// bound by memory, and a last wave of a few blocks reads at a fraction of the rate, so its time
// goes as waves(n) / n (each part 1/n of the keys): the smallest n within 3% of the best n up to
// the keys' limit (shape.min_keys) and kMaxSplits, each part costing its partials' write and
// the combine. (The first heuristic, enough parts to cover the workers once, overshot a wave:
// 8 blocks went to 50 parts, 400 blocks on 396 workers, the last 4 a second wave.) shape: the
// attention kernel's (sm80_shape); sms / smem_optin: the device's; seqlen_k: the most keys an
// entry attends to (a KV cache's capacity on CUDA).
inline Plan make_plan(int64_t batch, int64_t heads_kv, int64_t seqlen_q, int64_t group,
                      int64_t seqlen_k, int64_t num_splits, const Shape& shape, int sms,
                      int smem_optin) {
  Plan plan;
  plan.row_tiles = (seqlen_q * group + kBlockM - 1) / kBlockM;
  plan.blocks = plan.row_tiles * batch * heads_kv;
  const int64_t key_tiles = (seqlen_k + shape.block_n - 1) / shape.block_n;
  if (num_splits > 0) {
    int64_t n = num_splits < kMaxSplits ? num_splits : kMaxSplits;
    if (n > key_tiles) n = key_tiles > 0 ? key_tiles : 1;
    plan.splits = n;
    return plan;
  }
  const int64_t per_sm_smem = smem_optin / shape.smem;
  const int64_t per_sm_threads = kMaxThreadsPerSm / shape.threads;
  int64_t per_sm = per_sm_smem < per_sm_threads ? per_sm_smem : per_sm_threads;
  if (per_sm < 1) per_sm = 1;
  const int64_t workers = int64_t(sms) * per_sm;
  if (plan.blocks <= 0 || plan.blocks >= kSplitWavesBelow * workers) return plan;
  int64_t cap = seqlen_k / shape.min_keys;
  if (cap > kMaxSplits) cap = kMaxSplits;
  if (cap <= 1) return plan;
  // waves(n) / n compared without a division: waves(a) / a < waves(b) / b as
  // waves(a) b < waves(b) a.
  auto waves = [&](int64_t n) { return waves_of(n * plan.blocks, workers); };
  int64_t best = 1;
  for (int64_t n = 2; n <= cap; ++n)
    if (waves(n) * best < waves(best) * n) best = n;
  // The smallest n within kSplitSlackPercent of the best.
  for (int64_t n = 1; n <= best; ++n)
    if (100 * waves(n) * best <= (100 + kSplitSlackPercent) * waves(best) * n) {
      plan.splits = n;
      break;
    }
  return plan;
}

// The workspace of a call, in the order the launch carves it (each piece 256-byte aligned): the
// rotated q (batch, seqlen_q, heads_q, d) in the inputs' 16-bit type when rotary is on, then the
// split partials, fp32 O (splits, total_q * heads_q, d) and LSE (splits, total_q * heads_q), then
// one int32 counter per block of a part (`blocks`: Plan::blocks), which the attention kernel's
// parts count themselves in with when the last of them merges the partials (Tuning::
// kvcache_fused_merge; zeroed by the launch).
struct WorkspaceLayout {
  size_t rotated_q = 0, part_o = 0, part_lse = 0, counters = 0;
  size_t bytes() const { return rotated_q + part_o + part_lse + counters; }
};
inline WorkspaceLayout workspace_layout(int64_t total_q, int64_t heads_q, int64_t head_dim,
                                        bool rotary, int64_t splits, int64_t blocks) {
  WorkspaceLayout w;
  const size_t rows = size_t(total_q) * size_t(heads_q);
  if (rotary) w.rotated_q = workspace_align(rows * size_t(head_dim) * 2);
  if (splits > 1) {
    w.part_o = workspace_align(size_t(splits) * rows * size_t(head_dim) * 4);
    w.part_lse = workspace_align(size_t(splits) * rows * 4);
    w.counters = workspace_align(size_t(blocks) * 4);
  }
  return w;
}

}  // namespace fa::cuda::kvcache
