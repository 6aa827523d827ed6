// fp8 e4m3 -> fp16, four values at a time: exact (every e4m3 value is an fp16 value: 448 <
// 65504, 2^-9 above fp16's subnormal floor), NaN codes (S.1111.111) to an fp16 NaN, as
// core/fp8.h's to_float decodes them. sm89 and later convert with cvt.rn.f16x2.e4m3x2; sm80 /
// sm86 move the bits into place (e4m3's exponent and mantissa are fp16's with a bias 8 lower)
// and multiply by 2^8, which is exact.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/fp8.h"

namespace fa::cuda {

// x holds four e4m3 codes, byte j the j-th value; lo gets values 0 and 1 as an fp16x2 (value 0
// in the low half), hi values 2 and 3.
__device__ __forceinline__ void e4m3x4_to_f16x4(uint32_t x, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n"
      "  .reg .b16 a, b;\n"
      "  mov.b32 {a, b}, %2;\n"
      "  cvt.rn.f16x2.e4m3x2 %0, a;\n"
      "  cvt.rn.f16x2.e4m3x2 %1, b;\n"
      "}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
#else
  auto times256 = [](uint32_t bits) {
    __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&bits), __floats2half2_rn(256.f, 256.f));
    return *reinterpret_cast<const uint32_t*>(&v);
  };
  lo = times256(e4m3x2_as_f16x2_over_256(x));
  hi = times256(e4m3x2_as_f16x2_over_256(x >> 16));
  // NaN codes: 0xFF bytes where (code & 0x7F) == 0x7F, spread to both bytes of their half, then
  // an all-ones exponent and a mantissa bit (an fp16 NaN whatever the sign).
  const uint32_t nan = __vcmpeq4(x & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
  lo |= __byte_perm(nan, 0u, 0x1100) & 0x7E007E00u;
  hi |= __byte_perm(nan, 0u, 0x3322) & 0x7E007E00u;
#endif
}

// Four fp32 values to e4m3 codes, value j in byte j, as core/fp8.h's to_e4m3 rounds them
// (nearest even, saturating to +-448, NaN to 0x7F): cvt.rn.satfinite.e4m3x2.f32, sm89 and later
// (its first source goes to the high byte). Elsewhere 0: no kernel for those archs calls it.
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4(float x0, float x1, float x2, float x3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("{\n"
      "  .reg .b16 lo, hi;\n"
      "  cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "  cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "  mov.b32 %0, {lo, hi};\n"
      "}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
#else
  (void)x0, (void)x1, (void)x2, (void)x3;
  return 0u;
#endif
}

// 16 e4m3 codes (a uint4, code j in byte j % 4 of word j / 4) as 16 fp16 values: out[0] holds
// values 0-7, out[1] values 8-15, each in the order of an fp16 row in memory.
__device__ __forceinline__ void e4m3x16_to_f16x16(const uint4& in, uint4 (&out)[2]) {
  e4m3x4_to_f16x4(in.x, out[0].x, out[0].y);
  e4m3x4_to_f16x4(in.y, out[0].z, out[0].w);
  e4m3x4_to_f16x4(in.z, out[1].x, out[1].y);
  e4m3x4_to_f16x4(in.w, out[1].z, out[1].w);
}

}  // namespace fa::cuda
