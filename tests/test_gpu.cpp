// GPU kernels against the fp64 CPU reference (FlashAttention's accuracy rule). These tests need
// a CUDA device: without one - or in a CPU-only build - each one reports GTEST_SKIP, so CI
// lists them as skipped, never as passed. A build whose CUDA backend has no kernel for the call
// (FA_ERROR_BACKEND) also skips, naming the reason.
//
// Rule: max |gpu - ref| <= 2 x max |naive - ref| + 1e-5 (out, lse), 3 x ... + 1e-4 (gradients),
// where naive computes in fp32 from the same 16-bit inputs and rounds P to the 16-bit type.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpu_support.h"

#ifdef FA_TEST_CUDA
#include "cuda/device_props.h"
#include "cuda/tensor_map.h"
#endif

namespace fa::test {
namespace {

class Gpu : public ::testing::TestWithParam<Case> {};

TEST_P(Gpu, ForwardMatchesReference) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  size_t bytes = 0;
  if (fa_forward_workspace_size(&dev.p, &bytes) == FA_ERROR_BACKEND) GTEST_SKIP() << fa_last_error();
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, false);
#endif
}

// A forward without its LSE (lse.data = NULL, the inference call): on both CUDA families, out
// is bit for bit the out of the same call with an LSE, and the LSE tensor a call would have
// written stays as it was (its 0xFF poison): fixed-length and packed, causal, GQA, and a packed
// batch with empty sequences.
TEST(GpuForwardLse, NullLseGivesTheSameOutAndWritesNoLse) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  std::vector<Case> cases;
  for (const bool varlen : {false, true}) {
    Case c;
    c.dtype = varlen ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
    c.batch = 3;
    c.heads_q = 4;
    c.heads_kv = varlen ? 2 : 4;
    c.head_dim = varlen ? 64 : 128;
    c.seqlen_q = 131;
    c.seqlen_k = 203;
    c.causal = varlen;
    if (varlen) {
      c.lens_q = {131, 0, 57};
      c.lens_k = {203, 9, 0};
    }
    c.seed = 4141;
    cases.push_back(c);
  }
  for (const Case& c : cases)
    for (const fa_backend backend : {FA_BACKEND_AUTO, FA_BACKEND_VANILLA}) {
      SCOPED_TRACE(::testing::Message() << "backend " << int(backend) << ", packed " << c.varlen());
      Problem pr(c);
      DeviceProblem with(pr, backend), without(pr, backend);
      without.p.lse.data = nullptr;
      size_t a = 0, b = 0;
      ASSERT_EQ(fa_forward_workspace_size(&with.p, &a), FA_OK) << fa_last_error();
      ASSERT_EQ(fa_forward_workspace_size(&without.p, &b), FA_OK) << fa_last_error();
      EXPECT_LE(b, a);
      run_pass(with.p, false);
      run_pass(without.p, false);
      if (HasFatalFailure()) return;
      EXPECT_EQ(with.out.bytes(pr.out), without.out.bytes(pr.out));
      const std::vector<unsigned char> lse = without.lse.bytes(pr.lse);
      size_t poisoned = 0;
      for (unsigned char x : lse) poisoned += x == 0xFF;
      EXPECT_EQ(poisoned, lse.size()) << "the LSE tensor not passed was written";
      expect_device_results(pr, with, false);
    }
#endif
}

#ifdef FA_TEST_CUDA
// dq, dk and dv still hold DeviceProblem's 0xFF poison: a refused call wrote nothing.
void expect_grads_untouched(Problem& pr, const DeviceProblem& dev) {
  const std::pair<const DeviceTensor*, HostTensor*> grads[] = {
      {&dev.dq, &pr.dq}, {&dev.dk, &pr.dk}, {&dev.dv, &pr.dv}};
  for (const auto& [device, host] : grads) {
    std::memset(host->data(), 0, host->storage_bytes());
    device->copy_to(*host);
    const auto* bytes = static_cast<const unsigned char*>(host->data());
    size_t poisoned = 0;
    for (size_t i = 0; i < host->storage_bytes(); ++i) poisoned += bytes[i] == 0xFF;
    EXPECT_EQ(poisoned, host->storage_bytes());
  }
}
#endif

