// The rest of flash_attn_with_kvcache on the CPU backends (fa_params 0.3): k_new / v_new
// appended in place, rotary embedding of the new keys and of q, cache_leftpad, cache_batch_idx,
// num_splits (split-KV through the combine step); forward only.
//
// Each case builds a cache (dense, or paged with its blocks in a random order among spare ones)
// whose every slot the call must not read (rows before the pad, past the keys, spare blocks, and
// the table's entries past what an entry reads: -1) holds NaN, then checks, on both backends:
// - the cache after the call is, byte for byte, the cache before it with the new rows written:
//   v_new's bytes, k_new's bytes or k_new rotated (fp32, this file's own formula, rounded to the
//   cache's dtype); nothing else changed (the NaN slots included);
// - out and lse against the fp64 oracle by FlashAttention's accuracy rule, the oracle being a
//   plain packed call (support.h's reference) over what each entry should attend to: its rotated
//   queries and the keys [leftpad, cache_seqlens + seqlen_new) of its cache row, gathered here.
// num_splits 1, forced counts (more parts than keys included) and the heuristic all meet the rule.
// The GPU section at the end runs the same grid (and longer caches, wider heads, GQA up to 32)
// on CUDA tensors through the cuda-kvcache family, with the same checks (fp32 cases in bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/splits.h"
#include "gpu_support.h"
#include "support.h"

namespace fa::test {
namespace {

struct KvCase {
  fa_dtype dtype = FA_DTYPE_FP32;
  int64_t batch = 3, heads_q = 4, heads_kv = 2, head_dim = 32, seqlen_q = 1;
  int64_t capacity = 90;         // keys a cache row holds (paged: rounded up to whole pages)
  int64_t batch_cache = 0;       // rows of a dense cache; 0: batch
  int64_t page_size = 0;         // 0: dense
  std::vector<int32_t> cache_lens;  // cache_seqlens, before the append (one per entry)
  std::vector<int32_t> leftpad;     // empty: none
  std::vector<int32_t> batch_idx;   // empty: none (dense only)
  int64_t seqlen_new = 0;           // 0: no append
  int64_t rotary_dim = 0;           // 0: no rotary
  bool interleaved = false;
  bool rotary_fp32 = false;         // cos / sin in fp32 (else q's dtype)
  bool causal = false;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool alibi = false;
  int32_t num_splits = 1;
  uint64_t seed = 1;

  int64_t rows() const { return batch_cache > 0 ? batch_cache : batch; }
  int64_t blocks_per_entry() const { return (capacity + page_size - 1) / page_size; }
  int64_t cap() const { return page_size > 0 ? blocks_per_entry() * page_size : capacity; }
  int64_t start(int64_t b) const { return leftpad.empty() ? 0 : leftpad[size_t(b)]; }
  int64_t end(int64_t b) const { return cache_lens[size_t(b)] + seqlen_new; }
  int64_t row_of(int64_t b) const { return batch_idx.empty() ? b : batch_idx[size_t(b)]; }
  bool advance() const { return causal || window_left >= 0 || window_right >= 0; }

  std::string name() const {
    std::string s = std::string(dtype == FA_DTYPE_FP32 ? "f32" : dtype == FA_DTYPE_FP16 ? "f16" : "bf16") +
                    "_b" + std::to_string(batch) + "_h" + std::to_string(heads_q) + "_" +
                    std::to_string(heads_kv) + "_d" + std::to_string(head_dim) + "_q" +
                    std::to_string(seqlen_q) + "_cap" + std::to_string(capacity);
    if (page_size) s += "_page" + std::to_string(page_size);
    if (!leftpad.empty()) s += "_leftpad";
    if (!batch_idx.empty()) s += "_rowmap";
    if (seqlen_new) s += "_new" + std::to_string(seqlen_new);
    if (rotary_dim) s += std::string("_rot") + std::to_string(rotary_dim) + (interleaved ? "i" : "n");
    if (causal) s += "_causal";
    if (window_left >= 0 || window_right >= 0)
      s += "_win" + std::to_string(window_left) + "_" + std::to_string(window_right);
    if (softcap > 0.f) s += "_softcap";
    if (alibi) s += "_alibi";
    s += "_split" + std::to_string(num_splits);
    return s;
  }
};
void PrintTo(const KvCase& c, std::ostream* os) { *os << c.name(); }

// A KV-cache call's tensors, and what the cache must hold after it.
struct KvProblem {
  KvCase c;
  HostTensor q, k_cache, v_cache, k_new, v_new, cos, sin, out, lse, table, seqlens, leftpad, rows;
  HostTensor alibi;  // borrowed from the oracle's problem (same slopes)
  int64_t num_blocks = 0;

