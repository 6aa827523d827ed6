// GPU test support: a device mirror of a HostTensor and the skip rule of every GPU test. Without
// a CUDA build or device, GPU tests report GTEST_SKIP (listed as skipped, never as passed).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "api/internal.h"
#include "cuda/instantiations/head_dims.h"
#include "support.h"

#ifdef FA_TEST_CUDA
#include <cuda_runtime.h>

#include "core/device.h"
#include "cuda/backend.h"
#endif

namespace fa::test {

// The GPU grid (tests/test_gpu.cpp; fp16 cases also tests/test_gpu_sm75.cpp), covered so that every value of every axis appears: dtype x head_dim x
// feature (none, causal, window, softcap, ALiBi, dropout 0.17), with GQA ratio, lengths, layout
// and - for the backward - the deterministic mode rotating through their values.
inline std::vector<Case> gpu_grid() {
  const fa_dtype dtypes[] = {FA_DTYPE_FP16, FA_DTYPE_BF16};
  const auto& dims = cuda::kSm80HeadDims;  // the generator's list (instantiations/head_dims.h)
  const int64_t lens[][2] = {{1, 1},     {113, 203},   {128, 128},   {256, 512},
                             {799, 3},   {1024, 1024}, {2048, 1000}};
  std::vector<Case> cases;
  uint64_t n = 0;
  for (fa_dtype dt : dtypes)
    for (int64_t d : dims)
      for (int feature = 0; feature < 6; ++feature) {
        Case c;
        c.seed = ++n;
        c.dtype = dt;
        c.head_dim = d;
        c.heads_kv = 2;
        c.heads_q = (n % 2) ? 8 : 2;  // GQA 4 and 1
        c.batch = 2;
        const auto* len = lens[(n * 3) % 7];
        c.seqlen_q = len[0];
        c.seqlen_k = len[1];
        c.strided = (n % 3) == 0;
        c.pad = 8;  // the CUDA kernels move 16-byte chunks: row strides stay multiples of 8
        if (feature == 1) c.causal = true;
        if (feature == 2) { c.window_left = 100; c.window_right = 17; }
        if (feature == 3) c.softcap = 30.f;
        if (feature == 4) c.alibi = true;
        if (feature == 5) c.dropout_p = 0.17f;
        c.deterministic = (n % 5) == 2;
        if (n % 4 == 0) {
          c.lens_q = {int32_t(c.seqlen_q), 0, 77, 1};
          c.lens_k = {int32_t(c.seqlen_k), 5, 0, 130};
        }
        cases.push_back(c);
      }
  return cases;
}

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

// True, with the reason in *why, when this build has no CUDA kernel for head_dim
// (cuda::kernel_head_dim). Only a build configured with fewer head dims than the default
// (bench/ab.sh's FA_AB_HEAD_DIMS) skips cases; the default build has a kernel for every
// head dim of the grids, so there nothing is skipped.
inline bool skip_head_dim_not_built(int64_t head_dim, std::string* why) {
#ifdef FA_TEST_CUDA
  if (fa::cuda::kernel_head_dim(head_dim) != 0) return false;
  *why = "head_dim=" + std::to_string(head_dim) +
         " has no CUDA kernel in this build (FA_HEAD_DIMS)";
  return true;
#else
  (void)head_dim;
  (void)why;
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
  // The device bytes, through h (the mirror's host tensor or one of its shape): for comparing
  // runs bit for bit.
  std::vector<unsigned char> bytes(HostTensor& h) const {
    copy_to(h);
    const auto* p = static_cast<const unsigned char*>(h.data());
    return std::vector<unsigned char>(p, p + h.storage_bytes());
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
  std::unique_ptr<DeviceTensor> cu_q, cu_k, alibi, bias;
  std::unique_ptr<DeviceTensor> q_descale, k_descale, v_descale;  // fp8 (Case::descale)
  // A paged problem's cache (k, v above then hold the same keys densely, unused) and lengths.
  std::unique_ptr<DeviceTensor> k_pages, v_pages, block_table, cache_seqlens;
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
    if (pr.c.has_bias()) {
      bias = std::make_unique<DeviceTensor>(pr.bias, false);
      p.attn_bias = bias->view();
    }
    if (pr.q_descale.data()) {
      q_descale = std::make_unique<DeviceTensor>(pr.q_descale, false);
      k_descale = std::make_unique<DeviceTensor>(pr.k_descale, false);
      v_descale = std::make_unique<DeviceTensor>(pr.v_descale, false);
      p.q_descale = q_descale->view();
      p.k_descale = k_descale->view();
      p.v_descale = v_descale->view();
    }
    if (pr.block_table.data()) {
      k_pages = std::make_unique<DeviceTensor>(pr.k_pages, false);
      v_pages = std::make_unique<DeviceTensor>(pr.v_pages, false);
      block_table = std::make_unique<DeviceTensor>(pr.block_table, false);
      p.k = k_pages->view();
      p.v = v_pages->view();
      p.block_table = block_table->view();
    }
    if (pr.cache_seqlens.data()) {
      cache_seqlens = std::make_unique<DeviceTensor>(pr.cache_seqlens, false);
      p.cache_seqlens = cache_seqlens->view();
    }
  }
};

// The kernel family the registry gives p under tuning (internal::select_kernel), or the
// library's refusal when none takes it.
inline std::string family_of(const fa_params& p, Pass pass, const Tuning& tuning) {
  const char* name = nullptr;
  if (internal::select_kernel(&p, pass, tuning, &name) != FA_OK) return fa_last_error();
  return name;
}

// The tiled flash families, one of which a plain call on a GPU runs: cuda-sm90 forwards on an
// sm90 device (with sm_90a code and views TMA can map) and its d 128 backwards, cuda-sm80 elsewhere.
inline bool is_flash_family(const std::string& family) {
  return family == "cuda-sm80" || family == "cuda-sm90";
}

// True, with the library's message in *why, when it has no CUDA backward kernel for p: a build
// without them (FA_ERROR_BACKEND) or a kernel needing more shared memory than the GPU gives a
// block (FA_ERROR_UNSUPPORTED). Tests skip then; any other failed query fails run_pass.
inline bool backward_unavailable(const fa_params& p, std::string* why,
                                 const Tuning* tuning = nullptr) {
  size_t bytes = 0;
  const fa_status st = tuning ? internal::workspace_size(&p, Pass::Backward, *tuning, &bytes)
                              : fa_backward_workspace_size(&p, &bytes);
  if (st != FA_ERROR_BACKEND && st != FA_ERROR_UNSUPPORTED) return false;
  *why = fa_last_error();
  return true;
}

// True, with the reason in *why, where this machine and build cannot run cuda-sm90's `pass`
// under `tuning`: no sm90 GPU, no sm_90a code (FA_ARCHS), for a backward no backward kernels.
// Any other refusal of a plain bf16 d 64 call is a failure, not a skip: false with *why set.
inline bool skip_without_sm90(Pass pass, const Tuning& tuning, std::string* why) {
  if (skip_without_gpu(why)) return true;
  if (fa::cuda_device_props(0).major != 9) {
    *why = "not an sm90 GPU";
    return true;
  }
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.head_dim = 64;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const bool backward = pass == Pass::Backward;
  if (backward && backward_unavailable(dev.p, why)) return true;  // FA_CUDA_BACKWARD=OFF
  const std::string f = family_of(dev.p, pass, tuning);
  if (f == "cuda-sm90") return false;
  *why = std::string("cuda-sm90 refused a plain bf16 ") + (backward ? "backward" : "call") +
         " (it ran " + f + ")";
  return std::string(fa_build_info()).find("90a") == std::string::npos;
}

// Runs one pass with a workspace of exactly the queried size, poisoned (0xFF: NaN as floats,
// -1 as counters), so that a part the library reads before writing or clearing it shows in the
// results; the query, the call and the device must all succeed.
// tuning: the knobs of the call (core/tuning.h), through the internal entry points; null: the
// public entry points (the compiled-in defaults).
inline void run_pass(const fa_params& p, bool backward, const Tuning* tuning = nullptr) {
  const Pass pass = backward ? Pass::Backward : Pass::Forward;
  size_t bytes = 0;
  ASSERT_EQ(tuning ? internal::workspace_size(&p, pass, *tuning, &bytes)
            : backward ? fa_backward_workspace_size(&p, &bytes)
                       : fa_forward_workspace_size(&p, &bytes),
            FA_OK) << fa_last_error();
  void* ws = nullptr;
  if (bytes) {
    ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(ws, 0xFF, bytes), cudaSuccess);
  }
  const fa_status st = tuning ? internal::run(&p, pass, *tuning, ws, bytes, nullptr)
                       : backward ? fa_backward(&p, ws, bytes, nullptr)
                                  : fa_forward(&p, ws, bytes, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  cudaFree(ws);
  ASSERT_EQ(st, FA_OK) << fa_last_error();
  ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
}

// Runs the backward `reruns` more times and counts the gradient tensors (dk, dv, and dq when
// with_dq) whose bytes differ from what the device held before (the first run's); 0: bit for
// bit the same. Returns early, with the fatal failure recorded, when a run fails.
inline int rerun_backward_differences(const DeviceProblem& dev, Problem& pr, int reruns,
                                      bool with_dq, const Tuning* tuning = nullptr) {
  std::vector<unsigned char> dq0;
  if (with_dq) dq0 = dev.dq.bytes(pr.dq);
  const auto dk0 = dev.dk.bytes(pr.dk), dv0 = dev.dv.bytes(pr.dv);
  int differing = 0;
  for (int run = 0; run < reruns; ++run) {
    run_pass(dev.p, true, tuning);
    if (::testing::Test::HasFatalFailure()) return differing;
    if (with_dq) differing += dev.dq.bytes(pr.dq) != dq0;
    differing += dev.dk.bytes(pr.dk) != dk0;
    differing += dev.dv.bytes(pr.dv) != dv0;
  }
  return differing;
}

// Copies out and lse (with grads also dq, dk, dv) back into pr and checks them against the fp64
// reference by FlashAttention's rule: 2x the same-precision naive error + 1e-5 for out and lse,
// 3x + 1e-4 for the gradients (naive: fp32 math on the same inputs, P rounded to 16 bits when
// the inputs are).
inline void expect_device_results(Problem& pr, const DeviceProblem& dev, bool grads) {
  dev.out.copy_to(pr.out);
  dev.lse.copy_to(pr.lse);
  if (grads) {
    dev.dq.copy_to(pr.dq);
    dev.dk.copy_to(pr.dk);
    dev.dv.copy_to(pr.dv);
  }
  const bool round_p = pr.c.dtype != FA_DTYPE_FP32;
  const Dense got = outputs(pr, grads);
  const Dense ref = reference(pr, false, grads);
  const Dense naive = reference(pr, true, grads, round_p);
  expect_rules(got, ref, naive, grads);
}

#endif

}  // namespace fa::test
