// The CPU flash kernels' packed-B layout (src/cpu/tile.h), on the generic build's tile layer: the
// loaders put element (k, n) at packed_index(k, n, K, N), and the packed GEMMs give the same bits
// as gemm / gemm_at on the unpacked matrix (each element of C sums over k in the same order);
// exp2_approx keeps its accuracy and edge cases.
// The avx2 / avx512 builds share this code at other widths; the Grid/FlashCpu tests run them
// end to end.
#define FA_CPU_ISA generic
// The generic build's 32-byte vectors without AVX: GCC notes the ABI of passing them, as for the
// fa_cpu_* targets (-Wno-psabi); they never cross this file's boundary.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "cpu/tile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace fa::cpu::generic {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// B (K x N) row-major into its packed layout, through the index the loaders follow.
std::vector<float> pack(const std::vector<float>& b, int64_t K, int64_t N) {
  std::vector<float> p(static_cast<size_t>(K * N), std::nanf(""));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) p[size_t(packed_index(k, n, K, N))] = b[size_t(k * N + n)];
  return p;
}

struct Shape {
  int64_t M, N, K;
};
// Whole panels, a vector-wide tail panel, 4-row tails after the micro-kernel's bands, K of 1.
const Shape kShapes[] = {{64, 128, 128}, {128, 128, 64}, {12, 3 * kLanes, 5}, {4, kLanes, 1},
                         {20, 5 * kLanes, 17}};

TEST(CpuTile, PackedIndexCoversEveryElementOnce) {
  for (const Shape& s : kShapes) {
    std::vector<int> seen(static_cast<size_t>(s.K * s.N), 0);
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t n = 0; n < s.N; ++n) {
        const int64_t i = packed_index(k, n, s.K, s.N);
        ASSERT_GE(i, 0);
        ASSERT_LT(i, s.K * s.N);
        ++seen[size_t(i)];
      }
    for (int c : seen) ASSERT_EQ(c, 1) << "K " << s.K << " N " << s.N;
  }
}

TEST(CpuTile, PackedGemmsMatchUnpackedBitForBit) {
  for (const Shape& s : kShapes)
    for (bool accumulate : {false, true}) {
      const std::vector<float> a = random_floats(s.M * s.K, 1), b = random_floats(s.K * s.N, 2),
                               c0 = random_floats(s.M * s.N, 3);
      std::vector<float> at(a.size());  // A transposed: (K x M)
      for (int64_t i = 0; i < s.M; ++i)
        for (int64_t k = 0; k < s.K; ++k) at[size_t(k * s.M + i)] = a[size_t(i * s.K + k)];
      const std::vector<float> bp = pack(b, s.K, s.N);
      std::vector<float> want = c0, got = c0, want_t = c0, got_t = c0;
      gemm(s.M, s.N, s.K, a.data(), s.K, b.data(), s.N, want.data(), s.N, accumulate);
      gemm_packed_b(s.M, s.N, s.K, a.data(), s.K, bp.data(), got.data(), s.N, accumulate);
      gemm_at(s.M, s.N, s.K, at.data(), s.M, b.data(), s.N, want_t.data(), s.N, accumulate);
      gemm_at_packed_b(s.M, s.N, s.K, at.data(), s.M, bp.data(), got_t.data(), s.N, accumulate);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "gemm_packed_b M " << s.M << " N " << s.N << " K " << s.K;
      EXPECT_EQ(std::memcmp(want_t.data(), got_t.data(), want.size() * sizeof(float)), 0)
          << "gemm_at_packed_b M " << s.M << " N " << s.N << " K " << s.K;
    }
}

TEST(CpuTile, PackedLoadersFollowPackedIndex) {
  // 8-lane generic build: 24 padded rows and 40 padded columns, each a 16-wide panel or two and
  // an 8-wide tail.
  const int64_t rows = 13, rows_pad = 3 * kLanes, d = 37, d_pad = round_up(d, kLanes);
  const std::vector<float> src = random_floats(rows * d, 4);
  const auto row = [&](int64_t r) { return src.data() + r * d; };
  const float scale = 0.5f;
  // V: (rows_pad x d_pad) packed; rows past `rows` and columns past d are 0.
  std::vector<float> v(static_cast<size_t>(rows_pad * d_pad), std::nanf(""));
  load_rows_packed<float>(row, rows, rows_pad, d, d_pad, scale, v.data());
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t c = 0; c < d_pad; ++c)
      ASSERT_EQ(v[size_t(packed_index(r, c, rows_pad, d_pad))],
                r < rows && c < d ? src[size_t(r * d + c)] * scale : 0.f)
          << "V row " << r << " column " << c;
  // Qᵀ: (d_pad x rows_pad) packed, element (c, r) = row r's column c.
  std::vector<float> qt(static_cast<size_t>(d_pad * rows_pad), std::nanf(""));
  load_rows_t_packed<float>(row, rows, rows_pad, d, d_pad, scale, qt.data());
  for (int64_t c = 0; c < d_pad; ++c)
    for (int64_t r = 0; r < rows_pad; ++r)
      ASSERT_EQ(qt[size_t(packed_index(c, r, d_pad, rows_pad))],
                r < rows && c < d ? src[size_t(r * d + c)] * scale : 0.f)
          << "Q^T column " << c << " row " << r;
}

// exp2_approx (the softmax's exp): relative error < 2e-7 against the double 2^x over the range
// that rounds to a normal 2^n, exactly 0 below it and at -inf, NaN kept, and the vector form
// the same bits as the scalar one lane by lane.
TEST(CpuTile, Exp2ApproxAccuracyAndEdges) {
  std::vector<float> xs;
  for (float x = -126.f; x <= 127.f; x += 0.0137f) xs.push_back(x);
  for (float x : {-0.5f, 0.5f, -1.5f, 2.5f, 0.f, -0.f, 1e-30f, -1e-30f}) xs.push_back(x);
  for (float x : xs) {
    const double want = std::exp2(double(x));
    ASSERT_LT(std::abs(double(exp2_approx(x)) - want) / want, 2e-7) << "x = " << x;
  }
  for (float x : {-126.6f, -127.f, -200.f, -1e30f, -std::numeric_limits<float>::infinity()})
    EXPECT_EQ(exp2_approx(x), 0.f) << "x = " << x;
  EXPECT_TRUE(std::isnan(exp2_approx(std::nanf(""))));
  EXPECT_TRUE(std::isfinite(exp2_approx(std::numeric_limits<float>::infinity())));
  xs.push_back(-std::numeric_limits<float>::infinity());
  xs.push_back(-150.f);
  while (xs.size() % kLanes) xs.push_back(0.25f);
  for (size_t i = 0; i < xs.size(); i += kLanes) {
    const fvec e = exp2_approx(vload(&xs[i]));
    for (int l = 0; l < kLanes; ++l)
      ASSERT_EQ(float_bits(e[l]), float_bits(exp2_approx(xs[i + size_t(l)])))
          << "x = " << xs[i + size_t(l)];
  }
  fvec nan_lanes = vsplat(1.f);
  nan_lanes[1] = std::nanf("");
  EXPECT_TRUE(std::isnan(exp2_approx(nan_lanes)[1]));
}

}  // namespace
}  // namespace fa::cpu::generic
