// 16-bit float formats as raw bits, and exact conversions to and from fp32.
//
// Bit manipulation only, so that host code needs no compiler extension and device code can share
// it. float -> 16-bit rounds to nearest, ties to even, and keeps NaN a NaN (quietened) and ±inf.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace fa {

struct half_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};

FA_HOST_DEVICE uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
FA_HOST_DEVICE float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 is the top half of an fp32: widening is a shift.
FA_HOST_DEVICE float to_float(bfloat16_t x) { return bits_float(uint32_t(x.bits) << 16); }

FA_HOST_DEVICE bfloat16_t to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x0040u)};  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  return {uint16_t((u + 0x7fffu + lsb) >> 16)};  // round to nearest even; overflow -> inf
}

FA_HOST_DEVICE float to_float(half_t x) {
#if defined(__CUDA_ARCH__)
  // On the device, the hardware conversion (exact, subnormals included): the portable code below
  // branches on the exponent, which kept the backward preprocess's chunk loop from unrolling.
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x.bits));
  return f;
#else
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1fu;
  const uint32_t man = x.bits & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));  // 112 = 127 - 15
  if (man == 0) return bits_float(sign);
  // Subnormal half: value = man * 2^-24, exact in fp32.
  const float mag = float(man) * 5.9604644775390625e-8f;  // 2^-24
  return sign ? -mag : mag;
#endif
}

FA_HOST_DEVICE half_t to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {uint16_t(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (abs >= 0x38800000u) {                                   // normal half (>= 2^-14)
    const uint32_t lsb = (abs >> 13) & 1u;
    const uint32_t r = (abs + 0xfffu + lsb) >> 13;            // round mantissa to 10 bits
    return {uint16_t(sign | (r - (112u << 10)))};             // rebias exponent 127 -> 15
  }
  if (abs < 0x33000000u) return {sign};  // below half the smallest subnormal (2^-25): zero
  // Subnormal half: shift the implicit-one mantissa right, rounding to nearest even.
  const uint32_t exp = abs >> 23;
  const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;  // 14..24: puts the value in units of 2^-24
  const uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return {uint16_t(sign | r)};
}

FA_HOST_DEVICE float to_float(float x) { return x; }

// Conversion named by the destination type, for templates: convert<T>(float).
template <typename T>
FA_HOST_DEVICE T convert(float f);
template <>
FA_HOST_DEVICE float convert<float>(float f) { return f; }
template <>
FA_HOST_DEVICE half_t convert<half_t>(float f) { return to_half(f); }
template <>
FA_HOST_DEVICE bfloat16_t convert<bfloat16_t>(float f) { return to_bf16(f); }

}  // namespace fa
