// The TensorRT plugin (plugins/tensorrt) through TensorRT's interfaces, without TensorRT: the
// library loaded as IPluginRegistry::loadLibrary loads it, creators, fields and their round trip,
// the build-time answers (formats, types, symbolic output shapes, configuration) and the errors
// of each phase through TensorRT's routes (the logger finder's ILogger, a context's
// IErrorRecorder). None of this needs a GPU; test_plugin_gpu.cpp runs enqueue on one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "flashattn/flashattn.h"
#include "trt_support.h"

namespace fa_trt_test {
namespace {

using nvinfer1::DataType;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::PluginFieldType;
using nvinfer1::TensorFormat;

// The attributes fa-onnx-fuse writes on its FlashAttention node (tools/onnx-fuse/fuse.h) and the
// field types TensorRT's ONNX parser turns them into (INT -> kINT32, FLOAT -> kFLOAT32,
// STRING -> kCHAR): the node maps onto the plugin only if the creator asks for exactly these.
const std::vector<std::pair<std::string, PluginFieldType>> kNodeAttributes = {
    {"causal", PluginFieldType::kINT32},      {"window_left", PluginFieldType::kINT32},
    {"window_right", PluginFieldType::kINT32}, {"softcap", PluginFieldType::kFLOAT32},
    {"scale", PluginFieldType::kFLOAT32},     {"num_heads", PluginFieldType::kINT32},
    {"num_kv_heads", PluginFieldType::kINT32}, {"layout", PluginFieldType::kCHAR},
};

Messages& messages() { return Library::get().messages; }

// A node as fa-onnx-fuse writes it.
Fields node_fields(const std::string& layout, int32_t causal, int32_t wl, int32_t wr, float softcap, float scale,
                   int32_t heads, int32_t kv_heads) {
  Fields f;
  f.i("causal", causal).i("window_left", wl).i("window_right", wr).f("softcap", softcap).f("scale", scale);
  f.i("num_heads", heads).i("num_kv_heads", kv_heads).s("layout", layout);
  return f;
}

PluginPtr make(Fields f, const char* ns = "flashattn", const char* layer = "attn0") {
  nvinfer1::IPluginCreatorV3One* c = creator(ns);
  if (!c) return nullptr;
  return PluginPtr(c->createPlugin(layer, f.collection(), nvinfer1::TensorRTPhase::kBUILD));
}

// A serialised field's value, decoded by its type.
struct Value {
  PluginFieldType type;
  int32_t length;
  std::vector<unsigned char> bytes;
  bool operator==(const Value& o) const { return type == o.type && length == o.length && bytes == o.bytes; }
};
std::map<std::string, Value> serialized(nvinfer1::IPluginV3* p) {
  std::map<std::string, Value> r;
  const nvinfer1::PluginFieldCollection* fc = runtime(p)->getFieldsToSerialize();
  for (int32_t i = 0; i < fc->nbFields; ++i) {
    const nvinfer1::PluginField& f = fc->fields[i];
    size_t size = f.type == PluginFieldType::kCHAR ? 1 : 4;  // the plugin writes kINT32 / kFLOAT32 / kCHAR
    const auto* b = static_cast<const unsigned char*>(f.data);
    r[f.name] = Value{f.type, f.length, std::vector<unsigned char>(b, b + size * size_t(f.length))};
  }
  return r;
}
int32_t int_field(const std::map<std::string, Value>& m, const std::string& name) {
  const Value& v = m.at(name);
  EXPECT_EQ(v.type, PluginFieldType::kINT32) << name;
  int32_t x;
  std::memcpy(&x, v.bytes.data(), sizeof x);
  return x;
}
float float_field(const std::map<std::string, Value>& m, const std::string& name) {
  const Value& v = m.at(name);
  EXPECT_EQ(v.type, PluginFieldType::kFLOAT32) << name;
  float x;
  std::memcpy(&x, v.bytes.data(), sizeof x);
  return x;
}
std::string string_field(const std::map<std::string, Value>& m, const std::string& name) {
  const Value& v = m.at(name);
  EXPECT_EQ(v.type, PluginFieldType::kCHAR) << name;
  EXPECT_EQ(v.bytes.back(), 0) << name << ": not NUL-terminated";
  return std::string(reinterpret_cast<const char*>(v.bytes.data()));
}

bool has_gpu() { return fa_cuda_device_count() > 0; }

// ---- the library and its creators -------------------------------------------------------------

TEST(TrtPlugin, LibraryExportsTheEntryPointsTensorRTLoads) {
  Library& lib = Library::get();
  ASSERT_NE(lib.handle, nullptr) << lib.error;
  ASSERT_NE(lib.get_creators, nullptr) << "getCreators is not exported";
  ASSERT_NE(lib.set_logger_finder, nullptr) << "setLoggerFinder is not exported";
  int32_t n = -1;
  nvinfer1::IPluginCreatorInterface* const* all = lib.get_creators(n);
  ASSERT_EQ(n, 2);
  std::set<std::string> namespaces;
  for (int32_t i = 0; i < n; ++i) {
    ASSERT_NE(all[i], nullptr);
    EXPECT_STREQ(all[i]->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE");
    auto* c = static_cast<nvinfer1::IPluginCreatorV3One*>(all[i]);
    EXPECT_STREQ(c->getPluginName(), "FlashAttention");
    EXPECT_STREQ(c->getPluginVersion(), "1");
    namespaces.insert(c->getPluginNamespace());
  }
  // Its own namespace, and the default one the ONNX parser searches for a node without
  // a plugin_namespace attribute.
  EXPECT_EQ(namespaces, (std::set<std::string>{"", "flashattn"}));
}

TEST(TrtPlugin, FieldNamesAreTheFusedNodesAttributes) {
  for (const char* ns : {"", "flashattn"}) {
    nvinfer1::IPluginCreatorV3One* c = creator(ns);
    ASSERT_NE(c, nullptr) << "namespace '" << ns << "'";
    const nvinfer1::PluginFieldCollection* fc = c->getFieldNames();
    ASSERT_NE(fc, nullptr);
    std::vector<std::pair<std::string, PluginFieldType>> got;
    for (int32_t i = 0; i < fc->nbFields; ++i) got.emplace_back(fc->fields[i].name, fc->fields[i].type);
    EXPECT_EQ(got, kNodeAttributes);
  }
}

TEST(TrtPlugin, CreatesFromTheParsersFieldsInEitherNamespace) {
  for (const char* ns : {"", "flashattn"}) {
    const size_t errors = messages().errors().size();
    PluginPtr p = make(node_fields("bshd", 1, -1, 0, 0.f, 0.125f, 8, 2), ns);
    ASSERT_NE(p, nullptr) << messages().last_error();
    EXPECT_EQ(messages().errors().size(), errors) << messages().last_error();
    EXPECT_STREQ(p->getInterfaceInfo().kind, "PLUGIN");
    ASSERT_NE(core(p.get()), nullptr);
    ASSERT_NE(build(p.get()), nullptr);
    ASSERT_NE(runtime(p.get()), nullptr);
    EXPECT_STREQ(core(p.get())->getPluginName(), "FlashAttention");
    EXPECT_STREQ(core(p.get())->getPluginVersion(), "1");
    EXPECT_STREQ(core(p.get())->getPluginNamespace(), ns);  // its creator's, for deserialisation
    EXPECT_EQ(build(p.get())->getNbOutputs(), 1);
    const std::string meta = build(p.get())->getMetadataString();
    EXPECT_NE(meta.find("causal=1"), std::string::npos) << meta;
    EXPECT_NE(meta.find("window=(-1,0)"), std::string::npos) << meta;
    EXPECT_NE(meta.find("heads=8/2"), std::string::npos) << meta;
  }
}

// ---- fields: round trip, defaults, refusals ----------------------------------------------------

struct FieldCase {
  std::string layout;
  int32_t causal, wl, wr;
  float softcap, scale;
  int32_t heads, kv_heads;
};

void PrintTo(const FieldCase& c, std::ostream* os) { *os << c.layout << " causal=" << c.causal; }

class TrtPluginFields : public ::testing::TestWithParam<FieldCase> {};

TEST_P(TrtPluginFields, RoundTripThroughSerialization) {
  const FieldCase& c = GetParam();
  PluginPtr p = make(node_fields(c.layout, c.causal, c.wl, c.wr, c.softcap, c.scale, c.heads, c.kv_heads));
  ASSERT_NE(p, nullptr) << messages().last_error();
  const auto first = serialized(p.get());
  ASSERT_EQ(first.size(), kNodeAttributes.size());
  EXPECT_EQ(int_field(first, "causal"), c.causal);
  EXPECT_EQ(int_field(first, "window_left"), c.wl);
  EXPECT_EQ(int_field(first, "window_right"), c.wr);
  EXPECT_EQ(float_field(first, "softcap"), c.softcap);
  EXPECT_EQ(float_field(first, "scale"), c.scale);
  EXPECT_EQ(int_field(first, "num_heads"), c.heads);
  EXPECT_EQ(int_field(first, "num_kv_heads"), c.kv_heads);
  EXPECT_EQ(string_field(first, "layout"), c.layout);

  // What the runtime does with a deserialised engine: the creator gets these very fields.
  nvinfer1::IPluginCreatorV3One* cr = creator("flashattn");
  PluginPtr again(cr->createPlugin("attn0", runtime(p.get())->getFieldsToSerialize(), nvinfer1::TensorRTPhase::kRUNTIME));
  ASSERT_NE(again, nullptr) << messages().last_error();
  EXPECT_EQ(serialized(again.get()), first);
  EXPECT_STREQ(build(again.get())->getMetadataString(), build(p.get())->getMetadataString());
  // clone() and attachToContext() keep them too.
  PluginPtr copy(p->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(serialized(copy.get()), first);
  Recorder rec;
  ResourceContext ctx;
  ctx.recorder = &rec;
  PluginPtr attached(runtime(p.get())->attachToContext(&ctx));
  ASSERT_NE(attached, nullptr);
  EXPECT_EQ(serialized(attached.get()), first);
  // The original's collection stays valid (and unchanged) after its copies wrote theirs.
  EXPECT_EQ(serialized(p.get()), first);
}

INSTANTIATE_TEST_SUITE_P(Nodes, TrtPluginFields,
                         ::testing::Values(FieldCase{"bshd", 0, -1, -1, 0.f, 0.f, 0, 0},
                                           FieldCase{"bshd", 1, -1, 0, 0.f, 0.125f, 8, 2},
                                           FieldCase{"bhsd", 0, 127, 0, 30.f, 0.0883883f, 4, 4},
                                           FieldCase{"bhsd", 0, 5, 7, 0.f, -0.5f, 6, 1},
                                           FieldCase{"packed_qkv", 1, 255, 0, 50.f, 0.25f, 4, 2},
                                           FieldCase{"packed_qkv", 0, -1, -1, 0.f, 1e-3f, 12, 12}),
                         [](const auto& info) { return std::to_string(info.index) + "_" + info.param.layout; });

TEST(TrtPlugin, FieldsLeftOutTakeTheNodesDefaults) {
  nvinfer1::IPluginCreatorV3One* c = creator("flashattn");
  ASSERT_NE(c, nullptr);
  Fields none;
  for (const nvinfer1::PluginFieldCollection* fc : {static_cast<const nvinfer1::PluginFieldCollection*>(nullptr),
                                                     none.collection()}) {
    PluginPtr p(c->createPlugin("defaults", fc, nvinfer1::TensorRTPhase::kBUILD));
    ASSERT_NE(p, nullptr) << messages().last_error();
    const auto m = serialized(p.get());
    EXPECT_EQ(int_field(m, "causal"), 0);
    EXPECT_EQ(int_field(m, "window_left"), -1);
    EXPECT_EQ(int_field(m, "window_right"), -1);
    EXPECT_EQ(float_field(m, "softcap"), 0.f);
    EXPECT_EQ(float_field(m, "scale"), 0.f);
    EXPECT_EQ(int_field(m, "num_heads"), 0);
    EXPECT_EQ(int_field(m, "num_kv_heads"), 0);
    EXPECT_EQ(string_field(m, "layout"), "bshd");
  }
}

TEST(TrtPlugin, TakesWiderTypesAndStringsWithoutTheirNul) {
  const int64_t wl = 64;
  const double scale = 0.5;
  Fields f;
  f.raw("window_left", PluginFieldType::kINT64, &wl, sizeof wl, 1)
      .raw("scale", PluginFieldType::kFLOAT64, &scale, sizeof scale, 1)
      .raw("layout", PluginFieldType::kCHAR, "bhsd", 4, 4);
  PluginPtr p = make(f);
  ASSERT_NE(p, nullptr) << messages().last_error();
  const auto m = serialized(p.get());
  EXPECT_EQ(int_field(m, "window_left"), 64);
  EXPECT_EQ(float_field(m, "scale"), 0.5f);
  EXPECT_EQ(string_field(m, "layout"), "bhsd");
}

struct Refusal {
  std::string name;
  std::function<Fields()> fields;
  std::string expected;  // in the message
};

void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

class TrtPluginRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(TrtPluginRefusal, CreatorReportsItAndReturnsNull) {
  const Refusal& r = GetParam();
  const size_t before = messages().errors().size();
  PluginPtr p = make(r.fields(), "flashattn", "node_7");
  EXPECT_EQ(p, nullptr);
  const auto errors = messages().errors();
  ASSERT_EQ(errors.size(), before + 1) << "exactly one error reported through the logger";
  EXPECT_NE(errors.back().find(r.expected), std::string::npos) << errors.back();
  EXPECT_EQ(errors.back().rfind("FlashAttention plugin (node_7): ", 0), 0u) << errors.back();
}

const int32_t kTwoInts[2] = {1, 2};
const int64_t kHuge = int64_t(1) << 40;
INSTANTIATE_TEST_SUITE_P(
    BadFields, TrtPluginRefusal,
    ::testing::Values(
        Refusal{"window_left_below_minus_one", [] { return node_fields("bshd", 0, -2, -1, 0, 0, 8, 2); },
                "window_left=-2 must be >= -1"},
        Refusal{"window_right_below_minus_one", [] { return node_fields("bshd", 0, -1, -5, 0, 0, 8, 2); },
                "window_right=-5 must be >= -1"},
        Refusal{"kv_heads_not_dividing", [] { return node_fields("bshd", 0, -1, -1, 0, 0, 8, 3); },
                "num_kv_heads=3 must divide num_heads=8"},
        Refusal{"negative_heads", [] { return node_fields("bshd", 0, -1, -1, 0, 0, -1, 1); }, "num_heads=-1"},
        Refusal{"causal_two", [] { return node_fields("bshd", 2, -1, -1, 0, 0, 8, 2); }, "causal=2 must be 0 or 1"},
        Refusal{"softcap_negative", [] { return node_fields("bshd", 0, -1, -1, -1.f, 0, 8, 2); }, "softcap=-1"},
        Refusal{"softcap_nan", [] { return node_fields("bshd", 0, -1, -1, std::nanf(""), 0, 8, 2); }, "softcap=nan"},
        Refusal{"scale_infinite", [] { return node_fields("bshd", 0, -1, -1, 0, INFINITY, 8, 2); }, "scale=inf"},
        Refusal{"unknown_layout", [] { return node_fields("bsdh", 0, -1, -1, 0, 0, 8, 2); },
                "layout='bsdh' must be one of bshd, bhsd, packed_qkv"},
        Refusal{"packed_without_heads", [] { return node_fields("packed_qkv", 0, -1, -1, 0, 0, 0, 0); },
                "packed_qkv needs num_heads and num_kv_heads > 0"},
        Refusal{"unknown_field", [] { return Fields().i("window", 3); }, "unknown field 'window'"},
        Refusal{"float_for_an_int", [] { return Fields().f("window_left", 3.f); },
                "field window_left has type kFLOAT32; expected kINT32"},
        Refusal{"int_for_a_string", [] { return Fields().i("layout", 1); }, "field layout has type kINT32"},
        Refusal{"two_ints", [] { return Fields().raw("causal", PluginFieldType::kINT32, kTwoInts, 8, 2); },
                "field causal has length 2"},
        Refusal{"given_twice", [] { return Fields().i("causal", 1).i("causal", 0); }, "causal is given twice"},
        Refusal{"int64_out_of_range",
                [] { return Fields().raw("window_left", PluginFieldType::kINT64, &kHuge, 8, 1); },
                "window_left=1099511627776 does not fit in int32"}),
    [](const auto& info) { return info.param.name; });

// ---- build-time answers -------------------------------------------------------------------

PluginPtr bshd_plugin(int32_t heads = 8, int32_t kv = 2) {
  return make(node_fields("bshd", 1, -1, 0, 0, 0, heads, kv));
}

TEST(TrtPlugin, SupportsLinearFp16OrBf16OfOneType) {
  PluginPtr p = bshd_plugin();
  ASSERT_NE(p, nullptr);
  auto* b = build(p.get());
  auto io = [](DataType t0, DataType t, TensorFormat f = TensorFormat::kLINEAR) {
    std::vector<DynamicPluginTensorDesc> v(4);
    v[0].desc = desc(dims({1, 2, 8, 64}), t0);
    for (int i = 1; i < 4; ++i) v[size_t(i)].desc = desc(dims({1, 2, 8, 64}), t, f);
    return v;
  };
  // pos 0 decides the type; the others must have it.
  EXPECT_TRUE(b->supportsFormatCombination(0, io(DataType::kHALF, DataType::kHALF).data(), 3, 1));
  EXPECT_TRUE(b->supportsFormatCombination(0, io(DataType::kBF16, DataType::kHALF).data(), 3, 1));
  for (DataType t : {DataType::kFLOAT, DataType::kINT8, DataType::kINT32, DataType::kFP8})
    EXPECT_FALSE(b->supportsFormatCombination(0, io(t, t).data(), 3, 1)) << int(t);
  auto nonlinear = io(DataType::kHALF, DataType::kHALF);
  nonlinear[0].desc.format = TensorFormat::kHWC8;
  EXPECT_FALSE(b->supportsFormatCombination(0, nonlinear.data(), 3, 1));
  for (int pos = 1; pos < 4; ++pos) {
    EXPECT_TRUE(b->supportsFormatCombination(pos, io(DataType::kHALF, DataType::kHALF).data(), 3, 1)) << pos;
    EXPECT_TRUE(b->supportsFormatCombination(pos, io(DataType::kBF16, DataType::kBF16).data(), 3, 1)) << pos;
    EXPECT_FALSE(b->supportsFormatCombination(pos, io(DataType::kHALF, DataType::kBF16).data(), 3, 1)) << pos;
    EXPECT_FALSE(b->supportsFormatCombination(pos, io(DataType::kBF16, DataType::kHALF).data(), 3, 1)) << pos;
    EXPECT_FALSE(
        b->supportsFormatCombination(pos, io(DataType::kHALF, DataType::kHALF, TensorFormat::kCHW32).data(), 3, 1))
        << pos;
  }
  EXPECT_FALSE(b->supportsFormatCombination(4, io(DataType::kHALF, DataType::kHALF).data(), 3, 1));
  EXPECT_FALSE(b->supportsFormatCombination(-1, io(DataType::kHALF, DataType::kHALF).data(), 3, 1));
  // A node with the wrong number of inputs for its layout supports nothing.
  EXPECT_FALSE(b->supportsFormatCombination(0, io(DataType::kHALF, DataType::kHALF).data(), 1, 1));
  PluginPtr packed = make(node_fields("packed_qkv", 0, -1, -1, 0, 0, 4, 2));
  ASSERT_NE(packed, nullptr);
  EXPECT_TRUE(build(packed.get())->supportsFormatCombination(1, io(DataType::kHALF, DataType::kHALF).data(), 1, 1));
  EXPECT_FALSE(build(packed.get())->supportsFormatCombination(1, io(DataType::kHALF, DataType::kHALF).data(), 3, 1));
}

TEST(TrtPlugin, OutputTypeIsTheInputsType) {
  PluginPtr p = bshd_plugin();
  ASSERT_NE(p, nullptr);
  auto* b = build(p.get());
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    const DataType in[3] = {t, t, t};
    DataType out = DataType::kINT8;
    EXPECT_EQ(b->getOutputDataTypes(&out, 1, in, 3), 0);
    EXPECT_EQ(out, t);
  }
  size_t errors = messages().errors().size();
  const DataType mixed[3] = {DataType::kHALF, DataType::kBF16, DataType::kHALF};
  DataType out{};
  EXPECT_NE(b->getOutputDataTypes(&out, 1, mixed, 3), 0);
  ASSERT_EQ(messages().errors().size(), ++errors);
  EXPECT_NE(messages().last_error().find("k has type bf16 and q fp16"), std::string::npos) << messages().last_error();
  const DataType ints[3] = {DataType::kINT32, DataType::kINT32, DataType::kINT32};
  EXPECT_NE(b->getOutputDataTypes(&out, 1, ints, 3), 0);
  ASSERT_EQ(messages().errors().size(), ++errors);
  EXPECT_NE(messages().last_error().find("int32; the plugin runs fp16 or bf16"), std::string::npos)
      << messages().last_error();
  EXPECT_NE(b->getOutputDataTypes(&out, 1, ints, 2), 0);
  ASSERT_EQ(messages().errors().size(), ++errors);
  EXPECT_NE(messages().last_error().find("takes 3 inputs (q, k, v); the node has 2"), std::string::npos)
      << messages().last_error();
  // fp32 is what a weakly typed network declares: accepted, with a warning that says what to do.
  const size_t entries = messages().entries.size();
  const DataType fp32[3] = {DataType::kFLOAT, DataType::kFLOAT, DataType::kFLOAT};
  EXPECT_EQ(b->getOutputDataTypes(&out, 1, fp32, 3), 0);
  EXPECT_EQ(out, DataType::kFLOAT);
  ASSERT_EQ(messages().entries.size(), entries + 1);
  EXPECT_EQ(messages().entries.back().severity, nvinfer1::ILogger::Severity::kWARNING);
  EXPECT_NE(messages().entries.back().text.find("--fp16"), std::string::npos) << messages().entries.back().text;
}

TEST(TrtPlugin, OutputShapesAreQsExpressions) {
  for (const char* layout : {"bshd", "bhsd"}) {
    PluginPtr p = make(node_fields(layout, 0, -1, -1, 0, 0, 8, 2));
    ASSERT_NE(p, nullptr);
    ExprBuilder eb;
    const bool bhsd = std::string(layout) == "bhsd";
    nvinfer1::DimsExprs in[3] = {
        bhsd ? eb.dims({-1, 8, -1, 64}, {"B", "", "Sq"}) : eb.dims({-1, -1, 8, 64}, {"B", "Sq"}),
        bhsd ? eb.dims({-1, 2, -1, 64}, {"B", "", "Sk"}) : eb.dims({-1, -1, 2, 64}, {"B", "Sk"}),
        bhsd ? eb.dims({-1, 2, -1, 64}, {"B", "", "Sk"}) : eb.dims({-1, -1, 2, 64}, {"B", "Sk"})};
    nvinfer1::DimsExprs out{};
    ASSERT_EQ(build(p.get())->getOutputShapes(in, 3, nullptr, 0, &out, 1, eb), 0) << messages().last_error();
    ASSERT_EQ(out.nbDims, 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.d[i], in[0].d[i]) << layout << " dim " << i << ": not q's expression";
  }
}

TEST(TrtPlugin, PackedOutputShapeIsDerivedFromTheFeatures) {
  PluginPtr p = make(node_fields("packed_qkv", 1, -1, 0, 0, 0, 8, 2));  // (8 + 2*2) * head_dim features
  ASSERT_NE(p, nullptr);
  ExprBuilder eb;
  nvinfer1::DimsExprs in = eb.dims({-1, -1, -1}, {"B", "S", "F"});
  nvinfer1::DimsExprs out{};
  ASSERT_EQ(build(p.get())->getOutputShapes(&in, 1, nullptr, 0, &out, 1, eb), 0) << messages().last_error();
  ASSERT_EQ(out.nbDims, 4);
  EXPECT_EQ(text(out.d[0]), "B");
  EXPECT_EQ(text(out.d[1]), "S");
  ASSERT_TRUE(out.d[2]->isConstant());
  EXPECT_EQ(out.d[2]->getConstantValue(), 8);
  EXPECT_EQ(text(out.d[3]), "floor_div(F, 12)");
  // Known features give a known head_dim.
  in = eb.dims({-1, -1, 768}, {"B", "S"});
  ASSERT_EQ(build(p.get())->getOutputShapes(&in, 1, nullptr, 0, &out, 1, eb), 0) << messages().last_error();
  ASSERT_TRUE(out.d[3]->isConstant());
  EXPECT_EQ(out.d[3]->getConstantValue(), 64);
}

struct ShapeRefusal {
  std::string name, layout;
  int32_t heads, kv_heads;
  std::vector<std::vector<int64_t>> inputs;  // -1: a symbol
  std::string expected;
};

void PrintTo(const ShapeRefusal& r, std::ostream* os) { *os << r.name; }

class TrtPluginShapeRefusal : public ::testing::TestWithParam<ShapeRefusal> {};

TEST_P(TrtPluginShapeRefusal, GetOutputShapesReportsIt) {
  const ShapeRefusal& r = GetParam();
  PluginPtr p = make(node_fields(r.layout, 0, -1, -1, 0, 0, r.heads, r.kv_heads));
  ASSERT_NE(p, nullptr) << messages().last_error();
  ExprBuilder eb;
  std::vector<nvinfer1::DimsExprs> in;
  for (const auto& d : r.inputs) in.push_back(eb.dims(d));
  nvinfer1::DimsExprs out{};
  const size_t before = messages().errors().size();
  EXPECT_NE(build(p.get())->getOutputShapes(in.data(), int32_t(in.size()), nullptr, 0, &out, 1, eb), 0);
  ASSERT_EQ(messages().errors().size(), before + 1);
  EXPECT_NE(messages().last_error().find(r.expected), std::string::npos) << messages().last_error();
}

INSTANTIATE_TEST_SUITE_P(
    ConstantDims, TrtPluginShapeRefusal,
    ::testing::Values(
        ShapeRefusal{"kv_heads_not_dividing", "bshd", 0, 0, {{-1, -1, 8, 64}, {-1, -1, 3, 64}, {-1, -1, 3, 64}},
                     "k.shape[2]=3 (heads_kv) must divide q.shape[2]=8 (heads_q)"},
        ShapeRefusal{"heads_differ_from_field", "bshd", 4, 2, {{-1, -1, 8, 64}, {-1, -1, 2, 64}, {-1, -1, 2, 64}},
                     "q.shape[2]=8 (heads) differs from num_heads=4"},
        ShapeRefusal{"bhsd_kv_heads_differ", "bhsd", 8, 2, {{-1, 8, -1, 64}, {-1, 4, -1, 64}, {-1, 4, -1, 64}},
                     "k.shape[1]=4 (heads_kv) differs from num_kv_heads=2"},
        ShapeRefusal{"head_dims_differ", "bshd", 0, 0, {{-1, -1, 8, 64}, {-1, -1, 8, 32}, {-1, -1, 8, 32}},
                     "k.shape[3]=32 must equal q.shape[3]=64 (head_dim)"},
        ShapeRefusal{"v_unlike_k", "bshd", 0, 0, {{-1, -1, 8, 64}, {-1, -1, 8, 64}, {-1, -1, 4, 64}},
                     "v has shape"},
        ShapeRefusal{"head_dim_too_large", "bshd", 0, 0, {{-1, -1, 8, 512}, {-1, -1, 8, 512}, {-1, -1, 8, 512}},
                     "head_dim=512 must be in [1, 256]"},
        ShapeRefusal{"packed_features", "packed_qkv", 8, 2, {{-1, -1, 100}}, "qkv.shape[2]=100 must be"},
        ShapeRefusal{"two_inputs", "bshd", 0, 0, {{-1, -1, 8, 64}, {-1, -1, 8, 64}}, "takes 3 inputs"},
        ShapeRefusal{"packed_with_three", "packed_qkv", 8, 2, {{-1, -1, 768}, {-1, -1, 768}, {-1, -1, 768}},
                     "takes 1 input (qkv)"},
        ShapeRefusal{"rank_three", "bshd", 0, 0, {{-1, 8, 64}, {-1, 8, 64}, {-1, 8, 64}}, "takes 4-D inputs"}),
    [](const auto& info) { return info.param.name; });

TEST(TrtPlugin, ConfigureAcceptsWildcardsAndRefusesWhatIsKnownWrong) {
  PluginPtr p = bshd_plugin();
  ASSERT_NE(p, nullptr);
  auto* b = build(p.get());
  auto io = [](DataType t, int64_t kv_heads) {
    std::vector<DynamicPluginTensorDesc> v;
    v.push_back(dynamic(dims({-1, -1, 8, 64}), dims({1, 1, 8, 64}), dims({4, 1000, 8, 64}), t));
    for (int i = 0; i < 2; ++i)
      v.push_back(dynamic(dims({-1, -1, kv_heads, 64}), dims({1, 1, kv_heads, 64}), dims({4, 1500, kv_heads, 64}), t));
    v.push_back(dynamic(dims({-1, -1, 8, 64}), dims({1, 1, 8, 64}), dims({4, 1000, 8, 64}), t));
    return v;
  };
  // With a device this also runs the library's checks at the largest shapes (which pass here).
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    auto v = io(t, 2);
    EXPECT_EQ(b->configurePlugin(v.data(), 3, v.data() + 3, 1), 0) << messages().last_error();
  }
  size_t errors = messages().errors().size();
  auto mixed = io(DataType::kHALF, 2);
  mixed[2].desc.type = DataType::kBF16;
  EXPECT_NE(b->configurePlugin(mixed.data(), 3, mixed.data() + 3, 1), 0);
  ASSERT_EQ(messages().errors().size(), ++errors);
  EXPECT_NE(messages().last_error().find("v has type bf16 and q fp16"), std::string::npos) << messages().last_error();
  auto fp32 = io(DataType::kFLOAT, 2);
  EXPECT_NE(b->configurePlugin(fp32.data(), 3, fp32.data() + 3, 1), 0);
  ASSERT_EQ(messages().errors().size(), ++errors);
  EXPECT_NE(messages().last_error().find("q has type fp32; the plugin runs fp16 or bf16"), std::string::npos)
      << messages().last_error();
  auto heads = io(DataType::kHALF, 3);
  EXPECT_NE(b->configurePlugin(heads.data(), 3, heads.data() + 3, 1), 0);
  ASSERT_EQ(messages().errors().size(), ++errors);
  EXPECT_NE(messages().last_error().find("(heads_kv) differs from num_kv_heads=2"), std::string::npos)
      << messages().last_error();
}

TEST(TrtPlugin, WorkspaceQueryWithoutADeviceIsReported) {
  if (has_gpu()) GTEST_SKIP() << "a CUDA device is present (test_plugin_gpu.cpp checks the workspace there)";
  PluginPtr p = bshd_plugin();
  ASSERT_NE(p, nullptr);
  std::vector<DynamicPluginTensorDesc> v;
  v.push_back(dynamic(dims({-1, -1, 8, 64}), dims({1, 1, 8, 64}), dims({2, 128, 8, 64}), DataType::kHALF));
  for (int i = 0; i < 2; ++i)
    v.push_back(dynamic(dims({-1, -1, 2, 64}), dims({1, 1, 2, 64}), dims({2, 128, 2, 64}), DataType::kHALF));
  v.push_back(v[0]);
  const size_t before = messages().errors().size();
  EXPECT_EQ(build(p.get())->getWorkspaceSize(v.data(), 3, v.data() + 3, 1), 0u);
  ASSERT_EQ(messages().errors().size(), before + 1);
  EXPECT_NE(messages().last_error().find("no workspace size for the profile's largest shapes"), std::string::npos)
      << messages().last_error();
}

// ---- runtime errors ---------------------------------------------------------------------------

TEST(TrtPlugin, RuntimeRefusalsGoToTheContextsErrorRecorderAndWriteNothing) {
  PluginPtr p = bshd_plugin();
  ASSERT_NE(p, nullptr);
  Recorder rec;
  ResourceContext ctx;
  ctx.recorder = &rec;
  PluginPtr attached(runtime(p.get())->attachToContext(&ctx));
  ASSERT_NE(attached, nullptr);
  auto* rt = runtime(attached.get());
  const size_t logged = messages().entries.size();

  const nvinfer1::PluginTensorDesc fp32[3] = {desc(dims({1, 4, 8, 64}), DataType::kFLOAT),
                                              desc(dims({1, 4, 2, 64}), DataType::kFLOAT),
                                              desc(dims({1, 4, 2, 64}), DataType::kFLOAT)};
  const nvinfer1::PluginTensorDesc fp32_out = desc(dims({1, 4, 8, 64}), DataType::kFLOAT);
  EXPECT_NE(rt->onShapeChange(fp32, 3, &fp32_out, 1), 0);
  ASSERT_EQ(rec.errors.size(), 1u);
  EXPECT_EQ(rec.errors[0].first, nvinfer1::ErrorCode::kINVALID_ARGUMENT);
  EXPECT_NE(rec.errors[0].second.find("q has type fp32; the plugin runs fp16 or bf16"), std::string::npos)
      << rec.errors[0].second;

  // Host buffers stand for device memory: a refused enqueue must not touch them.
  std::vector<uint16_t> q(4 * 8 * 64, 0x3c00), k(4 * 2 * 64, 0x3c00), v(k), out(q.size(), 0x7e00);
  const void* inputs[3] = {q.data(), k.data(), v.data()};
  void* outputs[1] = {out.data()};
  const nvinfer1::PluginTensorDesc in[3] = {desc(dims({1, 4, 8, 64}), DataType::kHALF),
                                            desc(dims({1, 4, 2, 64}), DataType::kHALF),
                                            desc(dims({1, 4, 2, 64}), DataType::kHALF)};
  const nvinfer1::PluginTensorDesc wrong_out = desc(dims({1, 4, 8, 32}), DataType::kHALF);
  EXPECT_NE(rt->enqueue(in, &wrong_out, inputs, outputs, nullptr, nullptr), 0);
  ASSERT_EQ(rec.errors.size(), 2u);
  EXPECT_NE(rec.errors[1].second.find("the output's dims do not match the inputs'"), std::string::npos)
      << rec.errors[1].second;
  const nvinfer1::PluginTensorDesc bf16_out = desc(dims({1, 4, 8, 64}), DataType::kBF16);
  EXPECT_NE(rt->enqueue(in, &bf16_out, inputs, outputs, nullptr, nullptr), 0);
  ASSERT_EQ(rec.errors.size(), 3u);
  EXPECT_NE(rec.errors[2].second.find("out has type bf16 and q fp16"), std::string::npos) << rec.errors[2].second;
  EXPECT_EQ(rec.errors[2].second.rfind("FlashAttention plugin (attn0): ", 0), 0u) << rec.errors[2].second;
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t x) { return x == 0x7e00; }));
  // With a recorder attached, nothing goes to the logger.
  EXPECT_EQ(messages().entries.size(), logged);
}

