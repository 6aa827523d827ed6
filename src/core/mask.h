// The attention semantics every backend shares: which keys a query sees, and how a raw score
// q·k becomes the logit that enters the softmax. Host and device compile this one header.
//
// Positions are aligned bottom-right (FlashAttention's convention): query row i sits at key
// position i + (seqlen_k - seqlen_q). With that diagonal offset, query i sees key j iff
//   j >= i + offset - window_left   (unless window_left  == -1)
//   j <= i + offset + window_right  (unless window_right == -1; causal means window_right = 0)
// and the logit is  softcap(scale * q·k) - slope * |i + offset - j|, where
// softcap(x) = c * tanh(x / c) when c > 0, else x.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace fa {

struct Visibility {
  int64_t offset;        // seqlen_k - seqlen_q of this sequence
  int64_t window_left;   // -1: unbounded
  int64_t window_right;  // -1: unbounded

  FA_HOST_DEVICE bool visible(int64_t i, int64_t j) const {
    const int64_t diag = i + offset;
    return (window_left < 0 || j >= diag - window_left) &&
           (window_right < 0 || j <= diag + window_right);
  }

  // First key any of the rows [row_begin, row_end) sees (clamped to [0, seqlen_k]).
  FA_HOST_DEVICE int64_t key_begin(int64_t row_begin, int64_t seqlen_k) const {
    if (window_left < 0) return 0;
    const int64_t j = row_begin + offset - window_left;
    return j < 0 ? 0 : (j > seqlen_k ? seqlen_k : j);
  }
  // One past the last key any of the rows [row_begin, row_end) sees (clamped to [0, seqlen_k]).
  FA_HOST_DEVICE int64_t key_end(int64_t row_end, int64_t seqlen_k) const {
    if (window_right < 0) return seqlen_k;
    const int64_t j = row_end - 1 + offset + window_right + 1;
    return j < 0 ? 0 : (j > seqlen_k ? seqlen_k : j);
  }
  // True when every (row, key) pair of the block is visible: no per-element mask needed.
  FA_HOST_DEVICE bool block_unmasked(int64_t row_begin, int64_t row_end, int64_t col_begin,
                                     int64_t col_end) const {
    return visible(row_end - 1, col_begin) && visible(row_begin, col_end - 1);
  }
  // Query rows that see key j: [row_begin, row_end) (clamped to [0, seqlen_q]).
  FA_HOST_DEVICE int64_t row_begin(int64_t col_begin, int64_t seqlen_q) const {
    if (window_right < 0) return 0;
    const int64_t i = col_begin - offset - window_right;
    return i < 0 ? 0 : (i > seqlen_q ? seqlen_q : i);
  }
  FA_HOST_DEVICE int64_t row_end(int64_t col_end, int64_t seqlen_q) const {
    if (window_left < 0) return seqlen_q;
    const int64_t i = col_end - 1 - offset + window_left + 1;
    return i < 0 ? 0 : (i > seqlen_q ? seqlen_q : i);
  }
};

// Raw score -> logit. T is double for the reference, float for the kernels.
template <typename T>
struct Logit {
  T softcap;     // 0: off
  T alibi_slope; // 0: off
  int64_t offset;

  // x = scale * q·k. Returns the logit; *dlogit_dx (if given) receives d logit / d x.
  FA_HOST_DEVICE T operator()(T x, int64_t i, int64_t j, T* dlogit_dx = nullptr) const {
    T d = T(1);
    if (softcap > T(0)) {
      const T t = std::tanh(x / softcap);
      x = softcap * t;
      d = T(1) - t * t;
    }
    if (alibi_slope != T(0)) {
      const int64_t dist = i + offset - j;
      x -= alibi_slope * T(dist < 0 ? -dist : dist);
    }
    if (dlogit_dx) *dlogit_dx = d;
    return x;
  }
};

}  // namespace fa
