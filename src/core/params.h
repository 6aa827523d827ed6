// The one internal description of an attention call, filled by validate() from the public
// fa_params after every check has passed. Backends read only this.
#pragma once

#include <climits>
#include <cstdint>

#include "core/host_device.h"
#include "flashattn/flashattn.h"

namespace fa {

// Element types a backend may see. F64 never crosses the public ABI: the test oracle uses it to
// write its results without rounding. E4M3 (fa_params 0.5, core/fp8.h) is an input dtype only
// (q, k, v), with fp16 / bf16 outputs.
enum class DType : int { F32, F16, BF16, F64, E4M3 };

inline int64_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::E4M3: return 1;
  }
  return 0;
}

// A (sequence, head, dim) view of one tensor; the last dimension is contiguous. For packed
// variable-length batches stride_b is 0 and rows are offset by the sequence's cu_seqlens start.
struct View {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t stride_b = 0, stride_s = 0, stride_h = 0;  // elements

  template <typename T>
  FA_HOST_DEVICE T* at(int64_t b, int64_t row, int64_t h) const {
    return static_cast<T*>(data) + b * stride_b + row * stride_s + h * stride_h;
  }
};

// fp32 log-sum-exp, (batch, heads, seqlen) or, packed, (heads, total) with stride_b = 0. In the
// forward data may be nullptr: the caller wants no LSE (the CPU backends then write none).
struct LseView {
  float* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_s = 0;
  FA_HOST_DEVICE float& at(int64_t b, int64_t h, int64_t row) const {
    return data[b * stride_b + h * stride_h + row * stride_s];
  }
};

// Where sequence b of the batch lives, and how long it is.
struct SeqInfo {
  int64_t q_start, k_start;  // first packed row (0 for fixed-length batches)
  int64_t len_q, len_k;
};

// Sequence b as the CPU backends read it (Params::sequence): seq(b), its keys counted by
// cache_seqlens, and where its queries sit: query row i is at key position i + diag.
struct Sequence {
  int64_t q_start, k_start;  // first packed row (0 for fixed-length batches)
  int64_t len_q, len_k;
  int64_t diag;  // len_k - len_q + q_shift (bottom-right aligned when q_shift = 0)
};

// x limited to [lo, hi] (lo <= hi).
FA_HOST_DEVICE int32_t clamp_to(int32_t x, int32_t lo, int32_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}
// x, or INT32_MAX where it is larger.
FA_HOST_DEVICE int32_t saturate_int32(int64_t x) {
  return x < int64_t(INT32_MAX) ? int32_t(x) : INT32_MAX;
}

struct Params {
  fa_backend backend = FA_BACKEND_AUTO;
  fa_device device{FA_DEVICE_CPU, 0};
  // Of the inputs q, k, v, and of dq, dk, dv. out and dout carry their own (View::dtype): fp32
  // with 16-bit inputs on the CPU (validate.cpp's dtype table says which combinations exist).
  DType dtype = DType::F32;

  int64_t batch = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  // Per sequence; for packed batches the longest: on the CPU the real one (read from
  // cu_seqlens), on the GPU the caller's max_seqlen bound tightened to total_q / total_k.
  int64_t seqlen_q = 0, seqlen_k = 0;
  const int32_t* cu_seqlens_q = nullptr;  // packed batches only
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0, total_k = 0;       // rows of q and k (batch * seqlen when not packed)

  View q, k, v, out;
  LseView lse;
  View dout, dq, dk, dv;  // backward only

  float softmax_scale = 0.f;  // resolved: never 0 here unless the caller asked for it
  float softcap = 0.f;
  int64_t window_left = -1, window_right = -1;  // causal is folded in as window_right = 0
  bool causal = false;
  const float* alibi_slopes = nullptr;
  int64_t alibi_stride_b = 0, alibi_stride_h = 0;  // stride_b = 0 for a (heads) vector

  float dropout_p = 0.f;
  uint64_t seed = 0, offset = 0;
  bool deterministic = false;

  FA_HOST_DEVICE bool varlen() const { return cu_seqlens_q != nullptr; }
  FA_HOST_DEVICE int64_t group() const { return heads_q / heads_kv; }  // query heads per kv head

