// Host side of the cuda-sm75 forward: what it serves, and the head-dim dispatch to the generated
// instantiations (fwd_sm75_*.cu, built where FA_ARCHS has a 75 entry). This file is built in
// every CUDA build, so that the family refuses by name where its kernels are not.
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/device_guard.h"
#include "cuda/fwd_sm75.h"
#include "cuda/head_dim_dispatch.h"
#include "fa_build_config.h"  // generated: FA_SM75_FWD_DIMS where the family's kernels are built

namespace fa::cuda {
namespace {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::F64: return "fp64";
    case DType::E4M3: return "fp8_e4m3";
  }
  return "?";
}

}  // namespace

void check_sm75_forward(const Params& p, const Context& ctx) {
  check_cuda_backend(p);
  // The refusals a Turing user needs to read first: the dtype, then the device and the build.
  if (p.dtype != DType::F16)
    fail(FA_ERROR_UNSUPPORTED, "cuda-sm75: q.dtype=", dtype_name(p.dtype), " is not supported: "
         "Turing's tensor cores take fp16 only (no bf16 mma before sm80); cuda-sm75 runs fp16");
  const DeviceProps& dev = ctx.device;
  if (dev.major * 10 + dev.minor < 75)
    fail(FA_ERROR_BACKEND, "cuda-sm75: CUDA device ", p.device.index, " has compute capability ",
         dev.major, ".", dev.minor, "; the family needs >= 7.5");
#ifndef FA_SM75_FWD_DIMS
  fail(FA_ERROR_BACKEND, "cuda-sm75: this build has no sm75 code (FA_ARCHS has no 75, 75-real or "
       "75-virtual entry)");
#endif
  check_forward_args(p);
}

void sm75_forward(const Params& p, const Context& ctx, void* stream) {
  (void)ctx;  // the launch needs nothing of it (its shared-memory opt-in is per device)
#ifdef FA_SM75_FWD_DIMS
  DeviceGuard guard(p.device.index);
  with_head_dim<FA_SM75_FWD_DIMS>(p.head_dim, "sm75", "forward", [&](auto d) {
    sm75::run_fwd<decltype(d)::value>(p, static_cast<cudaStream_t>(stream));
  });
#else
  (void)p, (void)stream;
  fail(FA_ERROR_BACKEND, "cuda-sm75: this build has no sm75 code");
#endif
}

}  // namespace fa::cuda
