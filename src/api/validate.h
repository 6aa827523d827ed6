// Argument checking for every public entry point. validate_* either returns a Params that a
// backend can run, or throws ApiError before any memory is touched (see tests/validation_catalogue.md).
#pragma once

#include "core/params.h"
#include "flashattn/flashattn.h"

namespace fa {

Params validate_forward(const fa_params* params);
Params validate_backward(const fa_params* params);

// With params->check_inputs, the checks of the data the host cannot see without reading device
// memory (cu_seqlens of CUDA tensors), after the work queued on stream; a no-op otherwise.
void validate_device_inputs(const fa_params* params, const Params& p, void* stream);

}  // namespace fa
