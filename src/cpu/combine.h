// The combine step on the CPU (core/combine.h has the semantics): n partial (O, LSE) results of
// one attention call merged into the call's out and lse. Internal: split-KV decode and ring
// attention call it; it is not in the C ABI.
#pragma once

#include <cstdint>

#include "core/params.h"

namespace fa::cpu {

// One part: its normalised outputs, indexed like p.out (b, row, h), in any dtype the views hold
// (fp32 as kernels write partials; fp64 for the oracle), and its LSE, indexed like p.lse.
struct Partial {
  View out;
  LseView lse;
};

// For every (sequence, query row, head) of p: p.out (in its dtype) and p.lse (when p.lse.data is
// set) from parts[0..n). Reads only q's layout from p (batch, heads_q, head_dim, the sequences'
// query rows); rows of different threads are disjoint. Accumulates in double. p.out and p.lse may
// be a part's own views (ring attention's running merge): each row is read whole before written.
void combine(const Params& p, const Partial* parts, int64_t n, int threads);

}  // namespace fa::cpu
