// Configuration of the sm80-family forward kernel: one traits struct per (head_dim, element type).
//
// Every choice below was measured on the H200 against PyTorch's FlashAttention-2 in the same run
// (bf16, the standard grid; docs/performance.md has the records). The FA_SM80_FWD_* macros
// override a choice for tuning runs (bench/ab.sh cmake builds a second library with them); the
// defaults are the measured winners.
#pragma once

#include "cuda/tile/swizzle.h"

#ifndef FA_SM80_FWD_BLOCK_N_D32
#define FA_SM80_FWD_BLOCK_N_D32 48
#endif
#ifndef FA_SM80_FWD_BLOCK_N_D64
#define FA_SM80_FWD_BLOCK_N_D64 64
#endif
#ifndef FA_SM80_FWD_BLOCK_N_D96
#define FA_SM80_FWD_BLOCK_N_D96 32
#endif
#ifndef FA_SM80_FWD_BLOCK_N_D128
#define FA_SM80_FWD_BLOCK_N_D128 32
#endif
#ifndef FA_SM80_FWD_BLOCK_N_WIDE
#define FA_SM80_FWD_BLOCK_N_WIDE 64
#endif
// Pipeline numbers (enum Pipeline below): 0 two-stage, 1 split, 2 overlapped.
#ifndef FA_SM80_FWD_PIPELINE_SMALL
#define FA_SM80_FWD_PIPELINE_SMALL 0
#endif
#ifndef FA_SM80_FWD_PIPELINE_D128
#define FA_SM80_FWD_PIPELINE_D128 2
#endif
#ifndef FA_SM80_FWD_PIPELINE_WIDE
#define FA_SM80_FWD_PIPELINE_WIDE 1
#endif
#ifndef FA_SM80_FWD_WARPS_WIDE
#define FA_SM80_FWD_WARPS_WIDE 4
#endif
#ifndef FA_SM80_FWD_MTILES_D128
#define FA_SM80_FWD_MTILES_D128 2
#endif
#ifndef FA_SM80_FWD_MIN_BLOCKS_D32
#define FA_SM80_FWD_MIN_BLOCKS_D32 3
#endif
#ifndef FA_SM80_FWD_MIN_BLOCKS_D64
#define FA_SM80_FWD_MIN_BLOCKS_D64 1
#endif
#ifndef FA_SM80_FWD_MIN_BLOCKS_D128
#define FA_SM80_FWD_MIN_BLOCKS_D128 1
#endif

namespace fa::cuda::sm80 {

// How K/V tiles stream through shared memory (cp.async) against the compute of a tile j.
enum class Pipeline {
  // Two stages of (K, V): tile j+1 loads while tile j computes; one barrier per tile.
  kTwoStage = 0,
  // FlashAttention-2's scheme, one K and one V buffer: V(j) loads during Q·K(j)ᵀ, K(j+1) during
  // the softmax and P·V(j); two barriers per tile, half the K/V shared memory.
  kSplit = 1,
  // Three stages: P(j)·V(j) is issued interleaved with Q·K(j+1)ᵀ, so that Q·Kᵀ's few
  // accumulator chains are not the only mma in flight (fwd_tile.cuh, qk_pv_fused); tile j+2
  // loads meanwhile. One barrier per tile.
  kOverlap = 2,
};

template <int kHeadDim_, typename Tag_, bool kDropout_ = false, bool kBias_ = false>
struct FwdTraits {
  using Tag = Tag_;  // Bf16Tag or Fp16Tag: picks the mma and conversion instructions
  static constexpr int kHeadDim = kHeadDim_;
  // Dropout on P before P·V (a separate kernel, so the kernels without it carry none of its
  // registers or instructions).
  static constexpr bool kDropout = kDropout_;
  // The attention bias or mask (Params::Bias) added to the logits: separate kernels too, run
  // only for calls with one (run_fwd). Any bias code in the key loop, taken or not, moved
  // ptxas's allocation enough to spill in the plain kernels (sm_80: 40 bytes at d 32, 64 at
  // d 64; the dropout kernel at d 128 8 -> 36), so the kernels without it contain none. Tiles,
  // pipeline and launch bounds are those of the kernel without it.
  static constexpr bool kBias = kBias_;
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "instantiated head dims are multiples of 32 up to 256; others round up");
  // "Wide" head dims: the O accumulator of two m-tiles (2 x d/2 fp32 registers) no longer fits.
  static constexpr bool kWide = kHeadDim > 128;

