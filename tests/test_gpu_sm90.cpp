// The Hopper-native forward family (cuda-sm90, src/cuda/kernels/sm90/) on an sm90 GPU, with
// Tuning::sm90_fwd on (the default; the tests set it themselves): every case must be taken by
// cuda-sm90 (asserted through the registry) and match the fp64 reference by FlashAttention's
// rule, outputs poisoned, fresh inputs; the LSE-less call gives the same out. Skipped without an
// sm90 GPU or in a build without sm_90a code; what it serves is asserted to run there (a head
// dim that is not a multiple of 8 too, on padded copies). The feature cases (windows, softcap, ALiBi,
// dropout, packed batches with empty sequences, a negative scale) came with the kernel's support
// for them, after its first GPU runs (which passed the fixed-length causal / full grid).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_support.h"

#ifdef FA_TEST_CUDA
#include "api/internal.h"
#endif

namespace fa::test {
namespace {

#ifdef FA_TEST_CUDA

Tuning sm90_on() {
  Tuning t;
  t.sm90_fwd = true;
  return t;
}

std::string family(const fa_params& p, const Tuning& t) { return family_of(p, Pass::Forward, t); }

// Skips unless this machine and build can run cuda-sm90's forward (gpu_support.h).
bool skip_without_sm90(std::string* why) {
  return fa::test::skip_without_sm90(Pass::Forward, sm90_on(), why);
}

std::vector<Case> sm90_cases() {
  std::vector<Case> out;
  int seed = 9000;
  for (const fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (const int d : {64, 128, 256, 40, 96, 200})
      for (const bool causal : {false, true})
        for (const auto& [sq, sk] : std::vector<std::pair<int, int>>{{128, 128}, {113, 203}, {300, 77}, {1, 129}}) {
          Case c;
          c.dtype = dt;
          c.batch = 2;
          c.heads_q = 4;
          c.heads_kv = d == 128 ? 1 : 2;  // MQA and GQA
          c.head_dim = d;
          c.seqlen_q = sq;
          c.seqlen_k = sk;
          c.causal = causal;
          c.seed = uint64_t(seed++);
          out.push_back(c);
        }
  // Every feature the family serves beyond causal, over head dims and both 16-bit types; every
  // other case a packed batch with empty sequences (on the query side, the key side, both).
  const std::vector<std::pair<int, int>> lens{{300, 77}, {113, 203}, {257, 513}, {129, 129}};
  int n = 0;
  for (const int d : {64, 128, 256, 96})
    for (int feature = 0; feature < 9; ++feature) {
      Case c;
      c.dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = (n % 3) ? 2 : 4;
      c.head_dim = d;
      c.seqlen_q = lens[size_t(n % 4)].first;
      c.seqlen_k = lens[size_t(n % 4)].second;
      if (feature == 0) { c.window_left = 100; c.window_right = 17; }
      if (feature == 1) { c.causal = true; c.window_left = 64; }
      if (feature == 2) c.window_left = 50;  // a left bound only
      if (feature == 3) c.softcap = 30.f;
      if (feature == 4) { c.alibi = true; c.causal = (n % 2) == 0; }
      if (feature == 5) { c.softcap = 5.f; c.alibi = true; c.window_left = 90; c.window_right = 0; }
      if (feature == 6) c.softmax_scale = -0.11f;
      if (feature == 7) c.dropout_p = 0.17f;
      if (feature == 8) { c.dropout_p = 0.3f; c.causal = true; c.softcap = 20.f; }
      if (n % 2 == 1) {
        c.batch = 4;
        c.lens_q = {int32_t(c.seqlen_q), 0, 77, 1};
        c.lens_k = {int32_t(c.seqlen_k), 5, 0, 130};
      }
      c.seed = uint64_t(seed++);
      ++n;
      out.push_back(c);
    }
  // GQA packing: short query blocks over groups of 2, 4, 8, 32 query heads a KV head (and 3,
  // which does not pack), with the mask, windows, softcap, ALiBi and packed batches; the group's
  // heads share a tile, so rows of one tile sit at different heads and positions.
  int k = 0;
  for (const int group : {4, 8, 2, 32, 3})
    for (const int sq : {1, 7, 33, 100})
      for (int feature = 0; feature < 3; ++feature) {
        Case c;
        c.dtype = (k % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
        c.batch = 2;
        c.heads_kv = group == 32 ? 1 : 2;
        c.heads_q = c.heads_kv * group;
        c.head_dim = (k % 3 == 0) ? 128 : (k % 3 == 1) ? 64 : 256;
        c.seqlen_q = sq;
        c.seqlen_k = 300 + 37 * (k % 4);
        if (feature == 1) c.causal = true;
        if (feature == 2) {
          c.window_left = 60;
          c.window_right = 3;
          c.alibi = (k % 2) == 0;
          c.softcap = (k % 2) ? 10.f : 0.f;
        }
        if (k % 4 == 3) {
          c.batch = 3;
          c.lens_q = {int32_t(sq), 0, std::max(1, sq / 2)};
          c.lens_k = {int32_t(c.seqlen_k), 40, 0};
        }
        c.seed = uint64_t(seed++);
        ++k;
        out.push_back(c);
      }
  // More work tiles than the H200's 132 SMs, so that a persistent block takes several, some of
  // them (causal, seqlen_q > seqlen_k) rows that see no key.
  for (const int d : {64, 128, 256})
    for (const bool causal : {false, true}) {
      Case c;
      c.dtype = d == 128 ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.batch = 3;
      c.heads_q = 24;
      c.heads_kv = 8;
      c.head_dim = d;
      c.seqlen_q = causal ? 520 : 257;
      c.seqlen_k = causal ? 130 : 300;
      c.causal = causal;
      c.seed = uint64_t(seed++);
      out.push_back(c);
    }
  return out;
}

// The schedules to run: every one by default (ping-pong, the intra-warpgroup overlap alone, one
// tile at a time); FA_TEST_SM90_SCHEDULES="0,1" narrows it, so that a schedule that hangs on a
// new GPU can be told apart from one that does not (scripts/gpu-sm90.sh runs each alone first).
std::vector<int> schedules_to_run() {
  std::vector<int> out;
  if (const char* env = std::getenv("FA_TEST_SM90_SCHEDULES")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(std::stoi(item));
  }
  if (out.empty()) out = {2, 1, 0};
  return out;
}

class GpuSm90 : public ::testing::TestWithParam<Case> {};

TEST_P(GpuSm90, ForwardMatchesReferenceAndRanSm90) {
  std::string why;
  if (skip_without_sm90(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
  ASSERT_TRUE(why.empty()) << why;
  // Persistent, the dynamic scheduler (1) and the static walk (2), under every schedule; one
  // block a tile (0) under the default one; GQA packing (where the call qualifies) on, and off
  // once; the TMA-store epilogue (in builds with two Q buffers, d <= 128) on, and off once.
  // At d <= 64 all of it with two consumer warpgroups (what these lengths get by default) and
  // with three (Tuning::sm90_fwd_d64_consumers, the default from 2048 queries and keys).
  const std::vector<int> consumers =
      GetParam().head_dim <= 64 ? std::vector<int>{2, 3} : std::vector<int>{0};
  for (const int warpgroups : consumers)
  for (const int schedule : schedules_to_run())
  for (const int persistent : {1, 2, 0})
  for (const bool pack : {true, false})
  for (const bool tma_store : {true, false}) {
    if (persistent == 0 && schedule != 2) continue;
    if (!pack && !(schedule == 2 && persistent == 1)) continue;
    if (!tma_store && !(schedule == 2 && persistent == 1 && pack)) continue;
    SCOPED_TRACE(::testing::Message() << "Tuning::sm90_fwd_schedule " << schedule << ", persistent "
                                      << persistent << ", pack_gqa " << pack
                                      << ", d64 consumers " << warpgroups << ", tma_store " << tma_store);
    Problem pr(GetParam());
    DeviceProblem dev(pr, FA_BACKEND_AUTO), no_lse(pr, FA_BACKEND_AUTO);
    Tuning t = sm90_on();
    t.sm90_fwd_schedule = schedule;
    t.sm90_fwd_pack_gqa = pack;
    t.sm90_fwd_persistent = persistent;
    t.sm90_fwd_d64_consumers = warpgroups;
    t.sm90_fwd_tma_store = tma_store;
    ASSERT_EQ(family(dev.p, t), "cuda-sm90");
    run_pass(dev.p, false, &t);
    no_lse.p.lse.data = nullptr;
    run_pass(no_lse.p, false, &t);
    if (HasFatalFailure()) return;
    EXPECT_EQ(dev.out.bytes(pr.out), no_lse.out.bytes(pr.out));
    expect_device_results(pr, dev, false);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuSm90, ::testing::ValuesIn(sm90_cases()), CaseTestName{});

// With the knob on, what the family serves beyond the plain call is taken by cuda-sm90; a head
// dim it does not serve is not.
TEST(GpuSm90Fallback, ServedFeaturesRunSm90) {
  std::string why;
  if (skip_without_sm90(&why)) GTEST_SKIP() << why;
  ASSERT_TRUE(why.empty()) << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.heads_q = 2;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.seqlen_q = c.seqlen_k = 64;
  const Tuning t = sm90_on();
  auto family_of = [&](Case k) {
    Problem pr(k);
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    return family(dev.p, t);
  };
  Case hd = c;
  hd.head_dim = 60;  // not a multiple of 8: run on copies padded to 64 (cuda/head_dim_pad.h)
  EXPECT_EQ(family_of(hd), "cuda-sm90") << "head_dim 60";
  Case w = c;
  w.window_left = 16;
  EXPECT_EQ(family_of(w), "cuda-sm90") << "window";
  Case s = c;
  s.softcap = 5.f;
  EXPECT_EQ(family_of(s), "cuda-sm90") << "softcap";
  Case a = c;
  a.alibi = true;
  EXPECT_EQ(family_of(a), "cuda-sm90") << "alibi";
  Case dr = c;
  dr.dropout_p = 0.1f;
  EXPECT_EQ(family_of(dr), "cuda-sm90") << "dropout";
  Case v = c;
  v.lens_q = {30, 34};
  v.lens_k = {40, 24};
  EXPECT_EQ(family_of(v), "cuda-sm90") << "packed";
  // With the knob off, nothing runs cuda-sm90; by default (on) the plain call does.
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  Tuning off;
  off.sm90_fwd = false;
  EXPECT_EQ(family(dev.p, off), "cuda-sm80");
  EXPECT_EQ(family(dev.p, Tuning{}), "cuda-sm90");
  // A view TMA cannot map (K broadcast over the batch: stride 0) goes to cuda-sm80, named.
  dev.p.k.stride[0] = 0;
  EXPECT_EQ(family(dev.p, Tuning{}), "cuda-sm80");
}

#else
TEST(GpuSm90, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