  explicit KvProblem(const KvCase& kc) : c(kc) {
    std::mt19937_64 rng(c.seed);
    const int64_t hk = c.heads_kv, d = c.head_dim;
    q = HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, d});
    q.fill_normal(rng);
    if (c.page_size > 0) {
      num_blocks = c.batch * c.blocks_per_entry() + 3;  // 3 spare blocks
      k_cache = HostTensor(c.dtype, {num_blocks, c.page_size, hk, d});
      v_cache = HostTensor(c.dtype, {num_blocks, c.page_size, hk, d});
      std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      table = HostTensor(FA_DTYPE_INT32, {c.batch, c.blocks_per_entry()});
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t n = 0; n < c.blocks_per_entry(); ++n) {
          const bool read = n >= c.start(b) / c.page_size && n * c.page_size < c.end(b);
          table.set(b * c.blocks_per_entry() + n,
                    read ? perm[size_t(b * c.blocks_per_entry() + n)] : -1);
        }
    } else {
      k_cache = HostTensor(c.dtype, {c.rows(), c.capacity, hk, d});
      v_cache = HostTensor(c.dtype, {c.rows(), c.capacity, hk, d});
    }
    // Every slot NaN, then values where each entry's old keys are.
    k_cache.poison();
    v_cache.poison();
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = c.start(b); t < c.cache_lens[size_t(b)]; ++t)
        for (int64_t h = 0; h < hk; ++h)
          for (int64_t e = 0; e < d; ++e) {
            k_cache.set(slot(b, t, h, e), normal(rng));
            v_cache.set(slot(b, t, h, e), normal(rng));
          }
    if (c.seqlen_new > 0) {
      k_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, hk, d});
      v_new = HostTensor(c.dtype, {c.batch, c.seqlen_new, hk, d});
      k_new.fill_normal(rng);
      v_new.fill_normal(rng);
    }
    if (c.rotary_dim > 0) {  // the usual RoPE table: angle pos * 10000^(-2j / rotary_dim)
      const int64_t ro = c.cap() + c.seqlen_q, half = c.rotary_dim / 2;
      const fa_dtype t = c.rotary_fp32 ? FA_DTYPE_FP32 : c.dtype;
      cos = HostTensor(t, {ro, half});
      sin = HostTensor(t, {ro, half});
      for (int64_t pos = 0; pos < ro; ++pos)
        for (int64_t j = 0; j < half; ++j) {
          const double angle = double(pos) * std::pow(10000.0, -2.0 * double(j) / double(c.rotary_dim));
          cos.set(pos * half + j, std::cos(angle));
          sin.set(pos * half + j, std::sin(angle));
        }
    }
    seqlens = HostTensor(FA_DTYPE_INT32, {c.batch});
    for (int64_t b = 0; b < c.batch; ++b) seqlens.set(b, c.cache_lens[size_t(b)]);
    if (!c.leftpad.empty()) {
      leftpad = HostTensor(FA_DTYPE_INT32, {c.batch});
      for (int64_t b = 0; b < c.batch; ++b) leftpad.set(b, c.leftpad[size_t(b)]);
    }
    if (!c.batch_idx.empty()) {
      rows = HostTensor(FA_DTYPE_INT32, {c.batch});
      for (int64_t b = 0; b < c.batch; ++b) rows.set(b, c.batch_idx[size_t(b)]);
    }
    out = HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, d});
    lse = HostTensor(FA_DTYPE_FP32, {c.batch, c.heads_q, c.seqlen_q});
  }

  // Flat index of element e of head h of key t (a cache row) of entry b in k_cache / v_cache.
  int64_t slot(int64_t b, int64_t t, int64_t h, int64_t e) const {
    const int64_t hk = c.heads_kv, d = c.head_dim;
    if (c.page_size == 0) return ((c.row_of(b) * c.capacity + t) * hk + h) * d + e;
    const int64_t block = int64_t(table.get(b * c.blocks_per_entry() + t / c.page_size));
    return ((block * c.page_size + t % c.page_size) * hk + h) * d + e;
  }

  fa_params params(fa_backend backend) const {
    fa_params p;
    fa_params_init(&p);
    p.backend = backend;
    p.q = q.view().raw;
    p.k = k_cache.view().raw;
    p.v = v_cache.view().raw;
    p.out = out.view().raw;
    p.lse = lse.view().raw;
    p.cache_seqlens = seqlens.view().raw;
    if (table.data()) p.block_table = table.view().raw;
    if (leftpad.data()) p.cache_leftpad = leftpad.view().raw;
    if (rows.data()) p.cache_batch_idx = rows.view().raw;
    if (k_new.data()) {
      p.k_new = k_new.view().raw;
      p.v_new = v_new.view().raw;
    }
    if (cos.data()) {
      p.rotary_cos = cos.view().raw;
      p.rotary_sin = sin.view().raw;
      p.rotary_interleaved = c.interleaved ? 1 : 0;
    }
    if (alibi.data()) p.alibi_slopes = alibi.view().raw;
    p.causal = c.causal ? 1 : 0;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softcap = c.softcap;
    p.num_splits = c.num_splits;
    return p;
  }
};

