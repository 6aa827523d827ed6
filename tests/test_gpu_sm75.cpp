// The Turing family (cuda-sm75, src/cuda/kernels/sm75/) on whatever GPU runs the suite: forced
// through Tuning::sm75, which on a newer GPU runs Turing's instruction stream (m16n8k8,
// ldmatrix, register-staged loads) from a build whose FA_ARCHS has 75-virtual (compute_75 PTX,
// compiled by the driver; scripts/gpu-sm75.sh). Every case must be taken by cuda-sm75 (asserted
// through the registry) and match the fp64 reference by FlashAttention's rule, outputs poisoned:
// the fp16 cases of the GPU grid (tests/test_gpu.cpp: every head dim, causal, window, softcap,
// ALiBi, dropout, GQA / MQA, packed batches with empty sequences), head dims below their
// kernel's and one that is not a multiple of 8 (padded copies), negative scales and one-sided
// windows. bf16 is refused by name. The backward likewise (GpuSm75Bwd): the grid's fp16 cases up
// to d 128, forward and backward both on cuda-sm75, gradients by the rule (3x the naive error +
// 1e-4), deterministic cases included and repeated bit for bit (GpuSm75Deterministic); d > 128
// is refused by name.
// Skipped without a GPU, or in a build without sm75 code (FA_ARCHS has no 75 entry).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_support.h"

