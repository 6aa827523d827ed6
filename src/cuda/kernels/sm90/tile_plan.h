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

}  // namespace fa::cuda::sm90
