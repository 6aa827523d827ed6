// Elements of a View in whatever dtype it holds, in double: the reference's and the combine
// step's loads and stores (the flash kernels are templated on the type instead). Key rows go
// through the block table when the cache is paged (Params::key_row).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/fp8.h"
#include "core/params.h"

namespace fa::cpu {

// Element c of a row of dtype t.
inline double load_element(DType t, const void* row, int64_t c) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(row)[c];
    case DType::F16: return to_float(static_cast<const half_t*>(row)[c]);
    case DType::BF16: return to_float(static_cast<const bfloat16_t*>(row)[c]);
    case DType::F64: return static_cast<const double*>(row)[c];
    case DType::E4M3: return to_float(static_cast<const e4m3_t*>(row)[c]);
  }
  return 0.0;
}

// Row (b, row, h) of a view.
inline const void* row_of(const View& v, int64_t b, int64_t row, int64_t h) {
  switch (v.dtype) {
    case DType::F32: return v.at<float>(b, row, h);
    case DType::F16: return v.at<half_t>(b, row, h);
    case DType::BF16: return v.at<bfloat16_t>(b, row, h);
    case DType::F64: return v.at<double>(b, row, h);
    case DType::E4M3: return v.at<e4m3_t>(b, row, h);
  }
  return nullptr;
}

// Key t of head h of k or v (dense, or through the block table).
inline const void* key_row_of(const Params& p, const View& v, int64_t b, int64_t t, int64_t h) {
  switch (v.dtype) {
    case DType::F32: return p.key_row<float>(v, b, t, h);
    case DType::F16: return p.key_row<half_t>(v, b, t, h);
    case DType::BF16: return p.key_row<bfloat16_t>(v, b, t, h);
    case DType::F64: return p.key_row<double>(v, b, t, h);
    case DType::E4M3: return p.key_row<e4m3_t>(v, b, t, h);
  }
  return nullptr;
}

// x into element c of row (b, row, h), rounded to the view's dtype.
inline void store_element(const View& v, int64_t b, int64_t row, int64_t h, int64_t c, double x) {
  switch (v.dtype) {
    case DType::F32: v.at<float>(b, row, h)[c] = float(x); break;
    case DType::F16: v.at<half_t>(b, row, h)[c] = to_half(float(x)); break;
    case DType::BF16: v.at<bfloat16_t>(b, row, h)[c] = to_bf16(float(x)); break;
    case DType::F64: v.at<double>(b, row, h)[c] = x; break;
    case DType::E4M3: v.at<e4m3_t>(b, row, h)[c] = to_e4m3(float(x)); break;  // never an output
  }
}

// Element (b, h, i, j) of the call's attn_bias as the term its logit gets: the value, or for a
// mask 0 (seen) / -inf (not seen). 0 without a bias.
inline double load_bias(const Params::Bias& bias, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t o = bias.offset(b, h, i, j);
  switch (bias.kind) {
    case Params::Bias::Kind::None: return 0.0;
    case Params::Bias::Kind::F32: return static_cast<const float*>(bias.data)[o];
    case Params::Bias::Kind::F16: return to_float(static_cast<const half_t*>(bias.data)[o]);
    case Params::Bias::Kind::BF16: return to_float(static_cast<const bfloat16_t*>(bias.data)[o]);
    case Params::Bias::Kind::Mask:
      return static_cast<const unsigned char*>(bias.data)[o] ? 0.0 : -HUGE_VAL;
  }
  return 0.0;
}

}  // namespace fa::cpu
