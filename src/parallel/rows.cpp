#include "parallel/rows.h"

#include <omp.h>

#include <algorithm>

#include "core/cuda_backend.h"
#include "core/error.h"
#include "cpu/combine.h"
#include "cpu/element.h"

namespace fa::ring {
namespace {

template <typename Op>
void for_each_row(const RowBlock& n, Op&& op) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n.batch * n.rows; ++t)
    for (int64_t h = 0; h < n.heads; ++h) op(t / n.rows, t % n.rows, h);
}

void host_copy(const View& dst, const View& src, const RowBlock& n) {
  for_each_row(n, [&](int64_t b, int64_t i, int64_t h) {
    const void* s = cpu::row_of(src, b, i, h);
    for (int64_t c = 0; c < n.dim; ++c)
      cpu::store_element(dst, b, i, h, c, cpu::load_element(src.dtype, s, c));
  });
}

void host_add(const View& dst, const View& src, const RowBlock& n) {
  for_each_row(n, [&](int64_t b, int64_t i, int64_t h) {
    const void* s = cpu::row_of(src, b, i, h);
    float* d = dst.at<float>(b, i, h);
    for (int64_t c = 0; c < n.dim; ++c) d[c] += float(cpu::load_element(src.dtype, s, c));
  });
}

void host_fill(const View& dst, const RowBlock& n, float value) {
  for_each_row(n, [&](int64_t b, int64_t i, int64_t h) {
    float* d = dst.at<float>(b, i, h);
    std::fill(d, d + n.dim, value);
  });
}

// The combine step's view of the block: q's layout (batch, rows, heads, dim) with out and lse.
void host_merge(const RowOp& op) {
  Params m;
  m.batch = op.n.batch;
  m.heads_q = m.heads_kv = op.n.heads;
  m.head_dim = op.n.dim;
  m.seqlen_q = op.n.rows;
  m.out = op.dst;
  m.lse = op.dst_lse;
  cpu::Partial parts[kMaxMergeParts];
  for (int i = 0; i < op.parts; ++i) parts[i] = {op.src[i], op.src_lse[i]};
  cpu::combine(m, parts, op.parts, omp_get_max_threads());
}

// An op of dst from one source over n (Copy, Add).
RowOp from_one(RowOp::Kind kind, const View& dst, const View& src, const RowBlock& n) {
  RowOp op;
  op.kind = kind;
  op.n = n;
  op.dst = dst;
  op.src[0] = src;
  return op;
}

}  // namespace

void Rows::run(const RowOp& op) const {
  if (op.n.batch * op.n.rows * op.n.heads * op.n.dim == 0) return;
  if (device_.type == FA_DEVICE_CUDA) {
    const char* message = nullptr;
    check_backend(cuda_backend().row_op(&op, device_.index, stream_, &message), &message);
    return;
  }
  switch (op.kind) {
    case RowOp::Kind::Copy: return host_copy(op.dst, op.src[0], op.n);
    case RowOp::Kind::Add: return host_add(op.dst, op.src[0], op.n);
    case RowOp::Kind::Fill: return host_fill(op.dst, op.n, op.value);
    case RowOp::Kind::Merge: return host_merge(op);
  }
}

void Rows::copy(const View& dst, const View& src, const RowBlock& n) const {
  run(from_one(RowOp::Kind::Copy, dst, src, n));
}

void Rows::add(const View& dst, const View& src, const RowBlock& n) const {
  run(from_one(RowOp::Kind::Add, dst, src, n));
}

void Rows::fill(void* data, int64_t count, float value) const {
  RowOp op;
  op.kind = RowOp::Kind::Fill;
  op.n = {1, count, 1, 1};
  op.dst = dense_view(data, DType::F32, op.n);
  op.value = value;
  run(op);
}

void Rows::merge(const View& out, const LseView& lse, const View* o, const LseView* l, int parts,
                 const RowBlock& n) const {
  if (parts < 1 || parts > kMaxMergeParts)
    fail(FA_ERROR_INTERNAL, "a merge of ", parts, " parts (1..", kMaxMergeParts, ")");
  RowOp op;
  op.kind = RowOp::Kind::Merge;
  op.n = n;
  op.dst = out;
  op.dst_lse = lse;
  op.parts = parts;
  for (int i = 0; i < parts; ++i) {
    op.src[i] = o[i];
    op.src_lse[i] = l[i];
  }
  run(op);
}

View rows_from(const View& v, int64_t row) {
  View r = v;
  r.data = static_cast<unsigned char*>(v.data) + row * v.stride_s * dtype_size(v.dtype);
  return r;
}

View dense_view(void* data, DType t, const RowBlock& n) {
  View v;
  v.data = data;
  v.dtype = t;
  v.stride_h = n.dim;
  v.stride_s = n.heads * n.dim;
  v.stride_b = n.rows * n.heads * n.dim;
  return v;
}

}  // namespace fa::ring
