#include "graph.h"

#include <cmath>
#include <cstring>

namespace fa_onnx {

bool is_float_type(int32_t t) {
  return t == kFloat || t == kFloat16 || t == kBfloat16 || t == kDouble;
}

const char* type_name(int32_t t) {
  switch (t) {
    case kFloat: return "float32";
    case kFloat16: return "float16";
    case kBfloat16: return "bfloat16";
    case kDouble: return "float64";
    case kBool: return "bool";
    case kInt64: return "int64";
    case kInt32: return "int32";
    case kUint8: return "uint8";
    case kInt8: return "int8";
    default: return "other";
  }
}

namespace {

double half_to_double(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(mant + 1024, exp - 25);
}

double bf16_to_double(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

size_t elem_size(int32_t type) {
  switch (type) {
    case kFloat: case kInt32: return 4;
    case kFloat16: case kBfloat16: return 2;
    case kDouble: case kInt64: return 8;
    case kBool: case kUint8: case kInt8: return 1;
    default: return 0;
  }
}

double decode_one(int32_t type, const char* p) {
  switch (type) {
    case kFloat: { float v; std::memcpy(&v, p, 4); return v; }
    case kDouble: { double v; std::memcpy(&v, p, 8); return v; }
    case kFloat16: { uint16_t v; std::memcpy(&v, p, 2); return half_to_double(v); }
    case kBfloat16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_double(v); }
    case kInt64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
    case kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case kBool: case kUint8: return double(uint8_t(*p));
    case kInt8: return double(int8_t(*p));
    default: return NAN;
  }
}

}  // namespace

std::optional<ConstTensor> decode_tensor(const onnx::TensorProto& t, size_t max_elems) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
  ConstTensor c;
  c.type = t.data_type();
  size_t n = 1;
  for (auto d : t.dims()) {
    c.dims.push_back(d);
    n *= size_t(d);
  }
  if (n > max_elems || elem_size(c.type) == 0) return std::nullopt;
  c.values.reserve(n);
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    if (raw.size() != n * elem_size(c.type)) return std::nullopt;
    for (size_t i = 0; i < n; ++i) c.values.push_back(decode_one(c.type, raw.data() + i * elem_size(c.type)));
    return c;
  }
  switch (c.type) {
    case kFloat: for (float v : t.float_data()) c.values.push_back(v); break;
    case kDouble: for (double v : t.double_data()) c.values.push_back(v); break;
    case kInt64: for (int64_t v : t.int64_data()) c.values.push_back(double(v)); break;
    case kFloat16: for (int32_t v : t.int32_data()) c.values.push_back(half_to_double(uint16_t(v))); break;
    case kBfloat16: for (int32_t v : t.int32_data()) c.values.push_back(bf16_to_double(uint16_t(v))); break;
    default: for (int32_t v : t.int32_data()) c.values.push_back(v); break;
  }
  if (c.values.size() != n) return std::nullopt;
  return c;
}

