#include "fields.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace fa_trt {

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;

namespace {

const char* type_name(PluginFieldType t) {
  switch (t) {
    case PluginFieldType::kFLOAT16: return "kFLOAT16";
    case PluginFieldType::kFLOAT32: return "kFLOAT32";
    case PluginFieldType::kFLOAT64: return "kFLOAT64";
    case PluginFieldType::kINT8: return "kINT8";
    case PluginFieldType::kINT16: return "kINT16";
    case PluginFieldType::kINT32: return "kINT32";
    case PluginFieldType::kCHAR: return "kCHAR";
    case PluginFieldType::kDIMS: return "kDIMS";
    case PluginFieldType::kUNKNOWN: return "kUNKNOWN";
    case PluginFieldType::kBF16: return "kBF16";
    case PluginFieldType::kINT64: return "kINT64";
    default: return "another type";
  }
}

std::string known_names() {
  std::string s;
  for (const auto& f : kFieldSpecs) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

bool fail(std::string* error, const std::string& msg) {
  *error = msg;
  return false;
}

bool read_int(const PluginField& f, int32_t* out, std::string* error) {
  const std::string name = f.name;
  if (f.length != 1)
    return fail(error, "field " + name + " has length " + std::to_string(f.length) + "; expected one integer");
  int64_t v;
  if (f.type == PluginFieldType::kINT32) {
    int32_t x;
    std::memcpy(&x, f.data, sizeof x);
    v = x;
  } else if (f.type == PluginFieldType::kINT64) {
    std::memcpy(&v, f.data, sizeof v);
  } else {
    return fail(error, "field " + name + " has type " + type_name(f.type) + "; expected kINT32 (or kINT64)");
  }
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    return fail(error, "field " + name + "=" + std::to_string(v) + " does not fit in int32");
  *out = int32_t(v);
  return true;
}

bool read_float(const PluginField& f, float* out, std::string* error) {
  const std::string name = f.name;
  if (f.length != 1)
    return fail(error, "field " + name + " has length " + std::to_string(f.length) + "; expected one number");
  if (f.type == PluginFieldType::kFLOAT32) {
    std::memcpy(out, f.data, sizeof *out);
  } else if (f.type == PluginFieldType::kFLOAT64) {
    double x;
    std::memcpy(&x, f.data, sizeof x);
    *out = float(x);
  } else {
    return fail(error, "field " + name + " has type " + type_name(f.type) + "; expected kFLOAT32 (or kFLOAT64)");
  }
  return true;
}

bool read_layout(const PluginField& f, Layout* out, std::string* error) {
  if (f.type != PluginFieldType::kCHAR)
    return fail(error, std::string("field layout has type ") + type_name(f.type) + "; expected kCHAR (a string)");
  if (f.length < 0) return fail(error, "field layout has length " + std::to_string(f.length));
  // The bytes up to the first NUL within the length (the ONNX parser counts the NUL in it).
  const char* s = static_cast<const char*>(f.data);
  const std::string v(s, strnlen(s, size_t(f.length)));
  for (Layout l : {Layout::Bshd, Layout::Bhsd, Layout::PackedQkv})
    if (v == layout_name(l)) {
      *out = l;
      return true;
    }
  return fail(error, "field layout='" + v + "' must be one of bshd, bhsd, packed_qkv");
}

}  // namespace

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Bshd: return "bshd";
    case Layout::Bhsd: return "bhsd";
    case Layout::PackedQkv: return "packed_qkv";
  }
  return "?";
}

bool Config::operator==(const Config& o) const {
  // Floats compared by bits: a round trip must give back exactly what was written.
  return causal == o.causal && window_left == o.window_left && window_right == o.window_right &&
         std::memcmp(&softcap, &o.softcap, sizeof softcap) == 0 &&
         std::memcmp(&scale, &o.scale, sizeof scale) == 0 && num_heads == o.num_heads &&
         num_kv_heads == o.num_kv_heads && layout == o.layout;
}

std::string Config::describe() const {
  std::ostringstream s;
  s << "layout=" << layout_name(layout) << " causal=" << causal << " window=(" << window_left << ","
    << window_right << ") softcap=" << softcap << " scale=" << scale << " heads=" << num_heads << "/"
    << num_kv_heads;
  return s.str();
}

