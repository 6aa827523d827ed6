// The few device facts the layers above the CUDA kernels need. Implemented by
// src/core/cuda_loader.cpp through the CUDA backend's table (core/cuda_backend.h): the backend
// library is opened by the first of these calls; in a CPU-only build there is no device.
#pragma once

#include <cstddef>

namespace fa {

// 0 when CUDA is not built, its backend cannot be loaded, or no GPU is present.
int cuda_device_count();

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
