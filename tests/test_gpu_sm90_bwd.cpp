// The Hopper-native backward (cuda-sm90's backward pass, src/cuda/kernels/sm90/bwd_kernel.cuh,
// issue 28) on an sm90 GPU, with Tuning::sm90_bwd 1 (every backward it serves; the default 2 takes
// d 128 outside the deterministic mode only; the tests set it themselves): every grid case must be
// taken by cuda-sm90 (asserted through the registry) and its dq / dk / dv must match the fp64
// reference by FlashAttention's rule (3x the naive low-precision error + 1e-4), gradients and
// workspace poisoned, fresh inputs, the forward before it the default one. What it does not serve
// yet (other head dims, the deterministic mode, views TMA cannot map) goes to cuda-sm80 with the
// knob on, and with the knob 0 no backward goes to cuda-sm90. Skipped without an sm90 GPU, in a
// build without sm_90a code or without backward kernels. Sm90BwdLayout checks the kernel's dQ
// accumulator order on the host (every build). The grid passed on the H200 at 86e7510 (39 tests);
// its window, softcap, ALiBi, dropout and packed-batch cases passed on an H100 at a127dfd, and the
// grid with the overlapped schedule and the deterministic cases at 6b6e123 (there one deterministic
// d 64 case missed the rule on dK by 5%).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels/sm80/dq_layout.h"
#include "gpu_support.h"

#ifdef FA_TEST_CUDA
#include "api/internal.h"
#endif

