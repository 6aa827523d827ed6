// FP8 e4m3 inputs (fa_params 0.5, issue 30) on the CPU backends: the oracle and the seam the
// Hopper fp8 kernels will be checked against.
//
// - the grid: the CPU flash forward on e4m3 q, k, v (descales on or off, out bf16 or fp16)
//   against the fp64 reference on the same dequantized inputs by FlashAttention's rule (the
//   same-precision naive baseline: fp32 accumulation, out rounded to out's dtype), over causal,
//   window, softcap, ALiBi, GQA, packed batches, strides, paged and dense KV caches, appended
//   keys and split-KV, every ISA this CPU runs; the naive fp8 baseline (P rounded to e4m3 as the
//   GPU's cvt.rn.satfinite does) is reported beside it;
// - the descales' meaning without the reference: fp8 with descales equals the fp32 computation on
//   decode(x) * descale (per (batch, kv head), the query heads of a kv head sharing q's), a
//   broadcast (stride 0) descale equals the full one, a power-of-two descale is exact;
// - the error table of issue 30 on Gaussian inputs with outlier channels, against the fp64
//   reference on the unquantised inputs: naive fp8, our fp8 path (P in fp32 here), bf16, and
//   both fp8 paths with incoherent processing (Hadamard-sign rotation of q and k, which keeps
//   Q·Kᵀ: tested on its own);
// - fa::Options carries the descales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "api/validate.h"
#include "core/fp8.h"
#include "cpu/backend.h"
#include "cpu/fp8_quant.h"
#include "support.h"

