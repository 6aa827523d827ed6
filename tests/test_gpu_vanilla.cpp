// The vanilla (standard, materialising) CUDA backend against the fp64 CPU reference, forward and
// backward, with FlashAttention's accuracy rule: max |gpu - ref| <= 2 x max |naive - ref| + 1e-5
// (out, lse) and 3 x ... + 1e-4 (gradients), naive = the same-precision CPU computation (fp32
// arithmetic on the same inputs, P rounded to the 16-bit type). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_support.h"

namespace fa::test {
namespace {

// dtype x feature, with head dim, GQA ratio, lengths (odd, s_q != s_k, s_q > s_k so that causal
// rows are fully masked), layout and varlen rotating through their values.
std::vector<Case> vanilla_grid() {
  const fa_dtype dtypes[] = {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16};
  const int64_t dims[] = {20, 64, 128, 256};
  const int64_t lens[][2] = {{1, 1}, {113, 203}, {128, 128}, {299, 77}, {600, 1001}};
  constexpr int kFeatures = 7;
  std::vector<Case> cases;
  uint64_t n = 0;
  for (fa_dtype dt : dtypes)
    for (int feature = 0; feature < kFeatures; ++feature)
      for (int rep = 0; rep < 2; ++rep) {
        Case c;
        c.seed = ++n;
        c.dtype = dt;
        c.head_dim = dims[n % 4];
        c.heads_kv = 2;
        c.heads_q = (n % 2) ? 6 : 2;  // GQA 3 and 1
        c.batch = 2;
        const auto* len = lens[(n * 3) % 5];
        c.seqlen_q = len[0];
        c.seqlen_k = len[1];
        c.strided = (n % 3) == 0;
        if (feature == 1) c.causal = true;
        if (feature == 2) { c.window_left = 50; c.window_right = 7; }
        if (feature == 3) c.softcap = 5.f;  // small cap: the tanh derivative matters
        if (feature == 4) c.alibi = true;
        if (feature == 5) c.dropout_p = 0.17f;
        if (feature == 6) { c.causal = true; c.softcap = 10.f; c.alibi = true; c.dropout_p = 0.1f; }
        if (rep == 1) {  // packed varlen with empty sequences on either side
          c.lens_q = {int32_t(c.seqlen_q), 0, 37, 1};
          c.lens_k = {int32_t(c.seqlen_k), 9, 0, 130};
        }
        cases.push_back(c);
      }
  return cases;
}

class VanillaGpu : public ::testing::TestWithParam<Case> {};

TEST_P(VanillaGpu, ForwardAndBackwardMatchReference) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_VANILLA);
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  run_pass(dev.p, true);  // reads the GPU forward's out and lse
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, VanillaGpu, ::testing::ValuesIn(vanilla_grid()),
                         CaseTestName());

// The workspace query is the memory cost of standard attention: at least one fp32 score matrix
// per (batch, head) forward and two backward; a smaller workspace is refused before any write.
TEST(VanillaGpuWorkspace, ReportsScoreMatricesAndRefusesLess) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 3;
  c.heads_q = c.heads_kv = 4;
  c.seqlen_q = 300;
  c.seqlen_k = 500;
  c.head_dim = 64;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_VANILLA);
  size_t fwd = 0, bwd = 0;
  ASSERT_EQ(fa_forward_workspace_size(&dev.p, &fwd), FA_OK) << fa_last_error();
  ASSERT_EQ(fa_backward_workspace_size(&dev.p, &bwd), FA_OK) << fa_last_error();
  const size_t matrix = size_t(3 * 4 * 300 * 500) * sizeof(float);
  EXPECT_GE(fwd, matrix);
  EXPECT_GE(bwd, 2 * matrix);
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, fwd), cudaSuccess);
  EXPECT_EQ(fa_forward(&dev.p, ws, fwd - 1, nullptr), FA_ERROR_WORKSPACE);
  EXPECT_NE(std::string(fa_last_error()).find("workspace"), std::string::npos) << fa_last_error();
  cudaFree(ws);
  HostTensor after(pr.out.dtype(), pr.out.shape());
  after.poison();
  dev.out.copy_to(pr.out);
  EXPECT_TRUE(pr.out.bytes_equal(after)) << "a refused call wrote out";
#endif
}

}  // namespace
}  // namespace fa::test
