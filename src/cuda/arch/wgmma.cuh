// wgmma.mma_async (sm_90a): the warpgroup-level matrix multiply-accumulate, D (64 x N, fp32) +=
// A (64 x 16) · B (16 x N), fp16 / bf16 inputs, issued by the four warps of a warpgroup (128
// threads, the first warp's index a multiple of 4) and completing asynchronously.
//
// Operands (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//   A  from shared memory through a matrix descriptor (wgmma_ss), K-major unless kTransA, or from
//      registers (wgmma_rs): four .b32 a thread, the layout of an mma.sync m16n8k16 A fragment
//      (mma.cuh) for the thread's warp's 16 rows: warp w of the warpgroup holds rows 16 w..16 w+15.
//   B  from shared memory through a descriptor, K-major (each of the N rows holds its 16 K
//      elements contiguously, as K is stored for S = Q·Kᵀ) unless kTransB (N contiguous, as V is
//      stored for O = P·V). Descriptors: wgmma_desc.h.
//   D  N / 2 floats a thread: for n-tile j (8 columns), d[4 j + 0..3] are the m16n8 C fragment
//      of the thread's warp's 16 rows (mma.cuh): (row g, cols 8 j + 2t, + 1), (row g + 8, same).
// scale_d false: D = A · B (the accumulator's old value ignored).
//
// Ordering: wgmma_fence() before the first wgmma that reads registers (the accumulators, or A)
// written by ordinary instructions; wgmma_commit() closes a group of issued wgmmas;
// wgmma_wait<N>() waits until at most N groups are pending, after which their accumulators may
// be read. Shared memory written by ordinary stores must be made visible to wgmma with
// fence_proxy_async_shared() (sync.cuh) before the barrier that precedes the wgmma.
//
// fp8 (E4m3Tag): m64nNk32 with e4m3 A and B (N in {64, 128, 256}), both K-major (8-bit operands
// take no transpose bit): from registers, A is four .b32 a thread holding 16 e4m3 values, the
// layout of an mma.sync m16n8k32 8-bit A fragment for the warp's 16 rows (g = lane / 4, t = lane %
// 4): register 0 bytes 0..3 = row g, k 4t..4t+3; register 1 = row g + 8, the same k; registers 2
// and 3 = the same rows, k 16 + 4t..16 + 4t + 3. K steps are 32 bytes, as k16 steps of 16-bit types.
//
// The bodies for N in {16, 32, 64, 96, 128, 192, 256} are generated (scripts/gen_wgmma.py,
// wgmma_ops.inc) and compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere the
// wrappers trap, and callers branch on the architecture first.
#pragma once

#include <cstdint>

#include "cuda/arch/mma.cuh"  // Bf16Tag, Fp16Tag

namespace fa::cuda {

struct E4m3Tag {};  // fp8 e4m3 operands (k32 steps)

template <typename Tag, int N>
struct WgmmaSS;
template <typename Tag, int N>
struct WgmmaRS;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "cuda/arch/wgmma_ops.inc"
#endif

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// The accumulators are registers the asm statements read and write: right after the issue and
// after wgmma_wait, a register-only fence keeps the compiler from moving or reusing them while
// the tensor cores own them, and their reads above the wait.
template <int kN>
__device__ __forceinline__ void wgmma_acc_fence(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The A fragments of RS wgmmas still in flight: the asm statement reads them at issue as far as
// the compiler knows, so it could give their registers to other values before the tensor cores
// have read them. This use after wgmma_wait keeps them live, unchanged, until then.
template <int kK>
__device__ __forceinline__ void wgmma_keep(const uint32_t (&a)[kK][4]) {
#pragma unroll
  for (int k = 0; k < kK; ++k)
    asm volatile("" ::"r"(a[k][0]), "r"(a[k][1]), "r"(a[k][2]), "r"(a[k][3]) : "memory");
}

// D (+)= A · B with A and B in shared memory (descriptors a, b).
template <typename Tag, int N, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b,
                                         bool scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  WgmmaSS<Tag, N>::template run<kTransA, kTransB>(d, a, b, scale_d ? 1 : 0);
#else
  (void)d, (void)a, (void)b, (void)scale_d;
  __trap();
#endif
}

// D (+)= A · B with A in registers (four .b32 a thread) and B in shared memory (descriptor b).
template <typename Tag, int N, int kTransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                                         bool scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  WgmmaRS<Tag, N>::template run<kTransB>(d, a, b, scale_d ? 1 : 0);
#else
  (void)d, (void)a, (void)b, (void)scale_d;
  __trap();
#endif
}

}  // namespace fa::cuda
