// Applying the plans: the FlashAttention node, the Q / K / V projection packing, removal of the
// nodes that died, and a topological order for the result.
#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "fuse.h"
#include "match.h"

namespace fa_onnx {

std::string describe_producer(const Graph& g, const std::string& t);

namespace {

constexpr const char* kDomain = "flashattn";

bool is_default(const onnx::NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

bool single_use(const Graph& g, const std::string& t) {
  return g.consumers(t).size() == 1 && !g.is_graph_output(t);
}

void add_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void add_attr(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void add_attr(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// ---- Q / K / V projection packing ------------------------------------------------------------

struct Projection {
  std::string x;                 // the input the projection reads
  const onnx::TensorProto* w = nullptr;  // (C, N)
  const onnx::TensorProto* b = nullptr;  // (N) or absent
  int64_t n = 0;
};

// X = Reshape(P) with P (B, S, N) -> X (B, S, H, D); returns P.
std::string unreshape(const Graph& g, Analysis& a, const Source& s, std::string& why) {
  const auto* r = g.producer(s.tensor);
  if (!r || r->op_type() != "Reshape" || !is_default(*r)) {
    why = describe_producer(g, s.tensor) + " is not a Reshape of a projection";
    return {};
  }
  const std::string& p = r->input(0);
  auto ps = a.shape(p);
  if (!ps || ps->size() != 3 || (*ps)[0] != s.dims[0] || (*ps)[1] != s.dims[1] ||
      (*ps)[2] != s.dims[2] * s.dims[3]) {
    why = "'" + s.tensor + "' is not a (batch, seq, heads*head_dim) projection split into heads";
    return {};
  }
  if (!single_use(g, s.tensor) || !single_use(g, p)) {
    why = "a projection output is used elsewhere";
    return {};
  }
  return p;
}

std::optional<Projection> projection(const Graph& g, Analysis& a, const std::string& p, std::string& why) {
  Projection pr;
  const auto* n = g.producer(p);
  std::string mm_out = p;
  if (n && n->op_type() == "Add" && is_default(*n)) {
    for (int k = 0; k < 2; ++k) {
      const auto* b = g.initializer(n->input(k));
      const auto* other = g.producer(n->input(1 - k));
      if (b && b->dims_size() == 1 && other && other->op_type() == "MatMul") {
        pr.b = b;
        mm_out = n->input(1 - k);
      }
    }
    if (!pr.b) {
      why = "'" + p + "' adds something other than a bias";
      return std::nullopt;
    }
    if (!single_use(g, mm_out)) {
      why = "a projection MatMul's output is used elsewhere";
      return std::nullopt;
    }
    n = g.producer(mm_out);
  }
  if (!n || n->op_type() != "MatMul" || !is_default(*n)) {
    why = "'" + p + "' is not a MatMul projection";
    return std::nullopt;
  }
  pr.x = n->input(0);
  pr.w = g.initializer(n->input(1));
  if (!pr.w || pr.w->dims_size() != 2) {
    why = "a projection's weight is not a 2-D initializer";
    return std::nullopt;
  }
  pr.n = pr.w->dims(1);
  if (pr.b && pr.b->dims(0) != pr.n) {
    why = "a projection's bias does not match its weight";
    return std::nullopt;
  }
  (void)a;
  return pr;
}

// Concatenates the weights (C, N_i) along N into one initializer; biases likewise (zeros where
// a projection has none).
bool concat_weights(Graph& g, const std::vector<Projection>& ps, std::string& w_name, std::string& b_name,
                    std::string& why) {
  const int32_t type = ps[0].w->data_type();
  const int64_t rows = ps[0].w->dims(0);
  const size_t esz = type == kFloat ? 4 : 2;
  std::vector<std::string> wb;
  bool any_bias = false;
  for (const auto& p : ps) {
    if (p.w->data_type() != type || p.w->dims(0) != rows || (p.b && p.b->data_type() != type)) {
      why = "the projections' weights differ in type or input size";
      return false;
    }
    auto bytes = tensor_bytes(*p.w);
    if (!bytes) {
      why = "a projection's weight is stored externally (not packed)";
      return false;
    }
    wb.push_back(*bytes);
    any_bias |= p.b != nullptr;
  }
  int64_t total = 0;
  for (const auto& p : ps) total += p.n;
  std::string packed(size_t(rows * total) * esz, '\0');
  for (int64_t r = 0; r < rows; ++r) {
    size_t off = size_t(r * total) * esz;
    for (size_t k = 0; k < ps.size(); ++k) {
      const size_t len = size_t(ps[k].n) * esz;
      packed.replace(off, len, wb[k], size_t(r) * len, len);
      off += len;
    }
  }
  auto* w = g.proto().add_initializer();
  w_name = g.fresh_name("qkv_weight");
  w->set_name(w_name);
  w->set_data_type(type);
  w->add_dims(rows);
  w->add_dims(total);
  w->set_raw_data(packed);
  if (!any_bias) return true;
  std::string bias(size_t(total) * esz, '\0');
  size_t off = 0;
  for (const auto& p : ps) {
    if (p.b) {
      auto bytes = tensor_bytes(*p.b);
      if (!bytes) {
        why = "a projection's bias is stored externally";
        return false;
      }
      bias.replace(off, bytes->size(), *bytes);
    }
    off += size_t(p.n) * esz;
  }
  auto* b = g.proto().add_initializer();
  b_name = g.fresh_name("qkv_bias");
  b->set_name(b_name);
  b->set_data_type(type);
  b->add_dims(total);
  b->set_raw_data(bias);
  return true;
}

// Returns the packed tensor the node reads, adding nodes to `added`; empty (and `why`) when the
// projections cannot be packed.
std::string pack(Graph& g, Analysis& a, const Plan& p, std::vector<onnx::NodeProto>& added,
                 std::string& how, std::string& why) {
  if (p.layout != "bshd") {
    why = "the node reads (batch, heads, seq, head_dim) tensors (something between the projections "
          "and attention, e.g. rotary embeddings, works in that layout)";
    return {};
  }
  const Source* src[3] = {&p.q, &p.k, &p.v};
  std::string flat[3];
  for (int i = 0; i < 3; ++i) {
    flat[i] = unreshape(g, a, *src[i], why);
    if (flat[i].empty()) return {};
    if (a.dtype(flat[i]) != p.dtype) {
      why = "a projection's type differs";
      return {};
    }
  }
  // Already packed: one Split into q, k, v (GPT-2's c_attn).
  const auto* sp = g.producer(flat[0]);
  if (sp && sp->op_type() == "Split" && is_default(*sp) && sp->output_size() == 3 &&
      sp->output(0) == flat[0] && sp->output(1) == flat[1] && sp->output(2) == flat[2]) {
    auto in_shape = a.shape(sp->input(0));
    int64_t axis = attr_int(*sp, "axis", 0);
    if (in_shape && axis < 0) axis += int64_t(in_shape->size());
    if (!in_shape || in_shape->size() != 3 || axis != 2) {
      why = "the Split is not along the last axis of a (batch, seq, features) tensor";
      return {};
    }
    how = "read in place from the Split's input (already one packed projection)";
    return sp->input(0);
  }
  std::vector<Projection> ps;
  for (int i = 0; i < 3; ++i) {
    auto pr = projection(g, a, flat[i], why);
    if (!pr) return {};
    ps.push_back(*pr);
  }
  if (ps[0].x != ps[1].x || ps[0].x != ps[2].x) {
    why = "Q, K and V are projections of different inputs (cross-attention)";
    return {};
  }
  if (a.dtype(ps[0].x) != p.dtype) {
    why = "the projections' input type differs from Q's";
    return {};
  }
  std::string w_name, b_name;
  if (!concat_weights(g, ps, w_name, b_name, why)) return {};
  onnx::NodeProto mm;
  mm.set_op_type("MatMul");
  mm.set_name(g.fresh_name("qkv_proj"));
  mm.add_input(ps[0].x);
  mm.add_input(w_name);
  std::string out = g.fresh_name("qkv");
  mm.add_output(b_name.empty() ? out : out + "_mm");
  added.push_back(mm);
  if (!b_name.empty()) {
    onnx::NodeProto add;
    add.set_op_type("Add");
    add.set_name(g.fresh_name("qkv_bias_add"));
    add.add_input(out + "_mm");
    add.add_input(b_name);
    add.add_output(out);
    added.push_back(add);
  }
  how = "packed from 3 projections into one MatMul";
  return out;
}

// ---- liveness and order ----------------------------------------------------------------------

struct Nodes {
  std::vector<onnx::NodeProto> list;  // original nodes first, then added ones
  std::vector<bool> alive;
  std::vector<double> key;            // order preference
};

std::set<size_t> live_set(const onnx::GraphProto& gp, const Nodes& ns) {
  std::map<std::string, size_t> prod;
  for (size_t i = 0; i < ns.list.size(); ++i)
    if (ns.alive[i])
      for (const auto& o : ns.list[i].output())
        if (!o.empty()) prod[o] = i;
  std::set<size_t> live;
  std::vector<std::string> work;
  for (const auto& o : gp.output()) work.push_back(o.name());
  while (!work.empty()) {
    std::string t = work.back();
    work.pop_back();
    auto it = prod.find(t);
    if (it == prod.end() || !live.insert(it->second).second) continue;
    for (const auto& in : node_inputs(ns.list[it->second])) work.push_back(in);
  }
  return live;
}

bool toposort(onnx::GraphProto& gp, const Nodes& ns) {
  std::set<std::string> avail;
  for (const auto& v : gp.input()) avail.insert(v.name());
  for (const auto& t : gp.initializer()) avail.insert(t.name());
  std::vector<size_t> idx;
  for (size_t i = 0; i < ns.list.size(); ++i)
    if (ns.alive[i]) idx.push_back(i);
  std::map<std::string, std::vector<size_t>> waiting;
  std::map<size_t, int> missing;
  using Item = std::pair<double, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  std::set<std::string> produced;
  for (size_t i : idx)
    for (const auto& o : ns.list[i].output()) produced.insert(o);
  for (size_t i : idx) {
    int m = 0;
    for (const auto& in : node_inputs(ns.list[i]))
      if (!avail.count(in) && produced.count(in)) {
        waiting[in].push_back(i);
        ++m;
      }
    missing[i] = m;
    if (m == 0) ready.push({ns.key[i], i});
  }
  std::vector<onnx::NodeProto> out;
  while (!ready.empty()) {
    size_t i = ready.top().second;
    ready.pop();
    out.push_back(ns.list[i]);
    for (const auto& o : ns.list[i].output()) {
      auto it = waiting.find(o);
      if (it == waiting.end()) continue;
      for (size_t j : it->second)
        if (--missing[j] == 0) ready.push({ns.key[j], j});
      waiting.erase(it);
    }
  }
  if (out.size() != idx.size()) return false;
  gp.clear_node();
  for (auto& n : out) *gp.add_node() = std::move(n);
  return true;
}

std::string anchor_name(const onnx::NodeProto& n) {
  return n.name().empty() ? n.op_type() + " -> " + n.output(0) : n.name();
}

}  // namespace

std::string describe_producer(const Graph& g, const std::string& t) {
  const auto* p = g.producer(t);
  return "'" + t + "'" + (p ? " (from " + p->op_type() + ")" : "");
}

std::vector<Outcome> fuse_model(onnx::ModelProto& model, const Options& opt) {
  Graph g(model);
  Analysis a(g);
  std::vector<Outcome> outcomes;
  std::vector<Plan> plans;
  std::vector<size_t> plan_outcome;
  for (int i = 0; i < g.node_count(); ++i) {
    const auto& n = g.node(i);
    if (!is_default(n) || (n.op_type() != "Softmax" && n.op_type() != "Attention")) continue;
    Outcome o;
    o.anchor = anchor_name(n);
    o.pattern = n.op_type() == "Softmax" ? "matmul-softmax-matmul" : "Attention";
    try {
      Plan p = n.op_type() == "Softmax" ? match_softmax(g, a, i) : match_attention_node(g, a, i);
      p.outcome.anchor = o.anchor;
      p.outcome.fused = true;
      plan_outcome.push_back(outcomes.size());
      outcomes.push_back(p.outcome);
      plans.push_back(p);
    } catch (const Refusal& r) {
      o.reason = r.what();
      outcomes.push_back(o);
    }
  }
  if (plans.empty()) return outcomes;

  Nodes ns;
  for (int i = 0; i < g.node_count(); ++i) {
    ns.list.push_back(g.node(i));
    ns.alive.push_back(true);
    ns.key.push_back(i);
  }
  std::set<size_t> live_before = live_set(g.proto(), ns);
  std::set<int> claimed;
  for (size_t pi = 0; pi < plans.size(); ++pi) {
    Plan& p = plans[pi];
    Outcome& o = outcomes[plan_outcome[pi]];
    if (p.sink_producer < 0 || claimed.count(p.sink_producer)) {
      o.fused = false;
      o.reason = "its output overlaps another fused subgraph";
      continue;
    }
    claimed.insert(p.sink_producer);
    const double key = p.sink_producer;
    std::vector<onnx::NodeProto> added;
    std::vector<std::string> inputs{p.q.tensor, p.k.tensor, p.v.tensor};
    std::string layout = p.layout;
    if (opt.pack_qkv) {
      std::string how, why;
      std::string packed = pack(g, a, p, added, how, why);
      if (!packed.empty()) {
        inputs = {packed};
        layout = "packed_qkv";
        o.packing = how;
      } else {
        o.packing = "not packed: " + why;
      }
    }
    onnx::NodeProto fa;
    fa.set_op_type("FlashAttention");
    fa.set_domain(kDomain);
    fa.set_name(g.fresh_name("FlashAttention"));
    for (const auto& in : inputs) fa.add_input(in);
    std::string cur = g.fresh_name("attn_out");
    fa.add_output(cur);
    add_attr(fa, "causal", o.causal);
    add_attr(fa, "window_left", o.window_left);
    add_attr(fa, "window_right", o.window_right);
    add_attr(fa, "softcap", float(o.softcap));
    add_attr(fa, "scale", float(o.scale));
    add_attr(fa, "num_heads", o.num_heads);
    add_attr(fa, "num_kv_heads", o.num_kv_heads);
    add_attr(fa, "layout", layout);
    o.layout = layout;
    o.node = fa.name();
    added.push_back(fa);
    if (p.sink_transpose) {
      onnx::NodeProto tr;
      tr.set_op_type("Transpose");
      tr.set_name(g.fresh_name("attn_out_transpose"));
      tr.add_input(cur);
      cur = g.fresh_name("attn_out_bhsd");
      tr.add_output(cur);
      auto* perm = tr.add_attribute();
      perm->set_name("perm");
      perm->set_type(onnx::AttributeProto::INTS);
      for (int64_t x : {0, 2, 1, 3}) perm->add_ints(x);
      added.push_back(tr);
    }
    if (p.sink_dtype != p.dtype) {
      onnx::NodeProto c;
      c.set_op_type("Cast");
      c.set_name(g.fresh_name("attn_out_cast"));
      c.add_input(cur);
      cur = g.fresh_name("attn_out_cast");
      c.add_output(cur);
      add_attr(c, "to", int64_t(p.sink_dtype));
      added.push_back(c);
    }
    // The last added node writes the sink itself.
    *added.back().mutable_output(0) = p.sink;
    ns.alive[size_t(p.sink_producer)] = false;
    for (size_t k = 0; k < added.size(); ++k) {
      ns.list.push_back(added[k]);
      ns.alive.push_back(true);
      ns.key.push_back(key - 0.5 + 0.01 * double(k));
    }
    // Nodes that this rewrite left without a use.
    std::set<size_t> live = live_set(g.proto(), ns);
    o.removed_ops.push_back(ns.list[size_t(p.sink_producer)].op_type());
    for (size_t i : live_before)
      if (ns.alive[i] && !live.count(i)) {
        ns.alive[i] = false;
        o.removed_ops.push_back(ns.list[i].op_type());
      }
    for (size_t i = 0; i < ns.list.size(); ++i)
      if (ns.alive[i] && i >= size_t(g.node_count())) live_before.insert(i);
  }
  if (!toposort(g.proto(), ns)) throw std::runtime_error("internal error: the rewritten graph has a cycle");
  // value_info of tensors that no longer exist
  std::set<std::string> names;
  for (const auto& n : g.proto().node())
    for (const auto& o : n.output()) names.insert(o);
  auto* vi = g.proto().mutable_value_info();
  for (int i = vi->size() - 1; i >= 0; --i)
    if (!names.count(vi->Get(i).name())) vi->DeleteSubrange(i, 1);
  bool has_domain = false;
  for (const auto& op : model.opset_import()) has_domain |= op.domain() == kDomain;
  if (!has_domain) {
    auto* op = model.add_opset_import();
    op->set_domain(kDomain);
    op->set_version(1);
  }
  return outcomes;
}

}  // namespace fa_onnx
