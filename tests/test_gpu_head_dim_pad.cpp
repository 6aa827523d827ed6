// Head dims that are not a multiple of 8 on the CUDA flash families (cuda/head_dim_pad.h): the
// call runs on zero-padded copies in the workspace and the caller sees its own head_dim. Forward
// and backward against the fp64 reference by FlashAttention's rule, outputs, gradients and the
// workspace poisoned, over head dims 1 to 250 with every feature (causal, windows, softcap,
// ALiBi, dropout, GQA / MQA, packed batches with empty sequences, strided views, the
// deterministic backward); each call asserted to run a flash family (cuda-sm90 forwards on an
// sm90 device, else cuda-sm80: its padding, not cuda-vanilla).
// The KV-cache family refuses such head dims by name. Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_support.h"

#ifdef FA_TEST_CUDA
#include "api/internal.h"
#endif

namespace fa::test {
namespace {

#ifdef FA_TEST_CUDA

std::string family(const fa_params& p, bool backward) {
  return family_of(p, backward ? Pass::Backward : Pass::Forward, Tuning{});
}

std::vector<Case> pad_cases() {
  std::vector<Case> out;
  uint64_t seed = 29000;
  int n = 0;
  for (const int d : {1, 3, 12, 59, 100, 111, 131, 199, 250})
    for (int feature = 0; feature < 6; ++feature) {
      Case c;
      c.dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.batch = 2;
      c.heads_kv = 2;
      c.heads_q = (n % 3 == 0) ? 2 : (n % 3 == 1) ? 4 : 8;
      c.head_dim = d;
      c.seqlen_q = (n % 2) ? 113 : 64;
      c.seqlen_k = (n % 2) ? 203 : 64;
      if (feature == 1) c.causal = true;
      if (feature == 2) { c.window_left = 30; c.window_right = 5; c.softcap = 15.f; }
      if (feature == 3) { c.alibi = true; c.dropout_p = 0.17f; }
      if (feature == 4) {
        c.batch = 3;
        c.lens_q = {50, 0, 9};
        c.lens_k = {70, 6, 0};
        c.causal = true;
      }
      if (feature == 5) { c.strided = true; c.pad = 5; c.deterministic = true; }
      c.seed = seed++;
      ++n;
      out.push_back(c);
    }
  return out;
}

class GpuHeadDimPad : public ::testing::TestWithParam<Case> {};

TEST_P(GpuHeadDimPad, ForwardBackwardMatchReference) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  ASSERT_TRUE(is_flash_family(family(dev.p, false))) << family(dev.p, false);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  ASSERT_TRUE(is_flash_family(family(dev.p, true))) << family(dev.p, true);
  run_pass(dev.p, false);
  run_pass(dev.p, true);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuHeadDimPad, ::testing::ValuesIn(pad_cases()), CaseTestName{});

// With a KV cache (here: split-KV) such a head dim is refused, naming the family and the reason.
TEST(GpuHeadDimPadRefusal, KvCacheFamilyNamesIt) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 1;
  c.head_dim = 59;
  c.seqlen_q = 1;
  c.seqlen_k = 300;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  dev.p.num_splits = 3;
  const std::string f = family(dev.p, false);
  EXPECT_NE(f.find("cuda-kvcache: head_dim=59 must be a multiple of 8"), std::string::npos) << f;
}

#else
TEST(GpuHeadDimPad, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
