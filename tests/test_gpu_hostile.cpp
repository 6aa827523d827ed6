// Hostile device-side data (issue 23): cu_seqlens of CUDA tensors live in device memory, which
// the host does not read unless the caller asks (check_inputs). Whatever they hold, the kernels
// must stay inside the tensors and the workspace: wrong numbers at worst, never an access out
// of bounds, a fault that poisons the CUDA context, or a hang (run these under compute-sanitizer
// memcheck: scripts/gpu-check.sh does). With check_inputs the same arrays are refused with
// FA_ERROR_CU_SEQLENS before anything is written. GPU tests: skipped without a CUDA device.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu_support.h"

#ifdef FA_TEST_CUDA
#include "cuda/kernels/varlen/sanitize.h"
#endif

namespace fa::test {
namespace {

#ifdef FA_TEST_CUDA

// A valid packed problem of 3 sequences over 200 query and 200 key tokens (max_seqlen 70 / 90),
// bf16, GQA 4 / 2, d 64; the hostile arrays below replace its cu_seqlens on the device.
Case hostile_base(bool deterministic) {
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 3;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.lens_q = {60, 70, 70};
  c.lens_k = {90, 20, 90};
  c.deterministic = deterministic;
  c.seed = 2323;
  return c;
}

struct HostileArrays {
  const char* name;
  std::vector<int32_t> cu_q, cu_k;  // batch + 1 = 4 entries each; empty: keep the valid one
};

const std::vector<HostileArrays>& hostile_arrays() {
  static const std::vector<HostileArrays> v = {
      {"past_the_end", {0, 100, 50000, 60000}, {0, 100, 50000, 200}},
      {"decreasing", {0, 150, 20, 200}, {0, 190, 10, 200}},
      {"negative", {0, -50, -1000, 200}, {-7, -1, 5, 200}},
      {"int32_extremes", {INT_MIN, INT_MAX, 0, INT_MAX}, {INT_MAX, INT_MIN, INT_MAX, INT_MIN}},
      {"longer_than_max_seqlen", {0, 10, 20, 200}, {0, 5, 15, 200}},  // 180 > max 70 / 90
      {"q_only_past_the_end", {0, 199, 400, 100000}, {}},
      {"k_only_decreasing", {}, {0, 200, 0, 200}},
  };
  return v;
}

void upload(const DeviceProblem& dev, const HostileArrays& h) {
  if (!h.cu_q.empty()) {
    ASSERT_EQ(cudaMemcpy(dev.p.cu_seqlens_q.data, h.cu_q.data(), h.cu_q.size() * 4,
                         cudaMemcpyHostToDevice), cudaSuccess);
  }
  if (!h.cu_k.empty()) {
    ASSERT_EQ(cudaMemcpy(dev.p.cu_seqlens_k.data, h.cu_k.data(), h.cu_k.size() * 4,
                         cudaMemcpyHostToDevice), cudaSuccess);
  }
}

// One pass with a workspace of the queried size (the query must accept: it reads no device
// memory), whatever the run answers: its status, its message in *msg; the device must be
// healthy afterwards (a fatal failure otherwise).
fa_status run_any(const fa_params& p, bool backward, std::string* msg) {
  size_t bytes = 0;
  const fa_status q =
      backward ? fa_backward_workspace_size(&p, &bytes) : fa_forward_workspace_size(&p, &bytes);
  EXPECT_EQ(q, FA_OK) << fa_last_error();
  if (q != FA_OK) return q;
  void* ws = nullptr;
  if (bytes && cudaMalloc(&ws, bytes) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc(" << bytes << ")";
    return FA_ERROR_CUDA;
  }
  const fa_status st =
      backward ? fa_backward(&p, ws, bytes, nullptr) : fa_forward(&p, ws, bytes, nullptr);
  *msg = fa_last_error();
  const cudaError_t sync = cudaDeviceSynchronize();
  cudaFree(ws);
  [&] {
    ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }();
  return st;
}

// Two runs of one problem left the same bytes in out, lse, dq, dk and dv (pr: their host shapes).
void expect_same_bytes(const DeviceProblem& a, const DeviceProblem& b, Problem& pr) {
  EXPECT_EQ(a.out.bytes(pr.out), b.out.bytes(pr.out)) << "out";
  EXPECT_EQ(a.lse.bytes(pr.lse), b.lse.bytes(pr.lse)) << "lse";
  EXPECT_EQ(a.dq.bytes(pr.dq), b.dq.bytes(pr.dq)) << "dq";
  EXPECT_EQ(a.dk.bytes(pr.dk), b.dk.bytes(pr.dk)) << "dk";
  EXPECT_EQ(a.dv.bytes(pr.dv), b.dv.bytes(pr.dv)) << "dv";
}

bool all_bytes_are(const std::vector<unsigned char>& b, unsigned char x) {
  for (unsigned char c : b)
    if (c != x) return false;
  return true;
}

class GpuHostileCuSeqlens : public ::testing::TestWithParam<HostileArrays> {};

// Every CUDA family, forward and backward (default and deterministic mode), accepts the call
// (the vanilla family reads the lengths back and may refuse them instead) and leaves the device
// healthy; a valid call afterwards on the same context still gives correct results.
TEST_P(GpuHostileCuSeqlens, KernelsStayInBounds) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  const HostileArrays& h = GetParam();
  for (const bool deterministic : {false, true})
    for (const fa_backend backend : {FA_BACKEND_AUTO, FA_BACKEND_VANILLA}) {
      SCOPED_TRACE(std::string(backend == FA_BACKEND_AUTO ? "flash" : "vanilla") +
                   (deterministic ? ", deterministic" : ""));
      Problem pr(hostile_base(deterministic));
      DeviceProblem dev(pr, backend);
      if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
      upload(dev, h);
      for (const bool backward : {false, true}) {
        std::string msg;
        const fa_status st = run_any(dev.p, backward, &msg);
        if (HasFatalFailure()) return;
        if (backend == FA_BACKEND_VANILLA && st == FA_ERROR_CU_SEQLENS) continue;
        EXPECT_EQ(st, FA_OK) << msg;
      }
    }
  // The context is still usable: a valid problem on it passes the accuracy rule.
  Problem pr(hostile_base(false));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  run_pass(dev.p, false);
  run_pass(dev.p, true);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
}

// check_inputs: the same arrays are refused by the runs with FA_ERROR_CU_SEQLENS naming the
// array, and the outputs keep their poison; the queries (which read no device memory) accept.
TEST_P(GpuHostileCuSeqlens, CheckedModeRefusesBeforeWriting) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  const HostileArrays& h = GetParam();
  Problem pr(hostile_base(false));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  upload(dev, h);
  dev.p.check_inputs = 1;
  for (const bool backward : {false, true}) {
    std::string msg;
    const fa_status st = run_any(dev.p, backward, &msg);
    if (HasFatalFailure()) return;
    EXPECT_EQ(st, FA_ERROR_CU_SEQLENS) << msg;
    EXPECT_NE(msg.find(h.cu_q.empty() ? "cu_seqlens_k" : "cu_seqlens_q"), std::string::npos)
        << msg;
  }
  EXPECT_TRUE(all_bytes_are(dev.out.bytes(pr.out), 0xFF));
  EXPECT_TRUE(all_bytes_are(dev.lse.bytes(pr.lse), 0xFF));
  EXPECT_TRUE(all_bytes_are(dev.dq.bytes(pr.dq), 0xFF));
  EXPECT_TRUE(all_bytes_are(dev.dk.bytes(pr.dk), 0xFF));
  EXPECT_TRUE(all_bytes_are(dev.dv.bytes(pr.dv), 0xFF));
}

