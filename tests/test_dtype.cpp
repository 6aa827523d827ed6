// fp16 / bf16 conversions (src/core/dtype.h) against independent computations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"

namespace fa {
namespace {

// Nearest representable value by brute force over the two neighbours, ties to even (the oracle).
template <typename Widen>
uint16_t round_oracle(float f, uint16_t lo, uint16_t hi, Widen widen) {
  const double dl = std::fabs(double(widen(lo)) - double(f)), dh = std::fabs(double(widen(hi)) - double(f));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(Dtype, HalfRoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const half_t h{uint16_t(bits)};
    const float f = to_float(h);
    const bool nan = (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << bits;
      EXPECT_TRUE(std::isnan(to_float(to_half(f)))) << bits;
      continue;
    }
    EXPECT_EQ(to_half(f).bits, bits) << "half bits " << bits << " -> " << f;
  }
}

TEST(Dtype, Bf16RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float f = to_float(bfloat16_t{uint16_t(bits)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(to_bf16(f))));
      continue;
    }
    EXPECT_EQ(to_bf16(f).bits, bits);
  }
}

// Sorted list of all finite non-negative halves, to find neighbours of any float.
TEST(Dtype, HalfRoundsToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  int checked = 0;
  for (int n = 0; n < 200000; ++n) {
    uint32_t u = any(rng);
    // Focus on the half range (|x| < 2^17) including subnormals and values near overflow.
    u = (u & 0x80000000u) | (0x30000000u + (u & 0x0fffffffu) % 0x18000000u);
    float f;
    std::memcpy(&f, &u, 4);
    const float a = std::fabs(f);
    if (a >= 65520.f) {
      EXPECT_TRUE(std::isinf(to_float(to_half(f))));
      continue;
    }
    // Neighbours: truncation toward zero and the next half up in magnitude.
    uint16_t lo = 0;
    for (int bit = 14; bit >= 0; --bit) {  // binary search on the monotone magnitude encoding
      const uint16_t cand = uint16_t(lo | (1u << bit));
      if (cand < 0x7c00u && to_float(half_t{cand}) <= a) lo = cand;
    }
    const uint16_t hi = uint16_t(lo + 1);
    const uint16_t want = round_oracle(a, lo, hi, [](uint16_t b) { return to_float(half_t{b}); });
    const uint16_t got = to_half(a).bits;
    EXPECT_EQ(got, want) << "x=" << a;
    EXPECT_EQ(to_half(-a).bits, uint16_t(want | 0x8000u));
    ++checked;
  }
  EXPECT_GT(checked, 100000);
}

TEST(Dtype, Bf16RoundsToNearestEven) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any;
  for (int n = 0; n < 200000; ++n) {
    uint32_t u = any(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
    if (std::isinf(to_float(bfloat16_t{uint16_t(lo & 0x7fffu)}))) continue;
    // Past the largest finite value, infinity stands at 2^128 (where the next binade would start).
    uint16_t want = round_oracle(f, lo, hi, [](uint16_t b) {
      const double x = to_float(bfloat16_t{b});
      return std::isinf(x) ? std::copysign(std::ldexp(1.0, 128), x) : x;
    });
    EXPECT_EQ(to_bf16(f).bits, want) << f;
  }
  // Exact ties go to the even neighbour.
  EXPECT_EQ(to_bf16(1.f + 1.f / 256.f).bits, to_bf16(1.f).bits);                  // tie, 1.0 even
  EXPECT_EQ(to_bf16(1.f + 3.f / 256.f).bits, uint16_t(to_bf16(1.f).bits + 2u));    // tie, up to even
  EXPECT_TRUE(std::isinf(to_float(to_bf16(3.4e38f * 1.0f + 1e38f))));
}

TEST(Dtype, HalfSpecialValues) {
  EXPECT_EQ(to_half(0.f).bits, 0u);
  EXPECT_EQ(to_half(-0.f).bits, 0x8000u);
  EXPECT_EQ(to_half(1.f).bits, 0x3c00u);
  EXPECT_EQ(to_half(65504.f).bits, 0x7bffu);
  EXPECT_EQ(to_half(INFINITY).bits, 0x7c00u);
  EXPECT_EQ(to_half(5.9604644775390625e-8f).bits, 1u);  // smallest subnormal
  EXPECT_EQ(to_half(2.98023223876953125e-8f).bits, 0u);  // exactly half of it: tie to even (0)
  EXPECT_EQ(to_half(2.99e-8f).bits, 1u);
  EXPECT_EQ(to_float(half_t{0x0001u}), 5.9604644775390625e-8f);
}

}  // namespace
}  // namespace fa
