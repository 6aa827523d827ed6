// attn_bias and dbias (fa_params 0.4, issue 31) on CUDA tensors: cuda-sm80 reads them (its bias
// kernels, forward and backward, with and without dropout: sm80/fwd_launch.cuh, bwd_launch.cuh).
//
// - the CPU bias grid (bias_cases.h: every bias dtype and shape, fully-masked rows, with causal,
//   windows, softcap, ALiBi, dropout, GQA, packed batches, strides) in fp16 / bf16, asserted to
//   run cuda-sm80 (on Hopper too, where cuda-sm90 refuses the bias) and to match the fp64
//   reference by FlashAttention's rule, outputs poisoned: the forward, and the backward with
//   dq, dk, dv and dbias (fp32 or the bias's dtype; full, or summed over batch, heads, queries,
//   keys) where the bias is not a mask;
// - a family without the bias (cuda-vanilla) refuses it by name, forward and backward, and
//   writes nothing.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "bias_cases.h"
#include "gpu_support.h"

namespace fa::test {
namespace {

#ifdef FA_TEST_CUDA

// The CPU grid with 16-bit inputs (the CUDA kernels') and CUDA-aligned row padding; dbias where
// the CPU grid asks for it (every bias that is not a mask) when with_dbias.
std::vector<Case> gpu_grid(bool with_dbias = false) {
  std::vector<Case> cases = bias::grid();
  for (Case& c : cases) {
    if (c.dtype == FA_DTYPE_FP32) c.dtype = c.seed % 2 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
    c.dbias = c.dbias && with_dbias;
    c.pad = 8;  // row strides stay multiples of 8 (the CUDA kernels move 16-byte chunks)
  }
  return cases;
}

// Longer sequences than the CPU grid's (several key and query tiles of the backward, odd
// lengths), each dbias reduction (full, summed over batch, heads, queries, keys, both), every
// bias dtype, with causal, dropout, GQA and packed batches.
std::vector<Case> gpu_bwd_grid() {
  using bias::Shape;
  const Shape shapes[] = {Shape::Full,   Shape::BroadcastBatch, Shape::BroadcastHeads,
                          Shape::BroadcastQueries, Shape::Shared, Shape::KeyPadding};
  const int bias_dtypes[] = {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_BOOL};
  const int64_t lens[][2] = {{300, 517}, {517, 300}, {129, 129}, {1, 700}};
  std::vector<Case> cases;
  uint64_t n = 0;
  for (int bt : bias_dtypes)
    for (Shape s : shapes) {
      Case c;
      c.seed = 1000 + ++n;
      c.bias_dtype = bt;
      bias::set_shape(c, s);
      if (n % 7 == 3) c.bias_full[3] = false;  // summed over keys too
      c.dtype = n % 2 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
      c.head_dim = n % 3 == 0 ? 128 : 64;
      c.batch = 2;
      c.heads_kv = 2;
      c.heads_q = n % 2 ? 4 : 2;
      c.seqlen_q = lens[n % 4][0];
      c.seqlen_k = lens[n % 4][1];
      c.pad = 8;
      c.strided = n % 5 == 1;
      c.bias_empty_rows = n % 3 == 2;
      c.dbias = !c.bias_is_mask();
      if (c.dbias && n % 2 == 1) c.dbias_dtype = bt;  // full shapes: stores in fp16 / bf16
      c.causal = n % 4 == 1;
      if (n % 5 == 2) c.dropout_p = 0.17f;
      if (n % 6 == 4) {
        c.lens_q = {int32_t(c.seqlen_q), 0, 77, 1};
        c.lens_k = {int32_t(c.seqlen_k), 5, 0, 130};
      }
      cases.push_back(c);
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

// The forward, then the backward with dbias (poisoned) where the case asks for it: both on
// cuda-sm80, every gradient by the rule (dbias too: 3x the naive error + 1e-4).
void expect_backward(const Case& c) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(c.head_dim, &why)) GTEST_SKIP() << why;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  std::unique_ptr<DeviceTensor> dbias;
  if (c.dbias) {
    dbias = std::make_unique<DeviceTensor>(pr.dbias, true);
    dev.p.dbias = dbias->view();
  }
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  const Tuning t{};
  EXPECT_EQ(family_of(dev.p, Pass::Backward, t), "cuda-sm80");
  run_pass(dev.p, false, &t);
  if (::testing::Test::HasFatalFailure()) return;
  run_pass(dev.p, true, &t);
  if (::testing::Test::HasFatalFailure()) return;
  // expect_device_results' comparison, with dbias's added.
  dev.out.copy_to(pr.out);
  dev.lse.copy_to(pr.lse);
  dev.dq.copy_to(pr.dq);
  dev.dk.copy_to(pr.dk);
  dev.dv.copy_to(pr.dv);
  if (dbias) dbias->copy_to(pr.dbias);
  const Dense got = outputs(pr, true);
  const Dense ref = reference(pr, false, true);
  const Dense naive = reference(pr, true, true, /*round_p=*/true);
  expect_rules(got, ref, naive, true);
  if (c.dbias) {
    ASSERT_EQ(got.dbias.size(), ref.dbias.size());
    expect_rule("dbias", got.dbias, ref.dbias, naive.dbias, 3, 1e-4);
  }
}

class GpuBiasBwd : public ::testing::TestWithParam<Case> {};

TEST_P(GpuBiasBwd, BackwardMatchesReferenceOnSm80) { expect_backward(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Grid, GpuBiasBwd, ::testing::ValuesIn(gpu_grid(true)), CaseTestName());
INSTANTIATE_TEST_SUITE_P(Long, GpuBiasBwd, ::testing::ValuesIn(gpu_bwd_grid()), CaseTestName());

// A forward and a backward with a bias on cuda-vanilla (FA_BACKEND_VANILLA), which does not read
// it, are refused naming attn_bias; out and the gradients keep their poison.
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

  DeviceProblem dev(pr, FA_BACKEND_VANILLA);
  const auto dq0 = dev.dq.bytes(pr.dq);
  EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Backward, t, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("attn_bias"), std::string::npos) << fa_last_error();
  EXPECT_EQ(fa_backward(&dev.p, nullptr, 0, nullptr), FA_ERROR_UNSUPPORTED);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(dev.dq.bytes(pr.dq), dq0) << "a refused backward wrote dq";
}

// The backward indexes a step's bias tile in 32 bits (sm80::bwd_bias_offsets_fit): a key stride
// of 2^25 elements is refused at dispatch, naming attn_bias, before anything is read (the view
// is never dereferenced); the forward takes it.
TEST(GpuBiasRefusal, HugeBiasStridesRefusedInTheBackward) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.head_dim = 64;
  c.bias_dtype = FA_DTYPE_FP32;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  dev.p.attn_bias.stride[3] = int64_t(1) << 25;
  const Tuning t{};
  size_t bytes = 0;
  EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Forward, t, &bytes), FA_OK) << fa_last_error();
  EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Backward, t, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("attn_bias"), std::string::npos) << fa_last_error();
}

#else
TEST(GpuBias, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
