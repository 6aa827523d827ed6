// griddepcontrol — programmatic dependent launch, sm90+ (no-ops below, where no kernel is
// launched as a programmatic dependent).
//
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before the
// kernel ahead of it on the stream completes: once every block of that kernel has called
// grid_launch_dependents() or exited. grid_dependency_wait() then blocks until that kernel has
// completed and its memory is visible; in a kernel launched plainly it returns at once.
#pragma once

namespace fa::cuda {

__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace fa::cuda