  // On the GPU, cu_seqlens and alibi_slopes are device pointers: call these in device code.
  // The host validates cu_seqlens where it can read them (CPU tensors, or check_inputs); on the
  // GPU, whatever the arrays hold, each sequence is clamped here into the packed tensors
  // ([start, end] within [0, total]) and to the max_seqlen bound the launch and the workspace
  // were sized by: a hostile array gives wrong numbers at worst, never an access outside the
  // tensors or the workspace. A no-op for arrays that pass validation.
  // In int32, as cu_seqlens are: no valid array reaches a row past INT32_MAX.
  FA_HOST_DEVICE SeqInfo seq(int64_t b) const {
    if (!varlen()) return {0, 0, seqlen_q, seqlen_k};
    const int32_t tq = saturate_int32(total_q), tk = saturate_int32(total_k);
    const int32_t q0 = clamp_to(cu_seqlens_q[b], 0, tq), k0 = clamp_to(cu_seqlens_k[b], 0, tk);
    const int32_t q1 = clamp_to(cu_seqlens_q[b + 1], q0, tq);
    const int32_t k1 = clamp_to(cu_seqlens_k[b + 1], k0, tk);
    const int32_t mq = saturate_int32(seqlen_q), mk = saturate_int32(seqlen_k);
    return {q0, k0, q1 - q0 < mq ? q1 - q0 : mq, k1 - k0 < mk ? k1 - k0 : mk};
  }
  // seq() without its clamps, for cu_seqlens the library produced itself: the CUDA backward's
  // sanitized copies (cuda/kernels/varlen/sanitize.h), on which the clamps are no-ops. Never on a
  // caller's arrays. (The clamps cost the sm80 backward's main kernel registers: its spills at
  // d 128 went from 36 to 112 bytes, at d 64 from 48 to 96.)
  FA_HOST_DEVICE SeqInfo seq_unclamped(int64_t b) const {
    if (!varlen()) return {0, 0, seqlen_q, seqlen_k};
    return {cu_seqlens_q[b], cu_seqlens_k[b], int64_t(cu_seqlens_q[b + 1]) - cu_seqlens_q[b],
            int64_t(cu_seqlens_k[b + 1]) - cu_seqlens_k[b]};
  }
  FA_HOST_DEVICE float alibi_slope(int64_t b, int64_t h) const {
    return alibi_slopes ? alibi_slopes[b * alibi_stride_b + h * alibi_stride_h] : 0.f;
  }

  // ---- Since 0.2 (fa_params' fields of the same names). The CPU backends read them; validation
  // refuses them for CUDA tensors, whose kernels read none of them yet. Appended, so that the
  // members above keep their layout.
  // Paged keys: k and v are (num_blocks, page_size, heads_kv, d) views (stride_b steps a block,
  // stride_s a row within it), and key t of batch entry b is in block block_table[b][t /
  // page_size]. nullptr: dense k, v.
  const int32_t* block_table = nullptr;  // (batch, max_blocks), rows block_table_stride apart
  int64_t block_table_stride = 0;
  int64_t max_blocks = 0, page_size = 0, num_blocks = 0;
  // The keys of each batch entry (fixed-length batches), every value within the cache; nullptr:
  // seqlen_k each. With it, seqlen_k above is the longest of them (the CPU reads the array).
  const int32_t* cache_seqlens = nullptr;
  // Query row i of a sequence sits at key position i + len_k - len_q + q_shift. Validation keeps
  // |q_shift| + seqlen_q + seqlen_k + 2^32 within int64, so that the positions, the window
  // bounds around them (int32 windows) and ALiBi's distances never overflow.
  int64_t q_shift = 0;

  // ---- Since 0.3 (fa_params' fields of the same names; forward only, fixed-length batches).
  // Keys a cache row holds (k.shape[1] dense, max_blocks * page_size paged); 0 without a cache.
  int64_t cache_capacity = 0;
  // Dense caches: the row of k, v that batch entry b uses; nullptr: row b.
  const int32_t* cache_batch_idx = nullptr;
  // k.shape[0] of a KV-cache call (the dense cache's rows, or the paged cache's blocks): the
  // bound the CUDA kernels clamp cache_batch_idx into.
  int64_t cache_rows = 0;
  // The first cache row of entry b's keys; nullptr: 0.
  const int32_t* cache_leftpad = nullptr;
  // New keys and values (batch, seqlen_new, heads_kv, d), written into the cache at rows
  // [cache_seqlens[b], cache_seqlens[b] + seqlen_new) before the attention (the CPU: cpu/kv_update.cpp),
  // which then reads them from the cache. seqlen_new = 0: none.
  View k_new, v_new;
  int64_t seqlen_new = 0;
  // Rotary embedding of the new keys and of q (core/rotary.h); dim = 0: none.
  struct Rotary {
    const void* cos = nullptr;  // (seqlen, dim / 2), rows stride_s apart, in dtype
    const void* sin = nullptr;
    DType dtype = DType::F32;
    int64_t cos_stride_s = 0, sin_stride_s = 0;
    int64_t dim = 0, seqlen = 0;
    bool interleaved = false;
    // q's rows at consecutive positions (causal or windowed calls), else all at the first.
    bool q_positions_advance = false;
  } rotary;
  // The caller's num_splits (0: the backend's heuristic, 1: none, n: n parts).
  int64_t num_splits = 0;
  // The part of every sequence's keys this Params describes: part split_index of split_count
  // equal parts (the last ones shorter or empty). Set by a backend on its own copy when it runs
  // a split call part by part (cpu/backend.cpp); validation leaves 1 part.
  int64_t split_index = 0, split_count = 1;

