// Tile sizes and per-thread scratch layout of the CPU flash backend, shared by the workspace
// queries and every instruction-set build of the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.h"
#include "core/checked.h"
#include "core/philox.h"
#include "cpu/bias.h"

namespace fa::cpu {

// 64 x 64 tiles: at d = 64 each of Q, K, V, S and O is 16 KB, so a task's working set (~100 KB)
// stays in a 512 KB L2 with room for the next tile; at d = 256 it is ~330 KB, still in L2.
constexpr int64_t kBlockM = 64;  // query rows per backward step
// The forward's query rows per task: 128 loads each K / V tile once for twice the rows, halving
// that cost per FLOP; its working set at d = 256 (~0.4 MB) still fits a 1 MB L2 (Zen 4, Xeon: 1-2 MB).
constexpr int64_t kFwdBlockM = 128;
// Row length (floats) of the forward's transposed tiles Qᵀ and Sᵀ (query columns): one cache
// line more than kFwdBlockM, so that the 64 rows a micro-kernel panel walks down are not 512
// bytes apart (which maps them all into 8 of a 32 KB 8-way L1's 64 sets).
constexpr int64_t kFwdLd = kFwdBlockM + 16;
constexpr int64_t kBlockN = 64;  // keys per step of the inner loop
// The dropout mask is drawn a block's columns at a time (DropoutStream::keep_row32, aligned).
static_assert(kBlockN % DropoutStream::kCols == 0, "key tiles are whole dropout blocks");
// Tiles are padded to 16 columns (one vector of the widest build's micro-kernel, see tile.h) and
// 4 rows (its narrowest row band).
constexpr int64_t kPadCols = 16;
constexpr int64_t kPadRows = 4;

constexpr int64_t pad_cols(int64_t x) { return (x + kPadCols - 1) / kPadCols * kPadCols; }
constexpr int64_t pad_rows(int64_t x) { return (x + kPadRows - 1) / kPadRows * kPadRows; }

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

// Per-thread scratch of the forward: Qᵀ, K, V, Sᵀ/Pᵀ, O tiles and the row statistics m, l and
// the rescale factor alpha (flash_fwd.cpp's ForwardScratch).
inline Checked forward_thread_bytes(const Params& p) {
  const int64_t dp = pad_cols(p.head_dim);
  auto block = Arena::checked_block_bytes;
  return block(dp * kFwdLd)                // Qt
         + block(kFwdBlockM * dp)          // O
         + block(kBlockN * dp) * 2         // K, V
         + block(kBlockN * kFwdLd)         // St, then Pt
         + block(kFwdBlockM) * 3;          // m, l, alpha
}

// Per-thread scratch of the backward: the dQ accumulator, Q and dO of a whole (batch, head)
// sequence, D, and the tiles of one (query block, key block) step. p.seqlen_q is the longest
// sequence (the real one of a packed batch: validate reads it from cu_seqlens), not a caller's
// claim.
inline Checked backward_thread_bytes(const Params& p) {
  const int64_t dp = pad_cols(p.head_dim);
  const Checked rows = (Checked(p.seqlen_q) + (kPadRows - 1)).round_down(kPadRows);  // pad_rows
  auto block = Arena::checked_block_bytes;
  return block(rows * dp) * 3              // dQ accumulator, Q (scaled), dO
         + block(rows)                     // D = rowsum(dO * O)
         + block(kBlockN * dp) * 3         // K, dK, dV
         + block(dp * kBlockN) * 2         // Kt, Vt
         + block(dp)                       // a row of O
         + block(kBlockM * kBlockN) * 4    // S->P, P dropped, dP->dS, softcap slope
         + block(kBlockN * kBlockM)        // a transposed (key, query) tile
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
