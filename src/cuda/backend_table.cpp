// The CUDA backend's side of the seam (core/cuda_backend.h): the table the core reaches the
// kernels through, and the library's one exported symbol, fa_cuda_backend. Each entry runs its
// part of the backend and turns an exception into a status and a message (exceptions never cross
// into the core).
#include <cstdint>
#include <new>
#include <string>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/bwd_sm75.h"
#include "cuda/bwd_sm90.h"
#include "cuda/fwd_sm75.h"
#include "cuda/fwd_sm90.h"
#include "cuda/head_dim_pad.h"
#include "cuda/kvcache.h"
#include "cuda/row_ops.h"
#include "cuda/kernels/vanilla/vanilla.h"
#include "fa_build_config.h"  // generated: FA_SM80_BWD_DIMS where the backward kernels are built

namespace fa::cuda {
namespace {

thread_local std::string t_message;  // the last failure's text on this thread

template <typename F>
fa_status guarded(const char** message, F&& body) {
  try {
    body();
    return FA_OK;
  } catch (const ApiError& e) {
    t_message = e.what();
    *message = t_message.c_str();
    return e.status();
  } catch (const std::bad_alloc&) {
    t_message = "out of host memory";
  } catch (const std::exception& e) {
    t_message = std::string("internal error: ") + e.what();
  } catch (...) {
    t_message = "internal error: unknown exception";
  }
  *message = t_message.c_str();
  return FA_ERROR_INTERNAL;
}

// ---- the families (the rows of src/api/dispatch.cpp) ------------------------------------------
// A family's registry name, for its refusals.
const char* family_name(CudaFamily f) {
  switch (f) {
    case CudaFamily::KvCache: return "cuda-kvcache";
    case CudaFamily::Sm90: return "cuda-sm90";
    case CudaFamily::Sm80: return "cuda-sm80";
    case CudaFamily::Sm75: return "cuda-sm75";
    case CudaFamily::Vanilla: return "cuda-vanilla";
  }
  return "cuda-?";
}

// fp8 forwards are cuda-sm90's (and, with a KV cache's fields, cuda-kvcache's). cuda-sm90's own
// refusal is reported only when no later family refuses, so cuda-sm80's says why cuda-sm90 did not
// take the call (after the checks every CUDA kernel makes, whose errors come first).
void refuse_fp8(const Params& p, const Context& ctx) {
  check_forward(p, ctx, /*fp8_ok=*/true);
  const std::string why = ctx.device.major == 9 ? sm90_fwd_refusal(p, ctx) : "needs an sm90 device";
  fail(FA_ERROR_UNSUPPORTED, "q.dtype=fp8_e4m3 on CUDA: the fp8 forward is cuda-sm90's (KV-cache "
       "calls: cuda-kvcache's), and cuda-sm80 takes fp16 / bf16; cuda-sm90: ",
       why.empty() ? std::string("(none)") : why);
}

// The KV cache's fields are cuda-kvcache's alone: every other family would ignore them.
void refuse_kv_cache(const Params& p, const char* family) {
  if (p.uses_kv_cache())
    fail(FA_ERROR_UNSUPPORTED, family, ": KV caches, appended keys, rotary and split-KV are the "
         "cuda-kvcache family's");
}

// An attention bias (Params::Bias) and its gradient are read by cuda-sm80 alone (its bias
// kernels, forward and backward: sm80/fwd_launch.cuh, bwd_launch.cuh) and by the CPU backend; the
// other families refuse it, so that dispatch falls back to cuda-sm80 (on Hopper too).
void refuse_bias(CudaFamily f, const Params& p, bool backward) {
  if (p.bias.kind == Params::Bias::Kind::None) return;
  if (f == CudaFamily::Sm80) return;
  fail(FA_ERROR_UNSUPPORTED, family_name(f), ": attn_bias (an attention bias or mask) is supported "
       "by cuda-sm80 and the CPU backend only", backward ? " (and dbias with it)" : "");
}

// fp32 outputs with 16-bit inputs (a forward's out; a backward's dq, dk, dv: the unrounded
// results, as ring attention's partials need) are written by cuda-sm80's epilogues, a run-time
// branch on the output's dtype (no kernel of their own). cuda-sm90 refuses them in its own
// refusal (dispatch then falls back to cuda-sm80); the other families here.
void refuse_fp32_outputs(CudaFamily f, const Params& p, bool backward) {
  if (p.dtype != DType::F16 && p.dtype != DType::BF16) return;
  const bool f32 = backward ? p.dq.dtype == DType::F32 || p.dk.dtype == DType::F32 ||
                                  p.dv.dtype == DType::F32
                            : p.out.dtype == DType::F32;
  if (!f32) return;
  if (f != CudaFamily::Sm80 && f != CudaFamily::Sm90)
    fail(FA_ERROR_UNSUPPORTED, family_name(f), ": ",
         backward ? "fp32 dq / dk / dv" : "out.dtype=fp32", " with 16-bit inputs is written by "
         "cuda-sm80 only");
  if (backward && p.dk.dtype != p.dv.dtype)  // one branch of the epilogue stores both
    fail(FA_ERROR_UNSUPPORTED, "dk.dtype and dv.dtype must be equal on CUDA (both fp32 or both "
         "q's dtype); dk is ", p.dk.dtype == DType::F32 ? "fp32" : "16-bit", ", dv ",
         p.dv.dtype == DType::F32 ? "fp32" : "16-bit");
}

// A family's check, workspace and run on Params its kernels take as they are (the wrappers below
// pad the head dim first where needed).
void check_family(CudaFamily f, const Params& p, bool backward, const Context& ctx) {
  switch (f) {
    case CudaFamily::KvCache: {
      if (backward) fail(FA_ERROR_UNSUPPORTED, "cuda-kvcache: forward only");
      if (p.head_dim % 8 != 0)
        fail(FA_ERROR_HEAD_DIM, "cuda-kvcache: head_dim=", p.head_dim, " must be a multiple of 8 "
             "with a KV cache (the other CUDA families pad other head dims; a cache is not "
             "copied)");
      check_forward(p, ctx, /*fp8_ok=*/true);
      const std::string why = kvcache_refusal(p, ctx);
      if (!why.empty()) fail(FA_ERROR_UNSUPPORTED, "cuda-kvcache: ", why);
      return;
    }
    case CudaFamily::Sm90: {
      if (backward) {
        // What every CUDA backward needs (the gradients' alignment too); FA_ERROR_BACKEND in a
        // build without backward kernels, which has no sm90 backward either.
        check_backward(p, ctx);
#ifdef FA_SM80_BWD_DIMS
        const std::string why = sm90_bwd_refusal(p, ctx);
        if (!why.empty()) fail(FA_ERROR_UNSUPPORTED, "cuda-sm90: ", why);
#endif
        return;
      }
      // What every CUDA kernel needs (arch, dtype, alignment, sizes); fp8 is served here.
      check_forward(p, ctx, /*fp8_ok=*/true);
      const std::string why = sm90_fwd_refusal(p, ctx);
      if (!why.empty()) fail(FA_ERROR_UNSUPPORTED, "cuda-sm90: ", why);
      return;
    }
    case CudaFamily::Sm80:
      if (!backward && p.dtype == DType::E4M3) return refuse_fp8(p, ctx);
      // FA_ERROR_BACKEND for a backward in a build without backward kernels
      return backward ? check_backward(p, ctx) : check_forward(p, ctx);
    case CudaFamily::Sm75:
      return backward ? check_sm75_backward(p, ctx) : check_sm75_forward(p, ctx);
    case CudaFamily::Vanilla: return vanilla::check(p, ctx);
  }
  fail(FA_ERROR_INTERNAL, "unknown CUDA family ", int(f));
}

size_t workspace_family(CudaFamily f, const Params& p, bool backward, const Context& ctx) {
  switch (f) {
    case CudaFamily::KvCache: return backward ? 0 : kvcache_workspace(p, ctx);
    case CudaFamily::Sm90:
#ifdef FA_SM80_BWD_DIMS
      if (backward) return sm90_backward_workspace(p, ctx);
#endif
      return backward ? 0 : sm90_forward_workspace(p, ctx);
    case CudaFamily::Sm80: return backward ? backward_workspace(p, ctx) : 0;
    case CudaFamily::Sm75: return backward ? sm75_backward_workspace(p, ctx) : 0;
    case CudaFamily::Vanilla:
      return backward ? vanilla::backward_workspace(p) : vanilla::forward_workspace(p);
  }
  fail(FA_ERROR_INTERNAL, "unknown CUDA family ", int(f));
}

void run_family(CudaFamily f, const Params& p, bool backward, const Context& ctx, void* ws,
                size_t bytes, void* stream) {
  switch (f) {
    case CudaFamily::KvCache: return kvcache_forward(p, ctx, ws, bytes, stream);  // forward only
    case CudaFamily::Sm90:
      if (backward) {
#ifdef FA_SM80_BWD_DIMS
        return sm90_backward(p, ctx, ws, bytes, stream);
#else
        fail(FA_ERROR_BACKEND, "no CUDA backward kernel in this build");  // (check refuses first)
#endif
      }
      return sm90_forward(p, ctx, ws, bytes, stream);
    case CudaFamily::Sm80:
      return backward ? cuda::backward(p, ctx, ws, bytes, stream) : forward(p, ctx, stream);
    case CudaFamily::Sm75:
      if (backward) return sm75_backward(p, ctx, ws, bytes, stream);
      return sm75_forward(p, ctx, stream);
    case CudaFamily::Vanilla:
      return backward ? vanilla::backward(p, ws, bytes, stream)
                      : vanilla::forward(p, ws, bytes, stream);
  }
  fail(FA_ERROR_INTERNAL, "unknown CUDA family ", int(f));
}

// The flash families take head dims that are multiples of 8; others run on zero-padded copies in
// the workspace (cuda/head_dim_pad.h). Vanilla takes every head dim, the KV-cache family refuses.
bool pads(CudaFamily f, const Params& p) {
  return (f == CudaFamily::Sm80 || f == CudaFamily::Sm90 || f == CudaFamily::Sm75) &&
         p.dtype != DType::E4M3 && needs_head_dim_padding(p);  // (fp8: head_dim % 16 == 0)
}
// Where the padded copies would be, for checks and workspace sizes (never dereferenced).
char* const kPlaceholder = reinterpret_cast<char*>(uintptr_t(256));

void check(CudaFamily f, const Params& p, bool backward, const Context& ctx) {
  if (f != CudaFamily::KvCache) refuse_kv_cache(p, family_name(f));
  refuse_bias(f, p, backward);
  refuse_fp32_outputs(f, p, backward);
  // On Turing only cuda-sm75's kernels have sm_75 code (FA_ARCHS' 75 entries build nothing
  // else): the padded copies' kernels would not launch there.
  if (f == CudaFamily::Sm75 && ctx.device.major < 8 && needs_head_dim_padding(p))
    fail(FA_ERROR_HEAD_DIM, "cuda-sm75: head_dim=", p.head_dim, " must be a multiple of 8 on "
         "CUDA device ", p.device.index, " (compute capability ", ctx.device.major, ".",
         ctx.device.minor, "): the head-dim padding kernels are built for sm80 and later");
  if (pads(f, p)) return check_family(f, padded_params(p, backward, kPlaceholder), backward, ctx);
  check_family(f, p, backward, ctx);
}

size_t workspace(CudaFamily f, const Params& p, bool backward, const Context& ctx) {
  if (!pads(f, p)) return workspace_family(f, p, backward, ctx);
  return padded_bytes(p, backward) +
         workspace_family(f, padded_params(p, backward, kPlaceholder), backward, ctx);
}

void run(CudaFamily f, const Params& p, bool backward, const Context& ctx, void* ws,
         size_t bytes, void* stream) {
  if (!pads(f, p)) return run_family(f, p, backward, ctx, ws, bytes, stream);
  const size_t pad = padded_bytes(p, backward);
  if (ws == nullptr || bytes < pad)
    fail(FA_ERROR_INTERNAL, "workspace of ", bytes, " bytes is below the padded copies' ", pad);
  char* base = static_cast<char*>(ws);
  const Params padded = padded_params(p, backward, base);
  pad_inputs(p, padded, backward, stream);
  run_family(f, padded, backward, ctx, base + pad, bytes - pad, stream);
  unpad_outputs(p, padded, backward, stream);
}

// ---- the table ----------------------------------------------------------------------------
int32_t table_device_count() {
  const char* unused = nullptr;
  int n = 0;
  return guarded(&unused, [&] { n = device_count(); }) == FA_OK ? n : 0;
}

fa_status table_device_props(int32_t device, const DeviceProps** props, const char** message) {
  return guarded(message, [&] { *props = &device_props(device); });
}

fa_status table_copy(void* dst, const void* src, size_t bytes, int32_t device, void* stream,
                     const char** message) {
  return guarded(message, [&] { copy_to_host_sync(dst, src, bytes, device, stream); });
}

fa_status table_check(CudaFamily f, const Params* p, int32_t backward, const Context* ctx,
                      const char** message) {
  return guarded(message, [&] { check(f, *p, backward != 0, *ctx); });
}

fa_status table_workspace(CudaFamily f, const Params* p, int32_t backward, const Context* ctx,
                          size_t* bytes, const char** message) {
  return guarded(message, [&] { *bytes = workspace(f, *p, backward != 0, *ctx); });
}

fa_status table_run(CudaFamily f, const Params* p, int32_t backward, const Context* ctx, void* ws,
                    size_t bytes, void* stream, const char** message) {
  return guarded(message, [&] { run(f, *p, backward != 0, *ctx, ws, bytes, stream); });
}

fa_status table_row_op(const RowOp* op, int32_t device, void* stream, const char** message) {
  return guarded(message, [&] { row_op(*op, device, stream); });
}

constexpr CudaBackend kTable = {table_device_count, table_device_props, table_copy,
                                table_check,        table_workspace,    table_run,
                                table_row_op};

}  // namespace
}  // namespace fa::cuda

extern "C" __attribute__((visibility("default"))) const fa::CudaBackend* fa_cuda_backend(
    uint32_t abi, int32_t version, uint32_t params_size, uint32_t context_size,
    uint32_t props_size, const char** why) {
  static thread_local std::string t_why;
  if (abi != fa::kCudaBackendAbi || version != FA_VERSION || params_size != sizeof(fa::Params) ||
      context_size != sizeof(fa::Context) || props_size != sizeof(fa::DeviceProps)) {
    t_why = "the backend (version " + std::to_string(FA_VERSION) + ", seam " +
            std::to_string(fa::kCudaBackendAbi) + ", structs " +
            std::to_string(sizeof(fa::Params)) + "/" + std::to_string(sizeof(fa::Context)) +
            "/" + std::to_string(sizeof(fa::DeviceProps)) + " bytes) was built with other " +
            "sources than its caller (version " + std::to_string(version) + ", seam " +
            std::to_string(abi) + ", structs " + std::to_string(params_size) + "/" +
            std::to_string(context_size) + "/" + std::to_string(props_size) + ")";
    if (why != nullptr) *why = t_why.c_str();
    return nullptr;
  }
  return &fa::cuda::kTable;
}
