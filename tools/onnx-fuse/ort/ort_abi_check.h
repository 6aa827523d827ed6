// Compiled only with -DFA_ONNXRUNTIME_INCLUDE_DIR: checks ort_abi.h's slot indices and
// OrtCustomOp layout against ONNX Runtime's own header.
#pragma once

#include <onnxruntime_c_api.h>

#define FA_CHECK_SLOT(name) \
  static_assert(offsetof(::OrtApi, name) / sizeof(void*) == size_t(fa_ort::Slot::name), #name)
FA_CHECK_SLOT(CreateStatus);
FA_CHECK_SLOT(CreateCustomOpDomain);
FA_CHECK_SLOT(CustomOpDomain_Add);
FA_CHECK_SLOT(AddCustomOpDomain);
FA_CHECK_SLOT(GetTensorMutableData);
FA_CHECK_SLOT(GetTensorElementType);
FA_CHECK_SLOT(GetDimensionsCount);
FA_CHECK_SLOT(GetDimensions);
FA_CHECK_SLOT(GetTensorTypeAndShape);
FA_CHECK_SLOT(MemoryInfoGetName);
FA_CHECK_SLOT(KernelInfoGetAttribute_float);
FA_CHECK_SLOT(KernelInfoGetAttribute_int64);
FA_CHECK_SLOT(KernelInfoGetAttribute_string);
FA_CHECK_SLOT(KernelContext_GetInputCount);
FA_CHECK_SLOT(KernelContext_GetInput);
FA_CHECK_SLOT(KernelContext_GetOutput);
FA_CHECK_SLOT(ReleaseStatus);
FA_CHECK_SLOT(ReleaseTensorTypeAndShapeInfo);
FA_CHECK_SLOT(KernelContext_GetGPUComputeStream);
FA_CHECK_SLOT(GetTensorMemoryInfo);
#undef FA_CHECK_SLOT
static_assert(offsetof(::OrtCustomOp, KernelComputeV2) == offsetof(fa_ort::OrtCustomOp, KernelComputeV2),
              "OrtCustomOp layout");
static_assert(offsetof(::OrtCustomOp, GetVariadicOutputHomogeneity) ==
                  offsetof(fa_ort::OrtCustomOp, GetVariadicOutputHomogeneity),
              "OrtCustomOp layout");
