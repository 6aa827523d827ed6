// What the three parts of Analysis (analysis.cpp: element types and shapes; analysis_values.cpp:
// small values; analysis_masks.cpp: mask bands) share: their limits and two small helpers.
// Internal to fa_onnx_fuse_core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "graph.h"

namespace fa_onnx::rules {

constexpr size_t kMaxValueElems = 64;          // shape tensors and scalars
constexpr size_t kMaxBufferElems = 1u << 24;   // mask buffers read to classify them
constexpr int64_t kSliceEndToInf = int64_t(1) << 40;  // an end this large means "to the end"

inline int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + int64_t(rank) : a; }

// Input i of a node, "" past its inputs.
inline const std::string& in(const onnx::NodeProto& n, int i) {
  static const std::string none;
  return i < n.input_size() ? n.input(i) : none;
}

}  // namespace fa_onnx::rules
