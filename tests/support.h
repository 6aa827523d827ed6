// Test support: owning host tensors in any dtype and layout, attention problems built from a
// Case description, the fp64 oracle and the same-precision naive baseline, error metrics.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/params.h"
#include "flashattn/flashattn.h"
#include "flashattn/flashattn.hpp"

namespace fa::test {

// An owning tensor. Memory order may differ from the logical (dim0, dim1, dim2, dim3) order:
// `order` lists the dims from outermost to innermost in memory (the last must be the last dim),
// and `pad` adds unused elements after each innermost row, so strides are genuinely arbitrary.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(fa_dtype dtype, std::vector<int64_t> shape, std::vector<int> order = {},
             int64_t pad = 0);

  fa::Tensor view() const;
  int64_t numel() const;
  int64_t elem_size() const;
  // Logical flat index (row-major over shape) -> element offset in storage.
  int64_t offset(int64_t flat) const;
  double get(int64_t flat) const;
  void set(int64_t flat, double x);
  void fill_normal(std::mt19937_64& rng, double stddev = 1.0);
  void poison();  // every byte of storage set to NaN patterns (0xFF)
  bool bytes_equal(const HostTensor& other) const;
  void* data() const { return storage_.get(); }
  size_t storage_bytes() const { return size_t(std::max<int64_t>(storage_elems_, 1) * elem_size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  fa_dtype dtype() const { return dtype_; }

 private:
  fa_dtype dtype_ = FA_DTYPE_FP32;
  std::vector<int64_t> shape_, strides_;
  int64_t storage_elems_ = 0;
  std::shared_ptr<unsigned char[]> storage_;
};

struct Case {
  fa_dtype dtype = FA_DTYPE_FP32;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 8;
  bool causal = false;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool alibi = false;
  float dropout_p = 0.f;
  bool deterministic = false;  // backward: the bit-reproducible mode
  float softmax_scale = 0.f;
  std::vector<int32_t> lens_q, lens_k;  // non-empty: packed variable-length batch
  bool strided = false;                 // (batch, heads, seq, dim) memory order plus padding
  int64_t pad = 3;                      // elements after each row when strided (GPU: 8, aligned)
  double input_scale = 1.0;             // stddev of q, k (v, dout stay at 1)
  uint64_t seed = 1;
  int out_dtype = -1;                   // of out and dout; -1: dtype
  // KV cache (fixed-length batches): page_size > 0 stores k, v in a paged cache of that page size,
  // its blocks in a random order among spare (poisoned) ones, through a block table; cache_lens
  // (one per batch entry, <= seqlen_k) are the cache_seqlens. A paged cache whose capacity exceeds
  // seqlen_k passes cache_seqlens = seqlen_k when cache_lens is empty.
  int64_t page_size = 0;
  std::vector<int32_t> cache_lens;
  int64_t q_shift = 0;
  // attn_bias (fa_params 0.4): bias_dtype -1 = none, else its fa_dtype (fp32 / fp16 / bf16, or
  // bool / int8 for a mask); bias_full[i]: dimension i (batch, heads_q, seqlen_q, seqlen_k) has
  // its full size, else 1 (broadcast). A packed batch's query / key dimensions are
  // max_seqlen + 2 (the bias may be larger than every sequence). Masks keep each element with
  // probability bias_keep. bias_empty_rows: every 7th query row (from 2) of the bias sees no
  // key (-inf, or false); with a broadcast query dimension every 5th key (from 3) is hidden
  // instead. dbias: the backward also writes dbias, in dbias_dtype (-1: fp32).
  int bias_dtype = -1;
  bool bias_full[4] = {true, true, true, true};
  double bias_keep = 0.8;
  bool bias_empty_rows = false;
  bool dbias = false;
  int dbias_dtype = -1;
  // fp8 e4m3 inputs (dtype FA_DTYPE_FP8_E4M3, fa_params 0.5): q, k, v are N(0, input_scale)
  // (v: N(0, 1)) rounded to e4m3; descale: q_descale, k_descale, v_descale (batch, heads_kv)
  // uniform in [0.25, 2], passed with the call.
  bool descale = false;

  bool has_bias() const { return bias_dtype >= 0; }
  bool bias_is_mask() const { return bias_dtype == FA_DTYPE_BOOL || bias_dtype == FA_DTYPE_INT8; }
  fa_dtype out_type() const { return out_dtype < 0 ? dtype : fa_dtype(out_dtype); }

  bool varlen() const { return !lens_q.empty(); }
  std::string name() const;
};

// GoogleTest prints a parameter with this (test listings show the case name, not its bytes).
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

// Test names of a grid of cases (INSTANTIATE_TEST_SUITE_P's last argument): index and case name.
struct CaseTestName {
  template <class ParamInfo>
  std::string operator()(const ParamInfo& info) const {
    return std::to_string(info.index) + "_" + info.param.name();
  }
};

// Tensors of one attention call, filled with fresh random values; outputs poisoned.
struct Problem {
  Case c;
  HostTensor q, k, v, out, lse, dout, dq, dk, dv, cu_q, cu_k, alibi;
  // Paged: the cache the call reads (k, v keep the same keys densely), its block table; and the
  // cache_seqlens tensor when the call passes one.
  HostTensor k_pages, v_pages, block_table, cache_seqlens;
  HostTensor bias, dbias;  // Case::bias_dtype, Case::dbias
  HostTensor q_descale, k_descale, v_descale;  // Case::descale
  int64_t total_q = 0, total_k = 0, max_q = 0, max_k = 0;

  explicit Problem(const Case& c);
  fa_params params(fa_backend backend = FA_BACKEND_AUTO, bool with_grads = false) const;
  void poison_outputs();

 private:
  void make_cache(const std::vector<int>& order4, int64_t pad);
  void make_bias();
};

// Dense results in double: out/dq (rows, heads_q, d), dk/dv (rows, heads_kv, d), lse (heads_q, rows).
struct Dense {
  std::vector<double> out, lse, dq, dk, dv, dbias;  // dbias: the bias's shape, row-major
};

// fp64 oracle (Acc = double) or the naive same-precision baseline (Acc = float, P rounded to the
// input dtype). `grads` also runs the backward with the problem's dout.
// round_p (naive only) also rounds the normalised P to the 16-bit type before P·V and dV = Pᵀ dO,
// as a naive 16-bit GPU implementation does: the baseline of the GPU kernels' accuracy rule.
Dense reference(const Problem& pr, bool use_float, bool grads, bool round_p = false);
// The problem's own outputs as Dense.
Dense outputs(const Problem& pr, bool grads);

// max |a - b| over entries; entries equal in value (both -inf included) count 0; a NaN counts inf.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
double max_abs(const std::vector<double>& a);

// FlashAttention's accuracy rule as a GoogleTest expectation:
//   max |got - ref| <= factor * max |naive - ref| + atol
// (factor 2 / atol 1e-5 for out and LSE, 3 / 1e-4 for gradients).
void expect_rule(const char* what, const std::vector<double>& got, const std::vector<double>& ref,
                 const std::vector<double>& naive, double factor, double atol);
// The rule on a call's results: out and lse (2, 1e-5), and with grads dq, dk, dv (3, 1e-4).
void expect_rules(const Dense& got, const Dense& ref, const Dense& naive, bool grads = true);

// Runs the public forward (and backward) on the problem with the given backend.
void run_forward(Problem& pr, fa_backend backend);
void run_backward(Problem& pr, fa_backend backend);

}  // namespace fa::test
