#include "plugin.h"

#include <cstdint>
#include <new>

#include <cuda_runtime_api.h>

#include "flashattn/flashattn.h"

namespace fa_trt {

using nvinfer1::DataType;
using nvinfer1::ErrorCode;
using nvinfer1::TensorFormat;

namespace {

std::string type_name(DataType t) {
  switch (t) {
    case DataType::kFLOAT: return "fp32";
    case DataType::kHALF: return "fp16";
    case DataType::kBF16: return "bf16";
    case DataType::kINT8: return "int8";
    case DataType::kINT32: return "int32";
    case DataType::kINT64: return "int64";
    case DataType::kBOOL: return "bool";
    case DataType::kUINT8: return "uint8";
    case DataType::kFP8: return "fp8";
    default: return "DataType " + std::to_string(int32_t(t));
  }
}

bool runs(DataType t) { return t == DataType::kHALF || t == DataType::kBF16; }
fa_dtype to_fa(DataType t) { return t == DataType::kBF16 ? FA_DTYPE_BF16 : FA_DTYPE_FP16; }

const char* input_name(const Config& c, int32_t i) {
  static const char* const names[3] = {"q", "k", "v"};
  return c.layout == Layout::PackedQkv ? "qkv" : names[i];
}

bool current_device(fa_device* dev, std::string* error) {
  int index = 0;
  const cudaError_t e = cudaGetDevice(&index);
  if (e != cudaSuccess) {
    *error = std::string("cudaGetDevice failed: ") + cudaGetErrorString(e);
    return false;
  }
  dev->type = FA_DEVICE_CUDA;
  dev->index = index;
  return true;
}

// The library's workspace for a call of these sizes on the current device. The query is a pure
// function of the call's shapes, dtypes and strides and reads no tensor memory (docs/api.md), so
// at build time, before any buffer exists, it is asked with placeholder addresses: 64 KiB apart
// and aligned as the CUDA kernels require, never dereferenced.
bool query_workspace(const Config& c, const Sizes& s, DataType type, size_t* bytes, std::string* error) {
  fa_device dev{};
  if (!current_device(&dev, error)) return false;
  const uintptr_t base = uintptr_t(1) << 16;
  const void* inputs[3] = {reinterpret_cast<void*>(base), reinterpret_cast<void*>(2 * base),
                           reinterpret_cast<void*>(3 * base)};
  const fa_params p = make_params(c, s, to_fa(type), inputs, reinterpret_cast<void*>(4 * base), dev);
  if (fa_forward_workspace_size(&p, bytes) != FA_OK) {
    *error = std::string("the library refuses the call: ") + fa_last_error();
    return false;
  }
  return true;
}

bool fully_known(const Sizes& s) {
  return s.batch >= 0 && s.seqlen_q >= 0 && s.seqlen_k >= 0 && s.heads_q >= 0 && s.heads_kv >= 0 &&
         s.head_dim >= 0;
}

}  // namespace

Plugin::Plugin(const Config& config, std::string plugin_namespace, std::string layer)
    : config_(config),
      namespace_(std::move(plugin_namespace)),
      description_(config.describe()),
      report_(std::move(layer)) {}

nvinfer1::IPluginCapability* Plugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept {
  switch (type) {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
  }
  return nullptr;
}

nvinfer1::IPluginV3* Plugin::clone() noexcept {
  try {
    return new Plugin(*this);
  } catch (const std::bad_alloc&) {
    report_.error(ErrorCode::kFAILED_ALLOCATION, "out of memory cloning the plugin");
    return nullptr;
  }
}

bool Plugin::check_call(const nvinfer1::PluginTensorDesc* in, int32_t nb_inputs, const nvinfer1::PluginTensorDesc* out,
                        int32_t nb_outputs, Sizes* sizes) const {
  if (nb_outputs != 1) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, "the node has " + std::to_string(nb_outputs) + " outputs; expected 1");
    return false;
  }
  if (nb_inputs != config_.nb_inputs()) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, input_count_error(config_, nb_inputs));
    return false;
  }
  for (int32_t i = 0; i <= nb_inputs; ++i) {
    const nvinfer1::PluginTensorDesc& d = i < nb_inputs ? in[i] : out[0];
    const std::string name = i < nb_inputs ? input_name(config_, i) : "out";
    if (!runs(d.type)) {
      report_.error(ErrorCode::kINVALID_ARGUMENT,
                    name + " has type " + type_name(d.type) + "; the plugin runs fp16 or bf16");
      return false;
    }
    if (d.type != in[0].type) {
      report_.error(ErrorCode::kINVALID_ARGUMENT, name + " has type " + type_name(d.type) + " and " +
                                                      input_name(config_, 0) + " " + type_name(in[0].type) +
                                                      "; the inputs and the output must have one type");
      return false;
    }
    if (d.format != TensorFormat::kLINEAR) {
      report_.error(ErrorCode::kINVALID_ARGUMENT,
                    name + " is not in the linear format (TensorFormat " + std::to_string(int32_t(d.format)) + ")");
      return false;
    }
  }
  nvinfer1::Dims dims[3];
  for (int32_t i = 0; i < nb_inputs; ++i) dims[i] = in[i].dims;
  std::string error;
  if (!read_sizes(config_, dims, nb_inputs, sizes, &error)) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, error);
    return false;
  }
  return true;
}

