// The Hopper fp8 e4m3 forward (cuda-sm90 with FwdTraits::kFp8, src/cuda/kernels/sm90/
// fwd_fp8_sm90.cu, issue 30) on an sm90 GPU: every grid case must be taken by cuda-sm90
// (asserted through the registry) and its out must match the fp64 reference on the dequantized
// inputs by FlashAttention's rule against the naive fp8 baseline (fp32 accumulation with P rounded
// to e4m3, as test_fp8.cpp's; 2x its error + 1e-5), its LSE the fp32 baseline's with a slack for
// the tensor cores' fp8 accumulation (expect_fp8_results), outputs and workspace poisoned,
// fresh inputs, odd lengths. The grid: kernel head dims 64 / 128 / 256 and dims served by them
// (48, 96, 192), out bf16 / fp16, descales on and off, full / causal / windows / softcap / ALiBi,
// GQA and MQA (packed GQA tiles at short seqlen_q), packed batches with empty sequences, strided
// views, seqlen_q != seqlen_k and rows that see no key; the tile schedulers' knobs. Refusals: the
// fp8 forward nowhere else (a clear FA_ERROR_UNSUPPORTED naming fp8), no fp8 backward.
// Sm90Fp8Layout checks the Vᵀ block layout and P's register packing on the host (every build).
//
// Written without a GPU (compile-checked for sm_90a only); not yet run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cuda/arch/wgmma_desc.h"
#include "cuda/kernels/sm90/fp8_v_layout.h"
#include "gpu_support.h"

namespace fa::test {
namespace {

using fa::cuda::sm90::fp8_key_at;
using fa::cuda::sm90::fp8_pos_of;
using fa::cuda::sm90::fp8_vt_offset;
using fa::cuda::sm90::Fp8VLayout;

// P's packing (fwd_kernel.cuh, `pack` under kFp8): k step kk's register j of lane (g, t) takes
// the accumulators f[...] of n-tiles 4 kk .. 4 kk + 3 named below. The wgmma 8-bit A fragment
// (PTX ISA; wgmma.cuh) puts byte e of register j at row g + 8 (j % 2), k 16 (j / 2) + 4 t + e.
// The accumulator f[4 n + 2 h + e'] of n-tile n is (row g + 8 h, column 8 n + 2 t + e'). So the
// key multiplying A's k is the accumulator's column, and Vᵀ's position k must hold that key.
TEST(Sm90Fp8Layout, PackedPMatchesTheVtKeyOrder) {
  // The accumulator index each (register, byte) takes, as the kernel writes it.
  const int take[4][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}, {8, 9, 12, 13}, {10, 11, 14, 15}};
  for (int t = 0; t < 4; ++t)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 4; ++e) {
        const int f = take[j][e];
        const int n = f / 4, h = (f % 4) / 2, e2 = f % 2;
        const int acc_row_half = h, acc_col = 8 * n + 2 * t + e2;  // within the 32-key step
        const int a_row_half = j % 2, a_k = 16 * (j / 2) + 4 * t + e;
        ASSERT_EQ(acc_row_half, a_row_half) << "t " << t << " reg " << j << " byte " << e;
        ASSERT_EQ(fp8_key_at(a_k), acc_col) << "t " << t << " reg " << j << " byte " << e;
      }
  for (int a = 0; a < 128; ++a) {
    ASSERT_EQ(fp8_pos_of(fp8_key_at(a)), a);
    ASSERT_EQ(fp8_key_at(a) / 32, a / 32) << "a step's keys stay in the step";
  }
}

// A block's bytes: each (row, position) once, inside the block, 16-byte chunks whole; the
// 128-byte swizzle (128 keys) and the 64-byte one (64 keys, d 256).
TEST(Sm90Fp8Layout, VtBlockOffsetsCoverTheBlockOnce) {
  for (const auto& [rows, n] : std::vector<std::pair<int, int>>{{64, 128}, {128, 128}, {256, 64}}) {
    std::vector<int> hits(size_t(rows * n), 0);
    for (int r = 0; r < rows; ++r)
      for (int a = 0; a < n; ++a) {
        const uint32_t off = fp8_vt_offset(r, a, n);
        ASSERT_LT(off, uint32_t(rows * n));
        ASSERT_EQ(off / n, uint32_t(r)) << "a row stays in its row";
        if (a % 16 != 0) {
          ASSERT_EQ(off, fp8_vt_offset(r, a - a % 16, n) + uint32_t(a % 16));
        }
        ++hits[off];
      }
    for (int h : hits) ASSERT_EQ(h, 1);
  }
  // The 128-byte swizzle is wgmma_desc.h's sw128_byte_offset (the layout TMA writes for Q and K
  // and the descriptors read, checked on the GPU by the wgmma self-test) for the same bytes.
  for (int r = 0; r < 128; ++r)
    for (int a = 0; a < 128; ++a)
      ASSERT_EQ(fp8_vt_offset(r, a, 128), fa::cuda::sw128_byte_offset(128, r, a / 2) + uint32_t(a % 2));
  EXPECT_EQ(fp8_vt_offset(3, 16, 128), 3u * 128 + (1u ^ 3u) * 16);
  EXPECT_EQ(fp8_vt_offset(5, 48, 64), 5u * 64 + (3u ^ 2u) * 16);
}

