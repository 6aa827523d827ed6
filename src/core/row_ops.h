// Ring attention's bookkeeping around its attention calls, as one description that the host and
// the device both run: copies, fp32 sums, fills and merges of partial results over
// (batch, rows, heads, dim) views. src/parallel/rows.cpp runs an op on the host for CPU tensors;
// for CUDA tensors it goes through the backend's row_op entry (core/cuda_backend.h,
// src/cuda/row_ops.cu), queued on the call's stream.
//
// A merge is the combine step of core/combine.h (the rule split-KV decode shares): its parts are
// normalised outputs with their LSE, a part with LSE -inf is empty and its output never read, and
// the destination may be one of the parts (the ring's running merge): a row is read whole before
// it is written.
#pragma once

#include <cstdint>

#include "core/params.h"

namespace fa {

struct RowBlock {
  int64_t batch = 0, rows = 0, heads = 0, dim = 0;
};

// The parts of one merge: the running result and the partial of one block.
constexpr int kMaxMergeParts = 2;

struct RowOp {
  enum class Kind : int32_t {
    Copy,   // dst <- src[0] over n, each value rounded to dst's dtype
    Add,    // dst (fp32) += src[0] over n
    Fill,   // dst (fp32) <- value over n
    Merge,  // dst, dst_lse <- the merge of src[0..parts), src_lse[0..parts) over n
  };
  Kind kind = Kind::Copy;
  RowBlock n;
  View dst;
  LseView dst_lse;  // Merge: the merged LSE, indexed (b, h, row); data nullptr: not written
  View src[kMaxMergeParts];
  LseView src_lse[kMaxMergeParts];
  int32_t parts = 0;  // Merge: 1..kMaxMergeParts
  float value = 0.f;  // Fill
};

}  // namespace fa