INSTANTIATE_TEST_SUITE_P(Arrays, GpuHostileCuSeqlens, ::testing::ValuesIn(hostile_arrays()),
                         [](const auto& info) { return std::string(info.param.name); });

// check_inputs on valid arrays changes nothing: the same bytes as without it (deterministic
// backward), and the results pass the rule.
TEST(GpuHostile, CheckedModeOnValidArraysGivesTheSameBytes) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Problem pr(hostile_base(true));
  DeviceProblem plain(pr, FA_BACKEND_AUTO), checked(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(plain.p, &why)) GTEST_SKIP() << why;
  checked.p.check_inputs = 1;
  for (const bool backward : {false, true}) {
    run_pass(plain.p, backward);
    run_pass(checked.p, backward);
  }
  if (HasFatalFailure()) return;
  expect_same_bytes(plain, checked, pr);
  expect_device_results(pr, checked, true);
}

// A max_seqlen far above the token count (2^62) is tightened to it: the same bytes as the true
// bound, forward and deterministic backward (before, it sized the launch grid and workspace).
TEST(GpuHostile, HugeMaxSeqlenGivesTheSameBytes) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Problem pr(hostile_base(true));
  DeviceProblem honest(pr, FA_BACKEND_AUTO), huge(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(honest.p, &why)) GTEST_SKIP() << why;
  huge.p.max_seqlen_q = huge.p.max_seqlen_k = int64_t(1) << 62;
  size_t a = 0, b = 0;
  ASSERT_EQ(fa_backward_workspace_size(&honest.p, &a), FA_OK);
  ASSERT_EQ(fa_backward_workspace_size(&huge.p, &b), FA_OK);
  EXPECT_LE(b, a + a / 2) << "the workspace follows the tokens, not the claim";
  for (const bool backward : {false, true}) {
    run_pass(honest.p, backward);
    run_pass(huge.p, backward);
  }
  if (HasFatalFailure()) return;
  expect_same_bytes(honest, huge, pr);
}

