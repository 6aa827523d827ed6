// Rotary position embedding (RoPE) as flash_attn_with_kvcache applies it: to the new keys before
// they enter the cache and to the queries, at their positions. Host and device compile this
// header (like mask.h); the CPU backend's use is cpu/kv_update.cpp.
//
// A vector x of head_dim elements at position pos is rotated in its first rotary_dim (even)
// elements, pair by pair, j < rotary_dim / 2, with c = cos[pos][j], s = sin[pos][j]:
//   interleaved (GPT-J):      (x1, x2) = (x[2j], x[2j + 1])
//   not interleaved (NeoX):   (x1, x2) = (x[j], x[j + rotary_dim / 2])
//   x1' = x1 c - x2 s,   x2' = x1 s + x2 c          (fp32)
// Elements from rotary_dim on are left as they are.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa {

// Indices of the two elements pair j rotates.
FA_HOST_DEVICE int64_t rotary_first(int64_t j, bool interleaved) {
  return interleaved ? 2 * j : j;
}
FA_HOST_DEVICE int64_t rotary_second(int64_t j, int64_t rotary_dim, bool interleaved) {
  return interleaved ? 2 * j + 1 : j + rotary_dim / 2;
}

// One pair, in fp32: (x1, x2) <- (x1 c - x2 s, x1 s + x2 c). Written as two products and a sum
// so that every backend computes the same rounding where it does not contract to FMA.
FA_HOST_DEVICE void rotate_pair(float& x1, float& x2, float c, float s) {
#if defined(__CUDA_ARCH__)
  // nvcc contracts a product and a sum into one FMA by default; the _rn intrinsics never are, so
  // the device rounds as the CPU does (the appended cache rows are bit-exact across backends).
  const float a = __fmul_rn(x1, c), b = __fmul_rn(x2, s), e = __fmul_rn(x1, s), f = __fmul_rn(x2, c);
  x1 = __fsub_rn(a, b);
  x2 = __fadd_rn(e, f);
#else
  const float a = x1 * c, b = x2 * s, e = x1 * s, f = x2 * c;
  x1 = a - b;
  x2 = e + f;
#endif
}

// Position of query row i of entry b whose cache held `cached` keys before the append: cached + i
// when the queries advance (causal or windowed calls), else cached for every row.
FA_HOST_DEVICE int64_t rotary_query_position(int64_t cached, int64_t i, bool advance) {
  return advance ? cached + i : cached;
}

}  // namespace fa
