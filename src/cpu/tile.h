// CPU tile primitives for the flash backend: an fp32 register-blocked GEMM, a vectorisable exp2,
// and strided load/store of (rows, head_dim) tiles with conversion to fp32.
//
// This header is compiled once per instruction set (flash_*.cpp are built three times: generic,
// -mavx2 -mfma -mf16c, and -mavx512f/bw/dq/vl; see fa_cpu_isa in CMakeLists.txt), so everything
// here lives in namespace FA_CPU_ISA and is written as plain loops or vector-extension code that
// the compiler lowers for the flags of each build.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/params.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "cpu/scratch.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#ifndef FA_CPU_ISA
#error "FA_CPU_ISA must name the instruction-set namespace (generic, avx2, avx512)"
#endif

// fp32 lanes of the kernels' vector type: one zmm register (16) in the avx512 build, one ymm (8)
// in the avx2 build and two xmm (8) in the generic one. FA_CPU_NARROW keeps 8 lanes under
// -mavx512f (the "recompiled AVX2 code" variant of docs/performance-log.md's comparison).
#if defined(__AVX512F__) && !defined(FA_CPU_NARROW)
#define FA_CPU_LANES 16
#else
#define FA_CPU_LANES 8
#endif

namespace fa::cpu::FA_CPU_ISA {

constexpr int kLanes = FA_CPU_LANES;
// Micro-kernel footprint: kMicroRows rows x kMicroVecs vectors of fp32 accumulators.
// - avx2 (16 ymm): 6 x 2 = 12 accumulators, 2 for the B row and 1 broadcast. Two FMA pipes of
//   4-cycle latency need 8 independent chains; 4 x 2 had exactly 8 and no slack. On the
//   forward's O += P V shape (one Zen 3 core) 4 x 2 ran at ~70 GFLOP/s, 6 x 2 at ~80, 6 x 2 with
//   B packed (below) at ~90; on the backward's shapes 4 x 2 ran at 43-47, 6 x 2 at 56-64
//   (docs/performance-log.md, issue 34).
// - generic (two xmm per vector, 16 xmm): 4 x 2, whose 16 xmm accumulators already fill the file.
// - 16-lane builds: 8 x 2 = 16 of the 32 zmm registers (8 x 32 columns), twice the FMAs per B load
//   of 4 x 2 (measured against 4 x 4 and 4 x 2: docs/performance-log.md).
#if defined(__AVX__) || defined(__AVX512F__)
constexpr int kMicroRows = kLanes == 16 ? 8 : 6;
#else
constexpr int kMicroRows = 4;
#endif
constexpr int kMicroVecs = 2;
// Rows of C in whole micro-kernel bands before the 4-row tail: a multiple of 4, so that the tail
// of an M % 4 == 0 tile is whole 4-row bands (6-row bands go in pairs).
constexpr int kBandRows = kMicroRows % 4 == 0 ? kMicroRows : 2 * kMicroRows;
static_assert(kBandRows % 4 == 0 && kBandRows % kMicroRows == 0, "bands then 4-row tail bands");
static_assert(kPadRows % 4 == 0 && kPadCols % kLanes == 0,
              "tiles are padded to the micro-kernel's row tail (4) and one vector of columns");
// Columns of B (and C) one micro-kernel call covers: a panel.
constexpr int64_t kPanelCols = kMicroVecs * kLanes;
static_assert(kMicroVecs == 2, "a packed matrix's tail is at most one vector-wide panel");

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C (M x N) = [C +] A (M x K) * B (K x N); all row-major with leading dimensions.
// Requires M % 4 == 0 and N % kLanes == 0 (callers pad tiles with zeros: kPadRows, kPadCols).
// Defined once per instruction set in tile.cpp: every call site shares one register-blocked body.
void gemm(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
          const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
          bool accumulate);
// The same with A given transposed: At (K x M) row-major, A(i, k) = At[k * lda + i]. The forward
// keeps its probabilities as Pᵀ (keys x queries), so O += P V reads them this way.
void gemm_at(int64_t M, int64_t N, int64_t K, const float* __restrict At, int64_t lda,
             const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
             bool accumulate);

// Packed B: a (K x N) matrix (N % kLanes == 0) stored as its column panels one after another,
// kPanelCols wide (a last one kLanes wide where N % kPanelCols != 0), each panel's K rows
// contiguous. The micro-kernel then reads B as one sequential stream: a row-major B whose rows
// are 512 bytes apart (V at d 128) puts a panel's 64 rows in 8 of a 64-set L1's sets, where the
// A and C streams evict them. Column n's panel starts at column packed_panel(n, N).
inline int64_t packed_panel(int64_t n, int64_t N) {
  const int64_t whole = N / kPanelCols * kPanelCols;
  return n < whole ? n / kPanelCols * kPanelCols : whole;
}
inline int64_t packed_width(int64_t j, int64_t N) { return N - j >= kPanelCols ? kPanelCols : kLanes; }
// Element (k, n) of a packed (K x N) matrix.
inline int64_t packed_index(int64_t k, int64_t n, int64_t K, int64_t N) {
  const int64_t j = packed_panel(n, N);
  return j * K + k * packed_width(j, N) + (n - j);
}

// gemm and gemm_at with B packed (above): Bp holds the (K x N) matrix B.
void gemm_packed_b(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
                   const float* __restrict Bp, float* __restrict C, int64_t ldc, bool accumulate);
void gemm_at_packed_b(int64_t M, int64_t N, int64_t K, const float* __restrict At, int64_t lda,
                      const float* __restrict Bp, float* __restrict C, int64_t ldc,
                      bool accumulate);

// 2^x with relative error < 2e-7, branch-free so that loops over it vectorise. x < -126.5
// (including -inf) gives exactly 0; x is clamped at 127; NaN stays NaN. 2^x = 2^n * 2^f with
// n = round(x) and f in [-0.5, 0.5], where 2^f = exp(f ln 2) is its Taylor series to degree 7
// (remainder < 6e-9).
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
// Rounding by addition: for |x| <= 2^22, x + 1.5 * 2^23 rounds x to the nearest integer n (ties
// to even) and holds n in the low bits of its mantissa, two's complement, so that adding 127 to
// its bits and shifting them into the exponent field gives 2^n: no float -> int conversion. Two
// float adds and an integer add where a truncating conversion, its floor correction and the
// conversion back took five instructions in every exp of the softmax.
constexpr float kRoundMagic = 12582912.f;  // 1.5 * 2^23

inline float exp2_approx(float x) {
  x = -127.f > x ? -127.f : x;  // a NaN x passes: the comparisons are false
  x = 127.f < x ? 127.f : x;
  const float rounded = x + kRoundMagic;
  const float f = x - (rounded - kRoundMagic);
  float p = kExp2Poly.c[7];
#pragma GCC unroll 7
  for (int i = 6; i >= 0; --i) p = p * f + kExp2Poly.c[i];
  // 2^n as bits; n = -127 gives a zero exponent field and hence 0.
  const float scale = bits_float((float_bits(rounded) + 127u) << 23);
  return p * scale;
}

// kLanes fp32 lanes. Plain loops over exp2_approx do not vectorise (GCC keeps them scalar), so
// the hot loops use this type.
typedef float fvec __attribute__((vector_size(4 * FA_CPU_LANES)));
typedef uint32_t uvec __attribute__((vector_size(4 * FA_CPU_LANES)));

inline fvec vload(const float* p) {
  fvec v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
inline void vstore(float* p, fvec v) { std::memcpy(p, &v, sizeof v); }
inline fvec vsplat(float x) { return fvec{} + x; }

// a > x ? a : x and a < x ? a : x lane by lane, as x86's maxps / minps (a NaN x passes: they
// return their second operand when either is NaN). GCC lowers the vector-extension selects to a
// compare and a blend; the intrinsics are one instruction (AVX-512's masked form: the unmasked
// one trips GCC 12's -Wmaybe-uninitialized inside its own header, as in convert_row).
inline fvec vmax_keep_nan(fvec a, fvec x) {
#if defined(__AVX512F__) && FA_CPU_LANES == 16
  return fvec(_mm512_maskz_max_ps(__mmask16(0xffff), __m512(a), __m512(x)));
#elif defined(__AVX__) && FA_CPU_LANES == 8
  return fvec(_mm256_max_ps(__m256(a), __m256(x)));
#else
  return a > x ? a : x;
#endif
}
inline fvec vmin_keep_nan(fvec a, fvec x) {
#if defined(__AVX512F__) && FA_CPU_LANES == 16
  return fvec(_mm512_maskz_min_ps(__mmask16(0xffff), __m512(a), __m512(x)));
#elif defined(__AVX__) && FA_CPU_LANES == 8
  return fvec(_mm256_min_ps(__m256(a), __m256(x)));
#else
  return a < x ? a : x;
#endif
}

// exp2_approx on kLanes lanes, the same arithmetic lane by lane.
inline fvec exp2_approx(fvec x) {
  x = vmax_keep_nan(vsplat(-127.f), x);
  x = vmin_keep_nan(vsplat(127.f), x);
  const fvec rounded = x + kRoundMagic;
  const fvec f = x - (rounded - kRoundMagic);
  fvec p = vsplat(kExp2Poly.c[7]);
  for (int i = 6; i >= 0; --i) p = p * f + kExp2Poly.c[i];
  uvec bits;
  std::memcpy(&bits, &rounded, sizeof bits);
  bits = (bits + 127u) << 23;
  fvec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Sum of the lanes in a fixed order (the same bits on every run).
inline float hsum(fvec v) {
  float total = 0.f;
  for (int l = 0; l < kLanes; ++l) total += v[l];
  return total;
}

// max(s[0..n)) for n a multiple of kLanes (a plain loop's max reduction stays scalar without
// -ffast-math).
inline float row_max(const float* __restrict s, int64_t n) {
  fvec m = vsplat(kNegInf);
  for (int64_t j = 0; j < n; j += kLanes) {
    const fvec x = vload(s + j);
    m = x > m ? x : m;
  }
  float out = kNegInf;
  for (int l = 0; l < kLanes; ++l) out = m[l] > out ? m[l] : out;
  return out;
}

// s[j] <- exp((s[j] - m)) for j < n (n a multiple of kLanes); returns the sum of the results.
inline float exp_shifted(float* __restrict s, int64_t n, float m) {
  fvec sum{};
  for (int64_t j = 0; j < n; j += kLanes) {
    const fvec e = exp2_approx((vload(s + j) - m) * kLog2e);
    vstore(s + j, e);
    sum += e;
  }
  return hsum(sum);
}

// out[c] = float(in[c]) * scale for c < n: F16C's exact conversion for fp16 where the build has
// it (the portable to_float branches on the exponent and stays scalar), a shift for bf16.
template <typename T>
inline void convert_row(const T* __restrict in, int64_t n, float scale, float* __restrict out) {
  int64_t c = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, half_t>)
    for (; c + 16 <= n; c += 16) {
      // maskz: the unmasked form trips GCC 12's -Wmaybe-uninitialized inside its own header.
      const __m512 x = _mm512_maskz_cvtph_ps(
          __mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + c)));
      _mm512_storeu_ps(out + c, _mm512_mul_ps(x, _mm512_set1_ps(scale)));
    }
#endif
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, half_t>)
    for (; c + 8 <= n; c += 8) {
      const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c)));
      _mm256_storeu_ps(out + c, _mm256_mul_ps(x, _mm256_set1_ps(scale)));
    }