// x (fp32) rotated at pos in its first rotary_dim elements: this test's own statement of
// flash_attn's formula.
void rotate(const KvProblem& pr, int64_t pos, std::vector<float>& x) {
  const int64_t half = pr.c.rotary_dim / 2;
  for (int64_t j = 0; j < half; ++j) {
    const int64_t i1 = pr.c.interleaved ? 2 * j : j, i2 = pr.c.interleaved ? 2 * j + 1 : j + half;
    const float co = float(pr.cos.get(pos * half + j)), si = float(pr.sin.get(pos * half + j));
    const float x1 = x[size_t(i1)], x2 = x[size_t(i2)];
    const float a = x1 * co, b = x2 * si, e = x1 * si, f = x2 * co;
    x[size_t(i1)] = a - b;
    x[size_t(i2)] = e + f;
  }
}

// The caches as they must be after the call.
void expected_caches(const KvProblem& pr, HostTensor& k, HostTensor& v) {
  const KvCase& c = pr.c;
  std::vector<float> x(static_cast<size_t>(c.head_dim));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < c.seqlen_new; ++j) {
      const int64_t t = c.cache_lens[size_t(b)] + j;
      for (int64_t h = 0; h < c.heads_kv; ++h) {
        const int64_t src = ((b * c.seqlen_new + j) * c.heads_kv + h) * c.head_dim;
        for (int64_t e = 0; e < c.head_dim; ++e) x[size_t(e)] = float(pr.k_new.get(src + e));
        if (c.rotary_dim > 0) rotate(pr, t, x);
        for (int64_t e = 0; e < c.head_dim; ++e) {
          k.set(pr.slot(b, t, h, e), double(x[size_t(e)]));
          v.set(pr.slot(b, t, h, e), pr.v_new.get(src + e));
        }
      }
    }
}

// A byte-for-byte copy of a tensor (same shape, same storage).
HostTensor copy_of(const HostTensor& t) {
  HostTensor r(t.dtype(), t.shape());
  std::memcpy(r.data(), t.data(), t.storage_bytes());
  return r;
}

