// The one place that maps a validated call to an implementation: the registry of kernel
// families. A family is a row (name, what it serves, whether it supports the call and why not,
// its workspace, its run); dispatch walks the rows of the call's device in order and takes the
// first that supports it. A new family is a new folder plus one row (dispatch.cpp).
#pragma once

#include <cstddef>

#include "core/params.h"
#include "core/tuning.h"

namespace fa {

enum class Pass { Forward, Backward };

struct Family;  // a row of the registry (dispatch.cpp)

// The family that runs the call: the first row of p's device serving p.backend that supports
// (p, pass, ctx); throws the first serving row's refusal (ApiError) when none does, and
// FA_ERROR_BACKEND when no row of this build serves the device and backend.
const Family& select_kernel(const Params& p, Pass pass, const Context& ctx);

const char* family_name(const Family& f);  // "cuda-sm80", "cpu-flash", ...

// The Context of a call with the compiled-in knobs: the device's cached properties (CUDA) or
// zeros (CPU).
Context default_context(const Params& p);

size_t workspace_size(const Family& f, const Params& p, Pass pass, const Context& ctx);
// Below this: FA_ERROR_WORKSPACE (the CPU families run on fewer threads with less than the
// query's size; the others need all of it).
size_t min_workspace_size(const Family& f, const Params& p, Pass pass, const Context& ctx);
void run(const Family& f, const Params& p, Pass pass, const Context& ctx, void* workspace,
         size_t bytes, void* stream);

}  // namespace fa
