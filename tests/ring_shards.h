// Ring attention's test problems (tests/test_ring_attention.cpp on the CPU, test_gpu_ring.cpp on
// a GPU): a case is a whole problem, a rank count and a layout; a Shard is one rank's rows of the
// problem's inputs (fa::ring_shard says which) with poisoned outputs, and gather puts its results
// back into the problem's tensors for the reference comparison.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "flashattn/ring.hpp"
#include "support.h"

namespace fa::test {

struct RingCase {
  Case c;  // the whole problem (seqlen_q = seqlen_k)
  int32_t ranks = 2;
  fa_ring_layout layout = FA_RING_ZIGZAG;
};

inline void PrintTo(const RingCase& rc, std::ostream* os) {
  *os << rc.c.name() << " R" << rc.ranks << (rc.layout == FA_RING_ZIGZAG ? " zigzag" : " contig");
}

struct RingCaseName {
  template <class ParamInfo>
  std::string operator()(const ParamInfo& info) const {
    const RingCase& rc = info.param;
    return std::to_string(info.index) + "_R" + std::to_string(rc.ranks) +
           (rc.layout == FA_RING_ZIGZAG ? "_zigzag_" : "_contig_") + rc.c.name();
  }
};

// A case for every (dtype, R = 2 / 3 / 4, layout, causal or not), in that order: rank count,
// layout, dtype and mask set here, the rest by shape(c, n) for the n-th case (from 1).
template <typename Shape>
std::vector<RingCase> ring_grid(std::initializer_list<fa_dtype> dtypes, Shape&& shape) {
  std::vector<RingCase> cases;
  uint64_t n = 0;
  for (fa_dtype dt : dtypes)
    for (int32_t ranks : {2, 3, 4})
      for (fa_ring_layout layout : {FA_RING_ZIGZAG, FA_RING_CONTIGUOUS})
        for (bool causal : {true, false}) {
          RingCase rc;
          rc.ranks = ranks;
          rc.layout = layout;
          rc.c.dtype = dt;
          rc.c.causal = causal;
          shape(rc.c, ++n);
          cases.push_back(rc);
        }
  return cases;
}

// Element (b, row, h, col) of a (batch, rows, heads, dim) tensor, and (b, h, row) of an lse.
inline int64_t flat4(const HostTensor& t, int64_t b, int64_t row, int64_t h, int64_t col) {
  const auto& s = t.shape();
  return ((b * s[1] + row) * s[2] + h) * s[3] + col;
}
inline int64_t flat_lse(const HostTensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.shape();
  return (b * s[1] + h) * s[2] + row;
}

// The rows of one rank's shard (fa::ring_shard) as (global start, local start, length).
struct Span {
  int64_t global, local, len;
};
inline std::vector<Span> spans(const std::array<int64_t, 4>& rows) {
  std::vector<Span> s{{rows[0], 0, rows[1]}};
  if (rows[3] > 0) s.push_back({rows[2], rows[1], rows[3]});
  return s;
}

// to <- from over the shard's rows: into_shard copies the global rows p.global... of from into
// the shard's rows p.local... of to, else the reverse.
inline void move_rows(const HostTensor& from, HostTensor& to, const std::vector<Span>& sp,
               bool into_shard) {
  const auto& s = from.shape();
  for (const Span& p : sp)
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t i = 0; i < p.len; ++i) {
        const int64_t src = into_shard ? p.global + i : p.local + i;
        const int64_t dst = into_shard ? p.local + i : p.global + i;
        for (int64_t h = 0; h < s[2]; ++h)
          for (int64_t c = 0; c < s[3]; ++c)
            to.set(flat4(to, b, dst, h, c), from.get(flat4(from, b, src, h, c)));
      }
}
inline void move_lse_rows(HostTensor& global, const HostTensor& local, const std::vector<Span>& sp) {
  const auto& s = global.shape();
  for (const Span& p : sp)
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t h = 0; h < s[1]; ++h)
        for (int64_t i = 0; i < p.len; ++i)
          global.set(flat_lse(global, b, h, p.global + i), local.get(flat_lse(local, b, h, p.local + i)));
}

// One rank's tensors: its rows of the problem's inputs, poisoned outputs.
struct Shard {
  std::vector<Span> sp;
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;

  Shard(const Problem& pr, const RingCase& rc, int32_t rank) {
    const Case& c = rc.c;
    fa::RingOptions ro{c.seqlen_q, rc.layout};
    sp = spans(fa::ring_shard(ro, rc.ranks, rank));
    int64_t rows = 0;
    for (const Span& p : sp) rows += p.len;
    auto like = [&](const HostTensor& g, int64_t heads) {
      return HostTensor(g.dtype(), {c.batch, rows, heads, c.head_dim});
    };
    q = like(pr.q, c.heads_q);
    k = like(pr.k, c.heads_kv);
    v = like(pr.v, c.heads_kv);
    dout = like(pr.dout, c.heads_q);
    out = like(pr.out, c.heads_q);
    dq = like(pr.dq, c.heads_q);
    dk = like(pr.dk, c.heads_kv);
    dv = like(pr.dv, c.heads_kv);
    lse = HostTensor(FA_DTYPE_FP32, {c.batch, c.heads_q, rows});
    move_rows(pr.q, q, sp, true);
    move_rows(pr.k, k, sp, true);
    move_rows(pr.v, v, sp, true);
    move_rows(pr.dout, dout, sp, true);
    for (HostTensor* t : {&out, &lse, &dq, &dk, &dv}) t->poison();
  }

  // This shard's rows of out, lse, dq, dk, dv into the whole problem's tensors.
  void gather(Problem& pr) const {
    move_rows(out, pr.out, sp, false);
    move_rows(dq, pr.dq, sp, false);
    move_rows(dk, pr.dk, sp, false);
    move_rows(dv, pr.dv, sp, false);
    move_lse_rows(pr.lse, lse, sp);
  }

  fa::Options options(const Case& c) const {
    fa::Options o;
    o.causal = c.causal;
    o.softcap = c.softcap;
    o.softmax_scale = c.softmax_scale;
    return o;
  }
};

}  // namespace fa::test
