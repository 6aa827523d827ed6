// KV caches on the CPU backends (fa_params::block_table, cache_seqlens; forward only).
//
// - A paged cache gives the bytes of the same keys stored densely, on each backend: its blocks
//   are a random permutation among spare blocks, and the spare blocks, the rows past each batch
//   entry's keys and the table's entries past them hold NaN or -1 (support.cpp, make_cache), so a
//   read of any of them would show. Page sizes 1, 3, 7, 16, 256 (one page larger than the cache).
// - cache_seqlens counts each batch entry's keys: entry b gives the bytes of a call whose cache
//   holds just its cache_seqlens[b] keys; an entry with none gives out = 0 and lse = -inf.
// - The flash backend against the fp64 oracle by FlashAttention's accuracy rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support.h"

namespace fa::test {
namespace {

enum class Feature { None, Causal, Window, AlibiSoftcap };

std::vector<Case> paged_grid() {
  const int64_t pages[] = {1, 3, 7, 16, 256};
  const Feature features[] = {Feature::None, Feature::Causal, Feature::Window,
                              Feature::AlibiSoftcap};
  // (seqlen_q, seqlen_k): decode, a chunk, more queries than keys.
  const int64_t lens[][2] = {{1, 300}, {37, 129}, {70, 21}};
  std::vector<Case> cases;
  uint64_t n = 0;
  for (int64_t page : pages)
    for (Feature f : features) {
      Case c;
      c.seed = ++n;
      c.dtype = n % 2 ? FA_DTYPE_FP32 : FA_DTYPE_BF16;
      c.batch = 3;
      c.heads_kv = 1 + int64_t(n % 2);
      c.heads_q = c.heads_kv * (n % 3 == 0 ? 4 : 1);
      c.head_dim = n % 3 == 1 ? 40 : 64;
      c.seqlen_q = lens[n % 3][0];
      c.seqlen_k = lens[n % 3][1];
      c.page_size = page;
      c.strided = n % 4 == 1;
      // Every other case: caches shorter than their capacity, one of them empty.
      if (n % 2 == 0)
        c.cache_lens = {int32_t(c.seqlen_k), 0, int32_t(c.seqlen_k / 2 + 1)};
      switch (f) {
        case Feature::None: break;
        case Feature::Causal: c.causal = true; break;
        case Feature::Window: c.window_left = 9; c.window_right = 2; break;
        case Feature::AlibiSoftcap: c.alibi = true; c.softcap = 3.f; break;
      }
      cases.push_back(c);
    }
  return cases;
}

class PagedCache : public ::testing::TestWithParam<Case> {};

TEST_P(PagedCache, SameBytesAsDenseKeys) {
  Case dense_case = GetParam();
  dense_case.page_size = 0;  // the same keys (and cache_seqlens, if any), stored densely
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    SCOPED_TRACE(backend == FA_BACKEND_FLASH ? "flash" : "reference");
    Problem paged(GetParam()), dense(dense_case);
    run_forward(paged, backend);
    run_forward(dense, backend);
    EXPECT_TRUE(paged.out.bytes_equal(dense.out));
    EXPECT_TRUE(paged.lse.bytes_equal(dense.lse));
  }
}

TEST_P(PagedCache, FlashMatchesReference) {
  Problem pr(GetParam());
  run_forward(pr, FA_BACKEND_FLASH);
  const Dense got = outputs(pr, false);
  const Dense ref = reference(pr, false, false), naive = reference(pr, true, false);
  expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
  expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Grid, PagedCache, ::testing::ValuesIn(paged_grid()), CaseTestName());

// Packed batches over a paged cache (flash_attn_varlen_func's block_table, chunked prefill):
// sequence b's keys are the first cu_seqlens_k[b + 1] - cu_seqlens_k[b] rows of its own pages.
// Empty sequences on either side; page sizes 1, 7, 16, 256; the same features.
std::vector<Case> paged_varlen_grid() {
  const int64_t pages[] = {1, 7, 16, 256};
  const Feature features[] = {Feature::None, Feature::Causal, Feature::Window,
                              Feature::AlibiSoftcap};
  const std::vector<std::vector<int32_t>> lens_q = {{5, 0, 70, 1}, {37, 12, 1, 0}};
  const std::vector<std::vector<int32_t>> lens_k = {{300, 9, 70, 0}, {129, 12, 500, 33}};
  std::vector<Case> cases;
  uint64_t n = 500;
  for (int64_t page : pages)
    for (Feature f : features) {
      Case c;
      c.seed = ++n;
      c.dtype = n % 2 ? FA_DTYPE_FP32 : FA_DTYPE_FP16;
      c.heads_kv = 1 + int64_t(n % 2);
      c.heads_q = c.heads_kv * (n % 3 == 0 ? 4 : 1);
      c.head_dim = n % 3 == 1 ? 40 : 64;
      c.lens_q = lens_q[n % 2];
      c.lens_k = lens_k[n % 2];
      c.page_size = page;
      c.strided = n % 4 == 1;
      switch (f) {
        case Feature::None: break;
        case Feature::Causal: c.causal = true; break;
        case Feature::Window: c.window_left = 9; c.window_right = 2; break;
        case Feature::AlibiSoftcap: c.alibi = true; c.softcap = 3.f; break;
      }
      cases.push_back(c);
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Varlen, PagedCache, ::testing::ValuesIn(paged_varlen_grid()),
                         CaseTestName());

// A packed batch's pages that cannot hold a sequence, or name no block of k, are refused before
// anything is written, naming the sequence and the entry.
TEST(PagedVarlen, RefusesWhatThePagesCannotHold) {
  Case c;
  c.lens_q = {3, 4};
  c.lens_k = {40, 10};
  c.heads_q = c.heads_kv = 2;
  c.head_dim = 16;
  c.page_size = 16;
  Problem pr(c);
  std::vector<unsigned char> before(static_cast<const unsigned char*>(pr.out.data()),
                                    static_cast<const unsigned char*>(pr.out.data()) +
                                        pr.out.storage_bytes());
  auto expect_refused = [&](const fa_params& p, const char* fragment) {
    HostWorkspace ws(1 << 20);
    EXPECT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_ERROR_CU_SEQLENS);
    EXPECT_NE(std::string(fa_last_error()).find(fragment), std::string::npos) << fa_last_error();
    EXPECT_EQ(0, std::memcmp(pr.out.data(), before.data(), before.size())) << "out was written";
  };
  fa_params p = pr.params(FA_BACKEND_FLASH);
  p.block_table.shape[1] = 2;  // 32 keys a sequence: sequence 0 has 40
  expect_refused(p, "cu_seqlens_k: sequence 0 has 40 keys > 32");
  p = pr.params(FA_BACKEND_FLASH);
  const int64_t spare = pr.k_pages.shape()[0];
  int32_t* table = static_cast<int32_t*>(pr.block_table.data());
  const int32_t saved = table[pr.block_table.strides()[0] + 0];
  table[pr.block_table.strides()[0] + 0] = int32_t(spare);  // sequence 1's first page: past k
  expect_refused(p, "block_table[1][0]=");
  table[pr.block_table.strides()[0] + 0] = saved;
  // The same call with its table intact runs.
  run_forward(pr, FA_BACKEND_FLASH);
}

// Copies batch entry b of `from` (q rows, and the first `keys` keys of k and v) into the
// single-entry problem `to`.
void copy_entry(const Problem& from, int64_t b, int64_t keys, Problem& to) {
  const Case& c = from.c;
  const int64_t q_elems = c.seqlen_q * c.heads_q * c.head_dim;
  const int64_t k_elems = keys * c.heads_kv * c.head_dim;
  for (int64_t i = 0; i < q_elems; ++i) to.q.set(i, from.q.get(b * q_elems + i));
  const int64_t k_entry = c.seqlen_k * c.heads_kv * c.head_dim;
  for (int64_t i = 0; i < k_elems; ++i) {
    to.k.set(i, from.k.get(b * k_entry + i));
    to.v.set(i, from.v.get(b * k_entry + i));
  }
}

// cache_seqlens[b] = L: entry b gives the bytes of a cache of exactly L keys (same backend); an
// entry with no key outputs 0 and lse = -inf. Dense and paged caches, with causal, a window and
// ALiBi aligned to each entry's own keys.
TEST(CacheSeqlens, EachEntrySeesItsKeysOnly) {
  for (int64_t page : {0, 5}) {
    for (Feature f : {Feature::Causal, Feature::Window, Feature::AlibiSoftcap}) {
      Case c;
      c.batch = 4;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seqlen_q = 9;
      c.seqlen_k = 77;
      c.head_dim = 24;
      c.seed = 2;  // even: one ALiBi slope vector for every batch entry
      c.page_size = page;
      c.cache_lens = {77, 0, 30, 3};
      c.causal = f == Feature::Causal;
      if (f == Feature::Window) c.window_left = c.window_right = 4;
      c.alibi = f == Feature::AlibiSoftcap;
      c.softcap = f == Feature::AlibiSoftcap ? 2.f : 0.f;
      for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
        SCOPED_TRACE(c.name() + (backend == FA_BACKEND_FLASH ? " flash" : " reference"));
        Problem pr(c);
        run_forward(pr, backend);
        const int64_t row = c.heads_q * c.head_dim;  // out elements of one query row
        for (int64_t b = 0; b < c.batch; ++b) {
          const int64_t keys = c.cache_lens[size_t(b)];
          if (keys == 0) {
            for (int64_t i = 0; i < c.seqlen_q * row; ++i)
              ASSERT_EQ(pr.out.get(b * c.seqlen_q * row + i), 0.0) << "entry " << b;
            for (int64_t i = 0; i < c.heads_q * c.seqlen_q; ++i) {
              const double lse = pr.lse.get(b * c.heads_q * c.seqlen_q + i);
              ASSERT_TRUE(std::isinf(lse) && lse < 0) << "entry " << b;
            }
            continue;
          }
          Case one = c;
          one.batch = 1;
          one.seqlen_k = keys;
          one.page_size = 0;
          one.cache_lens.clear();
          Problem alone(one);
          copy_entry(pr, b, keys, alone);
          alone.alibi = pr.alibi;  // the (heads_q) slopes: shared storage, same values
          run_forward(alone, backend);
          for (int64_t i = 0; i < c.seqlen_q * row; ++i)
            ASSERT_EQ(pr.out.get(b * c.seqlen_q * row + i), alone.out.get(i))
                << "entry " << b << " element " << i;
          for (int64_t i = 0; i < c.heads_q * c.seqlen_q; ++i)
            ASSERT_EQ(pr.lse.get(b * c.heads_q * c.seqlen_q + i), alone.lse.get(i))
                << "entry " << b << " lse " << i;
        }
      }
    }
  }
}

// Decode over a long paged cache: one query per entry, every entry's cache of its own length;
// the flash backend by the accuracy rule, with GQA 8:1.
TEST(CacheSeqlens, DecodeFlashMatchesReference) {
  Case c;
  c.dtype = FA_DTYPE_FP16;
  c.batch = 5;
  c.heads_q = 8;
  c.heads_kv = 1;
  c.seqlen_q = 1;
  c.seqlen_k = 1000;
  c.head_dim = 128;
  c.causal = true;
  c.page_size = 16;
  c.cache_lens = {1000, 1, 517, 64, 999};
  Problem pr(c);
  run_forward(pr, FA_BACKEND_FLASH);
  const Dense got = outputs(pr, false);
  const Dense ref = reference(pr, false, false), naive = reference(pr, true, false);
  expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
  expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
}

}  // namespace
}  // namespace fa::test
