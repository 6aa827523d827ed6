// The cuda-kvcache family's entry points (cuda/kvcache.h): which calls it serves, its workspace,
// and the dispatch on the inputs' 16-bit type.
#include "cuda/kvcache.h"

#include "core/error.h"
#include "cuda/arch/mma.cuh"
#include "cuda/backend.h"
#include "cuda/device_guard.h"
#include "cuda/kernels/kvcache/plan.h"

namespace fa::cuda {

std::string kvcache_refusal(const Params& p, const Context&) {
  // check_forward (every CUDA kernel's needs) has run: arch, 16-bit inputs and out, head dim,
  // alignment; validation: the rotary dim is even.
  if (p.dropout_p > 0.f) return "dropout is not supported with a KV cache or split-KV";
  return "";
}

namespace kvcache {
Plan plan_of(const Params& p, const Context& ctx) {
  return make_plan(p.batch, p.heads_kv, p.seqlen_q, p.group(), p.seqlen_k, p.num_splits,
                   sm80_shape(kernel_head_dim(p.head_dim), p.dtype == DType::E4M3), ctx.device.sms,
                   ctx.device.smem_optin);
}
WorkspaceLayout layout_of(const Params& p, const Plan& plan) {
  return workspace_layout(p.total_q, p.heads_q, p.head_dim, p.rotary.dim > 0, plan.splits,
                          plan.blocks);
}
}  // namespace kvcache

size_t kvcache_workspace(const Params& p, const Context& ctx) {
  return kvcache::layout_of(p, kvcache::plan_of(p, ctx)).bytes();
}

void kvcache_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                     void* stream) {
  DeviceGuard guard(p.device.index);
  if (p.dtype == DType::E4M3) {  // fp8 inputs: fp16 products, out in its own 16-bit type
    if (p.out.dtype == DType::BF16)
      kvcache::run<Fp16Tag, true, Bf16Tag>(p, ctx, workspace, bytes, stream);
    else
      kvcache::run<Fp16Tag, true, Fp16Tag>(p, ctx, workspace, bytes, stream);
  } else if (p.dtype == DType::BF16) {
    kvcache::run<Bf16Tag, false, Bf16Tag>(p, ctx, workspace, bytes, stream);
  } else {
    kvcache::run<Fp16Tag, false, Fp16Tag>(p, ctx, workspace, bytes, stream);
  }
}

}  // namespace fa::cuda
