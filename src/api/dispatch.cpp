#include "api/dispatch.h"

#include <exception>
#include <optional>
#include <string>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "cpu/backend.h"

namespace fa {

// Which fa_backend values a family serves.
enum Serves : unsigned {
  kAuto = 1u << FA_BACKEND_AUTO,
  kFlash = 1u << FA_BACKEND_FLASH,
  kReference = 1u << FA_BACKEND_REFERENCE,
  kVanilla = 1u << FA_BACKEND_VANILLA,
};

struct Family {
  const char* name;
  fa_device_type device;
  unsigned serves;  // Serves bits
  // Returns when the family can run the call; else throws ApiError saying why not.
  void (*check)(const Params& p, Pass pass, const Context& ctx);
  size_t (*workspace)(const Params& p, Pass pass, const Context& ctx);
  size_t (*min_workspace)(const Params& p, Pass pass, const Context& ctx);
  void (*run)(const Params& p, Pass pass, const Context& ctx, void* ws, size_t bytes,
              void* stream);
  // A family in front of a general one (cuda-sm90 before cuda-sm80): its refusal is reported
  // only when no later family has one, so that a call no family serves hears the general
  // family's reason (fp32 on CUDA, a head dim, ...).
  bool preferred_only = false;
  // nullptr, or whether the row is in play at all for this call: cheap, and false skips the row
  // without a refusal (no exception on every call while a family is switched off).
  bool (*applies)(const Params& p, Pass pass, const Context& ctx) = nullptr;
};

namespace {

// ---- CPU: tiled flash, then the fp64 reference (which is also the CPU's vanilla) -------------
template <cpu::Impl kImpl>
struct CpuRow {
  static void check(const Params&, Pass, const Context&) {}
  static size_t workspace(const Params& p, Pass pass, const Context&) {
    return pass == Pass::Forward ? cpu::forward_workspace(p, kImpl)
                                 : cpu::backward_workspace(p, kImpl);
  }
  static size_t min_workspace(const Params& p, Pass pass, const Context&) {
    return pass == Pass::Forward ? cpu::min_forward_workspace(p, kImpl)
                                 : cpu::min_backward_workspace(p, kImpl);
  }
  static void run(const Params& p, Pass pass, const Context&, void* ws, size_t bytes, void*) {
    if (pass == Pass::Forward)
      cpu::forward(p, kImpl, ws, bytes);
    else
      cpu::backward(p, kImpl, ws, bytes);
  }
};

#ifdef FA_WITH_CUDA
// ---- CUDA: the families of the CUDA backend (libflashattn_cuda.so, opened on first use through
// core/cuda_backend.h's table; the backend implements each row, the registry orders them) ------
template <CudaFamily kFamily>
struct CudaRow {
  static void check(const Params& p, Pass pass, const Context& ctx) {
    const char* message = nullptr;
    check_backend(cuda_backend().check(kFamily, &p, pass == Pass::Backward, &ctx, &message),
                  &message);
  }
  static size_t workspace(const Params& p, Pass pass, const Context& ctx) {
    const char* message = nullptr;
    size_t bytes = 0;
    check_backend(
        cuda_backend().workspace(kFamily, &p, pass == Pass::Backward, &ctx, &bytes, &message),
        &message);
    return bytes;
  }
  static void run(const Params& p, Pass pass, const Context& ctx, void* ws, size_t bytes,
                  void* stream) {
    const char* message = nullptr;
    check_backend(cuda_backend().run(kFamily, &p, pass == Pass::Backward, &ctx, ws, bytes, stream,
                                     &message),
                  &message);
  }
};

// cuda-sm90 (Hopper-native: TMA, wgmma, warp specialisation) is in play on an sm90 device for
// forwards with Tuning::sm90_fwd on and for backwards with Tuning::sm90_bwd non-zero (issue 28;
// sm90_bwd_refusal applies its default's choice).
bool sm90_applies(const Params&, Pass pass, const Context& ctx) {
  if (ctx.device.major != 9 || ctx.tuning.sm75) return false;
  return pass == Pass::Forward ? ctx.tuning.sm90_fwd : ctx.tuning.sm90_bwd != 0;
}
// cuda-kvcache is in play for forwards with a KV cache's fields or num_splits > 1 (the other
// CUDA families refuse those), and for every forward under Tuning::kvcache_all.
bool kvcache_applies(const Params& p, Pass pass, const Context& ctx) {
  if (pass != Pass::Forward) return false;
  return p.uses_kv_cache() || (ctx.tuning.kvcache_all && p.dropout_p == 0.f);
}
// cuda-sm75 (Turing) is in play on sm75 devices, and on every device under Tuning::sm75, which
// takes the other tiled families (cuda-sm90, cuda-sm80) out of play, so that its refusals are
// the call's.
bool sm75_applies(const Params&, Pass, const Context& ctx) {
  return ctx.tuning.sm75 || (ctx.device.major == 7 && ctx.device.minor >= 5);
}
bool sm80_applies(const Params&, Pass, const Context& ctx) { return !ctx.tuning.sm75; }
using KvCacheRow = CudaRow<CudaFamily::KvCache>;  // forward only
using Sm90Row = CudaRow<CudaFamily::Sm90>;     // Hopper: forward, backward (Tuning::sm90_bwd)
using Sm80Row = CudaRow<CudaFamily::Sm80>;     // FlashAttention-2: Ampere, Ada, Hopper
using Sm75Row = CudaRow<CudaFamily::Sm75>;     // Turing, fp16: forward, backward (d <= 128)
using VanillaRow = CudaRow<CudaFamily::Vanilla>;  // cuBLAS + softmax kernel, S / P in the workspace
#endif

// The registry, in order of preference per device: dispatch takes the first row that serves the
// call's backend and supports it.
const Family kFamilies[] = {
#ifdef FA_WITH_CUDA
    {"cuda-kvcache", FA_DEVICE_CUDA, kAuto | kFlash, KvCacheRow::check, KvCacheRow::workspace,
     KvCacheRow::workspace, KvCacheRow::run, false, kvcache_applies},
    {"cuda-sm75", FA_DEVICE_CUDA, kAuto | kFlash, Sm75Row::check, Sm75Row::workspace,
     Sm75Row::workspace, Sm75Row::run, false, sm75_applies},
    {"cuda-sm90", FA_DEVICE_CUDA, kAuto | kFlash, Sm90Row::check, Sm90Row::workspace,
     Sm90Row::workspace, Sm90Row::run, true, sm90_applies},
    {"cuda-sm80", FA_DEVICE_CUDA, kAuto | kFlash, Sm80Row::check, Sm80Row::workspace,
     Sm80Row::workspace, Sm80Row::run, false, sm80_applies},
    {"cuda-vanilla", FA_DEVICE_CUDA, kVanilla, VanillaRow::check, VanillaRow::workspace,
     VanillaRow::workspace, VanillaRow::run},
#endif
    {"cpu-flash", FA_DEVICE_CPU, kAuto | kFlash, CpuRow<cpu::Impl::Flash>::check,
     CpuRow<cpu::Impl::Flash>::workspace, CpuRow<cpu::Impl::Flash>::min_workspace,
     CpuRow<cpu::Impl::Flash>::run},
    {"cpu-reference", FA_DEVICE_CPU, kReference | kVanilla, CpuRow<cpu::Impl::Reference>::check,
     CpuRow<cpu::Impl::Reference>::workspace, CpuRow<cpu::Impl::Reference>::min_workspace,
     CpuRow<cpu::Impl::Reference>::run},
};

const char* backend_name(fa_backend b) {
  switch (b) {
    case FA_BACKEND_AUTO: return "FA_BACKEND_AUTO";
    case FA_BACKEND_FLASH: return "FA_BACKEND_FLASH";
    case FA_BACKEND_REFERENCE: return "FA_BACKEND_REFERENCE";
    case FA_BACKEND_VANILLA: return "FA_BACKEND_VANILLA";
  }
  return "?";
}

}  // namespace

const char* family_name(const Family& f) { return f.name; }

Context default_context(const Params& p) {
  Context ctx;
  if (p.device.type == FA_DEVICE_CUDA) ctx.device = cuda_device_props(p.device.index);
  return ctx;
}

const Family& select_kernel(const Params& p, Pass pass, const Context& ctx) {
  std::exception_ptr first_refusal, preferred_refusal;
  for (const Family& f : kFamilies) {
    if (f.device != p.device.type || !(f.serves & (1u << p.backend))) continue;
    if (f.applies != nullptr && !f.applies(p, pass, ctx)) continue;
    try {
      f.check(p, pass, ctx);
      return f;
    } catch (const ApiError&) {
      std::exception_ptr& slot = f.preferred_only ? preferred_refusal : first_refusal;
      if (!slot) slot = std::current_exception();
    }
  }
  if (first_refusal) std::rethrow_exception(first_refusal);
  if (preferred_refusal) std::rethrow_exception(preferred_refusal);
  if (p.device.type == FA_DEVICE_CUDA) {
#ifdef FA_WITH_CUDA
    fail(FA_ERROR_BACKEND, "backend=", backend_name(p.backend),
         " runs on the CPU only; q is on CUDA device ", p.device.index);
#else
    fail(FA_ERROR_BACKEND, "q is on CUDA device ", p.device.index,
         " but this build has no CUDA backend");
#endif
  }
  fail(FA_ERROR_BACKEND, "backend=", backend_name(p.backend), " has no family for q's device");
}

size_t workspace_size(const Family& f, const Params& p, Pass pass, const Context& ctx) {
  return f.workspace(p, pass, ctx);
}

size_t min_workspace_size(const Family& f, const Params& p, Pass pass, const Context& ctx) {
  return f.min_workspace(p, pass, ctx);
}

void run(const Family& f, const Params& p, Pass pass, const Context& ctx, void* workspace,
         size_t bytes, void* stream) {
  f.run(p, pass, ctx, workspace, bytes, stream);
}

}  // namespace fa
