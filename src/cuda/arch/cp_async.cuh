// cp.async.cg.shared.global [dst], [src], 16, src_size — sm80+.
//
// Copies 16 bytes global -> shared without passing through registers, bypassing L1 (.cg).
// src_size = 0 copies nothing and fills the 16 bytes with zeros: out-of-range rows and head-dim
// padding arrive as zeros and no branch diverges around the copy.
#pragma once

#include <cstdint>

namespace fa::cuda {

__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src),
               "r"(src_size));
#endif
}

// 4 bytes through L1 (.ca; .cg takes 16 only): one fp32 per thread, e.g. a row's LSE. src_size =
// 0 stores a zero.
__device__ __forceinline__ void cp_async_4(uint32_t smem_dst, const void* gmem_src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_dst), "l"(gmem_src),
               "r"(src_size));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// An arrival on the mbarrier at smem address bar once every cp.async this thread has issued so
// far has landed (.noinc: the arrival is one of those the barrier was initialised to expect), so
// that threads other than the copier can wait for the data (a producer warp's ring stages).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Every cp.async this thread has issued landed.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace fa::cuda
