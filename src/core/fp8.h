// FP8 e4m3 ("e4m3fn": PyTorch's float8_e4m3fn, OCP FP8's E4M3) as raw bits, and exact
// conversions to and from fp32. Bit manipulation only, so that host and device code share it and
// the CPU rounds exactly as the GPU's cvt.rn.satfinite.e4m3x2.f32 does (issue 30: the CPU's
// naive fp8 baseline must round as the kernels will).
//
// Format: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits. No infinities: the codes
// S.1111.111 (0x7F, 0xFF) are NaN and S.1111.110 is the largest finite magnitude, 1.75 * 2^8 =
// 448. Exponent field 0 holds the subnormals m * 2^-9 (m = 1..7; 2^-9 the smallest) and ±0.
//
// fp32 -> e4m3 (to_e4m3) rounds to nearest, ties to even, and saturates: every magnitude >= 448,
// ±inf included, becomes ±448; NaN becomes 0x7F (the canonical NaN, whatever the input's sign).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace fa {

struct e4m3_t {
  uint8_t bits;
};

constexpr float kE4m3Max = 448.f;        // largest finite magnitude (code 0x7E)
constexpr uint8_t kE4m3NaN = 0x7F;       // canonical NaN (cvt's NaN result)
constexpr uint8_t kE4m3MaxCode = 0x7E;   // +448
constexpr int kE4m3Bias = 7;             // exponent bias
constexpr int kE4m3MantissaBits = 3;

FA_HOST_DEVICE bool is_nan(e4m3_t x) { return (x.bits & 0x7Fu) == 0x7Fu; }

// Exact: every e4m3 value is an fp32 value.
FA_HOST_DEVICE float to_float(e4m3_t x) {
  const uint32_t sign = uint32_t(x.bits & 0x80u) << 24;
  const uint32_t exp = (x.bits >> kE4m3MantissaBits) & 0xFu;
  const uint32_t man = x.bits & 0x7u;
  if (exp == 0xFu && man == 0x7u) return bits_float(sign | 0x7fc00000u);  // NaN (quiet)
  if (exp != 0)  // normal: (1 + man / 8) * 2^(exp - 7); rebias 7 -> 127
    return bits_float(sign | ((exp - kE4m3Bias + 127u) << 23) | (man << (23 - kE4m3MantissaBits)));
  const float mag = float(man) * 0.001953125f;  // subnormal: man * 2^-9 (exact)
  return sign ? -mag : mag;
}

// Round to nearest even with saturation to ±448 (cvt.rn.satfinite.e4m3x2.f32).
FA_HOST_DEVICE e4m3_t to_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {kE4m3NaN};
  if (abs >= 0x43e00000u) return {uint8_t(sign | kE4m3MaxCode)};  // >= 448 (and inf): saturate
  const int32_t exp = int32_t(abs >> 23) - 127;                   // unbiased fp32 exponent
  if (exp >= 1 - kE4m3Bias) {  // normal e4m3 (>= 2^-6): keep 3 of fp32's 23 mantissa bits
    constexpr uint32_t kDrop = 23 - kE4m3MantissaBits;  // 20 bits rounded off
    const uint32_t q = abs >> kDrop;
    const uint32_t rem = abs & ((1u << kDrop) - 1u), half = 1u << (kDrop - 1u);
    // A carry out of the mantissa bumps the exponent; the largest result is 448 (abs < 448
    // here rounds to at most 1.75 * 2^8), so no saturation is needed past this point.
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return {uint8_t(sign | (r - (uint32_t(127 - kE4m3Bias) << kE4m3MantissaBits)))};
  }
  // Subnormal e4m3: the value in units of 2^-9, rounded to an integer 0..8 (8 is 2^-6, the
  // smallest normal, whose code 0x08 the sum reaches by itself). Below 2^-10 (half a unit) it
  // is 0; exactly 2^-10 ties to the even 0.
  if (exp < -10) return {sign};
  const uint32_t man = (abs & 0x7fffffu) | 0x800000u;  // value = man * 2^(exp - 23)
  const uint32_t shift = uint32_t(14 - exp);           // 21..24: units of 2^-9
  const uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return {uint8_t(sign | r)};
}

// The fp16 bit patterns of two e4m3 codes (bytes 0 and 1 of y) whose values are the codes'
// times 2^-8, as one fp16x2 (code 0 in the low half): e4m3's exponent and mantissa are fp16's
// with a bias 8 lower, so moving them into place and multiplying by 2^8 decodes exactly (the
// sm80 / sm86 path of cuda/arch/cvt_fp8.cuh). NaN codes come out finite (480 · 2^-8): the caller
// marks them.
FA_HOST_DEVICE uint32_t e4m3x2_as_f16x2_over_256(uint32_t y) {
  return ((y & 0x80u) << 8) | ((y & 0x7Fu) << 7) | ((y & 0x8000u) << 16) | ((y & 0x7F00u) << 15);
}

// f rounded to the nearest e4m3 value (saturating), as an fp32.
FA_HOST_DEVICE float round_to_e4m3(float f) { return to_float(to_e4m3(f)); }

template <>
FA_HOST_DEVICE e4m3_t convert<e4m3_t>(float f) { return to_e4m3(f); }

}  // namespace fa
