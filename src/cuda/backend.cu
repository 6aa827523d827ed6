#include "cuda/backend.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "cuda/bwd_sm80.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"
#include "cuda/fwd_sm80.h"
#include "cuda/head_dim_dispatch.h"
#include "fa_build_config.h"  // generated: FA_SM80_FWD_DIMS

namespace fa::cuda {
namespace {

// Head dims compiled into this build, ascending (FA_HEAD_DIMS, through the generated header):
// the instantiation files and this dispatch prune together.
constexpr int kBuiltHeadDims[] = {FA_SM80_FWD_DIMS};

}  // namespace

void check_view_alignment(const View& v, const char* name) {
  // cp.async moves 16-byte chunks: the base and every row must start on a 16-byte boundary
  // (strides in multiples of 8 elements of 16 bits, 16 of fp8).
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0)
    fail(FA_ERROR_ALIGNMENT, name, ".data=", v.data, " must be 16-byte aligned for the CUDA kernels");
  const int64_t chunk = 16 / dtype_size(v.dtype);
  for (int64_t s : {v.stride_b, v.stride_s, v.stride_h})
    if (s % chunk != 0)
      fail(FA_ERROR_ALIGNMENT, name, " stride ", s, " (elements) must be a multiple of ", chunk,
           " for the CUDA kernels");
}

namespace {

template <typename Tag>
void run_fwd_tag(const Params& p, cudaStream_t s) {  // the forward's choices need no Context
  with_head_dim<FA_SM80_FWD_DIMS>(p.head_dim, "sm80", "forward", [&](auto d) {
    sm80::run_fwd<decltype(d)::value, Tag>(p, s);
  });
}

#ifdef FA_SM80_BWD_DIMS
constexpr int kBuiltBwdHeadDims[] = {FA_SM80_BWD_DIMS};
int bwd_kernel_head_dim(int64_t d) { return smallest_fit(kBuiltBwdHeadDims, d); }

template <typename Tag>
void run_bwd_tag(const Params& p, const Context& ctx, void* ws, cudaStream_t s) {
  with_head_dim<FA_SM80_BWD_DIMS>(p.head_dim, "sm80", "backward", [&](auto d) {
    sm80::run_bwd<decltype(d)::value, Tag>(p, ctx, ws, s);
  });
}
#endif

}  // namespace

int kernel_head_dim(int64_t head_dim) { return smallest_fit(kBuiltHeadDims, head_dim); }

void check_forward(const Params& p, const Context& ctx, bool fp8_ok) {
  check_cuda_backend(p);
  const DeviceProps& dev = ctx.device;
  if (dev.major < 8)
    fail(FA_ERROR_BACKEND, "CUDA device ", p.device.index, " has compute capability ", dev.major,
         ".", dev.minor, "; the CUDA kernels of this build need >= 8.0");
  check_forward_args(p, fp8_ok);
}

void check_cuda_backend(const Params& p) {
  if (p.backend == FA_BACKEND_REFERENCE)
    fail(FA_ERROR_BACKEND, "backend=FA_BACKEND_REFERENCE runs on the CPU only; q is on CUDA device ",
         p.device.index);
}

void check_forward_args(const Params& p, bool fp8_ok) {
  if (p.dtype == DType::F32)
    fail(FA_ERROR_UNSUPPORTED, "q.dtype=fp32 on CUDA: the GPU kernels take fp16 or bf16");
  // fp8 e4m3 (fa_params 0.5): cuda-kvcache (KV-cache and split calls) and cuda-sm90's forward
  // read it; every other kernel behind this check would read its bytes as fp16.
  if (p.dtype == DType::E4M3 && !fp8_ok)
    fail(FA_ERROR_UNSUPPORTED, "q.dtype=fp8_e4m3 on CUDA: only the sm90 forward (cuda-sm90) and "
         "KV-cache calls (cuda-kvcache: a cache's fields or num_splits > 1) take fp8; the other GPU "
         "kernels take fp16 or bf16");
  if (p.dtype == DType::E4M3 && p.head_dim % 16 != 0)
    fail(FA_ERROR_HEAD_DIM, "head_dim=", p.head_dim, " must be a multiple of 16 with fp8 inputs "
         "on CUDA");
  if (p.head_dim % 8 != 0)
    fail(FA_ERROR_HEAD_DIM, "head_dim=", p.head_dim, " must be a multiple of 8 on CUDA");
  if (kernel_head_dim(p.head_dim) == 0)
    fail(FA_ERROR_HEAD_DIM, "head_dim=", p.head_dim, " has no CUDA kernel in this build (FA_HEAD_DIMS)");
  if (p.batch > 65535 || p.heads_q > 65535)
    fail(FA_ERROR_SIZE, "batch=", p.batch, ", heads_q=", p.heads_q, " must be <= 65535 on CUDA");
  // The kernels index keys and rows in 32 bits inside a sequence (tile loops, masks).
  constexpr int64_t kMaxSeqlen = int64_t(1) << 30;
  if (p.seqlen_q > kMaxSeqlen || p.seqlen_k > kMaxSeqlen)
    fail(FA_ERROR_SIZE, "seqlen_q=", p.seqlen_q, ", seqlen_k=", p.seqlen_k,
         " must be <= 2^30 on CUDA");
  check_view_alignment(p.q, "q");
  check_view_alignment(p.k, "k");
  check_view_alignment(p.v, "v");
  check_view_alignment(p.out, "out");
}

