// Caller-given positions (fa_params::q_shift) on the CPU backends: a chunk of a longer query
// sequence, shifted to where it stands, gives the rows of the full sequence's result - bit for
// bit on the reference, by the accuracy rule on flash - in the forward and in the backward (dq
// rows; dk and dv are the sums of the chunks' parts), with causal masks, windows and ALiBi. Packed
// batches shift every sequence alike. Shifts at the edge of the accepted range run without
// overflow (the sanitizer builds check that no arithmetic wraps).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support.h"

namespace fa::test {
namespace {

enum class Feature { Causal, Window, AlibiCausal, Softcap };

// The full problem: queries of one sequence against all of its keys.
Case full_case(Feature f, fa_dtype dt, uint64_t seed) {
  Case c;
  c.dtype = dt;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 150;
  c.seqlen_k = 190;
  c.head_dim = 32;
  c.seed = seed;
  switch (f) {
    case Feature::Causal: c.causal = true; break;
    case Feature::Window: c.window_left = 40; c.window_right = 7; break;
    case Feature::AlibiCausal: c.alibi = true; c.causal = true; break;
    case Feature::Softcap: c.softcap = 4.f; c.window_left = 100; break;
  }
  return c;
}

// Query rows [r0, r1) of `full` as a problem of their own, at their place: q_shift = r1 - L.
Problem chunk_of(const Problem& full, int64_t r0, int64_t r1) {
  Case c = full.c;
  c.seqlen_q = r1 - r0;
  c.q_shift = r1 - full.c.seqlen_q;
  Problem pr(c);
  const int64_t row = c.heads_q * c.head_dim;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < (r1 - r0) * row; ++i) {
      pr.q.set(b * c.seqlen_q * row + i, full.q.get((b * full.c.seqlen_q + r0) * row + i));
      pr.dout.set(b * c.seqlen_q * row + i, full.dout.get((b * full.c.seqlen_q + r0) * row + i));
    }
  pr.k = full.k;  // shared storage: the same keys, values and slopes
  pr.v = full.v;
  pr.alibi = full.alibi;
  return pr;
}

// Rows of the chunks, in the full problem's layout: out / dq (batch, seqlen_q, heads_q, d), lse
// (batch, heads_q, seqlen_q); dk and dv summed over the chunks.
Dense assemble(const Problem& full, const std::vector<int64_t>& cuts,
               const std::vector<Dense>& parts) {
  const Case& c = full.c;
  const int64_t row = c.heads_q * c.head_dim, L = c.seqlen_q;
  Dense r;
  r.out.assign(size_t(c.batch * L * row), 0.0);
  r.dq = r.out;
  r.lse.assign(size_t(c.batch * c.heads_q * L), 0.0);
  r.dk.assign(parts[0].dk.size(), 0.0);
  r.dv = r.dk;
  for (size_t p = 0; p < parts.size(); ++p) {
    const int64_t r0 = cuts[p], n = cuts[p + 1] - cuts[p];
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < n * row; ++i) {
        r.out[size_t((b * L + r0) * row + i)] = parts[p].out[size_t(b * n * row + i)];
        if (!parts[p].dq.empty())
          r.dq[size_t((b * L + r0) * row + i)] = parts[p].dq[size_t(b * n * row + i)];
      }
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t i = 0; i < n; ++i)
          r.lse[size_t((b * c.heads_q + h) * L + r0 + i)] =
              parts[p].lse[size_t((b * c.heads_q + h) * n + i)];
    }
    for (size_t i = 0; i < parts[p].dk.size(); ++i) {
      r.dk[i] += parts[p].dk[i];
      r.dv[i] += parts[p].dv[i];
    }
  }
  return r;
}

struct ShiftCase {
  Feature feature;
  fa_dtype dtype;
  std::vector<int64_t> cuts;  // chunk boundaries, 0 ... seqlen_q
};

void PrintTo(const ShiftCase& sc, std::ostream* os) {
  *os << full_case(sc.feature, sc.dtype, 0).name() << " cut at";
  for (int64_t x : sc.cuts) *os << " " << x;
}

class QueryChunks : public ::testing::TestWithParam<ShiftCase> {};

