#include "fuzz_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "fuzz_memory.h"

namespace fa_fuzz {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // fp32 unit roundoff

// Unit roundoff of the stored outputs.
double dtype_unit(int32_t dtype) {
  switch (dtype) {
    case FA_DTYPE_FP16: return 1.0 / (1 << 11);
    case FA_DTYPE_BF16: return 1.0 / (1 << 8);
    default: return kU;
  }
}
// Values are compared while a bound stays this far below the dtype's largest finite value.
double value_limit(int32_t dtype) { return dtype == FA_DTYPE_FP16 ? 3e4 : 1e30; }

constexpr double kLmaxValues = 1e4;  // the CPU kernels' documented range of finite scores
constexpr double kLimitClasses = 1e30;

enum class Class { kFinite, kNan, kPosInf, kNegInf };
Class classify(float x) {
  if (std::isnan(x)) return Class::kNan;
  if (std::isinf(x)) return x > 0 ? Class::kPosInf : Class::kNegInf;
  return Class::kFinite;
}

}  // namespace

int64_t dtype_bytes(int32_t dtype) {
  switch (dtype) {
    case FA_DTYPE_FP16:
    case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_FP8_E4M3: return 1;
    default: return 4;
  }
}

float load(int32_t dtype, const uint8_t* data, int64_t index) {
  const uint8_t* p = data + index * dtype_bytes(dtype);
  // A tensor the call does not read may carry any dtype (dout in the forward); fp8 elements are
  // one byte: never read four (found by the fuzzer: a 1-byte-per-element buffer read as fp32).
  if (dtype == FA_DTYPE_FP8_E4M3) return std::numeric_limits<float>::quiet_NaN();
  if (dtype == FA_DTYPE_FP16 || dtype == FA_DTYPE_BF16) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return dtype == FA_DTYPE_FP16 ? fp16_to_float(h) : bf16_to_float(h);
  }
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}

double input_magnitude(const Case& c) { return 255.0 * std::ldexp(1.0, c.magnitude_shift - 7); }

Tolerance tolerance(const Case& c, const Problem& p) {
  Tolerance t;
  const double m = input_magnitude(c), d = double(p.head_dim);
  const double scale =
      c.softmax_scale != 0.f ? std::fabs(double(c.softmax_scale)) : 1.0 / std::sqrt(d);
  const double raw = scale * p.norm_q * p.norm_k;  // |scale q.k| before the softcap
  const double lq = double(std::max<int64_t>(p.max_len_q, 1)), lk = double(p.max_len_k);
  // slopes are in [-0.25, 1]; q_shift moves the queries' positions by up to |q_shift| (a 0.1-size
  // struct ignores it: the bound is then loose, never short)
  const double bias = c.alibi ? 1.0 * (lq + lk + std::fabs(double(c.q_shift))) : 0.0;
  const double lmax = (c.softcap > 0.f ? std::min(raw, double(c.softcap)) : raw) + bias;
  const double keep = c.dropout_p > 0.f ? 1.0 / (1.0 - double(c.dropout_p)) : 1.0;
  const double group = double(p.heads_q / std::max<int64_t>(p.heads_kv, 1));
  const double g = keep * p.norm_dout * p.norm_v;
  t.lmax = lmax;
  t.raw = raw + bias;
  t.out = keep * m;
  t.dq = scale * m * 2 * g;
  t.dv_per_colsum = keep * m;
  t.dk_per_colsum = scale * m * 2 * g;
  t.dv = t.dv_per_colsum * lq * group;
  t.dk = t.dk_per_colsum * lq * group;
  const double e_s = 2 * (d + 2) * kU * t.raw;  // tanh passes on the error of its argument
  t.e_p = 2 * e_s + (lq + lk) * kU + 1e-6;
  t.rel = 4 * dtype_unit(c.dtype) + 3 * t.e_p + (d + lq * group + lk) * kU;
  // The gradients go through d logit / dx = 1 - tanh²(x / softcap), whose slope is up to
  // 4 / (3 sqrt 3) / softcap: x's error e_s moves it by that much (a tiny softcap makes it a
  // step at x = 0 that the two backends may place on either side; found by the fuzzer with
  // softcap 4.5e-40: dQ 0 against 0.024).
  if (c.softcap > 0.f) t.rel += 3 * std::min(1.0, 0.77 * e_s / double(c.softcap) + 2 * kU);
  t.lse_abs = 2 * e_s + 1e-5 + kU * lmax;
  t.value_limit = value_limit(c.dtype);
  t.underflow = c.dtype == FA_DTYPE_FP16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -149);
  return t;
}

