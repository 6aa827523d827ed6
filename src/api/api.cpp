// The C ABI: every entry point validates, dispatches, and turns internal errors into a status
// plus a per-thread message. No exception crosses this boundary.
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "api/dispatch.h"
#include "api/guard.h"
#include "api/internal.h"
#include "api/validate.h"
#include "core/device.h"
#include "core/error.h"
#include "cpu/backend.h"
#include "flashattn/flashattn.h"

namespace {

using fa::api::guarded;

fa::Params validated(const fa_params* params, fa::Pass pass) {
  return pass == fa::Pass::Forward ? fa::validate_forward(params) : fa::validate_backward(params);
}

// ctx: null for the public entry points (the compiled-in knobs), else a test's (internal.h).
fa_status workspace_query(const fa_params* params, size_t* bytes, fa::Pass pass,
                          const fa::Tuning* tuning) {
  return guarded([&] {
    if (bytes == nullptr) fa::fail(FA_ERROR_NULL_POINTER, "bytes is NULL");
    const fa::Params p = validated(params, pass);
    fa::Context ctx = fa::default_context(p);
    if (tuning) ctx.tuning = *tuning;
    *bytes = fa::workspace_size(fa::select_kernel(p, pass, ctx), p, pass, ctx);
  });
}

fa_status run_pass(const fa_params* params, void* workspace, size_t workspace_bytes, void* stream,
                   fa::Pass pass, const fa::Tuning* tuning) {
  return guarded([&] {
    const fa::Params p = validated(params, pass);
    fa::Context ctx = fa::default_context(p);
    if (tuning) ctx.tuning = *tuning;
    const fa::Family& k = fa::select_kernel(p, pass, ctx);
    const size_t need = fa::min_workspace_size(k, p, pass, ctx);
    const char* query =
        pass == fa::Pass::Forward ? "fa_forward_workspace_size" : "fa_backward_workspace_size";
    if (need > 0 && workspace == nullptr)
      fa::fail(FA_ERROR_WORKSPACE, "workspace is NULL; this call needs at least ", need,
               " bytes (ask ", query, ")");
    if (workspace_bytes < need)
      fa::fail(FA_ERROR_WORKSPACE, "workspace_bytes=", workspace_bytes, " is too small; need >= ",
               need, " (ask ", query, ")");
    // The CUDA kernels read and reduce into the workspace 16 bytes at a time (cudaMalloc's
    // pointers are 256-byte aligned); a misaligned one would fault on the device.
    if (need > 0 && p.device.type == FA_DEVICE_CUDA &&
        reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
      fa::fail(FA_ERROR_ALIGNMENT, "workspace=", workspace,
               " must be 16-byte aligned for CUDA tensors");
    fa::validate_device_inputs(params, p, stream);
    fa::run(k, p, pass, ctx, workspace, workspace_bytes, stream);
  });
}

fa_status select_family(const fa_params* params, int32_t backward, const char** name,
                        const fa::Tuning* tuning) {
  return guarded([&] {
    if (name == nullptr) fa::fail(FA_ERROR_NULL_POINTER, "name is NULL");
    const fa::Pass pass = backward ? fa::Pass::Backward : fa::Pass::Forward;
    const fa::Params p = validated(params, pass);
    fa::Context ctx = fa::default_context(p);
    if (tuning) ctx.tuning = *tuning;
    *name = fa::family_name(fa::select_kernel(p, pass, ctx));
  });
}

}  // namespace

extern "C" {

int32_t fa_version(void) { return FA_VERSION; }

const char* fa_build_info(void) {
  static const std::string info = [] {
    std::string s = "flashattn " + std::to_string(FA_VERSION_MAJOR) + "." +
                    std::to_string(FA_VERSION_MINOR) + "." + std::to_string(FA_VERSION_PATCH) +
                    " cpu(" + fa::cpu::isa_name() + ")";
#ifdef FA_CUDA_ARCHS
    s += " cuda(" FA_CUDA_ARCHS ")";
#endif
    return s;
  }();
  return info.c_str();
}

void fa_params_init(fa_params* params) {
  if (params == nullptr) return;
  *params = fa_params{};
  params->struct_size = sizeof(fa_params);
  params->backend = FA_BACKEND_AUTO;
  params->window_left = -1;
  params->window_right = -1;
}

const char* fa_last_error(void) { return fa::api::last_error().c_str(); }

const char* fa_status_string(fa_status status) {
  // A C caller may pass any int: read it as one (a load of an fa_status lvalue holding a value
  // outside the enumerators is undefined in C++, and UBSan reports it).
  int code = 0;
  static_assert(sizeof(code) == sizeof(status), "fa_status is an int");
  std::memcpy(&code, &status, sizeof(code));
  switch (code) {
    case FA_OK: return "ok";
    case FA_ERROR_NULL_POINTER: return "null pointer";
    case FA_ERROR_DTYPE: return "bad dtype";
    case FA_ERROR_RANK: return "bad rank";
    case FA_ERROR_SHAPE: return "shape mismatch";
    case FA_ERROR_HEAD_DIM: return "head_dim out of range";
    case FA_ERROR_HEADS: return "heads_q not a multiple of heads_kv";
    case FA_ERROR_STRIDE: return "bad stride";
    case FA_ERROR_ALIGNMENT: return "misaligned pointer";
    case FA_ERROR_SIZE: return "bad size";
    case FA_ERROR_CU_SEQLENS: return "bad cu_seqlens";
    case FA_ERROR_WINDOW: return "bad window";
    case FA_ERROR_DROPOUT: return "bad dropout_p";
    case FA_ERROR_SOFTCAP: return "bad softcap";
    case FA_ERROR_SCALE: return "bad softmax_scale";
    case FA_ERROR_DEVICE: return "device mismatch";
    case FA_ERROR_WORKSPACE: return "workspace too small";
    case FA_ERROR_ALIBI: return "bad alibi_slopes";
    case FA_ERROR_UNSUPPORTED: return "unsupported";
    case FA_ERROR_VERSION: return "unknown params version";
    case FA_ERROR_BACKEND: return "backend unavailable";
    case FA_ERROR_CUDA: return "CUDA error";
    case FA_ERROR_INTERNAL: return "internal error";
    case FA_ERROR_COMM: return "communicator error";
  }
  return "unknown status";
}

fa_status fa_forward_workspace_size(const fa_params* params, size_t* bytes) {
  return workspace_query(params, bytes, fa::Pass::Forward, nullptr);
}
fa_status fa_backward_workspace_size(const fa_params* params, size_t* bytes) {
  return workspace_query(params, bytes, fa::Pass::Backward, nullptr);
}
fa_status fa_forward(const fa_params* params, void* workspace, size_t workspace_bytes,
                     void* stream) {
  return run_pass(params, workspace, workspace_bytes, stream, fa::Pass::Forward, nullptr);
}
fa_status fa_backward(const fa_params* params, void* workspace, size_t workspace_bytes,
                      void* stream) {
  return run_pass(params, workspace, workspace_bytes, stream, fa::Pass::Backward, nullptr);
}
fa_status fa_select_kernel(const fa_params* params, int32_t backward, const char** name) {
  return select_family(params, backward, name, nullptr);
}

int32_t fa_cuda_device_count(void) { return fa::cuda_device_count(); }

}  // extern "C"

namespace fa::api {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

}  // namespace fa::api

namespace fa::internal {

fa_status workspace_size(const fa_params* params, Pass pass, const Tuning& tuning, size_t* bytes) {
  return workspace_query(params, bytes, pass, &tuning);
}
fa_status run(const fa_params* params, Pass pass, const Tuning& tuning, void* workspace,
              size_t workspace_bytes, void* stream) {
  return run_pass(params, workspace, workspace_bytes, stream, pass, &tuning);
}
fa_status select_kernel(const fa_params* params, Pass pass, const Tuning& tuning,
                        const char** name) {
  return select_family(params, pass == Pass::Backward, name, &tuning);
}

}  // namespace fa::internal
