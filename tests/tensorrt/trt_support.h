// Test stand-ins for what TensorRT hands a plugin, and the plugin library loaded as TensorRT
// loads it: dlopen, then the exported getCreators / setLoggerFinder (IPluginRegistry::loadLibrary).
// The tests reach the plugin through TensorRT's interfaces only, never its sources.
//
// TensorRT's IExprBuilder / IDimensionExpr are classes with an implementation pointer (mImpl) the
// builder fills; the stand-ins here fill it with an implementation of their own (constants fold,
// other expressions are symbols written out as text), so that getOutputShapes can be called
// without a builder.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <NvInferRuntime.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace fa_trt_test {

// ---- expressions ------------------------------------------------------------------------------

class Expr final : public nvinfer1::IDimensionExpr {
 public:
  Expr(bool constant, int64_t value, std::string text) : impl_(constant, value, std::move(text)) { mImpl = &impl_; }
  ~Expr() override = default;
  const std::string& text() const { return impl_.text; }

 private:
  struct Impl final : nvinfer1::apiv::VDimensionExpr {
    Impl(bool c, int64_t v, std::string t) : constant(c), value(v), text(std::move(t)) {}
    bool isConstant() const override { return constant; }
    int64_t getConstantValue() const override { return constant ? value : std::numeric_limits<int64_t>::min(); }
    bool isSizeTensor() const override { return false; }
    bool constant;
    int64_t value;
    std::string text;
  };
  Impl impl_;
};

// The text of an expression made by ExprBuilder: a constant's value, a symbol's name, or
// "op(a, b)".
inline std::string text(const nvinfer1::IDimensionExpr* e) {
  return e ? static_cast<const Expr*>(e)->text() : "<null>";
}

