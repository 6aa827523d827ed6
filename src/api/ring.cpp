// The ring attention entry points (flashattn/ring.h): the ring's arguments, then the shard's
// fa_params by the ordinary validation, then what a ring call cannot take; everything before
// any memory is touched. The schedule itself is src/parallel/ring.cpp.
#include "flashattn/ring.h"

#include <cstdint>
#include <sstream>
#include <utility>

#include "api/dispatch.h"
#include "api/guard.h"
#include "api/params_abi.h"
#include "api/validate.h"
#include "core/error.h"
#include "parallel/ring.h"
#include "parallel/ring_plan.h"

namespace fa {
namespace {

const char* layout_name(int32_t layout) {
  return layout == FA_RING_ZIGZAG ? "zig-zag" : "contiguous";
}

// The ring's own fields, without the communicator's rank and functions (fa_ring_shard's).
void check_ring_shape(const fa_ring* ring) {
  if (ring == nullptr) fail(FA_ERROR_NULL_POINTER, "ring is NULL");
  if (ring->struct_size != sizeof(fa_ring))
    fail(FA_ERROR_VERSION, "ring.struct_size=", ring->struct_size, " is not ", sizeof(fa_ring),
         " (call fa_ring_init)");
  if (ring->layout != FA_RING_CONTIGUOUS && ring->layout != FA_RING_ZIGZAG)
    fail(FA_ERROR_UNSUPPORTED, "ring.layout=", ring->layout,
         " must be FA_RING_CONTIGUOUS (0) or FA_RING_ZIGZAG (1)");
  if (ring->comm.size < 1) fail(FA_ERROR_SIZE, "ring.comm.size=", ring->comm.size, " must be >= 1");
  const int64_t chunks = ring::chunk_count(ring->comm.size, fa_ring_layout(ring->layout));
  if (ring->seqlen < chunks)
    fail(FA_ERROR_SIZE, "ring.seqlen=", ring->seqlen, " must be >= ", chunks, " (the ",
         layout_name(ring->layout), " layout's chunks over ring.comm.size=", ring->comm.size,
         " ranks: every chunk holds a row)");
}

void check_rank(int32_t rank, const char* name, int32_t size) {
  if (rank < 0 || rank >= size)
    fail(FA_ERROR_SIZE, name, "=", rank, " must be in [0, ", size, ") (ring.comm.size)");
}

void check_ring(const fa_ring* ring) {
  check_ring_shape(ring);
  check_rank(ring->comm.rank, "ring.comm.rank", ring->comm.size);
  if (ring->comm.size > 1 && ring->comm.start == nullptr)
    fail(FA_ERROR_NULL_POINTER, "ring.comm.start is NULL (ring.comm.size=", ring->comm.size, ")");
  if (ring->comm.size > 1 && ring->comm.wait == nullptr)
    fail(FA_ERROR_NULL_POINTER, "ring.comm.wait is NULL (ring.comm.size=", ring->comm.size, ")");
}

// The first field of the shard's call that a ring call does not take; nullptr if none.
const char* unsupported_feature(const fa_params& p) {
  if (p.cu_seqlens_q.data != nullptr || p.cu_seqlens_k.data != nullptr)
    return "cu_seqlens_q / cu_seqlens_k (a packed batch)";
  if (p.window_left != -1 || p.window_right != -1) return "window_left / window_right";
  if (p.alibi_slopes.data != nullptr) return "alibi_slopes";
  if (p.dropout_p != 0.f) return "dropout_p != 0";
  if (p.attn_bias.data != nullptr) return "attn_bias";
  if (p.dbias.data != nullptr) return "dbias";
  if (p.q_shift != 0) return "q_shift != 0 (the ring places each block itself)";
  if (p.num_splits > 1) return "num_splits > 1";
  if (p.q.dtype == FA_DTYPE_FP8_E4M3) return "q.dtype=fp8_e4m3";
  const std::pair<const fa_tensor*, const char*> cache[] = {
      {&p.block_table, "block_table"}, {&p.cache_seqlens, "cache_seqlens"},
      {&p.cache_batch_idx, "cache_batch_idx"}, {&p.cache_leftpad, "cache_leftpad"},
      {&p.k_new, "k_new"}, {&p.v_new, "v_new"}, {&p.rotary_cos, "rotary_cos"},
      {&p.rotary_sin, "rotary_sin"}};
  for (const auto& [t, name] : cache)
    if (t->data != nullptr) return name;
  return nullptr;
}

// q's and k's rows must be this rank's shard.
void check_shard_rows(const fa_params& p, const fa_ring& ring) {
  const ring::Shard s = ring::shard_of(ring.seqlen, ring.comm.size,
                                       fa_ring_layout(ring.layout), ring.comm.rank);
  for (const auto& [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}}) {
    if (t->shape[1] == s.rows) continue;
    std::ostringstream rows;
    for (int i = 0; i < s.count; ++i)
      rows << (i ? " and " : "") << "[" << s.chunk[i].start << ", "
           << s.chunk[i].start + s.chunk[i].len << ")";
    fail(FA_ERROR_SHAPE, name, ".shape[1]=", t->shape[1], " must be ", s.rows, ": the rows ",
         rows.str(), " that rank ring.comm.rank=", ring.comm.rank, " holds of ring.seqlen=",
         ring.seqlen, " in the ", layout_name(ring.layout), " layout over ring.comm.size=",
         ring.comm.size, " ranks");
  }
}

// Runs body(call) on a validated ring call.
template <typename Body>
void with_call(const fa_params* params, const fa_ring* ring, Pass pass, Body&& body) {
  check_ring(ring);
  const Params p = pass == Pass::Forward ? validate_forward(params) : validate_backward(params);
  const fa_params current = current_layout(*params);  // validated: a known struct_size
  if (const char* what = unsupported_feature(current))
    fail(FA_ERROR_UNSUPPORTED, what, " is not supported by ring attention");
  check_shard_rows(current, *ring);
  body(ring::Call{current, p, *ring});
}

fa_status ring_workspace_query(const fa_params* params, const fa_ring* ring, size_t* bytes,
                               Pass pass) {
  return api::guarded([&] {
    if (bytes == nullptr) fail(FA_ERROR_NULL_POINTER, "bytes is NULL");
    with_call(params, ring, pass, [&](const ring::Call& c) {
      *bytes = pass == Pass::Forward ? ring::forward_workspace(c) : ring::backward_workspace(c);
    });
  });
}

fa_status ring_run(const fa_params* params, const fa_ring* ring, void* workspace, size_t bytes,
                   void* stream, Pass pass) {
  return api::guarded([&] {
    with_call(params, ring, pass, [&](const ring::Call& c) {
      const bool fwd = pass == Pass::Forward;
      const size_t need = fwd ? ring::forward_workspace(c) : ring::backward_workspace(c);
      const char* query =
          fwd ? "fa_ring_forward_workspace_size" : "fa_ring_backward_workspace_size";
      if (workspace == nullptr)
        fail(FA_ERROR_WORKSPACE, "workspace is NULL; this call needs ", need, " bytes (ask ",
             query, ")");
      if (bytes < need)
        fail(FA_ERROR_WORKSPACE, "workspace_bytes=", bytes, " is too small; need >= ", need,
             " (ask ", query, ")");
      if (fwd)
        ring::forward(c, workspace, bytes, stream);
      else
        ring::backward(c, workspace, bytes, stream);
    });
  });
}

}  // namespace
}  // namespace fa

