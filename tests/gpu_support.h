// GPU test support: a device mirror of a HostTensor and the skip rule of every GPU test. Without
// a CUDA build or device, GPU tests report GTEST_SKIP (listed as skipped, never as passed).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "support.h"

#ifdef FA_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace fa::test {

inline bool skip_without_gpu(std::string* why) {
#ifndef FA_TEST_CUDA
  *why = "CPU-only build (FA_CUDA=OFF or no nvcc)";
  return true;
#else
  if (fa_cuda_device_count() == 0) {
    *why = "no CUDA device";
    return true;
  }
  return false;
#endif
}

#ifdef FA_TEST_CUDA
// A device mirror of a HostTensor: same strides, same bytes; poisoned (0xFF: NaN) or copied.
class DeviceTensor {
 public:
  explicit DeviceTensor(const HostTensor& h, bool poison) : host_(&h), bytes_(h.storage_bytes()) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_), cudaSuccess);
    if (poison)
      EXPECT_EQ(cudaMemset(ptr_, 0xFF, bytes_), cudaSuccess);
    else
      EXPECT_EQ(cudaMemcpy(ptr_, h.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceTensor() { cudaFree(ptr_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  fa_tensor view() const {
    fa_tensor t = host_->view().raw;
    t.data = ptr_;
    t.device = fa::cuda_device(0);
    return t;
  }
  void copy_to(HostTensor& h) const {
    EXPECT_EQ(cudaMemcpy(h.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  const HostTensor* host_;
  size_t bytes_;
  void* ptr_ = nullptr;
};
#endif

}  // namespace fa::test
