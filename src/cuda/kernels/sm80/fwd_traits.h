// Configuration of the sm80-family forward kernel: one traits struct per (head_dim, element type).
#pragma once

#include "cuda/tile/swizzle.h"

#ifndef FA_SM80_FWD_BLOCK_N_D128
#define FA_SM80_FWD_BLOCK_N_D128 32
#endif
#ifndef FA_SM80_FWD_BLOCK_N_D64
#define FA_SM80_FWD_BLOCK_N_D64 64
#endif
#ifndef FA_SM80_FWD_MIN_BLOCKS_D64
#define FA_SM80_FWD_MIN_BLOCKS_D64 1
#endif
#ifndef FA_SM80_FWD_BLOCK_N_D192
#define FA_SM80_FWD_BLOCK_N_D192 32
#endif
#ifndef FA_SM80_FWD_MTILES_D128
#define FA_SM80_FWD_MTILES_D128 2
#endif
#ifndef FA_SM80_FWD_MIN_BLOCKS_D128
#define FA_SM80_FWD_MIN_BLOCKS_D128 1
#endif
#ifndef FA_SM80_FWD_MIN_BLOCKS_D32
#define FA_SM80_FWD_MIN_BLOCKS_D32 3
#endif

namespace fa::cuda::sm80 {

template <int kHeadDim_, typename Tag_>
struct FwdTraits {
  using Tag = Tag_;  // Bf16Tag or Fp16Tag: picks the mma and conversion instructions
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "instantiated head dims are multiples of 32 up to 256; others round up");

  // Each warp owns kMTiles m16 row tiles and reuses every K/V fragment it loads from shared
  // memory for all of them: with one tile a warp issues one ldmatrix.x4 per two mma (measured at
  // d = 128: 0.55-0.58x PyTorch's FA2, even with 3 blocks per SM); two tiles halve the
  // shared-memory traffic per mma (0.75x). Above d = 128 the O accumulator of two tiles
  // (2 x d/2 fp32 registers) no longer fits, so those dims keep one.
  static constexpr int kMTiles = kHeadDim == 128 ? FA_SM80_FWD_MTILES_D128 : kHeadDim < 128 ? 2 : 1;
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  // Four warps, as FlashAttention-2 uses: 128 rows (64 above d = 128) share each K/V tile.
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kRowsPerWarp * kWarps;
  // Keys per step: S costs kMTiles * kBlockN / 2 fp32 registers a thread. 64 up to d = 96;
  // at d = 128 the 128-register O leaves room for 32 with few spills (64 spills 140 bytes and
  // measured the same). Above d = 128 (one m-tile): 32, so that K/V stages stay small enough for
  // two blocks per SM - at d = 160 / 192, 64 keys took 120 KB of shared memory (one block) and
  // measured 18-20% slower (H200, bf16 16k: 159 -> 188 and 168 -> 202 TFLOP/s). The
  // FA_SM80_FWD_BLOCK_N_* macros override these choices for tuning runs (bench/gpu_tune.sh).
  static constexpr int kBlockN = kHeadDim <= 32    ? 64
                                 : kHeadDim <= 64 ? FA_SM80_FWD_BLOCK_N_D64
                                 : kHeadDim <= 96 ? 64
                                 : kHeadDim == 128 ? FA_SM80_FWD_BLOCK_N_D128
                                 : kHeadDim <= 192 ? FA_SM80_FWD_BLOCK_N_D192
                                                   : 32;
  // Blocks per SM the register allocation must allow (__launch_bounds__). 1 lets a block use
  // 255 registers (two blocks fit anyway); 3 caps it at 168 for 12 warps an SM. d = 32 fits 168
  // without spilling and measured +19% (176 -> 210 TFLOP/s, bf16 16k, H200). d = 64 spills at
  // 168 (124 B) and measured +1.6%, within noise; with 32 keys a step to fit, -2%: it keeps 1.
  // The FA_SM80_FWD_* macros override these choices for tuning runs (bench/gpu_tune.sh).
  static constexpr int kMinBlocksPerSm = kHeadDim <= 32   ? FA_SM80_FWD_MIN_BLOCKS_D32
                                         : kHeadDim <= 64 ? FA_SM80_FWD_MIN_BLOCKS_D64
                                         : kHeadDim == 128 ? FA_SM80_FWD_MIN_BLOCKS_D128
                                                          : 1;
  // Two K/V stages: tile j+1 streams in (cp.async) while tile j is computed.
  static constexpr int kStages = 2;

  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  static constexpr int kSmemElems = QTile::kElems + 2 * kStages * KvTile::kElems;
  static constexpr int kSmemBytes = kSmemElems * 2;
  // A100 (sm80) allows 163 KB of shared memory per block, the smallest of the family.
  static_assert(kSmemBytes <= 163 * 1024, "tile configuration exceeds sm80 shared memory");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "mma k-steps are 16 wide");
};

}  // namespace fa::cuda::sm80