#endif
  for (; c < n; ++c) out[c] = to_float(in[c]) * scale;
}

// fp8 e4m3: through a 256-entry table of the exact values (the bit decoding branches).
template <>
inline void convert_row<e4m3_t>(const e4m3_t* __restrict in, int64_t n, float scale,
                                float* __restrict out) {
  static const struct Table {
    float v[256];
    Table() {
      for (int c = 0; c < 256; ++c) v[c] = to_float(e4m3_t{uint8_t(c)});
    }
  } table;
  for (int64_t c = 0; c < n; ++c) out[c] = table.v[in[c].bits] * scale;
}

// Rows of a tile loaded ahead of the row being converted (software prefetch of all its lines).
// A tile's rows are a head's slice of (seq, head, dim) rows, 2-4 KB apart, so each row is on its
// own page: the hardware prefetchers, which stay within a page, fetch none of them, and the first
// load of each row stalled (perf: 30% of the forward's own time outside the GEMMs, Zen 3).
// Prefetching the whole next tile at once did not help (docs/performance-log.md, issue 34);
// a few rows ahead keeps the misses in flight without flooding the miss buffers.
constexpr int64_t kPrefetchRows = 4;

template <typename T>
inline void prefetch_row(const T* row, int64_t d) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t byte = 0; byte < d * int64_t(sizeof(T)); byte += 64) __builtin_prefetch(p + byte);
}

