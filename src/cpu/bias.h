// The backward's dbias (fa_params 0.4) on the CPU: each (batch, query head) task accumulates its
// d loss / d logit into a partial of its own, (batch * heads_q, rows, cols) where rows and cols
// are dbias's query and key dimensions (1 where dbias sums over them); this step then sums the
// partials of the tasks that share each dbias element, in (batch, head) order, so the result does
// not depend on the thread count.
#pragma once

#include <cstdint>

#include "core/checked.h"
#include "core/params.h"

namespace fa::cpu {

// Elements of the partials: batch * heads_q * grad_shape[2] * grad_shape[3]; 0 without dbias.
Checked dbias_partial_elems(const Params& p);

// The partial of task (b, h): grad_shape[2] x grad_shape[3], row-major.
template <typename Acc>
Acc* dbias_partial(const Params& p, Acc* partials, int64_t b, int64_t h) {
  return partials + (b * p.heads_q + h) * p.bias.grad_shape[2] * p.bias.grad_shape[3];
}

// dbias <- the sums of the partials, in dbias's dtype and strides.
template <typename Acc>
void reduce_dbias(const Params& p, const Acc* partials, int threads);

extern template void reduce_dbias<float>(const Params&, const float*, int);
extern template void reduce_dbias<double>(const Params&, const double*, int);

}  // namespace fa::cpu
