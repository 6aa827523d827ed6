// Ring attention (flashattn/ring.h) on the CPU backend: R ranks simulated by R threads that
// exchange their K / V blocks through an in-process communicator (ring_comm.h). Each rank gets
// its shard of one problem's q, k, v, dout; the shards' outputs, put back together, must meet
// FlashAttention's accuracy rule against the fp64 reference of the whole sequence (as
// test_flash_cpu.cpp: out and lse 2 x the fp32 naive error + 1e-5, gradients 3 x + 1e-4).
// Lengths are odd and not multiples of R or 2R, so chunks differ in length. Then the schedule's
// arithmetic, and bad input: a clear error naming the argument and nothing written.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "flashattn/ring.hpp"
#include "parallel/ring_plan.h"
#include "ring_comm.h"
#include "ring_shards.h"
#include "support.h"

namespace fa::test {
namespace {

class RingAttention : public ::testing::TestWithParam<RingCase> {};

// Forward then backward on every rank; the shards' results together against the reference.
TEST_P(RingAttention, ShardsTogetherMatchReference) {
  const RingCase& rc = GetParam();
  Problem pr(rc.c);
  const Dense ref = reference(pr, false, true);
  const Dense naive = reference(pr, true, true);
  pr.poison_outputs();

  InProcessRing ring(rc.ranks);
  std::vector<std::string> errors(size_t(rc.ranks));
  std::vector<int> starts(size_t(rc.ranks));
  std::vector<Shard> shards;
  for (int32_t r = 0; r < rc.ranks; ++r) shards.emplace_back(pr, rc, r);
  on_ranks(rc.ranks, [&](int32_t r) {
    InProcessRing::Rank comm(ring, r);
    Shard& s = shards[size_t(r)];
    const fa::Options o = s.options(rc.c);
    const fa::RingOptions ro{rc.c.seqlen_q, rc.layout};
    try {
      fa::ring_forward(s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view(), o, ro, comm);
      fa::ring_backward(s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view(),
                        s.dout.view(), s.dq.view(), s.dk.view(), s.dv.view(), o, ro, comm);
    } catch (const std::exception& e) {
      errors[size_t(r)] = e.what();
    }
    starts[size_t(r)] = comm.starts();
  });
  for (int32_t r = 0; r < rc.ranks; ++r) {
    ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
    // forward: R - 1 K / V transfers; backward: R - 1 of K / V, R - 1 of dK / dV sums and the
    // sums' last hop home (none at all with one rank).
    EXPECT_EQ(starts[size_t(r)], rc.ranks == 1 ? 0 : 3 * (rc.ranks - 1) + 1) << "rank " << r;
  }
  EXPECT_EQ(ring.in_flight(), 0u) << "every byte sent was received";

  for (const Shard& s : shards) s.gather(pr);
  const Dense got = outputs(pr, true);
  expect_rules(got, ref, naive);
}

std::vector<RingCase> grid() {
  // seqlen: odd, and (except 50 at R = 2) not a multiple of R or 2R: chunks of unequal length.
  const int64_t lens[] = {37, 50, 101};
  std::vector<RingCase> cases =
      ring_grid({FA_DTYPE_FP32, FA_DTYPE_BF16}, [&](Case& c, uint64_t n) {
        c.seed = n;
        c.batch = 2;
        c.heads_kv = 1 + int64_t(n % 2);
        c.heads_q = c.heads_kv * (n % 3 == 0 ? 1 : 3);  // GQA 3:1 in two cases of three
        c.head_dim = n % 2 ? 40 : 16;
        c.seqlen_q = c.seqlen_k = lens[n % 3];
        c.strided = n % 4 == 1;  // not used by the shards; the global problem's layout only
      });
  uint64_t n = cases.size();
  // One rank (no communication); fp16 with softcap and a given scale; a longer sequence.
  auto extra = [&](int32_t ranks, fa_dtype dt, int64_t L, int64_t hq, int64_t hk, int64_t d) {
    RingCase rc;
    rc.ranks = ranks;
    rc.c.dtype = dt;
    rc.c.seqlen_q = rc.c.seqlen_k = L;
    rc.c.heads_q = hq;
    rc.c.heads_kv = hk;
    rc.c.head_dim = d;
    rc.c.causal = true;
    rc.c.seed = ++n;
    cases.push_back(rc);
    return &cases.back().c;
  };
  extra(1, FA_DTYPE_FP32, 29, 2, 1, 8);
  Case* half = extra(3, FA_DTYPE_FP16, 77, 4, 1, 32);
  half->softcap = 3.f;
  half->softmax_scale = 0.3f;
  extra(4, FA_DTYPE_BF16, 389, 4, 2, 64);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Grid, RingAttention, ::testing::ValuesIn(grid()), RingCaseName());

// A one-rank ring is the single-device call: in either layout its shard is the whole sequence in
// order, and the engine makes one block call over it (ring_plan.h's call_layout), so out, lse and
// the gradients equal fa_forward's and fa_backward's bit for bit (the merge of one part and the
// fp32 sums of one block are exact). flashattn/ring_nccl.hpp's check asserts the same on CUDA.
// Before call_layout, a causal zig-zag ring of one rank made three block calls and differed.
TEST(RingAttention, OneRankIsTheSingleDeviceCall) {
  for (fa_ring_layout layout : {FA_RING_ZIGZAG, FA_RING_CONTIGUOUS})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(layout == FA_RING_ZIGZAG ? "zig-zag" : "contiguous") +
                   (causal ? " causal" : ""));
      RingCase rc;
      rc.ranks = 1;
      rc.layout = layout;
      rc.c.dtype = FA_DTYPE_BF16;
      rc.c.seqlen_q = rc.c.seqlen_k = 77;
      rc.c.heads_q = 4;
      rc.c.heads_kv = 2;
      rc.c.head_dim = 40;
      rc.c.causal = causal;
      rc.c.seed = 35;
      Problem pr(rc.c);
      Shard ring_s(pr, rc, 0), plain(pr, rc, 0);
      InProcessRing ring(1);
      InProcessRing::Rank comm(ring, 0);
      const fa::Options o = ring_s.options(rc.c);
      const fa::RingOptions ro{rc.c.seqlen_q, rc.layout};
      fa::ring_forward(ring_s.q.view(), ring_s.k.view(), ring_s.v.view(), ring_s.out.view(),
                       ring_s.lse.view(), o, ro, comm);
      fa::ring_backward(ring_s.q.view(), ring_s.k.view(), ring_s.v.view(), ring_s.out.view(),
                        ring_s.lse.view(), ring_s.dout.view(), ring_s.dq.view(), ring_s.dk.view(),
                        ring_s.dv.view(), o, ro, comm);
      fa::forward(plain.q.view(), plain.k.view(), plain.v.view(), plain.out.view(),
                  plain.lse.view(), o);
      fa::backward(plain.q.view(), plain.k.view(), plain.v.view(), plain.out.view(),
                   plain.lse.view(), plain.dout.view(), plain.dq.view(), plain.dk.view(),
                   plain.dv.view(), o);
      EXPECT_TRUE(ring_s.out.bytes_equal(plain.out)) << "out";
      EXPECT_TRUE(ring_s.lse.bytes_equal(plain.lse)) << "lse";
      EXPECT_TRUE(ring_s.dq.bytes_equal(plain.dq)) << "dq";
      EXPECT_TRUE(ring_s.dk.bytes_equal(plain.dk)) << "dk";
      EXPECT_TRUE(ring_s.dv.bytes_equal(plain.dv)) << "dv";
      EXPECT_EQ(comm.starts(), 0);
    }
}

