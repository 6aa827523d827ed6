// attn_bias (fa_params 0.4, issue 31) on CUDA tensors: the cuda-sm80 forward reads it (its bias
// kernels, with and without dropout: sm80/fwd_launch.cuh).
//
// - the CPU bias grid (bias_cases.h: every bias dtype and shape, fully-masked rows, with causal,
//   windows, softcap, ALiBi, dropout, GQA, packed batches, strides) in fp16 / bf16, asserted to
//   run cuda-sm80 and to match the fp64 reference by FlashAttention's rule, outputs poisoned;
// - a forward on a family without it (cuda-vanilla) and every backward are refused by name and
//   write nothing.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bias_cases.h"
#include "gpu_support.h"

namespace fa::test {
namespace {

#ifdef FA_TEST_CUDA

// The CPU grid with 16-bit inputs (the CUDA kernels'), CUDA-aligned row padding and no dbias (no
// CUDA backward reads the bias yet).
std::vector<Case> gpu_grid() {
  std::vector<Case> cases = bias::grid();
  for (Case& c : cases) {
    if (c.dtype == FA_DTYPE_FP32) c.dtype = c.seed % 2 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
    c.dbias = false;
    c.pad = 8;  // row strides stay multiples of 8 (the CUDA kernels move 16-byte chunks)
  }
  return cases;
}

class GpuBias : public ::testing::TestWithParam<Case> {};

TEST_P(GpuBias, ForwardMatchesReferenceOnSm80) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const Tuning t{};
  EXPECT_EQ(family_of(dev.p, Pass::Forward, t), "cuda-sm80");
  run_pass(dev.p, false, &t);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, false);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuBias, ::testing::ValuesIn(gpu_grid()), CaseTestName());

// A forward with a bias on cuda-vanilla (FA_BACKEND_VANILLA), which does not read it, is refused
// naming attn_bias, and so is a backward with one on any family; out and the gradients keep
// their poison.
TEST(GpuBiasRefusal, RefusedByNameAndNothingWritten) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.head_dim = 64;
  c.bias_dtype = FA_DTYPE_BOOL;
  Problem pr(c);
  const Tuning t{};
  size_t bytes = 0;
  {
    DeviceProblem vanilla(pr, FA_BACKEND_VANILLA);
    const auto out0 = vanilla.out.bytes(pr.out);
    EXPECT_EQ(internal::workspace_size(&vanilla.p, Pass::Forward, t, &bytes),
              FA_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(fa_last_error()).find("attn_bias"), std::string::npos)
        << fa_last_error();
    EXPECT_EQ(internal::run(&vanilla.p, Pass::Forward, t, nullptr, 0, nullptr),
              FA_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(fa_last_error()).find("attn_bias"), std::string::npos)
        << fa_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(vanilla.out.bytes(pr.out), out0) << "a refused forward wrote out";
  }

  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const auto dq0 = dev.dq.bytes(pr.dq);
  EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Backward, t, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("attn_bias"), std::string::npos) << fa_last_error();
  EXPECT_EQ(fa_backward(&dev.p, nullptr, 0, nullptr), FA_ERROR_UNSUPPORTED);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(dev.dq.bytes(pr.dq), dq0) << "a refused backward wrote dq";
}

#else
TEST(GpuBias, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