namespace fa::test {
namespace {

// The flash forward of one instruction set (the public entry points run cpu::best_isa()).
void run_flash_isa(Problem& pr, cpu::Isa isa) {
  pr.poison_outputs();
  const fa_params fwd = pr.params(FA_BACKEND_FLASH, false);
  const Params pf = validate_forward(&fwd);
  std::vector<unsigned char> ws(cpu::forward_workspace(pf, cpu::Impl::Flash));
  cpu::forward(pf, cpu::Impl::Flash, ws.data(), ws.size(), isa);
}

enum class Feature { None, Causal, Window, Softcap, Alibi, Varlen, Strided, Paged, Cache, Split };

const char* feature_name(Feature f) {
  switch (f) {
    case Feature::None: return "plain";
    case Feature::Causal: return "causal";
    case Feature::Window: return "window";
    case Feature::Softcap: return "softcap";
    case Feature::Alibi: return "alibi";
    case Feature::Varlen: return "varlen";
    case Feature::Strided: return "strided";
    case Feature::Paged: return "paged";
    case Feature::Cache: return "cache";
    case Feature::Split: return "split";
  }
  return "?";
}

struct Fp8Case {
  Feature feature;
  fa_dtype out;
  bool descale;
  int64_t head_dim;
  int64_t heads_q, heads_kv;
  int num_splits = 0;
};

void PrintTo(const Fp8Case& f, std::ostream* os) {
  *os << feature_name(f.feature) << (f.out == FA_DTYPE_BF16 ? " bf16" : " fp16")
      << (f.descale ? " descale" : "") << " d" << f.head_dim << " h" << f.heads_q << "x"
      << f.heads_kv;
}

Case make_case(const Fp8Case& f, uint64_t seed) {
  Case c;
  c.dtype = FA_DTYPE_FP8_E4M3;
  c.out_dtype = f.out;
  c.descale = f.descale;
  c.batch = 2;
  c.heads_q = f.heads_q;
  c.heads_kv = f.heads_kv;
  c.seqlen_q = 37;
  c.seqlen_k = 70;
  c.head_dim = f.head_dim;
  c.input_scale = 2.0;  // e4m3 values up to ~10: its normal range, a few subnormals
  c.seed = seed;
  switch (f.feature) {
    case Feature::None: break;
    case Feature::Causal: c.causal = true; break;
    case Feature::Window: c.window_left = 9; c.window_right = 4; break;
    case Feature::Softcap: c.softcap = 5.f; break;
    case Feature::Alibi: c.alibi = true; break;
    case Feature::Varlen: c.lens_q = {13, 1, 30}; c.lens_k = {40, 17, 6}; c.causal = true; break;
    case Feature::Strided: c.strided = true; break;
    case Feature::Paged: c.page_size = 16; c.cache_lens = {70, 33}; break;
    case Feature::Cache: c.cache_lens = {5, 64}; c.causal = true; break;
    case Feature::Split: break;
  }
  return c;
}

class Fp8Grid : public testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Grid, FlashMatchesReference) {
  const Fp8Case& f = GetParam();
  const Case c = make_case(f, 3 + uint64_t(f.feature));
  Problem pr(c);
  const Dense ref = reference(pr, false, false);
  const Dense naive = reference(pr, true, false);              // fp32, out rounded
  const Dense naive_fp8 = reference(pr, true, false, true);    // and P rounded to e4m3
  for (cpu::Isa isa : cpu::available_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    if (f.num_splits > 0) {
      fa_params p = pr.params(FA_BACKEND_FLASH, false);
      p.num_splits = f.num_splits;
      pr.poison_outputs();
      const Params pf = validate_forward(&p);
      std::vector<unsigned char> ws(cpu::forward_workspace(pf, cpu::Impl::Flash));
      cpu::forward(pf, cpu::Impl::Flash, ws.data(), ws.size(), isa);
    } else {
      run_flash_isa(pr, isa);
    }
    const Dense got = outputs(pr, false);
    expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
    expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
    // The GPU's naive fp8 baseline rounds P to e4m3 as well: coarser than ours here.
    EXPECT_LE(max_abs_diff(got.out, ref.out), max_abs_diff(naive_fp8.out, ref.out) + 1e-5);
  }
  std::printf("[ fp8 ] %-8s out %s d %-3lld: flash %.3g, naive fp32 %.3g, naive fp8 (P e4m3) %.3g\n",
              feature_name(f.feature), f.out == FA_DTYPE_BF16 ? "bf16" : "fp16",
              static_cast<long long>(f.head_dim), max_abs_diff(outputs(pr, false).out, ref.out),
              max_abs_diff(naive.out, ref.out), max_abs_diff(naive_fp8.out, ref.out));
}

std::vector<Fp8Case> grid() {
  std::vector<Fp8Case> cases;
  const Feature features[] = {Feature::None,  Feature::Causal,  Feature::Window,
                              Feature::Softcap, Feature::Alibi, Feature::Varlen,
                              Feature::Strided, Feature::Paged, Feature::Cache};
  int i = 0;
  for (Feature feat : features) {
    const bool bf16 = i % 2 == 0;
    cases.push_back({feat, bf16 ? FA_DTYPE_BF16 : FA_DTYPE_FP16, i % 3 != 2,
                     i % 2 ? 64 : 40, 4, i % 3 == 0 ? 1 : 2});
    ++i;
  }
  cases.push_back({Feature::None, FA_DTYPE_BF16, true, 128, 8, 2});
  cases.push_back({Feature::None, FA_DTYPE_FP16, true, 256, 2, 2});
  cases.push_back({Feature::Causal, FA_DTYPE_BF16, true, 7, 3, 1});  // head_dim not a multiple of 8
  cases.push_back({Feature::Split, FA_DTYPE_BF16, true, 64, 4, 2, 3});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8Grid, testing::ValuesIn(grid()),
                         [](const testing::TestParamInfo<Fp8Case>& info) {
                           const Fp8Case& f = info.param;
                           return std::to_string(info.index) + "_" + feature_name(f.feature) +
                                  (f.out == FA_DTYPE_BF16 ? "_bf16" : "_fp16") +
                                  (f.descale ? "_descale" : "") + "_d" +
                                  std::to_string(f.head_dim) + "_h" + std::to_string(f.heads_q) +
                                  "x" + std::to_string(f.heads_kv);
                         });

// Element (b, s, h, c) of a contiguous (batch, seq, heads, d) tensor.
int64_t at4(const HostTensor& t, int64_t b, int64_t s, int64_t h, int64_t c) {
  const auto& sh = t.shape();
  return ((b * sh[1] + s) * sh[2] + h) * sh[3] + c;
}

// fp32 tensors holding decode(x) * descale(b, h / group): what the descales mean.
HostTensor dequantized(const HostTensor& x, const HostTensor& descale, int64_t group) {
  HostTensor r(FA_DTYPE_FP32, x.shape());
  const auto& sh = x.shape();
  for (int64_t b = 0; b < sh[0]; ++b)
    for (int64_t s = 0; s < sh[1]; ++s)
      for (int64_t h = 0; h < sh[2]; ++h)
        for (int64_t c = 0; c < sh[3]; ++c) {
          const int64_t i = at4(x, b, s, h, c);
          r.set(i, x.get(i) * descale.get(b * descale.shape()[1] + h / group));
        }
  return r;
}

// With descales, an fp8 call computes the attention of the dequantized tensors: the fp32 flash
// forward on decode(x) * descale agrees within out's bf16 rounding (GQA: q's descale is its kv
// head's).
TEST(Fp8, DescalesDequantizePerBatchAndKvHead) {
  Case c;
  c.dtype = FA_DTYPE_FP8_E4M3;
  c.out_dtype = FA_DTYPE_BF16;
  c.descale = true;
  c.batch = 2;
  c.heads_q = 6;
  c.heads_kv = 2;
  c.seqlen_q = 19;
  c.seqlen_k = 45;
  c.head_dim = 32;
  c.causal = true;
  Problem pr(c);
  run_forward(pr, FA_BACKEND_FLASH);
  Case c32 = c;
  c32.dtype = FA_DTYPE_FP32;
  c32.out_dtype = -1;
  c32.descale = false;
  Problem p32(c32);
  p32.q = dequantized(pr.q, pr.q_descale, c.heads_q / c.heads_kv);
  p32.k = dequantized(pr.k, pr.k_descale, 1);
  p32.v = dequantized(pr.v, pr.v_descale, 1);
  run_forward(p32, FA_BACKEND_FLASH);
  const Dense a = outputs(pr, false), b = outputs(p32, false);
  double worst = 0;
  for (size_t i = 0; i < a.out.size(); ++i)
    worst = std::max(worst, std::fabs(a.out[i] - b.out[i]) - std::fabs(b.out[i]) * 0x1p-8);
  EXPECT_LE(worst, 1e-5) << "out differs from the dequantized fp32 result past bf16's rounding";
  EXPECT_LE(max_abs_diff(a.lse, b.lse), 1e-4);
}

// Descales of 1 (and no descales) are the same call; a power-of-two q / v descale is exact
// (scales the logits / the output, bit for bit on both backends); a stride-0 broadcast descale
// equals the full tensor of its values.
TEST(Fp8, DescaleIdentitiesAndBroadcast) {
  Case c;
  c.dtype = FA_DTYPE_FP8_E4M3;
  c.out_dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 21;
  c.seqlen_k = 33;
  c.head_dim = 16;
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    SCOPED_TRACE(backend == FA_BACKEND_FLASH ? "flash" : "reference");
    Problem plain(c);
    run_forward(plain, backend);
    HostTensor ones(FA_DTYPE_FP32, {2, 2}), twos(FA_DTYPE_FP32, {2, 2});
    for (int64_t i = 0; i < 4; ++i) {
      ones.set(i, 1.0);
      twos.set(i, 2.0);
    }
    Problem same(c);
    fa_params p = same.params(backend, false);
    p.q_descale = p.k_descale = p.v_descale = ones.view().raw;
    fa::HostWorkspace ws(fa::forward_workspace_size(p));
    fa::forward(p, ws.data(), ws.size());
    EXPECT_TRUE(plain.out.bytes_equal(same.out));
    EXPECT_TRUE(plain.lse.bytes_equal(same.lse));

    // v_descale 2: out doubles exactly, the LSE is unchanged.
    Problem vx2(c);
    p = vx2.params(backend, false);
    p.v_descale = twos.view().raw;
    fa::forward(p, ws.data(), ws.size());
    for (int64_t i = 0; i < plain.out.numel(); ++i)
      ASSERT_EQ(vx2.out.get(i), 2 * plain.out.get(i)) << i;
    EXPECT_TRUE(plain.lse.bytes_equal(vx2.lse));

    // q_descale 2 equals softmax_scale doubled.
    Problem qx2(c), scaled(c);
    p = qx2.params(backend, false);
    p.q_descale = twos.view().raw;
    fa::forward(p, ws.data(), ws.size());
    p = scaled.params(backend, false);
    p.softmax_scale = 2.f / std::sqrt(16.f);
    fa::forward(p, ws.data(), ws.size());
    EXPECT_TRUE(qx2.out.bytes_equal(scaled.out));
    EXPECT_TRUE(qx2.lse.bytes_equal(scaled.lse));

    // A (batch, heads_kv) descale broadcast with strides 0 equals the full one.
    HostTensor one(FA_DTYPE_FP32, {1}), full(FA_DTYPE_FP32, {2, 2});
    one.set(0, 0.625);
    for (int64_t i = 0; i < 4; ++i) full.set(i, 0.625);
    fa_tensor bcast = one.view().raw;
    bcast.rank = 2;
    bcast.shape[0] = 2;
    bcast.shape[1] = 2;
    bcast.stride[0] = bcast.stride[1] = 0;
    Problem a(c), b(c);
    p = a.params(backend, false);
    p.k_descale = bcast;
    fa::forward(p, ws.data(), ws.size());
    p = b.params(backend, false);
    p.k_descale = full.view().raw;
    fa::forward(p, ws.data(), ws.size());
    EXPECT_TRUE(a.out.bytes_equal(b.out));
    EXPECT_TRUE(a.lse.bytes_equal(b.lse));
  }
}

