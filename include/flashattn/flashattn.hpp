// flashattn C++ API: a thin header-only layer over the C ABI (flashattn.h) with named-field
// option structs, tensor views, RAII workspace, and exceptions of type fa::Error.
//
//   fa::Tensor q = fa::Tensor::contiguous(q_ptr, FA_DTYPE_BF16, {batch, seqlen, heads, dim});
//   ...
//   fa::Options opt;  opt.causal = true;
//   fa::forward(q, k, v, out, lse, opt);   // allocates the (host) workspace itself
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>

#include "flashattn/flashattn.h"

namespace fa {

class Error : public std::runtime_error {
 public:
  Error(fa_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  fa_status status() const noexcept { return status_; }

 private:
  fa_status status_;
};

inline void check(fa_status status) {
  if (status != FA_OK) throw Error(status, fa_last_error());
}

inline fa_device cpu_device() { return fa_device{FA_DEVICE_CPU, 0}; }
inline fa_device cuda_device(int index = 0) { return fa_device{FA_DEVICE_CUDA, index}; }

// A strided view of caller-owned memory; an empty Tensor (data == nullptr) means "absent".
struct Tensor {
  fa_tensor raw{};

  static Tensor contiguous(void* data, fa_dtype dtype, std::initializer_list<int64_t> shape,
                           fa_device device = cpu_device()) {
    if (shape.size() > FA_MAX_RANK) throw Error(FA_ERROR_RANK, "Tensor: rank > FA_MAX_RANK");
    Tensor t;
    t.raw.data = data;
    t.raw.dtype = dtype;
    t.raw.rank = int32_t(shape.size());
    t.raw.device = device;
    int i = 0;
    for (int64_t s : shape) t.raw.shape[i++] = s;
    int64_t stride = 1;
    for (int d = t.raw.rank - 1; d >= 0; --d) {
      t.raw.stride[d] = stride;
      stride *= t.raw.shape[d];
    }
    return t;
  }
  // Same memory, explicit strides (in elements).
  Tensor& with_strides(std::initializer_list<int64_t> strides) {
    int i = 0;
    for (int64_t s : strides) raw.stride[i++] = s;
    return *this;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < raw.rank; ++i) n *= raw.shape[i];
    return n;
  }
};

struct Options {
  fa_backend backend = FA_BACKEND_AUTO;
  float softmax_scale = 0.f;  // 0: 1 / sqrt(head_dim)
  bool causal = false;
  int32_t window_left = -1, window_right = -1;  // -1: unbounded
  float softcap = 0.f;
  Tensor alibi_slopes;  // fp32 (heads_q) or (batch, heads_q); empty: none
  float dropout_p = 0.f;
  uint64_t seed = 0, offset = 0;
  bool deterministic = false;
  // Packed variable-length batches: int32 (batch + 1) prefix sums, both or neither.
  Tensor cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  // Validate device-side cu_seqlens before running (a copy back and a stream wait; fa_params).
  bool check_inputs = false;
  // KV cache, forward only (fa_params): an int32 (batch, max_blocks) block table makes k, v a
  // paged cache (num_blocks, page_size, heads_kv, d); int32 (batch) cache_seqlens counts each
  // batch entry's keys. Empty: dense k, v, every key.
  Tensor block_table, cache_seqlens;
  // Shift of the queries along the keys (fa_params::q_shift); 0: bottom-right aligned.
  int64_t q_shift = 0;
  // The rest of flash_attn_with_kvcache (fa_params 0.3, forward only): a dense cache's row per
  // batch entry and each entry's first key (int32 (batch)); new keys / values
  // (batch, seqlen_new, heads_kv, d) appended in place at cache_seqlens; rotary cos / sin
  // (seqlen_ro, rotary_dim / 2) for them and q; the split count (0 heuristic, 1 none).
  Tensor cache_batch_idx, cache_leftpad, k_new, v_new, rotary_cos, rotary_sin;
  bool rotary_interleaved = false;
  int32_t num_splits = 0;
  // fa_params 0.4: a bias or mask of the scores, rank 4, broadcastable to (batch, heads_q,
  // seqlen_q, seqlen_k) (each dimension that size or 1; fp32 / fp16 / bf16 added, bool / int8:
  // 0 = masked), and the backward's optional output dbias (attn_bias's shape, summed over its
  // size-1 dimensions; fp32 or attn_bias's dtype). Empty: none. CPU backend in this build.
  Tensor attn_bias, dbias;
  // fa_params 0.5: fp32 (batch, heads_kv) factors of fp8 e4m3 q, k, v (FlashAttention-3's
  // q_descale / k_descale / v_descale); each multiplies its tensor's decoded values. Empty: 1.
  // Forward only, CPU backend in this build.
  Tensor q_descale, k_descale, v_descale;
};

// The C parameter block for the given tensors and options.
inline fa_params make_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Options& o = {}) {
  fa_params p;
  fa_params_init(&p);
  p.backend = o.backend;
  p.q = q.raw;
  p.k = k.raw;
  p.v = v.raw;
  p.out = out.raw;
  p.lse = lse.raw;
  p.cu_seqlens_q = o.cu_seqlens_q.raw;
  p.cu_seqlens_k = o.cu_seqlens_k.raw;
  p.max_seqlen_q = o.max_seqlen_q;
  p.max_seqlen_k = o.max_seqlen_k;
  p.softmax_scale = o.softmax_scale;
  p.causal = o.causal;
  p.window_left = o.window_left;
  p.window_right = o.window_right;
  p.softcap = o.softcap;
  p.alibi_slopes = o.alibi_slopes.raw;
  p.dropout_p = o.dropout_p;
  p.seed = o.seed;
  p.offset = o.offset;
  p.deterministic = o.deterministic;
  p.check_inputs = o.check_inputs;
  p.block_table = o.block_table.raw;
  p.cache_seqlens = o.cache_seqlens.raw;
  p.q_shift = o.q_shift;
  p.cache_batch_idx = o.cache_batch_idx.raw;
  p.cache_leftpad = o.cache_leftpad.raw;
  p.k_new = o.k_new.raw;
  p.v_new = o.v_new.raw;
  p.rotary_cos = o.rotary_cos.raw;
  p.rotary_sin = o.rotary_sin.raw;
  p.rotary_interleaved = o.rotary_interleaved;
  p.num_splits = o.num_splits;
  p.attn_bias = o.attn_bias.raw;
  p.dbias = o.dbias.raw;
  p.q_descale = o.q_descale.raw;
  p.k_descale = o.k_descale.raw;
  p.v_descale = o.v_descale.raw;
  return p;
}