// ---- build --------------------------------------------------------------------------------

int32_t Plugin::getOutputDataTypes(DataType* output_types, int32_t nb_outputs, const DataType* input_types,
                                   int32_t nb_inputs) const noexcept {
  if (nb_outputs != 1) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, "the node has " + std::to_string(nb_outputs) + " outputs; expected 1");
    return -1;
  }
  if (nb_inputs != config_.nb_inputs()) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, input_count_error(config_, nb_inputs));
    return -1;
  }
  const DataType t = input_types[0];
  for (int32_t i = 1; i < nb_inputs; ++i)
    if (input_types[i] != t) {
      report_.error(ErrorCode::kINVALID_ARGUMENT, std::string(input_name(config_, i)) + " has type " +
                                                      type_name(input_types[i]) + " and q " + type_name(t) +
                                                      "; q, k and v must have one type");
      return -1;
    }
  if (t == DataType::kFLOAT) {
    // A weakly typed network declares fp32 here and lets supportsFormatCombination pick fp16 /
    // bf16 (with --fp16 / --bf16); a strongly typed one must give 16-bit inputs.
    report_.warning(
        "the inputs are fp32; the plugin runs fp16 or bf16 only: give it fp16 / bf16 inputs (e.g. fuse an fp16 "
        "export and build with --stronglyTyped), or build a weakly typed network with --fp16 or --bf16");
  } else if (!runs(t)) {
    report_.error(ErrorCode::kINVALID_ARGUMENT,
                  "the inputs have type " + type_name(t) + "; the plugin runs fp16 or bf16");
    return -1;
  }
  output_types[0] = t;
  return 0;
}

int32_t Plugin::getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nb_inputs, const nvinfer1::DimsExprs*,
                                int32_t, nvinfer1::DimsExprs* outputs, int32_t nb_outputs,
                                nvinfer1::IExprBuilder& builder) noexcept {
  if (nb_outputs != 1) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, "the node has " + std::to_string(nb_outputs) + " outputs; expected 1");
    return -1;
  }
  // The dims that are build-time constants are checked now (-1 for the others).
  nvinfer1::Dims known[3]{};
  for (int32_t i = 0; i < nb_inputs && i < 3; ++i) {
    known[i].nbDims = inputs[i].nbDims;
    for (int32_t k = 0; k < inputs[i].nbDims && k < nvinfer1::Dims::MAX_DIMS; ++k)
      known[i].d[k] = inputs[i].d[k]->isConstant() ? inputs[i].d[k]->getConstantValue() : -1;
  }
  Sizes s;
  std::string error;
  if (!read_sizes(config_, known, nb_inputs, &s, &error)) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, error);
    return -1;
  }
  if (config_.layout != Layout::PackedQkv) {
    outputs[0] = inputs[0];  // out is q's shape, in q's layout
    return 0;
  }
  // (b, s, (h + 2 h_kv) d) -> (b, s, h, d)
  const nvinfer1::DimsExprs& x = inputs[0];
  const nvinfer1::IDimensionExpr* heads = builder.constant(config_.num_heads);
  const nvinfer1::IDimensionExpr* per_dim =
      builder.constant(int64_t(config_.num_heads) + 2 * int64_t(config_.num_kv_heads));
  const nvinfer1::IDimensionExpr* head_dim =
      per_dim ? builder.operation(nvinfer1::DimensionOperation::kFLOOR_DIV, *x.d[2], *per_dim) : nullptr;
  if (!heads || !head_dim) {
    report_.error(ErrorCode::kINTERNAL_ERROR, "TensorRT's expression builder returned no expression");
    return -1;
  }
  outputs[0].nbDims = 4;
  outputs[0].d[0] = x.d[0];
  outputs[0].d[1] = x.d[1];
  outputs[0].d[2] = heads;
  outputs[0].d[3] = head_dim;
  return 0;
}

