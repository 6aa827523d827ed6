#include "api/params_abi.h"

#include <cstring>

#include "core/error.h"

namespace fa {

static_assert(sizeof(void*) != 8 || kParamsSize_0_1 == 1144,
              "the 0.1 layout is 1144 bytes on LP64: a field before block_table moved");
static_assert(sizeof(void*) != 8 || kParamsSize_0_2 == 1328,
              "the 0.2 layout is 1328 bytes on LP64: fields are only ever appended");
static_assert(sizeof(void*) != 8 || kParamsSize_0_3 == 1864,
              "the 0.3 layout is 1864 bytes on LP64: fields are only ever appended");
static_assert(sizeof(void*) != 8 || kParamsSize_0_4 == 2040,
              "the 0.4 layout is 2040 bytes on LP64: fields are only ever appended");
static_assert(sizeof(void*) != 8 || kParamsSize_0_5 == 2304,
              "the 0.5 layout is 2304 bytes on LP64: fields are only ever appended");

fa_params current_layout(const fa_params& caller) {
  const size_t size = caller.struct_size;
  if (size != kParamsSize_0_1 && size != kParamsSize_0_2 && size != kParamsSize_0_3 &&
      size != kParamsSize_0_4 && size != kParamsSize_0_5)
    fail(FA_ERROR_VERSION, "params.struct_size=", size, " is not a known size (",
         kParamsSize_0_1, " for version 0.1, ", kParamsSize_0_2, " for 0.2, ", kParamsSize_0_3,
         " for 0.3, ", kParamsSize_0_4, " for 0.4, ", kParamsSize_0_5, " for ", FA_VERSION_MAJOR,
         ".", FA_VERSION_MINOR, "); call fa_params_init first");
  fa_params r{};
  std::memcpy(&r, &caller, size);
  return r;
}

}  // namespace fa

// The symbols programs built against older headers call (the current header maps the name to
// fa_params_init_v5): each writes exactly its layout's bytes, with fa_params_init_v5's defaults.
namespace {
void init_layout(fa_params* params, size_t size) {
  if (params == nullptr) return;
  fa_params d{};
  d.struct_size = size;
  d.backend = FA_BACKEND_AUTO;
  d.window_left = -1;
  d.window_right = -1;
  std::memcpy(static_cast<void*>(params), &d, size);
}
}  // namespace

#undef fa_params_init
extern "C" FA_API void fa_params_init(fa_params* params);
extern "C" FA_API void fa_params_init_v2(fa_params* params);
extern "C" FA_API void fa_params_init_v3(fa_params* params);
extern "C" FA_API void fa_params_init_v4(fa_params* params);

extern "C" void fa_params_init(fa_params* params) { init_layout(params, fa::kParamsSize_0_1); }
extern "C" void fa_params_init_v2(fa_params* params) { init_layout(params, fa::kParamsSize_0_2); }
extern "C" void fa_params_init_v3(fa_params* params) { init_layout(params, fa::kParamsSize_0_3); }
extern "C" void fa_params_init_v4(fa_params* params) { init_layout(params, fa::kParamsSize_0_4); }
