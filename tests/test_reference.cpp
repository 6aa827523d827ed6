// The fp64 reference is the oracle of every other test, so its gradients are checked once
// against central finite differences of its own forward, in double throughout.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "api/validate.h"
#include "cpu/reference.h"
#include "support.h"

namespace fa::test {
namespace {

View dense(std::vector<double>& buf, int64_t seqlen, int64_t heads, int64_t d) {
  View v;
  v.data = buf.data();
  v.dtype = DType::F64;
  v.stride_h = d;
  v.stride_s = heads * d;
  v.stride_b = seqlen * heads * d;
  return v;
}

struct FdCase {
  const char* name;
  Case c;
};

class ReferenceGradient : public ::testing::TestWithParam<FdCase> {};

TEST_P(ReferenceGradient, MatchesFiniteDifferences) {
  const Case& c = GetParam().c;
  Problem pr(c);
  const fa_params fp = pr.params(FA_BACKEND_REFERENCE, true);
  Params p = validate_backward(&fp);
  const int64_t b = c.batch, hq = c.heads_q, hk = c.heads_kv, d = c.head_dim;
  std::mt19937_64 rng(99);
  std::normal_distribution<double> nd;
  auto randvec = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = nd(rng);
    return x;
  };
  std::vector<double> q = randvec(b * c.seqlen_q * hq * d), k = randvec(b * c.seqlen_k * hk * d),
                      v = randvec(b * c.seqlen_k * hk * d), g = randvec(b * c.seqlen_q * hq * d);
  std::vector<double> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(size_t(b * hq * c.seqlen_q));
  p.dtype = DType::F64;
  p.q = dense(q, c.seqlen_q, hq, d);
  p.k = dense(k, c.seqlen_k, hk, d);
  p.v = dense(v, c.seqlen_k, hk, d);
  p.dout = dense(g, c.seqlen_q, hq, d);
  p.out = dense(out, c.seqlen_q, hq, d);
  p.dq = dense(dq, c.seqlen_q, hq, d);
  p.dk = dense(dk, c.seqlen_k, hk, d);
  p.dv = dense(dv, c.seqlen_k, hk, d);
  p.lse = {lse.data(), hq * c.seqlen_q, c.seqlen_q, 1};
  std::vector<unsigned char> wf(cpu::reference_forward_workspace(p, 1));
  std::vector<unsigned char> wb(cpu::reference_backward_workspace(p, 1));

  auto loss = [&] {  // L = sum(out * g)
    cpu::reference_forward<double>(p, wf.data(), wf.size(), 1);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * g[i];
    return s;
  };
  cpu::reference_backward<double>(p, wb.data(), wb.size(), 1);
  const double h = 1e-5;
  int checked = 0;
  for (auto [x, grad, name] : {std::tuple{&q, &dq, "dq"}, std::tuple{&k, &dk, "dk"},
                               std::tuple{&v, &dv, "dv"}}) {
    for (size_t i = 0; i < x->size(); ++i) {
      const double x0 = (*x)[i];
      (*x)[i] = x0 + h;
      const double lp = loss();
      (*x)[i] = x0 - h;
      const double lm = loss();
      (*x)[i] = x0;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR((*grad)[i], fd, 1e-7 * (1 + std::fabs(fd))) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(q.size() + k.size() + v.size()));
}

Case fd_case(bool causal, int wl, int wr, float softcap, bool alibi, float dropout, int64_t hkv) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.heads_kv = hkv;
  c.seqlen_q = 5;
  c.seqlen_k = 7;
  c.head_dim = 4;
  c.causal = causal;
  c.window_left = wl;
  c.window_right = wr;
  c.softcap = softcap;
  c.alibi = alibi;
  c.dropout_p = dropout;
  c.seed = 3;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, ReferenceGradient,
    ::testing::Values(FdCase{"plain", fd_case(false, -1, -1, 0.f, false, 0.f, 2)},
                      FdCase{"causal_softcap_alibi_gqa", fd_case(true, -1, -1, 1.5f, true, 0.f, 1)},
                      FdCase{"window_dropout", fd_case(false, 2, 1, 0.f, false, 0.3f, 1)},
                      FdCase{"everything", fd_case(true, 3, -1, 2.f, true, 0.25f, 1)}),
    [](const ::testing::TestParamInfo<FdCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fa::test
