// fa-demo: runs FlashAttention forward and backward through the public C++ API on the best
// device this build can use (a CUDA GPU when the build has kernels for it, else the CPU flash
// backend), checks every result against the fp64 reference, and prints one table.
//
//   fa-demo [--quick]      --quick: the two smallest shapes only
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cli.h"         // tools/common: CLI11 with a man-page --help
#include "core/dtype.h"  // header-only fp16/bf16 conversions (tested in tests/test_dtype.cpp)
#include "flashattn/flashattn.hpp"
#include "text.h"        // tools/common: fatools::Table, sig

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
  return fmt::format("({},{},{},{},{})", s.batch, s.heads_q, s.heads_kv, s.seqlen, s.head_dim);
}

// A relative or absolute error, to 3 significant figures in scientific notation.
std::string err_str(double e) { return fmt::format("{:.2e}", e); }

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
      fmt::print(stderr, "{}: {}\n", #call, cudaGetErrorString(e_));                \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Forward and backward on GPU 0 in bf16: rounds q, k, v and dout in `b` to bf16 (so that the
// CPU check sees the same inputs), runs each `reps` times after a warm-up, leaves out, lse, dq,
// dk and dv in `b` and returns the median times.
Result run_gpu(const Shape& s, Buffers& b, int reps) {
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
  auto alloc = [](size_t bytes) {
    void* dev = nullptr;
    DEMO_CUDA_CHECK(cudaMalloc(&dev, bytes));
    return dev;
  };
  auto download = [](void* dev, std::vector<float>& host) {
    std::vector<uint16_t> bits(host.size());
    DEMO_CUDA_CHECK(cudaMemcpy(bits.data(), dev, bits.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bits.size(); ++i) host[i] = fa::to_float(fa::bfloat16_t{bits[i]});
  };
  void* q = upload(b.q);
  void* k = upload(b.k);
  void* v = upload(b.v);
  void* dout = upload(b.dout);
  void* out = alloc(b.out.size() * 2);
  void* lse = alloc(b.lse.size() * 4);
  void* dq = alloc(b.dq.size() * 2);
  void* dk = alloc(b.dk.size() * 2);
  void* dv = alloc(b.dv.size() * 2);
  using fa::Tensor;
  const fa_device dev = fa::cuda_device(0);
  auto bf16 = [&](void* ptr, int64_t heads) {
    return Tensor::contiguous(ptr, FA_DTYPE_BF16, {B, S, heads, D}, dev);
  };
  fa::Options o;
  o.causal = s.causal;
  fa_params p = fa::make_params(bf16(q, Hq), bf16(k, Hk), bf16(v, Hk), bf16(out, Hq),
                                Tensor::contiguous(lse, FA_DTYPE_FP32, {B, Hq, S}, dev), o);
  p.dout = bf16(dout, Hq).raw;
  p.dq = bf16(dq, Hq).raw;
  p.dk = bf16(dk, Hk).raw;
  p.dv = bf16(dv, Hk).raw;
  const size_t ws_bytes = fa::backward_workspace_size(p);
  void* ws = ws_bytes ? alloc(ws_bytes) : nullptr;
  cudaEvent_t e0, e1;
  DEMO_CUDA_CHECK(cudaEventCreate(&e0));
  DEMO_CUDA_CHECK(cudaEventCreate(&e1));
  auto median_ms = [&](auto&& call) {
    call();  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      DEMO_CUDA_CHECK(cudaEventRecord(e0));
      call();
      DEMO_CUDA_CHECK(cudaEventRecord(e1));
      DEMO_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      DEMO_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  Result res{};
  res.fwd_ms = median_ms([&] { fa::forward(p, nullptr, 0); });  // the forward needs no workspace
  res.bwd_ms = median_ms([&] { fa::backward(p, ws, ws_bytes); });
  download(out, b.out);
  DEMO_CUDA_CHECK(cudaMemcpy(b.lse.data(), lse, b.lse.size() * 4, cudaMemcpyDeviceToHost));
  download(dq, b.dq);
  download(dk, b.dk);
  download(dv, b.dv);
  for (void* ptr : {q, k, v, dout, out, lse, dq, dk, dv, ws}) cudaFree(ptr);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return res;
}

// max |a - b| / max |ref| (1 when ref is all zeros).
double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double m = 0;
  for (float x : ref) m = std::max(m, double(std::fabs(x)));
  return max_diff(a, ref) / (m > 0 ? m : 1.0);
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
  CLI::App app{"runs attention forward and backward on the best device and checks it", "fa-demo"};
  fatools::setup(app, {{"fa-demo",
                        {"Runs FlashAttention forward and backward through the public C++ API on "
                         "a CUDA GPU when this build has kernels for it (bf16, checked against the "
                         "CPU flash backend on the same inputs), and on the CPU flash backend (fp32, "
                         "checked against the fp64 reference); prints one table per device.",
                         {{"EXIT STATUS", "0 every check passed; 1 a check failed or a call "
                                          "failed; 2 bad arguments."}}}}});
  bool quick = false;
  app.add_flag("--quick", quick, "the two smallest shapes only.");
  if (const int rc = fatools::parse(app, argc, argv); rc >= 0) return rc;
  fmt::print("{}\n", fa_build_info());
  std::string why;
  const bool gpu = gpu_usable(&why);
  if (!gpu) fmt::print("device: CPU (GPU not used: {})\n", why);
#ifdef FA_DEMO_CUDA
  if (gpu) {
    cudaDeviceProp prop;
    DEMO_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    fmt::print("device: {} (forward and backward on the GPU in bf16)\n", prop.name);
    std::vector<Shape> gpu_shapes = {{4, 16, 16, 1024, 64, false},  {2, 16, 16, 4096, 128, false},
                                     {2, 16, 16, 4096, 128, true}, {1, 16, 4, 8192, 128, true}};
    if (quick) gpu_shapes.resize(2);
    const fatools::Table gpu_table({{"GPU (b,hq,hkv,s,d)", 28, true}, {"causal", 7, true},
                                    {"fwd ms", 9}, {"bwd ms", 9}, {"fwd TFLOP/s", 11},
                                    {"bwd TFLOP/s", 11}, {"out err", 10}, {"grad err", 10}});
    fmt::print("\n{}", gpu_table.header());
    std::mt19937 grng(7);
    std::normal_distribution<float> gnd;
    bool gok = true;
    for (const Shape& s : gpu_shapes) {
      Buffers b;
      const size_t nq = size_t(s.batch * s.seqlen * s.heads_q * s.head_dim);
      const size_t nk = size_t(s.batch * s.seqlen * s.heads_kv * s.head_dim);
      for (auto* vec : {&b.q, &b.dout}) { vec->resize(nq); for (float& x : *vec) x = gnd(grng); }
      for (auto* vec : {&b.k, &b.v}) { vec->resize(nk); for (float& x : *vec) x = gnd(grng); }
      b.out.resize(nq);
      b.dq.resize(nq);
      b.dk.resize(nk);
      b.dv.resize(nk);
      b.lse.resize(size_t(s.batch * s.heads_q * s.seqlen));
      Result res{};
      try {
        res = run_gpu(s, b, 20);
      } catch (const fa::Error& e) {
        fmt::print("error: {}\n", e.what());
        return 1;
      }
      // Check the first batch entry against the CPU flash backend in fp32 on the same
      // (bf16-rounded) inputs.
      Buffers r;
      const long bq = long(nq / size_t(s.batch)), bk = long(nk / size_t(s.batch));
      r.q.assign(b.q.begin(), b.q.begin() + bq);
      r.k.assign(b.k.begin(), b.k.begin() + bk);
      r.v.assign(b.v.begin(), b.v.begin() + bk);
      r.dout.assign(b.dout.begin(), b.dout.begin() + bq);
      r.out.resize(r.q.size());
      r.dq.resize(r.q.size());
      r.dk.resize(r.k.size());
      r.dv.resize(r.k.size());
      r.lse.resize(size_t(s.heads_q * s.seqlen));
      Shape one = s;
      one.batch = 1;
      try {
        run_cpu(one, r, FA_BACKEND_FLASH);
      } catch (const fa::Error& e) {
        fmt::print("error: {}\n", e.what());
        return 1;
      }
      auto first = [](const std::vector<float>& x, long n) {
        return std::vector<float>(x.begin(), x.begin() + n);
      };
      const double out_err = max_diff(first(b.out, bq), r.out);
      // Gradients relative to each one's largest element: bf16 holds 8 bits of mantissa, and
      // dQ / dK are sums over thousands of bf16-rounded terms.
      const double grad_err = std::max({rel_err(first(b.dq, bq), r.dq), rel_err(first(b.dk, bk), r.dk),
                                        rel_err(first(b.dv, bk), r.dv)});
      const double flops = forward_flops(s);
      fmt::print("{}", gpu_table.row({shape_str(s), s.causal ? "yes" : "no", fatools::sig(res.fwd_ms),
                                      fatools::sig(res.bwd_ms), fatools::sig(flops / res.fwd_ms * 1e-9),
                                      fatools::sig(2.5 * flops / res.bwd_ms * 1e-9), err_str(out_err),
                                      err_str(grad_err)}));
      gok = gok && out_err < 2e-2 && grad_err < 2e-2;  // bf16: 2^-8 relative
    }
    fmt::print("{}: GPU bf16 forward and backward vs CPU flash (fp32 on the same bf16 inputs;\n"
               "out: max abs error; grad: max over dq, dk, dv of max abs error / max |ref|)\n\n",
               gok ? "PASS" : "FAIL");
    if (!gok) return 1;
  }
#endif
  std::vector<Shape> shapes = {{1, 4, 4, 128, 64, false},
                               {2, 8, 2, 256, 64, true},
                               {1, 8, 8, 1024, 64, false},
                               {1, 8, 8, 2048, 128, true}};
  if (quick) shapes.resize(2);
  const fatools::Table table({{"CPU (b,hq,hkv,s,d)", 28, true}, {"causal", 7, true}, {"fwd ms", 9},
                              {"bwd ms", 9}, {"fwd GFLOP/s", 11}, {"bwd GFLOP/s", 11},
                              {"max err", 10}});
  fmt::print("\n{}", table.header());
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
      fmt::print("error: {}\n", e.what());
      return 1;
    }
    res.max_err = std::max({max_diff(b.out, r.out), max_diff(b.lse, r.lse), max_diff(b.dq, r.dq),
                            max_diff(b.dk, r.dk), max_diff(b.dv, r.dv)});
    const double flops = forward_flops(s);
    fmt::print("{}", table.row({shape_str(s), s.causal ? "yes" : "no", fatools::sig(res.fwd_ms),
                                fatools::sig(res.bwd_ms), fatools::sig(flops / res.fwd_ms * 1e-6),
                                fatools::sig(2.5 * flops / res.bwd_ms * 1e-6), err_str(res.max_err)}));
    std::fflush(stdout);
    ok = ok && res.max_err < 1e-3;
  }
  fmt::print("\n{}: CPU flash backend vs fp64 reference (fp32 data), max error over out, lse, "
             "dq, dk, dv\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
