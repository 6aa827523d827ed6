// The Hopper-native forward family (src/cuda/kernels/sm90/, issue 25) as the CUDA backend sees
// it: which calls it serves, and its launch. Its registry row (api/dispatch.cpp, "cuda-sm90")
// comes before the sm80 family's and runs only where Tuning::sm90_fwd is on: off by default
// until the family has passed the GPU suite (tests/test_gpu_sm90.cpp turns it on).
#pragma once

#include <cstddef>
#include <string>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// "" when the sm90 family can run this forward on ctx's device, else why not.
std::string sm90_fwd_refusal(const Params& p, const Context& ctx);
// The forward's workspace: the dynamic tile scheduler's counter where the call's launch takes
// it (Tuning::sm90_fwd_persistent 1), else 0 bytes.
size_t sm90_forward_workspace(const Params& p, const Context& ctx);
// With a workspace of sm90_forward_workspace's bytes (or more); without one (nullptr, 0) the
// persistent launch takes the static walk where the tiles are of one length.
void sm90_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes, void* stream);

// The same three for fp8 e4m3 inputs (kernels/sm90/fwd_fp8_sm90.cu), which the ones above hand
// fp8 calls to. Its workspace holds Vᵀ (kernels/sm90/fp8_v_layout.h) besides the tile counter.
std::string sm90_fp8_fwd_refusal(const Params& p, const Context& ctx);
size_t sm90_fp8_forward_workspace(const Params& p, const Context& ctx);
void sm90_fp8_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                      void* stream);

}  // namespace fa::cuda