// The oracle's problem: a packed batch of what each entry attends to (its rotated queries, the
// keys [leftpad, end) of its cache row after the append), with the same options.
Problem oracle_problem(const KvProblem& pr, const HostTensor& k_after, const HostTensor& v_after) {
  const KvCase& c = pr.c;
  Case o;
  o.dtype = c.dtype;
  o.batch = c.batch;
  o.heads_q = c.heads_q;
  o.heads_kv = c.heads_kv;
  o.head_dim = c.head_dim;
  o.causal = c.causal;
  o.window_left = c.window_left;
  o.window_right = c.window_right;
  o.softcap = c.softcap;
  o.alibi = c.alibi;
  o.seed = c.seed;
  for (int64_t b = 0; b < c.batch; ++b) {
    o.lens_q.push_back(int32_t(c.seqlen_q));
    o.lens_k.push_back(int32_t(c.end(b) - c.start(b)));
  }
  Problem plain(o);
  const int64_t d = c.head_dim;
  std::vector<float> x(static_cast<size_t>(d));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t h = 0; h < c.heads_q; ++h) {
        const int64_t at = ((b * c.seqlen_q + i) * c.heads_q + h) * d;
        for (int64_t e = 0; e < d; ++e) x[size_t(e)] = float(pr.q.get(at + e));
        if (c.rotary_dim > 0)
          rotate(pr, c.cache_lens[size_t(b)] + (c.advance() ? i : 0), x);
        // Rounded to q's dtype, as the library keeps the rotated q (HostTensor::set rounds).
        for (int64_t e = 0; e < d; ++e) plain.q.set(at + e, double(x[size_t(e)]));
      }
  int64_t row = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t t = c.start(b); t < c.end(b); ++t, ++row)
      for (int64_t h = 0; h < c.heads_kv; ++h)
        for (int64_t e = 0; e < d; ++e) {
          plain.k.set((row * c.heads_kv + h) * d + e, k_after.get(pr.slot(b, t, h, e)));
          plain.v.set((row * c.heads_kv + h) * d + e, v_after.get(pr.slot(b, t, h, e)));
        }
  return plain;
}

void run_call(KvProblem& pr, fa_backend backend) {
  const fa_params p = pr.params(backend);
  size_t bytes = 0;
  ASSERT_EQ(fa_forward_workspace_size(&p, &bytes), FA_OK) << fa_last_error();
  std::vector<unsigned char> ws(std::max<size_t>(bytes, 1), 0xFF);  // poisoned
  pr.out.poison();
  pr.lse.poison();
  ASSERT_EQ(fa_forward(&p, ws.data(), bytes, nullptr), FA_OK) << fa_last_error();
}

// The checks of a call that ran: both caches as expected byte for byte, out and lse against the
// oracle's packed problem by FlashAttention's rule (round_p: the GPU kernels' naive baseline,
// P rounded to the 16-bit type).
void expect_call_results(const KvProblem& pr, const Problem& plain, const HostTensor& k_want,
                         const HostTensor& v_want, bool round_p) {
  const KvCase& c = pr.c;
  EXPECT_TRUE(pr.k_cache.bytes_equal(k_want)) << "k cache after the append";
  EXPECT_TRUE(pr.v_cache.bytes_equal(v_want)) << "v cache after the append";
  const Dense ref = reference(plain, false, false), naive = reference(plain, true, false, round_p);
  std::vector<double> got_out(static_cast<size_t>(pr.out.numel())), got_lse(ref.lse.size());
  for (int64_t i = 0; i < pr.out.numel(); ++i) got_out[size_t(i)] = pr.out.get(i);
  const int64_t total_q = c.batch * c.seqlen_q;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        got_lse[size_t(h * total_q + b * c.seqlen_q + i)] =
            pr.lse.get((b * c.heads_q + h) * c.seqlen_q + i);
  expect_rule("out", got_out, ref.out, naive.out, 2, 1e-5);
  expect_rule("lse", got_lse, ref.lse, naive.lse, 2, 1e-5);
}

// The whole check of one case on one backend.
void check_case(const KvCase& c, fa_backend backend) {
  SCOPED_TRACE(c.name() + (backend == FA_BACKEND_FLASH ? " flash" : " reference"));
  KvProblem pr(c);
  HostTensor k_want = copy_of(pr.k_cache), v_want = copy_of(pr.v_cache);
  expected_caches(pr, k_want, v_want);
  Problem plain = oracle_problem(pr, k_want, v_want);
  pr.alibi = plain.alibi;
  run_call(pr, backend);
  expect_call_results(pr, plain, k_want, v_want, false);
}

// ---- the grid ---------------------------------------------------------------------------------

