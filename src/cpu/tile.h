// CPU tile primitives for the flash backend: an fp32 register-blocked GEMM, a vectorisable exp2,
// and strided load/store of (rows, head_dim) tiles with conversion to fp32.
//
// This header is compiled once per instruction set (flash_*.cpp are built twice, with and
// without -mavx2 -mfma; see CMakeLists.txt), so everything here lives in namespace FA_CPU_ISA and
// is written as plain loops that the compiler vectorises for the flags of each build.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "api/params.h"
#include "common/dtype.h"
#include "cpu/scratch.h"

#ifndef FA_CPU_ISA
#error "FA_CPU_ISA must name the instruction-set namespace (generic, avx2)"
#endif

namespace fa::cpu::FA_CPU_ISA {

// Micro-kernel footprint: 4 rows x 16 columns of fp32 accumulators = 8 AVX registers, leaving
// half the register file for the broadcast A values and the B row.
constexpr int kMicroRows = 4;
constexpr int kMicroCols = 16;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C (M x N) = [C +] A (M x K) * B (K x N); all row-major with leading dimensions.
// Requires M % kMicroRows == 0 and N % kMicroCols == 0 (callers pad tiles with zeros).
inline void gemm(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
                 const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
                 bool accumulate) {
  for (int64_t i = 0; i < M; i += kMicroRows) {
    for (int64_t j = 0; j < N; j += kMicroCols) {
      float acc[kMicroRows][kMicroCols];
#pragma GCC unroll 4
      for (int r = 0; r < kMicroRows; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < kMicroCols; ++c)
          acc[r][c] = accumulate ? C[(i + r) * ldc + j + c] : 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float* __restrict b = B + k * ldb + j;
#pragma GCC unroll 4
        for (int r = 0; r < kMicroRows; ++r) {
          const float a = A[(i + r) * lda + k];
#pragma GCC unroll 16
          for (int c = 0; c < kMicroCols; ++c) acc[r][c] += a * b[c];
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < kMicroRows; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < kMicroCols; ++c) C[(i + r) * ldc + j + c] = acc[r][c];
    }
  }
}

// dst (cols x rows) = src (rows x cols)^T.
inline void transpose(int64_t rows, int64_t cols, const float* __restrict src, int64_t lds,
                      float* __restrict dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// 2^x with relative error < 2e-7, branch-free so that loops over it vectorise. x <= -126
// (including -inf) gives exactly 0; x is clamped at 127. 2^x = 2^n * 2^f with n = round(x) and
// f in [-0.5, 0.5], where 2^f = exp(f ln 2) is its Taylor series to degree 7 (remainder < 6e-9).
struct Exp2Poly {
  float c[8];
  constexpr Exp2Poly() : c{} {
    const double ln2 = 0.6931471805599453;
    double term = 1.0;
    for (int n = 0; n < 8; ++n) {
      c[n] = float(term);
      term *= ln2 / double(n + 1);
    }
  }
};
constexpr Exp2Poly kExp2Poly{};

inline float exp2_approx(float x) {
  x = x < -127.f ? -127.f : (x > 127.f ? 127.f : x);
  const float shifted = x + 0.5f;
  int n = int(shifted);             // truncates toward zero
  n -= (float(n) > shifted) ? 1 : 0;  // floor(x + 0.5) = round(x)
  const float f = x - float(n);
  float p = kExp2Poly.c[7];
#pragma GCC unroll 7
  for (int i = 6; i >= 0; --i) p = p * f + kExp2Poly.c[i];
  // 2^n as bits; n = -127 gives a zero exponent field and hence 0.
  const float scale = bits_float(uint32_t(n + 127) << 23);
  return p * scale;
}

// Load rows [row0, row0 + rows) of head h of a (seq, head, dim) view into a dense fp32 tile
// (rows_pad x ld), multiplied by `scale`; padding rows and columns become 0.
template <typename T>
void load_tile(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t rows_pad, int64_t h,
               int64_t d, float scale, float* __restrict dst, int64_t ld) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    float* out = dst + r * ld;
    if (r < rows) {
      const T* src = v.at<T>(b, row0 + r, h);
      for (int64_t c = 0; c < d; ++c) out[c] = to_float(src[c]) * scale;
      for (int64_t c = d; c < ld; ++c) out[c] = 0.f;
    } else {
      for (int64_t c = 0; c < ld; ++c) out[c] = 0.f;
    }
  }
}

// Same, transposed: dst (d_pad x cols_pad) with dst[c][r] = src row r, column c.
template <typename T>
void load_tile_t(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t rows_pad,
                 int64_t h, int64_t d, int64_t d_pad, float* __restrict dst, int64_t ld) {
  for (int64_t c = 0; c < d_pad; ++c)
    for (int64_t r = rows; r < rows_pad; ++r) dst[c * ld + r] = 0.f;
  for (int64_t c = d; c < d_pad; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * ld + r] = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = v.at<T>(b, row0 + r, h);
    for (int64_t c = 0; c < d; ++c) dst[c * ld + r] = to_float(src[c]);
  }
}

// Store `rows` rows of a dense fp32 tile, each multiplied by scale[r] (or `uniform`), into a view.
template <typename T>
void store_rows(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t h, int64_t d,
                const float* __restrict src, int64_t ld, float uniform) {
  for (int64_t r = 0; r < rows; ++r) {
    T* out = v.at<T>(b, row0 + r, h);
    for (int64_t c = 0; c < d; ++c) out[c] = convert<T>(src[r * ld + c] * uniform);
  }
}

}  // namespace fa::cpu::FA_CPU_ISA
