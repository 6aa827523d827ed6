// Split-KV: how many parts a forward cuts each sequence's keys into (fa_params::num_splits). The
// parts run as independent attention calls over disjoint key ranges (Params::sequence gives a
// part's keys) and the combine step (core/combine.h) merges their (O, LSE). Host and device
// compile this header.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fa {

// The most parts a caller may ask for (FlashAttention-2's limit too).
constexpr int64_t kMaxSplits = 128;

// The heuristic behind num_splits = 0: split only when the call's independent tasks (one per
// (batch, query head, query block)) leave workers idle, into enough parts to give every worker
// one, each part at least min_keys keys long (shorter parts cost more in partial traffic and
// merging than they save), and never more than kMaxSplits. 1 means no split.
FA_HOST_DEVICE int64_t heuristic_splits(int64_t tasks, int64_t seqlen_k, int64_t workers,
                                               int64_t min_keys) {
  if (tasks <= 0 || tasks >= workers || seqlen_k < 2 * min_keys) return 1;
  int64_t n = workers;                       // a part per worker
  const int64_t by_keys = seqlen_k / min_keys;  // >= 2 here
  if (n > by_keys) n = by_keys;
  if (n > kMaxSplits) n = kMaxSplits;
  return n;
}

}  // namespace fa
