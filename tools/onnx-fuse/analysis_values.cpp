// Analysis: the contents of small tensors (shape arithmetic, scalars).
#include "analysis.h"

#include <algorithm>
#include <cmath>

#include "analysis_rules.h"

namespace fa_onnx {

using namespace rules;

// ---- small values ----------------------------------------------------------------------------

std::optional<Value> Analysis::value(const std::string& t) {
  return memo(values_, t, [&] { return value_rule(t); });
}

std::optional<Value> Analysis::value_rule(const std::string& t) {
  auto from_proto = [](const onnx::TensorProto& p) -> std::optional<Value> {
    auto c = decode_tensor(p, kMaxValueElems);
    if (!c) return std::nullopt;
    Value v;
    for (auto d : c->dims) v.dims.push_back(Expr::constant(d));
    v.is_int = c->type == kInt64 || c->type == kInt32;
    for (double x : c->values) {
      // int64 limits (Slice's "to the end") do not survive the trip through double exactly
      if (v.is_int) v.ints.push_back(Expr::constant(x >= 9.2e18 ? std::numeric_limits<int64_t>::max()
                                                    : x <= -9.2e18 ? std::numeric_limits<int64_t>::min()
                                                                   : int64_t(x)));
      else v.nums.push_back(x);
    }
    return v;
  };
  if (const auto* p = g_.initializer(t)) return from_proto(*p);
  const auto* n = g_.producer(t);
  if (!n || (!n->domain().empty() && n->domain() != "ai.onnx")) return std::nullopt;
  const std::string& op = n->op_type();
  if (op == "Constant") {
    if (const auto* p = g_.constant_proto(t)) return from_proto(*p);
    Value v;
    if (const auto* a = find_attr(*n, "value_int")) {
      v.is_int = true;
      v.ints.push_back(Expr::constant(a->i()));
    } else if (const auto* a = find_attr(*n, "value_ints")) {
      v.is_int = true;
      for (auto x : a->ints()) v.ints.push_back(Expr::constant(x));
      v.dims = {Expr::constant(a->ints_size())};
    } else if (const auto* a = find_attr(*n, "value_float")) {
      v.nums.push_back(a->f());
    } else if (const auto* a = find_attr(*n, "value_floats")) {
      for (auto x : a->floats()) v.nums.push_back(x);
      v.dims = {Expr::constant(a->floats_size())};
    } else {
      return std::nullopt;
    }
    return v;
  }
  if (op == "Shape") {
    auto a = shape(in(*n, 0));
    if (!a) return std::nullopt;
    int64_t r = int64_t(a->size());
    int64_t s = attr_int(*n, "start", 0), e = attr_int(*n, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = std::clamp<int64_t>(s, 0, r);
    e = std::clamp<int64_t>(e, 0, r);
    Value v;
    v.is_int = true;
    for (int64_t k = s; k < e; ++k) v.ints.push_back((*a)[size_t(k)]);
    v.dims = {Expr::constant(int64_t(v.ints.size()))};
    return v;
  }
  if (op == "Identity" || op == "Squeeze" || op == "Unsqueeze" || op == "Reshape") {
    auto v = value(in(*n, 0));
    auto s = shape(t);
    if (!v || !s) return std::nullopt;
    v->dims = *s;
    return v;
  }
  if (op == "Cast" || op == "CastLike") {
    auto v = value(in(*n, 0));
    auto to = dtype(t);
    if (!v || !to) return std::nullopt;
    const bool to_int = *to == kInt64 || *to == kInt32;
    if (v->is_int == to_int) return v;
    Value r;
    r.dims = v->dims;
    r.is_int = to_int;
    if (to_int) {
      for (double x : v->nums) r.ints.push_back(Expr::constant(int64_t(x)));
    } else {
      for (const auto& e : v->ints) {
        auto c = e.const_value();
        if (!c) return std::nullopt;
        r.nums.push_back(*to == kBool ? (*c != 0) : double(*c));
      }
    }
    return r;
  }
  if (op == "Gather") {
    auto data = value(in(*n, 0));
    auto idx = const_ints(in(*n, 1));
    auto ishape = shape(in(*n, 1));
    if (!data || !idx || !ishape || attr_int(*n, "axis", 0) != 0 || data->dims.size() > 1)
      return std::nullopt;
    Value v;
    v.is_int = data->is_int;
    v.dims = *ishape;
    const int64_t len = int64_t(data->size());
    for (auto i : *idx) {
      if (i < 0) i += len;
      if (i < 0 || i >= len) return std::nullopt;
      if (v.is_int) v.ints.push_back(data->ints[size_t(i)]);
      else v.nums.push_back(data->nums[size_t(i)]);
    }
    return v;
  }
  if (op == "Slice") {
    auto data = value(in(*n, 0));
    auto st = const_ints(in(*n, 1)), en = const_ints(in(*n, 2));
    if (!data || !st || !en || st->size() != 1 || en->size() != 1 || data->dims.size() != 1)
      return std::nullopt;
    if (n->input_size() > 4 && !in(*n, 4).empty()) {
      auto steps = const_ints(in(*n, 4));
      if (!steps || (*steps)[0] != 1) return std::nullopt;
    }
    const int64_t len = int64_t(data->size());
    int64_t s = (*st)[0], e = (*en)[0];
    if (s < 0) s += len;
    if (e < 0) e += len;
    s = std::clamp<int64_t>(s, 0, len);
    e = std::clamp<int64_t>(e, 0, len);
    Value v;
    v.is_int = data->is_int;
    for (int64_t k = s; k < e; ++k) {
      if (v.is_int) v.ints.push_back(data->ints[size_t(k)]);
      else v.nums.push_back(data->nums[size_t(k)]);
    }
    v.dims = {Expr::constant(std::max<int64_t>(0, e - s))};
    return v;
  }
  if (op == "Concat") {
    Value v;
    bool first = true;
    for (const auto& x : n->input()) {
      auto p = value(x);
      if (!p || p->dims.size() > 1) return std::nullopt;
      if (first) v.is_int = p->is_int;
      if (p->is_int != v.is_int) return std::nullopt;
      first = false;
      v.ints.insert(v.ints.end(), p->ints.begin(), p->ints.end());
      v.nums.insert(v.nums.end(), p->nums.begin(), p->nums.end());
    }
    v.dims = {Expr::constant(int64_t(v.size()))};
    return v;
  }
  auto elementwise = [&](int arity) -> std::optional<std::vector<Value>> {
    std::vector<Value> vs;
    for (int k = 0; k < arity; ++k) {
      auto v = value(in(*n, k));
      if (!v) return std::nullopt;
      vs.push_back(*v);
    }
    return vs;
  };
  auto out_dims = [&]() -> std::optional<Dims> { return shape(t); };
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal" || op == "Pow") {
    auto vs = elementwise(2);
    auto d = out_dims();
    if (!vs || !d) return std::nullopt;
    const Value &a = (*vs)[0], &b = (*vs)[1];
    size_t len = std::max(a.size(), b.size());
    if ((a.size() != len && a.size() != 1) || (b.size() != len && b.size() != 1) || len > kMaxValueElems)
      return std::nullopt;
    Value r;
    r.dims = *d;
    r.is_int = a.is_int && b.is_int && op != "Equal";
    for (size_t k = 0; k < len; ++k) {
      if (a.is_int && b.is_int) {
        const Expr& x = a.ints[a.size() == 1 ? 0 : k];
        const Expr& y = b.ints[b.size() == 1 ? 0 : k];
        if (op == "Add") r.ints.push_back(x + y);
        else if (op == "Sub") r.ints.push_back(x - y);
        else if (op == "Mul") r.ints.push_back(x * y);
        else if (op == "Div") {
          auto q = x.divide_exact(y);
          if (!q) return std::nullopt;
          r.ints.push_back(*q);
        } else if (op == "Equal") {
          if (x == y) r.nums.push_back(1);
          else if (x.is_const() && y.is_const()) r.nums.push_back(0);
          // a size (non-negative) against a negative constant: never equal
          else if ((x.known_nonnegative() && y.const_value() && *y.const_value() < 0) ||
                   (y.known_nonnegative() && x.const_value() && *x.const_value() < 0))
            r.nums.push_back(0);
          else return std::nullopt;
        } else {
          return std::nullopt;
        }
      } else if (!a.is_int && !b.is_int) {
        double x = a.nums[a.size() == 1 ? 0 : k], y = b.nums[b.size() == 1 ? 0 : k];
        if (op == "Add") r.nums.push_back(x + y);
        else if (op == "Sub") r.nums.push_back(x - y);
        else if (op == "Mul") r.nums.push_back(x * y);
        else if (op == "Div") r.nums.push_back(x / y);
        else if (op == "Pow") r.nums.push_back(std::pow(x, y));
        else r.nums.push_back(x == y);
      } else {
        return std::nullopt;
      }
    }
    return r;
  }
  if (op == "ConstantOfShape") {
    auto dims = const_ints(in(*n, 0));
    if (!dims) return std::nullopt;
    size_t count = 1;
    for (auto d : *dims) {
      if (d < 0 || d > int64_t(kMaxValueElems)) return std::nullopt;
      count *= size_t(d);
    }
    if (count > kMaxValueElems) return std::nullopt;
    Value v;
    for (auto d : *dims) v.dims.push_back(Expr::constant(d));
    double fill = 0;
    int32_t type = kFloat;
    if (const auto* a = find_attr(*n, "value"); a && a->has_t()) {
      auto c = decode_tensor(a->t(), 1);
      if (!c || c->values.size() != 1) return std::nullopt;
      fill = c->values[0];
      type = c->type;
    }
    v.is_int = type == kInt64 || type == kInt32;
    for (size_t k = 0; k < count; ++k) {
      if (v.is_int) v.ints.push_back(Expr::constant(int64_t(fill)));
      else v.nums.push_back(fill);
    }
    return v;
  }
  if (op == "Sqrt" || op == "Neg" || op == "Reciprocal") {
    auto v = value(in(*n, 0));
    if (!v || v->is_int) return std::nullopt;
    for (auto& x : v->nums) x = op == "Sqrt" ? std::sqrt(x) : op == "Neg" ? -x : 1.0 / x;
    return v;
  }
  if (op == "Where") {
    auto vs = elementwise(3);
    auto d = out_dims();
    if (!vs || !d) return std::nullopt;
    const Value &c = (*vs)[0], &a = (*vs)[1], &b = (*vs)[2];
    if (c.is_int || a.is_int != b.is_int) return std::nullopt;
    size_t len = std::max({c.size(), a.size(), b.size()});
    Value r;
    r.dims = *d;
    r.is_int = a.is_int;
    auto pick = [len](const Value& v, size_t k) { return v.size() == 1 ? 0 : (v.size() == len ? k : len); };
    for (size_t k = 0; k < len; ++k) {
      size_t ic = pick(c, k), ia = pick(a, k), ib = pick(b, k);
      if (ic == len || ia == len || ib == len) return std::nullopt;
      const bool cond = c.nums[ic] != 0;
      if (r.is_int) r.ints.push_back(cond ? a.ints[ia] : b.ints[ib]);
      else r.nums.push_back(cond ? a.nums[ia] : b.nums[ib]);
    }
    return r;
  }
  return std::nullopt;
}

std::optional<double> Analysis::scalar(const std::string& t) {
  auto v = value(t);
  if (!v || v->size() == 0) return std::nullopt;
  for (const auto& d : v->dims)
    if (d.const_value() != 1) return std::nullopt;
  if (v->is_int) {
    auto c = v->ints[0].const_value();
    return c ? std::optional<double>(double(*c)) : std::nullopt;
  }
  return v->nums[0];
}

}  // namespace fa_onnx
