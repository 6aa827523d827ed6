// The CPU flash backend's one GEMM micro-kernel (see tile.h), compiled per instruction set.
//
// Written with GCC/Clang vector extensions rather than plain loops: the auto-vectoriser chose the
// k loop (gathers and spills, ~2.5 GFLOP/s a core, measured); an explicit kLanes-wide type keeps
// the (rows x vectors) accumulator tile in registers - ymm with -mavx2, zmm with -mavx512f, two
// xmm per vector in the generic build. A tile's edges (M % kMicroRows, N % (kMicroVecs kLanes))
// take the same body with fewer rows or vectors.
// The micro-kernel's k loop (~80 bytes of code) starts on a 32-byte boundary: GCC's default
// (16) let its position follow unrelated code, and a build where the loop started 16 bytes past
// a boundary ran the unchanged backward 18% slower (Zen 3, A/B in one session). Clang aligns
// its own way and does not know the pragma.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("align-loops=32")
#endif

#include "cpu/tile.h"

namespace fa::cpu::FA_CPU_ISA {
namespace {

// C[0..R) x [0..V kLanes) = [C +] A[0..R) x [0..K) * B[0..K) x [0..V kLanes). A is row-major
// (element (r, k) at a[r lda + k]) or, with kAt, given transposed (at a[k lda + r]: the R values
// a step broadcasts are then one contiguous run). B's rows are ldb floats apart (a packed panel's:
// V kLanes).
template <int R, int V, bool kAt>
inline void micro(int64_t K, const float* __restrict a, int64_t lda, const float* __restrict b,
                  int64_t ldb, float* __restrict c, int64_t ldc, bool accumulate) {
  // acc: (R, V kLanes) fp32 in registers.
  fvec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = accumulate ? vload(c + r * ldc + v * kLanes) : fvec{};
  for (int64_t k = 0; k < K; ++k, b += ldb) {
    fvec bv[V];
    for (int v = 0; v < V; ++v) bv[v] = vload(b + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const float ar = kAt ? a[k * lda + r] : a[r * lda + k];
      for (int v = 0; v < V; ++v) acc[r][v] += ar * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) vstore(c + r * ldc + v * kLanes, acc[r][v]);
}

// One panel of V vectors of columns over all M rows: bands of kMicroRows rows while they leave a
// multiple of 4 rows (kBandRows), then bands of 4 (M % 4 == 0).
template <int V, bool kAt>
inline void panel(int64_t M, int64_t K, const float* __restrict A, int64_t lda,
                  const float* __restrict b, int64_t ldb, float* __restrict c, int64_t ldc,
                  bool accumulate) {
  const auto rows_of_a = [&](int64_t i) { return kAt ? A + i : A + i * lda; };
  const int64_t banded = M / kBandRows * kBandRows;
  int64_t i = 0;
  for (; i < banded; i += kMicroRows)
    micro<kMicroRows, V, kAt>(K, rows_of_a(i), lda, b, ldb, c + i * ldc, ldc, accumulate);
  if constexpr (kMicroRows > 4)
    for (; i < M; i += 4) micro<4, V, kAt>(K, rows_of_a(i), lda, b, ldb, c + i * ldc, ldc, accumulate);
}

// Column panels outer, row bands inner: a step of the micro-kernel reads kMicroVecs vectors of
// B (64 bytes on AVX2) against kMicroRows floats of A, so it is B's panel (K x kMicroVecs
// kLanes, 8 KB at K = 64 on AVX2) that must stay in L1 across the bands; A is streamed. The
// other order (bands outer) re-read all of B from L2 for every band. Each element of C sums
// over k in the same order either way: the same bits. With kPackedB, B is packed (tile.h) and
// its panel at column j is the K x width run starting at B + j K.
template <bool kAt, bool kPackedB>
void gemm_any(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
              const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
              bool accumulate) {
  const auto panel_of_b = [&](int64_t j) { return kPackedB ? B + j * K : B + j; };
  int64_t j = 0;
  for (; j + kPanelCols <= N; j += kPanelCols)
    panel<kMicroVecs, kAt>(M, K, A, lda, panel_of_b(j), kPackedB ? kPanelCols : ldb, C + j, ldc,
                           accumulate);
  for (; j < N; j += kLanes)
    panel<1, kAt>(M, K, A, lda, panel_of_b(j), kPackedB ? kLanes : ldb, C + j, ldc, accumulate);
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
          const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
          bool accumulate) {
  gemm_any<false, false>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_at(int64_t M, int64_t N, int64_t K, const float* __restrict At, int64_t lda,
             const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
             bool accumulate) {
  gemm_any<true, false>(M, N, K, At, lda, B, ldb, C, ldc, accumulate);
}

void gemm_packed_b(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
                   const float* __restrict Bp, float* __restrict C, int64_t ldc, bool accumulate) {
  gemm_any<false, true>(M, N, K, A, lda, Bp, 0, C, ldc, accumulate);
}

void gemm_at_packed_b(int64_t M, int64_t N, int64_t K, const float* __restrict At, int64_t lda,
                      const float* __restrict Bp, float* __restrict C, int64_t ldc,
                      bool accumulate) {
  gemm_any<true, true>(M, N, K, At, lda, Bp, 0, C, ldc, accumulate);
}

}  // namespace fa::cpu::FA_CPU_ISA
