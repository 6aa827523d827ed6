// Which keys a warp's rows see, as the sm80 forward kernel classifies them: per-warp tile-index
// ranges (WarpTiles: skip / unmasked / masked) and per-thread 32-bit row bounds (RowKeys: the
// per-element mask of a masked tile). Integer math only, compiled for host and device so that
// tests/test_tile_ranges.cpp checks it against Visibility::visible by brute force.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/mask.h"

namespace fa::cuda::sm80 {

// The keys this thread's first row (row_g) sees, in 32-bit key coordinates, for the masked
// tiles and the ALiBi distance: the thread's rows row_g + dr (dr = 16 mt + 8 r) see keys
// [begin + dr, min(end + dr, len_k)) on the diagonal diag + dr. 32 bits because the loop keeps
// these live: the 64-bit Visibility and row index cost ~8 registers, enough to spill.
// begin / end are clamped to [-kSlack, len_k + kSlack]: adding dr < kSlack to a clamped value
// stays on the same side of [0, len_k], so clamping never changes a visible range.
struct RowKeys {
  static constexpr int kSlack = 64;
  int begin, end, diag, len_k;

  FA_HOST_DEVICE RowKeys(const Visibility& vis, int64_t row_g, int64_t len_k64) {
    auto clamp = [&](int64_t x) {
      return int(x < -kSlack ? -kSlack : (x > len_k64 + kSlack ? len_k64 + kSlack : x));
    };
    diag = int(row_g + vis.offset);
    begin = vis.window_left < 0 ? -kSlack : clamp(row_g + vis.offset - vis.window_left);
    end = vis.window_right < 0 ? int(len_k64) + kSlack
                               : clamp(row_g + vis.offset + vis.window_right + 1);
    len_k = int(len_k64);
  }

  // Keys [lo, hi) of the tile [n0, n0 + block_n) that the thread's row row_g + dr sees, relative
  // to n0 (0 <= lo, hi <= block_n; lo >= hi: none).
  FA_HOST_DEVICE void tile_range(int dr, int n0, int block_n, int* lo, int* hi) const {
    const int e = end + dr < len_k ? end + dr : len_k;
    const int l = begin + dr - n0, h = e - n0;
    *lo = l < 0 ? 0 : (l > block_n ? block_n : l);
    *hi = h < 0 ? 0 : (h > block_n ? block_n : h);
  }
};

// Which key tiles a warp must compute, and which of those need no mask, classified once per
// block as tile-index ranges: per warp, not per block, because on a causal diagonal most warps'
// rows see a key tile entirely or not at all, so only one or two of the four take the masked
// path and the others run the unmasked one or skip the tile. The ranges are loop-invariant so
// that each tile's branch costs two integer compares (testing the mask per tile in 64-bit
// arithmetic sat on the loop's critical path, right after the barrier, and cost ~7% at d = 128).
// Padding rows past len_q widen the warp's row range, which only makes both tests conservative.
struct WarpTiles {
  // Tile indices fit 32 bits (validation caps seqlen_k far below 2^31 tiles); 64-bit copies
  // held for the whole loop pushed the d = 64 kernel into a spill.
  int active_begin, active_end;  // tiles holding a key some row of the warp sees
  int full_begin, full_end;      // tiles every row of the warp sees entirely (and < len_k)

  FA_HOST_DEVICE WarpTiles(const Visibility& vis, int64_t row0, int rows, int64_t len_k, int block_n) {
    // Rows see key ranges [begin(i), end(i)) with both bounds non-decreasing in i.
    const int64_t any_begin = vis.key_begin(row0, len_k);
    const int64_t any_end = vis.key_end(row0 + rows, len_k);
    const int64_t all_begin = vis.key_begin(row0 + rows - 1, len_k);
    const int64_t all_end = vis.key_end(row0 + 1, len_k);
    active_begin = int(any_begin / block_n);
    active_end = any_begin < any_end ? int((any_end + block_n - 1) / block_n) : active_begin;
    full_begin = int((all_begin + block_n - 1) / block_n);
    full_end = int(all_end / block_n);
  }
};

// The query tiles [begin, end) (block_m rows each) holding a row that sees a key of key tile nb
// (keys [nb block_n, nb block_n + block_n) clipped to len_k; the tile must hold a key); begin ==
// end: none. The backward walks these per key tile, and its deterministic mode counts, per
// query tile, the key tiles whose range holds it.
struct KeyTileQueries {
  int begin, end;

  FA_HOST_DEVICE KeyTileQueries(const Visibility& vis, int64_t len_q, int64_t len_k, int nb,
                                int block_n, int block_m) {
    const int64_t n0 = int64_t(nb) * block_n;
    const int64_t keys = len_k - n0 < block_n ? len_k - n0 : block_n;
    const int64_t row_lo = vis.row_begin(n0, len_q), row_hi = vis.row_end(n0 + keys, len_q);
    begin = int(row_lo / block_m);
    end = row_lo < row_hi ? int((row_hi + block_m - 1) / block_m) : begin;
  }
};

// The query tiles [begin, end) (block_m rows each) at whose step key tile nb needs no mask: its
// keys [nb block_n, nb block_n + block_n) all lie below len_k and every row of the query tile
// (rows past len_q excluded) sees every one of them. Computed once per block, so that a backward
// step tests two ints instead of the 64-bit visibility of its corners (~100 uniform instructions
// a step at d = 256). Tiles outside KeyTileQueries' range may be in it; the backward never asks.
struct KeyTileUnmasked {
  int begin, end;

