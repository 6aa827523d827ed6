// Philox4x32-10 and the dropout keep-mask (src/common/philox.h).
#include <gtest/gtest.h>

#include <set>

#include "common/philox.h"

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
    words.insert(s->words(0, 0, 0).x[0]);
    words.insert(s->words(1, 0, 0).x[0]);
    words.insert(s->words(0, 1, 0).x[0]);
    words.insert(s->words(0, 0, 1).x[0]);
  }
  EXPECT_EQ(words.size(), 16u);  // no two (stream, coordinate) pairs collide
  // Same inputs, same words: the mask is a pure function of (seed, offset, b*h, row, col).
  EXPECT_EQ(a.words(5, 6, 7).x[2], DropoutStream::make(1, 0, 0.5f).words(5, 6, 7).x[2]);
}

}  // namespace
}  // namespace fa