// A backward the CUDA backend cannot run must fail cleanly: the status from the workspace query
// and from the call, a message, gradients untouched - also from a thread other than the one that
// ran the forward, as PyTorch's autograd engine calls it (the Python suite once died with a
// segmentation fault in that situation, on the H200: docs/python.md). The call: fp32 inputs,
// which the CUDA kernels refuse (FA_ERROR_UNSUPPORTED); a build without backward kernels
// (FA_CUDA_BACKWARD=OFF) refuses every CUDA backward first (FA_ERROR_BACKEND).
#ifdef FA_TEST_CUDA_BACKWARD
constexpr fa_status kRefused = FA_ERROR_UNSUPPORTED;
#else
constexpr fa_status kRefused = FA_ERROR_BACKEND;
#endif
TEST(GpuBackward, UnsupportedFailsCleanlyFromAnyThread) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = FA_DTYPE_FP32;
  c.head_dim = 64;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 40;
  c.seqlen_k = 56;
  c.causal = true;
  c.alibi = true;
  c.dropout_p = 0.17f;
  c.pad = 8;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  const fa_params& p = dev.p;
  auto attempt = [&p](fa_status* query, fa_status* call, std::string* message) {
    size_t bytes = 0;
    *query = fa_backward_workspace_size(&p, &bytes);
    *call = fa_backward(&p, nullptr, 0, nullptr);
    *message = fa_last_error();
  };
  fa_status query = FA_OK, call = FA_OK;
  std::string message;
  attempt(&query, &call, &message);
  EXPECT_EQ(query, kRefused) << message;
  EXPECT_EQ(call, kRefused) << message;
  EXPECT_FALSE(message.empty());
  fa_status tq = FA_OK, tc = FA_OK;
  std::string tmessage;
  std::thread worker(attempt, &tq, &tc, &tmessage);
  worker.join();
  EXPECT_EQ(tq, kRefused) << tmessage;
  EXPECT_EQ(tc, kRefused) << tmessage;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_grads_untouched(pr, dev);
#endif
}

#ifdef FA_TEST_CUDA
// A short single-sequence case (40 queries, 56 keys) for the refusal tests.
Case short_case(fa_dtype dtype, int head_dim) {
  Case c;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.seqlen_q = 40;
  c.seqlen_k = 56;
  return c;
}
#endif

// A workspace that is not 16-byte aligned (the kernels read and reduce into it 16 bytes at a
// time) is refused before anything runs, naming the argument; the gradients keep their poison.
TEST(GpuBackward, MisalignedWorkspaceFailsCleanly) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(short_case(FA_DTYPE_BF16, 64));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  run_pass(dev.p, false);  // out and lse for the backward
  if (HasFatalFailure()) return;
  size_t bytes = 0;
  ASSERT_EQ(fa_backward_workspace_size(&dev.p, &bytes), FA_OK) << fa_last_error();
  ASSERT_GT(bytes, 0u);
  char* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, bytes + 16), cudaSuccess);
  const fa_status st = fa_backward(&dev.p, ws + 4, bytes + 12, nullptr);
  const std::string message = fa_last_error();
  const cudaError_t sync = cudaDeviceSynchronize();
  cudaFree(ws);
  EXPECT_EQ(st, FA_ERROR_ALIGNMENT) << message;
  EXPECT_NE(message.find("workspace"), std::string::npos) << message;
  ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  expect_grads_untouched(pr, dev);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, Gpu, ::testing::ValuesIn(gpu_grid()), CaseTestName());

// The backward on the forward's grid: our GPU forward, then our GPU backward reading its out
// and lse, gradients against the fp64 reference by the 3x + 1e-4 rule (issue 4). Gradients
// start poisoned (DeviceProblem). Skips, naming the reason, in a build without backward kernels
// or on a device whose shared memory is too small for the case's kernel.
class GpuBwd : public ::testing::TestWithParam<Case> {};

TEST_P(GpuBwd, GradientsMatchReference) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  run_pass(dev.p, true);  // reads the GPU forward's out and lse
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuBwd, ::testing::ValuesIn(gpu_grid()), CaseTestName());

// The configurations of parts with less shared memory a block than this GPU, run here by capping
// what the backward's choices see (Tuning::sm80_bwd_smem_limit): sm86 / sm89 (99 KB) at
// d <= 128 - 64-query steps at d 32 / 64, the compact configuration at d 96 / 128 - and A100
// (163 KB) at d 224 / 256 (compact). The grid's cases of those head dims, same rule. (This GPU
// runs their sm90 code; the sm80 / 86 / 89 code differs in the Pᵀ / dSᵀ stores.)
constexpr int kSm86SmemOptin = 101376, kA100SmemOptin = 166912;
Tuning smem_cap(int bytes) {
  Tuning t;
  t.sm80_bwd_smem_limit = bytes;
  return t;
}

