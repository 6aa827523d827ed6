// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// dropout keep-mask built on it. Host and device compile this one header, so the CPU backend and
// every GPU kernel draw the very same mask for the same (seed, offset).
//
// The stream: element (batch b, query head h, row i, column j) of the attention matrix takes
// 16-bit slice c = 4 ((i / 8) % 2) + (j / 8) % 4 (bits 16 (c % 2) .. + 15 of word c / 2) of
//   Philox4x32-10(key     = {seed_lo, seed_hi ^ offset_hi},
//                 counter = {8 (j / 32) + j % 8, 8 (i / 16) + i % 8, b * heads_q + h, offset_lo})
// and is kept iff that slice >= floor(p * 2^16). One evaluation serves the 2 x 4 elements
// (i0 + 8 a, j0 + 8 c) (a < 2, c < 4) of a 16-row x 32-column block: the elements one lane holds
// in the mma.m16n8 fragments of both the forward's S (row = query) and the backward's Sᵀ (row =
// key), so no kernel exchanges words between lanes. Rows and columns are positions inside the
// sequence (for packed batches b is the sequence index). A kept probability is scaled by
// 1 / (1 - p); nothing is stored: the backward pass regenerates the mask.
#pragma once

#include <cstdint>

#include "core/host_device.h"

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

// The keep-mask of one attention call: eight elements per Philox evaluation, one 16-bit slice
// each. (A keep probability in steps of 2^-16: the kept fraction and 1 - p differ by less than
// 2^-16, while the scale stays 1 / (1 - p).)
struct DropoutStream {
  static constexpr uint32_t kRows = 16, kCols = 32;  // the rows and columns a block spans
  uint32_t key0, key1, offset_lo;
  uint32_t threshold;  // keep iff slice >= threshold (< 2^16)
  float keep_scale;    // 1 / (1 - p)

  FA_HOST_DEVICE static DropoutStream make(uint64_t seed, uint64_t offset, float p) {
    DropoutStream d;
    d.key0 = uint32_t(seed);
    d.key1 = uint32_t(seed >> 32) ^ uint32_t(offset >> 32);
    d.offset_lo = uint32_t(offset);
    // 0 <= p < 1, so p * 2^16 < 2^16; computed in double to be exact for every float p.
    d.threshold = uint32_t(double(p) * 65536.0);
    d.keep_scale = 1.0f / (1.0f - p);
    return d;
  }

  // The block of element (row, col) of matrix bh (= b * heads_q + h): the one of elements
  // (row + 8 a, col + 8 c) for row % 16 < 8, col % 32 < 8.
  FA_HOST_DEVICE Philox4 block(uint32_t bh, uint32_t row, uint32_t col) const {
    const uint32_t ctr0 = col / kCols * 8 + col % 8, ctr1 = row / kRows * 8 + row % 8;
    return philox4x32_10(Philox4{{ctr0, ctr1, bh, offset_lo}}, key0, key1);
  }
  // Whether element (i0 + 8 a, j0 + 8 c) of a block is kept (slice 4 a + c).
  FA_HOST_DEVICE bool keep_in(const Philox4& w, uint32_t a, uint32_t c) const {
    const uint32_t s = 4 * a + c;
    return ((w.x[s >> 1] >> (16 * (s & 1u))) & 0xFFFFu) >= threshold;
  }
  FA_HOST_DEVICE bool keep(uint32_t bh, uint32_t row, uint32_t col) const {
    return keep_in(block(bh, row, col), (row / 8) % 2, (col / 8) % 4);
  }
  // The keep bits of columns col0 .. col0 + 31 of one row (col0 a multiple of 32), bit k for
  // column col0 + k: the row's halves of eight blocks.
  FA_HOST_DEVICE uint32_t keep_row32(uint32_t bh, uint32_t row, uint32_t col0) const {
    uint32_t bits = 0;
    const uint32_t a = (row / 8) % 2;
    for (uint32_t j = 0; j < 8; ++j) {
      const Philox4 w = block(bh, row, col0 + j);
      for (uint32_t c = 0; c < 4; ++c) bits |= uint32_t(keep_in(w, a, c)) << (j + 8 * c);
    }
    return bits;
  }
};

}  // namespace fa
