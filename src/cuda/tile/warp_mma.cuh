// The warp-tile GEMM of the mma.sync kernels, written once: a warp's (16 kMt x 8 kNt) fp32
// accumulator tile += A (16 kMt x 16 kSteps) · B (16 kSteps x 8 kNt) in k-steps of 16. A k-step
// loads one A fragment per m-tile, then, per pair of n-tiles, one 16 x 16 B fragment (an
// ldmatrix.x4, plain or .trans) that serves every m-tile: 2 kMt mma per B fragment, so a warp
// reads kMt + kNt / 2 fragments a k-step for 2 kMt (kNt / 2) mma. The callers choose the
// fragments' addresses (which tile, which lane role, which swizzle) through the load functions;
// the instruction order is fixed here, and the order of the asm statements is what ptxas sees.
//
//   mma_pair   the two mma of one A fragment against one B fragment pair (n-tiles 2 ntp, + 1)
//   mma_unit   a B fragment pair against every m-tile's A fragment (one unit of a k-step)
//   warp_mma   the whole product: for each k-step, load_a(a, mt, ks) per m-tile, then for each
//              n-tile pair load_b(b, ntp, ks) and its unit
//   warp_mma2  two products of the same shape in one loop, their loads and units interleaved
//              (more independent mma chains between two fragment loads)
// Products that interleave their units with another product's (the forward's Q·Kᵀ beside
// P·V) or take A from registers call mma_unit / mma_pair themselves.
#pragma once

#include <cstdint>

#include "cuda/arch/mma.cuh"

namespace fa::cuda {

template <typename Tag, int kNt>
__device__ __forceinline__ void mma_pair(float (&acc)[kNt][4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4], int ntp) {
  mma_m16n8k16<Tag>(acc[2 * ntp], a, {b[0], b[1]});
  mma_m16n8k16<Tag>(acc[2 * ntp + 1], a, {b[2], b[3]});
}

template <typename Tag, int kMt, int kNt>
__device__ __forceinline__ void mma_unit(float (&acc)[kMt][kNt][4], const uint32_t (&a)[kMt][4],
                                         const uint32_t (&b)[4], int ntp) {
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) mma_pair<Tag>(acc[mt], a[mt], b, ntp);
}

// load_a(uint32_t (&a)[4], int mt, int ks), load_b(uint32_t (&b)[4], int ntp, int ks).
template <typename Tag, int kSteps, int kMt, int kNt, class LoadA, class LoadB>
__device__ __forceinline__ void warp_mma(float (&acc)[kMt][kNt][4], const LoadA& load_a,
                                         const LoadB& load_b) {
  static_assert(kNt % 2 == 0, "whole n-tile pairs");
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    uint32_t a[kMt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) load_a(a[mt], mt, ks);
#pragma unroll
    for (int ntp = 0; ntp < kNt / 2; ++ntp) {
      uint32_t b[4];
      load_b(b, ntp, ks);
      mma_unit<Tag>(acc, a, b, ntp);
    }
  }
}

// acc0 += A0 · B0 and acc1 += A1 · B1 in one loop: per k-step the A fragments of both (m-tile
// by m-tile, A0 first), per n-tile pair both B fragments, then per m-tile the pair of acc0 and
// the pair of acc1.
template <typename Tag, int kSteps, int kMt, int kNt, class LoadA0, class LoadA1, class LoadB0,
          class LoadB1>
__device__ __forceinline__ void warp_mma2(float (&acc0)[kMt][kNt][4], float (&acc1)[kMt][kNt][4],
                                          const LoadA0& load_a0, const LoadA1& load_a1,
                                          const LoadB0& load_b0, const LoadB1& load_b1) {
  static_assert(kNt % 2 == 0, "whole n-tile pairs");
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    uint32_t a0[kMt][4], a1[kMt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      load_a0(a0[mt], mt, ks);
      load_a1(a1[mt], mt, ks);
    }
#pragma unroll
    for (int ntp = 0; ntp < kNt / 2; ++ntp) {
      uint32_t b0[4], b1[4];
      load_b0(b0, ntp, ks);
      load_b1(b1, ntp, ks);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        mma_pair<Tag>(acc0[mt], a0[mt], b0, ntp);
        mma_pair<Tag>(acc1[mt], a1[mt], b1, ntp);
      }
    }
  }
}

// Every accumulator of a warp tile to zero.
template <int kMt, int kNt>
__device__ __forceinline__ void zero_acc(float (&acc)[kMt][kNt][4]) {
#pragma unroll
  for (int m = 0; m < kMt; ++m)
#pragma unroll
    for (int n = 0; n < kNt; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
}

}  // namespace fa::cuda