std::optional<std::string> tensor_bytes(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
  if (t.has_raw_data()) return t.raw_data();
  std::string out;
  auto put = [&out](const void* p, size_t k) { out.append(static_cast<const char*>(p), k); };
  switch (t.data_type()) {
    case kFloat: for (float v : t.float_data()) put(&v, 4); break;
    case kFloat16: case kBfloat16:
      for (int32_t v : t.int32_data()) { uint16_t h = uint16_t(v); put(&h, 2); }
      break;
    default: return std::nullopt;
  }
  return out;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t attr_int(const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const auto* a = find_attr(n, name);
  return a ? a->i() : dflt;
}

float attr_float(const onnx::NodeProto& n, const std::string& name, float dflt) {
  const auto* a = find_attr(n, name);
  return a ? a->f() : dflt;
}

std::string attr_string(const onnx::NodeProto& n, const std::string& name, const std::string& dflt) {
  const auto* a = find_attr(n, name);
  return a ? a->s() : dflt;
}

std::optional<std::vector<int64_t>> attr_ints(const onnx::NodeProto& n, const std::string& name) {
  const auto* a = find_attr(n, name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

Graph::Graph(onnx::ModelProto& model) : model_(model) {
  for (const auto& op : model_.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = op.version();
  reindex();
}

void Graph::reindex() {
  producer_.clear();
  consumers_.clear();
  inits_.clear();
  declared_.clear();
  outputs_.clear();
  const auto& g = model_.graph();
  for (const auto& t : g.initializer()) {
    inits_[t.name()] = &t;
    names_.insert(t.name());
  }
  auto declare = [this](const onnx::ValueInfoProto& v) {
    names_.insert(v.name());
    if (v.type().has_tensor_type()) declared_[v.name()] = &v.type().tensor_type();
  };
  for (const auto& v : g.input()) declare(v);
  for (const auto& v : g.value_info()) declare(v);
  for (const auto& v : g.output()) {
    declare(v);
    outputs_.insert(v.name());
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    for (const auto& o : n.output()) {
      if (o.empty()) continue;
      producer_[o] = i;
      names_.insert(o);
    }
    for (const auto& in : node_inputs(n)) consumers_[in].push_back(i);
  }
}

namespace {
void collect_subgraph_inputs(const onnx::GraphProto& g, std::set<std::string>& out) {
  std::set<std::string> local;
  for (const auto& v : g.input()) local.insert(v.name());
  for (const auto& t : g.initializer()) local.insert(t.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) local.insert(o);
  for (const auto& n : g.node()) {
    for (const auto& in : n.input())
      if (!in.empty() && !local.count(in)) out.insert(in);
    for (const auto& a : n.attribute()) {
      std::set<std::string> inner;
      if (a.has_g()) collect_subgraph_inputs(a.g(), inner);
      for (const auto& sg : a.graphs()) collect_subgraph_inputs(sg, inner);
      for (const auto& x : inner)
        if (!local.count(x)) out.insert(x);
    }
  }
}
}  // namespace

std::vector<std::string> node_inputs(const onnx::NodeProto& n) {
  std::set<std::string> seen;
  std::vector<std::string> r;
  for (const auto& in : n.input())
    if (!in.empty() && seen.insert(in).second) r.push_back(in);
  for (const auto& a : n.attribute()) {
    std::set<std::string> inner;
    if (a.has_g()) collect_subgraph_inputs(a.g(), inner);
    for (const auto& sg : a.graphs()) collect_subgraph_inputs(sg, inner);
    for (const auto& x : inner)
      if (seen.insert(x).second) r.push_back(x);
  }
  return r;
}

const onnx::NodeProto* Graph::producer(const std::string& tensor) const {
  int i = producer_index(tensor);
  return i < 0 ? nullptr : &model_.graph().node(i);
}

int Graph::producer_index(const std::string& tensor) const {
  auto it = producer_.find(tensor);
  return it == producer_.end() ? -1 : it->second;
}

const std::vector<int>& Graph::consumers(const std::string& tensor) const {
  static const std::vector<int> none;
  auto it = consumers_.find(tensor);
  return it == consumers_.end() ? none : it->second;
}

const onnx::TensorProto* Graph::initializer(const std::string& name) const {
  auto it = inits_.find(name);
  return it == inits_.end() ? nullptr : it->second;
}

const onnx::TensorProto* Graph::constant_proto(const std::string& name) const {
  if (const auto* t = initializer(name)) return t;
  const auto* p = producer(name);
  if (p && p->op_type() == "Constant" && p->domain().empty()) {
    const auto* a = find_attr(*p, "value");
    if (a && a->has_t()) return &a->t();
  }
  return nullptr;
}

const onnx::TypeProto_Tensor* Graph::declared_type(const std::string& name) const {
  auto it = declared_.find(name);
  return it == declared_.end() ? nullptr : it->second;
}

std::string Graph::fresh_name(const std::string& base) {
  std::string n;
  do {
    n = base + "_fa" + std::to_string(counter_++);
  } while (names_.count(n));
  names_.insert(n);
  return n;
}

}  // namespace fa_onnx
