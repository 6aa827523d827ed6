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
#include <cstring>
#include <limits>

#include "core/params.h"
#include "core/dtype.h"
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
// Defined once per instruction set in tile.cpp: every call site shares one register-blocked body.
void gemm(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
          const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
          bool accumulate);

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

// 8 fp32 lanes: one AVX register in the avx2 build, two SSE registers in the generic one. Plain
// loops over exp2_approx do not vectorise (GCC keeps them scalar), so the hot loops use this.
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
constexpr int kLanes = 8;

inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
inline void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }
inline f32x8 splat8(float x) { return f32x8{} + x; }

// exp2_approx on 8 lanes, the same arithmetic lane by lane.
inline f32x8 exp2_approx(f32x8 x) {
  const f32x8 lo = splat8(-127.f), hi = splat8(127.f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const f32x8 shifted = x + 0.5f;
  i32x8 n = __builtin_convertvector(shifted, i32x8);       // truncates toward zero
  n += __builtin_convertvector(n, f32x8) > shifted;       // true is -1: floor
  const f32x8 f = x - __builtin_convertvector(n, f32x8);
  f32x8 p = splat8(kExp2Poly.c[7]);
  for (int i = 6; i >= 0; --i) p = p * f + kExp2Poly.c[i];
  const i32x8 bits = (n + 127) << 23;
  f32x8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// s[j] <- exp((s[j] - m)) for j < n (n a multiple of 8); returns the sum of the results.
inline float exp_shifted(float* __restrict s, int64_t n, float m) {
  f32x8 sum{};
  for (int64_t j = 0; j < n; j += kLanes) {
    const f32x8 e = exp2_approx((load8(s + j) - m) * kLog2e);
    store8(s + j, e);
    sum += e;
  }
  float total = 0.f;
  for (int l = 0; l < kLanes; ++l) total += sum[l];
  return total;
}

// Load `rows` rows into a dense fp32 tile (rows_pad x ld), multiplied by `scale`; padding rows and
// columns become 0. Row r is at src(r) (a const T*), so that a tile of keys may span the pages of
// a paged cache.
template <typename T, typename RowAt>
void load_rows(const RowAt& src, int64_t rows, int64_t rows_pad, int64_t d, float scale,
               float* __restrict dst, int64_t ld) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    float* out = dst + r * ld;
    if (r < rows) {
      const T* in = src(r);
      for (int64_t c = 0; c < d; ++c) out[c] = to_float(in[c]) * scale;
      for (int64_t c = d; c < ld; ++c) out[c] = 0.f;
    } else {
      for (int64_t c = 0; c < ld; ++c) out[c] = 0.f;
    }
  }
}

// Same, transposed: dst (d_pad x cols_pad) with dst[c][r] = row r, column c.
template <typename T, typename RowAt>
void load_rows_t(const RowAt& src, int64_t rows, int64_t rows_pad, int64_t d, int64_t d_pad,
                 float* __restrict dst, int64_t ld) {
  for (int64_t c = 0; c < d_pad; ++c)
    for (int64_t r = rows; r < rows_pad; ++r) dst[c * ld + r] = 0.f;
  for (int64_t c = d; c < d_pad; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * ld + r] = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = src(r);
    for (int64_t c = 0; c < d; ++c) dst[c * ld + r] = to_float(in[c]);
  }
}

// Rows [row0, row0 + rows) of head h of a (seq, head, dim) view.
template <typename T>
void load_tile(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t rows_pad, int64_t h,
               int64_t d, float scale, float* __restrict dst, int64_t ld) {
  load_rows<T>([&](int64_t r) { return v.at<T>(b, row0 + r, h); }, rows, rows_pad, d, scale, dst,
               ld);
}
template <typename T>
void load_tile_t(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t rows_pad,
                 int64_t h, int64_t d, int64_t d_pad, float* __restrict dst, int64_t ld) {
  load_rows_t<T>([&](int64_t r) { return v.at<T>(b, row0 + r, h); }, rows, rows_pad, d, d_pad,
                 dst, ld);
}

// load_tile for a tensor whose dtype may differ from the inputs' (out, dout: View::dtype).
inline void load_tile_as(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t rows_pad,
                         int64_t h, int64_t d, float scale, float* __restrict dst, int64_t ld) {
  switch (v.dtype) {
    case DType::F32: return load_tile<float>(v, b, row0, rows, rows_pad, h, d, scale, dst, ld);
    case DType::F16: return load_tile<half_t>(v, b, row0, rows, rows_pad, h, d, scale, dst, ld);
    case DType::BF16:
      return load_tile<bfloat16_t>(v, b, row0, rows, rows_pad, h, d, scale, dst, ld);
    case DType::F64: break;  // the test oracle's own outputs: never a flash kernel's tensor
  }
}

// Keys [t0, t0 + rows) of head h of k or v of batch entry b, as load_rows sources: dense or
// through the block table (Params::key_row).
template <typename T>
struct KeyRows {
  const Params& p;
  const View& kv;
  int64_t b, t0, h;
  const T* operator()(int64_t r) const { return p.key_row<T>(kv, b, t0 + r, h); }
};

// Store `rows` rows of a dense fp32 tile, each multiplied by `uniform`, into a view.
template <typename T>
void store_rows(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t h, int64_t d,
                const float* __restrict src, int64_t ld, float uniform) {
  for (int64_t r = 0; r < rows; ++r) {
    T* out = v.at<T>(b, row0 + r, h);
    for (int64_t c = 0; c < d; ++c) out[c] = convert<T>(src[r * ld + c] * uniform);
  }
}

// store_rows into a tensor of its own dtype (out: fp32 with 16-bit inputs, say).
inline void store_rows_as(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t h,
                          int64_t d, const float* __restrict src, int64_t ld, float uniform) {
  switch (v.dtype) {
    case DType::F32: return store_rows<float>(v, b, row0, rows, h, d, src, ld, uniform);
    case DType::F16: return store_rows<half_t>(v, b, row0, rows, h, d, src, ld, uniform);
    case DType::BF16: return store_rows<bfloat16_t>(v, b, row0, rows, h, d, src, ld, uniform);
    case DType::F64: break;  // never a flash kernel's tensor
  }
}

}  // namespace fa::cpu::FA_CPU_ISA