#ifdef FA_SM80_BWD_DIMS
namespace sm80 {
int bwd_smem_optin(const Context& ctx) {
  const int limit = ctx.tuning.sm80_bwd_smem_limit;
  return limit > 0 && limit < ctx.device.smem_optin ? limit : ctx.device.smem_optin;
}

bool bwd_pdl(const Context& ctx) { return ctx.tuning.sm80_bwd_pdl && ctx.device.major >= 9; }

size_t bwd_workspace_bytes(const Params& p, const Context& ctx, int kernel_d) {
  return bwd_layout(p, kernel_d, bwd_tail(p, ctx, kernel_d)).bytes();
}
}  // namespace sm80
#endif

void check_backward(const Params& p, const Context& ctx) {
#ifdef FA_SM80_BWD_DIMS
  check_forward(p, ctx);
  const int kernel_d = bwd_kernel_head_dim(p.head_dim);
  if (kernel_d == 0)
    fail(FA_ERROR_HEAD_DIM, "head_dim=", p.head_dim, " has no CUDA backward kernel in this build");
  // The kernel for d > 64 needs more shared memory than sm86 / sm89 give a block (99 KB), and
  // for d > 192 more than A100 does (163 KB): bwd_smem_bytes. The compact configuration covers
  // d 96 / 128 on the former and d 224 / 256 on the latter; d 160 / 192 on sm86 / sm89 it does
  // not (112.5 KB).
  const int smem_optin = sm80::bwd_smem_optin(ctx);
  if (sm80::bwd_smem_bytes(kernel_d) > smem_optin && !sm80::bwd_compact(kernel_d, smem_optin))
    fail(FA_ERROR_UNSUPPORTED, "head_dim=", p.head_dim, ": the CUDA backward kernel needs ",
         sm80::bwd_smem_bytes(kernel_d), " bytes of shared memory per block (",
         sm80::bwd_compact_smem_bytes(kernel_d), " in its compact configuration); CUDA device ",
         p.device.index, " allows ", smem_optin);
  check_view_alignment(p.dout, "dout");
  check_view_alignment(p.dq, "dq");
  check_view_alignment(p.dk, "dk");
  check_view_alignment(p.dv, "dv");
  // The bias kernels' 32-bit offsets inside a step (sm80::bwd_bias_offsets_fit).
  if (p.bias.kind != Params::Bias::Kind::None && !sm80::bwd_bias_offsets_fit(p))
    fail(FA_ERROR_UNSUPPORTED, "attn_bias (strides ", p.bias.stride_q, ", ", p.bias.stride_k,
         " along queries and keys) or dbias: the CUDA backward indexes a 64-query x 128-key tile "
         "of each in 32 bits (63 x the query stride + 127 x the key stride must stay below 2^31 "
         "elements); a contiguous attn_bias and dbias fit");
#else
  (void)ctx;
  fail(FA_ERROR_BACKEND, "no CUDA backward kernel in this build for q on CUDA device ",
       p.device.index, " (configured with -DFA_CUDA_BACKWARD=OFF)");
#endif
}

size_t backward_workspace(const Params& p, const Context& ctx) {
#ifdef FA_SM80_BWD_DIMS
  return sm80::bwd_workspace_bytes(p, ctx, bwd_kernel_head_dim(p.head_dim));
#else
  (void)p, (void)ctx;
  return 0;
#endif
}

void backward(const Params& p, const Context& ctx, void* workspace, size_t bytes, void* stream) {
#ifdef FA_SM80_BWD_DIMS
  if (bytes < backward_workspace(p, ctx))
    fail(FA_ERROR_INTERNAL, "backward workspace of ", bytes, " bytes is below its size");
  DeviceGuard guard(p.device.index);
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::BF16)
    run_bwd_tag<Bf16Tag>(p, ctx, workspace, s);
  else
    run_bwd_tag<Fp16Tag>(p, ctx, workspace, s);
#else
  (void)p, (void)ctx, (void)workspace, (void)bytes, (void)stream;
  fail(FA_ERROR_BACKEND, "no CUDA backward kernel in this build");
#endif
}

void forward(const Params& p, const Context& ctx, void* stream) {
  (void)ctx;  // the forward's launch needs nothing of it (its smem opt-in is per device)
  DeviceGuard guard(p.device.index);
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::BF16)
    run_fwd_tag<Bf16Tag>(p, s);
  else
    run_fwd_tag<Fp16Tag>(p, s);
}

}  // namespace fa::cuda
