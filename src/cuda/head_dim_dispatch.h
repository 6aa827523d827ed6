// From a call's head dim to the kernel instantiation that serves it: the smallest built head dim
// at or above it (lists ascending, from fa_build_config.h), for every family's host side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/error.h"

namespace fa::cuda {

// Smallest head dim of `dims` (ascending) >= d; 0: none.
template <size_t N>
int smallest_fit(const int (&dims)[N], int64_t d) {
  for (int k : dims)
    if (d <= k) return k;
  return 0;
}

// Calls run(std::integral_constant<int, D>) for the first D in Ds... (ascending) >= head_dim:
// the instantiation that covers it. family and pass name the failure (never reached after the
// family's check).
template <int D, int... Ds, typename Run>
void with_head_dim(int64_t head_dim, const char* family, const char* pass, Run&& run) {
  if (head_dim <= D) return run(std::integral_constant<int, D>{});
  if constexpr (sizeof...(Ds) > 0) {
    with_head_dim<Ds...>(head_dim, family, pass, run);
  } else {
    fail(FA_ERROR_INTERNAL, "no ", family, " ", pass, " instantiation for head_dim=", head_dim);
  }
}

}  // namespace fa::cuda
