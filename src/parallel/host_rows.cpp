#include "parallel/host_rows.h"

#include "cpu/element.h"

namespace fa::ring {
namespace {

template <typename Op>
void for_each_row(const RowBlock& n, Op&& op) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n.batch * n.rows; ++t)
    for (int64_t h = 0; h < n.heads; ++h) op(t / n.rows, t % n.rows, h);
}

}  // namespace

void copy_rows(const View& dst, const View& src, const RowBlock& n) {
  for_each_row(n, [&](int64_t b, int64_t i, int64_t h) {
    const void* s = cpu::row_of(src, b, i, h);
    for (int64_t c = 0; c < n.dim; ++c)
      cpu::store_element(dst, b, i, h, c, cpu::load_element(src.dtype, s, c));
  });
}

void add_rows(const View& dst, const View& src, const RowBlock& n) {
  for_each_row(n, [&](int64_t b, int64_t i, int64_t h) {
    const void* s = cpu::row_of(src, b, i, h);
    float* d = dst.at<float>(b, i, h);
    for (int64_t c = 0; c < n.dim; ++c) d[c] += float(cpu::load_element(src.dtype, s, c));
  });
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
