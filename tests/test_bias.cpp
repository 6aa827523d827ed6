// attn_bias and dbias (fa_params 0.4) on the CPU backends.
//
// - the grid: the CPU flash forward and backward (dbias included) against the fp64 reference by
//   FlashAttention's accuracy rule (test_flash_cpu.cpp's), over bias shapes (full, broadcast over
//   batch / heads / queries / keys, key padding), bias dtypes (fp32, fp16, bf16, bool, int8),
//   fully-masked rows, and the other features (causal, window, softcap, ALiBi, dropout, GQA,
//   packed batches, strides);
// - the reference's semantics checked without the reference: a boolean mask equal to causal's
//   gives causal's result, an fp32 bias equal to ALiBi's term gives ALiBi's, a bias constant
//   along each row changes nothing but the LSE; fully-masked rows give out 0 and LSE -inf;
// - the reference's dbias against central finite differences of its own forward (fp64), and the
//   flash dbias against it (the grid);
// - dbias is deterministic across thread counts, costs nothing when not asked, and split-KV
//   forwards take the bias; tiles a mask hides entirely (skipped) give the results of computing
//   them; fa::Options carries both fields.
// CUDA tensors: test_gpu_bias.cpp (the other refusals: test_validation.cpp's catalogue).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "api/validate.h"
#include "core/error.h"
#include "cpu/backend.h"
#include "bias_cases.h"
#include "support.h"

