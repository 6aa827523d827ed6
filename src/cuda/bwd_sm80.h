// The sm80-family backward kernels (EXPERIMENTAL, built with -DFA_CUDA_BACKWARD=ON): one per
// (element type, head dim), each in its own generated file under instantiations/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "api/params.h"
#include "cuda/arch/mma.cuh"

namespace fa::cuda::sm80 {

// Head dims with a backward kernel (a call runs the smallest instantiated dim >= head_dim).
constexpr int kBwdHeadDims[] = {32, 64, 96, 128};

// Workspace of a backward with a kernel of head dim kernel_d: the fp32 dQ accumulator (rows x
// heads_q x kernel_d) and D = rowsum(dO ∘ O) (rows x heads_q), rows = total_q.
inline size_t bwd_workspace_bytes(const Params& p, int kernel_d) {
  return size_t(p.heads_q) * size_t(p.total_q) * size_t(kernel_d + 1) * sizeof(float);
}

template <int kHeadDim, typename Tag>
void run_bwd(const Params& p, void* workspace, cudaStream_t stream);

#define FA_SM80_BWD_EXTERN(D)                                                         \
  extern template void run_bwd<D, Bf16Tag>(const Params&, void*, cudaStream_t); \
  extern template void run_bwd<D, Fp16Tag>(const Params&, void*, cudaStream_t);
FA_SM80_BWD_EXTERN(32)
FA_SM80_BWD_EXTERN(64)
FA_SM80_BWD_EXTERN(96)
FA_SM80_BWD_EXTERN(128)
#undef FA_SM80_BWD_EXTERN

}  // namespace fa::cuda::sm80
