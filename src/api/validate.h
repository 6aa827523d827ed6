// Argument checking for every public entry point. validate_* either returns a Params that a
// backend can run, or throws ApiError before any memory is touched (see tests/validation_catalogue.md).
#pragma once

#include "api/params.h"
#include "flashattn/flashattn.h"

namespace fa {

Params validate_forward(const fa_params* params);
Params validate_backward(const fa_params* params);

}  // namespace fa