namespace fa::test {
namespace {

// The dQ accumulator order of the sm90 main kernel (host-checkable, so on every build): a
// consumer's 64 x 64 dQ block blk (C fragments of its warps w = 0..3, rows 16 w + g (+ 8), column
// 64 blk + 8 n + 2 t (+ 1)) adds at DqTileLayout<16, 64, 4>::pair_offset(4 blk + w, lane, j),
// and the postprocess reads element (row, col) at offset(row, col) of the kBlockM (64) x d tile:
// the two must agree and cover the tile once, at d 128 (blocks 0, 1) and d 64 (block 0).
TEST(Sm90BwdLayout, DqBlocksCoverTheTileOnce) {
  using L = fa::cuda::sm80::DqTileLayout<16, 64, 4>;
  for (const int d : {64, 128}) {
    std::vector<int> hits(size_t(64 * d), 0);
    for (int blk = 0; blk < d / 64; ++blk)
      for (int w = 0; w < 4; ++w)
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < L::kReds; ++j)
            for (int e = 0; e < 2; ++e) {
              const int g = lane / 4, t = lane % 4;
              const int row = 16 * w + 8 * L::half(j) + g;
              const int col = 64 * blk + 8 * L::nt(j) + 2 * t + e;
              const int off = L::pair_offset(4 * blk + w, lane, j) + e;
              ASSERT_EQ(L::mt(j), 0);
              ASSERT_EQ(L::offset(row, col), off) << "d " << d << " row " << row << " col " << col;
              ASSERT_GE(off, 0);
              ASSERT_LT(off, 64 * d);
              ++hits[size_t(off)];
            }
    for (int i = 0; i < 64 * d; ++i) ASSERT_EQ(hits[size_t(i)], 1) << "d " << d << " float " << i;
    // The postprocess reads columns c .. c + 3 (c a multiple of 4) of a row as one float4.
    for (int row = 0; row < 64; ++row)
      for (int c = 0; c < d; c += 4) {
        ASSERT_EQ(L::offset(row, c) % 4, 0) << "d " << d << " row " << row << " col " << c;
        for (int k = 1; k < 4; ++k) ASSERT_EQ(L::offset(row, c + k), L::offset(row, c) + k);
      }
  }
}

#ifdef FA_TEST_CUDA

Tuning sm90_bwd_on() {
  Tuning t;
  t.sm90_bwd = 1;  // every backward it serves
  return t;
}

std::string bwd_family(const fa_params& p, const Tuning& t) {
  return family_of(p, Pass::Backward, t);
}

// Skips unless this machine and build can run cuda-sm90's backward (gpu_support.h).
bool skip_without_sm90_bwd(std::string* why) {
  return skip_without_sm90(Pass::Backward, sm90_bwd_on(), why);
}

// dtype x d 64 / 128 x causal or not x lengths (one tile each way, odd lengths across several
// key and query tiles, seqlen_q > seqlen_k with rows that see no key under the mask, a single
// query), GQA 2, batch 2; then head dim 60 (padded), MQA and a longer case (several key tiles and query tiles a
// block, both consumers' dQ column blocks alternating over many steps).
// A grid case of the feature loops below: batch 2, 4 query heads over 2 (GQA 2), head dim d.
Case gqa_case(fa_dtype dtype, int d, int seed) {
  Case c;
  c.dtype = dtype;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = d;
  c.seed = uint64_t(seed);
  return c;
}

std::vector<Case> sm90_bwd_cases() {
  std::vector<Case> out;
  int seed = 28000;
  for (const fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (const int d : {64, 128})
      for (const bool causal : {false, true})
        for (const auto& [sq, sk] :
             std::vector<std::pair<int, int>>{{128, 128}, {113, 203}, {300, 77}, {1, 129}}) {
          Case c;
          c.dtype = dt;
          c.batch = 2;
          c.heads_q = 4;
          c.heads_kv = 2;  // GQA 2
          c.head_dim = d;
          c.seqlen_q = sq;
          c.seqlen_k = sk;
          c.causal = causal;
          c.seed = uint64_t(seed++);
          out.push_back(c);
        }
  // Head dim 60: served on copies padded to 64 (backend_table.cpp, cuda/head_dim_pad.h).
  for (const bool causal : {false, true}) {
    Case c;
    c.dtype = causal ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.head_dim = 60;
    c.seqlen_q = 113;
    c.seqlen_k = 203;
    c.causal = causal;
    c.seed = uint64_t(seed++);
    out.push_back(c);
  }
  // Sliding windows (left only, both sides, a right-only band past the diagonal), softcap, ALiBi
  // (with and without the causal mask) and softcap with ALiBi, at both head dims, odd lengths in
  // both orders.
  for (const int d : {64, 128})
    for (int feature = 0; feature < 6; ++feature) {
      Case c = gqa_case((feature + d / 64) % 2 ? FA_DTYPE_FP16 : FA_DTYPE_BF16, d, seed++);
      c.seqlen_q = feature % 2 ? 300 : 113;
      c.seqlen_k = feature % 2 ? 77 : 203;
      if (feature == 0) c.window_left = 50, c.window_right = 0;
      if (feature == 1) c.window_left = 40, c.window_right = 7;
      if (feature == 2) c.window_left = -1, c.window_right = 30;
      if (feature == 3) c.softcap = 20.f;
      if (feature == 4) c.alibi = true, c.causal = true;
      if (feature == 5) c.alibi = true, c.softcap = 10.f;
      out.push_back(c);
    }
  // Packed batches (cu_seqlens) with an empty sequence, sequences shorter and longer than a tile,
  // more queries than keys, causal or not, at both head dims; one with dropout and ALiBi.
  for (const int d : {64, 128})
    for (int kind = 0; kind < 3; ++kind) {
      Case c = gqa_case((kind + d / 64) % 2 ? FA_DTYPE_FP16 : FA_DTYPE_BF16, d, seed++);
      c.lens_q = {70, 0, 1, 300, 33};
      c.lens_k = {300, 9, 500, 77, 33};
      c.causal = kind >= 1;
      if (kind == 2) c.dropout_p = 0.17f, c.alibi = true;
      out.push_back(c);
    }
  // Dropout (p 0.17, the CPU's keep-mask), with and without the causal mask, and with softcap and
  // a window, at both head dims.
  for (const int d : {64, 128})
    for (int feature = 0; feature < 3; ++feature) {
      Case c = gqa_case((feature + d / 64) % 2 ? FA_DTYPE_BF16 : FA_DTYPE_FP16, d, seed++);
      c.seqlen_q = feature == 1 ? 300 : 113;
      c.seqlen_k = feature == 1 ? 77 : 203;
      c.dropout_p = 0.17f;
      c.causal = feature == 1;
      if (feature == 2) c.softcap = 15.f, c.window_left = 60, c.window_right = 0;
      out.push_back(c);
    }
  for (const int d : {64, 128})
    for (const bool causal : {false, true}) {
      Case c;
      c.dtype = d == 64 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
      c.batch = 1;
      c.heads_q = 3;
      c.heads_kv = 1;  // MQA
      c.head_dim = d;
      c.seqlen_q = 520;
      c.seqlen_k = 390;
      c.causal = causal;
      c.seed = uint64_t(seed++);
      out.push_back(c);
    }
  return out;
}

class GpuSm90Bwd : public ::testing::TestWithParam<Case> {};

TEST_P(GpuSm90Bwd, GradientsMatchReferenceAndRanSm90) {
  std::string why;
  if (skip_without_sm90_bwd(&why)) GTEST_SKIP() << why;
  ASSERT_TRUE(why.empty()) << why;
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const Tuning t = sm90_bwd_on();
  ASSERT_EQ(bwd_family(dev.p, t), "cuda-sm90");
  run_pass(dev.p, false, &t);  // out and lse for the backward (the default forward family)
  if (HasFatalFailure()) return;
  run_pass(dev.p, true, &t);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
  // The deterministic cases (Det below): 20 reruns bit for bit the same, dQ included.
  if (GetParam().deterministic) {
    EXPECT_EQ(rerun_backward_differences(dev, pr, 20, true, &t), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuSm90Bwd, ::testing::ValuesIn(sm90_bwd_cases()), CaseTestName{});

// Deterministic mode: the gradients by the rule, then 20 reruns bit for bit the same (dQ
// included: its tiles are added in descending key-tile order behind semaphores). Several key
// tiles (both consumers' dQ blocks over many steps), GQA, causal or not, a window, a packed batch
// with an empty sequence, at both head dims.
std::vector<Case> sm90_bwd_det_cases() {
  std::vector<Case> out;
  int seed = 28500;
  for (const int d : {64, 128})
    for (int kind = 0; kind < 4; ++kind) {
      Case c = gqa_case(kind % 2 ? FA_DTYPE_FP16 : FA_DTYPE_BF16, d, seed++);
      c.deterministic = true;
      c.seqlen_q = 300;
      c.seqlen_k = 517;
      c.causal = kind == 1;
      if (kind == 2) c.window_left = 100, c.window_right = 40;
      if (kind == 3) c.lens_q = {200, 0, 333}, c.lens_k = {517, 9, 260}, c.batch = 3;
      out.push_back(c);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Det, GpuSm90Bwd, ::testing::ValuesIn(sm90_bwd_det_cases()),
                         CaseTestName{});

// With the knob on, what the first version does not serve goes to cuda-sm80 (its refusal named
// by cuda-sm90 is not what the caller hears: cuda-sm80 takes the call); with it off (the
// default) no backward goes to cuda-sm90, and the forward's family does not follow the knob.
TEST(GpuSm90BwdFallback, UnservedCallsGoToSm80) {
  std::string why;
  if (skip_without_sm90_bwd(&why)) GTEST_SKIP() << why;
  ASSERT_TRUE(why.empty()) << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.heads_q = 2;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.seqlen_q = c.seqlen_k = 64;
  const Tuning on = sm90_bwd_on();
  auto family = [&](const Case& k, const Tuning& t, Pass pass = Pass::Backward) {
    Problem pr(k);
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    return family_of(dev.p, pass, t);
  };
  EXPECT_EQ(family(c, on), "cuda-sm90") << "plain";
  Case causal = c;
  causal.causal = true;
  EXPECT_EQ(family(causal, on), "cuda-sm90") << "causal";
  Case d128 = c;
  d128.head_dim = 128;
  EXPECT_EQ(family(d128, on), "cuda-sm90") << "head_dim 128";

  Case dr = c;
  dr.dropout_p = 0.1f;
  EXPECT_EQ(family(dr, on), "cuda-sm90") << "dropout";
  for (const int d : {256, 96, 32}) {
    std::string unbuilt;
    if (skip_head_dim_not_built(d, &unbuilt)) continue;  // a build with fewer FA_HEAD_DIMS
    Case hd = c;
    hd.head_dim = d;
    EXPECT_EQ(family(hd, on), "cuda-sm80") << "head_dim " << d;
  }
  Case hd60 = c;
  hd60.head_dim = 60;  // not a multiple of 8: run on copies padded to 64 (cuda/head_dim_pad.h)
  EXPECT_EQ(family(hd60, on), "cuda-sm90") << "head_dim 60";
  Case det = c;
  det.deterministic = true;
  EXPECT_EQ(family(det, on), "cuda-sm90") << "deterministic";
  Case w = c;
  w.window_left = 16;
  EXPECT_EQ(family(w, on), "cuda-sm90") << "window";
  Case s = c;
  s.softcap = 5.f;
  EXPECT_EQ(family(s, on), "cuda-sm90") << "softcap";
  Case a = c;
  a.alibi = true;
  EXPECT_EQ(family(a, on), "cuda-sm90") << "alibi";
  Case v = c;
  v.lens_q = {30, 34};
  v.lens_k = {40, 24};
  EXPECT_EQ(family(v, on), "cuda-sm90") << "packed";
  {  // A view TMA cannot map (K broadcast over the batch: stride 0).
    Problem pr(c);
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    dev.p.k.stride[0] = 0;
    EXPECT_EQ(family_of(dev.p, Pass::Backward, on), "cuda-sm80") << "k stride 0";
  }

  // Off: every backward is cuda-sm80's.
  Tuning off;
  off.sm90_bwd = 0;
  EXPECT_EQ(family(c, off), "cuda-sm80");
  EXPECT_EQ(family(d128, off), "cuda-sm80");
  // The default (2): head dim 128 outside the deterministic mode only, where it measured faster.
  Tuning dflt;
  dflt.sm90_bwd = 2;
  EXPECT_EQ(family(causal, dflt), "cuda-sm80") << "default, d 64";
  EXPECT_EQ(family(d128, dflt), "cuda-sm90") << "default, d 128";
  Case d128det = d128;
  d128det.deterministic = true;
  EXPECT_EQ(family(d128det, dflt), "cuda-sm80") << "default, d 128 deterministic";
  // The forward's family is the same either way.
  EXPECT_EQ(family(c, on, Pass::Forward), family(c, Tuning{}, Pass::Forward));
}

// One served case end to end with the knob off and on: both match the reference, so a failure
// of the grid above can be told from a broken test set-up on the same machine.
TEST(GpuSm90BwdFallback, KnobOffAndOnBothMatchReference) {
  std::string why;
  if (skip_without_sm90_bwd(&why)) GTEST_SKIP() << why;
  ASSERT_TRUE(why.empty()) << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.seqlen_q = 113;
  c.seqlen_k = 203;
  c.causal = true;
  c.seed = 28999;
  for (const int knob : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "Tuning::sm90_bwd " << knob);
    Tuning t;
    t.sm90_bwd = knob;
    Problem pr(c);
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    EXPECT_EQ(bwd_family(dev.p, t), knob ? "cuda-sm90" : "cuda-sm80");
    run_pass(dev.p, false, &t);
    if (HasFatalFailure()) return;
    run_pass(dev.p, true, &t);
    if (HasFatalFailure()) return;
    expect_device_results(pr, dev, true);
  }
}

#else
TEST(GpuSm90Bwd, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
