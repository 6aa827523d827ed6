// Philox4x32-10 and the dropout keep-mask (src/core/philox.h).
#include <gtest/gtest.h>

#include <set>

#include "core/philox.h"

namespace fa {
namespace {

// Known-answer vectors of Philox4x32-10 published with the Random123 library (kat_vectors).
TEST(Philox, KnownAnswers) {
  struct Kat {
    Philox4 ctr;
    uint32_t k0, k1;
    Philox4 want;
  };
  const Kat kats[] = {
      {{{0u, 0u, 0u, 0u}}, 0u, 0u, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const Philox4 got = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.x[i], k.want.x[i]) << "word " << i;
  }
}

TEST(Philox, KeepRateMatchesProbability) {
  for (float p : {0.0f, 0.1f, 0.17f, 0.5f, 0.9f}) {
    const DropoutStream d = DropoutStream::make(42, 7, p);
    int64_t kept = 0, n = 0;
    for (uint32_t row = 0; row < 256; ++row)
      for (uint32_t col = 0; col < 1024; ++col, ++n) kept += d.keep(3, row, col);
    EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.005) << "p=" << p;
    EXPECT_FLOAT_EQ(d.keep_scale, 1.f / (1.f - p));
  }
}

TEST(Philox, StreamsDifferBySeedOffsetAndCoordinates) {
  const DropoutStream a = DropoutStream::make(1, 0, 0.5f);
  const DropoutStream b = DropoutStream::make(2, 0, 0.5f);
  const DropoutStream c = DropoutStream::make(1, 1, 0.5f);
  const DropoutStream e = DropoutStream::make(1, uint64_t(1) << 32, 0.5f);
  std::set<uint32_t> words;
  for (const DropoutStream* s : {&a, &b, &c, &e}) {
    words.insert(s->block(0, 0, 0).x[0]);
    words.insert(s->block(1, 0, 0).x[0]);
    words.insert(s->block(0, 1, 0).x[0]);
    words.insert(s->block(0, 0, 1).x[0]);
  }
  EXPECT_EQ(words.size(), 16u);  // no two (stream, coordinate) pairs collide
  // Same inputs, same words: the mask is a pure function of (seed, offset, b*h, row, col).
  EXPECT_EQ(a.block(5, 6, 7).x[2], DropoutStream::make(1, 0, 0.5f).block(5, 6, 7).x[2]);
}

// The definition of docs/dropout.md, written out from the raw generator: element (i, j) takes
// 16-bit slice c = 4 ((i / 8) % 2) + (j / 8) % 4 of the block at counter
// {8 (j / 32) + j % 8, 8 (i / 16) + i % 8, bh, offset_lo}, kept iff >= floor(p 2^16).
TEST(Philox, MaskTakesSixteenBitSlicesOfSixteenByThirtyTwoBlocks) {
  const uint64_t seed = 0x0123456789abcdefull, offset = 0x0000000500000007ull;
  const float p = 0.17f;
  const DropoutStream d = DropoutStream::make(seed, offset, p);
  const uint32_t threshold = uint32_t(double(p) * 65536.0);
  ASSERT_EQ(d.threshold, threshold);
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32) ^ uint32_t(offset >> 32);
  int64_t checked = 0;
  for (uint32_t bh : {0u, 3u, 77u})
    for (uint32_t i = 0; i < 70; i += 3)
      for (uint32_t j = 0; j < 200; j += 5) {
        const Philox4 w = philox4x32_10(
            Philox4{{8 * (j / 32) + j % 8, 8 * (i / 16) + i % 8, bh, uint32_t(offset)}}, k0, k1);
        const uint32_t c = 4 * ((i / 8) % 2) + (j / 8) % 4;
        const uint32_t slice = (w.x[c / 2] >> (16 * (c % 2))) & 0xFFFFu;
        EXPECT_EQ(d.keep(bh, i, j), slice >= threshold) << bh << " " << i << " " << j;
        ++checked;
      }
  EXPECT_EQ(checked, 3 * 24 * 40);
  // keep_row32 (the CPU backend's) agrees with keep, bit by bit.
  for (uint32_t i : {0u, 7u, 8u, 15u, 16u, 1001u})
    for (uint32_t j0 : {0u, 32u, 4096u}) {
      const uint32_t bits = d.keep_row32(9, i, j0);
      for (uint32_t k = 0; k < 32; ++k)
        EXPECT_EQ((bits >> k) & 1u, uint32_t(d.keep(9, i, j0 + k))) << i << " " << j0 + k;
    }
  // The eight elements of a block are distinct slices of one evaluation: their keep bits are
  // not all equal for some block at p = 1/2 (a stuck slice would make them equal everywhere).
  const DropoutStream h = DropoutStream::make(seed, offset, 0.5f);
  int mixed = 0;
  for (uint32_t i0 = 0; i0 < 64; i0 += 16)
    for (uint32_t j0 = 0; j0 < 128; j0 += 32) {
      int kept = 0;
      for (uint32_t a = 0; a < 2; ++a)
        for (uint32_t c = 0; c < 4; ++c) kept += h.keep(1, i0 + 8 * a, j0 + 8 * c);
      mixed += kept > 0 && kept < 8;
    }
  EXPECT_GT(mixed, 0);
}

}  // namespace
}  // namespace fa