// Host workspace, 64-byte aligned. For CUDA tensors pass device memory to the pointer overloads.
class HostWorkspace {
 public:
  explicit HostWorkspace(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) buf_.reset(new std::byte[bytes_ + kAlign]);
  }
  void* data() const {
    if (!buf_) return nullptr;
    const auto p = reinterpret_cast<uintptr_t>(buf_.get());
    return reinterpret_cast<void*>((p + kAlign - 1) / kAlign * kAlign);
  }
  size_t size() const { return bytes_; }

 private:
  static constexpr size_t kAlign = 64;
  size_t bytes_;
  std::unique_ptr<std::byte[]> buf_;
};

inline size_t forward_workspace_size(const fa_params& p) {
  size_t bytes = 0;
  check(fa_forward_workspace_size(&p, &bytes));
  return bytes;
}
inline size_t backward_workspace_size(const fa_params& p) {
  size_t bytes = 0;
  check(fa_backward_workspace_size(&p, &bytes));
  return bytes;
}

inline void forward(const fa_params& p, void* workspace, size_t bytes, void* stream = nullptr) {
  check(fa_forward(&p, workspace, bytes, stream));
}
inline void backward(const fa_params& p, void* workspace, size_t bytes, void* stream = nullptr) {
  check(fa_backward(&p, workspace, bytes, stream));
}

namespace detail {
inline void require_host(const fa_params& p, const char* what) {
  if (p.q.device.type != FA_DEVICE_CPU)
    throw Error(FA_ERROR_WORKSPACE, std::string(what) +
                                        ": CUDA tensors need a device workspace; use the "
                                        "overload that takes (workspace, bytes)");
}
}  // namespace detail

// out, lse <- attention(q, k, v); an empty lse: none wanted (CPU). Allocates a host workspace (CPU
// tensors only).
inline void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, const Options& o = {}) {
  const fa_params p = make_params(q, k, v, out, lse, o);
  const size_t bytes = forward_workspace_size(p);  // validates first: errors name the argument
  detail::require_host(p, "fa::forward");
  HostWorkspace ws(bytes);
  forward(p, ws.data(), ws.size());
}

// dq, dk, dv <- gradients given dout and the forward's out and lse. Host workspace, CPU only.
inline void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                     const Tensor& dv, const Options& o = {}) {
  fa_params p = make_params(q, k, v, out, lse, o);
  p.dout = dout.raw;
  p.dq = dq.raw;
  p.dk = dk.raw;
  p.dv = dv.raw;
  const size_t bytes = backward_workspace_size(p);
  detail::require_host(p, "fa::backward");
  HostWorkspace ws(bytes);
  backward(p, ws.data(), ws.size());
}

}  // namespace fa
