// The sm80-family forward kernels this library instantiates: one per (element type, head dim of
// instantiations/head_dims.h), each in its own generated file (scripts/gen_instantiations.py).
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "cuda/arch/mma.cuh"
#include "cuda/instantiations/head_dims.h"

namespace fa::cuda::sm80 {

template <int kHeadDim, typename Tag>
void run_fwd(const Params& p, cudaStream_t stream);

#define FA_SM80_FWD_EXTERN(D)                                                  \
  extern template void run_fwd<D, Bf16Tag>(const Params&, cudaStream_t); \
  extern template void run_fwd<D, Fp16Tag>(const Params&, cudaStream_t);
FA_SM80_HEAD_DIMS(FA_SM80_FWD_EXTERN)
#undef FA_SM80_FWD_EXTERN

}  // namespace fa::cuda::sm80
