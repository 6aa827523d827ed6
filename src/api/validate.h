// Argument checking for every public entry point. validate_* either returns a Params that a
// backend can run, or throws ApiError before any memory is touched (see tests/validation_catalogue.md).
#pragma once

#include "core/params.h"
#include "flashattn/flashattn.h"

namespace fa {

Params validate_forward(const fa_params* params);
Params validate_backward(const fa_params* params);

// FA_ERROR_UNSUPPORTED naming the first feature of the call that only the CPU backend implements
// in this build (block_table, cache_seqlens, q_shift, an fp32 out or
// dout with 16-bit inputs) when its tensors (q's device) are not on the CPU. validate_* call it;
// exposed so that a CPU-only build can test it. p must be in the current layout.
void check_cpu_only_features(const fa_params& p, bool backward);
// fp8 e4m3 inputs (0.5): FA_ERROR_UNSUPPORTED for CUDA tensors (no GPU kernel yet), for the
// backward, and with dropout, attn_bias or rotary, naming the feature; a no-op for other dtypes.
void check_fp8(const fa_params& p, bool backward);

// With params->check_inputs, the checks of the data the host cannot see without reading device
// memory (cu_seqlens of CUDA tensors), after the work queued on stream; a no-op otherwise.
void validate_device_inputs(const fa_params* params, const Params& p, void* stream);

}  // namespace fa
