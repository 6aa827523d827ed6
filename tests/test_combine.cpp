// The combine step (core/combine.h, cpu/combine.cpp): partial (O, LSE) pairs over disjoint key
// sets merge into the attention over their union. The keys of a problem are split into 2..5
// chunks; each chunk runs alone through the public API with q_shift placing the queries where
// they stand against it (so causal masks, windows and ALiBi stay right) and an fp32 out, as a
// split-KV kernel's partials would be; the merge must give the unsplit run - tightly on the
// reference, by the accuracy rule on flash - including empty chunks (O never read: NaN) and rows
// that see no key at all (O = 0, LSE = -inf exactly).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "api/validate.h"
#include "core/combine.h"
#include "cpu/combine.h"
#include "support.h"

namespace fa::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

TEST(CombineSemantics, MergedLseAndWeights) {
  auto lse_of = [](const std::vector<double>& v) { return [&v](int64_t i) { return v[size_t(i)]; }; };
  const std::vector<double> empty = {-kInf, -kInf, -kInf};
  EXPECT_EQ(merged_lse<double>(lse_of(empty), 3), -kInf);
  EXPECT_EQ(part_weight(-kInf, -kInf), 0.0);
  const std::vector<double> one = {-kInf, 1.25, -kInf};
  EXPECT_EQ(merged_lse<double>(lse_of(one), 3), 1.25);
  EXPECT_EQ(part_weight(1.25, 1.25), 1.0);
  EXPECT_EQ(part_weight(-kInf, 1.25), 0.0);
  const std::vector<double> two = {0.5, 0.5};
  EXPECT_DOUBLE_EQ(merged_lse<double>(lse_of(two), 2), 0.5 + std::log(2.0));
  EXPECT_DOUBLE_EQ(part_weight(0.5, 0.5 + std::log(2.0)), 0.5);
  // Large LSEs (ALiBi far away, huge scores) neither overflow nor lose the smaller part.
  const std::vector<float> big = {3e38f, 3e38f};
  const float m = merged_lse<float>([&](int64_t i) { return big[size_t(i)]; }, 2);
  EXPECT_TRUE(std::isfinite(m));
  const std::vector<float> far = {-1e30f, -1e30f};
  EXPECT_TRUE(std::isfinite(merged_lse<float>([&](int64_t i) { return far[size_t(i)]; }, 2)));
}

// One chunk's partial results, fp32, in q's layout.
struct Part {
  HostTensor out, lse;
};

// Runs keys [k0, k1) of pr's keys (k1 > k0) with `backend`, into fp32 out and lse.
Part run_chunk(const Problem& pr, int64_t k0, int64_t k1, fa_backend backend) {
  const Case& c = pr.c;
  Part part{HostTensor(FA_DTYPE_FP32, pr.q.shape()), HostTensor(FA_DTYPE_FP32, pr.lse.shape())};
  part.out.poison();
  part.lse.poison();
  fa_params p = pr.params(backend);
  for (fa_tensor* kv : {&p.k, &p.v}) {
    kv->data = static_cast<unsigned char*>(kv->data) + k0 * kv->stride[1] * pr.k.elem_size();
    kv->shape[1] = k1 - k0;
  }
  p.out = part.out.view().raw;
  p.lse = part.lse.view().raw;
  // The queries against this chunk: query row i sits at key position i + seqlen_k - seqlen_q of
  // all the keys, i.e. at i + (k1 - k0) - seqlen_q + (seqlen_k - k1) of the chunk's.
  p.q_shift = c.seqlen_k - k1;
  fa::HostWorkspace ws(fa::forward_workspace_size(p));
  fa::forward(p, ws.data(), ws.size());
  return part;
}

// A chunk with no keys: every row empty; its O is NaN, which the merge must not read.
Part empty_chunk(const Problem& pr) {
  Part part{HostTensor(FA_DTYPE_FP32, pr.q.shape()), HostTensor(FA_DTYPE_FP32, pr.lse.shape())};
  for (int64_t i = 0; i < part.out.numel(); ++i) part.out.set(i, kNaNf);
  for (int64_t i = 0; i < part.lse.numel(); ++i) part.lse.set(i, -kInf);
  return part;
}

View view_of(const HostTensor& t) {  // a contiguous (batch, seqlen, heads, d) fp32 tensor
  View v;
  v.data = t.data();
  v.dtype = DType::F32;
  v.stride_b = t.strides()[0];
  v.stride_s = t.strides()[1];
  v.stride_h = t.strides()[2];
  return v;
}
LseView lse_view_of(const HostTensor& t) {  // (batch, heads, seqlen)
  LseView v;
  v.data = static_cast<float*>(t.data());
  v.stride_b = t.strides()[0];
  v.stride_h = t.strides()[1];
  v.stride_s = t.strides()[2];
  return v;
}

// The merge of the parts, written as pr's out (in its dtype) and lse.
Dense combined(Problem& pr, const std::vector<Part>& parts) {
  const fa_params fp = pr.params(FA_BACKEND_REFERENCE);
  const Params p = validate_forward(&fp);
  std::vector<cpu::Partial> partials;
  for (const Part& part : parts) partials.push_back({view_of(part.out), lse_view_of(part.lse)});
  pr.poison_outputs();
  cpu::combine(p, partials.data(), int64_t(partials.size()), omp_get_max_threads());
  return outputs(pr, false);
}

struct SplitCase {
  const char* name;
  Case c;
  std::vector<int64_t> cuts;  // key chunk boundaries 0 ... seqlen_k; equal neighbours: empty
};

