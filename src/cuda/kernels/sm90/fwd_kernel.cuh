// The Hopper-native forward (sm_90a, issue 25): warp specialisation with a TMA producer and two
// consumer warpgroups, S = Q·Kᵀ by SS-wgmma, P kept in registers as the A operand of an RS-wgmma
// for O += P·V (V read MN-major through the transpose bit), the online softmax in fp32 with
// exp2. A work tile is kBlockM queries of one (query head, batch entry) (tile_plan.h); a block takes
// one, or (persistent, Tuning::sm90_fwd_persistent) walks tiles blockIdx.x, + gridDim.x, ...
//
//   warpgroup 0  producer: one thread issues each tile's Q copies (into one of kQBuffers
//                buffers, once the consumers are done with the tile's Q that used it before)
//                and the K / V tiles' through a ring of kStages
//                stages whose position runs on across tiles (full barriers: the copies' bytes;
//                empty barriers, K's and V's apart: the consumers' release); it gives most of
//                its registers away (setmaxnreg) to
//   warpgroups 1.. consumers (two, or three at d 64: Tuning::sm90_fwd_d64_consumers):
//                64 query rows each (one wgmma m64 row block), the whole key
//                range of the tile: S (64 x kBlockN, fp32 registers), softmax, P (bf16 / fp16
//                registers), O (64 x d, fp32 registers); the epilogue stores O straight from
//                the registers or, with two Q buffers (FA_TUNING_SM90_FWD_Q_BUFFERS, 2 the
//                default where they fit: core/tuning.h), stages it in the finished tile's Q
//                buffer for a TMA store that one thread issues and waits for under the next
//                tile's first Q·Kᵀ (direct stores where TMA cannot serve).
//
// Shared memory: kQBuffers x Q [kBlockM x d], kStages x (K, V) [kBlockN x d], all in the 128-byte swizzled
// 64-column blocks of tile/swizzle.h that TMA's SWIZZLE_128B writes and wgmma's descriptors
// read (wgmma_desc.h; both checked on the H200 by tests/test_gpu_wgmma.cpp), then the barriers.
//
// The consumers run one of three schedules (Schedule, below): one tile at a time, the
// intra-warpgroup overlap, or the overlap with ping-pong between the two consumer warpgroups.
// Under the last two a work tile visits its key tiles masked ones first (tile_plan.h's KeyOrder,
// FwdTraits::kPeel) and runs the rest in a loop whose softmax has no mask or logit code.
//
// fp8 (FwdTraits::kFp8, issue 30; host side fwd_fp8_sm90.cu): e4m3 Q, K, V, the output fp16 / bf16.
// Q and K arrive by TMA as 128-byte rows of 128 e4m3 values (the same swizzled image as 64 16-bit
// values), S = Q·Kᵀ by SS-wgmma m64nNk32; V, which the 8-bit P·V needs K-major (keys contiguous),
// comes from Vᵀ blocks that a pre-pass (fp8_v_layout.h) wrote into the workspace in the
// shared-memory image the wgmma descriptor reads, one bulk copy a key tile, with the keys of each
// 32-key step permuted so that P's fp32 accumulator fragment is the 8-bit A fragment as it stands
// (no shuffles). P is rounded to e4m3 with its row max at 2^kFp8POffsetLog2 (below), q's and k's
// descales fold into the softmax scale, v's into the epilogue's 1 / l.
//
// Served (sm90_fwd_refusal in fwd_sm90.h says why not otherwise): fp16 / bf16, head dims up to
// the kernel's (64, 128, 256; columns past head_dim arrive as TMA zeros and are not stored),
// GQA / MQA, causal and sliding windows (bottom-right, core/mask.h), softcap, ALiBi, packed
// batches (cu_seqlens; empty sequences), any scale's sign, seqlen_q != seqlen_k, LSE optional.
// dropout (the CPU's keep-mask bit for bit; ping-pong kernels only). Checked on
// the H200 by tests/test_gpu_sm90.cpp under every schedule, persistent and not, with memcheck,
// racecheck and synccheck (windows, softcap, ALiBi, dropout, packed batches, negative scales: added
// after the last GPU run; see the test file's header).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/mask.h"
#include "core/params.h"
#include "core/tuning.h"  // FA_TUNING_SM90_FWD_D256_BLOCK_N
#include "cuda/arch/cvt_fp8.cuh"
#include "cuda/arch/exp2.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/arch/sync.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_desc.h"
#include "cuda/kernels/sm90/fp8_v_layout.h"
#include "cuda/kernels/sm90/tile_plan.h"
#include "cuda/tensor_map.h"
#include "cuda/tile/dropout.cuh"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::sm90 {

// The tile sizes per head dim: 128 queries a block (two consumer warpgroups of 64 rows; 192 with
// three at d 64 from 2048 queries and keys, tile_plan.h's d64_consumers); keys a
// tile 128 up to d = 128 (S: 64 fp32 registers a thread, O: d / 2); at d = 256, where O already
// holds 128 registers, 64 (FA_TUNING_SM90_FWD_D256_BLOCK_N; 80 for the ablation: S 40, P 20,
// fewer per-tile costs but 128 bytes spilled against 52), and 64 with dropout (whole 32-key
// blocks of the keep-mask); two stages of K and V. Shared memory: d 64 80 KB, d 128 160 KB,
// d 256 192 KB at 64 keys, 224 KB at 80 (the H200 gives a block 227 KB).
// The consumers' schedules (Tuning::sm90_fwd_schedule), each the previous one plus one lever:
//   kSerial    one key tile at a time, each product waited for;
//   kOverlap   the intra-warpgroup overlap: the softmax of tile j under the P·V of tile j - 1;
//   kPingPong  kOverlap, and the two consumer warpgroups take turns at the tensor cores (named
//              barriers), so that one's softmax runs under the other's products.
enum class Schedule : int { kSerial = 0, kOverlap = 1, kPingPong = 2 };

template <int kHeadDim_, typename Tag_, Schedule kSchedule_ = Schedule::kPingPong,
          bool kDropout_ = false, int kConsumers_ = 2, bool kFp8_ = false>
