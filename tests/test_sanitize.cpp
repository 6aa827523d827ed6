// The safe copies of device-side cu_seqlens (src/cuda/kernels/varlen/sanitize.h), by their
// sequential definition: valid arrays come back unchanged; any array comes back non-decreasing,
// inside [0, total] and with no sequence longer than max_len (what the CUDA backward's kernels
// rely on to stay inside the tensors). The kernel is checked against this definition on the GPU
// (GpuHostile.SanitizeKernelMatchesDefinition).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/kernels/varlen/sanitize.h"

namespace fa::cuda {
namespace {

std::vector<int32_t> sanitized(const std::vector<int32_t>& c, int64_t total, int64_t max_len) {
  std::vector<int32_t> out(c.size(), -12345);
  sanitize_cu_seqlens_reference(c.data(), out.data(), int64_t(c.size()), total, max_len);
  return out;
}

void expect_safe(const std::vector<int32_t>& s, int64_t total, int64_t max_len) {
  ASSERT_FALSE(s.empty());
  EXPECT_GE(s[0], 0);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_LE(s[i], total) << i;
    if (i > 0) {
      EXPECT_GE(s[i], s[i - 1]) << i;
      EXPECT_LE(int64_t(s[i]) - s[i - 1], max_len) << i;
    }
  }
}

TEST(SanitizeCuSeqlens, ValidArraysAreUnchanged) {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t batch = 1 + int64_t(rng() % 300), max_len = 1 + int64_t(rng() % 500);
    std::vector<int32_t> c(size_t(batch + 1), 0);
    for (int64_t b = 0; b < batch; ++b) c[size_t(b + 1)] = c[size_t(b)] + int32_t(rng() % (max_len + 1));
    const int64_t total = c.back();
    EXPECT_EQ(sanitized(c, total, max_len), c);
    // A caller's max_len above the longest sequence changes nothing either.
    EXPECT_EQ(sanitized(c, total, max_len + 1000), c);
  }
}

TEST(SanitizeCuSeqlens, AnyArrayBecomesSafe) {
  std::mt19937_64 rng(2323);
  const std::vector<std::vector<int32_t>> fixed = {
      {0, 100, 50000},        {0, 150, 20, 200},   {0, -50, -1000, 200},
      {INT_MIN, INT_MAX, 0, INT_MAX}, {0, 10, 20, 200}, {7, 3}};
  for (const auto& c : fixed) expect_safe(sanitized(c, 200, 70), 200, 70);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> c(1 + rng() % 64);
    for (auto& x : c) {
      switch (rng() % 4) {
        case 0: x = int32_t(rng()); break;                     // anything
        case 1: x = int32_t(rng() % 400) - 100; break;         // near the range
        case 2: x = rng() % 2 ? INT_MAX : INT_MIN; break;      // extremes
        default: x = int32_t(rng() % 201);                     // inside
      }
    }
    const int64_t total = 1 + int64_t(rng() % 300), max_len = 1 + int64_t(rng() % 100);
    expect_safe(sanitized(c, total, max_len), total, max_len);
  }
}

TEST(SanitizeCuSeqlens, HugeTotalsStayInInt32) {
  // A packed tensor past INT32_MAX rows (zero strides): entries stay the int32 they were.
  const std::vector<int32_t> c = {0, INT_MAX, -1, INT_MAX};
  const auto s = sanitized(c, int64_t(1) << 40, int64_t(1) << 40);
  expect_safe(s, int64_t(1) << 40, int64_t(1) << 40);
  EXPECT_EQ(s, (std::vector<int32_t>{0, INT_MAX, INT_MAX, INT_MAX}));
}

}  // namespace
}  // namespace fa::cuda
