// The KV-cache family (cuda-kvcache, src/cuda/kernels/kvcache/) on plain calls: with
// Tuning::kvcache_all every forward it serves runs there (asserted through the registry), so its
// attention kernel meets the whole feature grid (head dims 32-256 and ones between, causal,
// windows, softcap, ALiBi, a negative scale, GQA / MQA packed into one tile, packed batches with
// empty sequences, more queries than keys), by FlashAttention's rule against the fp64 reference,
// outputs poisoned; each case also with split-KV forced (num_splits 3, then 128: more parts than
// some rows have keys), through the combine kernel; and paged caches (fixed-length, with
// cache_seqlens, and packed batches over their own pages). The rest of the KV-cache calls (append
// + rotary, leftpad, row maps) are tests/test_kv_update.cpp's GPU section.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_support.h"

#ifdef FA_TEST_CUDA
#include <cuda_runtime.h>

#include "api/internal.h"
#endif

namespace fa::test {
namespace {

#ifdef FA_TEST_CUDA

Tuning kvcache_everywhere() {
  Tuning t;
  t.kvcache_all = true;
  return t;
}

std::string family(const fa_params& p, const Tuning& t) { return family_of(p, Pass::Forward, t); }

std::vector<Case> plain_cases() {
  std::vector<Case> out;
  uint64_t seed = 26000;
  const std::vector<std::pair<int, int>> lens{{1, 129}, {4, 1000}, {113, 203}, {300, 77}, {16, 16}};
  int n = 0;
  for (const int d : {32, 64, 96, 128, 160, 192, 224, 256, 40, 200})
    for (int feature = 0; feature < 7; ++feature) {
      Case c;
      c.dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.batch = 2;
      c.heads_kv = 2;
      c.heads_q = c.heads_kv * ((n % 4 == 0) ? 1 : (n % 4 == 1) ? 4 : (n % 4 == 2) ? 3 : 8);
      c.head_dim = d;
      c.seqlen_q = lens[size_t(n % 5)].first;
      c.seqlen_k = lens[size_t(n % 5)].second;
      if (feature == 1) c.causal = true;
      if (feature == 2) { c.window_left = 50; c.window_right = 7; }
      if (feature == 3) c.softcap = 20.f;
      if (feature == 4) { c.alibi = true; c.causal = (n % 2) == 0; }
      if (feature == 5) c.softmax_scale = -0.09f;
      if (feature == 6) {
        c.batch = 4;
        c.lens_q = {int32_t(c.seqlen_q), 0, 5, 1};
        c.lens_k = {int32_t(c.seqlen_k), 9, 0, 130};
        c.causal = (n % 2) == 1;
      }
      c.strided = n % 3 == 0;
      c.pad = 8;
      c.seed = seed++;
      ++n;
      out.push_back(c);
    }
  // MQA with 32 query heads a kv head (two row tiles per query), and a long decode row.
  for (const int sq : {1, 3}) {
    Case c;
    c.dtype = FA_DTYPE_BF16;
    c.batch = 2;
    c.heads_kv = 1;
    c.heads_q = 32;
    c.head_dim = 128;
    c.seqlen_q = sq;
    c.seqlen_k = 5000;
    c.causal = true;
    c.seed = seed++;
    out.push_back(c);
  }
  return out;
}

class GpuKvFamily : public ::testing::TestWithParam<Case> {};

// One case, split three ways; the split calls also with their parts merged in the attention
// kernel (Tuning::kvcache_fused_merge).
void check_plain_calls(const Case& c) {
  struct Way {
    int splits;
    bool fused_merge;
  };
  for (const Way way : {Way{1, false}, Way{3, false}, Way{128, false}, Way{3, true},
                        Way{128, true}}) {
    Tuning t = kvcache_everywhere();
    t.kvcache_fused_merge = way.fused_merge;
    const int splits = way.splits;
    SCOPED_TRACE(::testing::Message() << "num_splits " << splits
                                      << (way.fused_merge ? " fused merge" : ""));
    Problem pr(c);
    DeviceProblem dev(pr, FA_BACKEND_AUTO), no_lse(pr, FA_BACKEND_AUTO);
    dev.p.num_splits = splits;
    no_lse.p.num_splits = splits;
    ASSERT_EQ(family(dev.p, t), "cuda-kvcache");
    run_pass(dev.p, false, &t);
    no_lse.p.lse.data = nullptr;
    run_pass(no_lse.p, false, &t);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(dev.out.bytes(pr.out), no_lse.out.bytes(pr.out)) << "out without lse";
    expect_device_results(pr, dev, false);
  }
}

TEST_P(GpuKvFamily, PlainCallsMatchReference) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  check_plain_calls(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuKvFamily, ::testing::ValuesIn(plain_cases()), CaseTestName{});

// Paged caches through support.cpp's Problem (its blocks a random permutation among NaN spare
// ones): fixed-length batches with and without cache_seqlens, and packed batches over a paged
// cache (flash_attn_varlen_func's block_table) with empty sequences; page sizes 1, 16, 256, 37.
std::vector<Case> paged_cases() {
  std::vector<Case> out;
  uint64_t seed = 26500;
  int n = 0;
  for (const int64_t page : {1, 16, 256, 37})
    for (int kind = 0; kind < 3; ++kind) {
      Case c;
      c.dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.heads_kv = 2;
      c.heads_q = (n % 3 == 0) ? 8 : 2;
      c.head_dim = (n % 4 == 0) ? 128 : (n % 4 == 1) ? 64 : (n % 4 == 2) ? 256 : 96;
      c.page_size = page;
      if (kind == 0) {  // decode over ragged caches
        c.batch = 3;
        c.seqlen_q = 1;
        c.seqlen_k = 700;
        c.cache_lens = {700, 0, 333};
        c.causal = true;
      } else if (kind == 1) {  // a chunk of queries, every entry full
        c.batch = 2;
        c.seqlen_q = 37;
        c.seqlen_k = 300;
        c.window_left = 64;
        c.window_right = 0;
      } else {  // chunked prefill: a packed batch over its own pages
        c.lens_q = {70, 0, 1, 33};
        c.lens_k = {300, 9, 500, 33};
        c.causal = true;
        c.alibi = (n % 2) == 0;
        c.softcap = (n % 2) ? 10.f : 0.f;
      }
      c.seed = seed++;
      ++n;
      out.push_back(c);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Paged, GpuKvFamily, ::testing::ValuesIn(paged_cases()), CaseTestName{});

// fp8 e4m3 inputs (converted to fp16 as they land in shared memory), out in bf16 or fp16, with
// and without per-(batch, kv head) descales: plain calls over head dims 32-256 (48: a row's last
// 16-byte chunk past head_dim) with each feature, GQA 4 and 8, strided rows (16-element padding:
// fp8 rows move in 16-byte chunks), a packed batch, and paged caches (pages of 1, 16 and 37).
std::vector<Case> fp8_cases() {
  std::vector<Case> out;
  uint64_t seed = 26800;
  const std::vector<std::pair<int, int>> lens{{1, 1000}, {4, 777}, {113, 203}, {1, 65}};
  int n = 0;
  for (const int d : {128, 64, 256, 96, 32, 48, 160})
    for (int feature = 0; feature < 6; ++feature) {
      Case c;
      c.dtype = FA_DTYPE_FP8_E4M3;
      c.out_dtype = (n % 2) ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
      c.descale = n % 3 != 2;
      c.batch = 2;
      c.heads_kv = 2;
      c.heads_q = c.heads_kv * ((n % 3 == 0) ? 4 : (n % 3 == 1) ? 8 : 1);
      c.head_dim = d;
      c.seqlen_q = lens[size_t(n % 4)].first;
      c.seqlen_k = lens[size_t(n % 4)].second;
      if (feature == 1) c.causal = true;
      if (feature == 2) { c.window_left = 50; c.window_right = 0; }
      if (feature == 3) c.softcap = 20.f;
      if (feature == 4) { c.alibi = true; c.causal = true; }
      if (feature == 5) {
        c.batch = 3;
        c.lens_q = {int32_t(c.seqlen_q), 0, 3};
        c.lens_k = {int32_t(c.seqlen_k), 9, 130};
        c.causal = (n % 2) == 1;
      }
      c.strided = n % 4 == 1;
      c.pad = 16;
      c.seed = seed++;
      ++n;
      out.push_back(c);
    }
  for (const int64_t page : {1, 16, 37}) {
    Case c;
    c.dtype = FA_DTYPE_FP8_E4M3;
    c.out_dtype = page == 16 ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
    c.descale = true;
    c.batch = 3;
    c.heads_kv = 2;
    c.heads_q = 8;
    c.head_dim = 128;
    c.page_size = page;
    c.seqlen_q = 1;
    c.seqlen_k = 700;
    c.cache_lens = {700, 0, 333};
    c.causal = true;
    c.seed = seed++;
    out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fp8, GpuKvFamily, ::testing::ValuesIn(fp8_cases()), CaseTestName{});

// Hostile index arrays of a KV-cache call (device memory the host does not read): with
// check_inputs they are refused as the CPU refuses them, naming the entry, before anything is
// written; without it the call runs (the kernels clamp every value into the cache), its results
// are finite and it stays inside every buffer (gpu-check.sh runs these under memcheck).
struct KvHostile {
  const char* name;
  std::vector<int32_t> seqlens;  // 3 entries; empty: keep the valid ones
  std::vector<int32_t> table;    // 3 x 44 entries past the first: -5, huge, ...; empty: keep
  const char* refusal;           // check_inputs' message fragment
};

TEST(GpuKvHostile, CheckedRefusedUncheckedClamped) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 3;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.seqlen_q = 2;
  c.seqlen_k = 700;
  c.page_size = 16;  // 44 pages an entry
  c.cache_lens = {700, 5, 300};
  c.seed = 2626;
  const std::vector<KvHostile> cases = {
      {"seqlens_past_capacity", {700, 100000, 3}, {}, "cache_seqlens[1]=100000 must be in [0, 704]"},
      {"seqlens_negative", {-9, 5, 300}, {}, "cache_seqlens[0]=-9 must be in"},
      {"table_negative", {}, {-5}, "block_table[0][0]=-5 is not a block of k"},
      {"table_huge", {}, {1 << 30}, "block_table[0][0]=1073741824 is not a block of k"},
  };
  for (const KvHostile& h : cases) {
    SCOPED_TRACE(h.name);
    Problem pr(c);
    for (const int checked : {1, 0}) {
      DeviceProblem dev(pr, FA_BACKEND_AUTO);
      if (!h.seqlens.empty()) {
        ASSERT_EQ(cudaMemcpy(dev.p.cache_seqlens.data, h.seqlens.data(), 3 * 4,
                             cudaMemcpyHostToDevice), cudaSuccess);
      }
      if (!h.table.empty()) {
        std::vector<int32_t> table(static_cast<size_t>(pr.block_table.numel()));
        for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(pr.block_table.get(int64_t(i)));
        table[0] = h.table[0];
        ASSERT_EQ(cudaMemcpy(dev.p.block_table.data, table.data(), table.size() * 4,
                             cudaMemcpyHostToDevice), cudaSuccess);
      }
      dev.p.check_inputs = checked;
      size_t bytes = 0;
      ASSERT_EQ(fa_forward_workspace_size(&dev.p, &bytes), FA_OK) << fa_last_error();
      void* ws = nullptr;
      if (bytes) {
        ASSERT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
      }
      const fa_status st = fa_forward(&dev.p, ws, bytes, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaFree(ws);
      dev.out.copy_to(pr.out);
      if (checked) {
        EXPECT_EQ(st, FA_ERROR_CU_SEQLENS) << fa_last_error();
        EXPECT_NE(std::string(fa_last_error()).find(h.refusal), std::string::npos)
            << fa_last_error();
        bool poisoned = true;  // DeviceProblem poisons out with 0xFF: NaN
        for (int64_t i = 0; i < pr.out.numel(); ++i) poisoned &= std::isnan(pr.out.get(i));
        EXPECT_TRUE(poisoned) << "a refused call wrote out";
      } else {
        EXPECT_EQ(st, FA_OK) << fa_last_error();
        // Clamped reads land on cached keys or zero-filled rows: no NaN from the spare blocks
        // unless a clamped table entry names one (block 0 or the last, both real here or spare).
        int64_t finite = 0;
        for (int64_t i = 0; i < pr.out.numel(); ++i) finite += std::isfinite(pr.out.get(i));
        EXPECT_GT(finite, 0);
      }
    }
  }
}

// Which family takes what: by default plain calls stay with the flash families and a split call
// goes to cuda-kvcache; dropout never does (the family refuses it, and the others refuse the
// split, naming cuda-kvcache's).
// A decode step of 8 query heads over 2 against 300 keys, the dispatch tests' call.
Case decode_step(fa_dtype dtype) {
  Case c;
  c.dtype = dtype;
  if (dtype == FA_DTYPE_FP8_E4M3) c.out_dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.seqlen_q = 1;
  c.seqlen_k = 300;
  return c;
}

TEST(GpuKvFamilyDispatch, WhoTakesWhat) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Problem pr(decode_step(FA_DTYPE_BF16));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  EXPECT_TRUE(is_flash_family(family(dev.p, Tuning{}))) << family(dev.p, Tuning{});
  dev.p.num_splits = 4;
  EXPECT_EQ(family(dev.p, Tuning{}), "cuda-kvcache");
  dev.p.dropout_p = 0.1f;
  EXPECT_NE(family(dev.p, Tuning{}), "cuda-kvcache");
  EXPECT_NE(family(dev.p, Tuning{}).find("dropout"), std::string::npos) << family(dev.p, Tuning{});
}

// fp8 inputs on CUDA: a KV-cache or split call goes to cuda-kvcache; a plain call goes to
// cuda-sm90 on an sm90 GPU (tests/test_gpu_sm90_fp8.cpp) and is refused elsewhere, naming fp8 and
// the families that take it, out keeping its bytes; a head_dim that is not a multiple of 16 is
// refused by name.
TEST(GpuKvFamilyDispatch, Fp8TakenByTheKvCacheFamilyAlone) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Case c = decode_step(FA_DTYPE_FP8_E4M3);
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const std::string plain = family(dev.p, Tuning{});
  if (plain != "cuda-sm90") {
    EXPECT_NE(plain.find("fp8_e4m3"), std::string::npos) << plain;
    EXPECT_NE(plain.find("cuda-kvcache"), std::string::npos) << plain;
    EXPECT_EQ(fa_forward(&dev.p, nullptr, 0, nullptr), FA_ERROR_UNSUPPORTED) << fa_last_error();
    dev.out.copy_to(pr.out);
    bool poisoned = true;
    for (int64_t i = 0; i < pr.out.numel(); ++i) poisoned &= std::isnan(pr.out.get(i));
    EXPECT_TRUE(poisoned) << "a refused call wrote out";
  } else {
    EXPECT_EQ(fa::cuda_device_props(0).major, 9);
  }
  dev.p.num_splits = 2;
  EXPECT_EQ(family(dev.p, Tuning{}), "cuda-kvcache");

  c.head_dim = 40;  // a multiple of 8, not of 16
  Problem pr40(c);
  DeviceProblem dev40(pr40, FA_BACKEND_AUTO);
  dev40.p.num_splits = 2;
  const std::string refusal = family(dev40.p, Tuning{});
  EXPECT_NE(refusal.find("head_dim=40"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("multiple of 16"), std::string::npos) << refusal;
}

#else
TEST(GpuKvFamily, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