std::vector<Case> small_smem_grid() {
  std::vector<Case> cases;
  for (const Case& c : gpu_grid())
    if (c.head_dim <= 128 || c.head_dim >= 224) cases.push_back(c);
  return cases;
}

class GpuBwdSmallSmem : public ::testing::TestWithParam<Case> {};

TEST_P(GpuBwdSmallSmem, GradientsMatchReference) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(GetParam());
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  run_pass(dev.p, false);  // the forward, uncapped
  if (HasFatalFailure()) return;
  const Tuning cap = smem_cap(pr.c.head_dim <= 128 ? kSm86SmemOptin : kA100SmemOptin);
  if (backward_unavailable(dev.p, &why, &cap)) GTEST_SKIP() << why;
  run_pass(dev.p, true, &cap);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuBwdSmallSmem, ::testing::ValuesIn(small_smem_grid()),
                         CaseTestName());

// The split tail (bwd_sm80.h, BwdTail): full attention whose key tiles x kv heads x batch are
// more than a wave of blocks on the H200 (132 SMs) and leave a tail of a few tiles (135 tiles of
// 128 keys up to d 128, 270 of 64 above), so that the whole-tile kernel and the tail kernel
// both run, with GQA (steps = query tiles x 2 heads) and a partial last key tile. Gradients by the
// rule, with the split tail and without it (sm80_bwd_tail_min_steps 0); dK and dV bit-identical
// over 20 runs in the default mode (the tail's partial sums are added in a fixed order). The tiles
// have 2 (d 64) or 4 steps: the test lowers the tail's minimum (sm80_bwd_tail_min_steps 1), so that
// a tile is split over up to 4 blocks, one step each. On other GPUs the tail is smaller or larger, or absent:
// the same checks hold.

struct TailCase {
  fa_dtype dtype;
  int64_t head_dim;
  int64_t batch = 3, seqlen_q = 70;
};
class GpuBwdTail : public ::testing::TestWithParam<TailCase> {};

TEST_P(GpuBwdTail, GradientsMatchReferenceAndDkDvRepeat) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(GetParam().head_dim, &why))
    GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = GetParam().dtype;
  c.batch = GetParam().batch;
  c.heads_q = 10;
  c.heads_kv = 5;
  c.seqlen_q = GetParam().seqlen_q;
  c.seqlen_k = 1100;
  c.head_dim = GetParam().head_dim;
  c.pad = 8;
  c.seed = 777;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  run_pass(dev.p, false);
  if (HasFatalFailure()) return;
  Tuning tail, off;
  tail.sm80_bwd_tail_min_steps = 1;
  off.sm80_bwd_tail_min_steps = 0;
  {
    run_pass(dev.p, true, &off);
    if (HasFatalFailure()) return;
    SCOPED_TRACE("no split tail");
    expect_device_results(pr, dev, true);
  }
  run_pass(dev.p, true, &tail);
  if (HasFatalFailure()) return;
  expect_device_results(pr, dev, true);
  const int differing = rerun_backward_differences(dev, pr, 19, false, &tail);
  if (HasFatalFailure()) return;
  EXPECT_EQ(differing, 0) << "dK / dV tensors that differed from the first run's, over 19 runs";
#endif
}

// The three benchmark head dims, and fp16 at head dims below their kernel's (d 40 on the d 64
// kernel, 200 on the d 224 one: the conversion's column test) and d 96. The last three: one
// batch entry and 300 queries (45 or 90 tiles of 6-10 steps, all in the tail, more steps than
// blocks), so that blocks take parts of two tiles (the second partial-sum slot, the TMA phases
// carried into a second tile); first run in the thirteenth session.
INSTANTIATE_TEST_SUITE_P(HeadDims, GpuBwdTail,
                         ::testing::Values(TailCase{FA_DTYPE_BF16, 64},
                                           TailCase{FA_DTYPE_BF16, 128},
                                           TailCase{FA_DTYPE_BF16, 256},
                                           TailCase{FA_DTYPE_FP16, 40}, TailCase{FA_DTYPE_FP16, 96},
                                           TailCase{FA_DTYPE_FP16, 200},
                                           TailCase{FA_DTYPE_BF16, 64, 1, 300},
                                           TailCase{FA_DTYPE_FP16, 128, 1, 300},
                                           TailCase{FA_DTYPE_BF16, 256, 1, 300}),
                         [](const ::testing::TestParamInfo<TailCase>& info) {
                           return std::string(info.param.dtype == FA_DTYPE_BF16 ? "bf16" : "fp16") +
                                  "_d" + std::to_string(info.param.head_dim) + "_b" +
                                  std::to_string(info.param.batch) + "_s" +
                                  std::to_string(info.param.seqlen_q);
                         });

