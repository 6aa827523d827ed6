// The softmax's exponential, shared by the kernel families: 2^x by ex2.approx.ftz (MUFU; 2^-inf =
// +0, as the masked scores need), and the constants that move between e and 2.
#pragma once

namespace fa::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fa::cuda
