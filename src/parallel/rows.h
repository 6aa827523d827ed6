// Where ring attention's bookkeeping runs (core/row_ops.h): a shard's K / V into the buffer that
// travels, block results merged into the running (O, LSE), block gradients summed in fp32, and
// the accumulators into the caller's tensors. CPU tensors: on the calling thread's OpenMP team,
// element by element through cpu/element.h (values go through double: a copy between views of
// one dtype is exact) and the merge by cpu::combine. CUDA tensors: small kernels queued on the
// call's stream through the backend's row_op entry (core/cuda_backend.h); nothing waits for them.
#pragma once

#include <cstdint>

#include "core/params.h"
#include "core/row_ops.h"

namespace fa::ring {

using fa::RowBlock;

class Rows {
 public:
  Rows(fa_device device, void* stream) : device_(device), stream_(stream) {}

  // dst <- src over the block (src's values rounded to dst's dtype).
  void copy(const View& dst, const View& src, const RowBlock& n) const;
  // dst += src over the block; dst is fp32.
  void add(const View& dst, const View& src, const RowBlock& n) const;
  // count fp32 values from data on <- value.
  void fill(void* data, int64_t count, float value) const;
  // out, lse (lse.data nullptr: not written) <- the merge of `parts` partial results (o[i], l[i])
  // over the block's rows; out and lse may be part 0's own views.
  void merge(const View& out, const LseView& lse, const View* o, const LseView* l, int parts,
             const RowBlock& n) const;

 private:
  void run(const RowOp& op) const;
  fa_device device_;
  void* stream_;
};

// The view from row `row` on (same strides).
View rows_from(const View& v, int64_t row);
// A contiguous (batch, rows, heads, dim) view of data.
View dense_view(void* data, DType t, const RowBlock& n);

}  // namespace fa::ring
