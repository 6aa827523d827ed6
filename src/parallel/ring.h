// Ring attention's engine (flashattn/ring.h has the contract): the schedule of ring_plan.h run
// over a validated call, each block through the C ABI's fa_forward / fa_backward and the partial
// results merged by the combine step (cpu/combine.h). src/api/ring.cpp validates and calls it.
#pragma once

#include <cstddef>

#include "core/params.h"
#include "flashattn/ring.h"

namespace fa::ring {

// A call that passed validation: the shard's fa_params in the current layout, the Params
// validation made of them, and the ring (comm.size >= 1, rank within it, a known layout, a
// seqlen whose shard of this rank q, k, v hold).
struct Call {
  const fa_params& fp;
  const Params& p;
  const fa_ring& ring;
};

size_t forward_workspace(const Call& c);
size_t backward_workspace(const Call& c);

// Throw ApiError: FA_ERROR_COMM when the communicator fails, the block call's status otherwise.
// workspace holds bytes >= the size above (host memory: CPU tensors only in this build).
void forward(const Call& c, void* workspace, size_t bytes, void* stream);
void backward(const Call& c, void* workspace, size_t bytes, void* stream);

}  // namespace fa::ring
