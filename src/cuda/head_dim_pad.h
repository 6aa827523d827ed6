// Head dims that are not a multiple of 8 on the flash kernels (cuda-sm80, cuda-sm90), as
// flash_attn serves them, but inside the library: the call runs on zero-padded copies of its
// tensors in the workspace, head_dim rounded up to a multiple of 8, and the results are copied
// back cut to the caller's head_dim. The caller sees the same API and shapes.
//
// Exact: a zero column adds 0 to every q·k and gives a zero column of O (and of dQ, dK, dV),
// so the scores, the softmax, LSE and the first head_dim columns are what the unpadded
// attention gives (the scale is the call's, resolved from the caller's head_dim before this).
// The dropout mask is per (batch, head, query, key), independent of head_dim.
// Cost: one read of q, k, v (and out, dout for a backward) and one write of the padded copies,
// then one read of the padded results and a write of the caller's; the workspace holds the
// copies (padded_bytes). The KV-cache family does not pad (it would copy the whole cache a step,
// and the append writes the caller's cache): it refuses such head dims.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.h"

namespace fa::cuda {

inline bool needs_head_dim_padding(const Params& p) { return p.head_dim % 8 != 0; }
inline int64_t padded_head_dim(int64_t d) { return (d + 7) / 8 * 8; }

// Bytes of the padded copies at the front of the workspace (a multiple of 256).
size_t padded_bytes(const Params& p, bool backward);

// p with every tensor the kernels read or write (q, k, v, out; backward also dout, dq, dk, dv)
// replaced by a contiguous padded copy in the workspace at base, head_dim rounded up. base may be
// a placeholder (any 256-byte aligned address) where the views are only checked or sized.
Params padded_params(const Params& p, bool backward, char* base);

// Before the kernels: q, k, v (backward: out and dout too) into the padded copies, zeros in the
// added columns. After: out (backward: dq, dk, dv) from the copies into the caller's tensors.
void pad_inputs(const Params& p, const Params& padded, bool backward, void* stream);
void unpad_outputs(const Params& p, const Params& padded, bool backward, void* stream);

}  // namespace fa::cuda
