// Shared-memory matrix descriptors of wgmma (sm_90a; PTX ISA "Matrix Descriptor Format"), for
// the 128-byte swizzled layout that the tiles of tile/swizzle.h already have: a 64-bit word
//   bits  0-13  start address >> 4        bits 32-45  stride dimension byte offset (SBO) >> 4
//   bits 16-29  leading dimension byte offset (LBO) >> 4
//   bits 49-51  base offset (0: every tile starts on a 1024-byte boundary)
//   bits 62-63  swizzle: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
// A SwizzledTile<kRows, kCols> (64-column blocks of kRows rows x 128 bytes, 16-byte chunk ^= row %
// 8) on a 1024-byte boundary is the 128-byte-swizzle canonical layout: 8-row x 128-byte atoms of
// 1024 bytes. For one k16 slice of an operand:
//   K-major (rows are M or N, the 16 K elements contiguous: Q and K for S = Q·Kᵀ; A of P·V) -
//     start = tile + block(k0) * kRows * 128 + (k0 % 64) * 2 (inside the atom: the hardware
//     applies the XOR to the address bits, so a k step is +32 bytes), SBO = 1024 (8 rows), LBO
//     unused (16);
//   MN-major (rows are K, N contiguous: V as the B of O = P·V, with the transpose bit) - start =
//     tile + k0 * 128 (k0 a multiple of 16), LBO = kRows * 128 (from one 64-column block of N to
//     the next), SBO = 1024 (from 8 K rows to the next 8).
// Host-tested: tests/test_wgmma_desc.cpp; run on the GPU by the wgmma self-test
// (cuda/selftest/wgmma_selftest.h).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa::cuda {

enum class SmemSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// The descriptor of a matrix at shared-memory byte address addr. Each offset must be a multiple of
// 16 below 2^18 (the field holds bits 4..17); addr below 2^18 (228 KB of shared memory fit).
FA_HOST_DEVICE uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, SmemSwizzle sw) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | uint64_t((lbo & 0x3FFFFu) >> 4) << 16 |
         uint64_t((sbo & 0x3FFFFu) >> 4) << 32 | uint64_t(sw) << 62;
}

constexpr uint32_t kSw128AtomBytes = 1024;  // 8 rows x 128 bytes
constexpr uint32_t kSw128RowBytes = 128;

// K-major k16 slice k0 (a multiple of 16) of a 128-byte-swizzled tile of `rows` rows at tile.
FA_HOST_DEVICE uint64_t kmajor_sw128_desc(uint32_t tile, int rows, int k0) {
  const uint32_t start = tile + uint32_t(k0 / 64) * uint32_t(rows) * kSw128RowBytes +
                         uint32_t(k0 % 64) * 2u;
  return smem_desc(start, 16, kSw128AtomBytes, SmemSwizzle::k128B);
}

// K-major 32-byte k step at byte k_byte (a multiple of 32, below 64) of a 64-byte-swizzled tile
// at tile (512-byte aligned): rows of 64 bytes, 16-byte chunk c of row r at c ^ (r / 2 % 4),
// 8-row atoms of 512 bytes (SBO); the fp8 forward's Vᵀ blocks of 64 keys (fp8_v_layout.h).
FA_HOST_DEVICE uint64_t kmajor_sw64_desc(uint32_t tile, int k_byte) {
  return smem_desc(tile + uint32_t(k_byte), 16, 512, SmemSwizzle::k64B);
}

// MN-major k16 slice k0 (rows k0 .. k0 + 15, a multiple of 16) of a 128-byte-swizzled tile of
// `rows` K rows at tile, N spanning its 64-column blocks.
FA_HOST_DEVICE uint64_t mnmajor_sw128_desc(uint32_t tile, int rows, int k0) {
  return smem_desc(tile + uint32_t(k0) * kSw128RowBytes, uint32_t(rows) * kSw128RowBytes,
                   kSw128AtomBytes, SmemSwizzle::k128B);
}

// The fields back (host tests).
struct SmemDescFields {
  uint32_t addr, lbo, sbo, base_offset, swizzle;
};
FA_HOST_DEVICE SmemDescFields smem_desc_fields(uint64_t d) {
  return {uint32_t(d & 0x3FFFu) << 4, uint32_t((d >> 16) & 0x3FFFu) << 4,
          uint32_t((d >> 32) & 0x3FFFu) << 4, uint32_t((d >> 49) & 0x7u), uint32_t(d >> 62)};
}

// The byte offset the 128-byte swizzle gives element (row, col) of a 16-bit tile of `rows` rows in
// 64-column blocks (the canonical layout's address function, written out for the host test
// against SwizzledTile::offset): 16-byte chunk c of a 128-byte row goes to chunk c ^ (row % 8).
FA_HOST_DEVICE uint32_t sw128_byte_offset(int rows, int row, int col) {
  const uint32_t block = uint32_t(col / 64), linear = uint32_t(row) * kSw128RowBytes +
                                                        uint32_t(col % 64) * 2u;
  return block * uint32_t(rows) * kSw128RowBytes + (linear ^ ((linear >> 3) & 0x70u));
}

}  // namespace fa::cuda
