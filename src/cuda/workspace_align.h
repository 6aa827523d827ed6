// The alignment of every block a CUDA family carves out of its workspace: 256 bytes, which cuBLAS
// wants of its workspace and operands and which covers every vector access and TMA base.
#pragma once

#include <cstddef>

namespace fa::cuda {

constexpr size_t kWorkspaceAlign = 256;
constexpr size_t workspace_align(size_t n) {
  return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

}  // namespace fa::cuda
