// Safe copies of a caller's device-side cu_seqlens, for kernels that index by them without
// clamping (the sm80 backward: Params::seq_unclamped). The host never reads the caller's arrays
// (unless check_inputs), so a packed batch's kernels must assume they hold anything.
//
// The copy c' of c (batch + 1 prefix sums over `total` packed rows, each sequence at most
// max_len long) is the closest array with those properties, built in three steps that are each
// the identity on a valid array:
//   x[i] = clamp(c[i], 0, total)                    inside the packed tensor
//   y[i] = max(x[0..i])                             non-decreasing (a prefix max)
//   c'[i] = min(y[i], c'[i-1] + max_len)            no sequence longer than max_len
// The last recurrence is a prefix min too: c'[i] - i·max_len = min over j <= i of
// (y[j] - j·max_len), so the kernel computes all three with block scans. c' is non-decreasing
// (y[i] >= y[i-1] >= c'[i-1]), within [0, total] (c' <= y <= total, c'[0] = y[0] >= 0) and its
// steps are at most max_len: every (start, length) it gives lies inside the tensors and the
// workspace the launch was sized by. A wrong array gives wrong numbers, never a wild access.
#pragma once

#include <cstdint>

#include "core/params.h"

namespace fa::cuda {

// The definition, sequentially (the host tests' oracle and the reference for the kernel).
inline void sanitize_cu_seqlens_reference(const int32_t* c, int32_t* out, int64_t n,
                                          int64_t total, int64_t max_len) {
  int64_t y = 0, prev = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = c[i] < 0 ? 0 : c[i] > total ? total : c[i];
    y = i == 0 || x > y ? x : y;
    const int64_t v = i == 0 ? y : (y < prev + max_len ? y : prev + max_len);
    out[i] = int32_t(v);
    prev = v;
  }
}

// Writes the safe copies of p.cu_seqlens_q / _k (device memory, batch + 1 int32 each) to cu_q /
// cu_k on stream (a cudaStream_t): one 1024-thread block per array, before the kernels that
// read them. max_len: p.seqlen_q / p.seqlen_k.
void sanitize_cu_seqlens(const Params& p, int32_t* cu_q, int32_t* cu_k, void* stream);

}  // namespace fa::cuda