bool Plugin::supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* in_out, int32_t nb_inputs,
                                       int32_t nb_outputs) noexcept {
  if (nb_inputs != config_.nb_inputs() || nb_outputs != 1 || pos < 0 || pos >= nb_inputs + nb_outputs) return false;
  const nvinfer1::PluginTensorDesc& d = in_out[pos].desc;
  if (d.format != TensorFormat::kLINEAR) return false;
  return pos == 0 ? runs(d.type) : d.type == in_out[0].desc.type;
}

int32_t Plugin::configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nb_inputs,
                                const nvinfer1::DynamicPluginTensorDesc* out, int32_t nb_outputs) noexcept {
  nvinfer1::PluginTensorDesc ins[3], outs[1];
  if (nb_inputs != config_.nb_inputs()) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, input_count_error(config_, nb_inputs));
    return -1;
  }
  if (nb_outputs != 1) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, "the node has " + std::to_string(nb_outputs) + " outputs; expected 1");
    return -1;
  }
  for (int32_t i = 0; i < nb_inputs; ++i) ins[i] = in[i].desc;
  outs[0] = out[0].desc;
  Sizes s;
  if (!check_call(ins, nb_inputs, outs, nb_outputs, &s)) return -1;
  // The library's own checks (head_dim, alignment, what the CUDA kernels take) at the profile's
  // largest shapes, so that an engine it cannot run is refused while it is built. Without a
  // device (no engine can be built then) they wait for enqueue.
  if (fa_cuda_device_count() > 0) {
    nvinfer1::Dims max[3];
    for (int32_t i = 0; i < nb_inputs; ++i) max[i] = in[i].max;
    Sizes big;
    std::string error;
    size_t bytes = 0;
    if (!read_sizes(config_, max, nb_inputs, &big, &error) ||
        (fully_known(big) && !query_workspace(config_, big, ins[0].type, &bytes, &error))) {
      report_.error(ErrorCode::kINVALID_ARGUMENT, "at the profile's largest shapes: " + error);
      return -1;
    }
  }
  return 0;
}

size_t Plugin::getWorkspaceSize(const nvinfer1::DynamicPluginTensorDesc* inputs, int32_t nb_inputs,
                                const nvinfer1::DynamicPluginTensorDesc*, int32_t) const noexcept {
  // Enough for the profile's largest shapes, which TensorRT takes as enough for every smaller one.
  nvinfer1::Dims max[3];
  if (nb_inputs != config_.nb_inputs()) return 0;  // refused by getOutputShapes already
  for (int32_t i = 0; i < nb_inputs; ++i) max[i] = inputs[i].max;
  Sizes s;
  std::string error;
  size_t bytes = 0;
  if (!read_sizes(config_, max, nb_inputs, &s, &error) || !fully_known(s) || !runs(inputs[0].desc.type) ||
      !query_workspace(config_, s, inputs[0].desc.type, &bytes, &error)) {
    report_.error(ErrorCode::kINVALID_ARGUMENT,
                  "no workspace size for the profile's largest shapes: " +
                      (error.empty() ? "they are not all known, or the type is not fp16 / bf16" : error));
    return 0;
  }
  return bytes;
}

// ---- runtime ------------------------------------------------------------------------------

int32_t Plugin::onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nb_inputs,
                              const nvinfer1::PluginTensorDesc* out, int32_t nb_outputs) noexcept {
  Sizes s;
  return check_call(in, nb_inputs, out, nb_outputs, &s) ? 0 : -1;
}

