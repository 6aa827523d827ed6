// The Turing family's host-side choices (src/cuda/kernels/sm75/fwd_traits.h, bwd_traits.h,
// fwd_sm75.cpp, bwd_sm75.cu), without a GPU: every instantiated head dim's tiles fit Turing's 64
// KB a block, two blocks share an SM where shared memory allows, whole dropout blocks a key tile,
// the backward's warp tiles cover its products exactly; and, in CUDA builds, the family's
// refusals (dtype, compute capability, a build without sm75 code, a backward above d 128) name
// the family and the reason, on device properties set by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/validate.h"
#include "cuda/instantiations/head_dims.h"
#include "cuda/kernels/sm75/bwd_traits.h"
#include "cuda/kernels/sm75/fwd_traits.h"
#include "support.h"

#ifdef FA_TEST_CUDA
#include "core/cuda_backend.h"
#include "cuda/fwd_sm75.h"
#endif

namespace fa::test {
namespace {

template <class T>
void expect_plan_fits() {
  SCOPED_TRACE("d" + std::to_string(T::kHeadDim) + (T::kDropout ? " dropout" : ""));
  EXPECT_LE(T::kSmemBytes, 64 * 1024);
  EXPECT_EQ(T::kSmemBytes, 2 * (T::kBlockM + 2 * T::kBlockN) * 64 * ((T::kHeadDim + 63) / 64));
  EXPECT_EQ(T::kMinBlocksPerSm, 2 * T::kSmemBytes <= 64 * 1024 ? 2 : 1);
  EXPECT_EQ(T::kBlockN % 32, 0);  // apply_dropout's 32-key Philox blocks
  EXPECT_EQ(T::kBlockM, 16 * T::kMTiles * T::kWarps);
  // Two blocks of 128 threads at up to 255 registers fill, not exceed, the SM's 64 K.
  EXPECT_LE(T::kMinBlocksPerSm * T::kThreads * 256, 64 * 1024);
}

TEST(Sm75Plan, EveryHeadDimFitsTuringSharedMemory) {
#define FA_SM75_PLAN(D)                                \
  expect_plan_fits<cuda::sm75::FwdTraits<D, false>>(); \
  expect_plan_fits<cuda::sm75::FwdTraits<D, true>>();
  FA_SM80_HEAD_DIMS(FA_SM75_PLAN)
#undef FA_SM75_PLAN
  // Up to d 128 two blocks share an SM (8 warps); d 256 takes the whole 64 KB.
  EXPECT_EQ((cuda::sm75::FwdTraits<128, false>::kMinBlocksPerSm), 2);
  EXPECT_EQ((cuda::sm75::FwdTraits<64, false>::kMinBlocksPerSm), 2);
  EXPECT_EQ((cuda::sm75::FwdTraits<256, false>::kSmemBytes), 64 * 1024);
}

template <class T>
void expect_bwd_plan_fits() {
  SCOPED_TRACE("backward d" + std::to_string(T::kHeadDim) + (T::kDropout ? " dropout" : ""));
  EXPECT_LE(T::kSmemBytes, 64 * 1024);
  // K, V (kBlockN rows), Q, dO (kBlockM rows), Pᵀ, dSᵀ (kBlockN x kBlockM), 64-column blocks of
  // 16-bit elements; LSE and D in fp32.
  const int blocks_d = (T::kHeadDim + 63) / 64, blocks_m = (T::kBlockM + 63) / 64;
  EXPECT_EQ(T::kSmemBytes, 2 * 64 * ((2 * T::kBlockN + 2 * T::kBlockM) * blocks_d +
                                     2 * T::kBlockN * blocks_m) +
                               2 * T::kBlockM * 4);
  EXPECT_EQ(T::kBlockM, 64);  // the workspace's query tiles (sm80::kBwdBlockM)
  // Each product's warp tiles cover it once: Sᵀ / dPᵀ (keys x queries), dK / dV (keys x d), dQ
  // (queries x d).
  EXPECT_EQ(T::kSWarpsN * T::kSKeys, T::kBlockN);
  EXPECT_EQ(T::kSWarpsM * T::kSQueries, T::kBlockM);
  EXPECT_EQ(T::kSWarpsN * T::kSWarpsM, T::kWarps);
  EXPECT_EQ(T::kKvWarpsN * T::kKvKeys, T::kBlockN);
  EXPECT_EQ(T::kKvWarpsD * T::kKvCols, T::kHeadDim);
  EXPECT_EQ(T::kDqWarpsM * T::kDqRows, T::kBlockM);
  EXPECT_EQ(T::kDqWarpsD * T::kDqCols, T::kHeadDim);
  EXPECT_EQ(T::kSKeys, 32);  // keep_bits: whole 32-key dropout blocks a warp tile
  // The dQ accumulator's tile order is a bijection of the step's tile.
  std::vector<int> seen(T::kBlockM * T::kHeadDim, 0);
  for (int r = 0; r < T::kBlockM; ++r)
    for (int c = 0; c < T::kHeadDim; ++c) {
      const int o = T::DqLayout::offset(r, c);
      ASSERT_GE(o, 0);
      ASSERT_LT(o, T::kBlockM * T::kHeadDim);
      ++seen[o];
    }
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(Sm75Plan, BackwardTilesFitTuringSharedMemory) {
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<32, false>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<32, true>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<64, false>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<64, true>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<96, false>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<96, true>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<128, false>>();
  expect_bwd_plan_fits<cuda::sm75::BwdTraits<128, true>>();
  EXPECT_EQ((cuda::sm75::BwdTraits<64, false>::kSmemBytes), 48 * 1024 + 512);
  EXPECT_EQ((cuda::sm75::BwdTraits<128, false>::kSmemBytes), 56 * 1024 + 512);
  EXPECT_EQ(cuda::sm75::kBwdMaxHeadDim, 128);
}

#ifdef FA_TEST_CUDA
// The status and message of cuda-sm75's check (the backend table's) on a validated call of dtype dt, on a device of
// compute capability major.minor; "" and FA_OK when the family takes it.
std::pair<fa_status, std::string> sm75_check(fa_dtype dt, int major, int minor,
                                             int64_t head_dim = 64) {
  Case c;
  c.dtype = dt;
  c.head_dim = head_dim;
  c.seqlen_q = 5;
  c.seqlen_k = 7;
  c.pad = 8;
  const Problem pr(c);
  const fa_params raw = pr.params(FA_BACKEND_AUTO, false);
  const Params p = validate_forward(&raw);
  Context ctx;
  ctx.device.major = major;
  ctx.device.minor = minor;
  ctx.tuning.sm75 = true;
  const char* message = nullptr;  // the backend table's check: padding included
  const fa_status st = cuda_backend().check(CudaFamily::Sm75, &p, 0, &ctx, &message);
  return {st, st == FA_OK ? "" : message};
}

TEST(Sm75Plan, RefusalsNameTheFamilyAndTheReason) {
  const auto [bf16, bf16_why] = sm75_check(FA_DTYPE_BF16, 7, 5);
  EXPECT_EQ(bf16, FA_ERROR_UNSUPPORTED);
  EXPECT_NE(bf16_why.find("cuda-sm75"), std::string::npos) << bf16_why;
  EXPECT_NE(bf16_why.find("q.dtype=bf16"), std::string::npos) << bf16_why;
  const auto [fp32, fp32_why] = sm75_check(FA_DTYPE_FP32, 9, 0);
  EXPECT_EQ(fp32, FA_ERROR_UNSUPPORTED);
  EXPECT_NE(fp32_why.find("q.dtype=fp32"), std::string::npos) << fp32_why;
  const auto [volta, volta_why] = sm75_check(FA_DTYPE_FP16, 7, 0);
  EXPECT_EQ(volta, FA_ERROR_BACKEND);
  EXPECT_NE(volta_why.find("compute capability 7.0"), std::string::npos) << volta_why;
  // fp16 on Turing and (forced) on Hopper: taken where the build has sm75 code, else refused
  // by name.
  for (const int major : {7, 9}) {
    const auto [st, why] = sm75_check(FA_DTYPE_FP16, major, major == 7 ? 5 : 0);
    if (st == FA_OK) continue;
    EXPECT_EQ(st, FA_ERROR_BACKEND);
    EXPECT_NE(why.find("no sm75 code"), std::string::npos) << why;
  }
  // A head dim that is not a multiple of 8 runs on padded copies, whose kernels have no sm_75
  // code: refused on Turing, by name; on newer GPUs the padding runs (or the build lacks sm75).
  const auto [turing, turing_why] = sm75_check(FA_DTYPE_FP16, 7, 5, 36);
  EXPECT_EQ(turing, FA_ERROR_HEAD_DIM);
  EXPECT_NE(turing_why.find("cuda-sm75: head_dim=36 must be a multiple of 8"), std::string::npos)
      << turing_why;
  const auto [hopper, hopper_why] = sm75_check(FA_DTYPE_FP16, 9, 0, 36);
  EXPECT_TRUE(hopper == FA_OK || hopper_why.find("no sm75 code") != std::string::npos)
      << hopper_why;
}

// The backward: above d 128 refused by name (where the build has sm75 backward kernels; else the
// build's refusal), a packed batch refused on Turing; bf16 as the forward.
TEST(Sm75Plan, BackwardRefusalsNameTheFamilyAndTheReason) {
  auto check = [](int major, int minor, int64_t head_dim, bool varlen) {
    Case c;
    c.dtype = FA_DTYPE_FP16;
    c.head_dim = head_dim;
    c.seqlen_q = 5;
    c.seqlen_k = 7;
    c.pad = 8;
    if (varlen) {
      c.batch = 2;
      c.lens_q = {5, 3};
      c.lens_k = {7, 2};
    }
    const Problem pr(c);
    const fa_params raw = pr.params(FA_BACKEND_AUTO, true);
    const Params p = validate_backward(&raw);
    Context ctx;
    ctx.device.major = major;
    ctx.device.minor = minor;
    ctx.tuning.sm75 = true;
    const char* message = nullptr;
    const fa_status st = cuda_backend().check(CudaFamily::Sm75, &p, 1, &ctx, &message);
    return std::pair<fa_status, std::string>{st, st == FA_OK ? "" : message};
  };
  const auto [plain, plain_why] = check(9, 0, 64, false);
  if (plain != FA_OK) {  // a build without sm75 (backward) code
    EXPECT_EQ(plain, FA_ERROR_BACKEND);
    EXPECT_NE(plain_why.find("cuda-sm75: this build has no sm75"), std::string::npos) << plain_why;
    return;
  }
  const auto [wide, wide_why] = check(9, 0, 160, false);
  EXPECT_EQ(wide, FA_ERROR_UNSUPPORTED);
  EXPECT_NE(wide_why.find("cuda-sm75: head_dim=160"), std::string::npos) << wide_why;
  const auto [packed, packed_why] = check(7, 5, 64, true);
  EXPECT_EQ(packed, FA_ERROR_UNSUPPORTED);
  EXPECT_NE(packed_why.find("cuda-sm75: a packed (cu_seqlens) backward"), std::string::npos)
      << packed_why;
  EXPECT_EQ(check(9, 0, 64, true).first, FA_OK);  // newer GPUs sanitize cu_seqlens
}
#endif

}  // namespace
}  // namespace fa::test
