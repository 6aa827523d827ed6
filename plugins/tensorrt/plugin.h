// The FlashAttention TensorRT plugin (IPluginV3 with the V3One core, build and runtime
// capabilities) and its creator. docs/tensorrt.md is the user's page.
//
// One plugin object holds a node's Config (fields.h) and nothing that depends on shapes: the
// sizes of every call are read from the tensor descriptions TensorRT passes (shapes.h), the
// workspace comes from the library's pure workspace query, and enqueue calls fa_forward on
// TensorRT's stream. A call the plugin or the library refuses is reported (report.h) and returns
// non-zero; the library writes nothing then.
#pragma once

#include <string>

#include <NvInferRuntime.h>

#include "fields.h"
#include "report.h"
#include "shapes.h"

namespace fa_trt {

inline constexpr const char* kPluginName = "FlashAttention";  // not "Attention": TensorRT >= 10.14 imports ONNX's
inline constexpr const char* kPluginVersion = "1";            // the node's domain version; the ONNX parser's default
inline constexpr const char* kPluginNamespace = "flashattn";  // fa-onnx-fuse's domain

class Plugin final : public nvinfer1::IPluginV3,
                     public nvinfer1::IPluginV3OneCore,
                     public nvinfer1::IPluginV3OneBuild,
                     public nvinfer1::IPluginV3OneRuntime {
 public:
  Plugin(const Config& config, std::string plugin_namespace, std::string layer);

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
  nvinfer1::IPluginV3* clone() noexcept override;

  // IPluginV3OneCore
  const char* getPluginName() const noexcept override { return kPluginName; }
  const char* getPluginVersion() const noexcept override { return kPluginVersion; }
  const char* getPluginNamespace() const noexcept override { return namespace_.c_str(); }

  // IPluginV3OneBuild
  int32_t configurePlugin(const nvinfer1::DynamicPluginTensorDesc* in, int32_t nb_inputs,
                          const nvinfer1::DynamicPluginTensorDesc* out, int32_t nb_outputs) noexcept override;
  int32_t getOutputDataTypes(nvinfer1::DataType* output_types, int32_t nb_outputs,
                             const nvinfer1::DataType* input_types, int32_t nb_inputs) const noexcept override;
  int32_t getOutputShapes(const nvinfer1::DimsExprs* inputs, int32_t nb_inputs, const nvinfer1::DimsExprs* shape_inputs,
                          int32_t nb_shape_inputs, nvinfer1::DimsExprs* outputs, int32_t nb_outputs,
                          nvinfer1::IExprBuilder& builder) noexcept override;
  bool supportsFormatCombination(int32_t pos, const nvinfer1::DynamicPluginTensorDesc* in_out, int32_t nb_inputs,
                                 int32_t nb_outputs) noexcept override;
  int32_t getNbOutputs() const noexcept override { return 1; }
  size_t getWorkspaceSize(const nvinfer1::DynamicPluginTensorDesc* inputs, int32_t nb_inputs,
                          const nvinfer1::DynamicPluginTensorDesc* outputs, int32_t nb_outputs) const noexcept override;
  const char* getMetadataString() noexcept override { return description_.c_str(); }

  // IPluginV3OneRuntime
  int32_t onShapeChange(const nvinfer1::PluginTensorDesc* in, int32_t nb_inputs, const nvinfer1::PluginTensorDesc* out,
                        int32_t nb_outputs) noexcept override;
  int32_t enqueue(const nvinfer1::PluginTensorDesc* input_desc, const nvinfer1::PluginTensorDesc* output_desc,
                  const void* const* inputs, void* const* outputs, void* workspace,
                  cudaStream_t stream) noexcept override;
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
  const nvinfer1::PluginFieldCollection* getFieldsToSerialize() noexcept override;

  const Config& config() const { return config_; }

 private:
  // The plugin's part of a call's checks (reported when they fail): one type, fp16 or bf16, and
  // the linear format across the inputs and the output, then read_sizes on the inputs' dims.
  bool check_call(const nvinfer1::PluginTensorDesc* in, int32_t nb_inputs, const nvinfer1::PluginTensorDesc* out,
                  int32_t nb_outputs, Sizes* sizes) const;

  Config config_;
  std::string namespace_;
  std::string description_;
  Reporter report_;
  FieldWriter serialized_;
};

class Creator final : public nvinfer1::IPluginCreatorV3One {
 public:
  explicit Creator(const char* plugin_namespace) : namespace_(plugin_namespace) {}
  nvinfer1::IPluginV3* createPlugin(const char* name, const nvinfer1::PluginFieldCollection* fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override;
  const nvinfer1::PluginFieldCollection* getFieldNames() noexcept override { return field_names(); }
  const char* getPluginName() const noexcept override { return kPluginName; }
  const char* getPluginVersion() const noexcept override { return kPluginVersion; }
  const char* getPluginNamespace() const noexcept override { return namespace_; }

 private:
  const char* namespace_;
};

}  // namespace fa_trt
