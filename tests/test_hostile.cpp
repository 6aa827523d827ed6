// Hostile sizes (issue 23): calls that are valid but carry a size the tensors do not back — a
// packed batch's max_seqlen far above its longest sequence — must cost, allocate and compute
// what the tensors hold. Each numbered case of the issue is a test here (5, the overflowing
// element counts, is also a row of the validation catalogue); the fuzz target (tests/fuzz)
// checks the same invariants on random inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support.h"

namespace fa::test {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A small packed problem: lens_q {3, 5}, lens_k {4, 6}, GQA 4 / 2, d 8 (the true max_seqlen 5 / 6).
Case packed_case(fa_dtype dtype = FA_DTYPE_FP32) {
  Case c;
  c.dtype = dtype;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 8;
  c.lens_q = {3, 5};
  c.lens_k = {4, 6};
  c.seed = 23;
  return c;
}

size_t query(const fa_params& p, bool backward) {
  size_t bytes = 0;
  const fa_status s =
      backward ? fa_backward_workspace_size(&p, &bytes) : fa_forward_workspace_size(&p, &bytes);
  EXPECT_EQ(s, FA_OK) << fa_last_error();
  return bytes;
}

// Runs forward then backward with exactly the queried workspaces (guard bytes after each, which
// must survive) and returns the outputs. max_q / max_k replace the problem's true bounds.
Dense run_with_bounds(const Case& c, fa_backend backend, int64_t max_q, int64_t max_k,
                      size_t* fwd_bytes = nullptr, size_t* bwd_bytes = nullptr) {
  Problem pr(c);
  pr.poison_outputs();
  fa_params p = pr.params(backend, true);
  p.max_seqlen_q = max_q;
  p.max_seqlen_k = max_k;
  constexpr size_t kGuard = 256;
  constexpr unsigned char kPattern = 0xA5;
  for (const bool backward : {false, true}) {
    const size_t need = query(p, backward);
    if (backward && bwd_bytes) *bwd_bytes = need;
    if (!backward && fwd_bytes) *fwd_bytes = need;
    std::vector<unsigned char> ws(need + kGuard, kPattern);
    const fa_status s = backward ? fa_backward(&p, ws.data(), need, nullptr)
                                 : fa_forward(&p, ws.data(), need, nullptr);
    EXPECT_EQ(s, FA_OK) << (backward ? "backward: " : "forward: ") << fa_last_error();
    for (size_t i = need; i < ws.size(); ++i)
      if (ws[i] != kPattern) {
        ADD_FAILURE() << (backward ? "backward" : "forward") << " wrote past its workspace of "
                      << need << " bytes, at +" << (i - need);
        break;
      }
  }
  return outputs(pr, true);
}

void expect_same_results(const Dense& a, const Dense& b, const std::string& what) {
  EXPECT_EQ(max_abs_diff(a.out, b.out), 0.0) << what << ": out";
  EXPECT_EQ(max_abs_diff(a.lse, b.lse), 0.0) << what << ": lse";
  EXPECT_EQ(max_abs_diff(a.dq, b.dq), 0.0) << what << ": dq";
  EXPECT_EQ(max_abs_diff(a.dk, b.dk), 0.0) << what << ": dk";
  EXPECT_EQ(max_abs_diff(a.dv, b.dv), 0.0) << what << ": dv";
}

// The claimed bounds a hostile caller sends, all >= the true ones (so all are valid calls).
const std::vector<int64_t>& hostile_bounds() {
  static const std::vector<int64_t> v = {int64_t(1) << 31,        (int64_t(1) << 31) - 1,
                                         10'000'000'000,          int64_t(1) << 61,
                                         int64_t(1) << 62,        kInt64Max};
  return v;
}

// Case 1: max_seqlen_q = 2^62 wrapped the CPU flash backward's workspace size (1,081,920 bytes
// reported where 5,193,920 were needed), the call wrote ~2 MB past it; on a small problem it
// returned wrong gradients. Now the size and the results are those of the true bound.
TEST(Hostile, FlashBackwardWithHugeMaxSeqlenIsExact) {
  for (const fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16}) {
    const Case c = packed_case(dt);
    size_t fwd0 = 0, bwd0 = 0;
    const Dense honest = run_with_bounds(c, FA_BACKEND_FLASH, 5, 6, &fwd0, &bwd0);
    for (const int64_t m : hostile_bounds()) {
      size_t fwd = 0, bwd = 0;
      const Dense got = run_with_bounds(c, FA_BACKEND_FLASH, m, m, &fwd, &bwd);
      EXPECT_EQ(fwd, fwd0) << "max_seqlen " << m;
      EXPECT_EQ(bwd, bwd0) << "max_seqlen " << m;
      expect_same_results(got, honest, "flash, max_seqlen " + std::to_string(m));
    }
  }
}

// Case 2: the reference backend with max_seqlen_q = max_seqlen_k = INT64_MAX overflowed its
// (seqlen_q x seqlen_k) scratch and aborted ("double free or corruption").
TEST(Hostile, ReferenceWithInt64MaxSeqlenIsExact) {
  const Case c = packed_case();
  const Dense honest = run_with_bounds(c, FA_BACKEND_REFERENCE, 5, 6);
  for (const int64_t m : hostile_bounds())
    expect_same_results(run_with_bounds(c, FA_BACKEND_REFERENCE, m, m), honest,
                        "reference, max_seqlen " + std::to_string(m));
}