extern "C" {

void fa_ring_init(fa_ring* ring) {
  if (ring == nullptr) return;
  *ring = fa_ring{};
  ring->struct_size = sizeof(fa_ring);
  ring->layout = FA_RING_ZIGZAG;
}

fa_status fa_ring_shard(const fa_ring* ring, int32_t rank, int64_t rows[4]) {
  return fa::api::guarded([&] {
    fa::check_ring_shape(ring);
    fa::check_rank(rank, "rank", ring->comm.size);
    if (rows == nullptr) fa::fail(FA_ERROR_NULL_POINTER, "rows is NULL");
    const fa::ring::Shard s =
        fa::ring::shard_of(ring->seqlen, ring->comm.size, fa_ring_layout(ring->layout), rank);
    for (int i = 0; i < 2; ++i) {
      rows[2 * i] = i < s.count ? s.chunk[i].start : 0;
      rows[2 * i + 1] = i < s.count ? s.chunk[i].len : 0;
    }
  });
}

fa_status fa_ring_forward_workspace_size(const fa_params* params, const fa_ring* ring,
                                         size_t* bytes) {
  return fa::ring_workspace_query(params, ring, bytes, fa::Pass::Forward);
}
fa_status fa_ring_backward_workspace_size(const fa_params* params, const fa_ring* ring,
                                          size_t* bytes) {
  return fa::ring_workspace_query(params, ring, bytes, fa::Pass::Backward);
}
fa_status fa_ring_forward(const fa_params* params, const fa_ring* ring, void* workspace,
                          size_t workspace_bytes, void* stream) {
  return fa::ring_run(params, ring, workspace, workspace_bytes, stream, fa::Pass::Forward);
}
fa_status fa_ring_backward(const fa_params* params, const fa_ring* ring, void* workspace,
                           size_t workspace_bytes, void* stream) {
  return fa::ring_run(params, ring, workspace, workspace_bytes, stream, fa::Pass::Backward);
}

}  // extern "C"