bool check_config(const Config& c, std::string* error) {
  if (c.causal != 0 && c.causal != 1)
    return fail(error, "field causal=" + std::to_string(c.causal) + " must be 0 or 1");
  if (c.window_left < -1)
    return fail(error, "field window_left=" + std::to_string(c.window_left) + " must be >= -1 (-1: unbounded)");
  if (c.window_right < -1)
    return fail(error, "field window_right=" + std::to_string(c.window_right) + " must be >= -1 (-1: unbounded)");
  if (!std::isfinite(c.softcap) || c.softcap < 0)
    return fail(error, "field softcap=" + std::to_string(c.softcap) + " must be finite and >= 0 (0: off)");
  if (!std::isfinite(c.scale))
    return fail(error, "field scale=" + std::to_string(c.scale) + " must be finite (0: 1/sqrt(head_dim))");
  if (c.num_heads < 0)
    return fail(error, "field num_heads=" + std::to_string(c.num_heads) + " must be >= 0 (0: from q's shape)");
  if (c.num_kv_heads < 0)
    return fail(error, "field num_kv_heads=" + std::to_string(c.num_kv_heads) + " must be >= 0 (0: from k's shape)");
  if (c.num_heads > 0 && c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads != 0)
    return fail(error, "field num_kv_heads=" + std::to_string(c.num_kv_heads) + " must divide num_heads=" +
                           std::to_string(c.num_heads) + " (GQA / MQA)");
  if (c.layout == Layout::PackedQkv && (c.num_heads == 0 || c.num_kv_heads == 0))
    return fail(error, "layout packed_qkv needs num_heads and num_kv_heads > 0 (given " +
                           std::to_string(c.num_heads) + ", " + std::to_string(c.num_kv_heads) +
                           "): the packed input's last dimension is (num_heads + 2 num_kv_heads) * head_dim");
  return true;
}

bool parse_fields(const PluginFieldCollection* fc, Config* out, std::string* error) {
  *out = Config{};
  if (fc != nullptr) {
    if (fc->nbFields < 0) return fail(error, "the field collection has nbFields=" + std::to_string(fc->nbFields));
    if (fc->nbFields > 0 && fc->fields == nullptr)
      return fail(error, "the field collection has nbFields=" + std::to_string(fc->nbFields) + " but no fields");
    std::array<bool, kFieldSpecs.size()> seen{};
    for (int32_t k = 0; k < fc->nbFields; ++k) {
      const PluginField& f = fc->fields[k];
      if (f.name == nullptr) return fail(error, "field " + std::to_string(k) + " has no name");
      size_t i = 0;
      while (i < kFieldSpecs.size() && std::strcmp(f.name, kFieldSpecs[i].name) != 0) ++i;
      if (i == kFieldSpecs.size())
        return fail(error, std::string("unknown field '") + f.name + "' (the fields are " + known_names() + ")");
      if (seen[i]) return fail(error, std::string("field ") + f.name + " is given twice");
      seen[i] = true;
      if (f.data == nullptr && f.length != 0) return fail(error, std::string("field ") + f.name + " has no data");
      bool ok;
      const FieldSpec& spec = kFieldSpecs[i];
      if (spec.kind == FieldKind::String)
        ok = read_layout(f, &out->layout, error);
      else if (spec.kind == FieldKind::Int)
        ok = read_int(f, &(out->*spec.int_member), error);
      else
        ok = read_float(f, &(out->*spec.float_member), error);
      if (!ok) return false;
    }
  }
  return check_config(*out, error);
}

const PluginFieldCollection* field_names() {
  static const std::array<PluginField, kFieldSpecs.size()> fields = [] {
    std::array<PluginField, kFieldSpecs.size()> f{};
    for (size_t i = 0; i < kFieldSpecs.size(); ++i) {
      const auto kind = kFieldSpecs[i].kind;
      f[i] = PluginField(kFieldSpecs[i].name, nullptr,
                         kind == FieldKind::Int     ? PluginFieldType::kINT32
                         : kind == FieldKind::Float ? PluginFieldType::kFLOAT32
                                                    : PluginFieldType::kCHAR,
                         1);
    }
    return f;
  }();
  static const PluginFieldCollection collection{int32_t(fields.size()), fields.data()};
  return &collection;
}

const PluginFieldCollection* FieldWriter::write(const Config& c) {
  layout_ = layout_name(c.layout);
  for (size_t i = 0; i < kFieldSpecs.size(); ++i) {
    const FieldSpec& spec = kFieldSpecs[i];
    if (spec.kind == FieldKind::String) {
      fields_[i] = PluginField(spec.name, layout_.c_str(), PluginFieldType::kCHAR, int32_t(layout_.size() + 1));
    } else if (spec.kind == FieldKind::Int) {
      ints_[i] = c.*spec.int_member;
      fields_[i] = PluginField(spec.name, &ints_[i], PluginFieldType::kINT32, 1);
    } else {
      floats_[i] = c.*spec.float_member;
      fields_[i] = PluginField(spec.name, &floats_[i], PluginFieldType::kFLOAT32, 1);
    }
  }
  collection_ = PluginFieldCollection{int32_t(fields_.size()), fields_.data()};
  return &collection_;
}

}  // namespace fa_trt
