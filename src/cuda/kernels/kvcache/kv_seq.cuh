// The KV cache as the CUDA kernels read it: a batch entry's keys (cache_seqlens, cache_leftpad,
// the appended rows), and the cache row that holds key t (block_table, cache_batch_idx). The
// device-side twin of Params::sequence / Params::key_row (core/params.h), with one difference:
// the index arrays are device memory that validation reads only under check_inputs, so every
// value is clamped into the cache here. A hostile array gives wrong numbers at worst (and with
// k_new, writes into the wrong row of this call's own cache), never an access outside k, v, the
// block table or the rotary tables. A no-op for arrays that pass validation.
//
// The CUDA forward refuses seqlen_k (here the cache's capacity) above 2^30 (check_forward), so
// positions and lengths are int32.
#pragma once

#include <cstdint>

#include "core/params.h"

namespace fa::cuda::kvcache {

struct KvSeq {
  int64_t q_start;  // first packed query row (0 for fixed-length batches)
  int32_t len_q;
  int32_t k_start;  // cache row of key 0 (the left padding; a packed row for packed batches)
  int32_t len_k;    // keys attended to, the appended ones included
  int32_t cached;   // cache rows in use before the append (cache_seqlens[b], clamped)
  int32_t diag;     // query i sits at key position i + diag
};

__device__ __forceinline__ KvSeq kv_sequence(const Params& p, int64_t b) {
  const SeqInfo s = p.seq(b);
  // A packed batch over a paged cache: a sequence's keys start at row 0 of its own pages.
  const bool own_pages = p.block_table != nullptr && p.varlen();
  int32_t k_start = own_pages ? 0 : int32_t(s.k_start), len_k = int32_t(s.len_k), cached = 0;
  const int32_t capacity = int32_t(p.cache_capacity), fresh = int32_t(p.seqlen_new);
  if (p.cache_seqlens != nullptr) {
    cached = clamp_to(p.cache_seqlens[b], 0, capacity - fresh);
    len_k = cached + fresh;
  } else if (capacity > 0 && !own_pages) {  // packed batches: cu_seqlens_k's counts
    len_k = capacity;
  }
  if (p.cache_leftpad != nullptr) {
    k_start = clamp_to(p.cache_leftpad[b], 0, len_k - fresh);
    len_k -= k_start;
  }
  const int32_t len_q = int32_t(s.len_q);
  return {s.q_start, len_q, k_start, len_k, cached, int32_t(len_k - len_q + p.q_shift)};
}

// Element offset of cache row t (counted from the row's start, the left padding included) of kv
// head hk in a view of k or v (or of k_new's destination when t is an appended row).
__device__ __forceinline__ int64_t cache_row_offset(const Params& p, const View& kv, int64_t b,
                                                    int32_t t, int64_t hk) {
  int64_t row, pos;
  if (p.block_table != nullptr) {
    const int32_t ps = int32_t(p.page_size);
    const int32_t n = clamp_to(t / ps, 0, int32_t(p.max_blocks) - 1);
    row = clamp_to(p.block_table[b * p.block_table_stride + n], 0, int32_t(p.num_blocks) - 1);
    pos = t - int64_t(t / ps) * ps;
  } else {
    row = p.cache_batch_idx != nullptr
              ? clamp_to(p.cache_batch_idx[b], 0, saturate_int32(p.cache_rows) - 1)
              : b;
    pos = t;
  }
  return row * kv.stride_b + pos * kv.stride_s + hk * kv.stride_h;
}

}  // namespace fa::cuda::kvcache
