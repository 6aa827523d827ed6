// The sm90 backward's dropout keep bits (src/cuda/kernels/sm90/bwd_dropout.h) against the
// keep-mask every backend shares (core/philox.h's DropoutStream::keep), on the host: for each
// consumer thread of a 128-key tile (two warpgroups, four warps, 32 lanes) and each 64-query
// step, bit 4 j + e must say whether element (query m0 + 8 j + 2 t + e % 2, key key0 + 8 (e / 2))
// is kept, key0 = n0 + 64 c + 16 warp + g as the kernel numbers them.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/philox.h"
#include "cuda/kernels/sm90/bwd_dropout.h"

namespace fa::cuda::sm90 {
namespace {

TEST(Sm90BwdDropout, KeepBitsAreTheStreamsKeep) {
  constexpr int kBlockM = 64, kBlockN = 128;
  for (const float p : {0.17f, 0.5f}) {
    const DropoutStream drop = DropoutStream::make(0x1234abcd5678ull, 99, p);
    int kept = 0, total = 0;
    for (const uint32_t bh : {0u, 7u})
      for (const int n0 : {0, kBlockN, 5 * kBlockN})
        for (const int m0 : {0, kBlockM, 3 * kBlockM})
          for (int c = 0; c < 2; ++c)
            for (int warp = 0; warp < 4; ++warp)
              for (int lane = 0; lane < 32; ++lane) {
                const int g = lane / 4, t = lane % 4;
                const int key0 = n0 + 64 * c + 16 * warp + g;
                const uint32_t bits = bwd_keep_bits<kBlockM>(drop, bh, m0, key0, t);
                for (int j = 0; j < kBlockM / 8; ++j)
                  for (int e = 0; e < 4; ++e) {
                    const int q = m0 + 8 * j + 2 * t + (e & 1), key = key0 + 8 * (e >> 1);
                    const bool want = drop.keep(bh, uint32_t(q), uint32_t(key));
                    ASSERT_EQ(((bits >> (4 * j + e)) & 1u) != 0, want)
                        << "p " << p << " bh " << bh << " n0 " << n0 << " m0 " << m0 << " c " << c
                        << " warp " << warp << " lane " << lane << " j " << j << " e " << e;
                    kept += want;
                    ++total;
                  }
              }
    // The stream keeps about 1 - p (a sanity check that the test sees both outcomes).
    EXPECT_NEAR(double(kept) / total, 1.0 - p, 0.02) << p;
  }
}

}  // namespace
}  // namespace fa::cuda::sm90
