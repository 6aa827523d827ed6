// The layouts of fa_params this library knows (flashattn.h, "Versioning"): their sizes, and a
// caller's struct read in the current layout. The initialisers of the older layouts
// (fa_params_init: 0.1, fa_params_init_v2: 0.2, fa_params_init_v3: 0.3, fa_params_init_v4: 0.4)
// are in params_abi.cpp; the current layout's (fa_params_init_v5, the header's fa_params_init) in
// api.cpp.
#pragma once

#include <cstddef>

#include "flashattn/flashattn.h"

namespace fa {

// sizeof(fa_params) of 0.1: that layout ends where the first field of 0.2 begins (no tail
// padding: block_table is as aligned as the struct).
constexpr size_t kParamsSize_0_1 = offsetof(fa_params, block_table);
constexpr size_t kParamsSize_0_2 = offsetof(fa_params, cache_batch_idx);  // likewise
constexpr size_t kParamsSize_0_3 = offsetof(fa_params, attn_bias);  // likewise
constexpr size_t kParamsSize_0_4 = offsetof(fa_params, q_descale);  // likewise
constexpr size_t kParamsSize_0_5 = sizeof(fa_params);

// *caller in the current layout: its first struct_size bytes - never more - over the defaults of
// the fields its layout predates (all zero: the fields since 0.2 default to zero). Throws
// FA_ERROR_VERSION for a struct_size that is not a known layout's.
fa_params current_layout(const fa_params& caller);

}  // namespace fa
