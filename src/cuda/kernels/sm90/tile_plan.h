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

// A block's work item: one 128-query tile of one (head, batch entry). The persistent kernel walks
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

}  // namespace fa::cuda::sm90
