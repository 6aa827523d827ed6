// Analysis: element types and shapes (values: analysis_values.cpp; masks: analysis_masks.cpp).
#include "analysis.h"

#include <algorithm>
#include <cmath>

#include "analysis_rules.h"

namespace fa_onnx {

using namespace rules;

std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
  Dims r(std::max(a.size(), b.size()));
  for (size_t k = 0; k < r.size(); ++k) {
    const Expr* x = k < r.size() - a.size() ? nullptr : &a[k - (r.size() - a.size())];
    const Expr* y = k < r.size() - b.size() ? nullptr : &b[k - (r.size() - b.size())];
    if (!x) { r[k] = *y; continue; }
    if (!y) { r[k] = *x; continue; }
    auto xc = x->const_value(), yc = y->const_value();
    if (xc == 1) r[k] = *y;
    else if (yc == 1) r[k] = *x;
    else if (xc && yc && *xc != *yc) return std::nullopt;
    else r[k] = xc ? *x : *y;  // equal whenever the graph runs
  }
  return r;
}

// ---- element types ---------------------------------------------------------------------------

std::optional<int32_t> Analysis::dtype(const std::string& t) {
  return memo(dtypes_, t, [&] { return dtype_rule(t); });
}

std::optional<int32_t> Analysis::dtype_rule(const std::string& t) {
  if (const auto* p = g_.initializer(t)) return p->data_type();
  if (const auto* d = g_.declared_type(t); d && d->elem_type() != 0) return d->elem_type();
  const auto* n = g_.producer(t);
  if (!n) return std::nullopt;
  const std::string& op = n->op_type();
  if (op == "Constant") {
    if (const auto* p = g_.constant_proto(t)) return p->data_type();
    if (find_attr(*n, "value_float") || find_attr(*n, "value_floats")) return kFloat;
    return kInt64;
  }
  if (op == "Cast") return int32_t(attr_int(*n, "to", 0));
  if (op == "CastLike") return dtype(in(*n, 1));
  if (op == "Shape" || op == "Size") return kInt64;
  if (op == "Equal" || op == "Less" || op == "Greater" || op == "Not" || op == "And" ||
      op == "Or" || op == "LessOrEqual" || op == "GreaterOrEqual")
    return kBool;
  if (op == "Where") return dtype(in(*n, 1));
  if (op == "ConstantOfShape") {
    const auto* a = find_attr(*n, "value");
    return a && a->has_t() ? a->t().data_type() : kFloat;
  }
  if (n->input_size() == 0) return std::nullopt;
  return dtype(in(*n, 0));
}

// ---- shapes ----------------------------------------------------------------------------------

std::optional<Dims> Analysis::shape(const std::string& t) {
  return memo(shapes_, t, [&] { return shape_rule(t); });
}

std::optional<std::vector<int64_t>> Analysis::slice_axes(const onnx::NodeProto& n, size_t count) {
  std::vector<int64_t> axes(count);
  for (size_t k = 0; k < count; ++k) axes[k] = int64_t(k);
  if (n.input_size() > 3 && !in(n, 3).empty()) {
    auto ax = const_ints(in(n, 3));
    if (!ax || ax->size() != count) return std::nullopt;
    axes = *ax;
  }
  return axes;
}

std::optional<std::vector<int64_t>> Analysis::const_ints(const std::string& t) {
  auto v = value(t);
  if (!v || !v->is_int) return std::nullopt;
  std::vector<int64_t> r;
  for (const auto& e : v->ints) {
    auto c = e.const_value();
    if (!c) return std::nullopt;
    r.push_back(*c);
  }
  return r;
}