// The appended keys of a KV-cache call are copied into an fp8 cache bit for bit.
TEST(Fp8, AppendedKeysAreCopiedExactly) {
  Case c;
  c.dtype = FA_DTYPE_FP8_E4M3;
  c.out_dtype = FA_DTYPE_FP16;
  c.descale = true;
  c.batch = 2;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.seqlen_q = 3;
  c.seqlen_k = 12;
  c.head_dim = 8;
  c.cache_lens = {4, 7};
  Problem pr(c);
  HostTensor k_new(FA_DTYPE_FP8_E4M3, {2, 3, 1, 8}), v_new(FA_DTYPE_FP8_E4M3, {2, 3, 1, 8});
  std::mt19937_64 rng(5);
  k_new.fill_normal(rng, 3.0);
  v_new.fill_normal(rng, 3.0);
  fa_params p = pr.params(FA_BACKEND_FLASH, false);
  p.k_new = k_new.view().raw;
  p.v_new = v_new.view().raw;
  fa::HostWorkspace ws(fa::forward_workspace_size(p));
  fa::forward(p, ws.data(), ws.size());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t x = 0; x < 8; ++x) {
        const int64_t row = int64_t(c.cache_lens[size_t(b)]) + j;
        EXPECT_EQ(pr.k.get((b * 12 + row) * 8 + x), k_new.get((b * 3 + j) * 8 + x));
        EXPECT_EQ(pr.v.get((b * 12 + row) * 8 + x), v_new.get((b * 3 + j) * 8 + x));
      }
  for (int64_t i = 0; i < pr.out.numel(); ++i) EXPECT_TRUE(std::isfinite(pr.out.get(i))) << i;
}

