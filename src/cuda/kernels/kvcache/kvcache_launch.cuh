// Host side of the cuda-kvcache family: the plan (plan.h), the workspace carve-up, and the
// launches of one call: kv_prepare_kernel (append, rotary), the attention kernel (kv_fwd_kernel),
// kv_combine_kernel (split calls, unless the attention kernel merges: a memset of its counters
// then goes ahead of it). Included by kvcache_bf16.cu / kvcache_fp16.cu / kvcache_fp8.cu, one
// input type each.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/fp8.h"
#include "cuda/backend.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"
#include "cuda/head_dim_dispatch.h"
#include "cuda/instantiations/head_dims.h"
#include "cuda/kernels/kvcache/kvcache_kernel.cuh"
#include "cuda/kernels/kvcache/plan.h"
#include "cuda/kvcache.h"
#include "fa_build_config.h"  // FA_SM80_FWD_DIMS: the head dims of this build

namespace fa::cuda::kvcache {

inline void check_launch(const char* what, int d) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, what, " (cuda-kvcache, d", d, ") launch: ", cudaGetErrorString(err));
}

// A launch, as a programmatic dependent of the kernel ahead on the stream where `dependent`
// (cudaLaunchAttributeProgrammaticStreamSerialization: its blocks may start, and wait in
// grid_dependency_wait, while that kernel's last blocks finish).
template <typename Kernel, typename... Args>
void launch_kernel(Kernel kernel, dim3 grid, unsigned threads, size_t smem, cudaStream_t stream,
                   bool dependent, const char* what, int d, const Args&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = dependent ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, what, " (cuda-kvcache, d", d, ") launch: ", cudaGetErrorString(err));
  check_launch(what, d);
}

// One attention kernel's launch: its dynamic shared memory opted in once a device, then the grid
// (row tiles x split parts, kv heads, batch entries).
template <class T, typename Kernel>
void launch_attention_kernel(Kernel kernel, const Params& p, const KvArgs& a, cudaStream_t stream,
                             bool dependent) {
  static std::atomic<uint64_t> opted_in{0};
  const cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes,
                                      p.device.index, opted_in);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "cudaFuncSetAttribute(cuda-kvcache d", T::kHeadDim, "): ",
         cudaGetErrorString(err));
  const dim3 grid(unsigned(int64_t(a.row_tiles) * a.splits), unsigned(p.heads_kv),
                  unsigned(p.batch));
  launch_kernel(kernel, grid, T::kThreads, T::kSmemBytes, stream, dependent, "attention kernel",
                T::kHeadDim, p, a);
}

// The attention kernel of head dim D.
template <int D, typename Tag, bool kFp8, typename OutTag>
void launch_attention(const Params& p, const KvArgs& a, cudaStream_t stream, bool dependent) {
  using T = KvTraits<D, Tag, kFp8, OutTag>;
  launch_attention_kernel<T>(kv_fwd_kernel<T>, p, a, stream, dependent);
}

template <typename Tag, bool kFp8, typename OutTag>
void run(const Params& call, const Context& ctx, void* workspace, size_t bytes, void* stream_ptr) {
  // The inputs' element type (the prepare kernel's: fp8 appends are byte copies; validation
  // refuses rotary with fp8).
  using E = std::conditional_t<kFp8, e4m3_t,
                               std::conditional_t<std::is_same_v<Tag, Bf16Tag>, bfloat16_t, half_t>>;
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int kernel_d = kernel_head_dim(call.head_dim);
  const Plan plan = plan_of(call, ctx);
  const bool rotary = call.rotary.dim > 0;
  const WorkspaceLayout w = layout_of(call, plan);
  if (bytes < w.bytes() || (w.bytes() > 0 && workspace == nullptr))
    fail(FA_ERROR_INTERNAL, "cuda-kvcache workspace of ", bytes, " bytes is below its ",
         w.bytes());
  char* base = static_cast<char*>(workspace);
  Params p = call;

  // Append and rotate first: the attention reads the new keys from the cache and q rotated.
  const int64_t prepare = p.batch * p.seqlen_new + (rotary ? p.batch * p.seqlen_q : 0);
  E* q_rot = rotary ? reinterpret_cast<E*>(base) : nullptr;
  if (prepare > 0) {
    // Blocks (row, head): as many heads a row as the larger of the two passes has (the grid's
    // y extent is at most 65535: the kernel strides past it).
    const int64_t heads = std::min<int64_t>(std::max(p.heads_kv, rotary ? p.heads_q : 0), 65535);
    kv_prepare_kernel<E><<<dim3(unsigned(prepare), unsigned(heads)), kPrepareThreads, 0, stream>>>(p, q_rot);
    check_launch("prepare kernel", kernel_d);
  }
  if (rotary) {
    p.q.data = q_rot;
    p.q.stride_h = p.head_dim;
    p.q.stride_s = p.heads_q * p.head_dim;
    p.q.stride_b = p.seqlen_q * p.heads_q * p.head_dim;
  }

  KvArgs a{};
  a.row_tiles = int32_t(plan.row_tiles);
  a.splits = int32_t(plan.splits);
  a.group = int32_t(p.group());
  a.part_rows = p.total_q * p.heads_q;
  a.part_o = plan.splits > 1 ? reinterpret_cast<float*>(base + w.rotated_q) : nullptr;
  a.part_lse = plan.splits > 1 ? reinterpret_cast<float*>(base + w.rotated_q + w.part_o) : nullptr;
  // The merge in the attention kernel (Tuning::kvcache_fused_merge): its counters zeroed on the
  // stream first (the workspace may hold anything), and no combine kernel.
  const bool fused = plan.splits > 1 && ctx.tuning.kvcache_fused_merge;
  if (fused) {
    a.counters = reinterpret_cast<int32_t*>(base + w.rotated_q + w.part_o + w.part_lse);
    const cudaError_t err = cudaMemsetAsync(a.counters, 0, w.counters, stream);
    if (err != cudaSuccess)
      fail(FA_ERROR_CUDA, "cudaMemsetAsync (cuda-kvcache merge counters): ",
           cudaGetErrorString(err));
  }
  // Programmatic dependent launches (Tuning::kvcache_pdl, sm90): the attention kernel after the
  // prepare kernel or the caller's last kernel, the combine after the attention kernel; each
  // waits for its predecessor before its first read (kvcache_kernel.cuh), so only the launch
  // gaps change.
  const bool pdl = ctx.tuning.kvcache_pdl && ctx.device.major >= 9;
  with_head_dim<FA_SM80_FWD_DIMS>(kernel_d, "cuda-kvcache", "forward", [&](auto d) {
    launch_attention<decltype(d)::value, Tag, kFp8, OutTag>(p, a, stream, pdl);
  });
  if (plan.splits > 1 && !fused) {
    const int64_t blocks = (a.part_rows + kCombineWarps - 1) / kCombineWarps;
    launch_kernel(kv_combine_kernel<OutTag>, dim3(unsigned(blocks)), 32 * kCombineWarps, 0, stream,
                  pdl, "combine kernel", kernel_d, p, a);
  }
}

}  // namespace fa::cuda::kvcache
