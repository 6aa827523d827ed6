// The CUDA backend as the API layer sees it (plain C++: no CUDA types), built only when the
// library is built with CUDA (FA_WITH_CUDA).
#pragma once

#include "api/params.h"

namespace fa::cuda {

// Throws ApiError when no kernel of this build can run the forward (arch, dtype, head_dim,
// alignment, unsupported feature); otherwise names the kernel family.
const char* check_forward(const Params& p);
void forward(const Params& p, void* stream);

}  // namespace fa::cuda
