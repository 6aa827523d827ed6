// The kernels of core/row_ops.h. They are memory-bound passes over one shard's rows, next to
// attention calls that cost O(rows x keys) each, so they are written for plain clarity: one
// thread an element for copies, sums and fills; one warp a (batch, row, head) for a merge, which
// needs the row's LSE before its columns. Values are read and written through core/dtype.h's
// conversions (fp32, fp16, bf16), the merge by core/combine.h's functions (the rule the CPU's
// combine step and the split-KV kernel use).
#include "cuda/row_ops.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/combine.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cuda/device_guard.h"

namespace fa::cuda {
namespace {

constexpr int kThreads = 256;      // a block of the element-wise kernels
constexpr int kMergeWarps = 4;     // (batch, row, head) rows a block of the merge kernel
constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride beyond this (any size stays in range)

__device__ __forceinline__ float load(const View& v, int64_t b, int64_t i, int64_t h, int64_t c) {
  switch (v.dtype) {
    case DType::F16: return to_float(v.at<const half_t>(b, i, h)[c]);
    case DType::BF16: return to_float(v.at<const bfloat16_t>(b, i, h)[c]);
    default: return v.at<const float>(b, i, h)[c];  // the ring's views hold no other dtype
  }
}

__device__ __forceinline__ void store(const View& v, int64_t b, int64_t i, int64_t h, int64_t c,
                                      float x) {
  switch (v.dtype) {
    case DType::F16: v.at<half_t>(b, i, h)[c] = to_half(x); return;
    case DType::BF16: v.at<bfloat16_t>(b, i, h)[c] = to_bf16(x); return;
    default: v.at<float>(b, i, h)[c] = x; return;
  }
}

// Copy, Add, Fill: element e of the block is (b, i, h, c), c fastest.
__global__ void elementwise_kernel(RowOp op) {
  const RowBlock n = op.n;
  const int64_t total = n.batch * n.rows * n.heads * n.dim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % n.dim, h = (e / n.dim) % n.heads, i = (e / (n.dim * n.heads)) % n.rows,
                  b = e / (n.dim * n.heads * n.rows);
    switch (op.kind) {
      case RowOp::Kind::Copy: store(op.dst, b, i, h, c, load(op.src[0], b, i, h, c)); break;
      case RowOp::Kind::Add: op.dst.at<float>(b, i, h)[c] += load(op.src[0], b, i, h, c); break;
      default: op.dst.at<float>(b, i, h)[c] = op.value; break;  // Fill
    }
  }
}

// One warp a (b, i, h): every lane reads the parts' LSE, then the lanes take the columns.
__global__ void merge_kernel(RowOp op) {
  const RowBlock n = op.n;
  const int lane = int(threadIdx.x % 32);
  const int64_t total = n.batch * n.rows * n.heads;
  // The loop's bounds are the same for every lane of a warp: it runs and leaves whole.
  for (int64_t row = int64_t(blockIdx.x) * kMergeWarps + threadIdx.x / 32; row < total;
       row += int64_t(gridDim.x) * kMergeWarps) {
    const int64_t h = row % n.heads, i = (row / n.heads) % n.rows, b = row / (n.heads * n.rows);
    const auto lse_of = [&](int64_t k) { return op.src_lse[k].at(b, h, i); };
    const float lse = merged_lse<float>(lse_of, op.parts);
    float w[kMaxMergeParts];
#pragma unroll
    for (int k = 0; k < kMaxMergeParts; ++k) w[k] = k < op.parts ? part_weight(lse_of(k), lse) : 0.f;
    // In place (dst is a part's view): every lane has the parts' LSE before lane 0 writes
    // dst_lse, and each lane reads its columns of every part before writing them.
    __syncwarp();
    for (int64_t c = lane; c < n.dim; c += 32) {
      float o = 0.f;
#pragma unroll
      for (int k = 0; k < kMaxMergeParts; ++k)
        if (w[k] != 0.f) o += w[k] * load(op.src[k], b, i, h, c);  // an empty part: not read
      store(op.dst, b, i, h, c, o);
    }
    if (lane == 0 && op.dst_lse.data != nullptr) op.dst_lse.at(b, h, i) = lse;
  }
}

unsigned grid_for(int64_t items, int64_t per_block) {
  return unsigned(std::min((items + per_block - 1) / per_block, kMaxBlocks));
}

}  // namespace

void row_op(const RowOp& op, int device, void* stream) {
  const RowBlock& n = op.n;
  const int64_t rows = n.batch * n.rows * n.heads;
  if (rows * n.dim == 0) return;
  DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (op.kind == RowOp::Kind::Merge) {
    if (op.parts < 1 || op.parts > kMaxMergeParts)
      fail(FA_ERROR_INTERNAL, "a merge of ", op.parts, " parts (1..", kMaxMergeParts, ")");
    merge_kernel<<<grid_for(rows, kMergeWarps), 32 * kMergeWarps, 0, s>>>(op);
  } else {
    elementwise_kernel<<<grid_for(rows * n.dim, kThreads), kThreads, 0, s>>>(op);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(FA_ERROR_CUDA, "ring row kernel launch: ", cudaGetErrorString(err));
}

}  // namespace fa::cuda