double Tolerance::floor(double bound) const {
  // An intermediate's absolute error is at least half a subnormal spacing; what follows it
  // multiplies that by at most bound / 2^-29 (P <= 1 summed over <= 2^11 terms, and so on).
  return 2 * underflow + std::ldexp(1.0, -120) * std::max(bound, 1.0);
}

Level Tolerance::level(double bound) const {
  if (!(raw <= kLimitClasses && bound <= std::min(kLimitClasses, value_limit))) return Level::kNone;
  return raw <= kLmaxValues ? Level::kValues : Level::kClasses;
}

bool injective(const TensorSpec& t) {
  if (t.rank < 1 || t.rank > FA_MAX_RANK) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, shape) of the dims that vary
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0 || t.stride[i] < 0) return false;
    if (t.shape[i] > 1) dims.emplace_back(t.stride[i], t.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  __int128 span = 1;  // elements covered by the dims so far, from the innermost
  for (const auto& [stride, shape] : dims) {
    if (__int128(stride) < span) return false;
    span = __int128(stride) * shape;
  }
  return true;
}

int64_t elements(const TensorSpec& t) {
  if (t.rank < 1 || t.rank > FA_MAX_RANK) return 0;
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0 || t.stride[i] < 0) return 0;
    n = sat_mul(n, t.shape[i]);
  }
  return n;
}

namespace {

// Calls f(index, offset) for every logical element of t, in row-major order.
template <typename F>
void for_each(const TensorSpec& t, F f) {
  const int64_t n = elements(t);
  int64_t idx[FA_MAX_RANK] = {};
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int i = 0; i < t.rank; ++i) off += idx[i] * t.stride[i];
    if (!f(idx, off)) return;
    for (int i = t.rank - 1; i >= 0; --i) {  // odometer
      if (++idx[i] < t.shape[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace

// Reading more elements than this (a tensor the call did not validate, e.g. dout in the
// forward) gives up: the bounds that need it become infinite.
constexpr int64_t kMaxScan = int64_t(1) << 24;

double max_abs(const TensorSpec& t, const uint8_t* data) {
  if (!t.present || elements(t) == 0 || elements(t) > kMaxScan) return HUGE_VAL;
  double m = 0;
  for_each(t, [&](const int64_t*, int64_t off) {
    const float x = load(t.dtype, data, off);
    if (std::isfinite(x)) m = std::max(m, std::fabs(double(x)));
    return true;
  });
  return m;
}

double max_row_norm(const TensorSpec& t, const uint8_t* data) {
  if (!t.present || elements(t) == 0 || elements(t) > kMaxScan) return HUGE_VAL;
  double m = 0, row = 0;
  for_each(t, [&](const int64_t* idx, int64_t off) {
    if (idx[t.rank - 1] == 0) row = 0;
    const double x = double(load(t.dtype, data, off));
    row += x * x;
    m = std::max(m, std::sqrt(row));
    return true;
  });
  return m;
}

bool same(const TensorSpec& t, const uint8_t* got, const uint8_t* want, Level level, double atol,
          const Weights& weights, std::string* why, Stats* stats) {
  if (level == Level::kNone) return true;
  bool ok = true;
  for_each(t, [&](const int64_t* idx, int64_t off) {
    const float a = load(t.dtype, got, off), b = load(t.dtype, want, off);
    double tol = atol;
    if (weights.spec != nullptr) {
      int64_t woff = 0;
      for (int i = 0; i < t.rank; ++i) woff += idx[i] * weights.spec->stride[i];
      tol += weights.per_unit * std::fabs(double(load(weights.spec->dtype, weights.data, woff)));
    }
    const bool finite = classify(a) == Class::kFinite && classify(b) == Class::kFinite;
    if (finite) {
      stats->max_ref = std::max(stats->max_ref, std::fabs(double(b)));
      stats->max_err = std::max(stats->max_err, std::fabs(double(a) - double(b)));
    }
    ok = classify(a) == classify(b) &&
         !(level == Level::kValues && finite && !(std::fabs(double(a) - double(b)) <= tol));
    if (!ok) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "element [%lld, %lld, %lld, %lld] (offset %lld): flash %.9g, "
                    "reference %.9g, tolerance %.3g", (long long)idx[0], (long long)idx[1],
                    (long long)idx[2], (long long)idx[3], (long long)off, double(a), double(b),
                    level == Level::kValues ? tol : 0.0);
      *why = buf;
    }
    return ok;
  });
  return ok;
}

}  // namespace fa_fuzz
