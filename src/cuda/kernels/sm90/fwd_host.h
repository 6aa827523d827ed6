// Host-side choices of the sm90 forward shared by its 16-bit launch (fwd_sm90.cu) and its fp8
// launch (fwd_fp8_sm90.cu): the kernel head dim, how blocks take work tiles, GQA packing, the
// work-tile count and the maps' extents.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda::sm90_host {

// The kernel head dim serving head_dim (the smallest of 64, 128, 256 at or above it).
inline int sm90_kernel_head_dim(int64_t head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 256 ? 256 : 0;
}

// Whether this build has the family's sm_90a code (fwd_sm90.cu).
bool built_for_sm90a();

// How the blocks take their work tiles (Tuning::sm90_fwd_persistent): one block a tile, or
// persistent blocks (one an SM) with the dynamic scheduler or the static walk.
enum class Launch { kPerTile, kDynamic, kStatic };

inline Launch launch_mode(const Params& p, const Context& ctx, bool have_counter) {
  if (ctx.device.sms <= 0) return Launch::kPerTile;
  // Tiles of one length: no causal mask, window or packed batch.
  const bool uniform = !p.varlen() && p.window_left < 0 && p.window_right < 0;
  switch (ctx.tuning.sm90_fwd_persistent) {
    case 0: return Launch::kPerTile;
    case 1:
      if (have_counter) return Launch::kDynamic;
      return uniform ? Launch::kStatic : Launch::kPerTile;
    case 2: return Launch::kStatic;
    default: return uniform ? Launch::kStatic : Launch::kPerTile;
  }
}

// GQA packing (fwd_kernel.cuh): log2 of the query heads a KV head's tile interleaves, or 0.
// Where a tile of one head would be mostly empty (seqlen_q < 128) and the group is a power of
// two up to 32 (128 rows hold whole groups): K / V are then read once for the group instead of
// once a query head. Not with dropout (the keep-mask's blocks are rows of one head).
inline int pack_log2(const Params& p, const Context& ctx) {
  const int64_t g = p.heads_q / p.heads_kv;
  if (!ctx.tuning.sm90_fwd_pack_gqa || g < 2 || g > 32 || (g & (g - 1)) != 0) return 0;
  if (p.dropout_p > 0.f || p.seqlen_q >= 128) return 0;
  int lp = 0;
  while ((int64_t(1) << lp) < g) ++lp;
  return lp;
}

// Work tiles of a call (tile_plan.h; rows of the packed query heads when packing).
inline int64_t work_tiles(const Params& p, int lp, int block_m) {
  const int64_t heads = lp > 0 ? p.heads_kv : p.heads_q;
  return ((p.seqlen_q << lp) + block_m - 1) / block_m * heads * p.batch;
}

// The batch and rows of the Q and K / V maps: a packed batch is one entry of its total rows (the
// kernel adds each sequence's start).
struct MapExtents {
  int64_t batch, rows_q, rows_k;
};
inline MapExtents map_extents(const Params& p) {
  if (p.varlen()) return {1, p.total_q, p.total_k};
  return {p.batch, p.seqlen_q, p.seqlen_k};
}

// The size limits both sm90 forwards share (int32 coordinates in the kernels, the scheduler's
// tile count): the reason, or nullptr when the call is within them.
inline const char* size_refusal(const Params& p, const Context& ctx) {
  if (p.seqlen_q > (int64_t(1) << 30) || p.seqlen_k > (int64_t(1) << 30)) return "seqlen > 2^30";
  if (p.total_q >= (int64_t(1) << 31) || p.total_k >= (int64_t(1) << 31)) return "rows past 2^31";
  if (work_tiles(p, pack_log2(p, ctx), 128) >= (int64_t(1) << 31))
    return "more than 2^31 work tiles";
  return nullptr;
}

}  // namespace fa::cuda::sm90_host
