// The CUDA backend as its table (backend_table.cpp) sees it: plain C++, no CUDA types. Built
// only with CUDA (FA_WITH_CUDA), into libflashattn_cuda.so (core/cuda_backend.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// The device facts behind core/device.h (src/cuda/device.cu), reached from the core through the
// backend's table (core/cuda_backend.h): the device count (0 without a driver or a GPU), the
// per-device properties cached once per process (FA_ERROR_CUDA naming the query when a device
// cannot be queried, and then not cached), and check_inputs' synchronous read-back.
int device_count();
const DeviceProps& device_props(int device);
void copy_to_host_sync(void* dst, const void* src, size_t bytes, int device, void* stream);

// Throws ApiError when no kernel of this build can run the forward (arch, dtype, head_dim,
// alignment, unsupported feature). ctx: the device's properties and the knobs (core/tuning.h).
// fp8_ok: the family reads fp8 e4m3 inputs (cuda-kvcache, cuda-sm90's forward); then their
// head_dim must be a multiple of 16 (16-byte chunks of a row).
void check_forward(const Params& p, const Context& ctx, bool fp8_ok = false);
// check_forward's parts that hold for every tiled family whatever the device: backend=REFERENCE
// refused (check_cuda_backend); dtype, head_dim, sizes and 16-byte alignment (check_forward_args).
void check_cuda_backend(const Params& p);
// A view's base and strides on 16-byte boundaries (the kernels' 16-byte copies); `name` names it.
void check_view_alignment(const View& v, const char* name);
void check_forward_args(const Params& p, bool fp8_ok = false);
void forward(const Params& p, const Context& ctx, void* stream);

// The built head dim whose kernels serve head_dim (the smallest of FA_HEAD_DIMS >= head_dim);
// 0: none in this build.
int kernel_head_dim(int64_t head_dim);

// The backward (built unless -DFA_CUDA_BACKWARD=OFF, where check_backward throws
// FA_ERROR_BACKEND): the same checks as the forward plus the gradients' alignment, and refusal
// (FA_ERROR_UNSUPPORTED) where the kernel needs more shared memory than the device gives a block.
void check_backward(const Params& p, const Context& ctx);
// The fp32 dQ accumulator, semaphores, D and LSE, the split tail's partial sums and a packed
// batch's sanitized cu_seqlens: a function of (p, ctx) alone.
size_t backward_workspace(const Params& p, const Context& ctx);
void backward(const Params& p, const Context& ctx, void* workspace, size_t bytes, void* stream);

}  // namespace fa::cuda