// Case 3: the forward looped over batch * heads * ceil(max_seqlen_q / 64) tasks: 2.3 s for 8 real
// tokens at 2^31 - 1, a hang at 2^62. Now its work follows the real lengths: each of these calls
// takes what the honest one takes (milliseconds, even under the sanitizers; the bound is loose).
TEST(Hostile, ForwardCostFollowsTheRealLengths) {
  const Case c = packed_case();
  for (const int64_t m : hostile_bounds())
    for (const fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      Problem pr(c);
      fa_params p = pr.params(backend, false);
      p.max_seqlen_q = m;
      p.max_seqlen_k = m;
      std::vector<unsigned char> ws(query(p, false));
      const auto t0 = std::chrono::steady_clock::now();
      ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(s, 0.5) << "backend " << backend << ", max_seqlen " << m;
    }
}

// Case 4: at max_seqlen_q = 2^61 the query answered FA_OK / 224,320 bytes and the run given
// exactly that refused it ("need >= 9223372036854889280"). The query's size is always enough
// for the run, and one byte less than the run's own minimum is refused without a write.
TEST(Hostile, QueryAndRunAgree) {
  const Case c = packed_case();
  for (const int64_t m : hostile_bounds())
    for (const fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE})
      for (const bool backward : {false, true}) {
        Problem pr(c);
        fa_params p = pr.params(backend, true);
        p.max_seqlen_q = m;
        p.max_seqlen_k = m;
        const size_t need = query(p, backward);
        std::vector<unsigned char> ws(need);
        const fa_status s = backward ? fa_backward(&p, ws.data(), need, nullptr)
                                     : fa_forward(&p, ws.data(), need, nullptr);
        EXPECT_EQ(s, FA_OK) << "backend " << backend << (backward ? " backward" : " forward")
                            << ", max_seqlen " << m << ": " << fa_last_error();
      }
}

// Case 5 (with the catalogue's rows q_elements_overflow / k_span_overflow): fixed-length shapes
// whose element counts overflow int64 — here batch 2^32 x seqlen 2^32 over zero strides, which
// UBSan flagged as a signed overflow in validation and which then hung — are refused by every
// entry point with FA_ERROR_SIZE naming the tensor, and nothing is written.
TEST(Hostile, OverflowingElementCountsAreRefused) {
  Case c;
  Problem pr(c);
  pr.poison_outputs();
  fa_params p = pr.params(FA_BACKEND_AUTO, true);
  for (fa_tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv}) {
    t->shape[0] = t->shape[1] = int64_t(1) << 32;
    t->stride[0] = t->stride[1] = 0;
  }
  p.lse.shape[0] = p.lse.shape[2] = int64_t(1) << 32;
  p.lse.stride[0] = p.lse.stride[2] = 0;
  size_t bytes = 12345;
  EXPECT_EQ(fa_forward_workspace_size(&p, &bytes), FA_ERROR_SIZE);
  EXPECT_NE(std::string(fa_last_error()).find("q.shape=(4294967296, 4294967296, 1, 8) has more"),
            std::string::npos)
      << fa_last_error();
  EXPECT_EQ(fa_backward_workspace_size(&p, &bytes), FA_ERROR_SIZE);
  EXPECT_EQ(bytes, 12345u);
  EXPECT_EQ(fa_forward(&p, nullptr, 0, nullptr), FA_ERROR_SIZE);
  EXPECT_EQ(fa_backward(&p, nullptr, 0, nullptr), FA_ERROR_SIZE);
  Problem poisoned(c);
  poisoned.poison_outputs();
  for (const auto& [got, want] : {std::pair{&pr.out, &poisoned.out}, std::pair{&pr.lse, &poisoned.lse},
                                  std::pair{&pr.dq, &poisoned.dq}, std::pair{&pr.dk, &poisoned.dk},
                                  std::pair{&pr.dv, &poisoned.dv}})
    EXPECT_TRUE(got->bytes_equal(*want));
}

// Sizes the tensors do back but whose workspace overflows 64 bits (here the reference's
// (seqlen_q x seqlen_k) matrices of a 2^33-token sequence over zero strides) are refused with
// FA_ERROR_SIZE by the query and the run alike, not wrapped.
TEST(Hostile, OverflowingWorkspaceIsRefused) {
  Case c;
  Problem pr(c);
  fa_params p = pr.params(FA_BACKEND_REFERENCE, true);
  for (fa_tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv}) {
    t->shape[1] = int64_t(1) << 33;
    t->stride[1] = 0;
  }
  p.lse.shape[2] = int64_t(1) << 33;
  p.lse.stride[2] = 0;
  for (const bool backward : {false, true}) {
    size_t bytes = 777;
    EXPECT_EQ(backward ? fa_backward_workspace_size(&p, &bytes) : fa_forward_workspace_size(&p, &bytes),
              FA_ERROR_SIZE);
    EXPECT_NE(std::string(fa_last_error()).find("overflows 64 bits"), std::string::npos)
        << fa_last_error();
    EXPECT_EQ(bytes, 777u);
    std::vector<unsigned char> ws(64);
    EXPECT_EQ(backward ? fa_backward(&p, ws.data(), ws.size(), nullptr)
                       : fa_forward(&p, ws.data(), ws.size(), nullptr),
              FA_ERROR_SIZE);
  }
}

}  // namespace
}  // namespace fa::test