  // Each warp owns kMTiles m16 row tiles and reuses every K/V fragment it loads from shared
  // memory for all of them: with one tile a warp issues one ldmatrix.x4 per two mma (measured at
  // d = 128: 0.55-0.58x PyTorch's FA2, even with 3 blocks per SM); two tiles halve the
  // shared-memory traffic per mma. Wide dims keep one.
  static constexpr int kMTiles = kHeadDim == 128 ? FA_SM80_FWD_MTILES_D128 : kWide ? 1 : 2;
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  // Four warps: 128 query rows (64 for wide dims) share each K/V tile. Eight warps at d = 256
  // (128 rows, FA2's choice) measured 0.85-0.98x against four warps' 0.90-1.16x: one such block
  // fills an SM's registers, and its 8 warps then stall together at every barrier.
  static constexpr int kWarps = kWide ? FA_SM80_FWD_WARPS_WIDE : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kRowsPerWarp * kWarps;
  // Keys per step; S costs kMTiles * kBlockN / 2 fp32 registers a thread.
  //  d = 32: 48, the most that fits the 168-register cap of three blocks per SM unspilled.
  //  d = 64: 64 (96 spilled inside the loop once the mask became per-warp, 1.00-1.08x vs
  //  0.94-1.06x in the same run).  d = 96: 32, the only choice without spills next to its
  //  96-register O.  d = 128: 32 next to the 128-register O (48: 0.90-1.00x, 64: 0.89-0.95x,
  //  both spill; 32: 0.89-1.03x).  Wide: 64 with the split pipeline below.
  //  Dropout: whole 32-key blocks of the keep-mask (apply_dropout), so 32 at d = 32.
  static constexpr int kBlockN = kHeadDim <= 32    ? (kDropout ? 32 : FA_SM80_FWD_BLOCK_N_D32)
                                 : kHeadDim <= 64 ? FA_SM80_FWD_BLOCK_N_D64
                                 : kHeadDim <= 96 ? FA_SM80_FWD_BLOCK_N_D96
                                 : kHeadDim == 128 ? FA_SM80_FWD_BLOCK_N_D128
                                                   : FA_SM80_FWD_BLOCK_N_WIDE;
  // Blocks per SM the register allocation must allow (__launch_bounds__). 1 lets a block use
  // 255 registers (two blocks fit anyway); 3 caps it at 168 for 12 warps an SM. d = 32 fits 168
  // without spilling and measured +19% (176 -> 210 TFLOP/s, bf16 16k, H200); at d = 64 the cap
  // spills and measured within noise, at d = 128 it costs the second m-tile (0.57x).
  static constexpr int kMinBlocksPerSm = kHeadDim <= 32   ? FA_SM80_FWD_MIN_BLOCKS_D32
                                         : kHeadDim <= 64 ? FA_SM80_FWD_MIN_BLOCKS_D64
                                         : kHeadDim == 128 ? FA_SM80_FWD_MIN_BLOCKS_D128
                                                          : 1;
  // K/V pipeline (Pipeline, above), measured against each other in one session (H200, bf16,
  // 1k / 4k / 16k, ratio to FA2): d = 128 overlapped 0.93 / 1.01 / 1.02 (causal 0.91 / 1.00 /
  // 1.03) against two-stage 0.90 / 0.95 / 0.98 (0.88 / 0.95 / 0.99); d = 64 the reverse,
  // two-stage 0.99 / 1.06 / 1.07 against overlapped 0.95 / 1.01 / 1.03 - with half the head dim
  // P·V has fewer units to interleave and the third stage costs a block's worth of shared
  // memory traffic for nothing. d < 128 keep two-stage (d = 32, 96 unmeasured this way; both
  // run without spills). Wide dims use the split scheme to run 64 keys with two blocks per SM
  // (d = 256: Q 32 KB + K 32 KB + V 32 KB; 0.90-1.16x FA2 against 0.76-0.98x with 32 keys
  // double-buffered); three stages of 64 wide keys would not fit.
  static constexpr Pipeline kPipeline = kWide             ? Pipeline(FA_SM80_FWD_PIPELINE_WIDE)
                                        : kHeadDim == 128 ? Pipeline(FA_SM80_FWD_PIPELINE_D128)
                                                          : Pipeline(FA_SM80_FWD_PIPELINE_SMALL);
  static constexpr int kStages = kPipeline == Pipeline::kOverlap ? 3
                                 : kPipeline == Pipeline::kSplit  ? 1
                                                                  : 2;

  // Q copied by every block, and a barrier before the epilogue of a block without key tiles
  // (859fe60's form is the reverse: Q copied only with key tiles, no barrier). 859fe60 measured
  // d = 128 +2-6% but changed the d = 256 kernel's allocation (its SASS; f762ca1 quick grid
  // 0.91 / 1.02 / 1.00 of FA2 at 1k / 4k / 16k against 288fb00's 0.83 / 0.91 / 0.92): the wide
  // dims keep the form before it: their kernels' SASS (d = 160 / 192 / 224 / 256, sm_90a) is
  // then f762ca1's instruction for instruction. Not for dropout (those kernels came later;
  // their form is the tested one).
  static constexpr bool kQAlways = kWide && !kDropout;

  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  static constexpr int kSmemElems = QTile::kElems + 2 * kStages * KvTile::kElems;
  static constexpr int kSmemBytes = kSmemElems * 2;
  // A100 (sm80) allows 163 KB of shared memory per block, the smallest of the family.
  static_assert(kSmemBytes <= 163 * 1024, "tile configuration exceeds sm80 shared memory");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "mma k-steps are 16 wide");
};

}  // namespace fa::cuda::sm80
