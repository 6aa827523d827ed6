// Analysis: attention masks as diagonal bands.
#include "analysis.h"

#include <algorithm>
#include <cmath>

#include "analysis_rules.h"

namespace fa_onnx {

using namespace rules;

// ---- masks -----------------------------------------------------------------------------------

std::optional<Band> Analysis::band(const std::string& t) {
  return memo(bands_, t, [&] { return band_rule(t); });
}

// A constant (.., R, C) buffer whose leading dims are 1 and whose value depends only on whether
// j - i lies in a fixed interval: tril / triu buffers, and their -inf / bool / uint8 forms.
std::optional<Band> Analysis::band_of_buffer(const onnx::TensorProto& p) {
  auto c = decode_tensor(p, kMaxBufferElems);
  if (!c || c->dims.size() < 2) return std::nullopt;
  for (size_t k = 0; k + 2 < c->dims.size(); ++k)
    if (c->dims[k] != 1) return std::nullopt;
  const int64_t R = c->dims[c->dims.size() - 2], C = c->dims.back();
  if (R <= 0 || C <= 0) return std::nullopt;
  Band b;
  for (auto d : c->dims) b.dims.push_back(Expr::constant(d));
  b.buffer = true;
  b.in = c->values[0];  // (0, 0): j - i = 0 is inside
  bool have_out = false;
  int64_t lo = -(R + C), hi = R + C;  // the tightest interval seen so far
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      double v = c->values[size_t(i * C + j)];
      if (v == b.in || (std::isnan(v) && std::isnan(b.in))) continue;
      if (!have_out) { b.out = v; have_out = true; }
      else if (v != b.out) return std::nullopt;
      const int64_t d = j - i;
      if (d > 0) hi = std::min(hi, d - 1);
      else lo = std::max(lo, d + 1);
    }
  if (!have_out) {
    b.out = b.in;
    return b;  // uniform
  }
  // Every element must agree with the interval [lo, hi].
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const int64_t d = j - i;
      const bool inside = d >= lo && d <= hi;
      double v = c->values[size_t(i * C + j)];
      if ((v == b.in) != inside) return std::nullopt;
    }
  // Within the buffer, j - i spans [-(R-1), C-1]: a bound at or beyond it is no bound.
  b.lo = lo <= -(R - 1) ? -Band::kUnbounded : lo;
  b.hi = hi >= C - 1 ? Band::kUnbounded : hi;
  return b;
}