Case split_base() {
  Case c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 90;
  c.seqlen_k = 140;
  c.head_dim = 32;
  c.seed = 7;
  return c;
}

std::vector<SplitCase> split_cases() {
  std::vector<SplitCase> v;
  Case c = split_base();
  v.push_back({"plain_2", c, {0, 70, 140}});
  c.causal = true;
  v.push_back({"causal_3", c, {0, 50, 51, 140}});
  c.seqlen_q = 170;  // more queries than keys: the first 30 rows see no key at all
  v.push_back({"causal_fully_masked_rows_4", c, {0, 1, 64, 64, 140}});
  c = split_base();
  c.window_left = 20;
  c.window_right = 3;
  v.push_back({"window_5", c, {0, 17, 40, 41, 100, 140}});
  c = split_base();
  c.alibi = true;
  c.causal = true;
  c.softcap = 5.f;
  v.push_back({"alibi_softcap_causal_3", c, {0, 9, 120, 140}});
  c = split_base();
  c.dtype = FA_DTYPE_BF16;
  c.heads_kv = 1;
  c.causal = true;
  v.push_back({"bf16_mqa_causal_2", c, {0, 139, 140}});
  return v;
}

void PrintTo(const SplitCase& sc, std::ostream* os) {
  *os << sc.c.name() << " keys cut at";
  for (int64_t x : sc.cuts) *os << " " << x;
}

class KeySplit : public ::testing::TestWithParam<SplitCase> {};

std::vector<Part> run_chunks(const Problem& pr, const std::vector<int64_t>& cuts,
                             fa_backend backend) {
  std::vector<Part> parts;
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    parts.push_back(cuts[i] == cuts[i + 1] ? empty_chunk(pr)
                                           : run_chunk(pr, cuts[i], cuts[i + 1], backend));
  return parts;
}

// Rows that see no key: out 0 and lse -inf exactly, in the merge as in the unsplit run.
void expect_same_empty_rows(const Dense& got, const Dense& want) {
  ASSERT_EQ(got.lse.size(), want.lse.size());
  for (size_t i = 0; i < want.lse.size(); ++i)
    if (std::isinf(want.lse[i])) ASSERT_EQ(got.lse[i], want.lse[i]) << "lse " << i;
  for (size_t i = 0; i < got.out.size(); ++i) ASSERT_FALSE(std::isnan(got.out[i])) << "out " << i;
}

TEST_P(KeySplit, ReferenceChunksMergeIntoTheUnsplitRun) {
  const SplitCase& sc = GetParam();
  Problem pr(sc.c);
  run_forward(pr, FA_BACKEND_REFERENCE);
  const Dense want = outputs(pr, false);
  const Dense got = combined(pr, run_chunks(pr, sc.cuts, FA_BACKEND_REFERENCE));
  expect_same_empty_rows(got, want);
  // fp32 partials merged in double against a run rounded once: a few fp32 ulps (bf16 outputs:
  // the one rounding of each).
  const double tol = sc.c.dtype == FA_DTYPE_FP32 ? 1e-6 : 1e-2;
  EXPECT_LE(max_abs_diff(got.out, want.out), tol * (1 + max_abs(want.out)));
  EXPECT_LE(max_abs_diff(got.lse, want.lse), 1e-6 * (1 + max_abs(want.lse)));
}

TEST_P(KeySplit, FlashChunksMergeByTheAccuracyRule) {
  const SplitCase& sc = GetParam();
  Problem pr(sc.c);
  const Dense ref = reference(pr, false, false), naive = reference(pr, true, false);
  const Dense got = combined(pr, run_chunks(pr, sc.cuts, FA_BACKEND_FLASH));
  expect_same_empty_rows(got, ref);
  expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
  expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Cuts, KeySplit, ::testing::ValuesIn(split_cases()),
                         [](const ::testing::TestParamInfo<SplitCase>& info) {
                           return std::string(info.param.name);
                         });

// Without an lse destination the merge writes out only; the parts may sit in one buffer at any
// stride (split-KV's layout: (parts, batch, seqlen, heads, d)).
TEST(Combine, StackedPartsAndNoLse) {
  Case c = split_base();
  c.causal = true;
  Problem pr(c);
  const std::vector<int64_t> cuts = {0, 40, 140};
  std::vector<Part> parts = run_chunks(pr, cuts, FA_BACKEND_FLASH);
  HostTensor stacked(FA_DTYPE_FP32, {2, c.batch, c.seqlen_q, c.heads_q, c.head_dim});
  const int64_t n = parts[0].out.numel();
  for (int64_t i = 0; i < 2; ++i)
    std::memcpy(static_cast<float*>(stacked.data()) + i * n, parts[size_t(i)].out.data(),
                size_t(n) * 4);
  const fa_params fp = pr.params(FA_BACKEND_REFERENCE);
  Params p = validate_forward(&fp);
  const Dense with_lse = combined(pr, parts);
  std::vector<cpu::Partial> partials;
  for (int64_t i = 0; i < 2; ++i) {
    View v = view_of(parts[0].out);
    v.data = static_cast<float*>(stacked.data()) + i * n;
    partials.push_back({v, lse_view_of(parts[size_t(i)].lse)});
  }
  pr.poison_outputs();
  p.lse = LseView{};
  cpu::combine(p, partials.data(), 2, 1);
  const Dense got = outputs(pr, false);
  EXPECT_EQ(max_abs_diff(got.out, with_lse.out), 0.0);
  for (double x : got.lse) EXPECT_TRUE(std::isnan(x)) << "lse written without a destination";
}

}  // namespace
}  // namespace fa::test