// The 64-byte-swizzle K-major descriptor of the d 256 Vᵀ blocks (wgmma_desc.h): start + the k
// step's bytes, 8-row atoms of 512 bytes, layout type 2.
TEST(Sm90Fp8Layout, Sw64Descriptor) {
  const auto f = fa::cuda::smem_desc_fields(fa::cuda::kmajor_sw64_desc(4096, 32));
  EXPECT_EQ(f.addr, 4096u + 32u);
  EXPECT_EQ(f.sbo, 512u);
  EXPECT_EQ(f.swizzle, 2u);
  EXPECT_EQ(f.base_offset, 0u);
}

// Packed batches: sequence b's blocks [k_start / n + b, + its tiles) never overlap the next's.
TEST(Sm90Fp8Layout, PackedBlocksDoNotOverlap) {
  std::mt19937 rng(30);
  for (const int n : {128, 64})
    for (int trial = 0; trial < 200; ++trial) {
      const int batch = 1 + int(rng() % 9);
      std::vector<int64_t> cu{0};
      for (int b = 0; b < batch; ++b) cu.push_back(cu.back() + int64_t(rng() % 400));
      Fp8VLayout l;
      l.packed = true;
      l.block_n = n;
      l.blocks_per_head = fa::cuda::sm90::fp8_vt_blocks_per_head(true, batch, 0, cu.back(), n);
      std::set<int64_t> used;
      for (int b = 0; b < batch; ++b) {
        const int64_t tiles = (cu[b + 1] - cu[b] + n - 1) / n;
        for (int tile = 0; tile < tiles; ++tile) {
          const int64_t blk = l.block_index(b, cu[b], tile);
          ASSERT_TRUE(used.insert(blk).second) << "block " << blk << " twice";
          ASSERT_LT(blk, l.blocks_per_head);
        }
      }
    }
}

#ifdef FA_TEST_CUDA

// Out by the rule against the naive fp8 baseline (2x its error + 1e-5). The LSE by the rule
// against the fp32 baseline with a slack for Hopper's fp8 tensor cores, which no CPU baseline
// here models: within each k32 wgmma step the products and the accumulator are aligned to the
// largest exponent among them and each term is cut toward zero about 13 bits below it, so a
// logit moves by a few 2^-13 of the row's largest |logit|. A host emulation of that rule on the
// first GPU run's inputs reproduced its LSE errors (0.027 at d 128 and 0.034 at d 256, causal
// 1537 x 2049 with logits near 35; 3e-4 and 5e-4 where the descales made the logits ~8x smaller),
// at most 7.2 x 2^-13 of the largest |LSE|: the slack is twice that (2e-3 ~ 16 x 2^-13) plus 1e-3,
// while a wrong layout or scale moves the LSE by O(1). Prints both errors.
constexpr double kLseSlack = 1e-3, kLseSlackPerLogit = 2e-3;

void expect_fp8_results(Problem& pr, const DeviceProblem& dev) {
  dev.out.copy_to(pr.out);
  dev.lse.copy_to(pr.lse);
  const Dense got = outputs(pr, false);
  const Dense ref = reference(pr, false, false);
  const Dense naive = reference(pr, true, false, /*round_p=*/true);  // P rounded to e4m3
  expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
  expect_rule("lse", got.lse, ref.lse, naive.lse, 2,
              1e-5 + kLseSlack + kLseSlackPerLogit * max_abs(ref.lse));
  std::printf("[ fp8 sm90 ] %s: out %.3g (naive fp8 %.3g), lse %.3g (naive %.3g)\n",
              pr.c.name().c_str(), max_abs_diff(got.out, ref.out), max_abs_diff(naive.out, ref.out),
              max_abs_diff(got.lse, ref.lse), max_abs_diff(naive.lse, ref.lse));
}

