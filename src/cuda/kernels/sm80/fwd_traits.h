// Configuration of the sm80-family forward kernel: one traits struct per (head_dim, element type).
#pragma once

#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm80 {

template <int kHeadDim_, typename Tag_>
struct FwdTraits {
  using Tag = Tag_;  // Bf16Tag or Fp16Tag: picks the mma and conversion instructions
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "instantiated head dims are multiples of 32 up to 256; others round up");

  // 16 query rows per warp: one m16 tile, so each thread owns 2 rows of S and O.
  static constexpr int kRowsPerWarp = 16;
  // 8 warps: 128 query rows share every K/V tile brought into shared memory.
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kRowsPerWarp * kWarps;
  // Keys per step: 64 keeps S at 32 fp32 registers a thread; at d > 128 the O accumulator alone
  // is 64+ registers, so 32 keys keep the K/V stages (and registers) in budget.
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;
  // Two K/V stages: tile j+1 streams in (cp.async) while tile j is computed.
  static constexpr int kStages = 2;
  // Q fragments stay in registers up to d = 128 (d/4 registers); above, they are re-read from
  // shared memory each step, which costs ldmatrix bandwidth but avoids spills.
  static constexpr bool kQInRegs = kHeadDim <= 64;

  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  static constexpr int kSmemElems = QTile::kElems + 2 * kStages * KvTile::kElems;
  static constexpr int kSmemBytes = kSmemElems * 2;
  // A100 (sm80) allows 163 KB of shared memory per block, the smallest of the family.
  static_assert(kSmemBytes <= 163 * 1024, "tile configuration exceeds sm80 shared memory");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "mma k-steps are 16 wide");
};

}  // namespace fa::cuda::sm80