struct FwdTraits {
  using Tag = Tag_;  // the 16-bit type: the operands' and the output's, or (kFp8) the output's
  static constexpr int kHeadDim = kHeadDim_;
  // e4m3 Q, K, V (the kernel's header): k32 wgmmas, the Vᵀ blocks of fp8_v_layout.h for P·V.
  static constexpr bool kFp8 = kFp8_;
  using MmaTag = std::conditional_t<kFp8, E4m3Tag, Tag>;  // the wgmmas' operand type
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  static constexpr int kKStep = 32 / kElemBytes;  // elements a wgmma k step (32 bytes)
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "instantiated: 64, 128, 256");
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups (three: d 64 only)
  static constexpr int kWgThreads = 128;            // a warpgroup: four warps
  static constexpr int kWgRows = 64;                // query rows a consumer (one wgmma m64)
  static constexpr int kThreads = kWgThreads * (1 + kConsumers);
  static constexpr int kBlockM = kWgRows * kConsumers;  // queries a block
  static constexpr int kBlockN = kFp8_             ? fp8_block_n(kHeadDim_)  // (fp8_v_layout.h)
                                 : kConsumers_ == 3  ? 128  // (S, O and P in 160 registers)
                                 : kHeadDim <= 64  ? FA_TUNING_SM90_FWD_D64_BLOCK_N
                                 : kHeadDim <= 128 ? 128
                                 : kDropout_       ? 64
                                                   : FA_TUNING_SM90_FWD_D256_BLOCK_N;  // keys a tile
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma n and P·V's k steps");
  static constexpr int kStages = 2;
  static constexpr Schedule kSchedule = kSchedule_;
  // The key tiles that need the mask visited first and the rest by a loop without mask or logit
  // code (FA_TUNING_SM90_FWD_PEEL; tile_plan.h's KeyOrder); the serial schedule keeps one loop,
  // and so does d 256, where O's 128 registers leave no room for a second copy of the step:
  // ptxas spilled 316 / 648 bytes (stores / loads) against 60 / 104, and the H200 ran it 0.33-0.44x
  // as fast at s 512, 0.77-0.86x at 4k (docs/performance-log.md, twenty-fifth session).
  static constexpr bool kPeel =
      FA_TUNING_SM90_FWD_PEEL != 0 && kSchedule_ != Schedule::kSerial && kHeadDim_ <= 128;
  // Q and K: rows of kHeadDim elements in 128-byte blocks (SwizzledTile counts 16-bit columns: an
  // fp8 row of 128 values is one block; at d 64 half of it, TMA's zeros past head_dim).
  using QTile = SwizzledTile<kBlockM, kHeadDim * kElemBytes / 2>;
  using KvTile = SwizzledTile<kBlockN, kHeadDim * kElemBytes / 2>;
  static constexpr int kQBytes = QTile::kElems * 2, kKvBytes = KvTile::kElems * 2;
  // A V stage: the tile as K's (16-bit), or one Vᵀ block, kHeadDim rows of kBlockN keys (fp8).
  static constexpr int kVBytes = kFp8 ? kHeadDim * kBlockN : kKvBytes;
  static constexpr int kBoxCols = 128 / kElemBytes;  // a TMA box: one 128-byte block of columns
  // P·V's k steps a key tile; the P fragments they take (four registers each).
  static constexpr int kPSteps = kBlockN / kKStep;
  static_assert(!kFp8 || (kConsumers == 2 && !kDropout_), "fp8: two consumers, no dropout");
  // Q buffers (FA_TUNING_SM90_FWD_Q_BUFFERS): two where they fit beside the ring (d 64: 32 or
  // 48 KB; d 128: 64 KB beside 128 KB; not d 256: 128 KB beside 128 KB): the next work tile's Q
  // then lands a tile ahead instead of after this tile's last Q·Kᵀ, and the finished tile's
  // buffer, which is O's size, stages the TMA-store epilogue.
  static constexpr int smem_bytes(int q_buffers) {  // the layout below, for q_buffers
    return q_buffers * kQBytes + kStages * (kKvBytes + kVBytes) + 8 * (2 * q_buffers + 4 * kStages) +
           8 * q_buffers;
  }
  static constexpr int kQBuffers =
      FA_TUNING_SM90_FWD_Q_BUFFERS >= 2 && smem_bytes(2) <= kSm90SmemPerBlock ? 2 : 1;
  // Dropout kernels (instantiated under ping-pong only): the Philox keep-mask of P, whole 32-key
  // blocks a key tile (cuda/tile/dropout.cuh).
  static constexpr bool kDropout = kDropout_;
  static_assert(!kDropout || kBlockN % 32 == 0, "key tiles of whole dropout blocks");
  static_assert(kConsumers == 2 || (kConsumers == 3 && kHeadDim == 64),
                "two consumer warpgroups, or three at d 64 (Tuning::sm90_fwd_d64_consumers)");
  static_assert(kConsumers == 2 || kBlockN <= 128, "three consumers: S, O and P in 160 registers");
  // Registers a thread after the hand-over: 128 x 40 + 256 x 232 = 64512, what the block starts
  // with (384 x 168; two consumers), 128 x 32 + 384 x 160 = 65536 (512 x 128; three).
  static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;
  static_assert(register_split_fits(kProducerRegs, kConsumers, kConsumerRegs),
                "the block's register pool (sync.cuh, setmaxnreg_inc)");
  // Q [b], then per stage K and V, then the barriers: q_full[b], q_empty[b], k_full[s], v_full[s],
  // k_empty[s], v_empty[s]. K and V are released apart: under the overlap a consumer holds K of tile j and V
  // of tile j - 1 at once, and one barrier for both would leave the producer no stage to fill
  // ahead (the next K could only be loaded once P·V of j - 1 was done, just before it is needed).
  static constexpr int kBarOffset = kQBuffers * kQBytes + kStages * (kKvBytes + kVBytes);
  // After the barriers, the slots (one a Q buffer, 8 bytes each) in which the producer announces
  // each work tile (tile number, or -1: no more).
  static constexpr int kSlotOffset = kBarOffset + 8 * (2 * kQBuffers + 4 * kStages);
  static constexpr int kSmemBytes = kSlotOffset + 8 * kQBuffers;
  static_assert(kSmemBytes == smem_bytes(kQBuffers), "smem_bytes follows the layout");
  static_assert(kSmemBytes <= kSm90SmemPerBlock, "the H200's shared memory a block (227 KB)");
  static_assert(kQBytes % 1024 == 0 && kKvBytes % 1024 == 0 && kVBytes % 1024 == 0,
                "tiles on 1024-byte boundaries");
};