namespace fa::test {
namespace {

using bias::Shape;
using bias::set_shape;

// The flash kernels of one instruction set (the public entry points run cpu::best_isa()).
void run_flash_isa(Problem& pr, cpu::Isa isa) {
  pr.poison_outputs();
  const fa_params fwd = pr.params(FA_BACKEND_FLASH, false);
  const Params pf = validate_forward(&fwd);
  std::vector<unsigned char> ws(cpu::forward_workspace(pf, cpu::Impl::Flash));
  cpu::forward(pf, cpu::Impl::Flash, ws.data(), ws.size(), isa);
  const fa_params bwd = pr.params(FA_BACKEND_FLASH, true);
  const Params pb = validate_backward(&bwd);
  ws.assign(cpu::backward_workspace(pb, cpu::Impl::Flash), 0);
  cpu::backward(pb, cpu::Impl::Flash, ws.data(), ws.size(), isa);
}

class BiasCpu : public ::testing::TestWithParam<Case> {};

// Through the public API, then with every other instruction set this build has and this CPU runs.
TEST_P(BiasCpu, FlashMatchesReference) {
  Problem pr(GetParam());
  const Dense ref = reference(pr, false, true);
  const Dense naive = reference(pr, true, true);
  for (cpu::Isa isa : cpu::available_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    if (isa == cpu::best_isa()) {
      pr.poison_outputs();
      run_forward(pr, FA_BACKEND_FLASH);
      run_backward(pr, FA_BACKEND_FLASH);
    } else {
      run_flash_isa(pr, isa);
    }
    const Dense got = outputs(pr, true);
    expect_rules(got, ref, naive);
    if (pr.c.dbias) {
      ASSERT_EQ(got.dbias.size(), ref.dbias.size());
      expect_rule("dbias", got.dbias, ref.dbias, naive.dbias, 3, 1e-4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, BiasCpu, ::testing::ValuesIn(bias::grid()), CaseTestName());

// ---- the reference's semantics, without the reference --------------------------------------

Case small_case() {
  Case c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 37;
  c.seqlen_k = 70;
  c.head_dim = 32;
  return c;
}

// Outputs of a problem and of the same problem with another bias / options, both backends.
void expect_same_results(Problem& a, Problem& b, fa_backend backend, double tol) {
  for (Problem* pr : {&a, &b}) {
    run_forward(*pr, backend);
    run_backward(*pr, backend);
  }
  const Dense x = outputs(a, true), y = outputs(b, true);
  EXPECT_LE(max_abs_diff(x.out, y.out), tol);
  EXPECT_LE(max_abs_diff(x.lse, y.lse), tol);
  EXPECT_LE(max_abs_diff(x.dq, y.dq), 10 * tol);
  EXPECT_LE(max_abs_diff(x.dk, y.dk), 10 * tol);
  EXPECT_LE(max_abs_diff(x.dv, y.dv), 10 * tol);
}

// A boolean (and an int8) mask that is causal's, with seqlen_q > seqlen_k so that the first rows
// see no key: the same results as causal = 1 without a mask.
TEST(BiasSemantics, CausalMaskEqualsCausal) {
  for (int mask_dtype : {FA_DTYPE_BOOL, FA_DTYPE_INT8})
    for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      Case c = small_case();
      c.seqlen_q = 90;  // rows 0 .. 19 see no key
      Case causal = c;
      causal.causal = true;
      c.bias_dtype = mask_dtype;
      c.bias_full[0] = c.bias_full[1] = false;  // (1, 1, s_q, s_k)
      Problem masked(c), plain(causal);
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t j = 0; j < c.seqlen_k; ++j)
          masked.bias.set(i * c.seqlen_k + j, j <= i + c.seqlen_k - c.seqlen_q ? 1 : 0);
      expect_same_results(masked, plain, backend, 1e-6);
    }
}

// An fp32 bias holding ALiBi's term -slope * |i + s_k - s_q - j| gives ALiBi's results.
TEST(BiasSemantics, AlibiBiasEqualsAlibi) {
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Case c = small_case();
    c.seed = 2;  // even: one slope vector (heads_q)
    Case alibi = c;
    alibi.alibi = true;
    c.bias_dtype = FA_DTYPE_FP32;
    c.bias_full[0] = false;  // (1, heads_q, s_q, s_k)
    Problem biased(c), plain(alibi);
    for (int64_t h = 0; h < c.heads_q; ++h)
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t j = 0; j < c.seqlen_k; ++j) {
          const double slope = plain.alibi.get(h);
          biased.bias.set((h * c.seqlen_q + i) * c.seqlen_k + j,
                          -slope * std::fabs(double(i + c.seqlen_k - c.seqlen_q - j)));
        }
    expect_same_results(biased, plain, backend, 2e-5);
  }
}

// A bias constant along each row (b, h, i) cancels in the softmax: out and the gradients are
// those without a bias, the LSE moves by the constant.
TEST(BiasSemantics, RowConstantBiasShiftsOnlyTheLse) {
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Case c = small_case();
    c.causal = true;
    Case none = c;
    c.bias_dtype = FA_DTYPE_FP32;
    c.bias_full[3] = false;  // (b, h, s_q, 1)
    c.dbias = true;
    Problem biased(c), plain(none);
    for (Problem* pr : {&biased, &plain}) {
      run_forward(*pr, backend);
      run_backward(*pr, backend);
    }
    const Dense x = outputs(biased, true), y = outputs(plain, true);
    EXPECT_LE(max_abs_diff(x.out, y.out), 2e-5);
    EXPECT_LE(max_abs_diff(x.dq, y.dq), 2e-4);
    EXPECT_LE(max_abs_diff(x.dk, y.dk), 2e-4);
    EXPECT_LE(max_abs_diff(x.dv, y.dv), 2e-4);
    // lse (b, h, s_q) and the bias (b, h, s_q, 1) share their flat order.
    for (int64_t e = 0; e < biased.bias.numel(); ++e)
      ASSERT_NEAR(x.lse[size_t(e)], y.lse[size_t(e)] + biased.bias.get(e),
                  1e-5 * (1 + std::fabs(x.lse[size_t(e)])));
    // d loss / d (a row's constant) = sum_j P_ij (dP_ij - D_i) = 0.
    EXPECT_LE(max_abs(x.dbias), 1e-4);
  }
}