std::vector<KvCase> grid() {
  std::vector<KvCase> cases;
  uint64_t n = 0;
  auto add = [&](KvCase c) {
    c.seed = ++n;
    cases.push_back(c);
  };
  // Paged caches of every page size (37 divides nothing here), decode with append + rotary.
  for (int64_t page : {1, 16, 64, 256, 37}) {
    KvCase c;
    c.dtype = n % 2 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
    c.page_size = page;
    c.capacity = 300;
    c.cache_lens = {200, 0, 113};
    c.seqlen_new = 1;
    c.rotary_dim = 16;
    c.interleaved = page % 2 == 1;
    c.causal = true;
    c.num_splits = page == 64 ? 4 : 1;
    add(c);
  }
  // Paged, no append: ragged lengths with an empty entry, a window, and leftpad in a paged cache.
  {
    KvCase c;
    c.page_size = 16;
    c.capacity = 100;
    c.cache_lens = {100, 0, 37};
    c.window_left = 20;
    c.window_right = 0;
    add(c);
    c.cache_lens = {90, 40, 17};
    c.leftpad = {33, 40, 2};  // entry 1: no key at all
    c.window_left = c.window_right = -1;
    c.softcap = 5.f;
    c.seqlen_q = 3;
    add(c);
  }
  // seqlen_q 1-8 and 128 with an append of as many keys (chunked decode / prefill into a cache).
  for (int64_t sq : {1, 2, 3, 5, 8, 128}) {
    KvCase c;
    c.dtype = sq % 2 ? FA_DTYPE_FP32 : FA_DTYPE_BF16;
    c.seqlen_q = sq;
    c.seqlen_new = sq;
    c.capacity = 200;
    c.cache_lens = {int32_t(200 - sq), 0, 61};
    c.causal = sq != 3;
    if (sq == 3) c.window_left = 7, c.window_right = 2;
    c.rotary_dim = sq == 128 ? 32 : 8;  // rotary_dim = d and < d
    c.interleaved = sq % 2 == 0;
    c.rotary_fp32 = sq == 5;
    c.page_size = sq >= 5 ? 16 : 0;
    add(c);
  }
  // Not causal, no window: every query row is rotated at cache_seqlens (flash_attn's rule).
  {
    KvCase c;
    c.seqlen_q = 4;
    c.seqlen_new = 4;
    c.capacity = 80;
    c.cache_lens = {70, 0, 33};
    c.rotary_dim = 12;
    c.alibi = true;
    add(c);
  }
  // GQA 1, 4, 8 and MQA, dense caches with a permuted row map (more rows than entries), leftpad,
  // ALiBi, softcap; append with and without rotary.
  const int64_t ratios[][2] = {{4, 4}, {8, 2}, {8, 1}, {16, 1}};
  for (const auto& r : ratios) {
    KvCase c;
    c.dtype = FA_DTYPE_FP16;
    c.heads_q = r[0];
    c.heads_kv = r[1];
    c.head_dim = 40;
    c.batch_cache = 5;
    c.batch_idx = {3, 0, 4};
    c.capacity = 150;
    c.cache_lens = {150 - 2, 64, 9};
    c.leftpad = {5, 0, 9};  // entry 2: only its new keys
    c.seqlen_new = 2;
    c.seqlen_q = 2;
    c.rotary_dim = r[1] == 2 ? 0 : 40;
    c.interleaved = r[0] == 16;
    c.alibi = r[0] != 4;
    c.softcap = r[0] == 8 ? 4.f : 0.f;
    c.causal = true;
    c.num_splits = r[0] == 16 ? 3 : 1;
    add(c);
  }
  return cases;
}

class KvUpdate : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvUpdate, CacheBytesAndAccuracyRule) {
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) check_case(GetParam(), backend);
}

INSTANTIATE_TEST_SUITE_P(Grid, KvUpdate, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<KvCase>& info) {
                           return std::to_string(info.index) + "_" + info.param.name();
                         });

// num_splits: no split, forced counts (2, 7, and 128: more parts than some entries have keys) and
// the heuristic each meet the rule, with the same cache bytes. A long decode cache of one entry
// and one head: the heuristic splits it when the machine has more than one thread.
TEST(KvUpdateSplits, EveryCountMeetsTheRule) {
  for (int32_t splits : {1, 2, 7, 128, 0}) {
    KvCase c;
    c.dtype = FA_DTYPE_BF16;
    c.batch = 2;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.head_dim = 64;
    c.page_size = 16;
    c.capacity = 1100;
    c.cache_lens = {1099, 40};
    c.seqlen_new = 1;
    c.rotary_dim = 64;
    c.causal = true;
    c.alibi = true;
    c.num_splits = splits;
    c.seed = 100 + uint64_t(splits);
    for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) check_case(c, backend);
  }
  for (int32_t splits : {0, 3}) {  // one task: what the heuristic is for
    KvCase c;
    c.batch = 1;
    c.heads_q = c.heads_kv = 1;
    c.head_dim = 16;
    c.capacity = 2000;
    c.cache_lens = {1500};
    c.window_left = 700;
    c.num_splits = splits;
    check_case(c, FA_BACKEND_FLASH);
  }
}

