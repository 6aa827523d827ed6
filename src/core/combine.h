// Merging partial attention results: the one combine step that split-KV decode and ring
// attention share. Host and device compile this header (like mask.h); src/cpu/combine.cpp is the
// CPU implementation.
//
// A query row's attention over a set of keys split into disjoint parts: part i, computed alone,
// gives its normalised output O_i and log-sum-exp LSE_i (natural log; -inf: the part saw no
// visible key). Over the union,
//   LSE = log Σ_i exp(LSE_i)        O = Σ_i exp(LSE_i - LSE) O_i
// exactly (the softmax of each part, rescaled by its share of the total mass). A row whose every
// part is empty gives O = 0 and LSE = -inf, FlashAttention's convention for fully masked rows.
// Empty parts are skipped, so their O_i is never read (it may be anything, NaN included).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/host_device.h"

namespace fa {

// The merged LSE from its two reductions over the parts: top, the largest LSE_i (-inf when every
// part is empty), and the sum of lse_term(LSE_i, top). merged_lse below runs them one after the
// other; a device kernel may run them across its lanes.
template <typename T>
FA_HOST_DEVICE T lse_term(T lse_i, T top) {
  return lse_i == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(lse_i - top);
}
template <typename T>
FA_HOST_DEVICE T lse_from(T top, T sum) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  return top == neg_inf ? neg_inf : top + std::log(sum);
}

// LSE of n parts, lse(i) = LSE_i; -inf when every part is empty. Subtracting the largest part
// before exp keeps every term in (0, 1]: no overflow for any finite LSE. T: float on the device,
// double or float on the host.
template <typename T, typename LseAt>
FA_HOST_DEVICE T merged_lse(const LseAt& lse, int64_t n) {
  T top = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) top = lse(i) > top ? T(lse(i)) : top;
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += lse_term(T(lse(i)), top);
  return lse_from(top, sum);
}

// The weight of part i in the merged output, exp(LSE_i - LSE); 0 for an empty part (its O_i is
// then not to be read) and for a row with no visible key at all (LSE = -inf).
template <typename T>
FA_HOST_DEVICE T part_weight(T lse_i, T lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  return lse_i == neg_inf || lse == neg_inf ? T(0) : std::exp(lse_i - lse);
}

}  // namespace fa
