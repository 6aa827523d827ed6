// CPU flash backend vs the fp64 reference, forward and backward, over the feature grid.
//
// Accuracy rule (FlashAttention's): max |flash - ref| <= 2 x max |naive - ref| + 1e-5 for out and
// lse, and 3 x ... + 1e-4 for dq, dk, dv, where `naive` is the same reference computed in fp32 -
// the precision the CPU flash backend accumulates in. Outputs are poisoned (NaN) before every
// run, inputs are fresh random values, lengths are odd and unequal.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "api/validate.h"
#include "cpu/backend.h"
#include "support.h"

namespace fa::test {
namespace {

// The flash kernels of one instruction set on the problem, forward then backward: the internal
// entry points (the public ones run cpu::best_isa()), with the outputs poisoned first.
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

enum class Feature { None, Causal, Window, Softcap, Alibi };

std::vector<Case> grid() {
  const fa_dtype dtypes[] = {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16};
  const int64_t dims[] = {8, 32, 40, 64, 80, 128, 256};
  const Feature features[] = {Feature::None, Feature::Causal, Feature::Window, Feature::Softcap,
                              Feature::Alibi};
  const int64_t ratios[] = {1, 2, 8};
  // (seqlen_q, seqlen_k): 1, odd, tile +- 1, and both orders of unequal lengths.
  const int64_t lens[][2] = {{1, 1},   {17, 129}, {127, 128}, {128, 127}, {129, 17},
                             {1, 300}, {300, 1},  {1000, 200}, {200, 1000}};
  std::vector<Case> cases;
  uint64_t n = 0;
  for (fa_dtype dt : dtypes)
    for (int64_t d : dims)
      for (Feature f : features) {
        Case c;
        c.seed = ++n;
        c.dtype = dt;
        c.head_dim = d;
        c.heads_kv = 1 + int64_t(n % 2);
        c.heads_q = c.heads_kv * ratios[n % 3];
        const auto* len = lens[(n * 7) % 9];
        c.seqlen_q = len[0];
        c.seqlen_k = len[1];
        // Keep the fp64 oracle affordable: long pairs get one kv head, and large dims shorter
        // sequences (still odd, still unequal).
        if (c.seqlen_q * c.seqlen_k > 100000) {
          c.heads_q /= c.heads_kv;
          c.heads_kv = 1;
          if (d > 80) {
            c.seqlen_q = std::min<int64_t>(c.seqlen_q, 257);
            c.seqlen_k = std::min<int64_t>(c.seqlen_k, 257);
          }
        }
        c.batch = 2;
        c.dropout_p = (n % 2) ? 0.17f : 0.f;
        c.strided = (n % 4) == 1;
        switch (f) {
          case Feature::None: break;
          case Feature::Causal: c.causal = true; break;
          case Feature::Window: c.window_left = 37; c.window_right = int32_t(n % 3) * 5; break;
          case Feature::Softcap: c.softcap = 2.5f; break;
          case Feature::Alibi: c.alibi = true; break;
        }
        // Every fifth case is a packed variable-length batch, with empty sequences.
        if (n % 5 == 0) {
          c.lens_q = {int32_t(c.seqlen_q), 0, 13, int32_t(c.seqlen_k % 50 + 1)};
          c.lens_k = {int32_t(c.seqlen_k), 9, 0, int32_t(c.seqlen_q % 70 + 1)};
        }
        cases.push_back(c);
      }
  return cases;
}

class FlashCpu : public ::testing::TestWithParam<Case> {};

// Through the public API (the machine's best instruction set), then with every other instruction
// set this build has and this CPU runs (cpu::available_isas), each against the same oracle.
TEST_P(FlashCpu, ForwardAndBackwardMatchReference) {
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
  }
}

// The run-time choice: generic is always there and last, the best set first; every set listed
// runs here (the grid above runs each), and the library reports the one it uses.
TEST(FlashCpuIsa, BestFirstGenericLast) {
  const std::vector<cpu::Isa>& isas = cpu::available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), cpu::Isa::Generic);
  EXPECT_EQ(isas.front(), cpu::best_isa());
  EXPECT_STREQ(cpu::isa_name(), cpu::isa_name(cpu::best_isa()));
  std::string names;
  for (cpu::Isa isa : isas) names += std::string(names.empty() ? "" : " ") + cpu::isa_name(isa);
  RecordProperty("isas", names);
}

INSTANTIATE_TEST_SUITE_P(Grid, FlashCpu, ::testing::ValuesIn(grid()), CaseTestName());

// ---- properties beyond the grid ------------------------------------------------------------

Case base_case() {
  Case c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 77;
  c.seqlen_k = 133;
  c.head_dim = 40;
  return c;
}

// Rows with no visible key: out = 0 and lse = -inf exactly, no NaN, and zero gradients.
TEST(FlashCpuProperties, FullyMaskedRowsGiveZeroAndNegInf) {
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Case c = base_case();
    c.seqlen_q = 150;  // causal with seqlen_q > seqlen_k: the first 17 rows see no key
    c.causal = true;
    Problem pr(c);
    run_forward(pr, backend);
    run_backward(pr, backend);
    const int64_t empty = c.seqlen_q - c.seqlen_k;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t h = 0; h < c.heads_q; ++h) {
          const double lse = pr.lse.get((b * c.heads_q + h) * c.seqlen_q + i);
          ASSERT_FALSE(std::isnan(lse));
          if (i < empty) {
            ASSERT_TRUE(std::isinf(lse) && lse < 0) << "row " << i;
          } else {
            ASSERT_TRUE(std::isfinite(lse)) << "row " << i;
          }
          for (int64_t x = 0; x < c.head_dim; ++x) {
            const int64_t flat = ((b * c.seqlen_q + i) * c.heads_q + h) * c.head_dim + x;
            ASSERT_FALSE(std::isnan(pr.out.get(flat)));
            ASSERT_FALSE(std::isnan(pr.dq.get(flat)));
            if (i < empty) {
              ASSERT_EQ(pr.out.get(flat), 0.0);
              ASSERT_EQ(pr.dq.get(flat), 0.0);
            }
          }
        }
  }
}