// The reference computes each query row alone: a chunk's rows are the full run's, bit for bit
// (out, lse, and the fp64 oracle's dq); dk, dv are the sums of the chunks' parts.
TEST_P(QueryChunks, ReferenceRowsAreTheFullSequences) {
  const ShiftCase& sc = GetParam();
  const Problem full(full_case(sc.feature, sc.dtype, 3));
  const Dense want = reference(full, false, true);
  std::vector<Dense> parts;
  for (size_t p = 0; p + 1 < sc.cuts.size(); ++p) {
    Problem chunk = chunk_of(full, sc.cuts[p], sc.cuts[p + 1]);
    run_forward(chunk, FA_BACKEND_REFERENCE);
    Dense d = outputs(chunk, false);
    const Dense oracle = reference(chunk, false, true);
    d.dq = oracle.dq;
    d.dk = oracle.dk;
    d.dv = oracle.dv;
    parts.push_back(d);
  }
  Problem whole(full.c);
  run_forward(whole, FA_BACKEND_REFERENCE);
  const Dense got = assemble(full, sc.cuts, parts), ran = outputs(whole, false);
  EXPECT_EQ(max_abs_diff(got.out, ran.out), 0.0);
  EXPECT_EQ(max_abs_diff(got.lse, ran.lse), 0.0);
  EXPECT_EQ(max_abs_diff(got.dq, want.dq), 0.0);
  EXPECT_LE(max_abs_diff(got.dk, want.dk), 1e-12 * (1 + max_abs(want.dk)));
  EXPECT_LE(max_abs_diff(got.dv, want.dv), 1e-12 * (1 + max_abs(want.dv)));
}

// The flash backend's chunks against the full problem's oracle, by the accuracy rule with the
// full problem's same-precision baseline (a baseline of chunks would share a chunk's mistakes).
TEST_P(QueryChunks, FlashChunksMatchTheFullOracle) {
  const ShiftCase& sc = GetParam();
  const Problem full(full_case(sc.feature, sc.dtype, 5));
  const Dense ref = reference(full, false, true), naive = reference(full, true, true);
  std::vector<Dense> got_parts;
  for (size_t p = 0; p + 1 < sc.cuts.size(); ++p) {
    Problem chunk = chunk_of(full, sc.cuts[p], sc.cuts[p + 1]);
    run_forward(chunk, FA_BACKEND_FLASH);
    run_backward(chunk, FA_BACKEND_FLASH);
    got_parts.push_back(outputs(chunk, true));
  }
  const Dense got = assemble(full, sc.cuts, got_parts);
  expect_rules(got, ref, naive);
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, QueryChunks,
    ::testing::Values(ShiftCase{Feature::Causal, FA_DTYPE_FP32, {0, 61, 150}},
                      ShiftCase{Feature::Causal, FA_DTYPE_BF16, {0, 64, 128, 150}},
                      ShiftCase{Feature::Window, FA_DTYPE_FP32, {0, 1, 99, 150}},
                      ShiftCase{Feature::AlibiCausal, FA_DTYPE_FP32, {0, 75, 150}},
                      ShiftCase{Feature::AlibiCausal, FA_DTYPE_FP16, {0, 33, 149, 150}},
                      ShiftCase{Feature::Softcap, FA_DTYPE_FP32, {0, 10, 150}}),
    [](const ::testing::TestParamInfo<ShiftCase>& info) {
      return std::to_string(info.index) + "_" + std::to_string(info.param.cuts.size() - 1) +
             "_chunks";
    });

