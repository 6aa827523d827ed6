// Host-side tools around fp8 e4m3 attention inputs (issue 30): per-(batch, kv head) quantisation
// with FlashAttention-3's descale layout, and the incoherent processing of q and k (a random
// Hadamard-sign rotation along head_dim, which leaves every q·k unchanged while spreading an
// outlier channel's magnitude over all channels, so that e4m3's 3 mantissa bits lose less).
// Used by the tests and the error measurements; the library's kernels take already quantised
// inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/fp8.h"

namespace fa::cpu {

// The descale that maps amax, the largest magnitude of a block of values, onto e4m3's largest
// finite value: x is stored as to_e4m3(x / descale). 1 for an all-zero block.
inline float e4m3_descale(float amax) { return amax > 0.f ? amax / kE4m3Max : 1.f; }

// Whether n is a power of two (the rotation's head dims).
inline bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// x (d values, d a power of two) <- H diag(signs) x / sqrt(d), H the Sylvester-Hadamard matrix:
// an orthogonal map, so applying the same signs to a query and a key keeps their dot product
// (up to fp32 rounding). signs[c] is +1 or -1.
inline void hadamard_sign_rotate(float* x, int64_t d, const int8_t* signs) {
  for (int64_t c = 0; c < d; ++c) x[c] *= float(signs[c]);
  for (int64_t h = 1; h < d; h *= 2)  // the fast Walsh-Hadamard transform, in place
    for (int64_t i = 0; i < d; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float norm = 1.f / std::sqrt(float(d));
  for (int64_t c = 0; c < d; ++c) x[c] *= norm;
}

// d random signs (+1 / -1) from a seed (splitmix64: the same signs on every platform).
inline std::vector<int8_t> random_signs(int64_t d, uint64_t seed) {
  std::vector<int8_t> s(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) {
    uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s[size_t(c)] = ((z ^ (z >> 31)) & 1u) ? int8_t(1) : int8_t(-1);
  }
  return s;
}

}  // namespace fa::cpu
