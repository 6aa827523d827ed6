// The wgmma shared-memory descriptors (src/cuda/arch/wgmma_desc.h) on the host: the fields land
// in their bits and come back; the 128-byte swizzle's address function is the layout of the
// tiles the sm80 kernels and TMA already use (SwizzledTile), so the sm90 kernels can share them;
// the K-major and MN-major slice descriptors point where the canonical layout says.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/arch/wgmma_desc.h"
#include "cuda/tile/swizzle.h"

namespace fa::cuda {
namespace {

TEST(WgmmaDesc, FieldsRoundTrip) {
  for (uint32_t addr : {0u, 16u, 1024u, 0x3FFF0u})
    for (uint32_t lbo : {16u, 1024u, 16384u})
      for (uint32_t sbo : {16u, 1024u, 0x3FFF0u})
        for (SmemSwizzle sw : {SmemSwizzle::kNone, SmemSwizzle::k128B, SmemSwizzle::k32B}) {
          const SmemDescFields f = smem_desc_fields(smem_desc(addr, lbo, sbo, sw));
          EXPECT_EQ(f.addr, addr);
          EXPECT_EQ(f.lbo, lbo);
          EXPECT_EQ(f.sbo, sbo);
          EXPECT_EQ(f.base_offset, 0u);
          EXPECT_EQ(f.swizzle, uint32_t(sw));
        }
  // The bit positions themselves (PTX ISA): address >> 4 at bit 0, LBO >> 4 at 16, SBO >> 4 at
  // 32, the 128-byte swizzle as 1 at bit 62.
  EXPECT_EQ(smem_desc(0x400, 0, 0, SmemSwizzle::kNone), uint64_t(0x40));
  EXPECT_EQ(smem_desc(0, 0x10, 0, SmemSwizzle::kNone), uint64_t(1) << 16);
  EXPECT_EQ(smem_desc(0, 0, 0x400, SmemSwizzle::kNone), uint64_t(0x40) << 32);
  EXPECT_EQ(smem_desc(0, 0, 0, SmemSwizzle::k128B), uint64_t(1) << 62);
}

// SwizzledTile's element offsets are the 128-byte swizzle's (for every row and column of tiles
// of 64 .. 256 columns): one layout for cp.async / ldmatrix, TMA's SWIZZLE_128B and wgmma.
template <int kRows, int kCols>
void expect_tile_is_sw128() {
  using Tile = SwizzledTile<kRows, kCols>;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c)
      ASSERT_EQ(uint32_t(2 * Tile::offset(r, c)), sw128_byte_offset(kRows, r, c))
          << "row " << r << " col " << c << " of " << kRows << " x " << kCols;
}

TEST(WgmmaDesc, SwizzledTileIsTheSw128Layout) {
  expect_tile_is_sw128<64, 64>();
  expect_tile_is_sw128<128, 128>();
  expect_tile_is_sw128<64, 256>();
  expect_tile_is_sw128<176, 192>();
}

// A K-major k16 slice starts at the slice's first element of row 0 (block, then +32 bytes a k16
// step inside the 128-byte row), 8-row atoms 1024 bytes apart; MN-major slices start at row k0 of
// the first column block, the next 64 columns kRows * 128 bytes on.
TEST(WgmmaDesc, SliceDescriptorsPointAtTheSlice) {
  constexpr uint32_t kBase = 0x2000;
  using Tile = SwizzledTile<128, 128>;
  for (int k0 = 0; k0 < 128; k0 += 16) {
    const SmemDescFields f = smem_desc_fields(kmajor_sw128_desc(kBase, 128, k0));
    EXPECT_EQ(f.addr, kBase + uint32_t(2 * Tile::offset(0, k0))) << k0;  // row 0: no XOR
    EXPECT_EQ(f.sbo, 1024u);
    EXPECT_EQ(f.swizzle, uint32_t(SmemSwizzle::k128B));
    const SmemDescFields m = smem_desc_fields(mnmajor_sw128_desc(kBase, 128, k0));
    EXPECT_EQ(m.addr, kBase + uint32_t(2 * Tile::offset(k0, 0))) << k0;  // k0 % 8 == 0: no XOR
    EXPECT_EQ(m.lbo, uint32_t(2 * Tile::offset(0, 64)));                 // the next column block
    EXPECT_EQ(m.sbo, 1024u);
  }
}

}  // namespace
}  // namespace fa::cuda