  FA_HOST_DEVICE KeyTileUnmasked(const Visibility& vis, int64_t len_q, int64_t len_k, int nb,
                                 int block_n, int block_m) {
    const int64_t n0 = int64_t(nb) * block_n;
    int64_t lo = 0, hi = n0 + block_n > len_k ? 0 : (len_q + block_m - 1) / block_m;
    if (vis.window_right >= 0) {  // the tile's first row sees the last key
      const int64_t y = n0 + block_n - 1 - vis.offset - vis.window_right;
      lo = y <= 0 ? 0 : (y + block_m - 1) / block_m;
    }
    if (vis.window_left >= 0) {  // the tile's last row sees the first key
      const int64_t x = n0 - vis.offset + vis.window_left;
      if (len_q - 1 > x) {  // then the last query tile fails; a full tile mb needs mb bm + bm <= x + 1
        const int64_t e = x + 1 <= 0 ? 0 : (x + 1) / block_m;
        hi = e < hi ? e : hi;
      }
    }
    begin = int(lo < hi ? lo : hi);
    end = int(hi);
  }
};

// The backward's split tail (the comment above bwd_tail in bwd_sm80.h): the plan for `tiles` key
// tiles (x kv heads x batch) of `steps` steps each on `sms` SMs.
struct BwdTail {
  int64_t dp_tiles = 0;  // whole-tile blocks: every tile where there is no split tail
  int64_t tiles = 0;     // tail tiles (after the dp_tiles)
  int64_t units = 0;     // their steps, tiles x steps
  int steps = 0;         // steps of every key tile
  int ctas = 0;          // blocks sharing the tail (0: none)
};
// tiles: key tiles x kv heads x batch; steps: each tile's; sms: the device's; no split tail
// for tiles of fewer than min_steps steps, nor for a tail of more than kBwdTailMaxWaveNum /
// kBwdTailMaxWaveDen of a wave (a nearly whole last wave leaves few SMs idle, so splitting it
// gains little).
constexpr int kBwdTailMaxWaveNum = 3, kBwdTailMaxWaveDen = 4;  // 3/4
FA_HOST_DEVICE BwdTail bwd_tail_split(int64_t tiles, int64_t steps, int sms, int min_steps) {
  BwdTail t;
  t.dp_tiles = tiles;
  const int64_t rem = sms > 0 ? tiles % sms : 0;
  if (steps <= 0 || steps < min_steps || rem == 0 ||
      kBwdTailMaxWaveDen * rem > kBwdTailMaxWaveNum * int64_t(sms) ||
      rem * steps >= (int64_t(1) << 31) || tiles >= (int64_t(1) << 31))
    return t;
  t.dp_tiles = tiles - rem;
  t.tiles = rem;
  t.steps = int(steps);
  t.units = rem * steps;
  t.ctas = int(t.units < sms ? t.units : sms);
  return t;
}
// The split tail's `units` steps shared out over `blocks`
// blocks (units >= blocks > 0), block c taking steps [first(c), first(c + 1)), at least one
// each. Host-tested against a walk over every step.
struct TailShare {
  int64_t units, blocks;

  FA_HOST_DEVICE int64_t first(int64_t c) const { return c * units / blocks; }
  // The block whose steps hold step v (0 <= v < units): the last c with first(c) <= v.
  FA_HOST_DEVICE int64_t block_of(int64_t v) const {
    return ((v + 1) * blocks + units - 1) / units - 1;
  }
};

// The mask of one backward step (bwd_kernel.cuh): keys [n0, n0 + block_n) against queries
// [m0, m0 + block_m), in 32-bit tile coordinates. Key n0 + kr is visible to query m0 + qc iff
// lo <= kr - qc <= hi and kr < keys: the window around the diagonal as two bounds on kr - qc.
// With |kr - qc| below the tile size (<= 128), bounds clamped to [-kClamp, kClamp] keep every
// test exact. diag (the diagonal's key - query offset, for the ALiBi distance |kr - qc - diag|)
// is exact while |diag| <= 2^31 - 256, which validation's 2^30 cap on lengths guarantees.
struct StepWindow {
  static constexpr int kClamp = 256;
  int lo, hi, diag, keys;

  FA_HOST_DEVICE StepWindow(const Visibility& vis, int64_t m0, int64_t n0, int64_t len_k,
                            int block_n) {
    const int64_t d = m0 + vis.offset - n0;
    auto clamp = [](int64_t v) { return int(v < -kClamp ? -kClamp : (v > kClamp ? kClamp : v)); };
    lo = vis.window_left >= 0 ? clamp(d - vis.window_left) : -kClamp;
    hi = vis.window_right >= 0 ? clamp(d + vis.window_right) : kClamp;
    constexpr int64_t kFar = (int64_t(1) << 31) - 256;
    diag = int(d < -kFar ? -kFar : (d > kFar ? kFar : d));
    const int64_t k = len_k - n0;
    keys = int(k < 0 ? 0 : (k > block_n ? block_n : k));
  }
  FA_HOST_DEVICE bool visible(int kr, int qc) const {
    return kr < keys && kr - qc >= lo && kr - qc <= hi;
  }
  FA_HOST_DEVICE int alibi_distance(int kr, int qc) const {
    const int rel = kr - qc - diag;
    return rel < 0 ? -rel : rel;
  }
};

}  // namespace fa::cuda::sm80
