// mov.u32 %r, %ctaid.{x,y,z} / %tid.x through volatile asm — any architecture.
//
// blockIdx reads are pure to the compiler, so a kernel that needs its block coordinates again
// after a long loop gets them (and everything derived from them: row indices, pointers) held in
// registers across the loop. A volatile read cannot be merged with the earlier one: the values
// are recomputed where needed, which frees those registers inside the loop.
#pragma once

#include <cstdint>

namespace fa::cuda {

__device__ __forceinline__ uint3 block_index_reread() {
  uint3 r;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(r.x));
  asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(r.y));
  asm volatile("mov.u32 %0, %%ctaid.z;\n" : "=r"(r.z));
  return r;
}

__device__ __forceinline__ uint32_t thread_index_x_reread() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(r));
  return r;
}

}  // namespace fa::cuda
