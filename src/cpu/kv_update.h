// The KV-cache update of flash_attn_with_kvcache on the CPU, shared by both implementations (so
// that the reference and the flash backend attend over the same bytes): the new keys and values
// written into the cache, and the rotary embedding (core/rotary.h) of the new keys and of q.
#pragma once

#include <cstdint>

#include "core/checked.h"
#include "core/params.h"

namespace fa::cpu {

// k_new / v_new into the cache at rows [cache_seqlens[b], cache_seqlens[b] + seqlen_new) of
// batch entry b (dense through cache_batch_idx, or paged): v bit for bit, k bit for bit or
// rotated at those positions (fp32, rounded to the cache's dtype). Entries write disjoint rows.
void append_kv(const Params& p, int threads);

// Elements of the rotated q (batch, seqlen_q, heads_q, head_dim), in q's dtype; 0 without rotary.
Checked rotated_q_elems(const Params& p);

// q rotated at its positions into dst (rotated_q_elems of q's dtype, dense); returns its view.
View rotate_queries(const Params& p, void* dst, int threads);

}  // namespace fa::cpu