// The TMA maps of q, k, v (boxes of 64 columns x kBlockM or kBlockN rows of one head).
// tile_counter: the dynamic tile scheduler's counter in the call's workspace, zeroed before the
// launch (blocks take tiles gridDim.x + atomicAdd(counter, 1) after their first, blockIdx.x, in
// the order they free up: longest first where tile_plan.h orders them so); nullptr: the static
// walk blockIdx.x, + gridDim.x, ...
// pack_log2: GQA packing (the kernel's header comment); 0: tiles of one query head.
// o / o_tma: out's map for the TMA-store epilogue (boxes of 64 columns x one consumer
// warpgroup's 64 rows), o_tma 0 where the epilogue stores from registers (Tuning::
// sm90_fwd_tma_store off, one Q buffer, or a view the map cannot take; always with fp8).
// vt: fp8 only (v unused): the Vᵀ blocks in the workspace (fp8_v_layout.h).
struct FwdMaps {
  CUtensorMap q, k, v, o;
  int* tile_counter;
  int pack_log2;
  int o_tma;
  Fp8VLayout vt;
};

// The online softmax's lazy rescale: the reference max moves only when a tile's max exceeds it
// by more than this in log2 units (P then stays <= 2^8, far inside 16-bit and fp32 range).
constexpr float kLazyRescaleLog2 = 8.f;
// fp8: P is rounded to e4m3 (largest finite 448) for P·V, so P's range is split between the
// lazy rescale's slack and an offset that puts a row's reference max at P = 2^kFp8POffsetLog2
// rather than 1: values down to 2^-(6 + offset) of the max stay normal e4m3 numbers (3 mantissa
// bits) instead of 2^-6, and P <= 2^(offset + slack) = 256 stays finite. The offset cancels in O /
// l (both carry it) and leaves the LSE.
constexpr float kFp8LazyRescaleLog2 = 3.f;
constexpr float kFp8POffsetLog2 = 5.f;
static_assert(kFp8LazyRescaleLog2 + kFp8POffsetLog2 <= 8.f, "P <= 256 < 448, e4m3's largest");