std::optional<Band> Analysis::band_rule(const std::string& t) {
  auto s = shape(t);
  if (!s || s->size() < 2) return std::nullopt;
  if (auto v = value(t)) {  // small constants: uniform when all equal
    if (v->is_int || v->nums.empty()) return std::nullopt;
    for (double x : v->nums)
      if (x != v->nums[0]) return std::nullopt;
    Band b;
    b.dims = *s;
    b.in = b.out = v->nums[0];
    return b;
  }
  if (const auto* p = g_.constant_proto(t)) {
    auto b = band_of_buffer(*p);
    return b;
  }
  const auto* n = g_.producer(t);
  if (!n || (!n->domain().empty() && n->domain() != "ai.onnx")) return std::nullopt;
  const std::string& op = n->op_type();
  auto with_dims = [&](Band b) { b.dims = *s; return b; };
  if (op == "Expand" || op == "ConstantOfShape" || op == "Identity") {
    double fill = 0;
    if (op == "ConstantOfShape") {
      const auto* a = find_attr(*n, "value");
      if (a && a->has_t()) {
        auto c = decode_tensor(a->t(), 1);
        if (!c || c->values.empty()) return std::nullopt;
        fill = c->values[0];
      }
      Band b;
      b.in = b.out = fill;
      return with_dims(b);
    }
    auto src = band(in(*n, 0));
    if (!src) {
      auto sc = scalar(in(*n, 0));
      if (!sc) return std::nullopt;
      Band b;
      b.in = b.out = *sc;
      return with_dims(b);
    }
    if (op == "Expand" && !src->uniform()) {
      // Broadcasting leading dims only; the band's own rows / cols must stay.
      if (src->dims.size() < 2 || s->size() < 2 || src->dims[src->dims.size() - 1] != s->back() ||
          src->dims[src->dims.size() - 2] != (*s)[s->size() - 2])
        return std::nullopt;
    }
    return with_dims(*src);
  }
  if (op == "Trilu") {
    auto src = band(in(*n, 0));
    if (!src || src->buffer) return std::nullopt;
    int64_t k = 0;
    if (n->input_size() > 1 && !in(*n, 1).empty()) {
      auto kv = const_ints(in(*n, 1));
      if (!kv || kv->size() != 1) return std::nullopt;
      k = (*kv)[0];
    }
    const bool upper = attr_int(*n, "upper", 1) != 0;
    Band b = *src;
    if (!src->uniform() && (src->out != 0 || src->shift != Expr())) return std::nullopt;
    b.out = 0;
    if (src->uniform()) b.shift = Expr();
    if (upper) b.lo = std::max(b.lo == -Band::kUnbounded ? k : b.lo, k);   // keep j - i >= k
    else b.hi = std::min(b.hi == Band::kUnbounded ? k : b.hi, k);          // keep j - i <= k
    return with_dims(b);
  }
  if (op == "Slice") {
    auto src = band(in(*n, 0));
    auto src_shape = shape(in(*n, 0));
    if (!src || !src_shape) return std::nullopt;
    auto starts = value(in(*n, 1));
    if (!starts || !starts->is_int) return std::nullopt;
    auto slice_ax = slice_axes(*n, starts->size());
    if (!slice_ax) return std::nullopt;
    const std::vector<int64_t>& axes = *slice_ax;
    Band b = *src;
    const size_t rank = src_shape->size();
    for (size_t k = 0; k < axes.size(); ++k) {
      const auto ax = size_t(norm_axis(axes[k], rank));
      Expr st = starts->ints[k];
      if (auto c = st.const_value(); c && *c < 0) return std::nullopt;
      if (ax == rank - 2) b.shift = b.shift - st;       // rows start later: j - i grows by -start
      else if (ax == rank - 1) b.shift = b.shift + st;
      else if (st.const_value() != 0) return std::nullopt;
    }
    return with_dims(b);  // shape() already checked the steps
  }
  if (op == "Unsqueeze" || op == "Reshape") {
    auto src = band(in(*n, 0));
    if (!src) return std::nullopt;
    // Only leading axes may change: the last two must be the source's.
    if (src->dims.size() < 2 || s->back() != src->dims.back() ||
        (*s)[s->size() - 2] != src->dims[src->dims.size() - 2])
      return std::nullopt;
    for (size_t k = 0; k + 2 < s->size(); ++k)
      if ((*s)[k].const_value() != 1) return std::nullopt;
    return with_dims(*src);
  }
  auto map_values = [&](Band b, auto f) {
    b.in = f(b.in);
    b.out = f(b.out);
    return with_dims(b);
  };
  if (op == "Cast" || op == "CastLike") {
    auto src = band(in(*n, 0));
    auto to = dtype(t);
    if (!src || !to) return std::nullopt;
    if (*to == kBool) return map_values(*src, [](double x) { return double(x != 0); });
    if (*to == kInt64 || *to == kInt32 || *to == kUint8) return map_values(*src, [](double x) { return std::trunc(x); });
    if (*to == kFloat16) {
      // fp16 overflows to inf: a large negative fill stays a mask
      return map_values(*src, [](double x) { return std::abs(x) > 65504.0 ? (x < 0 ? -INFINITY : INFINITY) : x; });
    }
    return map_values(*src, [](double x) { return x; });
  }
  if (op == "Not") {
    auto src = band(in(*n, 0));
    if (!src) return std::nullopt;
    return map_values(*src, [](double x) { return double(x == 0); });
  }
  if (op == "Equal" || op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    // band op scalar, or scalar op band
    auto b0 = band(in(*n, 0));
    auto s1 = scalar(in(*n, 1));
    if (b0 && s1) {
      double c = *s1;
      if (op == "Equal") return map_values(*b0, [c](double x) { return double(x == c); });
      if (op == "Add") return map_values(*b0, [c](double x) { return x + c; });
      if (op == "Sub") return map_values(*b0, [c](double x) { return x - c; });
      if (op == "Mul") return map_values(*b0, [c](double x) { return x == 0 || c == 0 ? (std::isinf(x) || std::isinf(c) ? NAN : 0.0) : x * c; });
      return map_values(*b0, [c](double x) { return x / c; });
    }
    auto s0 = scalar(in(*n, 0));
    auto b1 = band(in(*n, 1));
    if (s0 && b1) {
      double c = *s0;
      if (op == "Equal") return map_values(*b1, [c](double x) { return double(x == c); });
      if (op == "Add") return map_values(*b1, [c](double x) { return x + c; });
      if (op == "Sub") return map_values(*b1, [c](double x) { return c - x; });
      if (op == "Mul") return map_values(*b1, [c](double x) { return x == 0 || c == 0 ? (std::isinf(x) || std::isinf(c) ? NAN : 0.0) : x * c; });
      return map_values(*b1, [c](double x) { return c / x; });
    }
    return std::nullopt;
  }
  if (op == "Where") {
    auto c = band(in(*n, 0));
    auto a = scalar(in(*n, 1)), b = scalar(in(*n, 2));
    if (!c || !a || !b) return std::nullopt;
    const double x = *a, y = *b;
    return map_values(*c, [x, y](double v) { return v != 0 ? x : y; });
  }
  return std::nullopt;
}

}  // namespace fa_onnx
