// The sm80-family backward kernels (built unless -DFA_CUDA_BACKWARD=OFF): one per (element type,
// head dim), each in its own generated file under instantiations/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "api/params.h"
#include "cuda/arch/mma.cuh"

namespace fa::cuda::sm80 {

// Query rows per step of the main kernel (BwdTraits::kBlockM): kBwdBlockM, or kBwdWideBlockM at
// d <= 64 where the device gives a block the shared memory for it (bwd_wide_m). The semaphores
// are counted in kBwdBlockM tiles (enough for either), and each sequence has kBwdSpareRows spare
// workspace rows, for the main kernel's partial query tiles of either size.
constexpr int kBwdBlockM = 64;
constexpr int kBwdWideBlockM = 128;
constexpr int kBwdSpareRows = kBwdWideBlockM;

// Workspace of a backward with a kernel of head dim kernel_d, in this order: the fp32 dQ
// accumulator (heads_q x rows x kernel_d), the deterministic mode's semaphores (int32, heads_q x
// batch x query tiles of the longest sequence), D = rowsum(dO ∘ O) and
// LSE · log2 e (heads_q x rows each), rows = total_q + batch x kBwdSpareRows (each sequence has
// kBwdSpareRows spare rows, for the main kernel's partial query tiles). All 4-byte elements.
struct BwdLayout {
  size_t dq_acc_elems, sem_elems, dsum_elems, lse2_elems, m_blocks;
  size_t bytes() const { return (dq_acc_elems + sem_elems + dsum_elems + lse2_elems) * 4; }
};
// Workspace rows of one head (BwdWorkspace::rows).
inline size_t bwd_rows(const Params& p) {
  return size_t(p.total_q) + size_t(p.batch) * size_t(kBwdSpareRows);
}
inline BwdLayout bwd_layout(const Params& p, int kernel_d) {
  BwdLayout l;
  const size_t rows = size_t(p.heads_q) * bwd_rows(p);
  l.m_blocks = size_t((p.seqlen_q + kBwdBlockM - 1) / kBwdBlockM);
  l.dq_acc_elems = rows * size_t(kernel_d);
  l.sem_elems = size_t(p.heads_q) * size_t(p.batch) * l.m_blocks;
  l.dsum_elems = rows;
  l.lse2_elems = rows;
  return l;
}
// Keys per block of the main kernel (BwdTraits::kBlockN): 128 up to d = 128; above, 64, so that
// dK and dV (kBlockN x d fp32 over the block's 256 threads) stay at 128 registers a thread.
constexpr int bwd_block_n(int kernel_d) { return kernel_d > 128 ? 64 : 128; }

// Dynamic shared memory of the main kernel (BwdTraits::kSmemBytes; the launch asserts they
// agree): K and V tiles of block_n keys, q_bufs buffers each of the Q and dO tiles (block_m
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
// limit, or less where the environment variable FA_SM80_BWD_SMEM_LIMIT (bytes) says so - a test
// hook that runs the configurations of smaller parts on a larger one (sm86 / sm89: 101376,
// A100: 166912). Read on every call.
int bwd_smem_optin(const Params& p);

inline size_t bwd_workspace_bytes(const Params& p, int kernel_d) {
  return bwd_layout(p, kernel_d).bytes();
}

template <int kHeadDim, typename Tag>
void run_bwd(const Params& p, void* workspace, cudaStream_t stream);

#define FA_SM80_BWD_EXTERN(D)                                                         \
  extern template void run_bwd<D, Bf16Tag>(const Params&, void*, cudaStream_t); \
  extern template void run_bwd<D, Fp16Tag>(const Params&, void*, cudaStream_t);
FA_SM80_BWD_EXTERN(32)
FA_SM80_BWD_EXTERN(64)
FA_SM80_BWD_EXTERN(96)
FA_SM80_BWD_EXTERN(128)
FA_SM80_BWD_EXTERN(160)
FA_SM80_BWD_EXTERN(192)
FA_SM80_BWD_EXTERN(224)
FA_SM80_BWD_EXTERN(256)
#undef FA_SM80_BWD_EXTERN

}  // namespace fa::cuda::sm80
