// Configuration of the cuda-sm75 forward (Turing: T4, RTX 2080 Ti, Quadro RTX): one traits struct
// per head dim and dropout, fp16 only (Turing's tensor cores have no bf16).
//
// Turing's budget sets the tiles: 64 KB of shared memory per SM (and at most 64 KB a block),
// 64 K registers per SM (255 a thread), 1024 threads per SM, and no cp.async: K and V go global ->
// registers -> shared memory (fwd_kernel.cuh), so a tile's next K or V occupies registers while
// the current one computes. The figures below come from that arithmetic and ptxas's register
// counts; none has been measured on a Turing GPU (docs/cuda-kernels.md says what has run).
// Host-testable (tests/test_sm75_plan.cpp): nothing here needs a device compiler.
#pragma once

#include "cuda/tile/swizzle.h"

namespace fa::cuda {
struct Fp16K8Tag;  // cuda/arch/mma.cuh: fp16 as m16n8k8 pairs (declared here for host tests)
}  // namespace fa::cuda

namespace fa::cuda::sm75 {

// Shared memory a Turing block may use (the opt-in limit of sm75, which is also an SM's total).
constexpr int kSmemPerBlock = 64 * 1024;

template <int kHeadDim_, bool kDropout_ = false>
struct FwdTraits {
  using Tag = Fp16K8Tag;  // m16n8k8 pairs for each k16 step; fp16 packing without cvt.f16x2
  static constexpr int kHeadDim = kHeadDim_;
  // Dropout in its own kernel, as in the sm80 family: the others carry none of its registers.
  static constexpr bool kDropout = kDropout_;
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "instantiated head dims are multiples of 32 up to 256; others round up");

  // m16 row tiles a warp owns. Two up to d = 64, where O and S stay small (64 + 64 fp32
  // registers at d = 64) and each K / V fragment then serves both; one above, so that O (d / 2
  // registers) plus the staged K / V chunks fit 255 registers and two blocks share an SM.
  static constexpr int kMTiles = kHeadDim <= 64 ? 2 : 1;
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  // Four warps a block: at 2 blocks an SM that is 8 warps, Turing's 1024-thread SM holds more
  // but shared memory (64 KB) caps the blocks first.
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kRowsPerWarp * kWarps;
  // Keys a step: 64 up to d = 64 (Q 16 KB + K 8 KB + V 8 KB, two blocks an SM); 32 above, the
  // least that whole dropout blocks allow (apply_dropout: 32-key Philox blocks), so that d 96 /
  // 128 keep two blocks an SM (32 KB each) and d 256 fits at all (Q 32 KB + K 16 + V 16 = 64 KB).
  // Dropout kernels take 32 at every dim: its Philox state beside 64 keys' S spilled at d = 64
  // (ptxas, sm_75: 152 bytes; none with 32).
  static constexpr int kBlockN = kHeadDim <= 64 && !kDropout ? 64 : 32;
  // K / V staged in parts: a tile's copy waits in kPasses x 4 registers a thread (tile_stage.cuh),
  // 32 at d 256 in one part; next to O's d / 2 that spilled 136-232 bytes at d 192-256 (ptxas,
  // sm_75). The wide dims stage a quarter of a tile at a time (8 rows, 8 registers at d 256),
  // each next part's loads issued a quarter further through the GEMM that hides the previous
  // part's (halves still spilled: 8-344 bytes).
  static constexpr int kStageParts = kHeadDim > 128 ? 4 : 1;
  // Blocks an SM the register allocation must allow: 2 wherever shared memory lets two blocks
  // share an SM (255 registers x 256 threads is the 64 K of the SM); the wide dims hold one.
  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  // One K and one V buffer: the next tile waits in registers, not in a second stage.
  static constexpr int kSmemElems = QTile::kElems + 2 * KvTile::kElems;
  static constexpr int kSmemBytes = kSmemElems * 2;
  static constexpr int kMinBlocksPerSm = 2 * kSmemBytes <= kSmemPerBlock ? 2 : 1;

  static_assert(kSmemBytes <= kSmemPerBlock, "tile configuration exceeds Turing's 64 KB");
  static_assert(kBlockN % 32 == 0, "whole 32-key dropout blocks a tile");
  static_assert((kBlockN / kStageParts) % 8 == 0, "staged parts of whole swizzle periods");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "k-steps are 16 wide (two m16n8k8)");
};

}  // namespace fa::cuda::sm75
