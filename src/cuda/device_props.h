// The dynamic shared-memory opt-in of a kernel, once per (kernel, device): it used to be a driver
// call on every attention call's host path (docs/python.md, the overhead budget). The device's
// properties (core/device.h, DeviceProps) come from dispatch in the call's Context.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/device.h"

namespace fa::cuda {

// Devices whose opt-in is remembered; a kernel on a device beyond them opts in on every launch.
constexpr int kOptInDevices = 64;

// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes) on the current device
// (`device`), unless `done` (one per kernel) records that it already succeeded there. Returns
// the CUDA error; done is set only on success. A process that resets a device
// (cudaDeviceReset) drops the opt-in without this record knowing: the library never does.
inline cudaError_t opt_in_smem(const void* kernel, int bytes, int device,
                               std::atomic<uint64_t>& done) {
  const uint64_t bit = device >= 0 && device < kOptInDevices ? uint64_t(1) << device : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && bit) done.fetch_or(bit, std::memory_order_release);
  return e;
}

}  // namespace fa::cuda