// ---- the schedule ----------------------------------------------------------------------------

// Every layout's shards cover the sequence once, in order within each shard, with chunks of
// floor / ceil(L / n) rows.
TEST(RingPlan, ShardsPartitionTheSequence) {
  for (fa_ring_layout layout : {FA_RING_CONTIGUOUS, FA_RING_ZIGZAG})
    for (int32_t size = 1; size <= 9; ++size)
      for (int64_t L : {int64_t(2 * size), int64_t(2 * size + 1), int64_t(101), int64_t(1000003)}) {
        std::vector<int> seen(size_t(std::min<int64_t>(L, 200000)), 0);
        int64_t total = 0;
        const int64_t n = ring::chunk_count(size, layout);
        for (int32_t r = 0; r < size; ++r) {
          const ring::Shard s = ring::shard_of(L, size, layout, r);
          int64_t local = 0;
          for (int i = 0; i < s.count; ++i) {
            const ring::Chunk& c = s.chunk[i];
            EXPECT_TRUE(c.len == L / n || c.len == L / n + 1) << L << " " << size;
            EXPECT_EQ(c.local, local);
            local += c.len;
            for (int64_t row = c.start; row < c.start + c.len && row < int64_t(seen.size()); ++row)
              ++seen[size_t(row)];
          }
          EXPECT_EQ(s.rows, local);
          total += s.rows;
          EXPECT_LE(s.rows, ring::max_shard_rows(L, size, layout));
        }
        EXPECT_EQ(total, L);
        for (size_t row = 0; row < seen.size(); ++row) ASSERT_EQ(seen[row], 1) << "row " << row;
      }
}

