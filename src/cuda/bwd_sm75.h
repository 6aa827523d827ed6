// The Turing family's backward (cuda-sm75, src/cuda/kernels/sm75/bwd_*) as the CUDA backend sees
// it: which calls it serves, its workspace, its launch. Its kernels are built where FA_ARCHS has a
// 75 entry and the backward is built (FA_CUDA_BACKWARD), for the head dims of FA_HEAD_DIMS up to
// sm75::kBwdMaxHeadDim; fa_build_config.h then defines FA_SM75_BWD_DIMS.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// Returns when cuda-sm75 can run this backward on ctx's device; else throws its refusal
// (the forward's, then head_dim <= 128, the gradients' alignment, a build with the kernels).
void check_sm75_backward(const Params& p, const Context& ctx);
// The sm80 family's layout without a split tail (the dQ accumulator at the kernel's head dim,
// the semaphores, D, LSE, a packed batch's sanitized cu_seqlens; kernels/sm75/bwd_workspace.h):
// a function of p alone.
size_t sm75_backward_workspace(const Params& p, const Context& ctx);
void sm75_backward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                   void* stream);

namespace sm75 {
// One per built head dim <= kBwdMaxHeadDim, fp16, each in its generated file (bwd_sm75_*; the
// dropout kernel in bwd_sm75_dropout_*).
template <int kHeadDim>
void run_bwd(const Params& p, void* workspace, cudaStream_t stream);

#define FA_SM75_BWD_EXTERN(D) extern template void run_bwd<D>(const Params&, void*, cudaStream_t);
FA_SM75_BWD_EXTERN(32)
FA_SM75_BWD_EXTERN(64)
FA_SM75_BWD_EXTERN(96)
FA_SM75_BWD_EXTERN(128)
#undef FA_SM75_BWD_EXTERN
}  // namespace sm75

}  // namespace fa::cuda