// A window that leaves middle rows empty (window_left = window_right = 0 and seqlen_k < seqlen_q
// shifts the diagonal off the key range for the first rows).
TEST(FlashCpuProperties, EmptyWindowRowsHaveNoNaN) {
  Case c = base_case();
  c.seqlen_q = 100;
  c.seqlen_k = 30;
  c.window_left = 0;
  c.window_right = 0;
  Problem pr(c);
  run_forward(pr, FA_BACKEND_FLASH);
  run_backward(pr, FA_BACKEND_FLASH);
  const Dense got = outputs(pr, true), ref = reference(pr, false, true);
  EXPECT_LE(max_abs_diff(got.out, ref.out), 1e-5);
  EXPECT_LE(max_abs_diff(got.lse, ref.lse), 1e-5);
  EXPECT_LE(max_abs_diff(got.dq, ref.dq), 1e-4);
  EXPECT_LE(max_abs_diff(got.dk, ref.dk), 1e-4);
}

// |scores| up to ~1e4: the online softmax must not overflow or produce NaN.
TEST(FlashCpuProperties, HugeScoresStayFinite) {
  for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16}) {
    Case c = base_case();
    c.dtype = dt;
    c.head_dim = 64;
    c.input_scale = 100.0;  // q·k ~ 1e4 * sqrt(64), times 1/8: |score| ~ 1e4
    Problem pr(c);
    run_forward(pr, FA_BACKEND_FLASH);
    run_backward(pr, FA_BACKEND_FLASH);
    const Dense got = outputs(pr, true), ref = reference(pr, false, true),
                naive = reference(pr, true, true);
    for (const auto* v : {&got.out, &got.lse, &got.dq, &got.dk, &got.dv})
      for (double x : *v) ASSERT_TRUE(std::isfinite(x));
    expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
    // lse ~ 1e4: compare relative to its size (fp32 spacing at 1e4 is ~1e-3).
    expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5 * max_abs(ref.lse));
  }
}

// The keep-mask the kernels apply, observed through the public API: with q = 0 every visible key
// has P = 1/seqlen_k, and with v = identity the output row i is keep_i / (seqlen_k (1 - p)).
TEST(FlashCpuProperties, DropoutKeepRateAndMaskMatchReferenceBitForBit) {
  Case c;
  c.batch = 1;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.seqlen_q = 1000;
  c.seqlen_k = 256;
  c.head_dim = 256;
  c.dropout_p = 0.17f;
  Problem flash(c), ref(c);
  for (Problem* pr : {&flash, &ref}) {
    for (int64_t i = 0; i < pr->q.numel(); ++i) pr->q.set(i, 0.0);
    for (int64_t i = 0; i < pr->v.numel(); ++i) pr->v.set(i, (i / c.head_dim) == (i % c.head_dim));
  }
  run_forward(flash, FA_BACKEND_FLASH);
  run_forward(ref, FA_BACKEND_REFERENCE);
  int64_t kept = 0, n = 0, mismatched = 0;
  for (int64_t i = 0; i < flash.out.numel(); ++i, ++n) {
    const bool kf = flash.out.get(i) != 0.0, kr = ref.out.get(i) != 0.0;
    kept += kf;
    mismatched += kf != kr;
  }
  EXPECT_EQ(mismatched, 0);
  EXPECT_NEAR(double(kept) / double(n), 1.0 - c.dropout_p, 0.01);
  // Kept entries are scaled by 1/(1-p): each equals 1 / (seqlen_k (1 - p)).
  for (int64_t i = 0; i < flash.out.numel(); ++i) {
    if (flash.out.get(i) != 0.0) {
      ASSERT_NEAR(flash.out.get(i), 1.0 / (c.seqlen_k * (1.0 - c.dropout_p)), 1e-6);
    }
  }
}

// Same inputs, any thread count: bit-identical outputs and gradients (no order-dependent sums).
TEST(FlashCpuProperties, DeterministicAcrossRunsAndThreadCounts) {
  Case c = base_case();
  c.heads_q = 8;
  c.dropout_p = 0.1f;
  c.causal = true;
  Problem a(c), b(c);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  run_forward(a, FA_BACKEND_FLASH);
  run_backward(a, FA_BACKEND_FLASH);
  omp_set_num_threads(std::max(2, saved));
  run_forward(b, FA_BACKEND_FLASH);
  run_backward(b, FA_BACKEND_FLASH);
  omp_set_num_threads(saved);
  for (auto [x, y] : {std::pair{&a.out, &b.out}, std::pair{&a.lse, &b.lse}, std::pair{&a.dq, &b.dq},
                      std::pair{&a.dk, &b.dk}, std::pair{&a.dv, &b.dv}})
    EXPECT_TRUE(x->bytes_equal(*y));
}

// A workspace smaller than the query's answer (but >= one thread's) still works: fewer threads.
TEST(FlashCpuProperties, SmallerWorkspaceUsesFewerThreads) {
  Case c = base_case();
  Problem a(c), b(c);
  run_forward(a, FA_BACKEND_FLASH);
  const fa_params p = b.params(FA_BACKEND_FLASH);
  const size_t full = fa::forward_workspace_size(p);
  const size_t one = full / size_t(omp_get_max_threads()) + 64;
  fa::HostWorkspace ws(one);
  ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
  EXPECT_TRUE(a.out.bytes_equal(b.out));
}

}  // namespace
}  // namespace fa::test
