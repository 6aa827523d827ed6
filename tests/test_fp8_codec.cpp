// FP8 e4m3 conversions (src/core/fp8.h) against independent computations: every one of the 256
// codes decoded by the format's formula, and fp32 -> e4m3 against a brute-force nearest-value
// search (ties to the even code, saturation at ±448, NaN -> 0x7F), as the GPU's
// cvt.rn.satfinite.e4m3x2.f32 rounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"

namespace fa {
namespace {

// The format's definition, in double: sign, 4 exponent bits (bias 7), 3 mantissa bits.
double decode_oracle(uint32_t code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 0xF, m = code & 7;
  if (e == 0xF && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// Nearest finite code to x by search over all of them; ties to the even code (the mantissa's
// last bit is the code's); magnitudes past 448 saturate; NaN -> 0x7F.
uint8_t encode_oracle(float x) {
  if (std::isnan(x)) return 0x7F;
  if (std::fabs(x) >= 448.f) return std::signbit(x) ? 0xFE : 0x7E;  // satfinite
  const double xd = x;
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < 256; ++c) {
    const double v = decode_oracle(uint32_t(c));
    if (std::isnan(v)) continue;
    if (v == 0.0 && (std::signbit(v) != std::signbit(xd))) continue;  // keep the sign of zero
    const double err = std::fabs(v - xd);
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return uint8_t(best);
}

TEST(Fp8E4m3, DecodesEveryCode) {
  int nans = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const float f = to_float(e4m3_t{uint8_t(c)});
    const double want = decode_oracle(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << "code " << c;
      EXPECT_TRUE(is_nan(e4m3_t{uint8_t(c)}));
      ++nans;
      continue;
    }
    EXPECT_FALSE(is_nan(e4m3_t{uint8_t(c)})) << c;
    EXPECT_EQ(double(f), want) << "code " << c;
    EXPECT_EQ(std::signbit(f), (c & 0x80u) != 0) << "code " << c;  // -0 is 0x80
    EXPECT_LE(std::fabs(f), kE4m3Max) << "no infinities: " << c;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  EXPECT_EQ(to_float(e4m3_t{0x7E}), 448.f);
  EXPECT_EQ(to_float(e4m3_t{0xFE}), -448.f);
  EXPECT_EQ(to_float(e4m3_t{0x01}), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(to_float(e4m3_t{0x07}), 7 * std::ldexp(1.f, -9));
  EXPECT_EQ(to_float(e4m3_t{0x08}), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(to_float(e4m3_t{0x38}), 1.f);
}

// The GPU's sm80 / sm86 decode (cuda/arch/cvt_fp8.cuh): every finite code, in either half of
// the pair, placed into fp16 bits and scaled by 2^8 is the code's value exactly (the other half
// holding any code); NaN codes are the kernel's to mark.
TEST(Fp8E4m3, Fp16BitPlacementDecodesEveryFiniteCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    if (is_nan(e4m3_t{uint8_t(c)})) continue;
    const float want = to_float(e4m3_t{uint8_t(c)});
    for (const uint32_t other : {0x00u, 0x7Eu, 0x81u, 0xFFu}) {
      const uint32_t lo = e4m3x2_as_f16x2_over_256(c | other << 8);
      const uint32_t hi = e4m3x2_as_f16x2_over_256(other | c << 8);
      EXPECT_EQ(to_float(half_t{uint16_t(lo & 0xFFFFu)}) * 256.f, want) << "code " << c;
      EXPECT_EQ(to_float(half_t{uint16_t(hi >> 16)}) * 256.f, want) << "code " << c;
    }
  }
}

TEST(Fp8E4m3, RoundTripsEveryFiniteCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const e4m3_t x{uint8_t(c)};
    if (is_nan(x)) {
      EXPECT_EQ(to_e4m3(to_float(x)).bits, kE4m3NaN) << c;
      continue;
    }
    EXPECT_EQ(to_e4m3(to_float(x)).bits, c) << "code " << c << " = " << to_float(x);
  }
}

TEST(Fp8E4m3, RoundingEdgeCases) {
  const float sub = std::ldexp(1.f, -9);  // one subnormal unit
  struct Edge {
    float x;
    uint8_t code;
  };
  const Edge edges[] = {
      {0.f, 0x00}, {-0.f, 0x80},
      {std::ldexp(1.f, -10), 0x00},                          // half a unit ties to even 0
      {std::nextafter(std::ldexp(1.f, -10), 1.f), 0x01},     // just above: 1 unit
      {-std::nextafter(std::ldexp(1.f, -10), 1.f), 0x81},
      {1.5f * sub, 0x02},                                    // 1.5 units: tie to even 2
      {2.5f * sub, 0x02},                                    // 2.5 units: tie to even 2
      {7.5f * sub, 0x08},                                    // rounds into the smallest normal
      {std::ldexp(1.f, -20), 0x00},                          // far below: 0
      {1.0625f, 0x38},                                       // 1 + 1/16: tie to even 1.0
      {1.1875f, 0x3A},                                       // 1 + 3/16: tie to even 1.25
      {1.9375f, 0x40},                                       // 1 + 15/16: carries into 2.0
      {240.f, 0x77}, {256.f, 0x78},
      {447.f, 0x7E}, {448.f, 0x7E}, {449.f, 0x7E}, {464.f, 0x7E}, {479.f, 0x7E},
      {480.f, 0x7E}, {1e6f, 0x7E},                           // saturate, never NaN
      {std::numeric_limits<float>::infinity(), 0x7E},
      {-std::numeric_limits<float>::infinity(), 0xFE},
      {-1e30f, 0xFE}, {-448.f, 0xFE},
      {std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {-std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {std::numeric_limits<float>::denorm_min(), 0x00},
  };
  for (const Edge& e : edges) {
    EXPECT_EQ(int(to_e4m3(e.x).bits), int(e.code)) << "x=" << e.x;
    EXPECT_EQ(int(encode_oracle(e.x)), int(e.code)) << "oracle, x=" << e.x;
  }
}

// Every midpoint between neighbouring codes and its two fp32 neighbours, then random fp32 values
// over the whole range, against the brute-force search.
TEST(Fp8E4m3, RoundsToNearestEvenWithSaturation) {
  std::vector<float> xs;
  for (uint32_t c = 0; c < 0x7E; ++c) {
    const float a = to_float(e4m3_t{uint8_t(c)}), b = to_float(e4m3_t{uint8_t(c + 1)});
    const float mid = 0.5f * (a + b);  // exact: one more mantissa bit than e4m3's
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), a})
      for (float s : {1.f, -1.f}) xs.push_back(s * x);
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any;
  for (int n = 0; n < 100000; ++n) {
    uint32_t u = any(rng);
    // Exponents 2^-13 .. 2^9: subnormals, every normal binade, and past the saturation point.
    u = (u & 0x807fffffu) | ((114u + (u >> 23) % 23u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float x : xs) ASSERT_EQ(int(to_e4m3(x).bits), int(encode_oracle(x))) << "x=" << x;
  for (float x : xs) {  // the error is at most half a step, and round_to_e4m3 agrees
    const float r = round_to_e4m3(x);
    EXPECT_EQ(r, to_float(to_e4m3(x)));
    if (std::fabs(x) <= kE4m3Max) {
      const double step = std::fabs(x) < std::ldexp(1.0, -6)
                              ? std::ldexp(1.0, -9)
                              : std::ldexp(1.0, std::ilogb(std::fabs(x)) - 3);
      EXPECT_LE(std::fabs(double(r) - x), 0.5 * step) << x;
    }
  }
}

}  // namespace
}  // namespace fa