// The sanitize kernel (cuda/kernels/varlen/sanitize.h) gives exactly its sequential definition,
// on the hostile arrays above and on long random ones (up to the 65535-sequence limit: 64
// entries a thread).
TEST(GpuHostile, SanitizeKernelMatchesDefinition) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  std::vector<std::vector<int32_t>> arrays;
  for (const auto& h : hostile_arrays())
    if (!h.cu_q.empty()) arrays.push_back(h.cu_q);
  std::mt19937 rng(99);
  for (const int n : {2, 1025, 4097, 65536}) {
    std::vector<int32_t> c(static_cast<size_t>(n));
    for (auto& x : c) x = int32_t(rng() % 3000) - 100;
    arrays.push_back(c);
  }
  for (const auto& c : arrays) {
    const int64_t n = int64_t(c.size());
    int32_t* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 4 * 4 * size_t(n)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d, c.data(), 4 * size_t(n), cudaMemcpyHostToDevice), cudaSuccess);
    // k: the same array reversed, with its own bounds.
    std::vector<int32_t> ck(c.rbegin(), c.rend());
    ASSERT_EQ(cudaMemcpy(d + n, ck.data(), 4 * size_t(n), cudaMemcpyHostToDevice), cudaSuccess);
    Params p;
    p.batch = n - 1;
    p.cu_seqlens_q = d;
    p.cu_seqlens_k = d + n;
    p.total_q = 200;
    p.total_k = 2500;
    p.seqlen_q = 70;
    p.seqlen_k = 900;
    cuda::sanitize_cu_seqlens(p, d + 2 * n, d + 3 * n, nullptr);
    std::vector<int32_t> got(size_t(2 * n));
    ASSERT_EQ(cudaMemcpy(got.data(), d + 2 * n, 8 * size_t(n), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(d);
    std::vector<int32_t> want(size_t(2 * n));
    cuda::sanitize_cu_seqlens_reference(c.data(), want.data(), n, 200, 70);
    cuda::sanitize_cu_seqlens_reference(ck.data(), want.data() + n, n, 2500, 900);
    EXPECT_EQ(got, want) << "n=" << n;
  }
}

// check_inputs waits for the stream, which a graph capture forbids: refused with
// FA_ERROR_UNSUPPORTED (and the capture still ends cleanly).
TEST(GpuHostile, CheckedModeIsRefusedWhileCapturing) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Problem pr(hostile_base(false));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  dev.p.check_inputs = 1;
  // A workspace of the size asked for (the sm90 family's tile scheduler needs one), so that the
  // capture is the only thing refused.
  size_t ws_bytes = 0;
  ASSERT_EQ(fa_forward_workspace_size(&dev.p, &ws_bytes), FA_OK) << fa_last_error();
  void* ws = nullptr;
  if (ws_bytes) ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const fa_status st = fa_forward(&dev.p, ws, ws_bytes, s);
  const std::string msg = fa_last_error();
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  if (g) cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(ws);
  EXPECT_EQ(st, FA_ERROR_UNSUPPORTED) << msg;
  EXPECT_NE(msg.find("capturing a CUDA graph"), std::string::npos) << msg;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

#else

TEST(GpuHostile, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }

#endif

}  // namespace
}  // namespace fa::test
