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
#include <string>
#include <vector>

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
  if (gpu_usable(&why)) {
    std::printf("device: CUDA GPU 0\n");
  } else {
    std::printf("device: CPU (GPU not used: %s)\n", why.c_str());
  }
  // The GPU path lands with the CUDA kernels; until then every shape runs on the CPU backend.
  std::vector<Shape> shapes = {{1, 4, 4, 128, 64, false},
                               {2, 8, 2, 256, 64, true},
                               {1, 8, 8, 1024, 64, false},
                               {1, 8, 8, 2048, 128, true}};
  if (quick) shapes.resize(2);
  std::printf("\n%-28s %-9s %10s %10s %10s %10s %12s\n", "shape (b,hq,hkv,s,d)", "causal",
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
    const double flops = 4.0 * double(s.batch * s.heads_q) * double(s.seqlen) * double(s.seqlen) *
                         double(s.head_dim) * (s.causal ? 0.5 : 1.0);
    char shape[64];
    std::snprintf(shape, sizeof shape, "(%lld,%lld,%lld,%lld,%lld)", (long long)s.batch,
                  (long long)s.heads_q, (long long)s.heads_kv, (long long)s.seqlen,
                  (long long)s.head_dim);
    std::printf("%-28s %-9s %10.2f %10.2f %10.2f %10.2f %12.2e\n", shape, s.causal ? "yes" : "no",
                res.fwd_ms, res.bwd_ms, flops / res.fwd_ms * 1e-6, 2.5 * flops / res.bwd_ms * 1e-6,
                res.max_err);
    ok = ok && res.max_err < 1e-3;
  }
  std::printf("\n%s: CPU flash backend vs fp64 reference (fp32 data), max error over out, lse, "
              "dq, dk, dv\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
