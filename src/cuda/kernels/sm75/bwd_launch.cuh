// Host side of the cuda-sm75 backward (bwd_kernel.cuh): the workspace split (the sm80 family's
// layout without a split tail), three launches on the caller's stream. Included only by the
// generated instantiation files (src/cuda/instantiations/bwd_sm75_*), one head dim each.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/error.h"
#include "cuda/bwd_sm75.h"
#include "cuda/bwd_sm80.h"
#include "cuda/device_props.h"
#include "cuda/kernels/sm75/bwd_kernel.cuh"
#include "cuda/kernels/sm75/bwd_workspace.h"
#include "cuda/kernels/sm80/bwd_prepost.cuh"
#include "cuda/kernels/varlen/sanitize.h"

namespace fa::cuda::sm75 {

template <class T>
void launch_bwd_kernel(const Params& p, const BwdWorkspace& ws, cudaStream_t stream) {
  // Above 48 KB a kernel must opt in to dynamic shared memory, once per device.
  static std::atomic<uint64_t> opted_in{0};
  cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(bwd_kernel<T>), T::kSmemBytes,
                                p.device.index, opted_in);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "cudaFuncSetAttribute(bwd sm75 d", T::kHeadDim, "): ",
         cudaGetErrorString(err));
  const dim3 grid(unsigned((p.seqlen_k + T::kBlockN - 1) / T::kBlockN), unsigned(p.heads_kv),
                  unsigned(p.batch));
  bwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, ws);
  err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "backward kernel (sm75, d", T::kHeadDim, ") launch: ",
         cudaGetErrorString(err));
}

template <int kHeadDim>
void run_bwd(const Params& caller, void* workspace, cudaStream_t stream) {
  using T = BwdTraits<kHeadDim, false>;
  static_assert(T::kBlockM == sm80::kBwdBlockM, "the workspace's query tiles are the step's");
  const sm80::BwdLayout layout = bwd_layout(caller, kHeadDim);
  // A packed batch's kernels index by safe copies of its cu_seqlens (seq_unclamped), made first
  // on the stream at the workspace's end, as in the sm80 family.
  Params p = caller;
  if (p.varlen()) {
    int32_t* cu = static_cast<int32_t*>(workspace) + (layout.bytes() / 4 - layout.cu_elems);
    sanitize_cu_seqlens(caller, cu, cu + (p.batch + 1), stream);
    p.cu_seqlens_q = cu;
    p.cu_seqlens_k = cu + (p.batch + 1);
  }
  BwdWorkspace ws{};
  ws.rows = int64_t(sm80::bwd_rows(p));
  ws.m_blocks = int(layout.m_blocks);
  ws.dq_acc = static_cast<float*>(workspace);
  ws.tail_cnt = reinterpret_cast<int*>(ws.dq_acc + layout.dq_acc_elems);
  ws.sem = ws.tail_cnt + layout.tail_cnt_elems;
  ws.dsum = reinterpret_cast<float*>(ws.sem + layout.sem_elems);
  ws.lse2 = ws.dsum + layout.dsum_elems;
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, what, " (sm75 backward, d", kHeadDim, "): ", cudaGetErrorString(e));
  };
  if (p.deterministic)
    check(cudaMemsetAsync(ws.sem, 0, layout.sem_elems * 4, stream), "clearing the semaphores");
  auto rows_grid = [&p](int rows_per_block, int64_t rows) {
    return dim3(unsigned((rows + rows_per_block - 1) / rows_per_block), unsigned(p.heads_q),
                unsigned(p.batch));
  };
  // The sm80 preprocess (plain loads and stores; Fp16Tag only names the element type there).
  sm80::bwd_preprocess<Fp16Tag, kHeadDim>
      <<<rows_grid(sm80::kPreRows<kHeadDim>, sm80::bwd_clear_rows(p.seqlen_q)),
         32 * sm80::kRowWarps, 0, stream>>>(p, ws);
  check(cudaGetLastError(), "preprocess launch");
  if (p.dropout_p > 0.f)
    launch_bwd_kernel<BwdTraits<kHeadDim, true>>(p, ws, stream);
  else
    launch_bwd_kernel<T>(p, ws, stream);
  // The postprocess reads the accumulator in this family's tile order (T::DqLayout; the dropout
  // kernel's is the same: it depends on the head dim alone).
  static_assert(std::is_same_v<typename T::DqLayout,
                               typename BwdTraits<kHeadDim, true>::DqLayout>,
                "one accumulator order for both kernels");
  sm80::bwd_postprocess<T><<<rows_grid(sm80::kPostRows<kHeadDim>, p.seqlen_q),
                             32 * sm80::kRowWarps, 0, stream>>>(p, ws);
  check(cudaGetLastError(), "postprocess launch");
}

}  // namespace fa::cuda::sm75