namespace fa::test {
namespace {

std::vector<Case> sm75_grid() {
  std::vector<Case> cases;
  for (const Case& c : gpu_grid())
    if (c.dtype == FA_DTYPE_FP16) cases.push_back(c);
  // Beyond the grid: head dims below their kernel's (40 on the d 64 kernel, 200 on d 224), one
  // that is not a multiple of 8 (36: zero-padded copies), a negative scale, a left-only window,
  // causal with a window, ALiBi with softcap, MQA.
  int n = 0;
  for (const int64_t d : {40, 36, 200, 128})
    for (int feature = 0; feature < 4; ++feature) {
      Case c;
      c.seed = uint64_t(7500 + n++);
      c.dtype = FA_DTYPE_FP16;
      c.head_dim = d;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = feature == 3 ? 1 : 2;
      c.seqlen_q = feature % 2 ? 113 : 300;
      c.seqlen_k = feature % 2 ? 203 : 77;
      c.pad = d % 8 == 0 ? 8 : 0;  // 16-byte rows where the kernels read the caller's tensors
      if (feature == 0) c.softmax_scale = -0.11f;
      if (feature == 1) c.window_left = 50;
      if (feature == 2) { c.causal = true; c.window_left = 64; }
      if (feature == 3) { c.alibi = true; c.softcap = 5.f; }
      cases.push_back(c);
    }
  return cases;
}

#ifdef FA_TEST_CUDA
Tuning sm75_on() {
  Tuning t;
  t.sm75 = true;
  return t;
}

// A short single-sequence call (40 queries, 56 keys) for the checks below.
Case short_case(fa_dtype dtype, int64_t head_dim) {
  Case c;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.seqlen_q = 40;
  c.seqlen_k = 56;
  c.pad = 8;
  return c;
}

#endif

// True, with the reason, where this machine or build cannot run cuda-sm75 with head_dim: no GPU,
// no kernel for the head dim, or no sm75 code in the build (the family's own refusal of a plain
// fp16 call says so). Any other refusal of that call is a failure (recorded), and skips too.
bool skip_without_sm75(int64_t head_dim, std::string* why) {
  if (skip_without_gpu(why) || skip_head_dim_not_built(head_dim, why)) return true;
#ifdef FA_TEST_CUDA
  Problem pr(short_case(FA_DTYPE_FP16, head_dim));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const std::string f = family_of(dev.p, Pass::Forward, sm75_on());
  if (f == "cuda-sm75") return false;
  *why = "cuda-sm75 refused a plain fp16 call: " + f;
  if (f.find("no sm75 code") == std::string::npos) ADD_FAILURE() << *why;
  return true;
#else
  return false;
#endif
}

#ifdef FA_TEST_CUDA
// Bytes of a device tensor that still hold DeviceProblem's 0xFF poison, against its size.
void expect_untouched(const DeviceTensor& t, HostTensor& h, const char* what) {
  const std::vector<unsigned char> bytes = t.bytes(h);
  size_t poisoned = 0;
  for (unsigned char x : bytes) poisoned += x == 0xFF;
  EXPECT_EQ(poisoned, bytes.size()) << what;
}
#endif

// As skip_without_sm75, for the backward: also a build without its kernels (FA_ARCHS has no 75
// entry, or -DFA_CUDA_BACKWARD=OFF), and head dims above its 128.
bool skip_without_sm75_bwd(int64_t head_dim, std::string* why) {
  if (skip_without_sm75(head_dim, why)) return true;
#ifdef FA_TEST_CUDA
  if (head_dim > 128) {
    *why = "cuda-sm75's backward serves head dims up to 128";
    return true;
  }
  Problem pr(short_case(FA_DTYPE_FP16, head_dim));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const std::string f = family_of(dev.p, Pass::Backward, sm75_on());
  if (f == "cuda-sm75") return false;
  *why = "cuda-sm75 refused a plain fp16 backward: " + f;
  if (f.find("no sm75 backward kernels") == std::string::npos) ADD_FAILURE() << *why;
  return true;
#else
  return false;
#endif
}

class GpuSm75 : public ::testing::TestWithParam<Case> {};

TEST_P(GpuSm75, ForwardMatchesReference) {
  std::string why;
  if (skip_without_sm75(GetParam().head_dim, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const Tuning t = sm75_on();
  ASSERT_EQ(family_of(dev.p, Pass::Forward, t), "cuda-sm75");
  run_pass(dev.p, false, &t);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, false);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuSm75, ::testing::ValuesIn(sm75_grid()), CaseTestName());

// The backward's grid: sm75_grid's cases up to d 128 (the grid's deterministic and dropout
// cases among them).
std::vector<Case> sm75_bwd_grid() {
  std::vector<Case> cases;
  for (const Case& c : sm75_grid())
    if (c.head_dim <= 128) cases.push_back(c);
  return cases;
}

class GpuSm75Bwd : public ::testing::TestWithParam<Case> {};

TEST_P(GpuSm75Bwd, GradientsMatchReference) {
  std::string why;
  if (skip_without_sm75_bwd(GetParam().head_dim, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const Tuning t = sm75_on();
  const std::string f = family_of(dev.p, Pass::Backward, t);
  // A packed backward on a Turing device is refused (its cu_seqlens sanitizer has no sm_75 code).
  if (f != "cuda-sm75" && GetParam().lens_q.size() > 0 && fa::cuda_device_props(0).major < 8)
    GTEST_SKIP() << f;
  ASSERT_EQ(f, "cuda-sm75");
  run_pass(dev.p, false, &t);
  if (HasFatalFailure()) return;
  run_pass(dev.p, true, &t);  // reads the sm75 forward's out and lse
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuSm75Bwd, ::testing::ValuesIn(sm75_bwd_grid()), CaseTestName());

// Deterministic mode: 20 backwards of a causal GQA call (several key tiles add into each dQ
// tile, in an order the semaphores fix) give bit-identical dq, dk, dv, which pass the rule; at
// each kernel's key tile (64 keys at d 64, 32 at d 128).
TEST(GpuSm75Deterministic, RepeatedBackwardsAreBitIdentical) {
  int ran = 0;
  for (const int64_t d : {64, 128}) {
    std::string why;
    if (skip_without_sm75_bwd(d, &why)) continue;
#ifdef FA_TEST_CUDA
    SCOPED_TRACE("d" + std::to_string(d));
    Case c;
    c.dtype = FA_DTYPE_FP16;
    c.head_dim = d;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seqlen_q = 300;
    c.seqlen_k = 203;
    c.causal = true;
    c.deterministic = true;
    c.pad = 8;
    c.seed = uint64_t(7600 + d);
    Problem pr(c);
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    const Tuning t = sm75_on();
    ASSERT_EQ(family_of(dev.p, Pass::Backward, t), "cuda-sm75");
    run_pass(dev.p, false, &t);
    run_pass(dev.p, true, &t);
    if (HasFatalFailure()) return;
    expect_device_results(pr, dev, true);
    const auto dq0 = dev.dq.bytes(pr.dq), dk0 = dev.dk.bytes(pr.dk), dv0 = dev.dv.bytes(pr.dv);
    for (int i = 0; i < 20; ++i) {
      run_pass(dev.p, true, &t);
      if (HasFatalFailure()) return;
      ASSERT_TRUE(dev.dq.bytes(pr.dq) == dq0) << "dQ, run " << i;
      ASSERT_TRUE(dev.dk.bytes(pr.dk) == dk0) << "dK, run " << i;
      ASSERT_TRUE(dev.dv.bytes(pr.dv) == dv0) << "dV, run " << i;
    }
    ++ran;
#endif
  }
  if (ran == 0) GTEST_SKIP() << "no cuda-sm75 backward for d 64 or d 128 here";
}

// bf16 (and fp32) are refused by the family, by name and dtype, and with Tuning::sm75 no other
// family runs the call in its place; out keeps its poison. A backward above d 128 is refused by
// name, its gradients untouched.
TEST(GpuSm75Refusals, NonFp16AndWideBackwardAreRefusedByName) {
  std::string why;
  if (skip_without_sm75(64, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  const Tuning t = sm75_on();
  for (const fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP32}) {
    Problem pr(short_case(dt, 64));
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    const std::string f = family_of(dev.p, Pass::Forward, t);
    EXPECT_NE(f.find("cuda-sm75"), std::string::npos) << f;
    EXPECT_NE(f.find(dt == FA_DTYPE_BF16 ? "bf16" : "fp32"), std::string::npos) << f;
    size_t bytes = 0;
    EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Forward, t, &bytes), FA_ERROR_UNSUPPORTED);
    EXPECT_EQ(internal::run(&dev.p, Pass::Forward, t, nullptr, 0, nullptr), FA_ERROR_UNSUPPORTED);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_untouched(dev.out, pr.out, "a refused call wrote out");
  }
  if (skip_head_dim_not_built(160, &why)) return;
  Problem pr(short_case(FA_DTYPE_FP16, 160));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const std::string f = family_of(dev.p, Pass::Backward, t);
  EXPECT_NE(f.find("cuda-sm75: head_dim=160"), std::string::npos) << f;
  EXPECT_NE(f.find("up to 128"), std::string::npos) << f;
  EXPECT_EQ(internal::run(&dev.p, Pass::Backward, t, nullptr, 0, nullptr), FA_ERROR_UNSUPPORTED);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_untouched(dev.dq, pr.dq, "a refused backward wrote dq");
  expect_untouched(dev.dk, pr.dk, "a refused backward wrote dk");
#endif
}

// The LSE-less call (lse.data = NULL) gives the same out bytes and writes no LSE.
TEST(GpuSm75Lse, NullLseGivesTheSameOut) {
  std::string why;
  if (skip_without_sm75(128, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = FA_DTYPE_FP16;
  c.batch = 3;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.seqlen_q = 131;
  c.seqlen_k = 203;
  c.causal = true;
  c.lens_q = {131, 0, 57};
  c.lens_k = {203, 9, 0};
  c.pad = 8;
  c.seed = 7575;
  Problem pr(c);
  DeviceProblem with(pr, FA_BACKEND_AUTO), without(pr, FA_BACKEND_AUTO);
  without.p.lse.data = nullptr;
  const Tuning t = sm75_on();
  run_pass(with.p, false, &t);
  run_pass(without.p, false, &t);
  if (HasFatalFailure()) return;
  EXPECT_EQ(with.out.bytes(pr.out), without.out.bytes(pr.out));
  expect_untouched(without.lse, pr.lse, "the LSE tensor not passed was written");
  expect_device_results(pr, with, false);
#endif
}

}  // namespace
}  // namespace fa::test