// Zig-zag: at every step every rank attends to the same number of (query, key) pairs under a
// causal mask when 2R divides L (the diagonal counted as its lower triangle); contiguous does
// not (rank 0 idles from step 1 on).
TEST(RingPlan, ZigZagBalancesCausalWork) {
  auto work = [](int64_t L, int32_t size, fa_ring_layout layout, int32_t rank, int32_t step) {
    const ring::Shard mine = ring::shard_of(L, size, layout, rank);
    const ring::Shard theirs = ring::shard_of(L, size, layout, ring::origin(rank, size, step));
    int64_t pairs = 0;
    for (int i = 0; i < mine.count; ++i)
      for (int j = 0; j < theirs.count; ++j) {
        const ring::Chunk &q = mine.chunk[i], &k = theirs.chunk[j];
        switch (ring::visibility(true, q.index, k.index)) {
          case ring::Visibility::Full: pairs += q.len * k.len; break;
          case ring::Visibility::Diagonal: pairs += q.len * (q.len + 1) / 2; break;
          case ring::Visibility::None: break;
        }
      }
    return pairs;
  };
  for (int32_t size = 2; size <= 8; ++size) {
    const int64_t L = 2 * size * 13;
    for (int32_t step = 0; step < size; ++step)
      for (int32_t r = 1; r < size; ++r)
        EXPECT_EQ(work(L, size, FA_RING_ZIGZAG, r, step), work(L, size, FA_RING_ZIGZAG, 0, step))
            << "size " << size << " step " << step << " rank " << r;
    EXPECT_EQ(work(L, size, FA_RING_CONTIGUOUS, 0, 1), 0);
    EXPECT_GT(work(L, size, FA_RING_CONTIGUOUS, size - 1, 1), 0);
  }
  // Each rank's blocks meet every other rank's exactly once over the R steps.
  for (int32_t size = 1; size <= 6; ++size)
    for (int32_t r = 0; r < size; ++r) {
      std::vector<int> met(size_t(size), 0);
      for (int32_t step = 0; step < size; ++step) ++met[size_t(ring::origin(r, size, step))];
      for (int32_t o = 0; o < size; ++o) EXPECT_EQ(met[size_t(o)], 1);
    }
}

// ---- bad input -------------------------------------------------------------------------------

// One rank of a ring of `size`, on its valid shard: the C structs a test then breaks.
struct BadInputFixture {
  RingCase rc;
  Problem pr;
  Shard s;
  fa::Options o;
  fa_comm comm{};
  InProcessRing ring;
  InProcessRing::Rank rank;

  explicit BadInputFixture(int32_t size = 2)
      : rc(make_case(size)), pr(rc.c), s(pr, rc, 0), o(s.options(rc.c)), ring(size), rank(ring, 0) {
    comm = rank.raw();
  }
  static RingCase make_case(int32_t size) {
    RingCase rc;
    rc.ranks = size;
    rc.c.seqlen_q = rc.c.seqlen_k = 23;
    rc.c.heads_q = 2;
    rc.c.causal = true;
    return rc;
  }
  fa_params params(bool backward) const {
    fa_params p = fa::make_params(s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view(), o);
    if (backward) {
      p.dout = s.dout.view().raw;
      p.dq = s.dq.view().raw;
      p.dk = s.dk.view().raw;
      p.dv = s.dv.view().raw;
    }
    return p;
  }
  fa_ring ring_struct() const { return fa::make_ring({rc.c.seqlen_q, rc.layout}, comm); }

