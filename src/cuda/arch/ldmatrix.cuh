// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 — sm75+.
//
// Loads four 8x8 matrices of 16-bit elements from shared memory. Lanes 8i..8i+7 give the row
// addresses (16 contiguous bytes each) of matrix i; afterwards register r[i] of lane l holds
// elements (row l / 4, columns 2 (l % 4), 2 (l % 4) + 1) of matrix i — or, with .trans, of its
// transpose. That is the A / B fragment layout of mma.m16n8k16 (see mma.cuh) when the four
// matrices are chosen as the fragment's quadrants.
#pragma once

#include <cstdint>

namespace fa::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The inverse of ldmatrix_x4 (sm90): lanes 8i .. 8i + 7 address the rows of matrix i, register i
// of every lane holds its pair of matrix i (row lane / 4, columns 2 (lane % 4), + 1).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  __trap();  // sm90 only: callers test __CUDA_ARCH__
#endif
}

}  // namespace fa::cuda
