// GPU test support: a device mirror of a HostTensor and the skip rule of every GPU test. Without
// a CUDA build or device, GPU tests report GTEST_SKIP (listed as skipped, never as passed).
#pragma once

#include <gtest/gtest.h>

#include <memory>
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
// Device copies of one problem's tensors (inputs copied, outputs and gradients poisoned) and
// the params that point at them.
struct DeviceProblem {
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv;
  std::unique_ptr<DeviceTensor> cu_q, cu_k, alibi;
  fa_params p;

  DeviceProblem(const Problem& pr, fa_backend backend)
      : q(pr.q, false), k(pr.k, false), v(pr.v, false), out(pr.out, true), lse(pr.lse, true),
        dout(pr.dout, false), dq(pr.dq, true), dk(pr.dk, true), dv(pr.dv, true) {
    p = pr.params(backend, true);
    p.q = q.view(); p.k = k.view(); p.v = v.view(); p.out = out.view(); p.lse = lse.view();
    p.dout = dout.view(); p.dq = dq.view(); p.dk = dk.view(); p.dv = dv.view();
    if (pr.c.varlen()) {
      cu_q = std::make_unique<DeviceTensor>(pr.cu_q, false);
      cu_k = std::make_unique<DeviceTensor>(pr.cu_k, false);
      p.cu_seqlens_q = cu_q->view();
      p.cu_seqlens_k = cu_k->view();
    }
    if (pr.c.alibi) {
      alibi = std::make_unique<DeviceTensor>(pr.alibi, false);
      p.alibi_slopes = alibi->view();
    }
  }
};

#endif

}  // namespace fa::test
