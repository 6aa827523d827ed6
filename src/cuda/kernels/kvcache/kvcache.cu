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
  // check_forward (every CUDA kernel's needs) has run: arch, 16-bit inputs, head dim, alignment.
  if (p.dropout_p > 0.f) return "dropout is not supported with a KV cache or split-KV";
  if (p.out.dtype != p.dtype) return "out.dtype must equal q.dtype";
  const int kernel_d = kernel_head_dim(p.head_dim);
  if (kvcache::smem_bytes(kernel_d) > 99 * 1024)  // fits every sm80-family part's block limit
    return "internal: the kernel's shared memory exceeds 99 KB";
  if (p.rotary.dim > 0 && p.rotary.dim % 2 != 0) return "rotary_dim must be even";
  return "";
}

size_t kvcache_workspace(const Params& p, const Context& ctx) {
  const int kernel_d = kernel_head_dim(p.head_dim);
  const kvcache::Plan plan =
      kvcache::make_plan(p.batch, p.heads_kv, p.seqlen_q, p.group(), p.seqlen_k, p.num_splits,
                         kernel_d, ctx.device.sms, ctx.device.smem_optin);
  return kvcache::workspace_layout(p.total_q, p.heads_q, p.head_dim, p.rotary.dim > 0,
                                   plan.splits)
      .bytes();
}

void kvcache_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                     void* stream) {
  DeviceGuard guard(p.device.index);
  if (p.dtype == DType::BF16)
    kvcache::run<Bf16Tag>(p, ctx, workspace, bytes, stream);
  else
    kvcache::run<Fp16Tag>(p, ctx, workspace, bytes, stream);
}

}  // namespace fa::cuda
