// The Hopper-native forward family (src/cuda/kernels/sm90/, issue 25) as the CUDA backend sees
// it: which calls it serves, and its launch. Its registry row (api/dispatch.cpp, "cuda-sm90")
// comes before the sm80 family's and runs only where Tuning::sm90_fwd is on: off by default
// until the family has passed the GPU suite (tests/test_gpu_sm90.cpp turns it on).
#pragma once

#include <string>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// "" when the sm90 family can run this forward on ctx's device, else why not.
std::string sm90_fwd_refusal(const Params& p, const Context& ctx);
void sm90_forward(const Params& p, const Context& ctx, void* stream);

}  // namespace fa::cuda
