// The ring's schedule, independent of any memory: which global rows each rank holds (its
// shard), which rank's K/V block a rank has in hand at each step, and which (query chunk, key
// chunk) pairs of a step see each other under the mask. Pure arithmetic, tested on the host
// (tests/test_ring_attention.cpp).
//
// The sequence of L rows is cut into n chunks, chunk c = rows [c L / n, (c + 1) L / n): lengths
// floor / ceil(L / n). Contiguous: n = R, rank r holds chunk r. Zig-zag: n = 2R, rank r holds
// chunks r and 2R - 1 - r (in that order), so that under a causal mask each rank attends to as
// many key rows as any other at every step (a low chunk with a high one).
//
// Every block of a step is a pair of whole chunks, so a causal mask is one of three cases:
// the key chunk before the query chunk (every key visible: no mask), the same chunk (the causal
// diagonal: equal lengths, aligned, so causal with q_shift 0), or after (nothing visible: the
// pair is skipped). No call needs a shifted causal mask.
#pragma once

#include <cstdint>

#include "flashattn/ring.h"

namespace fa::ring {

struct Chunk {
  int64_t index = 0;  // global chunk number
  int64_t start = 0;  // first global row
  int64_t len = 0;
  int64_t local = 0;  // first row within its rank's shard
};

// A rank's rows: one chunk (contiguous) or two (zig-zag), in shard order.
struct Shard {
  int count = 0;
  Chunk chunk[2];
  int64_t rows = 0;  // the shard's length
};

inline int64_t chunk_count(int32_t size, fa_ring_layout layout) {
  return layout == FA_RING_ZIGZAG ? 2 * int64_t(size) : int64_t(size);
}

// First row of chunk c of n over L rows: c L / n without forming c L (L may be near INT64_MAX).
inline int64_t chunk_start(int64_t L, int64_t n, int64_t c) {
  return c * (L / n) + c * (L % n) / n;
}

inline Shard shard_of(int64_t L, int32_t size, fa_ring_layout layout, int32_t rank) {
  const int64_t n = chunk_count(size, layout);
  Shard s;
  const int64_t ids[2] = {rank, n - 1 - rank};
  s.count = layout == FA_RING_ZIGZAG ? 2 : 1;
  for (int i = 0; i < s.count; ++i) {
    Chunk& c = s.chunk[i];
    c.index = ids[i];
    c.start = chunk_start(L, n, c.index);
    c.len = chunk_start(L, n, c.index + 1) - c.start;
    c.local = s.rows;
    s.rows += c.len;
  }
  return s;
}

// The layout the engine cuts its block calls by. One rank holds the whole sequence in order in
// either layout (zig-zag's chunks 0 and 1 are adjacent), and the engine takes it as the one chunk
// of the contiguous layout: a one-rank ring is then one call over the whole sequence, the
// single-device call itself (the same kernel on the same rows, bit for bit), not three calls
// whose 16-bit outputs a merge would round twice. fa_ring_shard still reports zig-zag's chunks.
inline fa_ring_layout call_layout(int32_t size, fa_ring_layout layout) {
  return size == 1 ? FA_RING_CONTIGUOUS : layout;
}

// The longest shard of any rank (the size of the K/V blocks in flight).
inline int64_t max_shard_rows(int64_t L, int32_t size, fa_ring_layout layout) {
  int64_t rows = 0;
  for (int32_t r = 0; r < size; ++r) {
    const int64_t n = shard_of(L, size, layout, r).rows;
    rows = n > rows ? n : rows;
  }
  return rows;
}

// The longest chunk (floor or ceil of L / n).
inline int64_t max_chunk_rows(int64_t L, int32_t size, fa_ring_layout layout) {
  const int64_t n = chunk_count(size, layout);
  return (L + n - 1) / n;
}

// The rank whose K/V block rank holds at step s (0 <= s < size): its own at step 0, then the
// previous rank's, and so on around the ring.
inline int32_t origin(int32_t rank, int32_t size, int32_t step) {
  return int32_t((int64_t(rank) - step % size + size) % size);
}
inline int32_t next_rank(int32_t rank, int32_t size) { return (rank + 1) % size; }
inline int32_t prev_rank(int32_t rank, int32_t size) { return (rank + size - 1) % size; }

enum class Visibility { None, Full, Diagonal };

// How query chunk q sees key chunk k: everything (Full), the causal diagonal, or nothing.
inline Visibility visibility(bool causal, int64_t q, int64_t k) {
  if (!causal || k < q) return Visibility::Full;
  return k == q ? Visibility::Diagonal : Visibility::None;
}

}  // namespace fa::ring
