// Makes q's device current for the duration of a call and restores the caller's afterwards.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace fa::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&saved_);
    if (saved_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = saved_;
    cudaGetDevice(&now);
    if (now != saved_) cudaSetDevice(saved_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail(FA_ERROR_CUDA, what, ": ", cudaGetErrorString(e));
  }

 private:
  int saved_ = 0;
};

}  // namespace fa::cuda