// The fp8 forward's kernel head dims and dims they serve (multiples of 16).
std::vector<Case> fp8_cases() {
  std::vector<Case> out;
  uint64_t seed = 30900;
  const std::vector<std::pair<int, int>> lens{{113, 203}, {300, 77}, {1, 129}, {128, 128},
                                              {257, 1000}, {64, 64}};
  int n = 0;
  for (const int d : {128, 64, 256, 96, 48, 192})
    for (int feature = 0; feature < 7; ++feature) {
      Case c;
      c.dtype = FA_DTYPE_FP8_E4M3;
      c.out_dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.descale = n % 3 != 2;
      c.input_scale = 2.0;  // e4m3 values up to ~10: its normal range, a few subnormals
      c.batch = 2;
      c.heads_kv = 2;
      c.heads_q = c.heads_kv * ((n % 3 == 0) ? 4 : (n % 3 == 1) ? 1 : 2);
      c.head_dim = d;
      c.seqlen_q = lens[size_t(n % 6)].first;
      c.seqlen_k = lens[size_t(n % 6)].second;
      if (feature == 1) c.causal = true;
      if (feature == 2) { c.window_left = 50; c.window_right = 7; }
      if (feature == 3) c.softcap = 20.f;
      if (feature == 4) { c.alibi = true; c.causal = true; }
      if (feature == 5) {  // packed, with an empty sequence and one of a single query
        c.batch = 4;
        c.lens_q = {int32_t(c.seqlen_q), 0, 1, 70};
        c.lens_k = {int32_t(c.seqlen_k), 9, 130, 0};
        c.causal = (n % 2) == 1;
      }
      if (feature == 6) c.softcap = 10.f, c.window_left = 30, c.window_right = 0;
      c.strided = n % 4 == 1;
      c.pad = 16;  // fp8 rows move in 16-byte chunks
      c.seed = seed++;
      ++n;
      out.push_back(c);
    }
  // Longer calls: many key tiles a work tile and several work tiles a block (persistent), MQA.
  for (const int d : {128, 256})
    for (const bool causal : {false, true}) {
      Case c;
      c.dtype = FA_DTYPE_FP8_E4M3;
      c.out_dtype = causal ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.descale = true;
      c.input_scale = 2.0;
      c.batch = 1;
      c.heads_q = 3;
      c.heads_kv = 1;
      c.head_dim = d;
      c.seqlen_q = 1537;
      c.seqlen_k = 2049;
      c.causal = causal;
      c.seed = seed++;
      out.push_back(c);
    }
  return out;
}

class GpuSm90Fp8 : public ::testing::TestWithParam<Case> {};

TEST_P(GpuSm90Fp8, MatchesReferenceAndRanSm90) {
  std::string why;
  if (skip_without_sm90(Pass::Forward, Tuning{}, &why)) GTEST_SKIP() << why;
  ASSERT_TRUE(why.empty()) << why;
  if (skip_head_dim_not_built(GetParam().head_dim, &why)) GTEST_SKIP() << why;
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  ASSERT_EQ(family_of(dev.p, Pass::Forward, Tuning{}), "cuda-sm90");
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  expect_fp8_results(pr, dev);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuSm90Fp8, ::testing::ValuesIn(fp8_cases()), CaseTestName{});

// The tile schedulers (Tuning::sm90_fwd_persistent: one block a tile, dynamic, static) and GQA
// packing on and off give the same results, each matching the reference.
TEST(GpuSm90Fp8Knobs, SchedulersAndPacking) {
  std::string why;
  if (skip_without_sm90(Pass::Forward, Tuning{}, &why)) GTEST_SKIP() << why;
  for (const int persistent : {0, 1, 2})
    for (const bool pack : {false, true}) {
      SCOPED_TRACE("persistent " + std::to_string(persistent) + (pack ? " packed GQA" : ""));
      Case c;
      c.dtype = FA_DTYPE_FP8_E4M3;
      c.out_dtype = FA_DTYPE_BF16;
      c.descale = true;
      c.input_scale = 2.0;
      c.batch = 3;
      c.heads_q = 8;
      c.heads_kv = 2;  // a group of 4: packed tiles at seqlen_q < 128
      c.head_dim = 128;
      c.seqlen_q = pack ? 37 : 333;
      c.seqlen_k = 555;
      c.seed = uint64_t(31000 + 2 * persistent + pack);
      Problem pr(c);
      DeviceProblem dev(pr, FA_BACKEND_AUTO);
      Tuning t;
      t.sm90_fwd_persistent = persistent;
      t.sm90_fwd_pack_gqa = pack;
      ASSERT_EQ(family_of(dev.p, Pass::Forward, t), "cuda-sm90");
      run_pass(dev.p, false, &t);
      if (HasFatalFailure()) return;
      expect_fp8_results(pr, dev);
    }
}

// fp8 has no other CUDA forward: with the sm90 family off (or a call it refuses) the call fails
// with FA_ERROR_UNSUPPORTED naming fp8 and cuda-sm90's reason; the backward is refused by name.
TEST(GpuSm90Fp8Refusals, NamedErrors) {
  std::string why;
  if (skip_without_sm90(Pass::Forward, Tuning{}, &why)) GTEST_SKIP() << why;
  Case c;
  c.dtype = FA_DTYPE_FP8_E4M3;
  c.out_dtype = FA_DTYPE_BF16;
  c.head_dim = 128;
  c.seqlen_q = 65;
  c.seqlen_k = 65;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  Tuning off;
  off.sm90_fwd = false;
  const std::string f = family_of(dev.p, Pass::Forward, off);
  EXPECT_NE(f.find("fp8_e4m3"), std::string::npos) << f;
  EXPECT_NE(f.find("cuda-sm90"), std::string::npos) << f;
  size_t bytes = 0;
  EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Forward, off, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(fa_backward_workspace_size(&dev.p, &bytes), FA_OK);
  EXPECT_NE(std::string(fa_last_error()).find("fp8"), std::string::npos) << fa_last_error();
}

#else

TEST(GpuSm90Fp8, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }

#endif

}  // namespace
}  // namespace fa::test
