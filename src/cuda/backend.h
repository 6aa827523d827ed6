// The CUDA backend as the API layer sees it (plain C++: no CUDA types), built only when the
// library is built with CUDA (FA_WITH_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// Throws ApiError when no kernel of this build can run the forward (arch, dtype, head_dim,
// alignment, unsupported feature). ctx: the device's properties and the knobs (core/tuning.h).
void check_forward(const Params& p, const Context& ctx);
void forward(const Params& p, const Context& ctx, void* stream);

// The built head dim whose kernels serve head_dim (the smallest of FA_HEAD_DIMS >= head_dim);
// 0: none in this build.
int kernel_head_dim(int64_t head_dim);

// The backward (built unless -DFA_CUDA_BACKWARD=OFF, where check_backward throws
// FA_ERROR_BACKEND): the same checks as the forward plus the gradients' alignment, and refusal
// (FA_ERROR_UNSUPPORTED) where the kernel needs more shared memory than the device gives a block.
void check_backward(const Params& p, const Context& ctx);
// The fp32 dQ accumulator, semaphores, D and LSE, the split tail's partial sums and a packed
// batch's sanitized cu_seqlens: a function of (p, ctx) alone.
size_t backward_workspace(const Params& p, const Context& ctx);
void backward(const Params& p, const Context& ctx, void* workspace, size_t bytes, void* stream);

}  // namespace fa::cuda