TEST(Fp8, OptionsCarryTheDescales) {
  HostTensor q(FA_DTYPE_FP32, {2, 3}), k(FA_DTYPE_FP32, {2, 3}), v(FA_DTYPE_FP32, {2, 3});
  fa::Options o;
  o.q_descale = q.view();
  o.k_descale = k.view();
  o.v_descale = v.view();
  const fa::Tensor none;
  const fa_params p = fa::make_params(none, none, none, none, none, o);
  EXPECT_EQ(p.q_descale.data, q.data());
  EXPECT_EQ(p.k_descale.data, k.data());
  EXPECT_EQ(p.v_descale.data, v.data());
}

// ---- incoherent processing ---------------------------------------------------------------------

// The Hadamard-sign rotation is orthogonal: the same signs on a query and a key keep their dot
// product and norms (fp32 rounding aside), and an outlier channel is spread over all channels.
TEST(Fp8, HadamardSignRotationKeepsDotProducts) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t d : {1, 2, 8, 64, 128, 256}) {
    const std::vector<int8_t> signs = cpu::random_signs(d, 77);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> q(static_cast<size_t>(d)), k(static_cast<size_t>(d));
      for (auto& x : q) x = normal(rng);
      for (auto& x : k) x = normal(rng);
      q[0] *= 10.f;  // an outlier channel
      double dot = 0, qq = 0;
      for (int64_t c = 0; c < d; ++c) {
        dot += double(q[size_t(c)]) * k[size_t(c)];
        qq += double(q[size_t(c)]) * q[size_t(c)];
      }
      cpu::hadamard_sign_rotate(q.data(), d, signs.data());
      cpu::hadamard_sign_rotate(k.data(), d, signs.data());
      double dot2 = 0, qq2 = 0, qmax = 0;
      for (int64_t c = 0; c < d; ++c) {
        dot2 += double(q[size_t(c)]) * k[size_t(c)];
        qq2 += double(q[size_t(c)]) * q[size_t(c)];
        qmax = std::max(qmax, double(std::fabs(q[size_t(c)])));
      }
      EXPECT_NEAR(dot2, dot, 1e-5 * std::sqrt(qq) * d) << "d " << d;
      EXPECT_NEAR(qq2, qq, 1e-5 * qq) << "d " << d;
      if (d >= 64) EXPECT_LT(qmax, 0.5 * std::sqrt(qq)) << "the outlier stays concentrated";
    }
  }
  EXPECT_TRUE(cpu::is_power_of_two(128));
  EXPECT_FALSE(cpu::is_power_of_two(96));
}

