// GPU dropout and the deterministic backward (issue 4). Like every GPU test these skip without a
// CUDA device or build, and in a build without backward kernels the backward ones skip too.
//
// Dropout's keep-mask is exposed exactly, then compared with the CPU flash backend's:
//   forward:  q = 0 makes every probability 1 / seqlen_k; with v = the identity (seqlen_k =
//             head_dim), out[i][j] = keep(i, j) / (seqlen_k (1 - p)): zero exactly where dropped;
//   backward: with dout row i = e_i (seqlen_q = head_dim), dv[j][i] = sum over the query heads
//             of the group of keep(i, j) / (seqlen_k (1 - p)): the kept count, times a constant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_support.h"

namespace fa::test {
namespace {

// Element (b, s, h, c) of a logical (batch, seq, heads, head_dim) tensor at flat index i.
struct Index4 {
  int64_t s, h, c;
};
Index4 index4(const HostTensor& t, int64_t i) {
  const auto& sh = t.shape();
  return {(i / (sh[3] * sh[2])) % sh[1], (i / sh[3]) % sh[2], i % sh[3]};
}

// q = 0 (every probability 1 / seqlen_k) and t(b, s, h, c) = [s == c]: unit rows that expose
// the keep-mask in out (t = v) or in dv (t = dout).
void expose_mask(Problem& pr, HostTensor& t) {
  for (int64_t i = 0; i < pr.q.numel(); ++i) pr.q.set(i, 0.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const Index4 x = index4(t, i);
    t.set(i, x.s == x.c ? 1.0 : 0.0);
  }
}

Case dropout_case(int64_t d, int64_t seqlen_q, int64_t seqlen_k) {
  Case c;
  c.dtype = FA_DTYPE_FP16;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  c.head_dim = d;
  c.dropout_p = 0.17f;
  c.pad = 8;
  c.seed = uint64_t(d) * 31 + uint64_t(seqlen_q);
  return c;
}

class GpuDropoutForward : public ::testing::TestWithParam<int64_t> {};

TEST_P(GpuDropoutForward, MaskEqualsCpuBitForBit) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam(), &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  const int64_t d = GetParam();
  const Case c = dropout_case(d, 300, d);
  Problem gpu(c), cpu(c);
  for (Problem* pr : {&gpu, &cpu}) expose_mask(*pr, pr->v);
  DeviceProblem dev(gpu, FA_BACKEND_AUTO);
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  dev.out.copy_to(gpu.out);
  run_forward(cpu, FA_BACKEND_FLASH);

  const double kept_value = 1.0 / (double(c.seqlen_k) * (1.0 - c.dropout_p));
  int64_t kept = 0, mismatched = 0, bad_value = 0;
  for (int64_t i = 0; i < gpu.out.numel(); ++i) {
    const double g = gpu.out.get(i);
    const bool kg = g != 0.0, kc = cpu.out.get(i) != 0.0;
    kept += kg;
    mismatched += kg != kc;
    bad_value += kg && std::fabs(g - kept_value) > 2e-3 * kept_value;  // fp16 rounding
  }
  EXPECT_EQ(mismatched, 0) << "of " << gpu.out.numel();
  EXPECT_EQ(bad_value, 0);
  EXPECT_NEAR(double(kept) / double(gpu.out.numel()), 1.0 - c.dropout_p, 0.01);
#endif
}

// 32 and 64: one key tile; 128 and 256: four (32 and 64 keys a tile), two pipelines.
INSTANTIATE_TEST_SUITE_P(HeadDims, GpuDropoutForward, ::testing::Values(32, 64, 128, 256),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "d" + std::to_string(info.param);
                         });

class GpuDropoutBackward : public ::testing::TestWithParam<int64_t> {};

TEST_P(GpuDropoutBackward, MaskEqualsCpuBitForBit) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam(), &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  const int64_t d = GetParam();
  const Case c = dropout_case(d, d, 300);
  Problem gpu(c), cpu(c);
  for (Problem* pr : {&gpu, &cpu}) expose_mask(*pr, pr->dout);
  DeviceProblem dev(gpu, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  run_pass(dev.p, true);
  if (HasFatalFailure()) return;
  dev.dv.copy_to(gpu.dv);
  run_forward(cpu, FA_BACKEND_FLASH);
  run_backward(cpu, FA_BACKEND_FLASH);

  // dv / unit = the number of the group's query heads that kept (i, j).
  const double unit = 1.0 / (double(c.seqlen_k) * (1.0 - c.dropout_p));
  const int64_t group = c.heads_q / c.heads_kv;
  int64_t kept = 0, mismatched = 0, off_grid = 0;
  for (int64_t i = 0; i < gpu.dv.numel(); ++i) {
    const double g = gpu.dv.get(i) / unit, r = cpu.dv.get(i) / unit;
    const int64_t ng = std::llround(g), nc = std::llround(r);
    off_grid += std::fabs(g - double(ng)) > 0.01 || ng < 0 || ng > group;
    mismatched += ng != nc;
    kept += ng;
  }
  EXPECT_EQ(off_grid, 0);
  EXPECT_EQ(mismatched, 0) << "of " << gpu.dv.numel();
  EXPECT_NEAR(double(kept) / double(gpu.dv.numel() * group), 1.0 - c.dropout_p, 0.01);
#endif
}

// 64 and 128: 128-key blocks (the dropout kernels keep 64-query steps at d 64); 256: 64-key blocks.
INSTANTIATE_TEST_SUITE_P(HeadDims, GpuDropoutBackward, ::testing::Values(64, 128, 256),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "d" + std::to_string(info.param);
                         });

// The deterministic backward: 100 runs give bit-identical dq, dk, dv (the first one also passes
// the accuracy rule). Several key tiles add into every query tile, with GQA 4, causal, dropout.
class GpuDeterministic : public ::testing::TestWithParam<int64_t> {};

TEST_P(GpuDeterministic, HundredRunsBitIdentical) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam(), &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seqlen_q = 700;
  c.seqlen_k = 900;
  c.head_dim = GetParam();
  c.causal = true;
  c.dropout_p = 0.1f;
  c.deterministic = true;
  c.pad = 8;
  c.seed = 4242;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  run_pass(dev.p, true);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
  const int differing = rerun_backward_differences(dev, pr, 99, true);
  if (HasFatalFailure()) return;
  EXPECT_EQ(differing, 0) << "gradient tensors that differed from the first run's, over 99 runs";
#endif
}

INSTANTIATE_TEST_SUITE_P(HeadDims, GpuDeterministic, ::testing::Values(64, 128, 256),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "d" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace fa::test
