// Dropout's keep bits in the sm90 backward's fragment layout (bwd_kernel.cuh): which elements of
// a consumer thread's Sᵀ tile the forward kept. Host and device (tests/test_sm90_bwd_dropout.cpp
// checks every bit against core/philox.h's keep on the host).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/philox.h"

namespace fa::cuda::sm90 {

// Dropout's keep bits of a consumer thread's 32 elements of a step, bit 4 j + e for element
// 4 j + e (query m0 + 8 j + 2 t + e % 2 as the stream's row, key key0 + 8 (e / 2) as its column;
// bh = b * heads_q + h). A Philox block (core/philox.h) holds rows r0, r0 + 8 (r0 % 16 < 8) and
// columns c0 + 8 c (c0 % 32 < 8, c < 4): the thread's two keys are its columns 2 (key0 % 32 >= 16)
// + e / 2, its queries for j = 2 jj, 2 jj + 1 its two rows, so one evaluation serves four of the
// thread's elements (eight evaluations a step; the other four columns are a neighbour warp's).
template <int kBlockM>
FA_HOST_DEVICE uint32_t bwd_keep_bits(const DropoutStream& drop, uint32_t bh, int m0, int key0,
                                      int t) {
  const uint32_t c_hi = uint32_t(key0) % DropoutStream::kCols >= DropoutStream::kCols / 2 ? 2u : 0u;
  uint32_t bits = 0;
  // One Philox evaluation live at a time: unrolled, the eight spilled ~200 bytes at d 128 beside
  // the consumer's dK, dV, Sᵀ and dPᵀ.
#pragma unroll 1
  for (int jj = 0; jj < kBlockM / 16; ++jj)
#pragma unroll
    for (int eq = 0; eq < 2; ++eq) {
      const Philox4 w = drop.block(bh, uint32_t(m0 + 16 * jj + 2 * t + eq), uint32_t(key0));
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int ek = 0; ek < 2; ++ek)
          bits |= uint32_t(drop.keep_in(w, uint32_t(a), c_hi + uint32_t(ek)))
                  << (4 * (2 * jj + a) + 2 * ek + eq);
    }
  return bits;
}

}  // namespace fa::cuda::sm90