  // The call fails with `status`, its message contains `needle`, no output is written, and no
  // byte was sent.
  void expect_refused(const fa_params& p, const fa_ring* r, fa_status status,
                      const std::string& needle, bool backward) {
    const HostTensor out0 = copy(s.out), lse0 = copy(s.lse), dq0 = copy(s.dq), dk0 = copy(s.dk),
                     dv0 = copy(s.dv);
    std::vector<unsigned char> ws(1 << 22);
    size_t bytes = 0;
    const fa_status query = backward ? fa_ring_backward_workspace_size(&p, r, &bytes)
                                     : fa_ring_forward_workspace_size(&p, r, &bytes);
    EXPECT_EQ(query, status) << fa_last_error();
    const fa_status st = backward ? fa_ring_backward(&p, r, ws.data(), ws.size(), nullptr)
                                  : fa_ring_forward(&p, r, ws.data(), ws.size(), nullptr);
    EXPECT_EQ(st, status) << fa_last_error();
    const std::string msg = fa_last_error();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_TRUE(s.out.bytes_equal(out0) && s.lse.bytes_equal(lse0)) << "forward outputs written";
    EXPECT_TRUE(s.dq.bytes_equal(dq0) && s.dk.bytes_equal(dk0) && s.dv.bytes_equal(dv0))
        << "gradients written";
    EXPECT_EQ(rank.starts(), 0) << "a refused call communicated";
  }
  static HostTensor copy(const HostTensor& t) {
    HostTensor c(t.dtype(), t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) c.set(i, t.get(i));
    return c;
  }
};

TEST(RingAttentionErrors, RingArgumentsNamed) {
  for (bool backward : {false, true}) {
    SCOPED_TRACE(backward ? "backward" : "forward");
    BadInputFixture f;
    const fa_params p = f.params(backward);
    fa_ring r = f.ring_struct();
    r.comm.rank = 2;
    f.expect_refused(p, &r, FA_ERROR_SIZE, "ring.comm.rank=2 must be in [0, 2)", backward);
    r = f.ring_struct();
    r.comm.size = 0;
    f.expect_refused(p, &r, FA_ERROR_SIZE, "ring.comm.size=0 must be >= 1", backward);
    r = f.ring_struct();
    r.comm.start = nullptr;
    f.expect_refused(p, &r, FA_ERROR_NULL_POINTER, "ring.comm.start is NULL", backward);
    r = f.ring_struct();
    r.comm.wait = nullptr;
    f.expect_refused(p, &r, FA_ERROR_NULL_POINTER, "ring.comm.wait is NULL", backward);
    r = f.ring_struct();
    r.layout = 7;
    f.expect_refused(p, &r, FA_ERROR_UNSUPPORTED, "ring.layout=7", backward);
    r = f.ring_struct();
    r.seqlen = 3;  // zig-zag over 2 ranks: 4 chunks
    f.expect_refused(p, &r, FA_ERROR_SIZE, "ring.seqlen=3 must be >= 4", backward);
    r = f.ring_struct();
    r.struct_size = 8;
    f.expect_refused(p, &r, FA_ERROR_VERSION, "ring.struct_size=8", backward);
    f.expect_refused(p, nullptr, FA_ERROR_NULL_POINTER, "ring is NULL", backward);
    // Another rank's length (rank 0 of 23 rows over 4 chunks holds 5 + 6 = 11).
    r = f.ring_struct();
    r.seqlen = 25;
    f.expect_refused(p, &r, FA_ERROR_SHAPE, "q.shape[1]=11 must be 13", backward);
  }
}

TEST(RingAttentionErrors, UnsupportedFeaturesNamed) {
  BadInputFixture f;
  const fa_ring r = f.ring_struct();
  fa_params p = f.params(false);
  p.window_left = 4;
  f.expect_refused(p, &r, FA_ERROR_UNSUPPORTED, "window_left", false);
  p = f.params(false);
  p.dropout_p = 0.1f;
  f.expect_refused(p, &r, FA_ERROR_UNSUPPORTED, "dropout_p", false);
  p = f.params(true);
  p.q_shift = 3;
  f.expect_refused(p, &r, FA_ERROR_UNSUPPORTED, "q_shift", true);
  std::vector<float> slopes(2, 0.5f);
  p = f.params(false);
  p.alibi_slopes = fa::Tensor::contiguous(slopes.data(), FA_DTYPE_FP32, {2}).raw;
  f.expect_refused(p, &r, FA_ERROR_UNSUPPORTED, "alibi_slopes", false);
  // The shard's own arguments are validated as fa_forward's (the same messages).
  p = f.params(true);
  p.lse.data = nullptr;
  f.expect_refused(p, &r, FA_ERROR_NULL_POINTER, "lse.data is NULL", true);
  p = f.params(false);
  p.q.shape[3] = 4;
  f.expect_refused(p, &r, FA_ERROR_SHAPE, "must equal q.shape[3]=4", false);
}

