// The sm90 primitives on the device (src/cuda/selftest/wgmma_selftest.h): one warpgroup's wgmma
// products, A from shared memory or registers, B K-major or MN-major (the transpose bit), over
// 1, 4 and 8 k16 steps and 64 / 128 columns (two 64-column blocks: the MN-major descriptor's
// LBO), against the exact product. Inputs are small integers, so every product and sum is exact
// in fp32 and C must match bit for bit. Skipped without an sm90 GPU or an sm_90a build.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef FA_TEST_CUDA
#include "cuda/selftest/wgmma_selftest.h"
#endif

namespace {

uint16_t bf16_of(float x) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return uint16_t(u >> 16);
}

struct Shape {
  int n, k;
  bool regs, mn;
};

class GpuWgmma : public ::testing::TestWithParam<Shape> {};

TEST_P(GpuWgmma, ProductIsExact) {
#ifndef FA_TEST_CUDA
  GTEST_SKIP() << "CPU-only build";
#else
  const Shape s = GetParam();
  std::mt19937 rng(uint32_t(1000 * s.n + s.k + (s.regs ? 7 : 0) + (s.mn ? 13 : 0)));
  std::uniform_int_distribution<int> v(-4, 4);
  std::vector<float> a(64 * s.k), b(s.n * s.k);  // b as (n, k): B's column j is b[j][:]
  for (float& x : a) x = float(v(rng));
  for (float& x : b) x = float(v(rng));
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); ++i) ah[i] = bf16_of(a[i]);
  for (int j = 0; j < s.n; ++j)
    for (int kk = 0; kk < s.k; ++kk)  // K-major: stored (n, k); MN-major: stored (k, n)
      bh[s.mn ? kk * s.n + j : j * s.k + kk] = bf16_of(b[j * s.k + kk]);
  std::vector<float> c(64 * s.n, -1.f);
  const fa::cuda::selftest::WgmmaCase wc{s.n, s.k, s.regs, s.mn};
  const std::string why = fa::cuda::selftest::wgmma_gemm(wc, ah.data(), bh.data(), c.data());
  if (why == "no CUDA device" || why == "the device is not sm90" || why == "not built for sm_90a")
    GTEST_SKIP() << why;
  ASSERT_EQ(why, "");
  int wrong = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < s.n; ++j) {
      double want = 0;
      for (int kk = 0; kk < s.k; ++kk) want += double(a[i * s.k + kk]) * b[j * s.k + kk];
      if (c[i * s.n + j] != float(want) && ++wrong <= 5)
        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << c[i * s.n + j] << ", want " << want;
    }
  EXPECT_EQ(wrong, 0);
#endif
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int n : {64, 128})
    for (int k : {16, 64, 128})
      for (bool regs : {false, true})
        for (bool mn : {false, true}) out.push_back({n, k, regs, mn});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuWgmma, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return "n" + std::to_string(i.param.n) + "_k" +
                                  std::to_string(i.param.k) + (i.param.regs ? "_rs" : "_ss") +
                                  (i.param.mn ? "_bmn" : "_bk");
                         });

}  // namespace