template <int kN>
__device__ __forceinline__ float (&frag4(float (&acc)[kN], int j))[4] {
  return *reinterpret_cast<float(*)[4]>(&acc[4 * j]);
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_kernel(const __grid_constant__ Params p, const __grid_constant__ FwdMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tag = typename T::Tag;
  constexpr int kD = T::kHeadDim, kM = T::kBlockM, kN = T::kBlockN, kStages = T::kStages;
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr int kQB = T::kQBuffers;
  constexpr bool kQ2 = kQB == 2;  // two Q buffers: the staged epilogue, Q released after it
  constexpr bool kPeel = T::kPeel;  // the masked key tiles first, the rest without mask code
  const uint32_t smem0 = smem_addr(smem);
  auto sQ = [&](int b) { return smem0 + uint32_t(b * T::kQBytes); };
  auto sK = [&](int s) {
    return smem0 + uint32_t(kQB * T::kQBytes + s * (T::kKvBytes + T::kVBytes));
  };
  auto sV = [&](int s) { return sK(s) + uint32_t(T::kKvBytes); };
  const uint32_t bars = smem0 + T::kBarOffset;
  constexpr int kBoxCols = T::kBoxCols;  // a TMA box: one 128-byte block of columns
  auto q_full = [&](int b) { return bars + 8u * uint32_t(b); };
  auto q_empty = [&](int b) { return bars + 8u * uint32_t(kQB + b); };
  auto k_full = [&](int s) { return bars + 8u * uint32_t(2 * kQB + s); };
  auto v_full = [&](int s) { return bars + 8u * uint32_t(2 * kQB + kStages + s); };
  auto k_empty = [&](int s) { return bars + 8u * uint32_t(2 * kQB + 2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8u * uint32_t(2 * kQB + 3 * kStages + s); };

  const int tid = threadIdx.x, wg = tid / T::kWgThreads, lane = tid % 32;
  const int warp = (tid % T::kWgThreads) / 32;  // in the warpgroup
  // Work tiles of kM rows over the longest sequence (packed batches: the max_seqlen bound); a
  // tile past its sequence's end is skipped by producer and consumers alike. A tile's rows are
  // queries of one head, or with GQA packing (maps.pack_log2 > 0) the 2^pack_log2 query heads of
  // one KV head interleaved: tile row r is query position r >> pack_log2 of head
  // (kv head << pack_log2) + (r & (2^pack_log2 - 1)), so that K / V are read once for the group.
  const int lp = maps.pack_log2;
  const bool packed = lp > 0;
  const int tile_heads = packed ? int(p.heads_kv) : int(p.heads_q);
  const int m_blocks = int(((p.seqlen_q << lp) + kM - 1) / kM);
  const int num_tiles = m_blocks * tile_heads * int(p.batch);  // (the launch checks that it fits)
  const int group = int(p.heads_q / p.heads_kv);
  const bool reverse = p.window_right >= 0;  // causal: later tiles see more keys (tile_plan.h)
  // What a work tile covers, as producer and consumers both compute it (tile_plan.h).
  struct Plan {
    int64_t m0;     // its first row
    int th, b;      // its head (the KV head when packed) and batch entry
    SeqInfo sq;
    Visibility vis;
    KeyTiles kt;    // the key tiles its rows see
    KeyOrder ko;    // the order it visits them in: the masked ones first (kPeel)
    bool live;      // inside its sequence
  };
  auto plan = [&](int tile) {
    const TileCoord tc = tile_coord(tile, m_blocks, tile_heads, reverse);
    Plan pl;
    pl.m0 = int64_t(tc.m_block) * kM;
    pl.th = tc.head;
    pl.b = tc.batch;
    pl.sq = p.seq(tc.batch);
    pl.vis = Visibility{pl.sq.len_k - pl.sq.len_q, p.window_left, p.window_right};
    const int64_t len_rows = pl.sq.len_q << lp;
    pl.live = pl.m0 < len_rows;
    pl.kt = KeyTiles{0, 0};
    KeyTiles um{0, 0};
    if (pl.live) {
      const int64_t rows = len_rows - pl.m0 < kM ? len_rows - pl.m0 : kM;
      const int64_t pos0 = pl.m0 >> lp, npos = ((pl.m0 + rows - 1) >> lp) - pos0 + 1;
      pl.kt = key_tiles(pl.vis, pos0, npos, pl.sq.len_k, kN);
      um = unmasked_key_tiles(pl.vis, pos0, npos, pl.sq.len_k, kN);
    }
    pl.ko = key_order(pl.kt, um, kPeel);
    return pl;
  };
  // A packed batch's maps are batch 1 over its total rows; the sequence's rows start at q_start,
  // k_start (fixed-length batches: 0, and the batch entry is the map's outer coordinate).
  auto map_batch = [&](int b) { return p.varlen() ? 0 : b; };
  // This block's first tile is blockIdx.x, the next ones the dynamic scheduler's or the static
  // walk's (FwdMaps::tile_counter): a grid of one block a tile is the non-persistent launch. The
  // producer decides and announces each tile in its Q buffer's slot before Q's copies arrive on
  // that buffer's q_full (an mbarrier arrive releases, its wait acquires); the consumers read it
  // there. Work tile number r (its round) uses buffer r % kQB; the producer writes the buffer's
  // next one only once the consumers are done with its Q (q_empty), so one slot a buffer serves.
  auto tile_slot = [&](int b) {
    return reinterpret_cast<volatile int*>(smem + T::kSlotOffset + 8 * b);
  };

  if (tid == 0) {
    for (int b = 0; b < kQB; ++b) {
      mbar_init(q_full(b), 1);
      mbar_init(q_empty(b), 128 * T::kConsumers);  // every consumer thread (release_q)
    }
    for (int s = 0; s < kStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), 4 * T::kConsumers);
      mbar_init(v_empty(s), 4 * T::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producer
    setmaxnreg_dec<T::kProducerRegs>();
    if (warp == 0 && lane == 0) {
      int kv = 0;     // K / V tiles loaded so far: the ring's position runs on across work tiles
      int round = 0;  // work tiles announced
      auto advance = [&](int tile) {
        return maps.tile_counter != nullptr ? int(gridDim.x) + atomicAdd(maps.tile_counter, 1)
                                            : tile + int(gridDim.x);
      };
      for (int tile = int(blockIdx.x); tile < num_tiles; tile = advance(tile)) {
        const Plan pl = plan(tile);
        if (!pl.live) continue;  // past its sequence's end (packed batches): not announced
        const SeqInfo& sq = pl.sq;
        const KeyOrder& ko = pl.ko;
        const int hk = packed ? pl.th : pl.th / group, bm = map_batch(pl.b);
        // Q's box: kM rows of one head, or (packed) kM >> lp positions x the group's heads.
        const int q_head = packed ? pl.th << lp : pl.th;
        const int q_row = int(sq.q_start + (pl.m0 >> lp));
        // The buffer is free once the consumers are done with the Q of round - kQB: its last
        // Q·Kᵀ (one buffer), or its epilogue's store out of it (two).
        const int qb = round % kQB;
        if (round >= kQB) mbar_wait(q_empty(qb), uint32_t((round / kQB - 1) & 1));
        ++round;
        *tile_slot(qb) = tile;
        mbar_arrive_expect_tx(q_full(qb), uint32_t(T::kQBytes));
#pragma unroll
        for (int blk = 0; blk < T::QTile::kBlocks; ++blk)
          tma_load_4d(sQ(qb) + uint32_t(blk * kM) * kSw128RowBytes, &maps.q, blk * kBoxCols, q_head,
                      q_row, bm, q_full(qb));
        for (int i = 0; i < ko.end - ko.begin; ++i, ++kv) {
          const int key_row = int(sq.k_start) + ko.tile(i) * kN;
          const int s = kv % kStages;
          const uint32_t free_parity = uint32_t(((kv / kStages) & 1) ^ 1);
          if (kv >= kStages) mbar_wait(k_empty(s), free_parity);
          mbar_arrive_expect_tx(k_full(s), uint32_t(T::kKvBytes));
#pragma unroll
          for (int blk = 0; blk < T::KvTile::kBlocks; ++blk)
            tma_load_4d(sK(s) + uint32_t(blk * kN) * kSw128RowBytes, &maps.k, blk * kBoxCols, hk, key_row,
                        bm, k_full(s));
          if (kv >= kStages) mbar_wait(v_empty(s), free_parity);
          mbar_arrive_expect_tx(v_full(s), uint32_t(T::kVBytes));
          if constexpr (T::kFp8) {  // the key tile's Vᵀ block, as wgmma reads it
            bulk_load(sV(s), maps.vt.block(pl.b, hk, sq.k_start, ko.tile(i)), uint32_t(T::kVBytes),
                      v_full(s));
          } else {
#pragma unroll
            for (int blk = 0; blk < T::KvTile::kBlocks; ++blk)
              tma_load_4d(sV(s) + uint32_t(blk * kN) * kSw128RowBytes, &maps.v, blk * kBoxCols, hk,
                          key_row, bm, v_full(s));
          }
        }
      }
      // No more tiles: announced once the consumers have read the last one.
      const int qb = round % kQB;
      if (round >= kQB) mbar_wait(q_empty(qb), uint32_t((round / kQB - 1) & 1));
      *tile_slot(qb) = -1;
      mbar_arrive(q_full(qb));
    }
    return;
  }

  // ---- consumers: warpgroup c takes query rows m0 + 64 c .. + 63 of each tile; this thread rows
  // r0, r0 + 8.
  setmaxnreg_inc<T::kConsumerRegs>();
  const int c = wg - 1, g = lane / 4, t = lane % 4;
  const int d = int(p.head_dim);
  // Scores to logits: softcap and ALiBi, when on, turn the scaled score into the logit in the
  // softmax's step (core/mask.h's Logit); P = 2^(x c - m c) over this thread's values x, with c
  // the factor to log2 units: scale·log2e on raw scores, log2e on logits. A negative scale has its
  // largest logit at the smallest score, so its scores are scaled first (c = 1) and the running
  // max is taken over them; so are a zero scale's (c = 0 would turn the mask's -inf into NaN).
  // fp8: the scale is softmax_scale · q_descale · k_descale of the work tile's (batch entry, kv
  // head), set by `enter` (scale_fp8, with prescale and c_log2); v's descale (vd) multiplies 1 / l.
  const bool transform = p.softcap > 0.f || p.alibi_slopes != nullptr;
  float scale_fp8 = p.softmax_scale, vd = 1.f;
  auto sm_scale = [&] {
    if constexpr (T::kFp8) return scale_fp8;
    return p.softmax_scale;
  };
  bool prescale = !transform && p.softmax_scale <= 0.f;
  float c_log2 = transform ? kLog2e : prescale ? 1.f : p.softmax_scale * kLog2e;
  // The lazy rescale's slack and P's offset (log2 units): 2^8 and none in 16 bits, fp8's above.
  constexpr float kLazyLog2 = T::kFp8 ? kFp8LazyRescaleLog2 : kLazyRescaleLog2;
  constexpr float kPOffsetLog2 = T::kFp8 ? kFp8POffsetLog2 : 0.f;

  // Ping-pong: warpgroup c issues its products only in its turn (barrier ping_pong_turn(c), its
  // own 128 threads and the 128 handing over), then hands the turn to the next (c + 1, round
  // robin over two or three). The last warpgroup gives warpgroup 0 the first turn; all then run
  // the same issue points (key tiles + 1 a work tile: the plan's key tiles are the work tile's,
  // not a warpgroup's), each ending with a hand-over, and warpgroup 0 takes the last hand-over
  // after its last tile: every barrier's arrivals match its waits.
  constexpr bool kPing = T::kSchedule == Schedule::kPingPong;
  const NamedBarrier my_turn = ping_pong_turn(c);
  const NamedBarrier other_turn = ping_pong_turn(c + 1 == T::kConsumers ? 0 : c + 1);
  auto turn_begin = [&] {
    if constexpr (kPing) named_barrier_sync(my_turn, 2 * T::kWgThreads);
  };
  auto turn_end = [&] {
    if constexpr (kPing) named_barrier_arrive(other_turn, 2 * T::kWgThreads);
  };
  if constexpr (kPing)
    if (c == T::kConsumers - 1) named_barrier_arrive(NamedBarrier::kPingPong0, 2 * T::kWgThreads);

  int kv0 = 0;    // the ring's position at this tile's first key tile (as the producer's kv)
  int round = 0;  // work tiles whose Q was loaded (as the producer's round)
  // The current work tile (set by `enter`), in 32-bit values where they fit (positions and
  // keys do: validation bounds the sequences), to keep the main loop's registers. This thread's
  // two rows r0, r0 + 8 are query positions pos[r] of heads head[r] (the same head unless
  // packed); row r sees keys [lo[r], hi[r]) (its window within [0, len_k)), its ALiBi distance
  // is |diag[r] - key| with slope[r]; key tiles [um.begin, um.end) need no mask for any row of
  // this warpgroup (tile_plan.h).
  int64_t q_start = 0;
  int h = 0, b = 0, r0 = 0, len_q = 0, pos[2] = {0, 0}, head[2] = {0, 0};
  int lo[2] = {0, 0}, hi[2] = {0, 0}, diag[2] = {0, 0};
  float slope[2] = {0.f, 0.f};
  KeyOrder ko{0, 0, 0, 0, 0};
  KeyTiles um{0, 0};
  int n_tiles = 0, n_generic = 0;
  FwdDropout dr{};
  // The next work tile as the producer announces it (-1: none left); its Q has then landed.
  auto announced = [&] {
    mbar_wait(q_full(round % kQB), uint32_t((round / kQB) & 1));
    return *tile_slot(round % kQB);
  };
  // The current tile's Q buffer is (round - 1) % kQB once `enter`ed. With two buffers, each
  // warpgroup's thread 0 (`issuer`: the one that issues its TMA stores) releases a tile's buffer
  // only in the next tile, once its store (if it made one) has read it.
  auto cur_qb = [&] { return (round - 1) % kQB; };
  const bool issuer = warp == 0 && lane == 0;
  // This warpgroup's Q rows in the current tile's buffer (`enter`ed: round counts it).
  auto sQc = [&] { return sQ(cur_qb()) + uint32_t(T::kWgRows * c) * kSw128RowBytes; };
  // O: set by a tile's first P·V (its first k-step does not accumulate); a tile without key
  // tiles stores zeros without reading it. (Keep every accumulator of an in-flight wgmma free of
  // other instructions' definitions and reads: ptxas otherwise serializes every wgmma of the
  // kernel, C7515 - as an overlap carried across work tiles did, performance-log.md.)
  float o[kD / 2];
  // Running max (in the units of x: raw scores, logits or prescaled scores) and row sums.
  float mx[2], l[2];
  auto enter = [&](int tile) {
    const Plan pl = plan(tile);  // as the producer's
    const Visibility& vis = pl.vis;
    ko = pl.ko;
    h = pl.th, b = pl.b;
    q_start = pl.sq.q_start, len_q = int(pl.sq.len_q);
    n_tiles = ko.end - ko.begin;
    if constexpr (T::kFp8) {  // the (batch entry, kv head)'s descales (a packed tile's head is one)
      const int hk = packed ? h : h / group;
      scale_fp8 = p.softmax_scale * p.q_descale.at(b, hk) * p.k_descale.at(b, hk);
      vd = p.v_descale.at(b, hk);
      prescale = !transform && scale_fp8 <= 0.f;
      c_log2 = transform ? kLog2e : prescale ? 1.f : scale_fp8 * kLog2e;
    }
    // Steps whose softmax has the logit transform and the mask check (the rest: neither).
    n_generic = transform || prescale ? n_tiles : ko.masked;
    const int64_t len_k = pl.sq.len_k, wg_row0 = pl.m0 + T::kWgRows * c;
    const int64_t wg_pos0 = wg_row0 >> lp;

    um = unmasked_key_tiles(vis, wg_pos0, ((wg_row0 + T::kWgRows - 1) >> lp) - wg_pos0 + 1, len_k, kN);
    r0 = int(wg_row0) + 16 * warp + g;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + 8 * r;
      pos[r] = row >> lp;
      head[r] = packed ? (h << lp) + (row & ((1 << lp) - 1)) : h;
      const int64_t dg = pos[r] + vis.offset;
      diag[r] = int(dg);
      const int64_t first = vis.window_left < 0 ? 0 : dg - vis.window_left;
      const int64_t last = vis.window_right < 0 ? len_k : dg + vis.window_right + 1;
      lo[r] = int(first < 0 ? 0 : first > len_k ? len_k : first);
      hi[r] = int(last < 0 ? 0 : last > len_k ? len_k : last);
      slope[r] = p.alibi_slope(b, head[r]);
    }
    if constexpr (T::kDropout)  // never packed (the launch's choice)
      dr = FwdDropout{DropoutStream::make(p.seed, p.offset, p.dropout_p),
                      uint32_t(b * p.heads_q + h), r0};
    mx[0] = mx[1] = -INFINITY;
    l[0] = l[1] = 0.f;
    ++round;  // its Q is this round's
  };


  // The step's parts, for the tile's it-th key tile (key tile kt.begin + it). It sits in ring
  // stage (kv0 + it) % kStages, its barriers' parity ((kv0 + it) / kStages) & 1.
  auto stage = [&](int it) { return (kv0 + it) % kStages; };
  auto parity = [&](int it) { return uint32_t(((kv0 + it) / kStages) & 1); };
  // S = Q·K(it)ᵀ issued (not waited for); it may run past this tile's key tiles into the next
  // work tile's first (the ring's position runs on, and Q is the next tile's by then).
  auto issue_qk = [&](int it, float (&sc)[kN / 2]) {
    mbar_wait(k_full(stage(it)), parity(it));
    wgmma_fence();
    // (k step ks: bytes 32 ks.. of each row, whatever the type: the descriptors count 16-bit columns)
#pragma unroll
    for (int ks = 0; ks < kD / T::kKStep; ++ks)
      wgmma_ss<typename T::MmaTag, kN>(sc, kmajor_sw128_desc(sQc(), kM, 16 * ks),
                                       kmajor_sw128_desc(sK(stage(it)), kN, 16 * ks), ks > 0);
    wgmma_commit();
    wgmma_acc_fence(sc);
  };
  // O += P·V(it) issued (not waited for), O = P·V(0) for the tile's first; pf must stay
  // untouched until the wait (wgmma_keep).
  // fp8: B is the Vᵀ block, K-major (kD rows of the tile's keys, permuted: fp8_v_layout.h).
  auto issue_pv = [&](int it, const uint32_t (&pf)[T::kPSteps][4]) {
    mbar_wait(v_full(stage(it)), parity(it));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kPSteps; ++kk) {
      if constexpr (T::kFp8)
        wgmma_rs<E4m3Tag, kD>(o, pf[kk],
                              kN == 128 ? kmajor_sw128_desc(sV(stage(it)), kD, 16 * kk)
                                        : kmajor_sw64_desc(sV(stage(it)), 32 * kk),
                              it > 0 || kk > 0);
      else
        wgmma_rs<Tag, kD, 1>(o, pf[kk], mnmajor_sw128_desc(sV(stage(it)), kN, 16 * kk),
                             it > 0 || kk > 0);
    }
    wgmma_commit();
    wgmma_acc_fence(o);
  };
  // K or V of tile it back to the producer, once this warp's wgmmas reading it are done; with
  // the tile's last K, its Q too (the producer loads the next tile's Q under this one's tail).
  auto arrive = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  // The tile's Q (and the announced slot every thread read) back to the producer. Every thread
  // arrives, each after its own read of the slot: a lane-0 arrival after __syncwarp orders the
  // other lanes' reads too, but racecheck does not see that order, and it costs one arrival a
  // thread a work tile.
  // One Q buffer: at the tile's last Q·Kᵀ (the producer loads the next tile's Q under this one's
  // tail); two: after the epilogue's stores from it.
  auto release_q = [&] { mbar_arrive(q_empty(cur_qb())); };
  auto release_k = [&](int it) {
    arrive(k_empty(stage(it)));
    if (!kQ2 && it == n_tiles - 1) release_q();
  };
  // The previous tile's Q buffer back to the producer (the issuer's arrival; the others' came
  // with the epilogue), once its TMA store, if any, has read it: under the next tile's first
  // Q·Kᵀ, where the wait costs nothing.
  auto finish_store = [&] {
    if constexpr (kQ2) {
      if (issuer && round >= 2) {
        tma_store_wait_read<0>();
        mbar_arrive(q_empty(round % kQB));  // the previous tile's buffer
      }
    }
  };
  auto release_v = [&](int it) { arrive(v_empty(stage(it))); };
  // Tile it's scores to P: the logits (softcap / ALiBi) or the prescale, the mask as -inf (keys
  // past len_k; pairs the visibility rule hides) where the tile needs it, then the online
  // softmax with lazy rescaling on this thread's two rows (as the sm80 family's, fwd_tile.h):
  // the reference max moves, and O and l are rescaled, only when a row's tile max exceeds it
  // by more than 2^8 in P (a warp-uniform vote), so most tiles skip O's d-wide rescale. Returns
  // whether O needs the rescale by alpha (after the P·V in flight).
  auto softmax = [&](int it, float (&sc)[kN / 2], float (&alpha)[2], bool plain) -> bool {
    const int tile_n = ko.tile(it), n0 = tile_n * kN;
    if (!plain && transform) {  // core/mask.h's Logit: softcap(scale x) - slope |diag - key|
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + 8 * j + 2 * t + (e & 1);
          float x = sc[4 * j + e] * sm_scale();
          if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
          sc[4 * j + e] = x - slope[e / 2] * fabsf(float(diag[e / 2] - key));
        }
    } else if (!plain && prescale) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) sc[i] *= sm_scale() * kLog2e;
    }
    if (!plain && (tile_n < um.begin || tile_n >= um.end)) {
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + 8 * j + 2 * t + (e & 1);
          if (key < lo[e / 2] || key >= hi[e / 2]) sc[4 * j + e] = -INFINITY;
        }
    }
    float tile_max[2];
    bool need = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = -INFINITY;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
        m = fmaxf(m, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      tile_max[r] = m;
      // The first visible key (mx = -inf) or a max that grew too much; -inf - -inf: false.
      need |= (m - mx[r]) * c_log2 > kLazyLog2;
    }
    const bool rescale_o = __any_sync(0xffffffffu, need);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      alpha[r] = 1.f;
      if (rescale_o) {
        const float m_new = fmaxf(mx[r], tile_max[r]);
        // Nothing visible yet: O and l are still 0. Else the difference first, then the scale.
        if (m_new != -INFINITY) alpha[r] = exp2_fast((mx[r] - m_new) * c_log2);
        mx[r] = m_new;
        l[r] *= alpha[r];
      }
      // (exp -> 0, not NaN, while nothing is visible; fp8: the max at P = 2^kPOffsetLog2)
      const float m_scaled = (mx[r] == -INFINITY ? 0.f : mx[r]) * c_log2 - kPOffsetLog2;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = exp2_fast(fmaf(sc[4 * j + 2 * r + e], c_log2, -m_scaled));
          sc[4 * j + 2 * r + e] = pr;
          sum += pr;
        }
      l[r] += sum;
    }
    // Dropout after the row sums took the undropped P; kept values stay unscaled (the
    // epilogue's 1 / (1 - p)). This warp's 16 rows of S have the mma C-fragment layout.
    if constexpr (T::kDropout)
      apply_dropout<1, kN>(dr, n0, *reinterpret_cast<float(*)[1][kN / 8][4]>(&sc), lane);
    return rescale_o;
  };
  auto rescale = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < kD / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e / 2];
  };
  // P as the A operand of P·V: the C fragments of n-tiles 2 kk, 2 kk + 1 are the A fragment of
  // k-step kk (mma.cuh). fp8: n-tiles 4 kk .. 4 kk + 3 make k-step kk's, each register the four
  // values of one row from two n-tiles (columns 2t, 2t + 1 of each): A's k 4t..4t + 3 hold keys
  // 2t, 2t + 1, 8 + 2t, 9 + 2t of the step, and the Vᵀ block lists its keys in that order
  // (fp8_v_layout.h's fp8_key_at).
  auto pack = [&](float (&sc)[kN / 2], uint32_t (&pf)[T::kPSteps][4]) {
#pragma unroll
    for (int kk = 0; kk < T::kPSteps; ++kk) {
      if constexpr (T::kFp8) {
        const float* f = &sc[16 * kk];  // n-tiles 4 kk + j: f[4 j + 0, 1] row g, f[4 j + 2, 3] row g + 8
        pf[kk][0] = f32x4_to_e4m3x4(f[0], f[1], f[4], f[5]);
        pf[kk][1] = f32x4_to_e4m3x4(f[2], f[3], f[6], f[7]);
        pf[kk][2] = f32x4_to_e4m3x4(f[8], f[9], f[12], f[13]);
        pf[kk][3] = f32x4_to_e4m3x4(f[10], f[11], f[14], f[15]);
      } else {
        pack_a<Tag>(frag4(sc, 2 * kk), frag4(sc, 2 * kk + 1), pf[kk]);
      }
    }
  };
  // Epilogue: the row sums over the quad, O / l, LSE; O to out through shared memory and a TMA
  // store (`staged`), or straight from the registers (two 16-bit values a store; rows past the
  // sequence's len_q and columns past head_dim are not written). A row that saw no key (or a
  // tile without key tiles, whose O no P·V set) is 0.
  auto epilogue = [&] {
    float inv[2];
    bool seen[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      seen[r] = sum > 0.f;
      inv[r] = seen[r] ? 1.f / sum : 0.f;
      if constexpr (T::kFp8) inv[r] *= vd;
      if constexpr (T::kDropout) inv[r] *= dr.drop.keep_scale;  // kept P's 1 / (1 - p)
      if (t == 0 && p.lse.data != nullptr && pos[r] < len_q)
        p.lse.at(b, head[r], q_start + pos[r]) =
            seen[r] ? (mx[r] * c_log2 + log2f(sum) - kPOffsetLog2) * kLn2 : -INFINITY;
    }
    auto out2 = [&](int j, int r) {  // columns 8 j + 2 t, + 1 of row r0 + 8 r
      return seen[r] ? pack2<Tag>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]) : 0u;
    };
    // A fixed-length batch's map ends where the sequence does (TMA drops the rows past it); a
    // packed batch's runs on into the next sequence, so its last tile of a sequence is stored
    // from the registers, as is a warpgroup whose rows all lie past the sequence's end.
    const int wg_row0 = r0 - 16 * warp - g, len_rows = len_q << lp;
    const bool staged = !T::kFp8 && kQ2 && maps.o_tma != 0 && wg_row0 < len_rows &&
                        (!p.varlen() || wg_row0 + T::kWgRows <= len_rows);
    if (staged) {
      // This warpgroup's Q rows are dead (its Q·Kᵀ are done; the other warpgroups read their
      // own): O goes there in Q's swizzled layout, two 16-bit values a store as to global
      // memory (a warp's store: 8 rows x 16 bytes in 8 distinct bank groups). The lane comes
      // from a read here (lane_id_here): addresses from the kernel's g / t were hoisted out of
      // the tile loop and held registers the main loop then spilled (ptxas: 8 -> 160 bytes at d
      // 128). stmatrix would spill 20 bytes where these stores spill 12.
      const int ln = lane_id_here();
      unsigned char* const staging =
          smem + cur_qb() * T::kQBytes + T::kWgRows * c * kSw128RowBytes;
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int j = 0; j < kD / 8; ++j)
          *reinterpret_cast<uint32_t*>(
              staging + 2 * T::QTile::offset(16 * warp + ln / 4 + 8 * r, 8 * j + 2 * (ln % 4))) =
              out2(j, r);
      fence_proxy_async_shared();  // the writes, to the bulk copy's proxy
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (pos[r] < len_q) {
          uint16_t* out = p.out.at<uint16_t>(b, q_start + pos[r], head[r]);
#pragma unroll
          for (int j = 0; j < kD / 8; ++j) {
            const int col = 8 * j + 2 * t;
            if (col < d) *reinterpret_cast<uint32_t*>(out + col) = out2(j, r);
          }
        }
    }
    if constexpr (kQ2) {
      // The warpgroup's writes done, the issuer stores them. The barrier stands outside the
      // branch: in a branch the compiler cannot prove uniform, it cost the whole kernel its
      // uniform datapath (ptxas then moved every shared-memory address and descriptor through
      // vector registers: R2UR 83 -> 143, spills 8 -> 28 bytes at d 128).
      named_barrier_sync(epilogue_barrier(c), T::kWgThreads);
      if (staged && issuer) {
#pragma unroll
        for (int blk = 0; blk < T::QTile::kBlocks; ++blk)
          tma_store_4d(&maps.o, sQc() + uint32_t(blk * kM) * kSw128RowBytes, blk * kBoxCols,
                       packed ? h << lp : h, int(q_start) + (wg_row0 >> lp), map_batch(b));
        tma_store_commit();
      }
      if (!issuer) release_q();
    }
  };

  if constexpr (T::kSchedule == Schedule::kSerial) {
    // One key tile at a time: Q·Kᵀ, softmax, P·V, each waited for; one work tile at a time.
    for (int tile = announced(); tile >= 0; tile = announced()) {
      float sc[kN / 2], alpha[2];
      uint32_t pf[T::kPSteps][4];
      enter(tile);
      if (n_tiles == 0) {
        finish_store();
        if (!kQ2) release_q();  // rows that see no key: Q was loaded and is not read
      }
      for (int it = 0; it < n_tiles; ++it) {
        issue_qk(it, sc);
        if (it == 0) finish_store();
        wgmma_wait<0>();
        wgmma_acc_fence(sc);
        release_k(it);
        if (softmax(it, sc, alpha, false)) rescale(alpha);
        pack(sc, pf);
        issue_pv(it, pf);
        wgmma_wait<0>();
        wgmma_acc_fence(o);
        wgmma_keep(pf);
        release_v(it);
      }
      epilogue();
      kv0 += n_tiles;
    }
  } else {
    // Intra-warpgroup overlap: the softmax of key tile it runs while the tensor cores do P·V of
    // tile it - 1. Issue Q·K(it)ᵀ, then P·V(it - 1); wait for the first (groups retire in
    // order), run its softmax; then wait for the second, rescale O and pack the new P. Each work
    // tile starts and ends its own pipeline.
    for (int tile = announced(); tile >= 0; tile = announced()) {
      float sc[kN / 2], alpha[2];
      uint32_t pf[T::kPSteps][4];
      enter(tile);
      if (n_tiles == 0) {
        finish_store();
        if (!kQ2) release_q();  // rows that see no key: Q was loaded and is not read
      } else {
        turn_begin();
        issue_qk(0, sc);
        turn_end();
        finish_store();
        wgmma_wait<0>();
        wgmma_acc_fence(sc);
        release_k(0);
        softmax(0, sc, alpha, false);  // O is not set yet: its rescale is moot
        pack(sc, pf);
        auto step = [&](int it, bool plain) {
          turn_begin();
          issue_qk(it, sc);
          issue_pv(it - 1, pf);
          turn_end();
          wgmma_wait<1>();  // Q·K(it)ᵀ done
          wgmma_acc_fence(sc);
          release_k(it);
          const bool rescale_o = softmax(it, sc, alpha, plain);
          wgmma_wait<0>();  // P·V(it - 1) done
          wgmma_acc_fence(o);
          wgmma_keep(pf);
          release_v(it - 1);
          if (rescale_o) rescale(alpha);
          pack(sc, pf);
        };
        // The masked steps (the key order's first), then, peeled, the rest without mask code.
        int it = 1;
        for (; it < n_generic; ++it) step(it, false);
        if constexpr (kPeel)
          for (; it < n_tiles; ++it) step(it, true);
        turn_begin();
        issue_pv(n_tiles - 1, pf);
        turn_end();
        wgmma_wait<0>();
        wgmma_acc_fence(o);
        wgmma_keep(pf);
        release_v(n_tiles - 1);
      }
      epilogue();
      kv0 += n_tiles;
    }
  }
  // The last tile's store: done before the block exits (its shared memory with it).
  if constexpr (kQ2)
    if (issuer) tma_store_wait<0>();
  // The last warpgroup's last hand-over.
  if constexpr (kPing)
    if (c == 0) named_barrier_sync(NamedBarrier::kPingPong0, 2 * T::kWgThreads);
#else
  (void)p, (void)maps;
#endif
}

}  // namespace fa::cuda::sm90
