// The one place that maps a validated call to an implementation (device, backend, features).
#pragma once

#include <cstddef>

#include "core/params.h"

namespace fa {

enum class Pass { Forward, Backward };

enum class Kernel {
  CpuFlash,      // tiled FlashAttention on the CPU (OpenMP, fp32 accumulation)
  CpuReference,  // naive double-precision oracle
  CudaSm80,      // FlashAttention-2 kernels, mma.sync + cp.async (Ampere, Ada, Hopper)
  CudaVanilla,   // standard attention: cuBLAS GEMMs + a softmax kernel, S/P in the workspace
};

const char* kernel_name(Kernel k);

// Throws ApiError(FA_ERROR_BACKEND) when nothing in this build can run the call.
Kernel select_kernel(const Params& p, Pass pass);

size_t workspace_size(Kernel k, const Params& p, Pass pass);      // what the query reports
size_t min_workspace_size(Kernel k, const Params& p, Pass pass);  // below this: FA_ERROR_WORKSPACE
void run(Kernel k, const Params& p, Pass pass, void* workspace, size_t bytes, void* stream);

}  // namespace fa
