// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// dropout keep-mask built on it. Host and device compile this one header, so the CPU backend and
// every GPU kernel draw the very same mask for the same (seed, offset).
//
// The stream: element (batch b, query head h, row i, column j) of the attention matrix takes
//   word j % 4 of Philox4x32-10(key   = {seed_lo, seed_hi ^ offset_hi},
//                               counter = {j / 4, i, b * heads_q + h, offset_lo})
// and is kept iff that word >= floor(p * 2^32). Rows and columns are positions inside the
// sequence (for packed batches b is the sequence index). A kept probability is scaled by
// 1 / (1 - p); nothing is stored: the backward pass regenerates the mask.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace fa {

struct Philox4 {
  uint32_t x[4];
};

namespace philox_detail {
// Multipliers and Weyl increments of Philox4x32 (from the paper).
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

FA_HOST_DEVICE void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}
}  // namespace philox_detail

FA_HOST_DEVICE Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  using namespace philox_detail;
  for (int r = 0; r < kRounds; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, ctr.x[0], hi0, lo0);
    mulhilo(kMul1, ctr.x[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.x[1] ^ key0, lo1, hi0 ^ ctr.x[3] ^ key1, lo0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return ctr;
}

// The keep-mask of one attention call: four consecutive columns per Philox evaluation.
struct DropoutStream {
  uint32_t key0, key1, offset_lo;
  uint32_t threshold;  // keep iff word >= threshold
  float keep_scale;    // 1 / (1 - p)

  FA_HOST_DEVICE static DropoutStream make(uint64_t seed, uint64_t offset, float p) {
    DropoutStream d;
    d.key0 = uint32_t(seed);
    d.key1 = uint32_t(seed >> 32) ^ uint32_t(offset >> 32);
    d.offset_lo = uint32_t(offset);
    // p < 1, so p * 2^32 < 2^32 fits; computed in double to be exact for every float p.
    d.threshold = uint32_t(double(p) * 4294967296.0);
    d.keep_scale = 1.0f / (1.0f - p);
    return d;
  }

  // Words for columns [4 * quad, 4 * quad + 4) of row `row` of matrix `bh` (= b * heads_q + h).
  FA_HOST_DEVICE Philox4 words(uint32_t bh, uint32_t row, uint32_t quad) const {
    return philox4x32_10(Philox4{{quad, row, bh, offset_lo}}, key0, key1);
  }

  FA_HOST_DEVICE bool keep(uint32_t word) const { return word >= threshold; }

  FA_HOST_DEVICE bool keep(uint32_t bh, uint32_t row, uint32_t col) const {
    return keep(words(bh, row, col >> 2).x[col & 3u]);
  }
};

}  // namespace fa
