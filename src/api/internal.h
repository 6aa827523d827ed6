// The C ABI's entry points with explicit knobs (core/tuning.h), for the tests and benchmarks that
// link the internal library (flashattn_internal): e.g. the sm86 / sm89 configurations of the
// backward run on a larger GPU under a shared-memory limit. Same validation, errors and
// per-thread message as the public calls; not exported from the shared library.
#pragma once

#include <cstddef>

#include "api/dispatch.h"
#include "core/tuning.h"
#include "flashattn/flashattn.h"

namespace fa::internal {

fa_status workspace_size(const fa_params* params, Pass pass, const Tuning& tuning, size_t* bytes);
fa_status run(const fa_params* params, Pass pass, const Tuning& tuning, void* workspace,
              size_t workspace_bytes, void* stream);
// The family that runs the call under tuning (its registry name).
fa_status select_kernel(const fa_params* params, Pass pass, const Tuning& tuning,
                        const char** name);

}  // namespace fa::internal
