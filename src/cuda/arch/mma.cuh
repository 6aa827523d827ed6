// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 — sm80+.
//
// Register layout (PTX ISA "Matrix fragments for mma.m16n8k16"), lane = threadIdx.x % 32,
// g = lane / 4 (group), t = lane % 4 (thread in group):
//   A (16 x 16, row-major), 4 x .b32 each holding two 16-bit values (low half = lower column):
//     a0: (g,     2t..2t+1)   a1: (g + 8, 2t..2t+1)   a2: (g, 2t+8..2t+9)   a3: (g + 8, 2t+8..2t+9)
//   B (16 x 8, "col": element (k, n)), 2 x .b32:
//     b0: (k = 2t..2t+1, n = g)   b1: (k = 2t+8..2t+9, n = g)
//   C/D (16 x 8 fp32), 4 x f32:
//     c0, c1: (g, 2t..2t+1)   c2, c3: (g + 8, 2t..2t+1)
// The C layout of two adjacent n-tiles (16 x 16) is exactly the A layout of one k-step, which is
// how P goes from S = Q·Kᵀ to P·V without leaving registers.
//
// mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 — sm75+ (Turing's fp16 shape; it has neither
// m16n8k16 nor bf16): A (16 x 8) a0: (g, 2t..2t+1), a1: (g + 8, 2t..2t+1); B (8 x 8) b0:
// (k = 2t..2t+1, n = g); C/D as above. Those are m16n8k16's a0, a1, b0 (columns / k 0..7), and
// a2, a3, b1 are the same roles for k 8..15: one m16n8k16 is two m16n8k8 on one accumulator, so
// the k16 fragments (ldmatrix.x4, pack_a) serve Turing unchanged through Fp16K8Tag.
#pragma once

#include <cstdint>

namespace fa::cuda {

struct Bf16Tag {};
struct Fp16Tag {};
// fp16 on Turing (the cuda-sm75 family): a k-step of 16 issued as two m16n8k8, 16-bit packing
// without cvt.rn.f16x2.f32 (sm80+).
struct Fp16K8Tag {};

// D = A * B + D for one k8 step, fp16 inputs, fp32 accumulate (sm75+).
__device__ __forceinline__ void mma_m16n8k8_f16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
#endif
}

// D = A * B + D, fp32 accumulate.
template <typename Tag>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<Bf16Tag>(float (&d)[4], const uint32_t (&a)[4],
                                                      const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

template <>
__device__ __forceinline__ void mma_m16n8k16<Fp16Tag>(float (&d)[4], const uint32_t (&a)[4],
                                                      const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The k16 step of Fp16K8Tag: its k 0..7 half, then its k 8..15 half.
template <>
__device__ __forceinline__ void mma_m16n8k16<Fp16K8Tag>(float (&d)[4], const uint32_t (&a)[4],
                                                        const uint32_t (&b)[2]) {
  mma_m16n8k8_f16(d, a[0], a[1], b[0]);
  mma_m16n8k8_f16(d, a[2], a[3], b[1]);
}

// Two fp32 -> one .b32 of two 16-bit values (lo in the low half), round to nearest.
template <typename Tag>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<Bf16Tag>(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <>
__device__ __forceinline__ uint32_t pack2<Fp16Tag>(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Turing: two scalar conversions and a move (cvt.rn.f16x2.f32 needs sm80).
template <>
__device__ __forceinline__ uint32_t pack2<Fp16K8Tag>(float lo, float hi) {
  uint32_t r;
  asm("{\n .reg .f16 l, h;\n cvt.rn.f16.f32 l, %1;\n cvt.rn.f16.f32 h, %2;\n"
      " mov.b32 %0, {l, h};\n}\n"
      : "=r"(r) : "f"(lo), "f"(hi));
  return r;
}

// The A fragment (one k-step) made of two adjacent C n-tiles c0 (columns 0..7) and c1 (8..15),
// rounded to 16 bits: a0 = c0 row g, a1 = c0 row g + 8, a2 = c1 row g, a3 = c1 row g + 8.
template <typename Tag>
__device__ __forceinline__ void pack_a(const float (&c0)[4], const float (&c1)[4],
                                       uint32_t (&a)[4]) {
  a[0] = pack2<Tag>(c0[0], c0[1]);
  a[1] = pack2<Tag>(c0[2], c0[3]);
  a[2] = pack2<Tag>(c1[0], c1[1]);
  a[3] = pack2<Tag>(c1[2], c1[3]);
}

}  // namespace fa::cuda
