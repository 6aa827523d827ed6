// Tile sizes and per-thread scratch layout of the CPU flash backend, shared by the workspace
// queries and every instruction-set build of the kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/params.h"
#include "core/checked.h"
#include "core/philox.h"
#include "cpu/bias.h"

namespace fa::cpu {

// Query rows per backward step (its keys: backward_block_n, 64 or 128). A step's query-side
// tiles (Q, dO, dQ: 64 x d) are 16 KB each at d = 64; the key block's K, Kᵀ, Vᵀ, dK, dV and the
// (64 x keys) tiles stay in a 512 KB L2 up to d = 128 with 128 keys, and at d = 256 with 64.
constexpr int64_t kBlockM = 64;
// The forward's query rows per block (a task holds up to kFwdMaxBlocksPerTask of them): Sᵀ's
// width, and the rows whose softmax statistics one pass over a key tile updates.
constexpr int64_t kFwdBlockM = 128;
// Query blocks of a forward task, at most, which share every K / V tile it loads. A tile's rows
// are a head's slice of (seq, head, dim) rows, 2-4 KB apart: loading them (misses that software
// prefetch of the next tile did not hide, Zen 3) took 8-15% of the forward at d 128 with one
// block a task; each block more divides that per FLOP (4 blocks measured 3-5%
// faster than 2 on the full-mask d 128 forward, docs/performance-log.md, issue 34). Each block
// keeps its own masks and key range, so a causal block skips what it skipped alone. A block's Qᵀ
// and O (128 KB at d 128) are read once per key tile, sequentially, so four of them overflowing
// a 512 KB L2 cost little.
constexpr int kFwdMaxBlocksPerTask = 4;
// Fewer blocks a task where there would otherwise be fewer than this many tasks per thread: the
// dynamic schedule needs several to even out causal tasks, whose costs differ by up to
// seqlen_k / kFwdBlockN.
constexpr int64_t kFwdMinTasksPerThread = 4;

// Query blocks per forward task that the per-thread scratch holds: kFwdMaxBlocksPerTask, or
// fewer where the longest sequence has fewer blocks (a short call's workspace stays small).
inline int forward_max_blocks_per_task(const Params& p) {
  const int64_t seq_blocks = (p.seqlen_q + kFwdBlockM - 1) / kFwdBlockM;
  int per_task = kFwdMaxBlocksPerTask;
  while (per_task > 1 && per_task / 2 >= seq_blocks) per_task /= 2;
  return per_task;
}

// Query blocks per forward task for this call on `threads` threads: the most, up to
// forward_max_blocks_per_task, that leave kFwdMinTasksPerThread tasks a thread (1 when none do).
inline int forward_blocks_per_task(const Params& p, int threads) {
  const int64_t blocks = p.batch * p.heads_q * ((p.seqlen_q + kFwdBlockM - 1) / kFwdBlockM);
  int per_task = forward_max_blocks_per_task(p);
  while (per_task > 1 &&
         blocks / per_task < kFwdMinTasksPerThread * std::max<int64_t>(threads, 1))
    per_task /= 2;
  return per_task;
}
// Row length (floats) of the forward's transposed tile Sᵀ (query columns): one cache line more
// than kFwdBlockM, so that the 64 rows a micro-kernel panel walks down are not 512 bytes apart
// (which maps them all into 8 of a 32 KB 8-way L1's 64 sets).
constexpr int64_t kFwdLd = kFwdBlockM + 16;
// Keys per step of the backward's inner loop, the most: see backward_block_n, below.
constexpr int64_t kBlockN = 128;
// Keys per backward step under a causal mask or a window, and above d 128 (backward_block_n). A
// step whose tile straddles the diagonal still computes all of it, and 128 keys doubled that
// waste (the fp32 d 64 s 512 and d 128 s 1024 causal backwards 5-12% slower than with 64, Zen 3,
// one thread's CPU time; issue 34).
constexpr int64_t kBlockNWindowed = 64;
// Keys per step of the forward: O += P V's depth. Each step reads and writes every block's O
// (64 KB at d 128, from L2) and rescales it where a row's max moved; 128 keys halve that per
// FLOP against 64. Sᵀ (128 x kFwdLd) is 74 KB, K and V 64 KB each at d 128: in a 512 KB L2.
constexpr int64_t kFwdBlockN = 128;
static_assert(kFwdBlockN % DropoutStream::kCols == 0, "key tiles are whole dropout blocks");
// The dropout mask is drawn a block's columns at a time (DropoutStream::keep_row32, aligned).
static_assert(kBlockN % DropoutStream::kCols == 0 && kBlockNWindowed % DropoutStream::kCols == 0,
              "key tiles are whole dropout blocks");
// Tiles are padded to 16 columns (one vector of the widest build's micro-kernel, see tile.h) and
// 4 rows (its narrowest row band).
constexpr int64_t kPadCols = 16;
constexpr int64_t kPadRows = 4;

constexpr int64_t pad_cols(int64_t x) { return (x + kPadCols - 1) / kPadCols * kPadCols; }
constexpr int64_t pad_rows(int64_t x) { return (x + kPadRows - 1) / kPadRows * kPadRows; }

// Keys per step of the backward. Each step reads every query block's Q, dO (each row-major and
// packed) and dQ accumulator: five seqlen_q x d fp32 matrices, 5 MB at d 128 s 2048, that leave a
// 512 KB L2 and are read again for every key block. 128 keys halve those sweeps (and dQ += dS K's
// C loads and stores) against 64 while the key block's own K, Kᵀ, Vᵀ, dK, dV (5 x 64 KB at
// d 128) stay in L2: the fp32 d 128 s 2048 full-mask backward ran 10-14% faster (Zen 3, one
// thread's CPU time; issue 34). Above d 128 those five are 640 KB: bf16 d 256 s 512 ran 3-4%
// slower with 128 keys (d 256 s 1024 8% faster, one run), so d > 128 keeps 64, as do causal and
// windowed calls (kBlockNWindowed), and calls whose five query-side matrices fit in L2 (nothing
// to save there, and the larger tiles would only add scratch: at s 96, d 32 more than the
// standard attention's workspace).
constexpr int64_t kL2Bytes = 512 * 1024;
inline int64_t backward_block_n(const Params& p) {
  const bool every_key_visible = p.window_left < 0 && p.window_right < 0;
  // (5 x seqlen_q x d floats > kL2Bytes, divided rather than multiplied: seqlen_q may be huge.)
  const int64_t rows_in_l2 = kL2Bytes / (5 * int64_t(sizeof(float)) * pad_cols(p.head_dim));
  return every_key_visible && pad_cols(p.head_dim) <= 128 && p.seqlen_q > rows_in_l2
             ? kBlockN
             : kBlockNWindowed;
}

// Bump allocator over a caller-provided buffer; blocks are cache-line aligned.
class Arena {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t block_bytes(size_t n_floats) {
    return (n_floats * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  }
  // The same size, overflow-checked: what the workspace queries add up (see Checked).
  static Checked checked_block_bytes(Checked n_floats) {
    return (n_floats * int64_t(sizeof(float)) + int64_t(kAlign - 1)).round_down(int64_t(kAlign));
  }
  Arena(void* base, size_t bytes) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(base);
    const uintptr_t aligned = (p + kAlign - 1) / kAlign * kAlign;
    base_ = reinterpret_cast<char*>(aligned);
    size_ = bytes >= aligned - p ? bytes - (aligned - p) : 0;
  }
  float* floats(size_t n) {
    float* out = reinterpret_cast<float*>(base_ + used_);
    used_ += block_bytes(n);
    return out;
  }
  void skip(size_t bytes) { used_ += bytes; }
  size_t used() const { return used_; }
  size_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

// Per-thread scratch of the forward: per query block of a task Qᵀ, O and the row statistics m, l
// and the rescale factor alpha; K, V and Sᵀ/Pᵀ tiles (flash_fwd.cpp's ForwardScratch).
inline Checked forward_thread_bytes(const Params& p) {
  const int64_t dp = pad_cols(p.head_dim);
  auto block = Arena::checked_block_bytes;
  return (block(dp * kFwdBlockM)           // Qt, packed
          + block(kFwdBlockM * dp)         // O
          + block(kFwdBlockM) * 3)         // m, l, alpha
             * forward_max_blocks_per_task(p)
         + block(kFwdBlockN * dp) * 2      // K, V
         + block(kFwdBlockN * kFwdLd);     // St, then Pt
}

// Per-thread scratch of the backward: the dQ accumulator, Q and dO of a whole (batch, head)
// sequence, D, and the tiles of one (query block, key block) step. p.seqlen_q is the longest
// sequence (the real one of a packed batch: validate reads it from cu_seqlens), not a caller's
// claim.
inline Checked backward_thread_bytes(const Params& p) {
  const int64_t dp = pad_cols(p.head_dim), bn = backward_block_n(p);
  const Checked rows = (Checked(p.seqlen_q) + (kPadRows - 1)).round_down(kPadRows);  // pad_rows
  auto block = Arena::checked_block_bytes;
  return block(rows * dp) * 5              // dQ accumulator; Q (scaled), dO, each also packed
         + block(rows)                     // D = rowsum(dO * O)
         + block(bn * dp) * 3              // K packed, dK, dV
         + block(dp * bn) * 2              // Kt, Vt packed
         + block(dp)                       // a row of O
         + block(kBlockM * bn) * 5         // S->P, keep, dP->dS, softcap slope, P * keep
         + block(kBlockM);                 // lse of the block
}

// Shared by all threads of the backward under GQA: per-query-head dK and dV partial sums, fp32,
// (heads_q, total_k, head_dim) each, summed over each kv head's group in a fixed order.
// Plus, with dbias, the per-(batch, query head) fp32 partials of cpu/bias.h.
inline Checked backward_shared_bytes(const Params& p) {
  const Checked dbias = Arena::checked_block_bytes(dbias_partial_elems(p));
  if (p.group() == 1) return dbias;
  return Arena::checked_block_bytes(Checked(p.heads_q) * p.total_k * p.head_dim) * 2 + dbias;
}

// Entry points of one instruction-set build (flash_fwd.cpp / flash_bwd.cpp).
#define FA_DECLARE_CPU_FLASH(isa)                                                 \
  namespace isa {                                                                 \
  void flash_forward(const Params& p, void* workspace, size_t bytes, int threads);  \
  void flash_backward(const Params& p, void* workspace, size_t bytes, int threads); \
  }
FA_DECLARE_CPU_FLASH(generic)
FA_DECLARE_CPU_FLASH(avx2)
FA_DECLARE_CPU_FLASH(avx512)
#undef FA_DECLARE_CPU_FLASH

}  // namespace fa::cpu
