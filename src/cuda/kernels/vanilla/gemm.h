// Batched GEMMs of the vanilla backend through cuBLAS, with per-entry pointers so that GQA head
// sharing, free strides and packed variable-length rows need no copies.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/host_device.h"

namespace fa::cuda::vanilla {

// One row-major matrix per batch entry i = (b, h), b = i / heads, h = i % heads, at
//   base + b * stride_b + ((h * head_mul + head_add) / head_div) * stride_h   (bytes)
// head_div maps a query head to its kv head (GQA); head_mul / head_add pick one member of a
// query-head group per kv head (the dK / dV sums over a group).
struct Operand {
  const char* base = nullptr;
  int64_t stride_b = 0, stride_h = 0;  // bytes
  int64_t heads = 1;
  int64_t head_mul = 1, head_add = 0, head_div = 1;
  int64_t ld = 0;  // elements between consecutive rows
  cudaDataType_t type = CUDA_R_32F;

  FA_HOST_DEVICE const char* at(int64_t i) const {
    const int64_t b = i / heads, h = i % heads;
    return base + b * stride_b + ((h * head_mul + head_add) / head_div) * stride_h;
  }
};

// The cuBLAS handle of this thread for the current device, bound to `stream` and to a workspace
// the caller owns (so cuBLAS allocates nothing behind the caller's back).
cublasHandle_t handle_for(cudaStream_t stream, void* cublas_workspace, size_t bytes);

// Bytes of the cuBLAS workspace the vanilla backend hands to cuBLAS (its recommendation for
// Hopper; smaller GPUs need less but the figure is a small constant next to the S matrices).
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

// Row-major C (m x n) = alpha * A (m x k) · B (k x n) + beta * C for each of `count` entries;
// a_trans / b_trans: the operand's memory holds the transpose (k x m / n x k) instead.
// Accumulates in fp32. `pointers` is device scratch for 3 * count pointers.
struct RowMajorGemm {
  int64_t m, n, k;
  bool a_trans, b_trans;
};
void batched_gemm(cublasHandle_t handle, cudaStream_t stream, const RowMajorGemm& g,
                  const Operand& a, const Operand& b, const Operand& c, float alpha, float beta,
                  int64_t count, void** pointers);

}  // namespace fa::cuda::vanilla
