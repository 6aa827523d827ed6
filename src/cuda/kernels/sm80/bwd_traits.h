// Configuration of the sm80-family backward (bwd_kernel.cuh): one traits struct per (head dim,
// element type, dropout, step size, compact), with its warp layouts and the measured choices,
// and the workspace as the kernels see it. Every choice below was measured on the H200 against
// PyTorch's FlashAttention-2 in the same run (docs/performance.md).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/bwd_sm80.h"  // kBwdBlockM, kBwdSpareRows, bwd_block_n
#include "cuda/kernels/sm80/dq_layout.h"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm80 {

template <int kHeadDim_, typename Tag_, bool kDropout_ = false, int kBlockM_ = kBwdBlockM,
          bool kCompact_ = false, bool kBias_ = false>
struct BwdTraits {
  using Tag = Tag_;
  static constexpr int kHeadDim = kHeadDim_;
  // The keep-mask's Philox words cost registers and instructions inside the step: a separate
  // kernel, so that calls without dropout pay for none of it.
  static constexpr bool kDropout = kDropout_;
  // The attention bias (Params::Bias) read into each step's logits and, when asked, dBias
  // written (bwd_dbias.cuh): separate kernels as in the forward (FwdTraits::kBias), so that the
  // others carry none of its registers. Run with 64-query steps and without the split tail
  // (bwd_wide, bwd_tail); tiles and layouts are those of the kernel without it.
  static constexpr bool kBias = kBias_;
  static_assert(!kBias_ || kBlockM_ == kBwdBlockM, "the bias kernels take 64-query steps");
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "instantiated head dims: 32..256");
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockM = kBlockM_;                 // queries per step (bwd_wide_m)
  // The compact configuration (bwd_compact, for devices with less shared memory a block): 64
  // keys, one buffer of Q / dO / LSE / D.
  static constexpr bool kCompact = kCompact_;
  static_assert(!kCompact || kBlockM_ == kBwdBlockM, "the compact configuration takes 64 queries");
  // keys per block: 128, 64 above d 128 or compact
  static constexpr int kBlockN = kCompact ? kBwdCompactBlockN : bwd_block_n(kHeadDim);
  static constexpr int kQBufs = kCompact ? 1 : 2;  // buffers of the step's Q, dO, LSE, D
  // Sᵀ / dPᵀ: 4 warps along the keys, 2 along the queries (kBlockN / 4 keys x kBlockM / 2
  // queries); Sᵀ and dPᵀ cost 2 kSKeys kSQueries / 32 fp32 registers a thread.
  // With dropout and 64 keys, 2 x 4 (32 keys x kBlockM / 4 queries): the warp tile then spans
  // whole 32-key blocks of the keep-mask (keep_bits); the same fragment reads a k-step.
  static constexpr int kSWarpsN = kDropout_ && kBlockN == 64 ? 2 : 4, kSWarpsM = kWarps / kSWarpsN;
  static constexpr int kSKeys = kBlockN / kSWarpsN, kSQueries = kBlockM / kSWarpsM;
  // dK / dV: 2 kKvKeys kKvCols / 32 fp32 registers a thread for the whole block's life (128 at
  // d = 128 and 256). 4 x 2 warps, or 2 x 4 at 64 keys where a quarter of the head dim is whole
  // n-tile pairs (d = 192 / 256: 32 keys x d / 4 reads fewer fragments than 16 x d / 2).
  static constexpr int kKvWarpsN = kBlockN == 64 && (kHeadDim / 4) % 16 == 0 ? 2 : 4;
  static constexpr int kKvWarpsD = kWarps / kKvWarpsN;
  static constexpr int kKvKeys = kBlockN / kKvWarpsN, kKvCols = kHeadDim / kKvWarpsD;
  // dQ (kBlockM x kHeadDim a step): kDqWarpsM warps along the rows, the rest along the columns,
  // whole m-tiles by whole n-tile pairs, as square as they go (a warp reads kDqRows / 16 +
  // kDqCols / 16 fragments a k-step): 2 x 4 at d = 64 / 128 / 192 / 256, 4 x 2 at d = 32 / 96 /
  // 160 / 224 and with 128 rows.
  static constexpr int kNoSplit = 1 << 20;  // dq_cost of a split into partial fragments
  static constexpr int dq_cost(int wm) {
    return kBlockM % (16 * wm) != 0 || kHeadDim % (16 * (kWarps / wm)) != 0
               ? kNoSplit
               : kBlockM / wm / 16 + kHeadDim / (kWarps / wm) / 16;
  }
  static constexpr int kDqWarpsM = dq_cost(2) <= dq_cost(4) ? 2 : 4;
  static constexpr int kDqWarpsD = kWarps / kDqWarpsM;
  static constexpr int kDqRows = kBlockM / kDqWarpsM, kDqCols = kHeadDim / kDqWarpsD;
  using DqLayout = DqTileLayout<kDqRows, kDqCols, kDqWarpsM>;  // the accumulator's tile order
  static_assert(kSKeys % 16 == 0 && kSQueries % 16 == 0 && kKvKeys % 16 == 0 &&
                    kKvCols % 16 == 0 && kDqRows % 16 == 0 && kDqCols % 16 == 0,
                "warp tiles are whole m-tiles by whole n-tile pairs");
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;  // Q and dO, two buffers each
  using STile = SwizzledTile<kBlockN, kBlockM>;   // Pᵀ and dSᵀ: row = key, column = query
  // Step addresses from a block base (load_step): +1-4% at d = 64 (the per-step 64-bit products
  // cost ~100 instructions), but ptxas then spilled d = 256 80 -> 212 bytes (15% slower) and
  // d = 128 40 -> 88 (1% slower). Not with dropout (d = 64: 0 -> 20 bytes; unmeasured).
  static constexpr bool kStepBase = kHeadDim <= 64 && !kDropout;
  // LSE and D interleaved in the order the Sᵀ fragments read them (lse_slot): one 16-byte load an
  // n-tile instead of two 8-byte ones. Above d = 128 only: there ptxas then spilled less (d = 256
  // 80 -> 52 bytes) and it measured +1-2%; at d = 64 / 128 it spilled more (128 -> 200, 40 ->
  // 112 bytes) and measured 1-4% slower. Not with dropout (d = 256: 48 -> 64 bytes; unmeasured).
  static constexpr bool kLseD16 = kHeadDim > 128 && !kDropout;
  // The step's products in the order dV, dQ (and its reductions), dK, so that the reductions
  // drain behind dK's MMAs, instead of dK / dV as one loop and then dQ. Measured (H200, quick
  // grid, same run): d = 64 +2-5%, d = 128 -0.5-2%, d = 256 -2-4% (d = 32 and dropout not
  // measured, so not used there). Not with one Q / dO buffer (the next step's copies would
  // then wait for dK's reads of Q).
  static constexpr bool kDvDqDk = kHeadDim == 64 && !kDropout && kQBufs == 2;
  // sm90: the step's Q and dO tiles by TMA where the host made their maps (bwd_block). Measured
  // (H200, quick grid, same run): d = 128 +3-5%, d = 256 +4-7%. At d = 64 (128-query steps) it
  // first measured -1 to -3% (ptxas spilled the kernel 116 -> 204 bytes); with the cp.async
  // fallback's addresses as full products (kBase in bwd_block: 44 bytes) -0.3 to +1.7%, and
  // with kRotate too (36 bytes) +1.0-3.4%. At d = 32 both together measured -1.5 to +1.0% (TMA
  // alone -2.8 to +0.1%), so d = 32 keeps cp.async. d = 96 / 160 / 192 / 224 tested, not
  // benchmarked. Not in the compact configuration, which only parts without TMA choose (and the
  // tests under a shared-memory cap).
  static constexpr bool kTmaQdo = kHeadDim >= 64 && !kCompact;
  // The rotated start of the query-tile walk (bwd_block), with TMA (sm90) at d = 64 and 128:
  // where it measured a gain (H200, bf16 quick grid, same run, two runs each). d = 64 +1.0-3.4%
  // (with the TMA loads, above); d = 128 +1.2-2.2% and +1.5-2.1% at 4k / 16k. Not at d = 96
  // (-0.5 to -0.9% at 4k / 16k) nor 256 (-0.1 to +0.4%); d = 160-224 not measured. On the
  // cp.async path (sm80 / 86 / 89) with the row-base epilogue it spilled more and measured -3.4
  // to +0.4% at d = 64 (on the H200); without TMA at d = 128 -0.5 to +0.8%.
  static constexpr bool kRotate = (kHeadDim == 64 || kHeadDim == 128) && !kDropout && kTmaQdo;
  // With kLseD16, the float slot of query q's LSE among a step's 2 kBlockM values (D two floats
  // later): query 8 nt + 2t + e of a warp's kSQueries columns at 2 (t kSQueries / 4 + 2 nt) + e,
  // so a lane's four values of an n-tile are one aligned float4 (lanes of one t read the same).
  static constexpr int lse_slot(int q) {
    const int w = q / kSQueries * kSQueries, r = q % kSQueries;
    return 2 * (w + (r % 8) / 2 * (kSQueries / 4) + r / 8 * 2) + r % 2;
  }
  // The order's LSE and D slots (lse_slot, + 2) are distinct and inside the step's 2 kBlockM.
  static constexpr bool lse_slots_disjoint() {
    for (int a = 0; a < kBlockM; ++a) {
      if (lse_slot(a) < 0 || lse_slot(a) + 2 >= 2 * kBlockM) return false;
      for (int b = 0; b < kBlockM; ++b)
        if ((a != b && lse_slot(a) == lse_slot(b)) || lse_slot(a) == lse_slot(b) + 2) return false;
    }
    return true;
  }
  static_assert(!kLseD16 || lse_slots_disjoint(), "LSE / D slots overlap");
  // Dynamic shared memory: the one formula is bwd_smem_bytes (bwd_sm80.h), which the host's
  // configuration choices evaluate without these types; bwd_block's layout must fill it exactly
  // (K, V, kQBufs Q and dO tiles, Pᵀ, dSᵀ, kQBufs LSE and D rows, a TMA barrier per buffer).
  static constexpr int kSmemBytes = bwd_smem_bytes(kHeadDim, kBlockM, kBlockN, kQBufs);
  static_assert(2 * (2 * KvTile::kElems + 2 * kQBufs * QTile::kElems + 2 * STile::kElems) +
                        kQBufs * 2 * kBlockM * 4 + kQBufs * 8 ==
                    kSmemBytes,
                "bwd_block's shared-memory layout fills bwd_smem_bytes");
};