TEST(RingAttentionErrors, SmallWorkspaceRefused) {
  BadInputFixture f(1);
  const fa_params p = f.params(false);
  const fa_ring r = f.ring_struct();
  size_t bytes = 0;
  ASSERT_EQ(fa_ring_forward_workspace_size(&p, &r, &bytes), FA_OK) << fa_last_error();
  std::vector<unsigned char> ws(bytes);
  const HostTensor out0 = BadInputFixture::copy(f.s.out);
  EXPECT_EQ(fa_ring_forward(&p, &r, ws.data(), bytes - 1, nullptr), FA_ERROR_WORKSPACE);
  EXPECT_NE(std::string(fa_last_error()).find("fa_ring_forward_workspace_size"), std::string::npos);
  EXPECT_EQ(fa_ring_forward(&p, &r, nullptr, bytes, nullptr), FA_ERROR_WORKSPACE);
  EXPECT_TRUE(f.s.out.bytes_equal(out0)) << "a refused call wrote out";
  EXPECT_EQ(fa_ring_forward(&p, &r, ws.data(), bytes, nullptr), FA_OK) << fa_last_error();
}

// A communicator that fails mid-call (every rank's second transfer): FA_ERROR_COMM naming the
// function, the step and the communicator's own message; the outputs are not written.
TEST(RingAttentionErrors, CommunicatorFailureStopsTheCall) {
  RingCase rc = BadInputFixture::make_case(3);
  Problem pr(rc.c);
  InProcessRing ring(3);
  std::vector<std::string> errors(3);
  std::vector<fa_status> statuses(3, FA_OK);
  std::vector<bool> untouched(3, false);
  on_ranks(3, [&](int32_t r) {
    Shard s(pr, rc, r);
    const HostTensor out0 = BadInputFixture::copy(s.out);
    InProcessRing::Rank comm(ring, r);
    comm.fail_start_at(2);
    try {
      fa::ring_forward(s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view(),
                       s.options(rc.c), {rc.c.seqlen_q, rc.layout}, comm);
    } catch (const fa::Error& e) {
      statuses[size_t(r)] = e.status();
      errors[size_t(r)] = e.what();
    }
    untouched[size_t(r)] = s.out.bytes_equal(out0);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(statuses[size_t(r)], FA_ERROR_COMM) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("ring.comm.start returned 1 at step 1"), std::string::npos)
        << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("injected failure of start"), std::string::npos)
        << errors[size_t(r)];
    EXPECT_TRUE(untouched[size_t(r)]) << "rank " << r << " wrote out";
  }
  EXPECT_STREQ(fa_status_string(FA_ERROR_COMM), "communicator error");
}

TEST(RingAttentionErrors, ShardQueryNamesRank) {
  fa_ring r;
  fa_ring_init(&r);
  r.seqlen = 10;
  r.comm.size = 2;
  int64_t rows[4];
  ASSERT_EQ(fa_ring_shard(&r, 1, rows), FA_OK) << fa_last_error();
  // zig-zag, 4 chunks of 10 rows: [0, 2) [2, 5) [5, 7) [7, 10); rank 1 holds chunks 1 and 2.
  EXPECT_EQ(std::vector<int64_t>(rows, rows + 4), (std::vector<int64_t>{2, 3, 5, 2}));
  EXPECT_EQ(fa_ring_shard(&r, 2, rows), FA_ERROR_SIZE);
  EXPECT_NE(std::string(fa_last_error()).find("rank=2 must be in [0, 2)"), std::string::npos);
  EXPECT_EQ(fa_ring_shard(&r, 0, nullptr), FA_ERROR_NULL_POINTER);
  r.layout = FA_RING_CONTIGUOUS;
  ASSERT_EQ(fa_ring_shard(&r, 1, rows), FA_OK);
  EXPECT_EQ(std::vector<int64_t>(rows, rows + 4), (std::vector<int64_t>{5, 5, 0, 0}));
}

}  // namespace
}  // namespace fa::test
