// How the plugin tells TensorRT what went wrong, without linking libnvinfer: through interfaces
// that TensorRT hands over at run time.
//   - an execution context's IErrorRecorder, given to attachToContext (errors of onShapeChange /
//     enqueue in that context);
//   - otherwise the ILogger of the calling builder / runtime, found through the ILoggerFinder
//     that IPluginRegistry::loadLibrary (trtexec --dynamicPlugins) passes to setLoggerFinder;
//   - otherwise (a program that registered the creators itself and never called
//     setLoggerFinder) standard error, so that nothing is refused silently.
// Every message starts with "FlashAttention plugin" and the layer's name when there is one.
#pragma once

#include <string>

#include <NvInferRuntime.h>

namespace fa_trt {

// The finder from setLoggerFinder (null: none); process-wide, as TensorRT passes one per library.
void set_logger_finder(nvinfer1::ILoggerFinder* finder);

class Reporter {
 public:
  explicit Reporter(std::string layer = "") : layer_(std::move(layer)) {}
  void attach(nvinfer1::IErrorRecorder* recorder) { recorder_ = recorder; }
  const std::string& layer() const { return layer_; }

  void error(nvinfer1::ErrorCode code, const std::string& what) const;
  void warning(const std::string& what) const;

 private:
  std::string message(const std::string& what) const;
  std::string layer_;
  nvinfer1::IErrorRecorder* recorder_ = nullptr;
};

}  // namespace fa_trt
