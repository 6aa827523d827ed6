// The sm90 synchronisation the warp-specialised kernels use besides the mbarriers of tma.cuh:
// named barriers (bar.sync / bar.arrive on ids 1..15; id 0 is __syncthreads'), the register
// reallocation between warpgroups (setmaxnreg), the proxy fence that orders ordinary
// shared-memory stores before the copy engine's or wgmma's reads, and the plain mbarrier arrival
// a consumer uses to release a buffer. Each compiles to nothing below sm90 (setmaxnreg: below
// sm_90a); callers branch on the architecture first.
#pragma once

#include <cstdint>

namespace fa::cuda {

// Named barrier ids, one enum for every kernel that uses them, so that two roles never share an
// id by accident. 0 is __syncthreads'.
enum class NamedBarrier : uint32_t {
  kConsumers = 1,       // every consumer warpgroup (a shared epilogue step)
  kPingPong0 = 2,       // warpgroup 0's turn at the tensor cores (ping-pong schedule)
  kPingPong1 = 3,       // warpgroup 1's turn
  kEpilogue0 = 4,       // warpgroup 0's epilogue: its shared-memory staging written
  kPingPong2 = 5,       // warpgroup 2's turn (three consumer warpgroups)
  kEpilogue1 = 6,       // warpgroup 1's epilogue
  kEpilogue2 = 7,       // warpgroup 2's epilogue
  kBwdDq0 = 8,          // the sm90 backward's consumer 0: its dQ block staged for the bulk add
  kBwdDq1 = 9,          // consumer 1's
  kFirstFree = 10,      // ids from here on are free for a new role
};

// This thread's lane (%laneid), read where it is used: the read is volatile, so the compiler
// cannot hoist what is computed from it out of a loop and keep that live across the loop (a
// once-a-tile epilogue's shared-memory addresses would otherwise hold registers through a main
// loop that needs them all).
__device__ __forceinline__ int lane_id_here() {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return int(lane);
}

// Consumer warpgroup c's epilogue barrier (its own 128 threads; c < 3).
__host__ __device__ constexpr NamedBarrier epilogue_barrier(int c) {
  return c == 0 ? NamedBarrier::kEpilogue0 : c == 1 ? NamedBarrier::kEpilogue1 : NamedBarrier::kEpilogue2;
}

// Consumer warpgroup c's turn at the tensor cores under ping-pong (c < 3).
__host__ __device__ constexpr NamedBarrier ping_pong_turn(int c) {
  return c == 0 ? NamedBarrier::kPingPong0 : c == 1 ? NamedBarrier::kPingPong1 : NamedBarrier::kPingPong2;
}

// Waits until `threads` threads (a multiple of 32) have arrived at barrier id, counting this one.
__device__ __forceinline__ void named_barrier_sync(NamedBarrier id, uint32_t threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("bar.sync %0, %1;\n" ::"r"(uint32_t(id)), "r"(threads) : "memory");
#endif
}

// Arrives at barrier id (of `threads` threads) without waiting.
__device__ __forceinline__ void named_barrier_arrive(NamedBarrier id, uint32_t threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("bar.arrive %0, %1;\n" ::"r"(uint32_t(id)), "r"(threads) : "memory");
#endif
}

// The warpgroup's register budget a thread, raised or lowered (a multiple of 8 in 24..256). Takes
// effect only with a register cap at kernel entry (__launch_bounds__(threads, 1)) and each role a
// branch of one if / else; ptxas warns (C7508) when it ignores it.
//
// The registers come from the block's own pool: a block starts with threads x (its launch count
// a thread, launch_registers below), setmaxnreg.dec gives registers to that pool and
// setmaxnreg.inc blocks until the pool holds what it asks for. A split that needs more than the
// launch gave (the SM's 65536 is not the bound) hangs its consumers at the .inc: check it with
// register_split_fits.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes 24..256 by 8");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes 24..256 by 8");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// The registers a thread of a block of `threads` starts with under __launch_bounds__(threads, 1):
// ptxas caps the kernel at the SM's 65536 shared evenly, in steps of 8 (384 threads: 168, 512:
// 128); a warp-specialised kernel is compiled up to that cap, so the launch allocates it.
constexpr int launch_registers(int threads) {
  return (65536 / threads) / 8 * 8 > 255 ? 255 : (65536 / threads) / 8 * 8;
}
// Whether one producer warpgroup at `producer` registers a thread leaves the pool enough for
// `consumers` warpgroups at `consumer` (see setmaxnreg_inc): 40 / 232 and 24 / 240 with two
// consumers, 32 / 160 with three fill it exactly; 32 / 240 is 1024 registers short.
constexpr bool register_split_fits(int producer, int consumers, int consumer) {
  return 128 * producer + consumers * 128 * consumer <= 128 * (1 + consumers) * launch_registers(128 * (1 + consumers));
}

// The shared memory a block may opt in to on sm90 (227 KB: the H100's and H200's limit).
constexpr int kSm90SmemPerBlock = 232448;

// This thread's ordinary shared-memory stores, ordered before later reads by the async proxy (the
// copy engine's TMA stores, wgmma's operand reads). Each writing thread, before the barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Global memory between the generic proxy and the async proxy (bulk copies and reductions): after
// a generic-proxy acquire, before this thread's bulk reduction that must follow what the acquire
// saw; and after a completed bulk reduction, before the release that publishes it.
__device__ __forceinline__ void fence_proxy_async_global() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// A plain arrival on an mbarrier (a consumer's release of a buffer to the producer).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

}  // namespace fa::cuda
