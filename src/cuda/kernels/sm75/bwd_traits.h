// Configuration of the cuda-sm75 backward (bwd_kernel.cuh): one traits struct per head dim and
// dropout, fp16 only. It has the fields the sm80 backward's step parts read (sm80/bwd_step.cuh,
// sm80/bwd_epilogue.cuh, sm80/bwd_prepost.cuh's postprocess), sized for Turing: 64 KB of shared
// memory per SM (and a block), 255 registers a thread, no cp.async or TMA. None of these figures
// has been measured on a Turing GPU; they come from the arithmetic below and ptxas.
// Host-testable (tests/test_sm75_plan.cpp): nothing here needs a device compiler.
#pragma once

#include "cuda/kernels/sm75/fwd_traits.h"  // kSmemPerBlock, Fp16K8Tag
#include "cuda/kernels/sm80/dq_layout.h"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm75 {

// The largest head dim the backward serves: above 128 one block's K, V, Q, dO, Pᵀ and dSᵀ tiles
// pass 64 KB at every tile size whose warp tiles stay whole (d 160: 32 keys x 64 queries need
// 2 x 10 + 2 x 20 + 8 = 68 KB). Those calls are refused by name (bwd_sm75.cu).
constexpr int kBwdMaxHeadDim = 128;

template <int kHeadDim_, bool kDropout_ = false>
struct BwdTraits {
  using Tag = Fp16K8Tag;  // m16n8k8 pairs for each k16 step; fp16 packing without cvt.f16x2
  static constexpr int kHeadDim = kHeadDim_;
  // The keep-mask's Philox state in its own kernel, as in the sm80 family.
  static constexpr bool kDropout = kDropout_;
  static constexpr bool kBias = false;     // no attention bias on Turing (as the forward)
  static constexpr bool kLseD16 = false;   // LSE and D in two arrays (sm80's d > 128 order: unused)
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 32 && kHeadDim <= kBwdMaxHeadDim,
                "instantiated head dims: multiples of 32 up to kBwdMaxHeadDim");
  // Four warps, as the forward: at 255 registers a thread two such blocks fill an SM's 64 K
  // registers, and the tiles below are too small to give eight warps whole fragments each.
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  // Queries a step: 64, the sm80 family's step (sm80::kBwdBlockM: the workspace counts the
  // deterministic semaphores in such tiles; bwd_launch.cuh asserts the two equal).
  static constexpr int kBlockM = 64;
  // Keys a block: 64 up to d = 64 (K, V, Q, dO 8 KB each, Pᵀ and dSᵀ 8 KB each: 48.5 KB);
  // 32 at d = 96 / 128, where 64 keys would need 80.5 KB (K, V, Q, dO 16 KB each).
  static constexpr int kBlockN = kHeadDim <= 64 ? 64 : 32;
  // Sᵀ / dPᵀ: 32 keys x 32 queries a warp (2 x 2) at 64 keys, 32 x 16 (1 x 4) at 32: whole
  // 32-key dropout blocks a warp tile (sm80::keep_bits) either way.
  static constexpr int kSWarpsN = kBlockN / 32, kSWarpsM = kWarps / kSWarpsN;
  static constexpr int kSKeys = kBlockN / kSWarpsN, kSQueries = kBlockM / kSWarpsM;
  // dK / dV (held across the block's steps): 2 x 2 warps, kBlockN / 2 keys x d / 2 columns, 32
  // fp32 registers a thread each at d = 64 and at d = 128.
  static constexpr int kKvWarpsN = 2, kKvWarpsD = kWarps / kKvWarpsN;
  static constexpr int kKvKeys = kBlockN / kKvWarpsN, kKvCols = kHeadDim / kKvWarpsD;
  // dQ of a step (kBlockM x d): the most square whole-fragment split, as sm80's dq_cost.
  static constexpr int kNoSplit = 1 << 20;
  static constexpr int dq_cost(int wm) {
    return kBlockM % (16 * wm) != 0 || kHeadDim % (16 * (kWarps / wm)) != 0
               ? kNoSplit
               : kBlockM / wm / 16 + kHeadDim / (kWarps / wm) / 16;
  }
  static constexpr int kDqWarpsM = dq_cost(2) <= dq_cost(4) ? 2 : 4;
  static constexpr int kDqWarpsD = kWarps / kDqWarpsM;
  static constexpr int kDqRows = kBlockM / kDqWarpsM, kDqCols = kHeadDim / kDqWarpsD;
  using DqLayout = sm80::DqTileLayout<kDqRows, kDqCols, kDqWarpsM>;
  static_assert(kSKeys % 16 == 0 && kSQueries % 16 == 0 && kKvKeys % 16 == 0 &&
                    kKvCols % 16 == 0 && kDqRows % 16 == 0 && kDqCols % 16 == 0,
                "warp tiles are whole m-tiles by whole n-tile pairs");
  static_assert(kSKeys == 32 && kSQueries >= 16 && kSQueries <= 32,
                "keep_bits: 32-key warp tiles, at most 32 elements a thread");
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;  // Q and dO, one buffer each
  using STile = SwizzledTile<kBlockN, kBlockM>;   // Pᵀ and dSᵀ: row = key, column = query
  // Dynamic shared memory: K, V, Q, dO, Pᵀ, dSᵀ (16-bit, padded to 64-column blocks), then the
  // step's LSE · log2 e and scale · D (fp32, kBlockM each). One buffer of everything: the next
  // step's Q / dO go global -> registers -> shared memory after every warp has left the step.
  static constexpr int kSmemBytes =
      2 * (2 * KvTile::kElems + 2 * QTile::kElems + 2 * STile::kElems) + 2 * kBlockM * 4;
  static_assert(kSmemBytes <= kSmemPerBlock, "tile configuration exceeds Turing's 64 KB");
  static constexpr int kMinBlocksPerSm = 1;  // 48.5 / 56.5 KB: one block an SM on Turing
};

}  // namespace fa::cuda::sm75
