// The CPU flash backend's one GEMM micro-kernel (see tile.h), compiled per instruction set.
//
// Written with GCC/Clang vector extensions rather than plain loops: the auto-vectoriser chose the
// k loop (gathers and spills, ~2.5 GFLOP/s a core, measured); an explicit 8-wide type keeps the
// (kMicroRows x kMicroCols) accumulator tile in registers - one AVX register per 8 columns with
// -mavx2, two SSE registers each in the generic build.
#include "cpu/tile.h"

namespace fa::cpu::FA_CPU_ISA {
namespace {
constexpr int kVecCols = kMicroCols / kLanes;
static_assert(kMicroCols % kLanes == 0, "micro-kernel columns must be whole vectors");
}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* __restrict A, int64_t lda,
          const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
          bool accumulate) {
  for (int64_t i = 0; i < M; i += kMicroRows) {
    for (int64_t j = 0; j < N; j += kMicroCols) {
      // acc: (kMicroRows, kMicroCols) fp32 in registers.
      f32x8 acc[kMicroRows][kVecCols];
      for (int r = 0; r < kMicroRows; ++r)
        for (int v = 0; v < kVecCols; ++v)
          acc[r][v] = accumulate ? load8(C + (i + r) * ldc + j + v * kLanes) : f32x8{};
      const float* a = A + i * lda;
      const float* b = B + j;
      for (int64_t k = 0; k < K; ++k, b += ldb) {
        f32x8 bv[kVecCols];
        for (int v = 0; v < kVecCols; ++v) bv[v] = load8(b + v * kLanes);
        for (int r = 0; r < kMicroRows; ++r) {
          const float ar = a[r * lda + k];
          for (int v = 0; v < kVecCols; ++v) acc[r][v] += ar * bv[v];
        }
      }
      for (int r = 0; r < kMicroRows; ++r)
        for (int v = 0; v < kVecCols; ++v) store8(C + (i + r) * ldc + j + v * kLanes, acc[r][v]);
    }
  }
}

}  // namespace fa::cpu::FA_CPU_ISA
