// Which key tiles a work tile of the sm90 forward visits, which of them need the mask, and which
// work tile a block takes next, as plain functions (host-tested by brute force:
// tests/test_sm90_plan.cpp). Visibility (core/mask.h) is the backends' one rule: bottom-right
// aligned, causal folded in as window_right = 0.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/mask.h"

namespace fa::cuda::sm90 {

// Key tiles [begin, end) of kN keys that some row of [row0, row0 + rows) sees (rows >= 1, the
// sequence's real rows); begin == end when none sees any key.
struct KeyTiles {
  int begin, end;
};
FA_HOST_DEVICE KeyTiles key_tiles(const Visibility& vis, int64_t row0, int64_t rows, int64_t len_k,
                                  int kN) {
  const int64_t first = vis.key_begin(row0, len_k), last = vis.key_end(row0 + rows, len_k);
  if (first >= last) return {0, 0};
  return {int(first / kN), int((last + kN - 1) / kN)};
}

// True when some (row, key) of rows [row0, row0 + rows) x key tile n0 .. n0 + kN - 1 is not
// visible: the tile runs past len_k, or the visibility rule hides a pair.
FA_HOST_DEVICE bool key_tile_needs_mask(const Visibility& vis, int64_t row0, int64_t rows, int64_t n0,
                                        int64_t len_k, int kN) {
  return n0 + kN > len_k || !vis.block_unmasked(row0, row0 + rows, n0, n0 + kN);
}

// The key tiles [begin, end) (absolute tile indices, possibly empty) in which every (row, key)
// pair of rows [row0, row0 + rows) is visible and inside [0, len_k): the tiles that need no
// mask. The same answer as !key_tile_needs_mask tile by tile, in closed form (tested so).
FA_HOST_DEVICE KeyTiles unmasked_key_tiles(const Visibility& vis, int64_t row0, int64_t rows,
                                           int64_t len_k, int kN) {
  // Every row sees [lo, hi): the last row's left bound, the first row's right bound.
  const int64_t lo = vis.window_left < 0 ? 0 : row0 + rows - 1 + vis.offset - vis.window_left;
  int64_t hi = vis.window_right < 0 ? len_k : row0 + vis.offset + vis.window_right + 1;
  if (hi > len_k) hi = len_k;
  const int64_t begin = lo <= 0 ? 0 : (lo + kN - 1) / kN;  // first tile starting at or after lo
  const int64_t end = hi <= 0 ? 0 : hi / kN;                // tiles ending at or before hi
  return {int(begin), int(end > begin ? end : begin)};
}

// The order in which a work tile visits its key tiles (producer and consumers alike): the
// tiles that need the mask for some row of the work tile first (those past the unmasked range,
// last to first: a causal tile's diagonal first; then those before it), then the unmasked ones in
// order. The consumers then run the masked steps in one loop and the rest in a second one whose
// softmax has no mask code (fwd_kernel.cuh, FA_TUNING_SM90_FWD_PEEL). `masked` counts the first
// kind; tile(i) is the i-th tile visited, a permutation of [kt.begin, kt.end).
struct KeyOrder {
  int begin, end;  // the work tile's key tiles (KeyTiles)
  int ub, ue;      // the unmasked ones, [ub, ue), clipped into [begin, end)
  int masked;      // (end - ue) + (ub - begin); without peeling end - begin
  FA_HOST_DEVICE int tile(int i) const {
    const int back = end - ue;
    return i < back ? end - 1 - i : i < masked ? begin + (i - back) : ub + (i - masked);
  }
};
// kt: the work tile's key tiles; um: the ones no row of the work tile needs masked
// (unmasked_key_tiles over all its rows). peel false: tiles in order, all counted masked (one
// loop, the mask checked tile by tile).
FA_HOST_DEVICE KeyOrder key_order(KeyTiles kt, KeyTiles um, bool peel) {
  if (!peel) return {kt.begin, kt.end, kt.begin, kt.end, kt.end - kt.begin};  // tile(i): in order
  const int ub = um.begin < kt.begin ? kt.begin : um.begin > kt.end ? kt.end : um.begin;
  const int ue0 = um.end > kt.end ? kt.end : um.end;
  const int ue = ue0 < ub ? ub : ue0;
  return {kt.begin, kt.end, ub, ue, (kt.end - ue) + (ub - kt.begin)};
}

// A block's work item: one tile of kBlockM queries (128, or 192 with three consumer warpgroups)
// of one (head, batch entry). The persistent kernel walks
// tiles blockIdx.x, + gridDim.x, ...; tile numbers run m fastest inside a (head, batch entry), so
// that the blocks running at once share one head's K / V in L2. With a right bound on the keys
// (causal) later query tiles see more keys: `reverse` puts a head's last query tiles first (the
// longest work starts first, the short fills the tail).
struct TileCoord {
  int m_block, head, batch;
};
FA_HOST_DEVICE TileCoord tile_coord(int tile, int m_blocks, int heads, bool reverse) {
  const int m = tile % m_blocks, hb = tile / m_blocks;
  return {reverse ? m_blocks - 1 - m : m, hb % heads, hb / heads};
}

// Consumer warpgroups of the d 64 kernel (fwd_kernel.cuh): `knob` (Tuning::sm90_fwd_d64_consumers)
// 2 or 3 as it says; 0 by length: three (192 queries a block) when queries and keys both reach
// kThreeConsumersMinSeqlen. Measured on the H200 (bf16 quick grid, bench/results/
// h200-2026-12-02-fwd-sm90-d64-consumers-637559d-quick.json), three against two: full 1k -2%, 4k
// +6%, 16k +11%; causal 1k -11%, 4k +2%, 16k +4%. Short sequences lose the padding of their last
// 192-row tile (1k: 12.5% of the rows) and half as many key tiles to spread a tile's fixed costs.
constexpr int64_t kThreeConsumersMinSeqlen = 2048;
FA_HOST_DEVICE int d64_consumers(int knob, int64_t seqlen_q, int64_t seqlen_k) {
  if (knob == 2 || knob == 3) return knob;
  return seqlen_q >= kThreeConsumersMinSeqlen && seqlen_k >= kThreeConsumersMinSeqlen ? 3 : 2;
}

}  // namespace fa::cuda::sm90
