// The sm80-family forward kernels this library instantiates: one per (element type, head dim),
// each in its own generated file under instantiations/ (scripts/gen_instantiations.py).
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "cuda/arch/mma.cuh"

namespace fa::cuda::sm80 {

// Head dims with a kernel (a call with head_dim d runs the smallest instantiated dim >= d).
constexpr int kFwdHeadDims[] = {32, 64, 96, 128, 160, 192, 224, 256};

template <int kHeadDim, typename Tag>
void run_fwd(const Params& p, cudaStream_t stream);

#define FA_SM80_FWD_EXTERN(D)                                                  \
  extern template void run_fwd<D, Bf16Tag>(const Params&, cudaStream_t); \
  extern template void run_fwd<D, Fp16Tag>(const Params&, cudaStream_t);
FA_SM80_FWD_EXTERN(32)
FA_SM80_FWD_EXTERN(64)
FA_SM80_FWD_EXTERN(96)
FA_SM80_FWD_EXTERN(128)
FA_SM80_FWD_EXTERN(160)
FA_SM80_FWD_EXTERN(192)
FA_SM80_FWD_EXTERN(224)
FA_SM80_FWD_EXTERN(256)
#undef FA_SM80_FWD_EXTERN

}  // namespace fa::cuda::sm80