  // Whether the call uses a KV cache's fields or asks for split-KV: on CUDA the cuda-kvcache
  // family's calls alone (the other families refuse them).
  FA_HOST_DEVICE bool uses_kv_cache() const {
    return cache_capacity > 0 || block_table != nullptr || cache_seqlens != nullptr ||
           cache_batch_idx != nullptr || cache_leftpad != nullptr || seqlen_new > 0 ||
           rotary.dim > 0 || num_splits > 1;
  }

  // The cache row of batch entry b's keys.
  FA_HOST_DEVICE int64_t cache_row(int64_t b) const {
    return cache_batch_idx ? int64_t(cache_batch_idx[b]) : b;
  }

  // Host code (the CPU backends): the arrays above are host memory here. The CUDA kernels read
  // them through cuda/kernels/kvcache/kv_seq.cuh, which clamps what validation cannot read.
  // Entry b's keys are the cache rows [leftpad, end): end = cache_seqlens[b] (+ seqlen_new), or
  // the capacity; the queries are aligned to those keys. Split calls see their part of them.
  Sequence sequence(int64_t b) const {
    const SeqInfo s = seq(b);
    int64_t k_start = s.k_start, len_k = s.len_k;
    // A packed batch over a paged cache: a sequence's keys start at row 0 of its own pages.
    if (block_table != nullptr && varlen()) k_start = 0;
    if (cache_seqlens) len_k = int64_t(cache_seqlens[b]) + seqlen_new;
    else if (cache_capacity > 0 && !varlen()) len_k = cache_capacity;  // packed: cu_seqlens_k's
    if (cache_leftpad) {
      k_start = cache_leftpad[b];
      len_k -= k_start;
    }
    int64_t diag = len_k - s.len_q + q_shift;
    if (split_count > 1) {
      const int64_t part = (len_k + split_count - 1) / split_count;
      const int64_t k0 = split_index * part < len_k ? split_index * part : len_k;
      const int64_t k1 = k0 + part < len_k ? k0 + part : len_k;
      k_start += k0;
      diag -= k0;  // query i still sits at key position i + diag of the whole sequence
      len_k = k1 - k0;
    }
    return {s.q_start, k_start, s.len_q, len_k, diag};
  }
  // Row of key t (a key position, a cache row: t counts from the row's start, not from the
  // leftpad; packed batches: the packed row) of head h of k or v, through the block table when
  // the cache is paged and through cache_batch_idx when it is dense.
  template <typename T>
  T* key_row(const View& kv, int64_t b, int64_t t, int64_t h) const {
    if (block_table == nullptr) return kv.at<T>(cache_row(b), t, h);
    return kv.at<T>(block_table[b * block_table_stride + t / page_size], t % page_size, h);
  }

  // ---- Since 0.4 (fa_params::attn_bias, dbias; the CPU backends read them, validation refuses
  // them for CUDA tensors). Not with a KV cache, so a sequence's keys are its k rows from
  // seq(b).k_start on: key j of Sequence sq is column j + sq.k_start - seq(b).k_start of the bias
  // (a split part's keys start inside the sequence).
  struct Bias {
    enum class Kind : int { None, F32, F16, BF16, Mask };  // Mask: 1 byte, 0 = not seen
    Kind kind = Kind::None;
    // Element (b, h, i, j) of query row i and key j (both from the sequence's start) at
    // data + b stride_b + h stride_h + i stride_q + j stride_k (elements; 0 on broadcast
    // dimensions).
    const void* data = nullptr;
    int64_t stride_b = 0, stride_h = 0, stride_q = 0, stride_k = 0;
    // Backward: d loss / d bias into grad, (shape[0..3]) each 1 (summed over) or the full size,
    // grad_stride in elements; nullptr: not wanted.
    void* grad = nullptr;
    DType grad_dtype = DType::F32;
    int64_t grad_shape[4] = {0, 0, 0, 0};
    int64_t grad_stride[4] = {0, 0, 0, 0};

    FA_HOST_DEVICE int64_t offset(int64_t b, int64_t h, int64_t i, int64_t j) const {
      return b * stride_b + h * stride_h + i * stride_q + j * stride_k;
    }
  } bias;

  // ---- Since 0.5 (fa_params::q_descale, k_descale, v_descale; fp8 inputs only). Each
  // multiplies its tensor's dequantized values: q of query head h of batch entry b is
  // q_descale(b, h / group()) * e4m3 value (FlashAttention-3's (batch, heads_kv) shape, so that
  // the query heads of one kv head share a factor); k and v of kv head hk likewise. data nullptr:
  // 1.
  struct Descale {
    const float* data = nullptr;
    int64_t stride_b = 0, stride_h = 0;  // elements; 0 on a broadcast dimension
    FA_HOST_DEVICE float at(int64_t b, int64_t hk) const {
      return data ? data[b * stride_b + hk * stride_h] : 1.f;
    }
  } q_descale, k_descale, v_descale;
};

}  // namespace fa