// Rows whose bias hides every key (-inf, or a mask's false): out 0 and LSE -inf exactly, no NaN
// anywhere, zero dq rows, a finite dbias; on both backends and in every bias dtype.
TEST(BiasSemantics, FullyMaskedRowsGiveZeroAndNegInf) {
  for (int bt : {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_BOOL, FA_DTYPE_INT8})
    for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      SCOPED_TRACE(std::to_string(bt) + (backend == FA_BACKEND_FLASH ? " flash" : " reference"));
      Case c = small_case();
      c.bias_dtype = bt;
      c.bias_full[0] = false;
      c.bias_empty_rows = true;  // rows 2, 9, 16, ... of every head
      c.dbias = bt != FA_DTYPE_BOOL && bt != FA_DTYPE_INT8;
      c.dropout_p = 0.1f;
      Problem pr(c);
      run_forward(pr, backend);
      run_backward(pr, backend);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads_q; ++h)
          for (int64_t i = 0; i < c.seqlen_q; ++i) {
            const bool empty = i % 7 == 2;
            const double lse = pr.lse.get((b * c.heads_q + h) * c.seqlen_q + i);
            if (empty) {
              ASSERT_TRUE(std::isinf(lse) && lse < 0) << "row " << i << " lse " << lse;
            } else {
              ASSERT_TRUE(std::isfinite(lse)) << "row " << i;
            }
            for (int64_t x = 0; x < c.head_dim; ++x) {
              const int64_t flat = ((b * c.seqlen_q + i) * c.heads_q + h) * c.head_dim + x;
              ASSERT_TRUE(std::isfinite(pr.out.get(flat)));
              ASSERT_TRUE(std::isfinite(pr.dq.get(flat)));
              if (empty) {
                ASSERT_EQ(pr.out.get(flat), 0.0);
                ASSERT_EQ(pr.dq.get(flat), 0.0);
              }
            }
          }
      for (const HostTensor* t : {&pr.dk, &pr.dv, &pr.dbias})
        for (int64_t e = 0; t->data() && e < t->numel(); ++e) ASSERT_TRUE(std::isfinite(t->get(e)));
      if (c.dbias)
        for (int64_t e = 0; e < pr.dbias.numel(); ++e)
          if ((e / c.seqlen_k) % c.seqlen_q % 7 == 2) ASSERT_EQ(pr.dbias.get(e), 0.0);
    }
}

// ---- dbias against finite differences ----------------------------------------------------------

// loss = sum(dout * out) of the fp64 reference forward.
double reference_loss(const Problem& pr) {
  const Dense r = reference(pr, false, false);
  double loss = 0;
  for (int64_t e = 0; e < pr.dout.numel(); ++e) loss += pr.dout.get(e) * r.out[size_t(e)];
  return loss;
}

// The reference's dbias (fp64 into a dense buffer) against central differences of its forward,
// at elements spread over the bias, for shapes that sum over batch, heads, queries and keys,
// with softcap, ALiBi, causal, dropout and a packed batch.
TEST(BiasGradient, ReferenceDbiasMatchesFiniteDifferences) {
  struct Variant {
    Shape shape;
    bool softcap, alibi, causal, dropout, varlen;
  };
  const Variant variants[] = {{Shape::Full, true, false, false, false, false},
                              {Shape::Shared, false, true, true, false, false},
                              {Shape::KeyPadding, false, false, false, true, false},
                              {Shape::BroadcastQueries, true, true, false, false, true},
                              {Shape::BroadcastHeads, false, false, true, true, true}};
  for (const Variant& v : variants) {
    Case c;
    c.batch = 2;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.seqlen_q = 9;
    c.seqlen_k = 13;
    c.head_dim = 8;
    c.seed = 7;
    c.bias_dtype = FA_DTYPE_FP32;
    c.dbias = true;
    set_shape(c, v.shape);
    if (v.softcap) c.softcap = 1.5f;
    c.alibi = v.alibi;
    c.causal = v.causal;
    if (v.dropout) c.dropout_p = 0.2f;
    if (v.varlen) {
      c.lens_q = {9, 4};
      c.lens_k = {13, 6};
    }
    Problem pr(c);
    SCOPED_TRACE(c.name());
    const Dense g = reference(pr, false, true);
    ASSERT_EQ(int64_t(g.dbias.size()), pr.bias.numel());
    double checked = 0;
    for (int64_t e = 0; e < pr.bias.numel(); e += 1 + pr.bias.numel() / 23) {
      const double x = pr.bias.get(e), eps = 1e-3;
      pr.bias.set(e, x + eps);
      const double up = pr.bias.get(e), loss_up = reference_loss(pr);
      pr.bias.set(e, x - eps);
      const double down = pr.bias.get(e), loss_down = reference_loss(pr);
      pr.bias.set(e, x);
      const double fd = (loss_up - loss_down) / (up - down);
      EXPECT_NEAR(g.dbias[size_t(e)], fd, 1e-6 + 1e-4 * std::fabs(fd)) << "element " << e;
      checked = std::max(checked, std::fabs(fd));
    }
    EXPECT_GT(checked, 1e-3);  // the elements probed carry a real gradient
  }
}

