// Host side of the sm80 forward: grid, shared-memory opt-in, launch, and the choice of kernel.
// Included only by the generated instantiation files (src/cuda/instantiations/), one kernel
// (variant, dtype, head_dim) each.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/error.h"
#include "cuda/device_props.h"
#include "cuda/fwd_sm80.h"
#include "cuda/kernels/sm80/fwd_kernel.cuh"

namespace fa::cuda::sm80 {

template <class T>
void launch_fwd(const Params& p, cudaStream_t stream) {
  constexpr int kHeadDim = T::kHeadDim;
  // Above 48 KB a kernel must opt in to dynamic shared memory, once per device.
  static std::atomic<uint64_t> opted_in{0};
  cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(fwd_kernel<T>), T::kSmemBytes,
                                p.device.index, opted_in);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "cudaFuncSetAttribute(fwd sm80 d", kHeadDim, "): ", cudaGetErrorString(err));
  const dim3 grid(unsigned((p.seqlen_q + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads_q),
                  unsigned(p.batch));
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "forward kernel (sm80, d", kHeadDim, ") launch: ", cudaGetErrorString(err));
}

// The kernel of a call: dropout and the attention bias are compile-time properties of the kernel
// (FwdTraits), each variant in its own generated file, so a call without them runs a kernel
// without their code.
template <int kHeadDim, typename Tag>
void run_fwd(const Params& p, cudaStream_t stream) {
  const bool dropout = p.dropout_p > 0.f;
  if (p.bias.kind != Params::Bias::Kind::None) {
    if (dropout)
      launch_fwd<FwdTraits<kHeadDim, Tag, true, true>>(p, stream);
    else
      launch_fwd<FwdTraits<kHeadDim, Tag, false, true>>(p, stream);
  } else if (dropout) {
    launch_fwd<FwdTraits<kHeadDim, Tag, true>>(p, stream);
  } else {
    launch_fwd<FwdTraits<kHeadDim, Tag, false>>(p, stream);
  }
}

}  // namespace fa::cuda::sm80
