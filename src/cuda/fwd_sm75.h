// The Turing family (cuda-sm75, src/cuda/kernels/sm75/) as the CUDA backend sees it: which calls
// it serves, and its launch. Its kernels are built only where FA_ARCHS has a 75 entry (75: SASS
// and PTX; 75-real: SASS; 75-virtual: compute_75 PTX alone, which the driver compiles for a
// newer GPU - how the family is verified on Hopper); fa_build_config.h then defines
// FA_SM75_FWD_DIMS. Its registry row (api/dispatch.cpp) is in play on sm75 devices and, under
// Tuning::sm75, on every device of compute capability >= 7.5.
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "core/tuning.h"
#include "cuda/instantiations/head_dims.h"

namespace fa::cuda {

// Returns when cuda-sm75 can run this forward on ctx's device; else throws its refusal (fp16
// only, compute capability >= 7.5, a build with sm75 code, and check_forward_args).
void check_sm75_forward(const Params& p, const Context& ctx);
void sm75_forward(const Params& p, const Context& ctx, void* stream);

namespace sm75 {
// One per head dim of instantiations/head_dims.h, fp16, each in its generated file (fwd_sm75_*).
template <int kHeadDim>
void run_fwd(const Params& p, cudaStream_t stream);

#define FA_SM75_FWD_EXTERN(D) extern template void run_fwd<D>(const Params&, cudaStream_t);
FA_SM80_HEAD_DIMS(FA_SM75_FWD_EXTERN)
#undef FA_SM75_FWD_EXTERN
}  // namespace sm75

}  // namespace fa::cuda
