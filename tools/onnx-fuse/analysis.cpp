#include "analysis.h"

#include <algorithm>
#include <cmath>

namespace fa_onnx {

namespace {

constexpr size_t kMaxValueElems = 64;          // shape tensors and scalars
constexpr size_t kMaxBufferElems = 1u << 24;   // mask buffers read to classify them
constexpr int kMaxDepth = 400;                 // recursion guard on deep graphs
constexpr int64_t kSliceEndToInf = int64_t(1) << 40;  // an end this large means "to the end"

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + int64_t(rank) : a; }

const std::string& in(const onnx::NodeProto& n, int i) {
  static const std::string none;
  return i < n.input_size() ? n.input(i) : none;
}

}  // namespace

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
  auto it = dtypes_.find(t);
  if (it != dtypes_.end()) return it->second;
  if (++depth_ > kMaxDepth) { --depth_; return std::nullopt; }
  auto r = dtype_rule(t);
  --depth_;
  dtypes_[t] = r;
  return r;
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
  auto it = shapes_.find(t);
  if (it != shapes_.end()) return it->second;
  if (++depth_ > kMaxDepth) { --depth_; return std::nullopt; }
  auto r = shape_rule(t);
  --depth_;
  shapes_[t] = r;
  return r;
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
    std::vector<int64_t> axes(starts->size());
    for (size_t k = 0; k < axes.size(); ++k) axes[k] = int64_t(k);
    if (n->input_size() > 3 && !in(*n, 3).empty()) {
      auto ax = const_ints(in(*n, 3));
      if (!ax || ax->size() != axes.size()) return std::nullopt;
      axes = *ax;
    }
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

// ---- small values ----------------------------------------------------------------------------

std::optional<Value> Analysis::value(const std::string& t) {
  auto it = values_.find(t);
  if (it != values_.end()) return it->second;
  if (++depth_ > kMaxDepth) { --depth_; return std::nullopt; }
  auto r = value_rule(t);
  --depth_;
  values_[t] = r;
  return r;
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

// ---- masks -----------------------------------------------------------------------------------

std::optional<Band> Analysis::band(const std::string& t) {
  auto it = bands_.find(t);
  if (it != bands_.end()) return it->second;
  if (++depth_ > kMaxDepth) { --depth_; return std::nullopt; }
  auto r = band_rule(t);
  --depth_;
  bands_[t] = r;
  return r;
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
    std::vector<int64_t> axes(starts->size());
    for (size_t k = 0; k < axes.size(); ++k) axes[k] = int64_t(k);
    if (n->input_size() > 3 && !in(*n, 3).empty()) {
      auto ax = const_ints(in(*n, 3));
      if (!ax || ax->size() != axes.size()) return std::nullopt;
      axes = *ax;
    }
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