// A packed batch shifts every sequence alike: each sequence gives the bytes of the same sequence
// run alone (fixed length) with the same shift.
TEST(QueryShift, PackedSequencesShiftAlike) {
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Case c;
    c.heads_q = 2;
    c.heads_kv = 1;
    c.head_dim = 16;
    c.causal = true;
    c.window_left = 20;
    c.q_shift = -7;
    c.lens_q = {12, 30, 5};
    c.lens_k = {40, 31, 9};
    c.batch = 3;
    Problem packed(c);
    run_forward(packed, backend);
    int64_t q0 = 0, k0 = 0;
    for (size_t s = 0; s < c.lens_q.size(); ++s) {
      Case one = c;
      one.lens_q.clear();
      one.lens_k.clear();
      one.batch = 1;
      one.seqlen_q = c.lens_q[s];
      one.seqlen_k = c.lens_k[s];
      Problem alone(one);
      const int64_t row = c.heads_q * c.head_dim, krow = c.heads_kv * c.head_dim;
      for (int64_t i = 0; i < one.seqlen_q * row; ++i) alone.q.set(i, packed.q.get(q0 * row + i));
      for (int64_t i = 0; i < one.seqlen_k * krow; ++i) {
        alone.k.set(i, packed.k.get(k0 * krow + i));
        alone.v.set(i, packed.v.get(k0 * krow + i));
      }
      run_forward(alone, backend);
      for (int64_t i = 0; i < one.seqlen_q * row; ++i)
        ASSERT_EQ(packed.out.get(q0 * row + i), alone.out.get(i)) << "sequence " << s;
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t i = 0; i < one.seqlen_q; ++i)
          ASSERT_EQ(packed.lse.get(h * packed.total_q + q0 + i), alone.lse.get(h * one.seqlen_q + i))
              << "sequence " << s;
      q0 += one.seqlen_q;
      k0 += one.seqlen_k;
    }
  }
}

// The largest accepted shifts: with causal, every key is visible (a shift past all keys) or none
// is (before them), computed without overflow; ALiBi's distances near 2^63 stay finite.
TEST(QueryShift, ExtremeShiftsAreExact) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.seqlen_q = 70;
  c.seqlen_k = 90;
  c.head_dim = 8;
  const int64_t edge =
      std::numeric_limits<int64_t>::max() - (c.seqlen_q + c.seqlen_k + (int64_t(1) << 32));
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Problem plain(c);
    run_forward(plain, backend);
    Case past = c;
    past.causal = true;
    past.window_right = 5;
    past.q_shift = edge;
    Problem all(past);
    run_forward(all, backend);
    EXPECT_TRUE(all.out.bytes_equal(plain.out));
    EXPECT_TRUE(all.lse.bytes_equal(plain.lse));

    Case before = past;
    before.q_shift = -edge;
    Problem none(before);
    run_forward(none, backend);
    for (int64_t i = 0; i < none.out.numel(); ++i) ASSERT_EQ(none.out.get(i), 0.0);
    for (int64_t i = 0; i < none.lse.numel(); ++i)
      ASSERT_TRUE(std::isinf(none.lse.get(i)) && none.lse.get(i) < 0);

    Case alibi = c;
    alibi.alibi = true;
    alibi.q_shift = edge;
    Problem far(alibi);
    run_forward(far, backend);
    for (int64_t i = 0; i < far.out.numel(); ++i) ASSERT_TRUE(std::isfinite(far.out.get(i)));
  }
}

// A shift that leaves a key block no query row sees (row_begin == row_end > 0 in the CPU flash
// backward, unreachable without q_shift): its dK, dV are zeros and the rows' dQ is 0, with the
// workspace poisoned (the fuzzer found the block's query loop reading a K tile it had not loaded
// from the workspace: dQ NaN).
TEST(QueryShift, BackwardWithABlockNoRowSees) {
  for (const int64_t seqlen_k : {int64_t(2), int64_t(80)}) {
    Case c;
    c.seqlen_q = 2;
    c.seqlen_k = seqlen_k;
    c.head_dim = 16;
    c.window_right = 30;
    c.q_shift = -64 - seqlen_k;  // every query at key position <= -63: sees no key
    for (const fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      SCOPED_TRACE("seqlen_k " + std::to_string(seqlen_k) + " backend " + std::to_string(backend));
      Problem pr(c);
      pr.poison_outputs();
      run_forward(pr, backend);
      const fa_params p = pr.params(backend, true);
      size_t bytes = 0;
      ASSERT_EQ(fa_backward_workspace_size(&p, &bytes), FA_OK) << fa_last_error();
      std::vector<unsigned char> ws(bytes, 0xFF);  // NaN as floats
      ASSERT_EQ(fa_backward(&p, ws.data(), bytes, nullptr), FA_OK) << fa_last_error();
      const Dense got = outputs(pr, true);
      for (const auto* g : {&got.dq, &got.dk, &got.dv})
        for (const double x : *g) ASSERT_EQ(x, 0.0);
    }
  }
}

}  // namespace
}  // namespace fa::test
