// Host side of the sm80 backward (EXPERIMENTAL, see bwd_kernel.cuh): the workspace split, the
// dQ accumulator cleared, three launches on the caller's stream. Included only by the generated
// instantiation files (src/cuda/instantiations/bwd_sm80_*), one (dtype, head_dim) each.
#pragma once

#include <cuda_runtime.h>

#include "api/error.h"
#include "cuda/bwd_sm80.h"
#include "cuda/kernels/sm80/bwd_kernel.cuh"

namespace fa::cuda::sm80 {

template <int kHeadDim, typename Tag>
void run_bwd(const Params& p, void* workspace, cudaStream_t stream) {
  using T = BwdTraits<kHeadDim, Tag>;
  constexpr int kRowWarps = 4;  // pre- / postprocess: one warp per query row
  BwdWorkspace ws;
  ws.rows = p.total_q;
  ws.dq_acc = static_cast<float*>(workspace);
  ws.dsum = ws.dq_acc + p.heads_q * p.total_q * kHeadDim;
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, what, " (sm80 backward, d", kHeadDim, "): ", cudaGetErrorString(e));
  };
  check(cudaMemsetAsync(ws.dq_acc, 0,
                        size_t(p.heads_q) * size_t(p.total_q) * kHeadDim * sizeof(float), stream),
        "clearing the dQ accumulator");
  const dim3 rows_grid(unsigned((p.seqlen_q + kRowWarps - 1) / kRowWarps), unsigned(p.heads_q),
                       unsigned(p.batch));
  bwd_preprocess<Tag, kRowWarps><<<rows_grid, 32 * kRowWarps, 0, stream>>>(p, ws);
  check(cudaGetLastError(), "preprocess launch");
  check(cudaFuncSetAttribute(bwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             T::kSmemBytes),
        "cudaFuncSetAttribute");
  const dim3 grid(unsigned((p.seqlen_k + T::kBlockN - 1) / T::kBlockN), unsigned(p.heads_kv),
                  unsigned(p.batch));
  bwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, ws);
  check(cudaGetLastError(), "main kernel launch");
  bwd_postprocess<Tag, kHeadDim, kRowWarps><<<rows_grid, 32 * kRowWarps, 0, stream>>>(p, ws);
  check(cudaGetLastError(), "postprocess launch");
}

}  // namespace fa::cuda::sm80