int32_t Plugin::enqueue(const nvinfer1::PluginTensorDesc* input_desc, const nvinfer1::PluginTensorDesc* output_desc,
                        const void* const* inputs, void* const* outputs, void* workspace,
                        cudaStream_t stream) noexcept {
  Sizes s;
  if (!check_call(input_desc, config_.nb_inputs(), output_desc, 1, &s)) return -1;
  const nvinfer1::Dims want = output_dims(config_, s);
  const nvinfer1::Dims& got = output_desc[0].dims;
  bool same = got.nbDims == want.nbDims;
  for (int32_t i = 0; same && i < want.nbDims; ++i) same = got.d[i] == want.d[i];
  if (!same) {
    report_.error(ErrorCode::kINVALID_ARGUMENT, "the output's dims do not match the inputs' (" +
                                                    std::string(layout_name(config_.layout)) + ")");
    return -1;
  }
  if (s.batch == 0 || s.seqlen_q == 0 || s.heads_q == 0) return 0;  // an empty output
  if (s.seqlen_k == 0) {
    // Rows that see no key are 0 (the library's rule); the library takes no empty k.
    const size_t bytes = size_t(s.batch * s.seqlen_q * s.heads_q * s.head_dim) * 2;
    const cudaError_t e = cudaMemsetAsync(outputs[0], 0, bytes, stream);
    if (e != cudaSuccess) {
      report_.error(ErrorCode::kFAILED_EXECUTION, std::string("cudaMemsetAsync failed: ") + cudaGetErrorString(e));
      return -1;
    }
    return 0;
  }
  fa_device dev{};
  std::string error;
  if (!current_device(&dev, &error)) {
    report_.error(ErrorCode::kFAILED_EXECUTION, error);
    return -1;
  }
  const fa_params p = make_params(config_, s, to_fa(input_desc[0].type), inputs, outputs[0], dev);
  // TensorRT's workspace holds getWorkspaceSize() at the profile's largest shapes; this call's
  // need is at most that.
  size_t bytes = 0;
  if (fa_forward_workspace_size(&p, &bytes) != FA_OK || fa_forward(&p, workspace, bytes, stream) != FA_OK) {
    report_.error(ErrorCode::kFAILED_EXECUTION, std::string("the library refuses the call: ") + fa_last_error());
    return -1;
  }
  return 0;
}

nvinfer1::IPluginV3* Plugin::attachToContext(nvinfer1::IPluginResourceContext* context) noexcept {
  nvinfer1::IPluginV3* copy = clone();
  if (copy) static_cast<Plugin*>(copy)->report_.attach(context ? context->getErrorRecorder() : nullptr);
  return copy;
}

const nvinfer1::PluginFieldCollection* Plugin::getFieldsToSerialize() noexcept { return serialized_.write(config_); }

// ---- creator ------------------------------------------------------------------------------

nvinfer1::IPluginV3* Creator::createPlugin(const char* name, const nvinfer1::PluginFieldCollection* fc,
                                           nvinfer1::TensorRTPhase) noexcept {
  // The build and runtime phases pass the same fields (getFieldsToSerialize's at run time).
  const std::string layer = name ? name : "";
  Reporter report(layer);
  try {
    Config c;
    std::string error;
    if (!parse_fields(fc, &c, &error)) {
      report.error(ErrorCode::kINVALID_ARGUMENT, error);
      return nullptr;
    }
    return new Plugin(c, namespace_, layer);
  } catch (const std::bad_alloc&) {
    report.error(ErrorCode::kFAILED_ALLOCATION, "out of memory creating the plugin");
    return nullptr;
  }
}

}  // namespace fa_trt

// ---- the library's entry points (IPluginRegistry::loadLibrary, trtexec --dynamicPlugins) ----

// Two creators of one plugin: in the namespace "flashattn", and in the default namespace "",
// which is where TensorRT's ONNX parser looks for a node without a plugin_namespace attribute
// (fa-onnx-fuse writes none: its node maps onto the plugin as it is).
extern "C" __attribute__((visibility("default"))) nvinfer1::IPluginCreatorInterface* const* getCreators(
    int32_t& nb_creators) {
  static fa_trt::Creator own(fa_trt::kPluginNamespace), default_namespace("");
  static nvinfer1::IPluginCreatorInterface* const creators[] = {&own, &default_namespace};
  nb_creators = 2;
  return creators;
}

extern "C" __attribute__((visibility("default"))) void setLoggerFinder(nvinfer1::ILoggerFinder* finder) {
  fa_trt::set_logger_finder(finder);
}
