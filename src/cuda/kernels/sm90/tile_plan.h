// Which key tiles a block of the sm90 forward visits and which of them need the mask, as plain
// functions of the block's rows (host-tested by brute force: tests/test_sm90_plan.cpp). Causal is
// bottom-right aligned: row r sees keys k <= r + shift (shift = len_k - len_q) below len_k.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa::cuda::sm90 {

// Key tiles [0, n) that rows [row0, row0 + rows) see any key of (tiles of kN keys).
FA_HOST_DEVICE int key_tiles_seen(int64_t row0, int rows, int64_t shift, int64_t len_k, int kN,
                                  bool causal) {
  const int n_blocks = int((len_k + kN - 1) / kN);
  if (!causal) return n_blocks;
  const int64_t last = row0 + rows - 1 + shift;  // the last row's last visible key
  if (last < 0) return 0;
  const int64_t n = last / kN + 1;
  return n < n_blocks ? int(n) : n_blocks;
}

// True when some (row, key) of rows [row0, row0 + rows) x key tile n0 .. n0 + kN - 1 is not
// visible: the tile runs past len_k, or (causal) its last key lies past the first row's diagonal.
FA_HOST_DEVICE bool key_tile_needs_mask(int64_t row0, int64_t n0, int64_t shift, int64_t len_k,
                                        int kN, bool causal) {
  return n0 + kN > len_k || (causal && n0 + kN - 1 > row0 + shift);
}

// A block's work item: one 128-query tile of one (head, batch entry). The persistent kernel walks
// tiles blockIdx.x, + gridDim.x, ...; tile numbers run m fastest inside a (head, batch entry), so
// that the blocks running at once share one head's K / V in L2. Causal: a head's last query tiles
// come first (they see the most keys: the longest work starts first, the short fills the tail).
struct TileCoord {
  int m_block, head, batch;
};
FA_HOST_DEVICE TileCoord tile_coord(int tile, int m_blocks, int heads, bool causal) {
  const int m = tile % m_blocks, hb = tile / m_blocks;
  return {causal ? m_blocks - 1 - m : m, hb % heads, hb / heads};
}

}  // namespace fa::cuda::sm90