// Load `rows` rows into a dense fp32 tile (rows_pad x ld), multiplied by `scale`; padding rows and
// columns become 0. Row r is at src(r) (a const T*), so that a tile of keys may span the pages of
// a paged cache.
template <typename T, typename RowAt>
void load_rows(const RowAt& src, int64_t rows, int64_t rows_pad, int64_t d, float scale,
               float* __restrict dst, int64_t ld) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    float* out = dst + r * ld;
    if (r + kPrefetchRows < rows) prefetch_row(src(r + kPrefetchRows), d);
    if (r < rows) {
      convert_row(src(r), d, scale, out);
      for (int64_t c = d; c < ld; ++c) out[c] = 0.f;
    } else {
      for (int64_t c = 0; c < ld; ++c) out[c] = 0.f;
    }
  }
}

// convert_row of one whole panel's run of a row: a count known when compiling, so that the fp32
// copy is inlined (convert_row's run-time count made it a memmove call per 64 bytes).
template <typename T>
inline void convert_panel_row(const T* __restrict in, float scale, float* __restrict out) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16_t>)
    for (int64_t c = 0; c < kPanelCols; ++c) out[c] = to_float(in[c]) * scale;
  else
    convert_row(in, kPanelCols, scale, out);  // fp16: F16C's conversion; fp8: the table
}