// The workspace as the kernels see it (layout: bwd_sm80.h, bwd_workspace_bytes): the fp32 dQ
// accumulator [heads_q][rows][kHeadDim], the deterministic mode's semaphores
// [heads_q][batch][m_blocks], then scale · D and LSE · log2(e) [heads_q][rows] each.
// Rows: acc_row. Each sequence has kBwdSpareRows spare rows after its own, so that the main
// kernel's dQ reductions for a partial last query tile need no row test: the rows past the
// sequence take dS = 0 rows (their Q, dO, D are zero-filled) and are never read.
struct BwdWorkspace {
  float* dq_acc;
  int* sem;
  float* dsum;  // softmax scale · D
  float* lse2;  // the saved LSE · log2 e: P = exp2(s · scale · log2 e - lse2), one FFMA
  int64_t rows;  // rows of one head: total_q + batch * kBwdSpareRows
  int m_blocks;  // 64-row query tiles of the longest sequence (128-row steps index fewer)
  int tma;       // sm90: Q and dO arrive by TMA through the kernel's QdoMaps (else cp.async)
  // The split tail (bwd_sm80.h, BwdTail): blocks below tail_dp take one whole key tile each
  // (tile index = block index); the tail_ctas after them share the tail's tail_units steps
  // (tail_steps a tile), storing a part of a tile's dK / dV whole in tail_part (two per block,
  // tail_part_epilogue) and counting its steps in tail_cnt (per tail tile).
  float* tail_part;
  int* tail_cnt;
  int64_t tail_dp, tail_units;
  int tail_steps, tail_ctas;
};

// dBias as the bias kernels write it (bwd_dbias.cuh; the host's plan: bwd_sm80.h, BwdDbiasPlan):
// element (b, h, query, key) of dBias goes to out + b stride[0] + h stride[1] + query stride[2]
// + key stride[3] (elements; 0 on the dimensions dBias sums over), by op. The main kernel's
// last argument in the bias kernels; the others take the empty BwdNoDbias there.
enum class DbiasOp : int {
  kNone,      // dBias not asked
  kAddF32,    // fp32 reductions (red.global.add) into out, cleared first: dBias sums over an axis
  kStoreF32,  // one plain store per element, in dBias's dtype (no axis summed; out cleared first,
  kStoreF16,  //   since masked and unvisited elements are 0)
  kStoreBF16,
};
struct BwdDbias {
  void* out;
  DbiasOp op;
  int sum_q, sum_k;   // summed over queries / keys: partial sums across lanes before the adds
  int64_t stride[4];  // elements of out; 0 where summed
};
struct BwdNoDbias {};
template <class T>
using BwdDbiasArg = std::conditional_t<T::kBias, BwdDbias, BwdNoDbias>;

}  // namespace fa::cuda::sm80