std::optional<Dims> Analysis::shape_rule(const std::string& t) {
  if (const auto* p = g_.initializer(t)) {
    Dims d;
    for (auto x : p->dims()) d.push_back(Expr::constant(x));
    return d;
  }
  const auto* n = g_.producer(t);
  if (!n) {
    const auto* d = g_.declared_type(t);
    if (!d || !d->has_shape()) return std::nullopt;
    Dims r;
    for (int k = 0; k < d->shape().dim_size(); ++k) {
      const auto& dim = d->shape().dim(k);
      if (dim.has_dim_value()) r.push_back(Expr::constant(dim.dim_value()));
      else if (dim.has_dim_param() && !dim.dim_param().empty()) r.push_back(Expr::symbol(dim.dim_param()));
      else r.push_back(Expr::symbol(t + "." + std::to_string(k)));
    }
    return r;
  }
  const std::string& op = n->op_type();
  if (!n->domain().empty() && n->domain() != "ai.onnx") return std::nullopt;
  if (op == "Constant") {
    if (const auto* p = g_.constant_proto(t)) {
      Dims d;
      for (auto x : p->dims()) d.push_back(Expr::constant(x));
      return d;
    }
    if (const auto* a = find_attr(*n, "value_ints")) return Dims{Expr::constant(a->ints_size())};
    if (const auto* a = find_attr(*n, "value_floats")) return Dims{Expr::constant(a->floats_size())};
    return Dims{};
  }
  static const char* kSame[] = {"Identity", "Cast", "CastLike", "Softmax", "Trilu", "Sqrt", "Tanh",
                                "Neg", "Not", "Relu", "Sigmoid", "Exp", "Erf", "Dropout",
                                "LayerNormalization", "Reciprocal", "Abs", "Log", "Sin", "Cos"};
  for (const char* s : kSame)
    if (op == s) {
      if (op == "Dropout" && t != n->output(0)) return std::nullopt;
      return shape(in(*n, 0));
    }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Equal" ||
      op == "And" || op == "Or" || op == "Less" || op == "Greater" || op == "Max" || op == "Min") {
    auto a = shape(in(*n, 0)), b = shape(in(*n, 1));
    if (!a || !b) return std::nullopt;
    return broadcast(*a, *b);
  }
  if (op == "Where") {
    auto c = shape(in(*n, 0)), a = shape(in(*n, 1)), b = shape(in(*n, 2));
    if (!c || !a || !b) return std::nullopt;
    auto ab = broadcast(*a, *b);
    return ab ? broadcast(*c, *ab) : std::nullopt;
  }
  if (op == "MatMul") {
    auto a = shape(in(*n, 0)), b = shape(in(*n, 1));
    if (!a || !b || a->size() < 2 || b->size() < 2) return std::nullopt;
    Dims ba(a->begin(), a->end() - 2), bb(b->begin(), b->end() - 2);
    auto batch = broadcast(ba, bb);
    if (!batch) return std::nullopt;
    batch->push_back((*a)[a->size() - 2]);
    batch->push_back(b->back());
    return batch;
  }
  if (op == "Transpose") {
    auto a = shape(in(*n, 0));
    if (!a) return std::nullopt;
    auto perm = attr_ints(*n, "perm");
    Dims r;
    for (size_t k = 0; k < a->size(); ++k)
      r.push_back((*a)[perm ? size_t((*perm)[k]) : a->size() - 1 - k]);
    return r;
  }
  if (op == "Reshape") {
    auto a = shape(in(*n, 0));
    auto v = value(in(*n, 1));
    if (!v || !v->is_int) return std::nullopt;
    const bool allowzero = attr_int(*n, "allowzero", 0) != 0;
    Dims r;
    int infer = -1;
    for (size_t k = 0; k < v->ints.size(); ++k) {
      const Expr& e = v->ints[k];
      if (e.const_value() == 0 && !allowzero) {
        if (!a || k >= a->size()) return std::nullopt;
        r.push_back((*a)[k]);
      } else if (e.const_value() == -1) {
        if (infer >= 0) return std::nullopt;
        infer = int(k);
        r.push_back(Expr::constant(1));
      } else {
        r.push_back(e);
      }
    }
    if (infer >= 0) {
      if (!a) return std::nullopt;
      Expr total = Expr::constant(1), known = Expr::constant(1);
      for (const auto& d : *a) total = total * d;
      for (size_t k = 0; k < r.size(); ++k)
        if (int(k) != infer) known = known * r[k];
      auto q = total.divide_exact(known);
      if (!q) {
        // Common exporter case: the product of the other dims is a sub-product of the input's.
        return std::nullopt;
      }
      r[size_t(infer)] = *q;
    }
    return r;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    auto a = shape(in(*n, 0));
    if (!a) return std::nullopt;
    std::optional<std::vector<int64_t>> axes =
        g_.opset() >= 13 && n->input_size() > 1 ? const_ints(in(*n, 1)) : attr_ints(*n, "axes");
    if (op == "Unsqueeze") {
      if (!axes) return std::nullopt;
      const size_t rank = a->size() + axes->size();
      std::vector<bool> is_new(rank, false);
      for (auto x : *axes) {
        auto k = norm_axis(x, rank);
        if (k < 0 || k >= int64_t(rank)) return std::nullopt;
        is_new[size_t(k)] = true;
      }
      Dims r;
      size_t src = 0;
      for (size_t k = 0; k < rank; ++k) r.push_back(is_new[k] ? Expr::constant(1) : (*a)[src++]);
      return r;
    }
    Dims r;
    for (size_t k = 0; k < a->size(); ++k) {
      bool drop = false;
      if (axes) {
        for (auto x : *axes) drop |= norm_axis(x, a->size()) == int64_t(k);
      } else {
        drop = (*a)[k].const_value() == 1;
      }
      if (!drop) r.push_back((*a)[k]);
    }
    return r;
  }
  if (op == "Expand") {
    auto a = shape(in(*n, 0));
    auto v = value(in(*n, 1));
    if (!a || !v || !v->is_int) return std::nullopt;
    return broadcast(*a, v->ints);
  }
  if (op == "ConstantOfShape") {
    auto v = value(in(*n, 0));
    if (!v || !v->is_int) return std::nullopt;
    return v->ints;
  }
  if (op == "Shape") {
    auto a = shape(in(*n, 0));
    if (!a) return std::nullopt;
    auto v = value(t);
    if (!v) return std::nullopt;
    return Dims{Expr::constant(int64_t(v->ints.size()))};
  }
  if (op == "Gather" || op == "Concat" || op == "Range") {
    if (auto v = value(t)) return v->dims;
    if (op == "Concat") {
      const int64_t axis = attr_int(*n, "axis", 0);
      std::optional<Dims> r;
      for (const auto& x : n->input()) {
        auto s = shape(x);
        if (!s) return std::nullopt;
        if (!r) { r = s; continue; }
        const auto ax = size_t(norm_axis(axis, s->size()));
        if (ax >= s->size() || s->size() != r->size()) return std::nullopt;
        (*r)[ax] = (*r)[ax] + (*s)[ax];
      }
      return r;
    }
    return std::nullopt;
  }
  if (op == "Slice") {
    auto a = shape(in(*n, 0));
    if (!a) return std::nullopt;
    auto starts = value(in(*n, 1)), ends = value(in(*n, 2));
    if (!starts || !ends || !starts->is_int || !ends->is_int || starts->size() != ends->size())
      return std::nullopt;
    auto slice_ax = slice_axes(*n, starts->size());
    if (!slice_ax) return std::nullopt;
    const std::vector<int64_t>& axes = *slice_ax;
    if (n->input_size() > 4 && !in(*n, 4).empty()) {
      auto st = const_ints(in(*n, 4));
      if (!st) return std::nullopt;
      for (auto s : *st)
        if (s != 1) return std::nullopt;
    }
    Dims r = *a;
    for (size_t k = 0; k < axes.size(); ++k) {
      const auto ax = size_t(norm_axis(axes[k], a->size()));
      if (ax >= a->size()) return std::nullopt;
      const Expr& dim = (*a)[ax];
      Expr s = starts->ints[k], e = ends->ints[k];
      auto sc = s.const_value(), ec = e.const_value();
      auto dc = dim.const_value();
      if (sc && *sc < 0) {
        if (!dc) {
          if (*sc < 0) s = dim + Expr::constant(*sc);
        } else {
          s = Expr::constant(std::max<int64_t>(0, *dc + *sc));
        }
      }
      if (ec && *ec >= kSliceEndToInf) e = dim;
      else if (ec && *ec < 0) e = dim + Expr::constant(*ec);
      if (dc && s.const_value() && e.const_value()) {
        int64_t sv = std::clamp<int64_t>(*s.const_value(), 0, *dc);
        int64_t ev = std::clamp<int64_t>(*e.const_value(), 0, *dc);
        r[ax] = Expr::constant(std::max<int64_t>(0, ev - sv));
      } else {
        r[ax] = e - s;  // the slice lies inside the axis (see the header)
      }
    }
    return r;
  }
  if (op == "Split") {
    auto a = shape(in(*n, 0));
    if (!a) return std::nullopt;
    const auto ax = size_t(norm_axis(attr_int(*n, "axis", 0), a->size()));
    if (ax >= a->size()) return std::nullopt;
    std::optional<std::vector<int64_t>> sizes =
        n->input_size() > 1 && !in(*n, 1).empty() ? const_ints(in(*n, 1)) : attr_ints(*n, "split");
    int idx = -1;
    for (int k = 0; k < n->output_size(); ++k)
      if (n->output(k) == t) idx = k;
    Dims r = *a;
    if (sizes) {
      if (idx < 0 || size_t(idx) >= sizes->size()) return std::nullopt;
      r[ax] = Expr::constant((*sizes)[size_t(idx)]);
      return r;
    }
    auto part = (*a)[ax].divide_exact(Expr::constant(n->output_size()));
    if (!part) return std::nullopt;
    r[ax] = *part;
    return r;
  }
  if (op == "Attention") {
    auto q = shape(in(*n, 0)), v = shape(in(*n, 2));
    if (!q || !v || t != n->output(0)) return std::nullopt;
    Dims r = *q;
    if (q->size() == 4 && v->size() == 4) r[3] = (*v)[3];
    return r;
  }
  return std::nullopt;
}

}  // namespace fa_onnx
