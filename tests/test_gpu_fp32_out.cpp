// fp32 outputs with fp16 / bf16 inputs on CUDA (the unrounded results ring attention's block calls
// take): an fp32 out of the forward, fp32 dq, dk, dv of the backward, written by cuda-sm80's
// epilogues (a run-time branch on the output's dtype). Each case runs twice on the same inputs
// through cuda-sm80, with 16-bit outputs and with fp32 ones: the fp32 results meet the rule with
// the 16-bit call's allowance (2x / 3x its naive error against the fp64 reference), and the
// 16-bit results are the fp32 ones rounded, bit for bit (dq: in the deterministic mode, whose
// sums do not depend on the order of atomics). Not "no further from the reference than the
// 16-bit results": rounding can move an element towards the reference (the CPU's fp16 dk: 1.58e-3
// fp32 against 1.34e-3 rounded, DtypeRoles.BackwardWithFp32Gradients). The other CUDA families
// refuse fp32 outputs by name. Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_support.h"

namespace fa::test {
namespace {

// x rounded to dt (fp16 / bf16) as the kernels round (to nearest even).
std::vector<double> round_to(fa_dtype dt, const std::vector<double>& x) {
  HostTensor t(dt, {int64_t(x.size())});
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    t.set(int64_t(i), x[i]);
    r[i] = t.get(int64_t(i));
  }
  return r;
}

// Both calls of a case run cuda-sm80 (on Hopper cuda-sm90 would take the 16-bit one).
Tuning sm80_only() {
  Tuning t;
  t.sm90_fwd = false;
  t.sm90_bwd = 0;
  return t;
}

// fp16 / bf16, the benchmark head dims and one that is padded (40), causal, GQA, a packed batch
// with an empty sequence, softcap, dropout: the epilogues' row and column bounds.
std::vector<Case> fp32_out_cases() {
  std::vector<Case> cases;
  uint64_t n = 0;
  for (fa_dtype dt : {FA_DTYPE_FP16, FA_DTYPE_BF16})
    for (int64_t d : {64, 128, 40, 256}) {
      Case c;
      c.seed = 900 + ++n;
      c.dtype = dt;
      c.head_dim = d;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = n % 2 ? 1 : 4;
      c.seqlen_q = 133;
      c.seqlen_k = 301;
      c.pad = 8;
      c.strided = n % 3 == 0;
      c.causal = n % 2 == 0;
      c.deterministic = n % 4 < 2;
      if (n == 3) c.softcap = 30.f;
      if (n == 6) c.dropout_p = 0.17f;
      if (n == 4) {
        c.lens_q = {133, 0, 77};
        c.lens_k = {301, 5, 130};
        c.batch = 3;
      }
      cases.push_back(c);
    }
  return cases;
}

class GpuFp32Out : public ::testing::TestWithParam<Case> {};

TEST_P(GpuFp32Out, ForwardOutMatchesReferenceRoundedOnce) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem p16(GetParam());
  Case c32 = GetParam();
  c32.out_dtype = FA_DTYPE_FP32;
  Problem p32(c32);
  DeviceProblem d16(p16, FA_BACKEND_AUTO), d32(p32, FA_BACKEND_AUTO);
  EXPECT_EQ(family_of(d32.p, Pass::Forward, Tuning{}), "cuda-sm80");  // the default tuning too
  const Tuning sm80 = sm80_only();
  run_pass(d16.p, false, &sm80);
  if (HasFatalFailure()) return;
  run_pass(d32.p, false, &sm80);
  if (HasFatalFailure()) return;
  d16.out.copy_to(p16.out);
  d32.out.copy_to(p32.out);
  d32.lse.copy_to(p32.lse);
  const Dense r16 = outputs(p16, false), r32 = outputs(p32, false);
  const Dense ref = reference(p32, false, false);
  const Dense naive16 = reference(p16, true, false, /*round_p=*/true);
  expect_rule("out (fp32)", r32.out, ref.out, naive16.out, 2, 1e-5);
  expect_rule("lse", r32.lse, ref.lse, naive16.lse, 2, 1e-5);
  EXPECT_TRUE(round_to(GetParam().dtype, r32.out) == r16.out)
      << "the 16-bit out is not the fp32 out rounded";
#endif
}

