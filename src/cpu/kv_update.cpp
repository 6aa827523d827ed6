#include "cpu/kv_update.h"

#include <cstring>

#include "core/dtype.h"
#include "core/fp8.h"
#include "core/rotary.h"
#include "cpu/element.h"

namespace fa::cpu {
namespace {

// Row pos of rotary_cos / rotary_sin (validated: pos < seqlen).
const void* table_row(const void* base, DType t, int64_t stride, int64_t pos) {
  return static_cast<const char*>(base) + pos * stride * dtype_size(t);
}

// x (head_dim, fp32) rotated at position pos.
void rotate(const Params::Rotary& ro, int64_t pos, float* x) {
  const void* c = table_row(ro.cos, ro.dtype, ro.cos_stride_s, pos);
  const void* s = table_row(ro.sin, ro.dtype, ro.sin_stride_s, pos);
  for (int64_t j = 0; j < ro.dim / 2; ++j) {
    float& x1 = x[rotary_first(j, ro.interleaved)];
    float& x2 = x[rotary_second(j, ro.dim, ro.interleaved)];
    rotate_pair(x1, x2, float(load_element(ro.dtype, c, j)), float(load_element(ro.dtype, s, j)));
  }
}

// dst <- src rotated at pos (d elements of T), through fp32.
template <typename T>
void rotate_row(const Params::Rotary& ro, int64_t pos, const T* src, T* dst, int64_t d) {
  float x[FA_MAX_HEAD_DIM];  // validated: d <= FA_MAX_HEAD_DIM
  for (int64_t c = 0; c < d; ++c) x[c] = to_float(src[c]);
  rotate(ro, pos, x);
  for (int64_t c = 0; c < d; ++c) dst[c] = convert<T>(x[c]);
}

template <typename T>
void append(const Params& p, int threads) {
  const int64_t d = p.head_dim;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < p.batch * p.seqlen_new; ++t) {
    const int64_t b = t / p.seqlen_new, j = t % p.seqlen_new;
    const int64_t row = int64_t(p.cache_seqlens[b]) + j;  // the cache row, a key position
    for (int64_t h = 0; h < p.heads_kv; ++h) {
      const T* kn = p.k_new.at<T>(b, j, h);
      T* k = p.key_row<T>(p.k, b, row, h);
      if (p.rotary.dim > 0)
        rotate_row<T>(p.rotary, row, kn, k, d);
      else
        std::memcpy(k, kn, size_t(d) * sizeof(T));
      std::memcpy(p.key_row<T>(p.v, b, row, h), p.v_new.at<T>(b, j, h), size_t(d) * sizeof(T));
    }
  }
}

template <typename T>
View rotate_q(const Params& p, void* dst, int threads) {
  const int64_t d = p.head_dim;
  View out;
  out.data = dst;
  out.dtype = p.q.dtype;
  out.stride_h = d;
  out.stride_s = p.heads_q * d;
  out.stride_b = p.seqlen_q * p.heads_q * d;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < p.batch * p.seqlen_q; ++t) {
    const int64_t b = t / p.seqlen_q, i = t % p.seqlen_q;
    const int64_t pos = rotary_query_position(p.cache_seqlens[b], i, p.rotary.q_positions_advance);
    for (int64_t h = 0; h < p.heads_q; ++h)
      rotate_row<T>(p.rotary, pos, p.q.at<T>(b, i, h), out.at<T>(b, i, h), d);
  }
  return out;
}

}  // namespace

void append_kv(const Params& p, int threads) {
  switch (p.dtype) {
    case DType::F32: return append<float>(p, threads);
    case DType::F16: return append<half_t>(p, threads);
    case DType::BF16: return append<bfloat16_t>(p, threads);
    case DType::E4M3: return append<e4m3_t>(p, threads);  // fp8: without rotary, a byte copy
    case DType::F64: break;  // never an input dtype of the ABI
  }
}

Checked rotated_q_elems(const Params& p) {
  if (p.rotary.dim == 0) return 0;
  return Checked(p.batch) * p.seqlen_q * p.heads_q * p.head_dim;
}

View rotate_queries(const Params& p, void* dst, int threads) {
  switch (p.dtype) {
    case DType::F32: return rotate_q<float>(p, dst, threads);
    case DType::F16: return rotate_q<half_t>(p, dst, threads);
    case DType::BF16: return rotate_q<bfloat16_t>(p, dst, threads);
    case DType::F64: break;
    case DType::E4M3: break;  // validation refuses rotary with fp8
  }
  return p.q;
}

}  // namespace fa::cpu
