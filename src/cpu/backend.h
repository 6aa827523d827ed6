// The CPU backend as the API layer sees it: workspace sizes and runs for the two
// implementations (FA_BACKEND_FLASH, FA_BACKEND_REFERENCE).
#pragma once

#include <cstddef>
#include <vector>

#include "core/params.h"

namespace fa::cpu {

enum class Impl { Flash, Reference };

// Instruction sets the flash kernels are built for (CMakeLists.txt, fa_cpu_isa).
enum class Isa { Generic, Avx2, Avx512 };

// The sets this build has kernels for and this CPU can run, best first; generic is always last.
const std::vector<Isa>& available_isas();
// available_isas().front(): what forward() and backward() run without an explicit Isa.
Isa best_isa();
const char* isa_name(Isa isa);  // "generic", "avx2", "avx512"
// Instruction set the flash kernels run with on this machine: isa_name(best_isa()).
const char* isa_name();

// Bytes for every OpenMP thread to have its scratch; a call succeeds with as little as
// min_workspace (one thread's worth) and then uses as many threads as fit.
size_t forward_workspace(const Params& p, Impl impl);
size_t backward_workspace(const Params& p, Impl impl);
size_t min_forward_workspace(const Params& p, Impl impl);
size_t min_backward_workspace(const Params& p, Impl impl);

void forward(const Params& p, Impl impl, void* workspace, size_t bytes);
void backward(const Params& p, Impl impl, void* workspace, size_t bytes);
// The same with the flash kernels of a given instruction set (one of available_isas(); tests run
// every one): the workspace and the results' accuracy do not depend on it.
void forward(const Params& p, Impl impl, void* workspace, size_t bytes, Isa isa);
void backward(const Params& p, Impl impl, void* workspace, size_t bytes, Isa isa);

}  // namespace fa::cpu