// On sm90 the main (or lone tail) kernel is launched as the preprocess's programmatic dependent
// (bwd_pdl); the other parts of the sm80 family launch it plainly, which sm80_bwd_pdl = false
// runs here. The plain launch passes the rule, and the dependent one then gives the same bytes: a
// deterministic varlen case with empty sequences (blocks that leave early on either side) and a
// default-mode case whose tiles all go to the split tail (dK / dV are deterministic there).
TEST(GpuBackward, PlainLaunchMatchesDependentLaunch) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  struct Sub {
    int64_t head_dim;
    bool tail;
  };
  int ran = 0;
  for (const Sub sub : {Sub{64, false}, Sub{128, true}}) {
    if (skip_head_dim_not_built(sub.head_dim, &why)) continue;
    SCOPED_TRACE("d" + std::to_string(sub.head_dim) + (sub.tail ? " tail" : " varlen"));
    Case c;
    c.dtype = FA_DTYPE_BF16;
    c.head_dim = sub.head_dim;
    c.pad = 8;
    c.seed = 4242 + uint64_t(sub.head_dim);
    if (sub.tail) {  // GpuBwdTail's shape: one batch entry, every tile in the tail
      c.batch = 1;
      c.heads_q = 10;
      c.heads_kv = 5;
      c.seqlen_q = 300;
      c.seqlen_k = 1100;
    } else {
      c.deterministic = true;
      c.batch = 4;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.lens_q = {300, 0, 77, 1};
      c.lens_k = {129, 5, 0, 300};
    }
    Problem pr(c);
    DeviceProblem dev(pr, FA_BACKEND_AUTO);
    if (backward_unavailable(dev.p, &why)) continue;
    run_pass(dev.p, false);
    if (HasFatalFailure()) return;
    Tuning dependent;
    if (sub.tail) dependent.sm80_bwd_tail_min_steps = 1;
    Tuning plain = dependent;
    plain.sm80_bwd_pdl = false;
    run_pass(dev.p, true, &plain);
    if (HasFatalFailure()) return;
    expect_device_results(pr, dev, true);
    const auto dq0 = dev.dq.bytes(pr.dq), dk0 = dev.dk.bytes(pr.dk), dv0 = dev.dv.bytes(pr.dv);
    run_pass(dev.p, true, &dependent);
    if (HasFatalFailure()) return;
    if (c.deterministic) {
      EXPECT_TRUE(dev.dq.bytes(pr.dq) == dq0) << "dQ";
    }
    EXPECT_TRUE(dev.dk.bytes(pr.dk) == dk0) << "dK";
    EXPECT_TRUE(dev.dv.bytes(pr.dv) == dv0) << "dV";
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no kernel for d 64 or d 128 in this build or on this device";
#endif
}

// What no configuration covers is refused with both figures: d 160 / 192 under the sm86 / sm89
// cap (112.5 KB compact).
TEST(GpuBackward, SmallSmemRefusalsNameTheFigures) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(192, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Problem pr(short_case(FA_DTYPE_FP16, 192));
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  size_t bytes = 0;
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  const Tuning cap = smem_cap(kSm86SmemOptin);
  EXPECT_EQ(internal::workspace_size(&dev.p, Pass::Backward, cap, &bytes), FA_ERROR_UNSUPPORTED);
  const std::string message = fa_last_error();
  EXPECT_NE(message.find("compact configuration"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kSm86SmemOptin)), std::string::npos) << message;
  EXPECT_EQ(fa_backward_workspace_size(&dev.p, &bytes), FA_OK) << fa_last_error();
#endif
}