// ---- the error table of issue 30 ---------------------------------------------------------------

struct Errors {
  double rmse, max;
};
Errors errors(const std::vector<double>& got, const std::vector<double>& ref) {
  double sum = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(got[i] - ref[i]);
    sum += e * e;
    mx = std::max(mx, e);
  }
  return {std::sqrt(sum / double(ref.size())), mx};
}

// The fp32 problem's q / k / v quantised into pr8 (same shapes, contiguous) with per-(batch, kv
// head) descales amax / 448; rotate: q and k rotated by the Hadamard-sign map first.
void quantize_into(const Problem& src, Problem& pr8, const std::vector<int8_t>* signs) {
  const int64_t group = src.c.heads_q / src.c.heads_kv, d = src.c.head_dim;
  auto quantize = [&](const HostTensor& x, HostTensor& out, HostTensor& descale, int64_t per,
                      bool rotate) {
    const auto& sh = x.shape();
    std::vector<float> vals(size_t(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) vals[size_t(i)] = float(x.get(i));
    if (rotate)
      for (int64_t r = 0; r < x.numel() / d; ++r)
        cpu::hadamard_sign_rotate(vals.data() + r * d, d, signs->data());
    for (int64_t b = 0; b < sh[0]; ++b)
      for (int64_t g = 0; g < sh[2] / per; ++g) {
        float amax = 0;
        for (int64_t s = 0; s < sh[1]; ++s)
          for (int64_t h = g * per; h < (g + 1) * per; ++h)
            for (int64_t c = 0; c < d; ++c)
              amax = std::max(amax, std::fabs(vals[size_t(at4(x, b, s, h, c))]));
        const float ds = cpu::e4m3_descale(amax);
        descale.set(b * descale.shape()[1] + g, ds);
        for (int64_t s = 0; s < sh[1]; ++s)
          for (int64_t h = g * per; h < (g + 1) * per; ++h)
            for (int64_t c = 0; c < d; ++c) {
              const int64_t i = at4(x, b, s, h, c);
              out.set(i, vals[size_t(i)] / ds);
            }
      }
  };
  quantize(src.q, pr8.q, pr8.q_descale, group, signs != nullptr);
  quantize(src.k, pr8.k, pr8.k_descale, 1, signs != nullptr);
  quantize(src.v, pr8.v, pr8.v_descale, 1, false);
}

// Gaussian inputs with outliers (a few channels of q and k x7 to x10, as real activations have):
// RMSE and max error against the fp64 reference on the unquantised inputs. Reported (the GPU
// session measures its kernels in the same table); asserted: ours within 2% of the naive fp8
// baseline, incoherent processing lowers both fp8 errors, bf16 is below them all.
TEST(Fp8, ErrorTableOnOutlierInputs) {
  Case c;
  c.batch = 1;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 128;
  c.seqlen_k = 256;
  c.head_dim = 64;
  c.seed = 17;
  Problem src(c);
  for (int64_t i = 0; i < src.q.numel(); ++i) {
    const int64_t ch = i % c.head_dim;
    if (ch == 3 || ch == 17 || ch == 40) {
      src.q.set(i, src.q.get(i) * 10);
      src.k.set(i, src.k.get(i) * 10 * 0.7);
    }
  }
  for (int64_t i = 0; i < src.k.numel(); ++i) {
    const int64_t ch = i % c.head_dim;
    if (ch == 5 || ch == 29) src.k.set(i, src.k.get(i) * 10);
  }
  const Dense ref = reference(src, false, false);

  Case c8 = c;
  c8.dtype = FA_DTYPE_FP8_E4M3;
  c8.out_dtype = FA_DTYPE_BF16;
  c8.descale = true;
  const std::vector<int8_t> signs = cpu::random_signs(c.head_dim, 2024);
  Problem plain8(c8), rot8(c8);
  quantize_into(src, plain8, nullptr);
  quantize_into(src, rot8, &signs);
  const Errors naive = errors(reference(plain8, true, false, true).out, ref.out);
  const Errors naive_rot = errors(reference(rot8, true, false, true).out, ref.out);
  run_forward(plain8, FA_BACKEND_FLASH);
  run_forward(rot8, FA_BACKEND_FLASH);
  const Errors ours = errors(outputs(plain8, false).out, ref.out);
  const Errors ours_rot = errors(outputs(rot8, false).out, ref.out);

  Case c16 = c;
  c16.dtype = FA_DTYPE_BF16;
  Problem bf(c16);
  for (auto [from, to] : {std::pair{&src.q, &bf.q}, std::pair{&src.k, &bf.k},
                          std::pair{&src.v, &bf.v}})
    for (int64_t i = 0; i < from->numel(); ++i) to->set(i, from->get(i));
  run_forward(bf, FA_BACKEND_FLASH);
  const Errors bf16 = errors(outputs(bf, false).out, ref.out);

  std::printf("[ fp8 error table ] b1 h4x2 s128x256 d64, outlier channels, vs fp64 on unquantised "
              "inputs\n");
  std::printf("  %-40s rmse %.3e  max %.3e\n", "naive fp8 (Q,K,V,P e4m3, fp32 acc)", naive.rmse,
              naive.max);
  std::printf("  %-40s rmse %.3e  max %.3e\n", "naive fp8 + incoherent processing",
              naive_rot.rmse, naive_rot.max);
  std::printf("  %-40s rmse %.3e  max %.3e\n", "cpu-flash fp8 (P fp32)", ours.rmse, ours.max);
  std::printf("  %-40s rmse %.3e  max %.3e\n", "cpu-flash fp8 + incoherent processing",
              ours_rot.rmse, ours_rot.max);
  std::printf("  %-40s rmse %.3e  max %.3e\n", "cpu-flash bf16", bf16.rmse, bf16.max);
  // The inputs' quantisation dominates both fp8 paths here: the CPU's fp32 P buys nothing
  // measurable over P in e4m3 (the two differ by noise), so ours is held to the baseline within
  // 2%; the GPU kernels' target (issue 30) is <= the baseline.
  EXPECT_LE(ours.rmse, 1.02 * naive.rmse);
  EXPECT_LE(ours_rot.rmse, 1.02 * naive_rot.rmse);
  EXPECT_LT(naive_rot.rmse, naive.rmse);
  EXPECT_LT(ours_rot.rmse, ours.rmse);
  EXPECT_LT(bf16.rmse, ours_rot.rmse);
}

}  // namespace
}  // namespace fa::test
