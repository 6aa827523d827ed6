// The kernel of sanitize.h: per array one block of kThreads threads, each owning a run of
// consecutive entries; a run's aggregate goes through a block scan in shared memory, then the
// run is rewritten with its prefix. Two passes (prefix max, then prefix min of y[i] - i·max_len),
// each reading the input (L1 / L2-resident: 4 · (batch + 1) bytes) and writing the output.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/error.h"
#include "cuda/device_guard.h"
#include "cuda/kernels/varlen/sanitize.h"

namespace fa::cuda {
namespace {

constexpr int kThreads = 1024;  // one block: batch + 1 <= 65536 entries, 64 a thread at most

// Inclusive scan of v over the block (op: max or min), Hillis-Steele in shared memory.
template <class Op>
__device__ int64_t block_scan(int64_t v, int64_t* s, Op op) {
  const int t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (int d = 1; d < kThreads; d *= 2) {
    const int64_t other = t >= d ? s[t - d] : v;
    __syncthreads();
    v = op(v, other);
    s[t] = v;
    __syncthreads();
  }
  return v;
}

struct Max {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};
struct Min {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a < b ? a : b; }
};

__global__ void __launch_bounds__(kThreads)
    sanitize_kernel(const int32_t* cu_q, const int32_t* cu_k, int32_t* out_q, int32_t* out_k,
                    int64_t n, int64_t total_q, int64_t total_k, int64_t max_q, int64_t max_k) {
  __shared__ int64_t s[kThreads];
  const bool k = blockIdx.x == 1;
  const int32_t* c = k ? cu_k : cu_q;
  int32_t* out = k ? out_k : out_q;
  const int64_t total = k ? total_k : total_q, max_len = k ? max_k : max_q;
  const int64_t per = (n + kThreads - 1) / kThreads;
  const int64_t begin = per * threadIdx.x, end = begin + per < n ? begin + per : n;
  // Pass 1: y = prefix max of the clamped entries.
  int64_t run = LLONG_MIN;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t x = c[i] < 0 ? 0 : c[i] > total ? total : c[i];
    run = x > run ? x : run;
  }
  block_scan(run, s, Max{});  // s[t]: the max over runs 0..t
  int64_t y = threadIdx.x > 0 ? s[threadIdx.x - 1] : LLONG_MIN;  // the runs before this one
  for (int64_t i = begin; i < end; ++i) {
    const int64_t x = c[i] < 0 ? 0 : c[i] > total ? total : c[i];
    y = x > y ? x : y;
    out[i] = int32_t(y);
  }
  __syncthreads();
  // Pass 2: c'[i] = i·max_len + prefix min of (y[j] - j·max_len).
  run = LLONG_MAX;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t z = int64_t(out[i]) - i * max_len;
    run = z < run ? z : run;
  }
  block_scan(run, s, Min{});
  int64_t m = threadIdx.x > 0 ? s[threadIdx.x - 1] : LLONG_MAX;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t z = int64_t(out[i]) - i * max_len;
    m = z < m ? z : m;
    out[i] = int32_t(i * max_len + m);
  }
}

}  // namespace

void sanitize_cu_seqlens(const Params& p, int32_t* cu_q, int32_t* cu_k, void* stream) {
  const int64_t n = p.batch + 1;
  if (n > int64_t(kThreads) * 64)
    fail(FA_ERROR_INTERNAL, "sanitize_cu_seqlens: batch=", p.batch, " exceeds its one block");
  sanitize_kernel<<<2, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p.cu_seqlens_q, p.cu_seqlens_k, cu_q, cu_k, n,
                                              p.total_q, p.total_k, p.seqlen_q, p.seqlen_k);
  DeviceGuard::check(cudaGetLastError(), "cu_seqlens sanitize launch");
}

}  // namespace fa::cuda
