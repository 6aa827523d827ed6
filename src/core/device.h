// The few device facts the API layer needs. Implemented by src/cuda/device.cu when CUDA is
// built, else by src/api/device_none.cpp.
#pragma once

#include <cstddef>

namespace fa {

int cuda_device_count();  // 0 when CUDA is not built or no GPU is present

// Copies `bytes` of device memory to the host after the work already queued on `stream` (a
// cudaStream_t of `device`), and waits for the copy. FA_ERROR_UNSUPPORTED while the stream is
// capturing a CUDA graph (a wait there would break the capture).
void copy_to_host_sync(void* dst, const void* src, size_t bytes, int device, void* stream);

}  // namespace fa