// load_rows into a packed (rows_pad x d_pad) matrix (packed_index): V as O += P V's B operand.
template <typename T, typename RowAt>
void load_rows_packed(const RowAt& src, int64_t rows, int64_t rows_pad, int64_t d, int64_t d_pad,
                      float scale, float* __restrict dst) {
  for (int64_t j = 0; j < d_pad; j += packed_width(j, d_pad)) {
    const int64_t w = packed_width(j, d_pad);
    const int64_t n = std::clamp<int64_t>(d - j, 0, w);  // columns of the input in this panel
    float* panel = dst + j * rows_pad;
    for (int64_t r = 0; r < rows_pad; ++r) {
      if (j == 0 && r + kPrefetchRows < rows) prefetch_row(src(r + kPrefetchRows), d);
      float* out = panel + r * w;
      const int64_t filled = r < rows ? n : 0;
      if (filled == kPanelCols) convert_panel_row(src(r) + j, scale, out);
      else if (filled) convert_row(src(r) + j, filled, scale, out);
      for (int64_t c = filled; c < w; ++c) out[c] = 0.f;
    }
  }
}

// load_rows transposed into a packed (d_pad x rows_pad) matrix: element (column c, row r) at
// packed_index(c, r, d_pad, rows_pad), times `scale`; padding is 0. (Q scale)ᵀ as Sᵀ = K Qᵀ's B.
template <typename T, typename RowAt>
void load_rows_t_packed(const RowAt& src, int64_t rows, int64_t rows_pad, int64_t d,
                        int64_t d_pad, float scale, float* __restrict dst) {
  std::fill(dst, dst + d_pad * rows_pad, 0.f);
  constexpr int64_t kChunk = 64;  // a row converted a chunk at a time, then scattered
  float row[kChunk];
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kPrefetchRows < rows) prefetch_row(src(r + kPrefetchRows), d);  // as in load_rows
    const T* in = src(r);
    const int64_t j = packed_panel(r, rows_pad), w = packed_width(j, rows_pad);
    float* out = dst + j * d_pad + (r - j);  // element (c, r) at out[c w]
    for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
      const int64_t n = std::min(kChunk, d - c0);
      convert_row(in + c0, n, scale, row);
      for (int64_t c = 0; c < n; ++c) out[(c0 + c) * w] = row[c];
    }
  }
}

