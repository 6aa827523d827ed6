// The FlashAttention-2 backward for the sm80 family on the forward's primitive layer (issue 4):
// every head dim of the forward, fp16 / bf16, every mask, softcap, ALiBi, GQA / MQA, packed
// batches, dropout (the keep-mask regenerated from core/philox.h, bit for bit the CPU
// backend's) and a deterministic mode. docs/cuda-kernels.md, "Backward".
//
// Files: bwd_traits.h (configuration, workspace), bwd_prepost.cuh (the pre- and postprocess),
// bwd_step.cuh (the parts of a step), bwd_epilogue.cuh (dK / dV out), this file (the main
// kernel's block: shared memory, the copies, the step loop).
//
// Three kernels per call:
//   bwd_preprocess   scale · D (D = rowsum(dO ∘ O)) and LSE · log2 e per (query head, row),
//                    fp32, into the workspace;
//   bwd_kernel       one block of 8 warps per (key tile of kBlockN keys, kv head, batch): K and V
//                    stay in shared memory, dK and dV in registers across every query head of the
//                    group (GQA: summed without per-query-head copies) and every query tile that
//                    sees these keys; P is recomputed from Q, K and the saved LSE; dQ is
//                    accumulated in fp32 in the workspace with atomics (8-byte vector atomics on
//                    sm90); the next step's Q, dO, LSE and D stream in through cp.async during a
//                    step (two buffers), Q and dO by TMA on sm90 from d = 64 (kTmaQdo);
//   bwd_postprocess  dQ fp32 -> the input type, into the caller's dq.
//
// A step (kBlockM queries, 64 or at d <= 64 128 (bwd_wide_m), against the block's kBlockN keys:
// 128 up to d = 128, 64 above) runs five products, each with
// its own warp layout (BwdTraits), chosen so that every warp reads as few fragments from shared
// memory as the tile allows: a warp computing an (m x n) tile over k reads (m + n) k elements
// for m n k multiply-adds, so the tiles are as square as the register budget permits.
//   Sᵀ  = K Qᵀ, dPᵀ = V dOᵀ   warp tile kSKeys keys x kSQueries queries (kSWarpsN x kSWarpsM)
//                              A: K / V (ldmatrix, a_lane)  B: Q / dO as Kᵀ in the forward
//   Pᵀ, dSᵀ -> shared memory  (row = key, column = query)
//   dV += Pᵀ dO, dK += dSᵀ Q   warp tile kKvKeys keys x kKvCols columns, held in registers
//                              A: Pᵀ / dSᵀ (ldmatrix)       B: dO / Q through ldmatrix.trans
//   dQ  += dS K                warp tile kDqRows queries x kDqCols columns, reduced into the
//                              workspace in fragment order (dq_layout.h); A: dS from dSᵀ with
//                              ldmatrix.trans at bt_lane offsets, B: K through ldmatrix.trans
// in that order: dK / dV before dQ (measured 1-5% faster than dQ first); at d = 64 in the order
// dV, dQ, dK (kDvDqDk).
// At d = 128 a warp issues 144 ldmatrix.x4 a step (64 + 48 + 32); the layout before this one
// (each warp 16 keys against all 64 queries, Pᵀ and dSᵀ kept in registers for dK / dV) issued
// 184, and shared-memory reads bounded it. docs/performance.md, "Backward".
// P = exp(logit - LSE), dS = P ∘ (dP - D), with the chain rule through softcap and the softmax
// scale folded into dS before it is rounded to 16 bits (dK and dQ then need no scaling):
// dS = P ∘ (scale dP - scale D), one FFMA with scale D precomputed by the preprocess. (FA2 rounds
// the unscaled dS and scales dK and dQ at the end; that cost this kernel 1.03x the 3x-naive
// bound on one fp16 dQ case of the test grid, and saves no instruction over the FFMA.)
//
// Deterministic mode (p.deterministic): the blocks of one kv head add into a dQ row block in
// descending key-tile order. Block nb waits until a semaphore per (query head, batch, query
// tile) counts the key tiles after it that touch the query tile, adds, then increments it.
// Descending is the order in which the blocks reach a query tile (host-tested in
// tests/test_tile_ranges.cpp for causal and full attention, and for every mask without GQA): a
// block walks its query tiles upwards from the first that sees its keys, which does not
// decrease with nb, so under a causal mask the diagonal block adds first, at its first step, and
// the others follow without waiting (ascending order made them wait along a chain: 1.5-2.3x the
// default mode's time causal). In this mode blockIdx.x runs the key tiles backwards, so the
// wait depends only on lower block indices, which the hardware dispatches first, and always
// ends; a spin limit traps instead of hanging if that ever fails.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/mask.h"
#include "core/params.h"
#include "core/philox.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/griddep.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/memory.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/kernels/sm80/bwd_epilogue.cuh"
#include "cuda/kernels/sm80/bwd_prepost.cuh"
#include "cuda/kernels/sm80/bwd_step.cuh"
#include "cuda/kernels/sm80/bwd_traits.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // load_tile(_full)
#include "cuda/kernels/sm80/tile_ranges.h"
#include "cuda/tensor_map.h"