TEST(TrtPlugin, EnqueueWithoutADeviceIsRefused) {
  if (has_gpu()) GTEST_SKIP() << "a CUDA device is present (test_plugin_gpu.cpp runs enqueue there)";
  PluginPtr p = bshd_plugin();
  ASSERT_NE(p, nullptr);
  Recorder rec;
  ResourceContext ctx;
  ctx.recorder = &rec;
  PluginPtr attached(runtime(p.get())->attachToContext(&ctx));
  ASSERT_NE(attached, nullptr);
  std::vector<uint16_t> q(4 * 8 * 64, 0x3c00), k(4 * 2 * 64, 0x3c00), v(k), out(q.size(), 0x7e00);
  const void* inputs[3] = {q.data(), k.data(), v.data()};
  void* outputs[1] = {out.data()};
  const nvinfer1::PluginTensorDesc in[3] = {desc(dims({1, 4, 8, 64}), DataType::kHALF),
                                            desc(dims({1, 4, 2, 64}), DataType::kHALF),
                                            desc(dims({1, 4, 2, 64}), DataType::kHALF)};
  const nvinfer1::PluginTensorDesc o = desc(dims({1, 4, 8, 64}), DataType::kHALF);
  EXPECT_EQ(runtime(attached.get())->onShapeChange(in, 3, &o, 1), 0) << (rec.errors.empty() ? "" : rec.errors[0].second);
  EXPECT_NE(runtime(attached.get())->enqueue(in, &o, inputs, outputs, nullptr, nullptr), 0);
  ASSERT_EQ(rec.errors.size(), 1u);
  EXPECT_EQ(rec.errors[0].first, nvinfer1::ErrorCode::kFAILED_EXECUTION);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t x) { return x == 0x7e00; }));
}

}  // namespace
}  // namespace fa_trt_test
