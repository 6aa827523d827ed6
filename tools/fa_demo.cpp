// fa-demo: runs FlashAttention forward and backward through the public C++ API on the best
// device this build can use (a CUDA GPU when the build has kernels for it, else the CPU flash
// backend), checks every result against the fp64 reference, and prints one table.
//
//   fa-demo [--quick]      --quick: the two smallest shapes only
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/dtype.h"  // header-only fp16/bf16 conversions (tested in tests/test_dtype.cpp)
#include "flashattn/flashattn.hpp"

#ifdef FA_DEMO_CUDA
#include <cuda_runtime.h>
#endif

namespace {

struct Shape {
  int64_t batch, heads_q, heads_kv, seqlen, head_dim;
  bool causal;
};

struct Buffers {  // fp32 host tensors of one shape (dtype conversion is the library's job)
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
};

std::string shape_str(const Shape& s) {
  return "(" + std::to_string(s.batch) + "," + std::to_string(s.heads_q) + "," +
         std::to_string(s.heads_kv) + "," + std::to_string(s.seqlen) + "," +
         std::to_string(s.head_dim) + ")";
}

// FLOPs of one forward: 4 b h s^2 d, halved for causal.
double forward_flops(const Shape& s) {
  return 4.0 * double(s.batch * s.heads_q) * double(s.seqlen) * double(s.seqlen) *
         double(s.head_dim) * (s.causal ? 0.5 : 1.0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Result {
  double fwd_ms, bwd_ms, max_err;
};

// One forward + backward with `backend` on CPU tensors; returns timings.
Result run_cpu(const Shape& s, Buffers& b, fa_backend backend) {
  using fa::Tensor;
  const int64_t B = s.batch, S = s.seqlen, Hq = s.heads_q, Hk = s.heads_kv, D = s.head_dim;
  Tensor q = Tensor::contiguous(b.q.data(), FA_DTYPE_FP32, {B, S, Hq, D});
  Tensor k = Tensor::contiguous(b.k.data(), FA_DTYPE_FP32, {B, S, Hk, D});
  Tensor v = Tensor::contiguous(b.v.data(), FA_DTYPE_FP32, {B, S, Hk, D});
  Tensor out = Tensor::contiguous(b.out.data(), FA_DTYPE_FP32, {B, S, Hq, D});
  Tensor lse = Tensor::contiguous(b.lse.data(), FA_DTYPE_FP32, {B, Hq, S});
  Tensor dout = Tensor::contiguous(b.dout.data(), FA_DTYPE_FP32, {B, S, Hq, D});
  Tensor dq = Tensor::contiguous(b.dq.data(), FA_DTYPE_FP32, {B, S, Hq, D});
  Tensor dk = Tensor::contiguous(b.dk.data(), FA_DTYPE_FP32, {B, S, Hk, D});
  Tensor dv = Tensor::contiguous(b.dv.data(), FA_DTYPE_FP32, {B, S, Hk, D});
  fa::Options o;
  o.backend = backend;
  o.causal = s.causal;
  fa::forward(q, k, v, out, lse, o);  // warm-up: the first call also starts the thread pool
  auto t0 = std::chrono::steady_clock::now();
  fa::forward(q, k, v, out, lse, o);
  const double fwd = seconds_since(t0) * 1e3;
  t0 = std::chrono::steady_clock::now();
  fa::backward(q, k, v, out, lse, dout, dq, dk, dv, o);
  const double bwd = seconds_since(t0) * 1e3;
  return {fwd, bwd, 0.0};
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // equal, including -inf == -inf
    const double d = std::fabs(double(a[i]) - double(b[i]));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

#ifdef FA_DEMO_CUDA

#define DEMO_CUDA_CHECK(call)                                                        \
  do {                                                                               \
    const cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));              \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Forward on GPU 0 in bf16: rounds q, k, v in `b` to bf16 (so the CPU reference sees the same
// inputs), runs the kernel `reps` times, leaves the output in b.out and returns the median ms.
double run_gpu_forward(const Shape& s, Buffers& b, int reps) {
  const int64_t B = s.batch, S = s.seqlen, Hq = s.heads_q, Hk = s.heads_kv, D = s.head_dim;
  auto upload = [](std::vector<float>& host) {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      bits[i] = fa::to_bf16(host[i]).bits;
      host[i] = fa::to_float(fa::bfloat16_t{bits[i]});
    }
    void* dev = nullptr;
    DEMO_CUDA_CHECK(cudaMalloc(&dev, bits.size() * 2));
    DEMO_CUDA_CHECK(cudaMemcpy(dev, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    return dev;
  };
  void* q = upload(b.q);
  void* k = upload(b.k);
  void* v = upload(b.v);
  void *out = nullptr, *lse = nullptr;
  DEMO_CUDA_CHECK(cudaMalloc(&out, b.out.size() * 2));
  DEMO_CUDA_CHECK(cudaMalloc(&lse, b.lse.size() * 4));
  using fa::Tensor;
  const fa_device dev = fa::cuda_device(0);
  fa::Options o;
  o.causal = s.causal;
  const fa_params p = fa::make_params(Tensor::contiguous(q, FA_DTYPE_BF16, {B, S, Hq, D}, dev),
                                      Tensor::contiguous(k, FA_DTYPE_BF16, {B, S, Hk, D}, dev),
                                      Tensor::contiguous(v, FA_DTYPE_BF16, {B, S, Hk, D}, dev),
                                      Tensor::contiguous(out, FA_DTYPE_BF16, {B, S, Hq, D}, dev),
                                      Tensor::contiguous(lse, FA_DTYPE_FP32, {B, Hq, S}, dev), o);
  cudaEvent_t e0, e1;
  DEMO_CUDA_CHECK(cudaEventCreate(&e0));
  DEMO_CUDA_CHECK(cudaEventCreate(&e1));
  fa::forward(p, nullptr, 0);  // warm-up (no workspace needed by the forward)
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    DEMO_CUDA_CHECK(cudaEventRecord(e0));
    fa::forward(p, nullptr, 0);
    DEMO_CUDA_CHECK(cudaEventRecord(e1));
    DEMO_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    DEMO_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::vector<uint16_t> bits(b.out.size());
  DEMO_CUDA_CHECK(cudaMemcpy(bits.data(), out, bits.size() * 2, cudaMemcpyDeviceToHost));
  DEMO_CUDA_CHECK(cudaMemcpy(b.lse.data(), lse, b.lse.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < bits.size(); ++i) b.out[i] = fa::to_float(fa::bfloat16_t{bits[i]});
  for (void* ptr : {q, k, v, out, lse}) cudaFree(ptr);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
#endif

bool gpu_usable(std::string* why) {
  if (fa_cuda_device_count() == 0) {
    *why = "no CUDA device";
    return false;
  }
  // Ask the library whether it has a kernel for CUDA tensors (the query validates and dispatches).
  std::vector<char> dummy(64);
  fa::Tensor t = fa::Tensor::contiguous(dummy.data(), FA_DTYPE_BF16, {1, 1, 1, 8}, fa::cuda_device(0));
  fa::Tensor l = fa::Tensor::contiguous(dummy.data(), FA_DTYPE_FP32, {1, 1, 1}, fa::cuda_device(0));
  const fa_params p = fa::make_params(t, t, t, t, l);
  size_t bytes = 0;
  if (fa_forward_workspace_size(&p, &bytes) != FA_OK) {
    *why = fa_last_error();
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      std::printf("usage: fa-demo [--quick]\n  Runs attention forward+backward on the best device, "
                  "checks it against the fp64 reference, prints a table.\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  std::printf("%s\n", fa_build_info());
  std::string why;
  const bool gpu = gpu_usable(&why);
  if (!gpu) std::printf("device: CPU (GPU not used: %s)\n", why.c_str());
#ifdef FA_DEMO_CUDA
  if (gpu) {
    cudaDeviceProp prop;
    DEMO_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (forward on the GPU in bf16; backward on the CPU flash backend until the "
                "CUDA backward lands)\n", prop.name);
    std::vector<Shape> gpu_shapes = {{4, 16, 16, 1024, 64, false},  {2, 16, 16, 4096, 128, false},
                                     {2, 16, 16, 4096, 128, true}, {1, 16, 4, 8192, 128, true}};
    if (quick) gpu_shapes.resize(2);
    std::printf("\n%-28s %-7s %10s %10s %14s\n", "GPU fwd (b,hq,hkv,s,d)", "causal", "ms", "TFLOP/s",
                "err vs CPU ref");
    std::mt19937 grng(7);
    std::normal_distribution<float> gnd;
    bool gok = true;
    for (const Shape& s : gpu_shapes) {
      Buffers b;
      const size_t nq = size_t(s.batch * s.seqlen * s.heads_q * s.head_dim);
      const size_t nk = size_t(s.batch * s.seqlen * s.heads_kv * s.head_dim);
      for (auto* vec : {&b.q}) { vec->resize(nq); for (float& x : *vec) x = gnd(grng); }
      for (auto* vec : {&b.k, &b.v}) { vec->resize(nk); for (float& x : *vec) x = gnd(grng); }
      b.out.resize(nq);
      b.lse.resize(size_t(s.batch * s.heads_q * s.seqlen));
      const double ms = run_gpu_forward(s, b, 20);
      // Check the first batch entry against the CPU flash backend on the same (bf16-rounded) inputs.
      Buffers r;
      r.q.assign(b.q.begin(), b.q.begin() + long(nq / size_t(s.batch)));
      r.k.assign(b.k.begin(), b.k.begin() + long(nk / size_t(s.batch)));
      r.v.assign(b.v.begin(), b.v.begin() + long(nk / size_t(s.batch)));
      r.out.resize(r.q.size());
      r.lse.resize(size_t(s.heads_q * s.seqlen));
      fa::Options o;
      o.causal = s.causal;
      fa::forward(fa::Tensor::contiguous(r.q.data(), FA_DTYPE_FP32, {1, s.seqlen, s.heads_q, s.head_dim}),
                  fa::Tensor::contiguous(r.k.data(), FA_DTYPE_FP32, {1, s.seqlen, s.heads_kv, s.head_dim}),
                  fa::Tensor::contiguous(r.v.data(), FA_DTYPE_FP32, {1, s.seqlen, s.heads_kv, s.head_dim}),
                  fa::Tensor::contiguous(r.out.data(), FA_DTYPE_FP32, {1, s.seqlen, s.heads_q, s.head_dim}),
                  fa::Tensor::contiguous(r.lse.data(), FA_DTYPE_FP32, {1, s.heads_q, s.seqlen}), o);
      const std::vector<float> got(b.out.begin(), b.out.begin() + long(r.out.size()));
      const double err = max_diff(got, r.out);
      const double flops = forward_flops(s);
      std::printf("%-28s %-7s %10.3f %10.1f %14.2e\n", shape_str(s).c_str(), s.causal ? "yes" : "no", ms,
                  flops / ms * 1e-9, err);
      gok = gok && err < 2e-2;  // bf16 output: about 2^-8 relative to |out| <= ~3
    }
    std::printf("%s: GPU bf16 forward vs CPU flash (fp32 on the same bf16 inputs)\n\n",
                gok ? "PASS" : "FAIL");
    if (!gok) return 1;
  }
#endif
  std::vector<Shape> shapes = {{1, 4, 4, 128, 64, false},
                               {2, 8, 2, 256, 64, true},
                               {1, 8, 8, 1024, 64, false},
                               {1, 8, 8, 2048, 128, true}};
  if (quick) shapes.resize(2);
  std::printf("\n%-28s %-9s %10s %10s %10s %10s %12s\n", "CPU (b,hq,hkv,s,d)", "causal",
              "fwd ms", "bwd ms", "fwd GF/s", "bwd GF/s", "max err");
  std::mt19937 rng(2024);
  std::normal_distribution<float> nd;
  bool ok = true;
  for (const Shape& s : shapes) {
    Buffers b, r;
    const size_t nq = size_t(s.batch * s.seqlen * s.heads_q * s.head_dim);
    const size_t nk = size_t(s.batch * s.seqlen * s.heads_kv * s.head_dim);
    for (auto* vec : {&b.q, &b.dout}) { vec->resize(nq); for (float& x : *vec) x = nd(rng); }
    for (auto* vec : {&b.k, &b.v}) { vec->resize(nk); for (float& x : *vec) x = nd(rng); }
    b.out.resize(nq); b.dq.resize(nq); b.dk.resize(nk); b.dv.resize(nk);
    b.lse.resize(size_t(s.batch * s.heads_q * s.seqlen));
    r = b;
    Result res{};
    try {
      res = run_cpu(s, b, FA_BACKEND_FLASH);
      run_cpu(s, r, FA_BACKEND_REFERENCE);
    } catch (const fa::Error& e) {
      std::printf("error: %s\n", e.what());
      return 1;
    }
    res.max_err = std::max({max_diff(b.out, r.out), max_diff(b.lse, r.lse), max_diff(b.dq, r.dq),
                            max_diff(b.dk, r.dk), max_diff(b.dv, r.dv)});
    const double flops = forward_flops(s);
    std::printf("%-28s %-9s %10.2f %10.2f %10.2f %10.2f %12.2e\n", shape_str(s).c_str(), s.causal ? "yes" : "no",
                res.fwd_ms, res.bwd_ms, flops / res.fwd_ms * 1e-6, 2.5 * flops / res.bwd_ms * 1e-6,
                res.max_err);
    ok = ok && res.max_err < 1e-3;
  }
  std::printf("\n%s: CPU flash backend vs fp64 reference (fp32 data), max error over out, lse, "
              "dq, dk, dv\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