// The workspace is a function of (params, device, knobs) alone: the public query gives the
// default knobs' size, twice the same, and the split tail's knob changes it (full attention,
// where the tail applies: its partial sums live there) only through the internal entry points.
// (The knobs were environment variables read on every call until issue 24.)
TEST(GpuBackward, WorkspaceFollowsParamsAndTuningOnly) {
  std::string why;
  if (skip_without_gpu(&why) || skip_head_dim_not_built(64, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 1;
  c.heads_q = 10;
  c.heads_kv = 5;
  c.seqlen_q = 300;
  c.seqlen_k = 1100;
  c.head_dim = 64;
  c.pad = 8;
  Problem pr(c);
  DeviceProblem dev(pr, FA_BACKEND_AUTO);
  if (backward_unavailable(dev.p, &why)) GTEST_SKIP() << why;
  size_t a = 0, b = 0, dflt = 0, tail = 0, none = 0;
  ASSERT_EQ(fa_backward_workspace_size(&dev.p, &a), FA_OK);
  ASSERT_EQ(fa_backward_workspace_size(&dev.p, &b), FA_OK);
  EXPECT_EQ(a, b);
  ASSERT_EQ(internal::workspace_size(&dev.p, Pass::Backward, Tuning{}, &dflt), FA_OK);
  EXPECT_EQ(a, dflt);
  Tuning t;
  t.sm80_bwd_tail_min_steps = 1;
  ASSERT_EQ(internal::workspace_size(&dev.p, Pass::Backward, t, &tail), FA_OK);
  t.sm80_bwd_tail_min_steps = 0;
  ASSERT_EQ(internal::workspace_size(&dev.p, Pass::Backward, t, &none), FA_OK);
  EXPECT_GT(tail, none) << "the split tail's partial sums";
  const char* name = nullptr;
  ASSERT_EQ(fa_select_kernel(&dev.p, 1, &name), FA_OK) << fa_last_error();
  EXPECT_STREQ(name, "cuda-sm80");
#endif
}

// The backward's TMA maps (src/cuda/tensor_map.h, sm90): encoded for ordinary views, refused
// where a TMA coordinate (32 bits) or stride (a multiple of 16 bytes) cannot address the view, so
// that the kernel copies with cp.async instead.
TEST(GpuBackward, TensorMapsEncodeOrRefuse) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  if (fa::cuda_device_props(0).major < 9) GTEST_SKIP() << "tensor maps need sm90";
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 256), cudaSuccess);
  View v;
  v.data = buf;
  v.stride_h = 128;
  v.stride_s = 8 * 128;
  v.stride_b = 4096 * 8 * 128;
  CUtensorMap m{};
  EXPECT_TRUE(fa::cuda::encode_row_tiles(v, 2, 4096, 8, 128, 64, &m));
  EXPECT_TRUE(fa::cuda::encode_row_tiles(v, 1, 4096, 8, 96, 128, &m));  // padded d, 128 rows
  EXPECT_FALSE(fa::cuda::encode_row_tiles(v, 1, int64_t(1) << 31, 8, 128, 64, &m));
  View odd = v;
  odd.stride_h = 4;  // 8 bytes between heads
  EXPECT_FALSE(fa::cuda::encode_row_tiles(odd, 2, 4096, 8, 128, 64, &m));
  EXPECT_EQ(cudaFree(buf), cudaSuccess);
#endif
}

// A negative softmax_scale (allowed: any finite value) puts the largest logit at the smallest raw
// score: the online softmax must take its running max over the scaled scores. Forward and
// backward on the CUDA families the default dispatch picks, causal and not, GQA, packed.
TEST(GpuNegativeScale, ForwardAndBackwardMatchReference) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  int n = 0;
  for (const fa_dtype dt : {FA_DTYPE_BF16, FA_DTYPE_FP16})
    for (const int64_t d : {64, 128})
      for (const bool causal : {false, true}) {
        Case c;
        c.dtype = dt;
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.head_dim = d;
        c.seqlen_q = 113;
        c.seqlen_k = 203;
        c.causal = causal;
        c.softmax_scale = n % 2 ? -0.3f : -0.05f;
        c.pad = 8;
        if (n % 3 == 1) {
          c.lens_q = {113, 40};
          c.lens_k = {203, 0};
        }
        c.seed = uint64_t(5150 + n++);
        SCOPED_TRACE(c.name());
        Problem pr(c);
        DeviceProblem dev(pr, FA_BACKEND_AUTO);
        run_pass(dev.p, false);
        if (HasFatalFailure()) return;
        run_pass(dev.p, true);
        if (HasFatalFailure()) return;
        expect_device_results(pr, dev, true);
      }
#endif
}

}  // namespace
}  // namespace fa::test