// ---- dbias's costs and its determinism ---------------------------------------------------------

// Broadcast dbias sums over tasks: the same bits with 1 thread and with several.
TEST(BiasGradient, DeterministicAcrossThreadCounts) {
  Case c = small_case();
  c.heads_q = 8;
  c.bias_dtype = FA_DTYPE_BF16;
  c.bias_full[0] = c.bias_full[1] = false;
  c.dbias = true;
  c.dropout_p = 0.1f;
  Problem a(c), b(c);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  run_forward(a, FA_BACKEND_FLASH);
  run_backward(a, FA_BACKEND_FLASH);
  omp_set_num_threads(std::max(2, saved));
  run_forward(b, FA_BACKEND_FLASH);
  run_backward(b, FA_BACKEND_FLASH);
  omp_set_num_threads(saved);
  EXPECT_TRUE(a.dbias.bytes_equal(b.dbias));
  EXPECT_TRUE(a.dq.bytes_equal(b.dq));
  EXPECT_TRUE(a.dk.bytes_equal(b.dk));
}

// Without dbias the backward's workspace is that of a call without a bias (no partials), and
// the gradients are the same bits with or without dbias asked for.
TEST(BiasGradient, NothingComputedWhenNotAsked) {
  Case c = small_case();
  c.bias_dtype = FA_DTYPE_FP32;
  Case with = c;
  with.dbias = true;
  Problem a(c), b(with), none(small_case());
  const fa_params pa = a.params(FA_BACKEND_FLASH, true), pn = none.params(FA_BACKEND_FLASH, true),
                  pb = b.params(FA_BACKEND_FLASH, true);
  EXPECT_EQ(fa::backward_workspace_size(pa), fa::backward_workspace_size(pn));
  EXPECT_GT(fa::backward_workspace_size(pb), fa::backward_workspace_size(pa));
  for (Problem* pr : {&a, &b}) {
    run_forward(*pr, FA_BACKEND_FLASH);
    run_backward(*pr, FA_BACKEND_FLASH);
  }
  EXPECT_TRUE(a.dq.bytes_equal(b.dq));
  EXPECT_TRUE(a.dk.bytes_equal(b.dk));
  EXPECT_TRUE(a.dv.bytes_equal(b.dv));
  // The forward's workspace does not grow with a bias either.
  const fa_params fwd_a = a.params(FA_BACKEND_FLASH, false),
                  fwd_none = none.params(FA_BACKEND_FLASH, false);
  EXPECT_EQ(fa::forward_workspace_size(fwd_a), fa::forward_workspace_size(fwd_none));
}

// A split-KV forward (num_splits 3) reads each part's bias columns: it agrees with the unsplit
// call within the rule, on both backends.
TEST(BiasSplits, SplitForwardMatchesUnsplit) {
  Case c = small_case();
  c.seqlen_k = 200;
  c.bias_dtype = FA_DTYPE_FP16;
  c.bias_full[2] = false;
  c.bias_empty_rows = true;  // hidden key columns
  c.causal = true;
  Problem pr(c);
  const Dense ref = reference(pr, false, false), naive = reference(pr, true, false);
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    pr.poison_outputs();
    fa_params p = pr.params(backend, false);
    p.num_splits = 3;
    fa::HostWorkspace ws(fa::forward_workspace_size(p));
    fa::forward(p, ws.data(), ws.size());
    const Dense got = outputs(pr, false);
    expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
    expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
  }
}

// ---- tiles a mask hides ------------------------------------------------------------------------

