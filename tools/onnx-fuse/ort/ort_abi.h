// The part of ONNX Runtime's C ABI that the custom op uses, declared here.
//
// Why not onnxruntime_c_api.h: the onnxruntime wheel on PyPI (what CI installs) ships the shared
// library but no headers, and neither PyPI nor Debian has a package with them. ONNX Runtime's C
// ABI is versioned and append-only: OrtGetApiBase() returns OrtApiBase {GetApi, GetVersionString};
// GetApi(version) returns a table of function pointers whose slots never move once shipped, and
// OrtCustomOp is a struct of callbacks read as far as its `version` says. So we name the slots we
// call by their index (all from API versions 1 and 10) and lay out OrtCustomOp up to the fields
// of version 16 (CreateKernelV2 / KernelComputeV2). With -DFA_ONNXRUNTIME_INCLUDE_DIR pointing at
// the real header, ort_abi_check.h static_asserts every index and offset against it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fa_ort {

struct OrtStatus;
struct OrtSessionOptions;
struct OrtCustomOpDomain;
struct OrtKernelInfo;
struct OrtKernelContext;
struct OrtValue;
struct OrtTensorTypeAndShapeInfo;
struct OrtMemoryInfo;
struct OrtApi;  // opaque: a table of function pointers, read through Slot below

// ONNXTensorElementDataType values used here (the ONNX TensorProto.DataType numbers).
enum ElementType : int { kUndefined = 0, kFloat = 1, kFloat16 = 10, kBfloat16 = 16 };
enum ErrorCode : int { kOk = 0, kFail = 1, kInvalidArgument = 2 };
enum Characteristic : int { kRequired = 0, kOptional = 1 };

struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)();
};

// The API version requested: KernelComputeV2 needs 16 (ONNX Runtime 1.16).
constexpr uint32_t kApiVersion = 16;

// Indices into the OrtApi table.
enum class Slot : size_t {
  CreateStatus = 0,
  CreateCustomOpDomain = 26,
  CustomOpDomain_Add = 27,
  AddCustomOpDomain = 28,
  GetTensorMutableData = 51,
  GetTensorElementType = 60,
  GetDimensionsCount = 61,
  GetDimensions = 62,
  GetTensorTypeAndShape = 65,
  MemoryInfoGetName = 71,
  KernelInfoGetAttribute_float = 85,
  KernelInfoGetAttribute_int64 = 86,
  KernelInfoGetAttribute_string = 87,
  KernelContext_GetInputCount = 88,
  KernelContext_GetInput = 90,
  KernelContext_GetOutput = 91,
  ReleaseStatus = 93,
  ReleaseTensorTypeAndShapeInfo = 99,
  KernelContext_GetGPUComputeStream = 193,
  GetTensorMemoryInfo = 194,
};

// Function pointer types of those slots.
using CreateStatusFn = OrtStatus* (*)(int code, const char* msg);
using CreateCustomOpDomainFn = OrtStatus* (*)(const char* domain, OrtCustomOpDomain** out);
struct OrtCustomOp;
using CustomOpDomain_AddFn = OrtStatus* (*)(OrtCustomOpDomain* domain, const OrtCustomOp* op);
using AddCustomOpDomainFn = OrtStatus* (*)(OrtSessionOptions* options, OrtCustomOpDomain* domain);
using GetTensorMutableDataFn = OrtStatus* (*)(OrtValue* value, void** out);
using GetTensorElementTypeFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo* info, int* out);
using GetDimensionsCountFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
using GetDimensionsFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t n);
using GetTensorTypeAndShapeFn = OrtStatus* (*)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out);
using MemoryInfoGetNameFn = OrtStatus* (*)(const OrtMemoryInfo* info, const char** out);
using KernelInfoGetAttribute_floatFn = OrtStatus* (*)(const OrtKernelInfo* info, const char* name, float* out);
using KernelInfoGetAttribute_int64Fn = OrtStatus* (*)(const OrtKernelInfo* info, const char* name, int64_t* out);
using KernelInfoGetAttribute_stringFn = OrtStatus* (*)(const OrtKernelInfo* info, const char* name, char* out,
                                                       size_t* size);
using KernelContext_GetInputCountFn = OrtStatus* (*)(const OrtKernelContext* ctx, size_t* out);
using KernelContext_GetInputFn = OrtStatus* (*)(const OrtKernelContext* ctx, size_t index, const OrtValue** out);
using KernelContext_GetOutputFn = OrtStatus* (*)(OrtKernelContext* ctx, size_t index, const int64_t* dims,
                                                 size_t dim_count, OrtValue** out);
using ReleaseStatusFn = void (*)(OrtStatus* status);
using ReleaseTensorTypeAndShapeInfoFn = void (*)(OrtTensorTypeAndShapeInfo* info);
using KernelContext_GetGPUComputeStreamFn = OrtStatus* (*)(const OrtKernelContext* ctx, void** out);
using GetTensorMemoryInfoFn = OrtStatus* (*)(const OrtValue* value, const OrtMemoryInfo** out);

template <class Fn>
Fn slot(const OrtApi* api, Slot s) {
  return reinterpret_cast<Fn const*>(api)[static_cast<size_t>(s)];
}

// OrtCustomOp as ONNX Runtime reads it for version 16: every callback in order. A null
// KernelCompute with version > 15 makes the runtime use CreateKernelV2 / KernelComputeV2.
struct OrtCustomOp {
  uint32_t version;
  void* (*CreateKernel)(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info);
  const char* (*GetName)(const OrtCustomOp* op);
  const char* (*GetExecutionProviderType)(const OrtCustomOp* op);
  int (*GetInputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetInputTypeCount)(const OrtCustomOp* op);
  int (*GetOutputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetOutputTypeCount)(const OrtCustomOp* op);
  void (*KernelCompute)(void* kernel, OrtKernelContext* ctx);
  void (*KernelDestroy)(void* kernel);
  int (*GetInputCharacteristic)(const OrtCustomOp* op, size_t index);
  int (*GetOutputCharacteristic)(const OrtCustomOp* op, size_t index);
  int (*GetInputMemoryType)(const OrtCustomOp* op, size_t index);
  int (*GetVariadicInputMinArity)(const OrtCustomOp* op);
  int (*GetVariadicInputHomogeneity)(const OrtCustomOp* op);
  int (*GetVariadicOutputMinArity)(const OrtCustomOp* op);
  int (*GetVariadicOutputHomogeneity)(const OrtCustomOp* op);
  OrtStatus* (*CreateKernelV2)(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info, void** kernel);
  OrtStatus* (*KernelComputeV2)(void* kernel, OrtKernelContext* ctx);
  // Fields of later versions (shape inference, opset range, in-place and alias maps): never read
  // for version 16; kept null so that the struct is as large as a newer runtime expects.
  void* later_fields[7];
};
constexpr uint32_t kCustomOpVersion = 16;

}  // namespace fa_ort
