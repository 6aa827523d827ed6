// Host side of the cuda-sm75 forward kernel: grid, shared-memory opt-in, launch. Included only by
// the generated instantiation files (src/cuda/instantiations/fwd_sm75_*), one head dim each.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/error.h"
#include "cuda/device_props.h"
#include "cuda/fwd_sm75.h"
#include "cuda/kernels/sm75/fwd_kernel.cuh"

namespace fa::cuda::sm75 {

template <class T>
void launch_fwd(const Params& p, cudaStream_t stream) {
  // Above 48 KB a kernel must opt in to dynamic shared memory, once per device.
  static std::atomic<uint64_t> opted_in{0};
  cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(fwd_kernel<T>), T::kSmemBytes,
                                p.device.index, opted_in);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "cudaFuncSetAttribute(fwd sm75 d", T::kHeadDim, "): ",
         cudaGetErrorString(err));
  const dim3 grid(unsigned((p.seqlen_q + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads_q),
                  unsigned(p.batch));
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "forward kernel (sm75, d", T::kHeadDim, ") launch: ",
         cudaGetErrorString(err));
}

template <int kHeadDim>
void run_fwd(const Params& p, cudaStream_t stream) {
  if (p.dropout_p > 0.f)
    launch_fwd<FwdTraits<kHeadDim, true>>(p, stream);
  else
    launch_fwd<FwdTraits<kHeadDim, false>>(p, stream);
}

}  // namespace fa::cuda::sm75
