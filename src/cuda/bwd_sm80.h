// The sm80-family backward kernels (built unless -DFA_CUDA_BACKWARD=OFF): one per (element type,
// head dim), each in its own generated file under instantiations/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/params.h"
#include "core/checked.h"
#include "core/tuning.h"
#include "cuda/arch/mma.cuh"
#include "cuda/instantiations/head_dims.h"
#include "cuda/kernels/sm80/tile_ranges.h"  // BwdTail, bwd_tail_split

namespace fa::cuda::sm80 {

// Query rows per step of the main kernel (BwdTraits::kBlockM): kBwdBlockM, or kBwdWideBlockM at
// d <= 64 where the device gives a block the shared memory for it (bwd_wide_m). The semaphores
// are counted in kBwdBlockM tiles (enough for either), and each sequence has kBwdSpareRows spare
// workspace rows, for the main kernel's partial query tiles of either size.
constexpr int kBwdBlockM = 64;
constexpr int kBwdWideBlockM = 128;
constexpr int kBwdSpareRows = kBwdWideBlockM;

// Workspace of a backward with a kernel of head dim kernel_d, in this order: the fp32 dQ
// accumulator (heads_q x rows x kernel_d), the split tail's step counters (BwdTail: int32 a
// tail tile, padded to 4), the deterministic mode's semaphores (int32, heads_q x batch x query
// tiles of the longest sequence), D = rowsum(dO ∘ O) and LSE · log2 e (heads_q x rows each),
// rows = total_q + batch x kBwdSpareRows (each sequence has kBwdSpareRows spare rows, for the
// main kernel's partial query tiles), then from a 16-byte boundary the split tail's fp32 partial
// dK / dV (kBwdTailSlots per tail block: bwd_tail_part_elems each), then dBias's fp32 sums where
// a 16-bit dBias sums over an axis (BwdDbiasPlan), then for a packed batch the
// sanitized copies of cu_seqlens_q and _k (batch + 1 int32 each: the kernels read these, not the
// caller's arrays; kernels/varlen/sanitize.h). All 4-byte elements. The
// preprocess clears the accumulator, one memset the counters and semaphores after it (when
// used); the partial sums are written whole, never cleared.
// No split tail: no counters, no partial sums.
constexpr const char* kBwdWorkspaceWhat = "the CUDA backward's workspace size";
struct BwdLayout {
  size_t dq_acc_elems, tail_cnt_elems, sem_elems, dsum_elems, lse2_elems, pad_elems,
      tail_part_elems, dbias_elems, cu_elems, m_blocks;
  size_t bytes() const {  // each count fits int64 (bwd_layout), their sum is checked here
    return ((Checked(int64_t(dq_acc_elems)) + int64_t(tail_cnt_elems) + int64_t(sem_elems) +
             int64_t(dsum_elems) + int64_t(lse2_elems) + int64_t(pad_elems) +
             int64_t(tail_part_elems) + int64_t(dbias_elems) + int64_t(cu_elems)) *
            4)
        .bytes(kBwdWorkspaceWhat);
  }
};
// Workspace rows of one head (BwdWorkspace::rows).
inline size_t bwd_rows(const Params& p) {
  return size_t(p.total_q) + size_t(p.batch) * size_t(kBwdSpareRows);
}
// Keys per block of the main kernel (BwdTraits::kBlockN): 128 up to d = 128; above, 64, so that
// dK and dV (kBlockN x d fp32 over the block's 256 threads) stay at 128 registers a thread.
constexpr int bwd_block_n(int kernel_d) { return kernel_d > 128 ? 64 : 128; }

// Dynamic shared memory of the main kernel (BwdTraits::kSmemBytes is this; the traits assert
// that the kernel's layout fills it): K and V tiles of block_n keys, q_bufs buffers each of the Q and dO tiles (block_m
// rows), all in 64-column blocks; the Pᵀ and dSᵀ tiles (block_n x block_m); q_bufs buffers of
// LSE and D; a TMA barrier per buffer (8 bytes). The defaults are the default configuration's.
constexpr int bwd_smem_bytes(int kernel_d, int block_m = kBwdBlockM, int block_n = 0,
                             int q_bufs = 2) {
  const int n = block_n > 0 ? block_n : bwd_block_n(kernel_d);
  return 2 * ((2 * n + 2 * q_bufs * block_m) * ((kernel_d + 63) / 64 * 64) +
              2 * n * ((block_m + 63) / 64 * 64)) +
         q_bufs * 2 * block_m * 4 + q_bufs * 8;
}
// Whether the main kernel runs 128 queries a step: at d <= 64 (FA2's choice there: the step's
// fixed work, two barriers, the LSE / D loads and the element-wise pass's set-up, over twice the
// MMAs) where the device's per-block shared memory allows (162 KB: sm80 / sm90, not sm86 / sm89).
constexpr bool bwd_wide_m(int kernel_d, int smem_optin) {
  return kernel_d <= 64 && bwd_smem_bytes(kernel_d, kBwdWideBlockM) <= smem_optin;
}

// The compact configuration (BwdTraits kCompact) for devices whose per-block shared memory is
// below bwd_smem_bytes: 64 keys a block and one buffer of Q, dO, LSE and D (the next step's
// copies start once the step's dK / dV product no longer reads them, behind the dQ product).
// 80.5 KB at d = 96 / 128 (sm86 / sm89 allow 99 KB), 144.5 KB at d = 224 / 256 (A100 163 KB).
constexpr int kBwdCompactBlockN = 64;
constexpr int bwd_compact_smem_bytes(int kernel_d) {
  return bwd_smem_bytes(kernel_d, kBwdBlockM, kBwdCompactBlockN, 1);
}
constexpr bool bwd_compact(int kernel_d, int smem_optin) {
  return bwd_smem_bytes(kernel_d) > smem_optin && bwd_compact_smem_bytes(kernel_d) <= smem_optin;
}
// The per-block shared memory the backward's configuration choices see: the device's opt-in
// limit, or less where ctx.tuning.sm80_bwd_smem_limit says so (core/tuning.h: how the tests run
// the configurations of smaller parts on a larger one).
int bwd_smem_optin(const Context& ctx);

// Whether the main kernel is launched as the preprocess's programmatic dependent (sm90 and
// later; cudaLaunchAttributeProgrammaticStreamSerialization), so that its blocks start and load
// their K / V tiles while the preprocess's last wave drains: ctx.tuning.sm80_bwd_pdl.
bool bwd_pdl(const Context& ctx);

// Whether the main kernel runs 128-query steps (bwd_wide_m), which the postprocess must know (the
// dQ accumulator's tile order follows the step). Not with dropout: its Philox state on top of
// the wider step's Sᵀ / dPᵀ spilled 936 bytes at d = 64. smem_optin: bwd_smem_optin(p).
// Nor with an attention bias (its kernels take 64-query steps: BwdTraits::kBias).
inline bool bwd_wide(const Params& p, int kernel_d, int smem_optin) {
  return p.dropout_p == 0.f && p.bias.kind == Params::Bias::Kind::None &&
         bwd_wide_m(kernel_d, smem_optin);
}

// The split tail of the main kernel's grid. The grid's blocks each take one key tile (of one kv
// head and batch entry) and walk every step of it, one block per SM (the kernel's registers
// allow no second). When every tile has the same steps (no mask, fixed lengths), the tiles past
// the last whole wave of sms blocks would run as a partial last wave, which takes as long as a
// whole one (at d 64, 4096 tiles on 132 SMs: 32 waves for 31.03 waves of work; at d 128 / 256,
// 2048 tiles: 16 for 15.5). Instead a second kernel, launched after the dp_tiles whole-tile
// blocks, shares their steps out evenly over `ctas` blocks (TailShare, tile-major order); as the
// tail is under a wave, a block's steps span two tiles at most. A block that takes part of a
// tile stores its dK / dV as an fp32 partial sum and counts its steps on the tile; the block
// whose count completes the tile adds the parts in block order and writes dk / dv, so that they
// do not depend on which block finished last. Not in deterministic mode (the dQ order there
// would make blocks of the tail wait on each other), nor with dropout (no tail kernel is built
// for it), nor where the tail is more than 3/4 of a wave or a tile has fewer than
// ctx.tuning.sm80_bwd_tail_min_steps steps (the gain would not pay for the split tiles' extra
// K / V loads, the partial sums and the second launch; core/tuning.h has the measurements).
// This call's tail: its kernel's tile sizes (wide, compact), and no mask, fixed lengths, default
// mode, no attention bias (no tail kernel is built for the bias kernels either).
inline BwdTail bwd_tail(const Params& p, const Context& ctx, int kernel_d) {
  if (p.varlen() || p.deterministic || p.dropout_p > 0.f || p.window_left >= 0 ||
      p.bias.kind != Params::Bias::Kind::None ||
      p.window_right >= 0 || p.seqlen_q <= 0 || p.seqlen_k <= 0)
    return bwd_tail_split(0, 0, 0, 0);
  const int min_steps = ctx.tuning.sm80_bwd_tail_min_steps;
  if (min_steps <= 0) return bwd_tail_split(0, 0, 0, 0);
  const int smem_optin = bwd_smem_optin(ctx), sms = ctx.device.sms;
  const bool compact = kernel_d > 64 && bwd_compact(kernel_d, smem_optin);
  const int block_n = compact ? kBwdCompactBlockN : bwd_block_n(kernel_d);
  const int block_m = bwd_wide(p, kernel_d, smem_optin) ? kBwdWideBlockM : kBwdBlockM;
  const int64_t n_tiles = (p.seqlen_k + block_n - 1) / block_n;
  const int64_t steps = (p.seqlen_q + block_m - 1) / block_m * p.group();
  return bwd_tail_split(n_tiles * p.heads_kv * p.batch, steps, sms, min_steps);
}
// Partial sums a block of the tail keeps: its steps span two tiles at most (TailShare, as the
// tail is under a wave), slot 0 for its first tile, 1 for its second.
constexpr int kBwdTailSlots = 2;
// One partial sum of a tail tile: dK then dV, block_n x kernel_d fp32 each, row-major (the larger
// block_n of the head dim: the compact one is smaller).
constexpr size_t bwd_tail_part_elems(int kernel_d) {
  return size_t(2) * size_t(bwd_block_n(kernel_d)) * size_t(kernel_d);
}

// dBias (Params::Bias::grad) in the bias kernels: summed over an axis (grad_shape 1 where the
// call's extent is above 1) it is accumulated by fp32 reductions, into dbias itself when it is
// fp32 and otherwise into ws_elems fp32 sums in the workspace (dbias's shape, row-major),
// converted into dbias after the main kernel; summed over none, each element is stored once, in
// dbias's dtype. Either way its target is cleared first (masked and unvisited elements are 0).
struct BwdDbiasPlan {
  bool sum[4] = {false, false, false, false};  // (batch, heads_q, queries, keys)
  bool any_sum = false;
  size_t ws_elems = 0;  // the fp32 sums of a 16-bit dBias that sums over an axis
};
inline BwdDbiasPlan bwd_dbias_plan(const Params& p) {
  BwdDbiasPlan d;
  if (p.bias.grad == nullptr) return d;
  const int64_t extent[4] = {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k};
  Checked elems = 1;
  for (int i = 0; i < 4; ++i) {
    d.sum[i] = p.bias.grad_shape[i] == 1 && extent[i] > 1;
    d.any_sum = d.any_sum || d.sum[i];
    elems = elems * p.bias.grad_shape[i];
  }
  if (d.any_sum && p.bias.grad_dtype != DType::F32) d.ws_elems = elems.bytes(kBwdWorkspaceWhat);
  return d;
}

// dBias's target strides (elements; 0 on the summed dimensions and those of size 1): dbias's own,
// or row-major in its shape for the fp32 sums.
inline void bwd_dbias_strides(const Params& p, const BwdDbiasPlan& plan, int64_t out[4]) {
  const Params::Bias& g = p.bias;
  int64_t contiguous = 1;
  for (int i = 3; i >= 0; --i) {
    const int64_t s = plan.ws_elems ? contiguous : g.grad_stride[i];
    out[i] = plan.sum[i] || g.grad_shape[i] == 1 ? 0 : s;
    contiguous *= g.grad_shape[i];
  }
}

// The bias kernels index a step's bias and dBias elements by 32-bit offsets from the step's
// first (bwd_dbias.cuh, StepBias): (query, key) strides with (kBwdBlockM - 1) stride_q +
// (kBwdWideBlockM - 1) stride_k below 2^31, for the bias and for dBias's target. Backward calls
// whose strides do not fit are refused (cuda/backend_table.cpp).
inline bool bwd_bias_offsets_fit(const Params& p) {
  constexpr int64_t kMax = 2147483647;
  auto fits = [&](int64_t sq, int64_t sk) {
    return sq >= 0 && sk >= 0 && sq <= kMax / (kBwdBlockM - 1) &&
           sk <= kMax / (kBwdWideBlockM - 1) &&
           sq * (kBwdBlockM - 1) + sk * (kBwdWideBlockM - 1) <= kMax;
  };
  if (!fits(p.bias.stride_q, p.bias.stride_k)) return false;
  if (p.bias.grad == nullptr) return true;
  int64_t out[4];
  bwd_dbias_strides(p, bwd_dbias_plan(p), out);
  return fits(out[2], out[3]);
}

// Every count overflow-checked (FA_ERROR_SIZE): heads_q x total_q x kernel_d is not bounded by
// q's element count when kernel_d > head_dim.
inline BwdLayout bwd_layout(const Params& p, int kernel_d, const BwdTail& tail) {
  BwdLayout l;
  const char* what = kBwdWorkspaceWhat;
  const Checked per_head = Checked(p.total_q) + Checked(p.batch) * kBwdSpareRows;  // bwd_rows
  const size_t rows = (Checked(p.heads_q) * per_head).bytes(what);
  l.m_blocks = size_t(ceil_div(p.seqlen_q, kBwdBlockM));
  l.dq_acc_elems = (Checked(int64_t(rows)) * kernel_d).bytes(what);
  l.tail_cnt_elems = size_t(tail.tiles + 3) / 4 * 4;
  l.sem_elems = (Checked(p.heads_q) * p.batch * int64_t(l.m_blocks)).bytes(what);
  l.dsum_elems = rows;
  l.lse2_elems = rows;
  const size_t before = l.dq_acc_elems + l.tail_cnt_elems + l.sem_elems + 2 * rows;
  l.pad_elems = tail.ctas > 0 ? (4 - before % 4) % 4 : 0;
  l.tail_part_elems = size_t(tail.ctas) * kBwdTailSlots * bwd_tail_part_elems(kernel_d);
  l.dbias_elems = bwd_dbias_plan(p).ws_elems;
  l.cu_elems = p.varlen() ? 2 * size_t(p.batch + 1) : 0;
  return l;
}

size_t bwd_workspace_bytes(const Params& p, const Context& ctx, int kernel_d);

template <int kHeadDim, typename Tag>
void run_bwd(const Params& p, const Context& ctx, void* workspace, cudaStream_t stream);

#define FA_SM80_BWD_EXTERN(D)                                                                   \
  extern template void run_bwd<D, Bf16Tag>(const Params&, const Context&, void*, cudaStream_t); \
  extern template void run_bwd<D, Fp16Tag>(const Params&, const Context&, void*, cudaStream_t);
FA_SM80_HEAD_DIMS(FA_SM80_BWD_EXTERN)
#undef FA_SM80_BWD_EXTERN

}  // namespace fa::cuda::sm80