// Split-KV also serves calls without a cache: a packed batch (an empty sequence included) and
// causal attention, every split count against the unsplit run by the rule.
TEST(KvUpdateSplits, PlainCallsToo) {
  Case c;
  c.dtype = FA_DTYPE_FP16;
  c.lens_q = {5, 0, 70};
  c.lens_k = {300, 10, 70};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 24;
  c.causal = true;
  for (int32_t splits : {2, 5, 128}) {
    SCOPED_TRACE(splits);
    Problem pr(c);
    fa_params p = pr.params(FA_BACKEND_FLASH);
    p.num_splits = splits;
    HostWorkspace ws(forward_workspace_size(p));
    ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
    const Dense got = outputs(pr, false);
    const Dense ref = reference(pr, false, false), naive = reference(pr, true, false);
    expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
    expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
  }
}

// The heuristic's choices (core/splits.h).
TEST(KvUpdateSplits, Heuristic) {
  EXPECT_EQ(heuristic_splits(32, 100000, 16, 256), 1);   // enough tasks
  EXPECT_EQ(heuristic_splits(1, 300, 16, 256), 1);       // too few keys to split
  EXPECT_EQ(heuristic_splits(1, 512, 16, 256), 2);       // parts of at least 256 keys
  EXPECT_EQ(heuristic_splits(4, 100000, 16, 256), 16);   // a part per worker
  EXPECT_EQ(heuristic_splits(1, 1 << 20, 1000, 256), kMaxSplits);
}

// Without lse (lse.data NULL) a split call writes out as with it, and the workspace query and
// the run agree on the size; a rejected call (the append past the cache) leaves the cache as it
// was (tests/test_validation.cpp checks every rejection this way).
TEST(KvUpdate, NoLseSameOutput) {
  KvCase c;
  c.capacity = 600;
  c.cache_lens = {500, 3, 599};
  c.seqlen_new = 1;
  c.rotary_dim = 8;
  c.num_splits = 3;
  KvProblem with(c), without(c);
  run_call(with, FA_BACKEND_FLASH);
  fa_params p = without.params(FA_BACKEND_FLASH);
  p.lse.data = nullptr;
  HostWorkspace ws(forward_workspace_size(p));
  ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
  EXPECT_TRUE(with.out.bytes_equal(without.out));
  EXPECT_TRUE(with.k_cache.bytes_equal(without.k_cache));
}


// ---- the same calls on a GPU (the cuda-kvcache family) ----------------------------------------

#ifdef FA_TEST_CUDA
// Every tensor of the call mirrored on the device (inputs copied, out and lse poisoned), run with
// a poisoned workspace of the queried size, then out, lse and both caches copied back into pr.
void run_call_gpu(KvProblem& pr, const Tuning& tuning) {
  std::vector<std::unique_ptr<DeviceTensor>> keep;
  auto mirror = [&](const HostTensor& h, bool poison) {
    keep.push_back(std::make_unique<DeviceTensor>(h, poison));
    return keep.back()->view();
  };
  fa_params p = pr.params(FA_BACKEND_AUTO);
  p.q = mirror(pr.q, false);
  p.k = mirror(pr.k_cache, false);
  const DeviceTensor& k_dev = *keep.back();
  p.v = mirror(pr.v_cache, false);
  const DeviceTensor& v_dev = *keep.back();
  p.out = mirror(pr.out, true);
  const DeviceTensor& out_dev = *keep.back();
  p.lse = mirror(pr.lse, true);
  const DeviceTensor& lse_dev = *keep.back();
  p.cache_seqlens = mirror(pr.seqlens, false);
  if (pr.table.data()) p.block_table = mirror(pr.table, false);
  if (pr.leftpad.data()) p.cache_leftpad = mirror(pr.leftpad, false);
  if (pr.rows.data()) p.cache_batch_idx = mirror(pr.rows, false);
  if (pr.k_new.data()) {
    p.k_new = mirror(pr.k_new, false);
    p.v_new = mirror(pr.v_new, false);
  }
  if (pr.cos.data()) {
    p.rotary_cos = mirror(pr.cos, false);
    p.rotary_sin = mirror(pr.sin, false);
  }
  if (pr.alibi.data()) p.alibi_slopes = mirror(pr.alibi, false);
  EXPECT_EQ(family_of(p, Pass::Forward, tuning), "cuda-kvcache");
  run_pass(p, false, &tuning);
  if (::testing::Test::HasFatalFailure()) return;
  out_dev.copy_to(pr.out);
  lse_dev.copy_to(pr.lse);
  k_dev.copy_to(pr.k_cache);
  v_dev.copy_to(pr.v_cache);
}