class ExprBuilder final : public nvinfer1::IExprBuilder {
 public:
  ExprBuilder() { mImpl = &impl_; }
  ~ExprBuilder() override = default;
  const nvinfer1::IDimensionExpr* symbol(const std::string& name) { return impl_.make(false, 0, name); }
  // Dims whose entries are constants (>= 0) or symbols named by `names` (for entries < 0).
  nvinfer1::DimsExprs dims(std::vector<int64_t> values, const std::vector<std::string>& names = {}) {
    nvinfer1::DimsExprs d{};
    d.nbDims = int32_t(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      d.d[i] = values[i] >= 0 ? constant(values[i]) : symbol(i < names.size() ? names[i] : "x" + std::to_string(i));
    return d;
  }

 private:
  struct Impl final : nvinfer1::apiv::VExprBuilder {
    std::deque<std::unique_ptr<Expr>> exprs;
    const Expr* make(bool c, int64_t v, std::string t) {
      exprs.push_back(std::make_unique<Expr>(c, v, std::move(t)));
      return exprs.back().get();
    }
    static int64_t floor_div(int64_t x, int64_t y) {
      if (y == 0) return 0;
      return x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
    }
    const nvinfer1::IDimensionExpr* constant(int64_t v) override { return make(true, v, std::to_string(v)); }
    const nvinfer1::IDimensionExpr* operation(nvinfer1::DimensionOperation op, const nvinfer1::IDimensionExpr& a,
                                              const nvinfer1::IDimensionExpr& b) override {
      using O = nvinfer1::DimensionOperation;
      static const char* const names[] = {"sum", "prod", "max", "min", "sub", "equal", "less", "floor_div", "ceil_div"};
      const int i = int(op);
      if (i < 0 || i > 8) return nullptr;
      if (a.isConstant() && b.isConstant()) {
        const int64_t x = a.getConstantValue(), y = b.getConstantValue();
        int64_t r = 0;
        switch (op) {
          case O::kSUM: r = x + y; break;
          case O::kPROD: r = x * y; break;
          case O::kMAX: r = std::max(x, y); break;
          case O::kMIN: r = std::min(x, y); break;
          case O::kSUB: r = x - y; break;
          case O::kEQUAL: r = x == y; break;
          case O::kLESS: r = x < y; break;
          case O::kFLOOR_DIV: r = floor_div(x, y); break;
          case O::kCEIL_DIV: r = -floor_div(-x, y); break;
        }
        return make(true, r, std::to_string(r));
      }
      return make(false, 0,
                  std::string(names[i]) + "(" + static_cast<const Expr&>(a).text() + ", " +
                      static_cast<const Expr&>(b).text() + ")");
    }
    const nvinfer1::IDimensionExpr* declareSizeTensor(int32_t, const nvinfer1::IDimensionExpr&,
                                                      const nvinfer1::IDimensionExpr&) override {
      return nullptr;
    }
  };
  Impl impl_;
};

// ---- where errors go ------------------------------------------------------------------------

struct Messages final : nvinfer1::ILogger {
  struct Entry {
    Severity severity;
    std::string text;
  };
  std::vector<Entry> entries;
  void log(Severity s, const char* msg) noexcept override { entries.push_back({s, msg}); }
  // The messages of severity kERROR.
  std::vector<std::string> errors() const {
    std::vector<std::string> r;
    for (const auto& e : entries)
      if (e.severity == Severity::kERROR) r.push_back(e.text);
    return r;
  }
  std::string last_error() const {
    const auto e = errors();
    return e.empty() ? "" : e.back();
  }
};

struct Finder final : nvinfer1::ILoggerFinder {
  nvinfer1::ILogger* logger = nullptr;
  nvinfer1::ILogger* findLogger() override { return logger; }
  ~Finder() override = default;
};

struct Recorder final : nvinfer1::IErrorRecorder {
  std::vector<std::pair<nvinfer1::ErrorCode, std::string>> errors;
  int32_t refs = 0;
  int32_t getNbErrors() const noexcept override { return int32_t(errors.size()); }
  nvinfer1::ErrorCode getErrorCode(int32_t i) const noexcept override { return errors.at(size_t(i)).first; }
  ErrorDesc getErrorDesc(int32_t i) const noexcept override { return errors.at(size_t(i)).second.c_str(); }
  bool hasOverflowed() const noexcept override { return false; }
  void clear() noexcept override { errors.clear(); }
  bool reportError(nvinfer1::ErrorCode code, ErrorDesc desc) noexcept override {
    errors.emplace_back(code, desc);
    return true;
  }
  RefCount incRefCount() noexcept override { return ++refs; }
  RefCount decRefCount() noexcept override { return --refs; }
};

struct ResourceContext final : nvinfer1::IPluginResourceContext {
  Recorder* recorder = nullptr;
  nvinfer1::IGpuAllocator* getGpuAllocator() const noexcept override { return nullptr; }
  nvinfer1::IErrorRecorder* getErrorRecorder() const noexcept override { return recorder; }
};

// ---- the plugin library ---------------------------------------------------------------------

using GetCreatorsFn = nvinfer1::IPluginCreatorInterface* const* (*)(int32_t&);
using SetLoggerFinderFn = void (*)(nvinfer1::ILoggerFinder*);

// The library, opened once for the whole test binary (TensorRT keeps it open as long as its
// creators are registered), with the test's logger behind its logger finder.
struct Library {
  void* handle = nullptr;
  GetCreatorsFn get_creators = nullptr;
  SetLoggerFinderFn set_logger_finder = nullptr;
  std::string error;
  Messages messages;
  Finder finder;

  static Library& get() {
    static Library lib;
    return lib;
  }

