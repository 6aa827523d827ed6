// The plugin's attributes: the fields of fa-onnx-fuse's FlashAttention node (tools/onnx-fuse/fuse.h),
// read from a TensorRT PluginFieldCollection and written back for serialisation.
//
// One table (kFieldSpecs) names every field, its type and its default; the creator advertises it
// (getFieldNames), parse_fields reads it and FieldWriter writes it, so the three cannot drift.
// TensorRT's ONNX parser turns the node's attributes into fields by type: INT -> kINT32 (length
// 1), FLOAT -> kFLOAT32, STRING -> kCHAR (its bytes plus a NUL). Those are what FieldWriter
// writes; parse_fields also takes kINT64 / kFLOAT64 and a string without its NUL, for callers
// that build the collection by hand.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <NvInferRuntime.h>

namespace fa_trt {

enum class Layout : int32_t {
  Bshd,       // q (b, s, h, d), k / v (b, s, h_kv, d); out (b, s, h, d)
  Bhsd,       // q (b, h, s, d), k / v (b, h_kv, s, d); out (b, h, s, d)
  PackedQkv,  // one input (b, s, (h + 2 h_kv) d): Q heads, then K heads, then V heads; out (b, s, h, d)
};

const char* layout_name(Layout l);

struct Config {
  int32_t causal = 0;         // 0 / 1: bottom-right aligned, as the library's C ABI
  int32_t window_left = -1;   // -1: unbounded
  int32_t window_right = -1;  // -1: unbounded
  float softcap = 0.f;        // 0: off
  float scale = 0.f;          // 0: 1 / sqrt(head_dim)
  int32_t num_heads = 0;      // 0: from q's shape (required by packed_qkv)
  int32_t num_kv_heads = 0;   // 0: from k's shape (required by packed_qkv)
  Layout layout = Layout::Bshd;

  int32_t nb_inputs() const { return layout == Layout::PackedQkv ? 1 : 3; }
  bool operator==(const Config& o) const;
  // "layout=bshd causal=1 window=(-1,0) softcap=0 scale=0.125 heads=8/2" (heads 0 = from shapes).
  std::string describe() const;
};

enum class FieldKind { Int, Float, String };
struct FieldSpec {
  const char* name;
  FieldKind kind;
  int32_t Config::*int_member;  // kind Int
  float Config::*float_member;  // kind Float (the one String field is the layout)
};
inline constexpr std::array<FieldSpec, 8> kFieldSpecs{{
    {"causal", FieldKind::Int, &Config::causal, nullptr},
    {"window_left", FieldKind::Int, &Config::window_left, nullptr},
    {"window_right", FieldKind::Int, &Config::window_right, nullptr},
    {"softcap", FieldKind::Float, nullptr, &Config::softcap},
    {"scale", FieldKind::Float, nullptr, &Config::scale},
    {"num_heads", FieldKind::Int, &Config::num_heads, nullptr},
    {"num_kv_heads", FieldKind::Int, &Config::num_kv_heads, nullptr},
    {"layout", FieldKind::String, nullptr, nullptr},
}};

// Reads fc into *out, starting from the defaults; a field left out keeps its default, and fc may
// be null (all defaults). On a bad collection returns false with *error naming the field, its
// value and what was expected; *out is then unspecified.
bool parse_fields(const nvinfer1::PluginFieldCollection* fc, Config* out, std::string* error);

// Checks the values of c (what parse_fields checks after reading): windows >= -1, causal 0 / 1,
// softcap finite >= 0, scale finite, heads >= 0 with num_kv_heads dividing num_heads, and both
// heads given for packed_qkv.
bool check_config(const Config& c, std::string* error);

// The collection that names the fields (data null), for IPluginCreatorV3One::getFieldNames.
const nvinfer1::PluginFieldCollection* field_names();

// A Config as fields, in kFieldSpecs' order and types kINT32 / kFLOAT32 / kCHAR (with its NUL).
// The collection points into this object: it lives as long as the writer and until the next
// write().
class FieldWriter {
 public:
  FieldWriter() = default;
  // A copy points into nothing of the original's (its collection is rebuilt by write()).
  FieldWriter(const FieldWriter&) {}
  FieldWriter& operator=(const FieldWriter&) { return *this; }
  const nvinfer1::PluginFieldCollection* write(const Config& c);

 private:
  std::array<int32_t, kFieldSpecs.size()> ints_{};
  std::array<float, kFieldSpecs.size()> floats_{};
  std::string layout_;
  std::array<nvinfer1::PluginField, kFieldSpecs.size()> fields_{};
  nvinfer1::PluginFieldCollection collection_{};
};

}  // namespace fa_trt
