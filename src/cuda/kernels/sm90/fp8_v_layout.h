// The fp8 forward's V operand (fwd_kernel.cuh with FwdTraits::kFp8). wgmma reads 8-bit B operands
// K-major only, and for O += P·V the K dimension is the keys, which V (keys, head_dim) holds
// strided. A pre-pass (fwd_fp8_sm90.cu, vt_kernel) therefore writes Vᵀ into the call's workspace,
// one block for each (kv head, sequence, key tile of fp8_block_n keys): the kernel head dim's rows,
// each the tile's keys as bytes, in the swizzled image that the kernel's shared-memory descriptor
// reads, so that one 1-D bulk copy a key tile loads it: 128 keys a row in the 128-byte swizzle
// (16-byte chunk c of row r at c ^ (r % 8), as TMA writes Q and K), or at d 256, 64 keys a row in
// the 64-byte swizzle (chunk c of row r at c ^ (r / 2 % 4), 8-row atoms of 512 bytes). Keys past
// the sequence's end and rows past head_dim are zeros. The cost: V read and written once more,
// about 1-2% of a long call's memory traffic and none of its tensor-core time.
//
// Inside each 32-key k step the keys are permuted: a thread's fp32 accumulators of S hold, for
// each of its rows, columns 2t, 2t + 1 of every 8-key n-tile (t = lane % 4), while the 8-bit A
// fragment wants k 4t..4t + 3 and 16 + 4t..16 + 4t + 3 (wgmma.cuh). Packing the accumulators as
// they stand (four values of one row from two neighbouring n-tiles a register) makes A's k
// position a hold key fp8_key_at(a); listing V's keys in that same order makes the product exact.
// Host-tested: tests/test_sm90_fp8_layout.cpp.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa::cuda::sm90 {

// Keys a key tile of the fp8 kernel at kernel head dim kD: one 128-byte row of a Vᵀ block (the
// 128-byte swizzle's span) up to d 128; 64 at d 256, where O's 128 fp32 registers a thread leave
// no room for S of 128 keys (ptxas: 164 / 232 bytes spilled at 128 keys; S 32 registers at 64).
constexpr int fp8_block_n(int kD) { return kD <= 128 ? 128 : 64; }

// The key (inside its key tile) at position a of a Vᵀ row: in each 32-key step, the 16-key half
// h and, inside it, A's k = 4t + i holds key 8 (i / 2) + 2t + i % 2.
FA_HOST_DEVICE constexpr int fp8_key_at(int a) {
  return a / 16 * 16 + 8 * ((a % 4) / 2) + 2 * ((a % 16) / 4) + (a % 2);
}
// Its inverse: the position of key k of the tile.
FA_HOST_DEVICE constexpr int fp8_pos_of(int k) {
  return k / 16 * 16 + 4 * ((k % 8) / 2) + 2 * ((k % 16) / 8) + (k % 2);
}
// The byte of (row r, position a) in a block of block_n-byte rows: 16-byte chunk a / 16 at
// a / 16 ^ r % 8 (128-byte swizzle) or a / 16 ^ (r / 2) % 4 (64-byte swizzle).
FA_HOST_DEVICE constexpr uint32_t fp8_vt_offset(int r, int a, int block_n) {
  const int chunk = a / 16 ^ (block_n == 128 ? r % 8 : r / 2 % 4);
  return uint32_t(r * block_n + chunk * 16 + a % 16);
}

// Where the blocks are. Fixed-length batches: kv head hk's blocks, then the next head's; inside
// one, sequence b's key tiles at b * tiles_per_seq. Packed batches: sequence b (first key
// k_start) starts at block k_start / block_n + b, which leaves a gap of at least one block
// between sequences (ceil(len / n) <= floor(len / n) + 1) and needs no prefix sum.
struct Fp8VLayout {
  unsigned char* data = nullptr;
  int64_t blocks_per_head = 0;
  int tiles_per_seq = 0;  // fixed-length batches
  int block_n = 0;        // keys a block (fp8_block_n)
  int block_bytes = 0;    // the kernel head dim x block_n
  bool packed = false;
  FA_HOST_DEVICE int64_t block_index(int b, int64_t k_start, int tile) const {
    return packed ? k_start / block_n + b + tile : int64_t(b) * tiles_per_seq + tile;
  }
  FA_HOST_DEVICE unsigned char* block(int b, int hk, int64_t k_start, int tile) const {
    return data + (int64_t(hk) * blocks_per_head + block_index(b, k_start, tile)) * block_bytes;
  }
};

// The blocks one kv head needs: batch x the tiles of seqlen_k keys, or packed, the tiles of
// total_k keys plus one a sequence.
FA_HOST_DEVICE constexpr int64_t fp8_vt_blocks_per_head(bool packed, int64_t batch, int64_t seqlen_k,
                                                        int64_t total_k, int block_n) {
  return packed ? (total_k + block_n - 1) / block_n + batch
                : batch * ((seqlen_k + block_n - 1) / block_n);
}

}  // namespace fa::cuda::sm90
