// The forward's dropout of one tile of P in the mma C-fragment layout (mma.sync m16n8 tiles, and
// the wgmma m64nN accumulators, whose 16-row warp slices have the same layout): shared by the
// sm80 and sm90 families, so that both keep the CPU backend's keep-mask bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/philox.h"

namespace fa::cuda {

// Dropout of one tile's P (kDropout kernels), after the row sums took the undropped P: element
// (row, key) is kept with the slice core/philox.h assigns it, so the keep-mask is the CPU
// backend's bit for bit. Dropped elements become 0; kept ones stay unscaled, and the epilogue
// multiplies O by 1 / (1 - p) in fp32 (scaling P first would round P / (1 - p) to 16 bits: a
// 0.1% bias in bf16 that shows in the backward's D = rowsum(dO ∘ O)). Lane (g, t) holds rows
// g, g + 8 of each m-tile and keys 8 nt + 2t + e (e < 2) of each n-tile: for each m-tile, 32-key
// group and e, the eight elements of one Philox block (rows g + 8 a, n-tiles 4 jb + c), so it
// evaluates its own blocks and exchanges nothing (the tile starts on a 32-key boundary).
struct FwdDropout {
  DropoutStream drop;
  uint32_t bh;  // b * heads_q + h: the stream's matrix
  int row_g;    // this thread's first row in the sequence (rows fit 32 bits: validation)
};

template <int kMTiles, int kBlockN>
__device__ __forceinline__ void apply_dropout(const FwdDropout& dr, int n0,
                                              float (&s)[kMTiles][kBlockN / 8][4], int lane) {
  constexpr int kCols = int(DropoutStream::kCols);  // keys a Philox block spans
  static_assert(kBlockN % kCols == 0, "key tiles of whole dropout blocks");
  const int t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int jb = 0; jb < kBlockN / kCols; ++jb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const Philox4 w = dr.drop.block(dr.bh, uint32_t(dr.row_g + 16 * mt),
                                        uint32_t(n0 + kCols * jb + 2 * t + e));
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (!dr.drop.keep_in(w, a, c)) s[mt][4 * jb + c][2 * a + e] = 0.f;
      }
}

}  // namespace fa::cuda
