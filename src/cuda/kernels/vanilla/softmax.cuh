// The element-wise parts of vanilla attention, one thread block per row of the score matrix:
// the forward's fused scale + mask + softcap + ALiBi + softmax + dropout (S -> P, LSE), and the
// backward's fused P / dS kernel. Both write their 16-bit (or fp32) results over the fp32 rows
// they read, so that standard attention costs one fp32 matrix per pass and no more.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "core/mask.h"
#include "core/philox.h"

namespace fa::cuda::vanilla {

// Threads per row block: 8 warps keep enough loads in flight to stream a long row.
constexpr int kRowThreads = 256;
// Elements each thread holds per chunk of the in-place write-back (see write_back below).
constexpr int kChunkPerThread = 8;
constexpr int kChunk = kRowThreads * kChunkPerThread;

// The matrices of one launch: entry e = (b, h), b = b_first + e / heads_q; rows are queries of
// sequence b (packed row q_row0 + i), columns its keys; each matrix is (len_q, len_k) fp32, dense.
struct RowBatch {
  int64_t b_first = 0, entries = 0;
  int64_t len_q = 0, len_k = 0;
  int64_t q_row0 = 0;  // packed row of query 0 (0 for fixed-length batches)
  FA_HOST_DEVICE int64_t matrix_elems() const { return len_q * len_k; }
};

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Block-wide reduction (sum or max) of one float per thread; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float x, float* smem) {
  constexpr unsigned kAll = 0xffffffffu;
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(kAll, x, o);
    x = kMax ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read by a previous reduction
  if (lane == 0) smem[warp] = x;
  __syncthreads();
  x = lane < kRowThreads / 32 ? smem[lane] : (kMax ? -INFINITY : 0.f);
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(kAll, x, o);
    x = kMax ? fmaxf(x, y) : x + y;
  }
  return x;
}

// What a row needs to turn a raw q·k into its logit and dropout factor.
struct RowContext {
  int64_t b, h, i;
  Visibility vis;
  Logit<float> logit;
  float scale;
  bool dropout;
  DropoutStream drop;
  uint32_t bh;

  __device__ RowContext(const Params& p, const RowBatch& t, int64_t entry, int64_t row)
      : b(t.b_first + entry / p.heads_q), h(entry % p.heads_q), i(row),
        vis{t.len_k - t.len_q, p.window_left, p.window_right},
        logit{p.softcap, p.alibi_slope(t.b_first + entry / p.heads_q, entry % p.heads_q),
              t.len_k - t.len_q},
        scale(p.softmax_scale), dropout(p.dropout_p > 0.f),
        drop(DropoutStream::make(p.seed, p.offset, p.dropout_p)),
        bh(uint32_t((t.b_first + entry / p.heads_q) * p.heads_q + entry % p.heads_q)) {}

  // Logit of raw score s at column j (-inf where masked); *dlogit gets d logit / d(scale * s).
  __device__ float operator()(float s, int64_t j, float* dlogit = nullptr) const {
    if (!vis.visible(i, j)) return -INFINITY;
    return logit(scale * s, i, j, dlogit);
  }
  __device__ float keep_factor(int64_t j) const {
    if (!dropout) return 1.f;
    return drop.keep(bh, uint32_t(i), uint32_t(j)) ? drop.keep_scale : 0.f;
  }
};

// Streams one fp32 row through `f(j, s) -> value`, writing value as T at column j of the same
// row reinterpreted as T[]. In place is safe chunk by chunk: every thread reads its values of
// the chunk before any thread writes, and a T write at column j only touches bytes of fp32
// columns <= j, which were read in this chunk or an earlier one.
template <typename T, typename F>
__device__ void write_back(float* row, int64_t len, F f) {
  T* out = reinterpret_cast<T*>(row);
  for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
    float v[kChunkPerThread];
#pragma unroll
    for (int r = 0; r < kChunkPerThread; ++r) {
      const int64_t j = c0 + r * kRowThreads + threadIdx.x;
      v[r] = j < len ? f(j, row[j]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kChunkPerThread; ++r) {
      const int64_t j = c0 + r * kRowThreads + threadIdx.x;
      if (j < len) out[j] = from_float<T>(v[r]);
    }
    __syncthreads();  // a wider T (fp32) writes the next chunk's first bytes: finish first
  }
}

// S (raw Q·Kᵀ, fp32) -> P (dropped, in T, over S) and p.lse; one block per (entry, row).
template <typename T>
__global__ void __launch_bounds__(kRowThreads) softmax_forward(Params p, RowBatch t, float* S) {
  __shared__ float smem[kRowThreads / 32];
  const int64_t entry = blockIdx.x / t.len_q, i = blockIdx.x % t.len_q;
  const RowContext ctx(p, t, entry, i);
  float* row = S + (entry * t.len_q + i) * t.len_k;

  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < t.len_k; j += kRowThreads) mx = fmaxf(mx, ctx(row[j], j));
  mx = block_reduce<true>(mx, smem);
  float sum = 0.f;
  if (mx != -INFINITY)
    for (int64_t j = threadIdx.x; j < t.len_k; j += kRowThreads) sum += expf(ctx(row[j], j) - mx);
  sum = block_reduce<false>(sum, smem);
  const bool empty = mx == -INFINITY;  // no visible key: P = 0, LSE = -inf (as the reference)
  const float inv = empty ? 0.f : 1.f / sum;
  write_back<T>(row, t.len_k, [&](int64_t j, float s) {
    if (empty) return 0.f;
    return expf(ctx(s, j) - mx) * inv * ctx.keep_factor(j);
  });
  if (threadIdx.x == 0 && p.lse.data != nullptr)  // NULL: a forward without its LSE
    p.lse.at(ctx.b, ctx.h, t.q_row0 + i) = empty ? -INFINITY : mx + logf(sum);
}

// S (raw Q·Kᵀ) and dP (dO·Vᵀ), fp32 -> dropped P (T, over S) and
// dS = scale · P ∘ (dP ∘ keep − D) ∘ d logit (T, over dP), D = Σ_j P_ij dP_ij keep_ij,
// with P recomputed from S and the forward's LSE.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) softmax_backward(Params p, RowBatch t, float* S,
                                                                float* dP) {
  __shared__ float smem[kRowThreads / 32];
  const int64_t entry = blockIdx.x / t.len_q, i = blockIdx.x % t.len_q;
  const RowContext ctx(p, t, entry, i);
  const int64_t offset = (entry * t.len_q + i) * t.len_k;
  float* s_row = S + offset;
  float* dp_row = dP + offset;
  const float lse = p.lse.at(ctx.b, ctx.h, t.q_row0 + i);
  const bool empty = lse == -INFINITY;
  auto prob = [&](int64_t j, float s, float* dlogit) {
    return empty ? 0.f : expf(ctx(s, j, dlogit) - lse);
  };

  float D = 0.f;
  for (int64_t j = threadIdx.x; j < t.len_k; j += kRowThreads)
    D += prob(j, s_row[j], nullptr) * dp_row[j] * ctx.keep_factor(j);
  D = block_reduce<false>(D, smem);
  // dS first: it reads S, which the P write-back then replaces.
  write_back<T>(dp_row, t.len_k, [&](int64_t j, float dp) {
    float g = 1.f;
    const float pr = prob(j, s_row[j], &g);
    return pr == 0.f ? 0.f : ctx.scale * pr * (dp * ctx.keep_factor(j) - D) * g;
  });
  write_back<T>(s_row, t.len_k,
                [&](int64_t j, float s) { return prob(j, s, nullptr) * ctx.keep_factor(j); });
}

}  // namespace fa::cuda::vanilla