// Rows [row0, row0 + rows) of head h of a (seq, head, dim) view.
template <typename T>
void load_tile(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t rows_pad, int64_t h,
               int64_t d, float scale, float* __restrict dst, int64_t ld) {
  load_rows<T>([&](int64_t r) { return v.at<T>(b, row0 + r, h); }, rows, rows_pad, d, scale, dst,
               ld);
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
    case DType::E4M3: return load_tile<e4m3_t>(v, b, row0, rows, rows_pad, h, d, scale, dst, ld);
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
    case DType::E4M3: break;  // an input dtype only: validation gives fp8 calls a 16-bit out
  }
}

// True when attn_bias is a mask whose every element of query rows [i0, i0 + rows) and keys
// [j0, j0 + cols) of (b, h) is 0: the tile adds nothing and the kernels skip it (stops at the
// first element that is seen).
inline bool mask_hides_tile(const Params::Bias& bias, int64_t b, int64_t h, int64_t i0,
                            int64_t rows, int64_t j0, int64_t cols) {
  if (bias.kind != Params::Bias::Kind::Mask) return false;
  for (int64_t r = 0; r < rows; ++r) {
    const unsigned char* x =
        static_cast<const unsigned char*>(bias.data) + bias.offset(b, h, i0 + r, j0);
    for (int64_t j = 0; j < cols; ++j)
      if (x[j * bias.stride_k] != 0) return false;
    if (bias.stride_q == 0) break;  // every row is this one
  }
  return true;
}

// s (rows x cols of a tile: element (r, j) at s[r ld + j cs]) += the attn_bias of query rows
// [i0, i0 + rows) and keys [j0, j0 + cols) of (b, h), both counted from the sequence's start; a
// mask's 0 sets -inf (the key is not seen). cs = 1 for a (query, key) tile; the forward's
// transposed (key, query) tile passes ld = 1 and cs = its row length.
inline void add_bias(const Params::Bias& bias, int64_t b, int64_t h, int64_t i0, int64_t rows,
                     int64_t j0, int64_t cols, float* __restrict s, int64_t ld, int64_t cs = 1) {
  using Kind = Params::Bias::Kind;
  const int64_t sk = bias.stride_k;
  constexpr int64_t kChunk = 64;  // a contiguous 16-bit row converted a chunk at a time
  [[maybe_unused]] float row[kChunk];
  for (int64_t r = 0; r < rows; ++r) {
    float* out = s + r * ld;
    const int64_t o = bias.offset(b, h, i0 + r, j0);
    switch (bias.kind) {
      case Kind::None: return;
      case Kind::F32: {
        const float* x = static_cast<const float*>(bias.data) + o;
        for (int64_t j = 0; j < cols; ++j) out[j * cs] += x[j * sk];
        break;
      }
      case Kind::F16:
      case Kind::BF16: {
        const bool half = bias.kind == Kind::F16;
        const half_t* xh = static_cast<const half_t*>(bias.data) + o;
        const bfloat16_t* xb = static_cast<const bfloat16_t*>(bias.data) + o;
        for (int64_t j0c = 0; j0c < cols; j0c += kChunk) {
          const int64_t n = std::min(kChunk, cols - j0c);
          if (sk == 1 && half) convert_row(xh + j0c, n, 1.f, row);
          else if (sk == 1) convert_row(xb + j0c, n, 1.f, row);
          else
            for (int64_t j = 0; j < n; ++j)
              row[j] = half ? to_float(xh[(j0c + j) * sk]) : to_float(xb[(j0c + j) * sk]);
          for (int64_t j = 0; j < n; ++j) out[(j0c + j) * cs] += row[j];
        }
        break;
      }
      case Kind::Mask: {
        const unsigned char* x = static_cast<const unsigned char*>(bias.data) + o;
        for (int64_t j = 0; j < cols; ++j)
          if (x[j * sk] == 0) out[j * cs] = kNegInf;
        break;
      }
    }
  }
}

}  // namespace fa::cpu::FA_CPU_ISA
