// Ring attention's bookkeeping on the device (core/row_ops.h): the copies, fp32 sums, fills and
// merges that src/parallel/ring.cpp queues between its attention calls, as small kernels on the
// call's stream. Reached from the core through the backend's row_op entry (core/cuda_backend.h).
#pragma once

#include <cstdint>

#include "core/row_ops.h"

namespace fa::cuda {

// Queues op on stream (device `device`); throws FA_ERROR_CUDA when the launch fails. Returns
// without waiting for the kernel.
void row_op(const RowOp& op, int device, void* stream);

}  // namespace fa::cuda
