// The few device facts the layers above the CUDA kernels need. Implemented by
// src/cuda/device.cu when CUDA is built, else by src/core/device_none.cpp.
#pragma once

#include <cstddef>

namespace fa {

int cuda_device_count();  // 0 when CUDA is not built or no GPU is present

// What the CUDA kernels' choices depend on, per device.
struct DeviceProps {
  int major = 0, minor = 0;  // compute capability
  int smem_optin = 0;        // dynamic shared memory a block may opt in to, bytes
  int sms = 0;               // streaming multiprocessors
};

// Queried once per device and process (FA_ERROR_CUDA naming the query when the device cannot be
// queried, and then not cached). Only dispatch calls it; it hands the result to the launchers.
const DeviceProps& cuda_device_props(int device);

// Copies `bytes` of device memory to the host after the work already queued on `stream` (a
// cudaStream_t of `device`), and waits for the copy. FA_ERROR_UNSUPPORTED while the stream is
// capturing a CUDA graph (a wait there would break the capture).
void copy_to_host_sync(void* dst, const void* src, size_t bytes, int device, void* stream);

}  // namespace fa
