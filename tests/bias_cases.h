// The attention-bias test grid (attn_bias, fa_params 0.4), shared by the CPU tests
// (test_bias.cpp) and the CUDA ones (test_gpu_bias.cpp): every bias dtype and shape, each pair
// with two features, rotating through dtypes, lengths, head dims, GQA ratios and strides.
#pragma once

#include <cstdint>
#include <vector>

#include "support.h"

namespace fa::test::bias {

enum class Shape { Full, BroadcastBatch, BroadcastHeads, BroadcastQueries, Shared, KeyPadding };
enum class Feature { None, Causal, Window, Softcap, Alibi, Dropout, Varlen };

inline void set_shape(Case& c, Shape s) {
  bool* f = c.bias_full;
  f[0] = f[1] = f[2] = f[3] = true;
  switch (s) {
    case Shape::Full: break;
    case Shape::BroadcastBatch: f[0] = false; break;
    case Shape::BroadcastHeads: f[1] = false; break;
    case Shape::BroadcastQueries: f[2] = false; break;
    case Shape::Shared: f[0] = f[1] = false; break;                 // (1, 1, s_q, s_k): T5, Swin
    case Shape::KeyPadding: f[1] = f[2] = false; break;             // (b, 1, 1, s_k)
  }
}

inline std::vector<Case> grid() {
  const int bias_dtypes[] = {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_BOOL,
                             FA_DTYPE_INT8};
  const Shape shapes[] = {Shape::Full,          Shape::BroadcastBatch, Shape::BroadcastHeads,
                          Shape::BroadcastQueries, Shape::Shared,      Shape::KeyPadding};
  const Feature features[] = {Feature::None,  Feature::Causal,  Feature::Window, Feature::Softcap,
                              Feature::Alibi, Feature::Dropout, Feature::Varlen};
  const fa_dtype dtypes[] = {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16};
  const int64_t lens[][2] = {{77, 133}, {130, 61}, {1, 65}, {64, 64}, {129, 200}};
  std::vector<Case> cases;
  uint64_t n = 0;
  for (int bt : bias_dtypes)
    for (Shape s : shapes) {
      // Each (bias dtype, shape) pair with two features, rotating through dtypes, lengths,
      // head dims, GQA ratios and strides.
      for (int rep = 0; rep < 2; ++rep) {
        Case c;
        c.seed = ++n;
        c.bias_dtype = bt;
        set_shape(c, s);
        c.dtype = dtypes[n % 3];
        c.head_dim = (n % 4 == 0) ? 64 : (n % 4 == 1 ? 40 : (n % 4 == 2 ? 32 : 8));
        c.batch = 2;
        c.heads_kv = 1 + int64_t(n % 2);
        c.heads_q = c.heads_kv * (n % 3 == 0 ? 4 : 2);
        c.seqlen_q = lens[n % 5][0];
        c.seqlen_k = lens[n % 5][1];
        c.strided = n % 4 == 3;
        c.bias_empty_rows = n % 3 != 1;
        // Masks hide more in some cases: rows that keep a few keys only.
        c.bias_keep = c.bias_is_mask() && n % 2 ? 0.3 : 0.8;
        c.dbias = !c.bias_is_mask();
        if (c.dbias && n % 5 == 2) c.dbias_dtype = bt;  // its own dtype, else fp32
        switch (features[(n * 3 + size_t(rep)) % 7]) {
          case Feature::None: break;
          case Feature::Causal: c.causal = true; break;
          case Feature::Window: c.window_left = 21; c.window_right = int32_t(n % 3) * 4; break;
          case Feature::Softcap: c.softcap = 2.5f; break;
          case Feature::Alibi: c.alibi = true; break;
          case Feature::Dropout: c.dropout_p = 0.17f; break;
          case Feature::Varlen:
            c.lens_q = {int32_t(c.seqlen_q), 0, 13, 40};
            c.lens_k = {int32_t(c.seqlen_k), 9, 0, 51};
            c.causal = n % 2 == 0;
            break;
        }
        if (n % 6 == 5) c.dropout_p = 0.1f;  // dropout on top of another feature
        cases.push_back(c);
      }
    }
  return cases;
}

}  // namespace fa::test::bias