TEST_P(GpuFp32Out, BackwardGradientsMatchReferenceRoundedOnce) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem p16(GetParam()), p32(GetParam());
  for (HostTensor* t : {&p32.dq, &p32.dk, &p32.dv}) *t = HostTensor(FA_DTYPE_FP32, t->shape());
  DeviceProblem d16(p16, FA_BACKEND_AUTO), d32(p32, FA_BACKEND_AUTO);
  if (backward_unavailable(d32.p, &why)) GTEST_SKIP() << why;
  EXPECT_EQ(family_of(d32.p, Pass::Backward, Tuning{}), "cuda-sm80");
  // Both backwards read the same forward (the 16-bit call's out and lse).
  const Tuning sm80 = sm80_only();
  run_pass(d16.p, false, &sm80);
  if (HasFatalFailure()) return;
  d16.out.copy_to(p16.out);
  d16.lse.copy_to(p16.lse);
  DeviceTensor out(p16.out, false), lse(p16.lse, false);
  d32.p.out = out.view();
  d32.p.lse = lse.view();
  p32.out = p16.out;
  p32.lse = p16.lse;
  // With the split tail forced (every tile's steps over several blocks: tail_part_epilogue's
  // stores) and without it (store_dk_dv's).
  Tuning tail = sm80, off = sm80;
  tail.sm80_bwd_tail_min_steps = 1;
  off.sm80_bwd_tail_min_steps = 0;
  for (const Tuning* tuning : {&off, &tail}) {
    SCOPED_TRACE(tuning == &tail ? "split tail" : "no split tail");
    run_pass(d16.p, true, tuning);
    if (HasFatalFailure()) return;
    run_pass(d32.p, true, tuning);
    if (HasFatalFailure()) return;
    for (auto [dev, host] : {std::pair{&d16, &p16}, std::pair{&d32, &p32}}) {
      dev->dq.copy_to(host->dq);
      dev->dk.copy_to(host->dk);
      dev->dv.copy_to(host->dv);
    }
    const Dense r16 = outputs(p16, true), r32 = outputs(p32, true);
    const Dense ref = reference(p32, false, true);
    const Dense naive16 = reference(p16, true, true, /*round_p=*/true);
    const std::pair<const char*, std::vector<double> Dense::*> grads[] = {
        {"dq", &Dense::dq}, {"dk", &Dense::dk}, {"dv", &Dense::dv}};
    for (const auto& [name, g] : grads) {
      expect_rule(name, r32.*g, ref.*g, naive16.*g, 3, 1e-4);
      if (g != &Dense::dq || GetParam().deterministic) {
        EXPECT_TRUE(round_to(GetParam().dtype, r32.*g) == r16.*g)
            << "the 16-bit " << name << " is not the fp32 " << name << " rounded";
      }
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuFp32Out, ::testing::ValuesIn(fp32_out_cases()),
                         CaseTestName());

// The families that do not write fp32 outputs refuse them by name: cuda-vanilla (asked for),
// and a backward with fp32 dk but 16-bit dv (one epilogue branch stores both).
TEST(GpuFp32OutRefusals, NameTheArgument) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.head_dim = 64;
  c.seqlen_q = c.seqlen_k = 33;
  c.out_dtype = FA_DTYPE_FP32;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_VANILLA);
  size_t bytes = 0;
  EXPECT_EQ(fa_forward_workspace_size(&dev.p, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("cuda-vanilla: out.dtype=fp32"), std::string::npos)
      << fa_last_error();
  Case g = c;
  g.out_dtype = -1;
  Problem pg(g);
  pg.dk = HostTensor(FA_DTYPE_FP32, pg.dk.shape());
  DeviceProblem dg(pg, FA_BACKEND_AUTO);
  if (backward_unavailable(dg.p, &why) && why.find("dk.dtype") == std::string::npos)
    GTEST_SKIP() << why;
  EXPECT_EQ(fa_backward_workspace_size(&dg.p, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("dk.dtype and dv.dtype must be equal"),
            std::string::npos)
      << fa_last_error();
  // The CUDA backward reads out and dout in q's dtype.
  Problem po(c);
  DeviceProblem dd(po, FA_BACKEND_AUTO);
  EXPECT_EQ(fa_backward_workspace_size(&dd.p, &bytes), FA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(fa_last_error()).find("out.dtype=fp32 with q.dtype=bf16 in fa_backward"),
            std::string::npos)
      << fa_last_error();
#endif
}

}  // namespace
}  // namespace fa::test
