// The CPU backend as the API layer sees it: workspace sizes and runs for the two
// implementations (FA_BACKEND_FLASH, FA_BACKEND_REFERENCE).
#pragma once

#include <cstddef>

#include "core/params.h"

namespace fa::cpu {

enum class Impl { Flash, Reference };

// Instruction set the flash kernels run with on this machine ("avx2" or "generic").
const char* isa_name();

// Bytes for every OpenMP thread to have its scratch; a call succeeds with as little as
// min_workspace (one thread's worth) and then uses as many threads as fit.
size_t forward_workspace(const Params& p, Impl impl);
size_t backward_workspace(const Params& p, Impl impl);
size_t min_forward_workspace(const Params& p, Impl impl);
size_t min_backward_workspace(const Params& p, Impl impl);

void forward(const Params& p, Impl impl, void* workspace, size_t bytes);
void backward(const Params& p, Impl impl, void* workspace, size_t bytes);

}  // namespace fa::cpu