// A document mask (block diagonal, documents of 90 tokens) over a key-padded batch: most 128 x 64
// forward tiles and 64 x 64 backward tiles are hidden entirely, which the flash kernels skip. The
// results match the reference by the rule, and the forward's are the bytes of the same call with
// the mask as an fp32 bias of 0 / -inf (whose tiles are computed, not skipped).
TEST(BiasMaskTiles, HiddenTilesSkippedWithTheSameResults) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.seqlen_q = 300;
  c.seqlen_k = 290;
  c.head_dim = 32;
  c.bias_dtype = FA_DTYPE_BOOL;
  c.bias_full[1] = false;  // (batch, 1, s_q, s_k)
  Case f = c;
  f.bias_dtype = FA_DTYPE_FP32;
  Problem masked(c), biased(f);
  int64_t hidden = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.seqlen_q; ++i)
      for (int64_t j = 0; j < c.seqlen_k; ++j) {
        const bool seen = i / 90 == j / 90 && (b == 0 || j < 150);
        const int64_t e = (b * c.seqlen_q + i) * c.seqlen_k + j;
        masked.bias.set(e, seen ? 1 : 0);
        biased.bias.set(e, seen ? 0.0 : -HUGE_VAL);
        hidden += !seen;
      }
  ASSERT_GT(hidden, c.batch * c.seqlen_q * c.seqlen_k / 2);
  const Dense ref = reference(masked, false, true), naive = reference(masked, true, true);
  for (Problem* pr : {&masked, &biased}) {
    run_forward(*pr, FA_BACKEND_FLASH);
    run_backward(*pr, FA_BACKEND_FLASH);
  }
  const Dense got = outputs(masked, true), twin = outputs(biased, true);
  expect_rules(got, ref, naive);
  EXPECT_TRUE(masked.out.bytes_equal(biased.out));
  EXPECT_TRUE(masked.lse.bytes_equal(biased.lse));
  EXPECT_LE(max_abs_diff(got.dq, twin.dq), 1e-6);
  EXPECT_LE(max_abs_diff(got.dk, twin.dk), 1e-6);
  EXPECT_LE(max_abs_diff(got.dv, twin.dv), 1e-6);
}

// ---- the C++ API -------------------------------------------------------------------------------

// fa::Options carries attn_bias and dbias into fa_params: fa::forward / fa::backward give the bytes
// of the same call made through fa_params directly.
TEST(BiasCppApi, OptionsCarryTheBias) {
  Case c = small_case();
  c.bias_dtype = FA_DTYPE_FP16;
  c.bias_full[0] = false;
  c.dbias = true;
  c.causal = true;
  Problem direct(c), wrapped(c);
  run_forward(direct, FA_BACKEND_AUTO);
  run_backward(direct, FA_BACKEND_AUTO);
  fa::Options o;
  o.causal = true;
  o.attn_bias = wrapped.bias.view();
  o.dbias = wrapped.dbias.view();
  fa::forward(wrapped.q.view(), wrapped.k.view(), wrapped.v.view(), wrapped.out.view(),
              wrapped.lse.view(), o);
  fa::backward(wrapped.q.view(), wrapped.k.view(), wrapped.v.view(), wrapped.out.view(),
               wrapped.lse.view(), wrapped.dout.view(), wrapped.dq.view(), wrapped.dk.view(),
               wrapped.dv.view(), o);
  for (auto [a, b] : {std::pair{&direct.out, &wrapped.out}, std::pair{&direct.lse, &wrapped.lse},
                      std::pair{&direct.dq, &wrapped.dq}, std::pair{&direct.dbias, &wrapped.dbias}})
    EXPECT_TRUE(a->bytes_equal(*b));
  // And a refusal comes back as fa::Error naming the field.
  o.dbias.raw.shape[2] = 1;
  try {
    fa::backward(wrapped.q.view(), wrapped.k.view(), wrapped.v.view(), wrapped.out.view(),
                 wrapped.lse.view(), wrapped.dout.view(), wrapped.dq.view(), wrapped.dk.view(),
                 wrapped.dv.view(), o);
    ADD_FAILURE() << "not refused";
  } catch (const fa::Error& e) {
    EXPECT_EQ(e.status(), FA_ERROR_SHAPE);
    EXPECT_NE(std::string(e.what()).find("dbias.shape[2]=1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fa::test
