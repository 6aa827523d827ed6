// The naive attention every other implementation is checked against: per (batch, head) it
// materialises the (seqlen_q, seqlen_k) score matrix and computes in Acc (double for the oracle,
// float for the "same-precision naive" baseline of FlashAttention's accuracy rule).
#pragma once

#include <cstddef>

#include "core/params.h"
#include "core/checked.h"

namespace fa::cpu {

struct ReferenceOptions {
  // Round the normalised P to p.dtype before P·V and, in the backward, before dV = Pᵀ dO, as a
  // naive 16-bit implementation does.
  bool round_p = false;
  // Backward: D_i = rowsum(dO_i * out_i) from the stored (dtype-rounded) out, as every
  // FlashAttention backward must, instead of the exact rowsum(P_i * dP_i).
  bool stored_out_delta = false;
};

// One thread's scratch, and the whole workspace for `threads` threads (FA_ERROR_SIZE when the
// sizes overflow).
Checked reference_forward_thread_bytes(const Params& p);
Checked reference_backward_thread_bytes(const Params& p);
// The backward's scratch shared by its threads: the dbias partials (0 without dbias).
Checked reference_backward_shared_bytes(const Params& p);
size_t reference_forward_workspace(const Params& p, int threads);
size_t reference_backward_workspace(const Params& p, int threads);

// Writes out and lse through p's views; out may have dtype F64 (the oracle's own output).
template <typename Acc>
void reference_forward(const Params& p, void* workspace, size_t bytes, int threads,
                       ReferenceOptions opts = {});

// Writes dq, dk, dv (and dbias when p.bias.grad is set); recomputes everything from q, k, v, dout (ignores lse, and out unless
// opts.stored_out_delta).
template <typename Acc>
void reference_backward(const Params& p, void* workspace, size_t bytes, int threads,
                        ReferenceOptions opts = {});

extern template void reference_forward<double>(const Params&, void*, size_t, int, ReferenceOptions);
extern template void reference_forward<float>(const Params&, void*, size_t, int, ReferenceOptions);
extern template void reference_backward<double>(const Params&, void*, size_t, int, ReferenceOptions);
extern template void reference_backward<float>(const Params&, void*, size_t, int, ReferenceOptions);

}  // namespace fa::cpu
