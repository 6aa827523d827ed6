// Host side of the cuda-sm75 backward: what it serves, its workspace, and the head-dim dispatch
// to the generated instantiations (bwd_sm75_*.cu, built where FA_ARCHS has a 75 entry and the
// backward is built). Built in every CUDA build, so that the family refuses by name where its
// kernels are not; host code only, a .cu for the device headers cuda/bwd_sm80.h brings in.
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/bwd_sm75.h"
#include "cuda/device_guard.h"
#include "cuda/fwd_sm75.h"
#include "cuda/head_dim_dispatch.h"
#include "cuda/kernels/sm75/bwd_traits.h"
#include "cuda/kernels/sm75/bwd_workspace.h"
#include "fa_build_config.h"  // generated: FA_SM75_BWD_DIMS where the family's backward is built

namespace fa::cuda {
namespace {

// The backward kernel's head dim for head_dim: the smallest built one at or above it; 0: none.
int sm75_bwd_kernel_dim(int64_t head_dim) {
#ifdef FA_SM75_BWD_DIMS
  constexpr int kDims[] = {FA_SM75_BWD_DIMS};
  return smallest_fit(kDims, head_dim);
#else
  (void)head_dim;
  return 0;
#endif
}

}  // namespace

void check_sm75_backward(const Params& p, const Context& ctx) {
  // The forward's refusals first (dtype fp16, compute capability >= 7.5, a build with sm75 code,
  // the arguments), then the backward's own.
  check_sm75_forward(p, ctx);
#ifndef FA_SM75_BWD_DIMS
  fail(FA_ERROR_BACKEND, "cuda-sm75: this build has no sm75 backward kernels (FA_ARCHS has no 75 "
       "entry, or -DFA_SM75_BACKWARD=OFF, which follows -DFA_CUDA_BACKWARD unless set)");
#endif
  if (p.head_dim > sm75::kBwdMaxHeadDim)
    fail(FA_ERROR_UNSUPPORTED, "cuda-sm75: head_dim=", p.head_dim, " has no Turing backward: "
         "it serves head dims up to ", sm75::kBwdMaxHeadDim, " (above, one block's K, V, Q, dO, "
         "P and dS tiles pass Turing's 64 KB of shared memory)");
  if (sm75_bwd_kernel_dim(p.head_dim) == 0)
    fail(FA_ERROR_HEAD_DIM, "cuda-sm75: head_dim=", p.head_dim, " has no backward kernel in "
         "this build (FA_HEAD_DIMS)");
  // A packed batch's cu_seqlens are sanitized on the device first (kernels/varlen/sanitize.cu),
  // a kernel built for FA_ARCHS' sm80+ entries only.
  if (p.varlen() && ctx.device.major < 8)
    fail(FA_ERROR_UNSUPPORTED, "cuda-sm75: a packed (cu_seqlens) backward on CUDA device ",
         p.device.index, " (compute capability ", ctx.device.major, ".", ctx.device.minor,
         "): its cu_seqlens sanitizer is built for sm80 and later");
  check_view_alignment(p.dout, "dout");
  check_view_alignment(p.dq, "dq");
  check_view_alignment(p.dk, "dk");
  check_view_alignment(p.dv, "dv");
}

size_t sm75_backward_workspace(const Params& p, const Context& ctx) {
  (void)ctx;  // no choice here depends on the device
  const int kernel_d = sm75_bwd_kernel_dim(p.head_dim);
  return kernel_d == 0 ? 0 : sm75::bwd_layout(p, kernel_d).bytes();
}

void sm75_backward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                   void* stream) {
#ifdef FA_SM75_BWD_DIMS
  if (bytes < sm75_backward_workspace(p, ctx))
    fail(FA_ERROR_INTERNAL, "cuda-sm75: backward workspace of ", bytes, " bytes is below its size");
  DeviceGuard guard(p.device.index);
  with_head_dim<FA_SM75_BWD_DIMS>(p.head_dim, "sm75", "backward", [&](auto d) {
    sm75::run_bwd<decltype(d)::value>(p, workspace, static_cast<cudaStream_t>(stream));
  });
#else
  (void)p, (void)ctx, (void)workspace, (void)bytes, (void)stream;
  fail(FA_ERROR_BACKEND, "cuda-sm75: this build has no sm75 backward kernels");
#endif
}

}  // namespace fa::cuda
