#include "cuda/head_dim_pad.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/device_guard.h"
#include "cuda/workspace_align.h"

namespace fa::cuda {
namespace {

// The rows of a tensor of p's: fixed-length (batch, seqlen, heads) or packed (total, heads).
struct Rows {
  int64_t batch, seqlen, heads;  // packed: batch 1, seqlen = total
};
Rows q_rows(const Params& p) {
  return p.varlen() ? Rows{1, p.total_q, p.heads_q} : Rows{p.batch, p.seqlen_q, p.heads_q};
}
Rows k_rows(const Params& p) {
  return p.varlen() ? Rows{1, p.total_k, p.heads_kv} : Rows{p.batch, p.seqlen_k, p.heads_kv};
}
// 16-bit elements, or fp32 ones (an fp32 out, dq, dk, dv with 16-bit inputs).
size_t copy_bytes(const Rows& r, int64_t dp, DType dtype) {
  return workspace_align(size_t(r.batch * r.seqlen * r.heads * dp * dtype_size(dtype)));
}

// A contiguous (batch, seqlen, heads, dp) copy at *at, which advances past it; stride_b 0 for
// packed batches (their rows are offset by cu_seqlens, as the caller's views are).
View carve(char** at, const Rows& r, int64_t dp, DType dtype, bool packed) {
  View v;
  v.data = *at;
  v.dtype = dtype;
  v.stride_h = dp;
  v.stride_s = r.heads * dp;
  v.stride_b = packed ? 0 : r.seqlen * r.heads * dp;
  *at += copy_bytes(r, dp, dtype);
  return v;
}

// dst row (b, s, h)[c] = c < cols ? src row[c] : 0, for c < dst_cols: one thread an element
// of E's size (dst and src share the dtype).
template <typename E>
__global__ void copy_rows_kernel(View dst, View src, int64_t seqlen, int64_t heads, int64_t cols,
                                 int64_t dst_cols, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t c = i % dst_cols, row = i / dst_cols;
  const int64_t h = row % heads, s = (row / heads) % seqlen, b = row / (heads * seqlen);
  const E x = c < cols ? src.at<const E>(b, s, h)[c] : E(0);
  dst.at<E>(b, s, h)[c] = x;
}

void copy_rows(const View& dst, const View& src, const Rows& r, int64_t cols, int64_t dst_cols,
               cudaStream_t stream, const char* what) {
  const int64_t n = r.batch * r.seqlen * r.heads * dst_cols;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned((n + kThreads - 1) / kThreads);
  if (dst.dtype == DType::F32)
    copy_rows_kernel<uint32_t><<<blocks, kThreads, 0, stream>>>(dst, src, r.seqlen, r.heads, cols,
                                                                dst_cols, n);
  else
    copy_rows_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(dst, src, r.seqlen, r.heads, cols,
                                                                dst_cols, n);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "head_dim padding (", what, ") launch: ", cudaGetErrorString(err));
}

}  // namespace

size_t padded_bytes(const Params& p, bool backward) {
  const int64_t dp = padded_head_dim(p.head_dim);
  const Rows q = q_rows(p), k = k_rows(p);
  size_t n = copy_bytes(q, dp, p.q.dtype) + copy_bytes(q, dp, p.out.dtype) +
             2 * copy_bytes(k, dp, p.k.dtype);  // q, out; k, v
  if (backward)
    n += copy_bytes(q, dp, p.dout.dtype) + copy_bytes(q, dp, p.dq.dtype) +
         copy_bytes(k, dp, p.dk.dtype) + copy_bytes(k, dp, p.dv.dtype);
  return n;
}

Params padded_params(const Params& p, bool backward, char* base) {
  Params r = p;
  const int64_t dp = padded_head_dim(p.head_dim);
  const Rows q = q_rows(p), k = k_rows(p);
  const bool packed = p.varlen();
  char* at = base;
  r.head_dim = dp;
  r.q = carve(&at, q, dp, p.q.dtype, packed);
  r.out = carve(&at, q, dp, p.out.dtype, packed);
  r.k = carve(&at, k, dp, p.k.dtype, packed);
  r.v = carve(&at, k, dp, p.v.dtype, packed);
  if (backward) {
    r.dout = carve(&at, q, dp, p.dout.dtype, packed);
    r.dq = carve(&at, q, dp, p.dq.dtype, packed);
    r.dk = carve(&at, k, dp, p.dk.dtype, packed);
    r.dv = carve(&at, k, dp, p.dv.dtype, packed);
  }
  return r;
}

void pad_inputs(const Params& p, const Params& padded, bool backward, void* stream_ptr) {
  DeviceGuard guard(p.device.index);
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const Rows q = q_rows(p), k = k_rows(p);
  const int64_t d = p.head_dim, dp = padded.head_dim;
  copy_rows(padded.q, p.q, q, d, dp, stream, "q");
  copy_rows(padded.k, p.k, k, d, dp, stream, "k");
  copy_rows(padded.v, p.v, k, d, dp, stream, "v");
  if (backward) {
    copy_rows(padded.out, p.out, q, d, dp, stream, "out");
    copy_rows(padded.dout, p.dout, q, d, dp, stream, "dout");
  }
}

void unpad_outputs(const Params& p, const Params& padded, bool backward, void* stream_ptr) {
  DeviceGuard guard(p.device.index);
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const Rows q = q_rows(p), k = k_rows(p);
  const int64_t d = p.head_dim;
  if (!backward) return copy_rows(p.out, padded.out, q, d, d, stream, "out");
  copy_rows(p.dq, padded.dq, q, d, d, stream, "dq");
  copy_rows(p.dk, padded.dk, k, d, d, stream, "dk");
  copy_rows(p.dv, padded.dv, k, d, d, stream, "dv");
}

}  // namespace fa::cuda
