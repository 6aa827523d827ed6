#include "views.h"

#include <algorithm>
#include <optional>

namespace fa_onnx {

namespace {

constexpr int kMaxChain = 24;

struct Atom {
  int role = -1;        // source axis, or -1 for an axis the chain inserted
  Expr dim;
  bool repeated = false;  // broadcast by an Expand
};
using Axis = std::vector<Atom>;

Expr axis_dim(const Axis& ax) {
  Expr p = Expr::constant(1);
  for (const auto& at : ax) p = p * at.dim;
  return p;
}

bool is_default(const onnx::NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

// The data input of a view-like op, or empty when `n` is not one (for this operand).
std::string view_input(const Graph& g, Analysis& a, const onnx::NodeProto& n, bool allow_scale,
                       bool allow_repeat) {
  if (!is_default(n)) return {};
  const std::string& op = n.op_type();
  if (op == "Transpose" || op == "Reshape" || op == "Identity") return n.input(0);
  if (op == "Cast" || op == "CastLike") {
    auto from = a.dtype(n.input(0)), to = a.dtype(n.output(0));
    return from && to && is_float_type(*from) && is_float_type(*to) ? n.input(0) : std::string();
  }
  if ((op == "Unsqueeze" || op == "Expand") && allow_repeat) return n.input(0);
  if ((op == "Mul" || op == "Div") && allow_scale) {
    if (a.scalar(n.input(1))) return n.input(0);
    if (op == "Mul" && a.scalar(n.input(0))) return n.input(1);
  }
  (void)g;
  return {};
}

struct State {
  std::vector<Axis> axes;
  int32_t dtype = 0;
  double scale = 1;
};

// Applies one view op to the state; false when the op cannot be expressed as a view of the
// source (e.g. a Reshape that splits a source axis).
bool apply(Analysis& a, const onnx::NodeProto& n, const std::string& data_in, State& st) {
  const std::string& op = n.op_type();
  if (op == "Identity") return true;
  if (op == "Cast" || op == "CastLike") {
    auto to = a.dtype(n.output(0));
    if (!to) return false;
    st.dtype = *to;
    return true;
  }
  if (op == "Mul" || op == "Div") {
    const std::string& other = n.input(0) == data_in ? n.input(1) : n.input(0);
    auto c = a.scalar(other);
    if (!c) return false;
    st.scale = op == "Mul" ? st.scale * *c : st.scale / *c;
    return true;
  }
  if (op == "Transpose") {
    std::vector<Axis> r(st.axes.size());
    auto perm = attr_ints(n, "perm");
    for (size_t k = 0; k < r.size(); ++k) {
      size_t src = perm ? size_t((*perm)[k]) : r.size() - 1 - k;
      if (src >= st.axes.size()) return false;
      r[k] = st.axes[src];
    }
    st.axes = r;
    return true;
  }
  auto out_shape = a.shape(n.output(0));
  if (!out_shape) return false;
  if (op == "Unsqueeze") {
    // The output's axes of size 1 that are not the input's: match greedily in order.
    std::vector<Axis> r;
    size_t src = 0;
    for (const auto& d : *out_shape) {
      if (src < st.axes.size() && axis_dim(st.axes[src]) == d &&
          !(d.const_value() == 1 && out_shape->size() - r.size() > st.axes.size() - src)) {
        r.push_back(st.axes[src++]);
      } else if (d.const_value() == 1) {
        r.push_back(Axis{Atom{-1, Expr::constant(1), false}});
      } else {
        return false;
      }
    }
    if (src != st.axes.size()) return false;
    st.axes = r;
    return true;
  }
  if (op == "Expand") {
    if (out_shape->size() != st.axes.size()) return false;
    for (size_t k = 0; k < st.axes.size(); ++k) {
      const Expr cur = axis_dim(st.axes[k]);
      const Expr& want = (*out_shape)[k];
      if (cur == want) continue;
      if (cur.const_value() != 1 || st.axes[k].size() != 1) return false;
      st.axes[k][0].dim = want;
      st.axes[k][0].repeated = true;
    }
    return true;
  }
  if (op == "Reshape") {
    std::vector<Atom> atoms;
    for (const auto& ax : st.axes)
      for (const auto& at : ax)
        if (at.dim.const_value() != 1 || at.role >= 0) atoms.push_back(at);
    std::vector<Axis> r;
    size_t next = 0;
    for (const auto& d : *out_shape) {
      Axis ax;
      if (d.const_value() == 1) {
        if (next < atoms.size() && atoms[next].dim.const_value() == 1) ax.push_back(atoms[next++]);
        else ax.push_back(Atom{-1, Expr::constant(1), false});
        r.push_back(ax);
        continue;
      }
      if (next >= atoms.size()) return false;
      Expr prod = Expr::constant(1);
      do {
        prod = prod * atoms[next].dim;
        ax.push_back(atoms[next++]);
      } while (next < atoms.size() && prod != d);
      if (prod != d) return false;
      r.push_back(ax);
    }
    while (next < atoms.size())
      if (atoms[next++].dim.const_value() != 1) return false;
    st.axes = r;
    return true;
  }
  return false;
}

}  // namespace

std::vector<Source> trace_operand(const Graph& g, Analysis& a, const std::string& operand, Operand role) {
  const bool allow_scale = role != Operand::V;
  const bool allow_repeat = role != Operand::Q;
  // chain[k] consumes inputs[k] and produces inputs[k + 1]; inputs.back() is the operand.
  std::vector<const onnx::NodeProto*> chain;
  std::vector<std::string> inputs{operand};
  while (int(chain.size()) < kMaxChain) {
    const auto* p = g.producer(inputs.front());
    if (!p) break;
    std::string src = view_input(g, a, *p, allow_scale, allow_repeat);
    if (src.empty()) break;
    chain.insert(chain.begin(), p);
    inputs.insert(inputs.begin(), src);
  }
  std::vector<Source> found;
  for (size_t start = 0; start < inputs.size(); ++start) {
    const std::string& x = inputs[start];
    auto dims = a.shape(x);
    auto dt = a.dtype(x);
    if (!dims || !dt || dims->size() != 4 || !is_float_type(*dt)) continue;
    State st;
    st.dtype = *dt;
    for (size_t k = 0; k < 4; ++k) st.axes.push_back(Axis{Atom{int(k), (*dims)[k], false}});
    bool ok = true;
    for (size_t k = start; k < chain.size() && ok; ++k) ok = apply(a, *chain[k], inputs[k], st);
    if (!ok || st.axes.size() != 4) continue;
    // Operand axes: batch 0, heads 1, then (seq, dim) or (dim, seq).
    const size_t s_ax = role == Operand::KT ? 3 : 2, d_ax = role == Operand::KT ? 2 : 3;
    auto single = [&](size_t ax) -> int {
      const Axis& v = st.axes[ax];
      return v.size() == 1 && !v[0].repeated ? v[0].role : -1;
    };
    const int rb = single(0), rs = single(s_ax), rd = single(d_ax);
    int rh = -1;
    int64_t rep = 1;
    const Axis& h = st.axes[1];
    if (h.size() == 1 && !h[0].repeated) {
      rh = h[0].role;
    } else if (h.size() == 1 && h[0].repeated && allow_repeat) {  // one kv head, broadcast (MQA)
      rh = h[0].role;
      auto c = h[0].dim.const_value();
      if (!c) continue;
      rep = *c;
    } else if (h.size() == 2 && !h[0].repeated && h[1].repeated && allow_repeat) {
      rh = h[0].role;  // kv head outside, repeat inside: query head h reads kv head h / rep
      auto c = h[1].dim.const_value();
      if (!c) continue;
      rep = *c;
    } else {
      continue;
    }
    if (rb < 0 || rs < 0 || rd < 0 || rh < 0) continue;
    Source s;
    if (rb == 0 && rs == 1 && rh == 2 && rd == 3) s.layout = "bshd";
    else if (rb == 0 && rh == 1 && rs == 2 && rd == 3) s.layout = "bhsd";
    else continue;
    s.tensor = x;
    s.dtype = *dt;
    s.dims = *dims;
    s.batch = (*dims)[size_t(rb)];
    s.seq = (*dims)[size_t(rs)];
    s.heads = (*dims)[size_t(rh)];
    s.head_dim = (*dims)[size_t(rd)];
    s.rep = rep;
    s.scale = st.scale;
    s.distance = int(chain.size() - start);
    // The operand's dtype must be the one the chain ends with (a Cast may change it).
    if (st.dtype != a.dtype(operand).value_or(0)) continue;
    found.push_back(s);
  }
  return found;
}

std::vector<Sink> trace_output(const Graph& g, Analysis& a, const std::string& out) {
  std::vector<Sink> sinks;
  auto dims = a.shape(out);
  auto dt = a.dtype(out);
  if (!dims || !dt || dims->size() != 4) return sinks;
  State st;
  st.dtype = *dt;
  for (size_t k = 0; k < 4; ++k) st.axes.push_back(Axis{Atom{int(k), (*dims)[k], false}});
  std::string t = out;
  for (int dist = 0; dist < kMaxChain; ++dist) {
    if (st.axes.size() == 4) {
      bool single = true;
      std::vector<int> roles;
      for (const auto& ax : st.axes) {
        single &= ax.size() == 1 && !ax[0].repeated;
        roles.push_back(ax.empty() ? -1 : ax[0].role);
      }
      if (single && roles == std::vector<int>{0, 2, 1, 3}) sinks.push_back({t, "bshd", st.dtype, dist});
      if (single && roles == std::vector<int>{0, 1, 2, 3}) sinks.push_back({t, "bhsd", st.dtype, dist});
    }
    const auto& cons = g.consumers(t);
    if (cons.size() != 1 || g.is_graph_output(t)) break;
    const auto& n = g.node(cons[0]);
    if (!is_default(n) || n.output_size() < 1) break;
    const std::string& op = n.op_type();
    if (op != "Transpose" && op != "Reshape" && op != "Cast" && op != "Identity") break;
    if (n.input(0) != t) break;
    if (op == "Cast") {
      auto to = a.dtype(n.output(0));
      if (!to || !is_float_type(*to)) break;
    }
    if (!apply(a, n, t, st)) break;
    t = n.output(0);
  }
  return sinks;
}

}  // namespace fa_onnx