namespace fa::cuda::sm80 {

// The main kernel is launched as the preprocess's programmatic dependent (bwd_pdl): before it
// reads LSE / D or adds into the dQ accumulator, and before any block leaves early, it waits for
// the preprocess's grid. With every block waiting, this grid cannot complete before the
// preprocess has, whatever its blocks find, so the postprocess after it never reads an
// accumulator still being cleared. (Today some block always has keys, since validation refuses
// empty tensors; the invariant does not lean on that.) Where launched plainly, the wait returns
// at once.
__device__ __forceinline__ void wait_for_preprocess() { grid_dependency_wait(); }

// Key tile nb of kv head hk, batch entry b: its steps [s_first, s_last) (clipped to its own
// steps; a whole tile: 0, INT_MAX). The steps walk (query head of the group, query tile) pairs;
// the Q, dO, LSE and D of step s + 1 stream into the other buffer while step s computes. A part
// of a tile (the split tail, BwdWorkspace; tail_slot: the tail tile, -1 for a whole-tile block)
// ends in tail_part_epilogue. first: the block's first call, which sets up the TMA barriers;
// phase: their parities, kept across calls. dbias: where the bias kernels write dBias.
template <class T>
__device__ __forceinline__ void bwd_block(const Params& p, const BwdWorkspace& ws,
                                          const QdoMaps& maps, const BwdDbiasArg<T>& dbias, int nb,
                                          int64_t hk, int64_t b, int s_first, int s_last,
                                          int64_t tail_slot, bool first, uint32_t& phase,
                                          uint16_t* smem) {
  using KvTile = typename T::KvTile;
  using QTile = typename T::QTile;
  using STile = typename T::STile;
  using W = BwdWarpTiles<T>;
  constexpr int kD = T::kHeadDim, kN = T::kBlockN, kM = T::kBlockM;
  uint16_t* sK = smem;
  uint16_t* sV = sK + KvTile::kElems;
  constexpr int kBufs = T::kQBufs;
  uint16_t* sQ = sV + KvTile::kElems;          // [kBufs][QTile]
  uint16_t* sdO = sQ + kBufs * QTile::kElems;  // [kBufs][QTile]
  uint16_t* sP = sdO + kBufs * QTile::kElems;
  uint16_t* sdS = sP + STile::kElems;
  // [kBufs][kM] LSE · log2 e, then [kBufs][kM] scale · D; with kLseD16 [kBufs][2 kM] in
  // lse_slot order.
  float* sLse = reinterpret_cast<float*>(sdS + STile::kElems);
  float* sD = sLse + kBufs * kM;
  // [kBufs] the barriers the TMA copies of each buffer's Q and dO complete on (sm90), one
  // 8-byte mbarrier each; a copy's box is one 64-column block of a tile (kM rows of 128 bytes).
  constexpr int kBarBytes = 8, kBoxCols = QTile::kBlockCols;
  const uint32_t bar0 = smem_addr(sLse + 2 * kBufs * kM);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const SeqInfo sq = p.seq_unclamped(b);  // run_bwd passes sanitized cu_seqlens
  const int64_t n0 = int64_t(nb) * kN;
  if (n0 >= sq.len_k) {
    wait_for_preprocess();
    return;
  }
  const int d = int(p.head_dim);
  const int64_t keys = sq.len_k - n0 < kN ? sq.len_k - n0 : kN;
  const Visibility vis{sq.len_k - sq.len_q, p.window_left, p.window_right};
  int m_begin, m_end;  // query tiles that see a key of this tile
  key_tile_rows<T>(vis, sq.len_q, sq.len_k, nb, &m_begin, &m_end);
  const int m_steps = m_end - m_begin;
  // The query tiles at whose steps this key tile needs no mask: two int compares a step instead
  // of the 64-bit visibility of the step's corners (~100 uniform instructions a step at d = 256).
  const KeyTileUnmasked unmasked(vis, sq.len_q, sq.len_k, nb, kN, kM);
  const int group = int(p.group());
  const int steps = m_steps * group;  // (query head, query tile) pairs, head-major
  const int s_begin = s_first, s_end = s_last < steps ? s_last : steps;  // this call's
  const int64_t acc0 = acc_row(p, b, sq);
  DropoutStream drop{};
  if constexpr (T::kDropout) drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const bool deterministic = p.deterministic;
  // sm90: a step's Q and dO tiles arrive by TMA (two bulk copies per 64-column block, issued by
  // one thread) instead of every thread's cp.async chunks and their addresses (~100 instructions
  // a warp-step at d = 256). A packed batch's partial query tile would read the next sequence's
  // rows, which must arrive as zeros: those steps keep the cp.async copies. phase: each buffer's
  // barrier parity, flipped at each wait.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kSm90 = true;
#else
  constexpr bool kSm90 = false;  // no TMA (its branches compiled out), no rotated start
#endif
  constexpr bool kTma = kSm90 && T::kTmaQdo;
  const bool tma = kTma && ws.tma != 0;
  const int tma_tiles = !tma ? 0 : p.varlen() ? int(sq.len_q / kM) : INT_MAX;  // mb below: TMA
  auto tma_step = [&](int mb) { return kTma && mb < tma_tiles; };
  if (tma && first) {
    if (tid == 0) {
      for (int i = 0; i < kBufs; ++i) mbar_init(bar0 + kBarBytes * i, 1);
      mbar_init_fence();
    }
    __syncthreads();  // the barriers initialised before any thread waits on them
  }

  // Q, dO, LSE and D of the step (query head head of the group, query tile mb) into buffer buf.
  // Rows past the sequence arrive as zeros: their P is exp(0 - 0) = 1, but with dO = 0, Q = 0
  // and D = 0 they add nothing to dV, dK or dS, and their dQ is never read.
  // With kBase the addresses are relative to the group's first query head, row 0 (a
  // head / tile index times a stride each); without, the full (b, row, head) products.
  // With TMA (sm90) the cp.async copies serve only a packed batch's partial tiles: their full
  // address products there, rather than a block base held across the loop (d = 64 with 128
  // queries: 204 -> 44 bytes of spills, 36 with kRotate).
  constexpr bool kBase = T::kStepBase && !kTma;
  const uint16_t* q_blk = p.q.at<const uint16_t>(b, sq.q_start, hk * group);
  const uint16_t* do_blk = p.dout.at<const uint16_t>(b, sq.q_start, hk * group);
  const int64_t ws_blk = hk * group * ws.rows + acc0;  // workspace row of (head 0, row 0)
  auto load_step = [&](int head, int mb, int buf) {
    const int64_t m0 = int64_t(mb) * kM;
    const int64_t rows = sq.len_q - m0 < kM ? sq.len_q - m0 : kM;
    const int64_t hq = hk * group + head;
    if (tma_step(mb)) {
      if (tid == 0) {
        const uint32_t bar = bar0 + kBarBytes * buf;
        const int row = int(p.varlen() ? sq.q_start + m0 : m0), bc = p.varlen() ? 0 : int(b);
        // The Q and dO tiles, whole boxes (columns past the head dim arrive too, as zeros).
        mbar_arrive_expect_tx(bar, 2 * QTile::kElems * uint32_t(sizeof(uint16_t)));
#pragma unroll
        for (int blk = 0; blk < QTile::kBlocks; ++blk) {
          const int off = blk * kM * kBoxCols, col = blk * kBoxCols;
          tma_load_4d(smem_addr(sQ + buf * QTile::kElems + off), &maps.q, col, int(hq), row, bc,
                      bar);
          tma_load_4d(smem_addr(sdO + buf * QTile::kElems + off), &maps.dout, col, int(hq), row,
                      bc, bar);
        }
      }
    } else {
      const uint16_t* q = kBase ? q_blk + head * p.q.stride_h + m0 * p.q.stride_s
                                : p.q.at<const uint16_t>(b, sq.q_start + m0, hq);
      const uint16_t* dout = kBase ? do_blk + head * p.dout.stride_h + m0 * p.dout.stride_s
                                   : p.dout.at<const uint16_t>(b, sq.q_start + m0, hq);
      auto load_partial = [&] {
        load_tile<QTile, T::kThreads>(sQ + buf * QTile::kElems, q, p.q.stride_s, rows, d, tid);
        load_tile<QTile, T::kThreads>(sdO + buf * QTile::kElems, dout, p.dout.stride_s, rows, d,
                                      tid);
      };
      if constexpr (TileCopy<QTile, T::kThreads>::kEven) {
        if (rows == kM && d == kD) {
          load_tile_full<QTile, T::kThreads>(sQ + buf * QTile::kElems, q, p.q.stride_s, tid);
          load_tile_full<QTile, T::kThreads>(sdO + buf * QTile::kElems, dout, p.dout.stride_s,
                                             tid);
        } else {
          load_partial();
        }
      } else {
        load_partial();
      }
    }
    if (tid < kM) {
      const bool ok = tid < rows;
      const int64_t row = ok ? m0 + tid : 0;
      const int64_t r = kBase ? ws_blk + head * ws.rows + row : hq * ws.rows + acc0 + row;
      const int lse_at = T::kLseD16 ? buf * 2 * kM + T::lse_slot(tid) : buf * kM + tid;
      const int d_at = T::kLseD16 ? lse_at + 2 : kBufs * kM + buf * kM + tid;
      cp_async_4(smem_addr(sLse + lse_at), ws.lse2 + r, ok);
      cp_async_4(smem_addr(sLse + d_at), ws.dsum + r, ok);
    }
  };

  load_tile<KvTile, T::kThreads>(sK, p.k.at<const uint16_t>(b, sq.k_start + n0, hk), p.k.stride_s,
                                 keys, d, tid);
  load_tile<KvTile, T::kThreads>(sV, p.v.at<const uint16_t>(b, sq.k_start + n0, hk), p.v.stride_s,
                                 keys, d, tid);
  wait_for_preprocess();  // the K / V copies issued, everything below reads the preprocess's rows
  // Default mode at d = 64 / 128 on sm90 (kRotate): block nb starts at query tile m_begin + nb %
  // m_steps and wraps around, so that under full attention the blocks of a head, which run in
  // lockstep, add into different dQ tiles at each step. Deterministic mode keeps the order.
  constexpr bool kRotate = kSm90 && T::kRotate;
  const int m_first = kRotate && !deterministic && m_steps > 0 ? m_begin + nb % m_steps : m_begin;
  // Step s_begin's (query head, query tile): the walk from (0, m_first), m_steps tiles a head.
  int head = 0, mb = m_first;
  if (s_begin > 0 && m_steps > 0) {
    head = s_begin / m_steps;
    mb = m_begin + (m_first - m_begin + s_begin % m_steps) % m_steps;
  }
  if (s_begin < s_end) load_step(head, mb, 0);
  cp_async_commit();

  typename W::KvAcc dk, dv;
  zero_acc(dk);
  zero_acc(dv);

  const auto kv_a = a_lane<KvTile>(lane);  // K / V as A (Sᵀ, dPᵀ)
  const auto q_bt = bt_lane<QTile>(lane);  // Q / dO as B of Sᵀ / dPᵀ
  const auto s_a = a_lane<STile>(lane);    // Pᵀ / dSᵀ as A of dV / dK
  const uint32_t aK0 = smem_addr(sK), aV0 = smem_addr(sV);
  const uint32_t aP0 = smem_addr(sP), adS0 = smem_addr(sdS);
  const float scale = p.softmax_scale;
  // The warp's tile in each product (BwdTraits), and the offsets its lanes load and store at.
  const W w{g,
            t,
            (warp % T::kSWarpsN) * T::kSKeys,
            (warp / T::kSWarpsN) * T::kSQueries,
            (warp % T::kKvWarpsN) * T::kKvKeys,
            (warp / T::kKvWarpsN) * T::kKvCols,
            (warp % T::kDqWarpsM) * T::kDqRows,
            (warp / T::kDqWarpsM) * T::kDqCols};
  const typename W::KvCols kv_cols(lane, false, w.kv_col0);
  const typename W::DqRows dq_rows(lane, true, w.dq_row0);
  const typename W::DqCols dq_cols(lane, false, w.dq_col0);
  const KvLanes<T> kv_lanes{s_a, kv_cols};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  typename W::StOffsets st_offs(lane, false, w.s_query0);
#pragma unroll
  for (int c = 0; c < W::kSNt / 2; ++c) st_offs.v[c] += uint32_t(w.s_key0) * kRowBytes;
#else
  typename W::StOffsets st_offs;
#pragma unroll
  for (int nt = 0; nt < W::kSNt; ++nt)
    st_offs.v[nt] = 2 * uint32_t(STile::offset(w.s_key0 + g, w.s_query0 + 8 * nt + 2 * t));
#endif

  // Step s is (query head head of the group, query tile mb), head-major; (nhead, nmb) is step
  // s + 1, counted rather than divided out of s (an integer division per step).
  for (int s = s_begin; s < s_end; ++s) {
    const int buf = kBufs == 2 ? (s - s_begin) & 1 : 0;
    const bool wrap = mb + 1 == m_end;
    const int nmb = wrap ? m_begin : mb + 1;
    // (nmb == m_first holds for both walks; `wrap` keeps the unrotated kernels' SASS as measured.)
    const int nhead = (kRotate ? nmb == m_first : wrap) ? head + 1 : head;
    const int64_t hq = hk * group + head;
    const int64_t m0 = int64_t(mb) * kM;
    cp_async_wait<0>();
    if (tma_step(mb)) {  // this step's Q and dO copies, issued a step ago
      mbar_wait(bar0 + kBarBytes * buf, (phase >> buf) & 1u);
      phase ^= 1u << buf;
    }
    // Step s landed for every thread, and every warp has finished step s - 1, so no one reads
    // buffer buf ^ 1 (step s - 1's Q / dO, LSE, D), Pᵀ or dSᵀ any more. (Compact: step s + 1's
    // copies start after the dK / dV product, below.)
    __syncthreads();
    if (kBufs == 2 && s + 1 < s_end) load_step(nhead, nmb, buf ^ 1);
    cp_async_commit();
    // The base addresses pass through an opaque move each step: loop-invariant, ptxas hoisted
    // every fragment address of the unrolled step out of the loop into registers of their own
    // (d = 256: 1040 bytes of spills, against 272 with the per-step base).
    const uint32_t aK = opaque(aK0), aV = opaque(aV0), aP = opaque(aP0), adS = opaque(adS0);
    const uint32_t aQ = opaque(smem_addr(sQ + buf * QTile::kElems));
    const uint32_t adO = opaque(smem_addr(sdO + buf * QTile::kElems));
    const float* lse = T::kLseD16 ? sLse + buf * 2 * kM : sLse + buf * kM;
    const float* dsum = sD + buf * kM;
    const Logit<float> logit{p.softcap, p.alibi_slope(b, hq), sq.len_k - sq.len_q};
    const bool transform = logit.softcap > 0.f || logit.alibi_slope != 0.f;
    // The bias kernels: this step's bias elements and dBias target (bwd_dbias.cuh).
    [[maybe_unused]] StepBias<T::kBias> sb;
    if constexpr (T::kBias) sb = StepBias<true>::make(p, dbias, b, hq, m0, n0, sq.len_q, sq.len_k);

    // Sᵀ = K Qᵀ, then dPᵀ = V dOᵀ: one after the other, so that only one product's fragments
    // are live next to Sᵀ (at 9ff4169, d = 128: interleaved spilled 192 bytes, sequential 144,
    // and interleaved measured 1-2% slower).
    typename W::SAcc st, dpt;
    // The step's keep-mask first, while only dK / dV hold registers (after the two products,
    // next to Sᵀ and dPᵀ, ptxas spilled d = 128 200 bytes).
    uint32_t kept_bits = 0;
    if constexpr (T::kDropout)
      kept_bits = keep_bits<T>(drop, uint32_t(b * p.heads_q + hq), m0, n0, w.s_key0, w.s_query0,
                               w.g, w.t);
    s_product<T>(w, kv_a, q_bt, st, aK, aQ);
    s_product<T>(w, kv_a, q_bt, dpt, aV, adO);

    const bool masked = mb < unmasked.begin || mb >= unmasked.end;
    step_pointwise<T>(w, st, dpt,
                      StepSoftmax{lse, dsum, scale, logit, drop.keep_scale, kept_bits, masked,
                                  transform},
                      vis, m0, n0, sq.len_k, sb);
    store_p_ds<T>(st_offs, st, dpt, aP, adS);
    if constexpr (T::kBias) step_dbias<T>(w, dpt, sb, logit);

    __syncthreads();  // Pᵀ and dSᵀ complete

    // dQ of the step = dS K into registers, then (deterministic mode) the wait for this query
    // tile's turn, the reductions and the turn handed on. A partial last query tile adds its
    // rows past the sequence (dS = 0 there) into the sequence's spare rows (BwdWorkspace);
    // columns past d (a padded head dim) hold K's zero columns' products. The postprocess reads
    // neither.
    using DqL = typename T::DqLayout;
    float* acc = ws.dq_acc + (hq * ws.rows + acc0 + m0) * kD + DqL::pair_offset(warp, lane, 0);
    auto dq_step = [&] {
      typename W::DqAcc dq;
      dq_product<T>(dq_rows, dq_cols, dq, adS, aK);
      int* sem = nullptr;
      if (deterministic) {
        sem = ws.sem + (hq * p.batch + b) * ws.m_blocks + mb;
        const int n_tiles = int((sq.len_k + kN - 1) / kN);
        dq_turn_wait<T>(sem, nb, n_tiles, [&](int j) {
          int jb = 0, je = 0;
          if (j < n_tiles) key_tile_rows<T>(vis, sq.len_q, sq.len_k, j, &jb, &je);
          return jb <= mb && mb < je;
        });
      }
      reduce_dq<T>(acc, dq);
      if (deterministic) dq_turn_pass(sem);
    };
    if constexpr (T::kDvDqDk) {
      // dV, dQ and its reductions, dK: the reductions drain while dK's MMAs run.
      kv_product<T>(w, kv_lanes, dv, aP, adO);
      dq_step();
      kv_product<T>(w, kv_lanes, dk, adS, aQ);
    } else {
      // dK / dV, then dQ: measured 1-5% faster than dQ first with the reductions spread over
      // the dK / dV product (d = 64 / 128 / 256, 4bf5759), which ptxas hoisted to its start
      // anyway to free dQ's registers.
      kv_products<T>(w, kv_lanes, dv, dk, aP, adS, adO, aQ);
      if constexpr (kBufs == 1) {
        // Every warp's dK / dV product has read this step's Q and dO (and its element-wise pass
        // LSE and D): step s + 1's copies into the one buffer overlap the dQ product.
        __syncthreads();
        if (s + 1 < s_end) load_step(nhead, nmb, 0);
        cp_async_commit();
      }
      dq_step();
    }
    head = nhead;
    mb = nmb;
  }

  cp_async_wait<0>();  // a tile no query sees ran no step: its K / V copies may be in flight
  __syncthreads();     // every warp's last reads of K and V are done
  const float dv_scale = T::kDropout ? drop.keep_scale : 1.f;
  const KvGrads out{b, sq.k_start + n0, hk, keys, d};
  if (tail_slot >= 0 && (s_begin > 0 || s_end < steps)) {
    // (sK as the flag: K is read no more.)
    tail_part_epilogue<T>(p, ws, w, dk, dv, dv_scale,
                          TailPart{tail_slot, first ? 0 : 1, s_end - s_begin, steps}, out,
                          reinterpret_cast<volatile int*>(sK));
    return;
  }
  store_dk_dv<T>(p, w, dk, dv, dv_scale, out, sK, sV);
}

// Without kTail: block (x, y, z) takes key tile x of kv head y, batch entry z (the key tiles
// counted from the last in deterministic mode), for the ws.tail_dp tiles before the split tail
// (x fastest). With kTail, a one-dimensional grid: block x takes its share of the split tail's
// steps (BwdWorkspace), which spans two tiles at most, one bwd_block call each (one call site,
// so that the step loop is compiled once; a kernel of its own, so that the loop and the 64-bit
// tile decode around it stay out of the whole-tile kernel's register allocation).
// maps: Q and dO for TMA where ws.tma (sm90); the 128-byte swizzle of their boxes needs the
// 1024-byte alignment of the tiles.
// dbias: the bias kernels' dBias target (BwdDbias; the others' is empty).
template <class T, bool kTail>
__global__ void __launch_bounds__(T::kThreads, 1) bwd_kernel(const __grid_constant__ Params p,
                                                             BwdWorkspace ws,
                                                             const __grid_constant__ QdoMaps maps,
                                                             const BwdDbiasArg<T> dbias) {
  extern __shared__ __align__(1024) uint16_t smem[];
  const int n_tiles = int((p.seqlen_k + T::kBlockN - 1) / T::kBlockN);
  uint32_t phase = 0;
  if constexpr (!kTail) {
    // Grid (key tiles, kv heads, batch): the blocks past the tail_dp-th (x fastest) leave at once.
    const int nb = int(blockIdx.x);
    if (nb + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z) >= ws.tail_dp) {
      wait_for_preprocess();
      return;
    }
    bwd_block<T>(p, ws, maps, dbias, p.deterministic ? int(gridDim.x) - 1 - nb : nb, blockIdx.y,
                 blockIdx.z, 0, INT_MAX, -1, true, phase, smem);
  } else {
    // 32-bit step counts (bwd_tail_split keeps units below 2^31).
    const TailShare share{ws.tail_units, ws.tail_ctas};
    int u = int(share.first(blockIdx.x));
    const int u_end = int(share.first(blockIdx.x + 1)), steps = ws.tail_steps;
#pragma unroll 1
    for (bool first = true; u < u_end; first = false) {
      const int slot = u / steps;  // tail tile
      const int s_first = u - slot * steps;
      const int s_last = min(u_end - slot * steps, steps);
      u = slot * steps + s_last;
      // 32-bit tile decode (bwd_tail_split keeps every tile index below 2^31 when it splits).
      const int tile = int(ws.tail_dp) + slot, hb = tile / n_tiles, heads = int(p.heads_kv);
      bwd_block<T>(p, ws, maps, dbias, tile - hb * n_tiles, hb % heads, hb / heads, s_first,
                   s_last, slot, first, phase, smem);
      __syncthreads();  // every thread done with this tile's shared memory
    }
  }
}

}  // namespace fa::cuda::sm80