 private:
  Library() {
    handle = dlopen(FA_TRT_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      error = dlerror();
      return;
    }
    get_creators = reinterpret_cast<GetCreatorsFn>(dlsym(handle, "getCreators"));
    set_logger_finder = reinterpret_cast<SetLoggerFinderFn>(dlsym(handle, "setLoggerFinder"));
    finder.logger = &messages;
    if (set_logger_finder) set_logger_finder(&finder);
  }
};

// The creator of namespace ns ("" or "flashattn"), or null.
inline nvinfer1::IPluginCreatorV3One* creator(const char* ns) {
  Library& lib = Library::get();
  if (!lib.get_creators) return nullptr;
  int32_t n = 0;
  nvinfer1::IPluginCreatorInterface* const* all = lib.get_creators(n);
  for (int32_t i = 0; i < n; ++i) {
    auto* c = static_cast<nvinfer1::IPluginCreatorV3One*>(all[i]);
    if (std::strcmp(all[i]->getInterfaceInfo().kind, "PLUGIN CREATOR_V3ONE") == 0 &&
        std::strcmp(c->getPluginNamespace(), ns) == 0)
      return c;
  }
  return nullptr;
}

// Fields as TensorRT's ONNX parser passes a node's attributes: INT -> kINT32, FLOAT -> kFLOAT32,
// STRING -> kCHAR with its NUL counted in the length. The collection points into this object.
class Fields {
 public:
  Fields& i(const char* name, int32_t v) {
    add(name, nvinfer1::PluginFieldType::kINT32, &v, sizeof v, 1);
    return *this;
  }
  Fields& f(const char* name, float v) {
    add(name, nvinfer1::PluginFieldType::kFLOAT32, &v, sizeof v, 1);
    return *this;
  }
  Fields& s(const char* name, const std::string& v) {
    add(name, nvinfer1::PluginFieldType::kCHAR, v.c_str(), v.size() + 1, int32_t(v.size() + 1));
    return *this;
  }
  Fields& raw(const char* name, nvinfer1::PluginFieldType type, const void* data, size_t bytes, int32_t length) {
    add(name, type, data, bytes, length);
    return *this;
  }
  const nvinfer1::PluginFieldCollection* collection() {
    fields_.clear();
    for (const auto& e : entries_)
      fields_.emplace_back(e.name.c_str(), e.bytes.empty() ? nullptr : e.bytes.data(), e.type, e.length);
    collection_ = {int32_t(fields_.size()), fields_.data()};
    return &collection_;
  }

 private:
  struct Entry {
    std::string name;
    nvinfer1::PluginFieldType type;
    std::vector<unsigned char> bytes;
    int32_t length;
  };
  void add(const char* name, nvinfer1::PluginFieldType type, const void* data, size_t bytes, int32_t length) {
    const auto* p = static_cast<const unsigned char*>(data);
    entries_.push_back({name, type, std::vector<unsigned char>(p, p + bytes), length});
  }
  std::deque<Entry> entries_;
  std::vector<nvinfer1::PluginField> fields_;
  nvinfer1::PluginFieldCollection collection_{};
};

// The capability interfaces of a plugin.
inline nvinfer1::IPluginV3OneCore* core(nvinfer1::IPluginV3* p) {
  return static_cast<nvinfer1::IPluginV3OneCore*>(p->getCapabilityInterface(nvinfer1::PluginCapabilityType::kCORE));
}
inline nvinfer1::IPluginV3OneBuild* build(nvinfer1::IPluginV3* p) {
  return static_cast<nvinfer1::IPluginV3OneBuild*>(p->getCapabilityInterface(nvinfer1::PluginCapabilityType::kBUILD));
}
inline nvinfer1::IPluginV3OneRuntime* runtime(nvinfer1::IPluginV3* p) {
  return static_cast<nvinfer1::IPluginV3OneRuntime*>(
      p->getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));
}

struct PluginDeleter {
  void operator()(nvinfer1::IPluginV3* p) const { delete p; }
};
using PluginPtr = std::unique_ptr<nvinfer1::IPluginV3, PluginDeleter>;

inline nvinfer1::Dims dims(std::initializer_list<int64_t> v) {
  nvinfer1::Dims d{};
  d.nbDims = int32_t(v.size());
  int i = 0;
  for (int64_t x : v) d.d[i++] = x;
  return d;
}

inline nvinfer1::PluginTensorDesc desc(nvinfer1::Dims d, nvinfer1::DataType t,
                                       nvinfer1::TensorFormat f = nvinfer1::TensorFormat::kLINEAR) {
  nvinfer1::PluginTensorDesc r{};
  r.dims = d;
  r.type = t;
  r.format = f;
  r.scale = -1.f;
  return r;
}

// A build-time description: dims with -1 wildcards, and the profile's min / opt / max.
inline nvinfer1::DynamicPluginTensorDesc dynamic(nvinfer1::Dims wild, nvinfer1::Dims min, nvinfer1::Dims max,
                                                 nvinfer1::DataType t) {
  nvinfer1::DynamicPluginTensorDesc r{};
  r.desc = desc(wild, t);
  r.min = min;
  r.opt = max;
  r.max = max;
  return r;
}

}  // namespace fa_trt_test
