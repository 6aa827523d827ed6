// Row-block copies and sums between (batch, rows, heads, head_dim) views of host memory in any
// dtype, the ring's bookkeeping around the attention calls: a shard's K / V into the buffer
// that travels, block gradients into fp32 accumulators, the accumulators into the caller's
// tensors. Element by element through cpu/element.h (values go through double: a copy between
// views of one dtype is exact).
#pragma once

#include <cstdint>

#include "core/params.h"

namespace fa::ring {

struct RowBlock {
  int64_t batch, rows, heads, dim;
};

// dst <- src over the block (src's values rounded to dst's dtype).
void copy_rows(const View& dst, const View& src, const RowBlock& n);
// dst += src over the block; dst is fp32.
void add_rows(const View& dst, const View& src, const RowBlock& n);
// The view from row `row` on (same strides).
View rows_from(const View& v, int64_t row);
// A contiguous (batch, rows, heads, dim) view of data.
View dense_view(void* data, DType t, const RowBlock& n);

}  // namespace fa::ring