void check_case_gpu(KvCase c, const Tuning& tuning) {
  if (c.dtype == FA_DTYPE_FP32) c.dtype = FA_DTYPE_BF16;  // the CUDA kernels take 16-bit inputs
  SCOPED_TRACE(c.name() + " cuda" + (tuning.kvcache_pdl ? " pdl" : "") +
               (tuning.kvcache_fused_merge ? " fused merge" : ""));
  KvProblem pr(c);
  HostTensor k_want = copy_of(pr.k_cache), v_want = copy_of(pr.v_cache);
  expected_caches(pr, k_want, v_want);
  Problem plain = oracle_problem(pr, k_want, v_want);
  pr.alibi = plain.alibi;
  run_call_gpu(pr, tuning);
  if (::testing::Test::HasFatalFailure()) return;
  expect_call_results(pr, plain, k_want, v_want, true);
}

// The CPU grid, then what a GPU adds: head dims 128 and 256, GQA 32 (two row tiles a query),
// long caches split by the heuristic and by force (page sizes 1, 16, 256), leftpad in a paged
// cache, and a window over a long cache.
std::vector<KvCase> gpu_grid() {
  std::vector<KvCase> cases = grid();
  uint64_t n = 1000;
  auto add = [&](KvCase c) {
    c.seed = ++n;
    cases.push_back(c);
  };
  for (const int64_t page : {0, 1, 16, 256})
    for (const int32_t splits : {0, 1, 5}) {
      KvCase c;
      c.dtype = n % 2 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
      c.batch = 2;
      c.heads_q = 32;
      c.heads_kv = page == 1 ? 1 : 8;
      c.head_dim = page == 256 ? 256 : 128;
      c.page_size = page;
      c.capacity = 6000;
      c.cache_lens = {5990, 1};
      c.seqlen_new = 1;
      c.rotary_dim = 128;
      c.causal = true;
      c.num_splits = splits;
      add(c);
    }
  {
    KvCase c;
    c.dtype = FA_DTYPE_BF16;
    c.batch = 3;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.head_dim = 96;
    c.page_size = 16;
    c.capacity = 3000;
    c.cache_lens = {2900, 700, 31};
    c.leftpad = {100, 699, 0};
    c.seqlen_q = 4;
    c.seqlen_new = 4;
    c.window_left = 300;
    c.window_right = 0;
    c.softcap = 10.f;
    c.num_splits = 0;
    add(c);
  }
  return cases;
}

class GpuKvUpdate : public ::testing::TestWithParam<KvCase> {};

// As the library ships; then with the kernels as programmatic dependent launches (sm90; off by
// default: Tuning::kvcache_pdl), and with the split parts merged in the attention kernel (off by
// default: Tuning::kvcache_fused_merge; the workspace poisoned, its counters 0xFFFFFFFF until the
// call's memset), each a test of its own so that a sanitizer run can take any alone.
TEST_P(GpuKvUpdate, CacheBytesAndAccuracyRule) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  check_case_gpu(GetParam(), Tuning{});
}

TEST_P(GpuKvUpdate, DependentLaunchesCacheBytesAndAccuracyRule) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Tuning t;
  t.kvcache_pdl = true;
  check_case_gpu(GetParam(), t);
}

TEST_P(GpuKvUpdate, FusedMergeCacheBytesAndAccuracyRule) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
  Tuning t;
  t.kvcache_fused_merge = true;
  check_case_gpu(GetParam(), t);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuKvUpdate, ::testing::ValuesIn(gpu_grid()),
                         [](const ::testing::TestParamInfo<KvCase>& info) {
                           return std::to_string(info.index) + "_" + info.param.name();
                         });
#else
TEST(GpuKvUpdate, SkippedWithoutCuda) { GTEST_SKIP() << "CPU-only build (FA_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace
}  // namespace fa::test
