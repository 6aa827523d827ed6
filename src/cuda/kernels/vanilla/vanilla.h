// Standard (materialising) attention on the GPU: the baseline FlashAttention is measured against.
// Plain C++ interface for the API layer (no CUDA types); built only with FA_WITH_CUDA.
//
// Forward, per sequence batch:  S = Q·Kᵀ (cuBLAS, fp32 out)  ->  P = softmax(mask(logit(S)))
// (one fused kernel, written in the input dtype over S's own rows, LSE to p.lse)  ->  O = P·V.
// Backward:  S = Q·Kᵀ, dP = dO·Vᵀ (cuBLAS, fp32)  ->  one fused kernel writes the dropped P and
// dS = scale · P ∘ (dP∘keep − D) ∘ softcap' in the input dtype  ->  dV = Pᵀ·dO, dK = dSᵀ·Q
// (fp32 accumulators, summed over a GQA group), dQ = dS·K.
// The S / dP matrices live in the caller's workspace: the workspace query reports the quadratic
// memory that standard attention costs. docs/cuda-kernels.md ("Vanilla baseline") has the details.
#pragma once

#include <cstddef>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda::vanilla {

// Throws ApiError when the vanilla backend cannot run the call (device, dtype, sizes).
void check(const Params& p, const Context& ctx);

size_t forward_workspace(const Params& p);
size_t backward_workspace(const Params& p);

void forward(const Params& p, void* workspace, size_t bytes, void* stream);
void backward(const Params& p, void* workspace, size_t bytes, void* stream);

}  // namespace fa::cuda::vanilla
