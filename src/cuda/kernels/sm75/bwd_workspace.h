// The cuda-sm75 backward's workspace: the sm80 family's layout (cuda/bwd_sm80.h, bwd_layout)
// without a split tail, for the host's size query (bwd_sm75.cu) and the launch's split
// (bwd_launch.cuh) alike.
#pragma once

#include "core/params.h"
#include "cuda/bwd_sm80.h"

namespace fa::cuda::sm75 {

inline sm80::BwdLayout bwd_layout(const Params& p, int kernel_d) {
  return sm80::bwd_layout(p, kernel_d, sm80::bwd_tail_split(0, 0, 0, 0));
}

}  // namespace fa::cuda::sm75
