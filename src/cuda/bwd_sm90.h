// The Hopper-native backward (src/cuda/kernels/sm90/bwd_kernel.cuh, issue 28) as the CUDA
// backend sees it: which calls it serves, its workspace and its launch. It is the backward pass
// of the cuda-sm90 registry row (api/dispatch.cpp), in play where Tuning::sm90_bwd is non-zero:
// by default (2) at head dim 128 outside the deterministic mode, where it measured faster than
// cuda-sm80 (core/tuning.h); tests/test_gpu_sm90_bwd.cpp sets 1, every call it serves. Built
// with the other backward kernels (FA_CUDA_BACKWARD).
#pragma once

#include <cstddef>
#include <string>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// "" when the sm90 backward can run this call on ctx's device, else why not (cuda-sm80 then
// runs it).
std::string sm90_bwd_refusal(const Params& p, const Context& ctx);
// The sm80 backward's workspace layout without its split tail (bwd_sm80.h, bwd_layout): the fp32
// dQ accumulator, D and LSE, which the shared pre- and postprocess read and write.
size_t sm90_backward_workspace(const Params& p, const Context& ctx);
void sm90_backward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                   void* stream);

}  // namespace fa::cuda
