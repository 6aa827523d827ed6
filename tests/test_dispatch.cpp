// The registry of kernel families (src/api/dispatch.cpp): which family a call gets, as the C ABI
// reports it (fa_select_kernel), and that the choice agrees with the run. GPU families are
// checked in the GPU suites (GpuBackward.WorkspaceFollowsParamsAndTuningOnly).
#include <gtest/gtest.h>

#include <string>

#include "api/internal.h"
#include "support.h"

namespace fa::test {
namespace {

Case small_case() {
  Case c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 5;
  c.seqlen_k = 7;
  c.head_dim = 8;
  return c;
}

TEST(Dispatch, CpuBackendsMapToTheirFamilies) {
  const Problem pr(small_case());
  const struct {
    fa_backend backend;
    const char* family;
  } rows[] = {{FA_BACKEND_AUTO, "cpu-flash"},
              {FA_BACKEND_FLASH, "cpu-flash"},
              {FA_BACKEND_REFERENCE, "cpu-reference"},
              {FA_BACKEND_VANILLA, "cpu-reference"}};
  for (const auto& r : rows)
    for (const int32_t backward : {0, 1}) {
      const fa_params p = pr.params(r.backend, backward != 0);
      const char* name = nullptr;
      ASSERT_EQ(fa_select_kernel(&p, backward, &name), FA_OK) << fa_last_error();
      EXPECT_STREQ(name, r.family) << "backend " << r.backend << " backward " << backward;
      EXPECT_STREQ(fa_last_error(), "");
      // The internal entry point with the default knobs agrees.
      const char* internal_name = nullptr;
      ASSERT_EQ(internal::select_kernel(&p, backward ? Pass::Backward : Pass::Forward, Tuning{},
                                        &internal_name),
                FA_OK);
      EXPECT_STREQ(internal_name, name);
    }
}

// Tuning::sm75 (cuda-sm75 ahead of every tiled family, on any device >= 7.5) concerns CUDA
// tensors only: CPU calls keep their families.
TEST(Dispatch, Sm75KnobLeavesCpuCallsAlone) {
  const Problem pr(small_case());
  Tuning t;
  t.sm75 = true;
  for (const fa_backend backend : {FA_BACKEND_AUTO, FA_BACKEND_FLASH, FA_BACKEND_REFERENCE})
    for (const Pass pass : {Pass::Forward, Pass::Backward}) {
      const fa_params p = pr.params(backend, pass == Pass::Backward);
      const char* name = nullptr;
      ASSERT_EQ(internal::select_kernel(&p, pass, t, &name), FA_OK) << fa_last_error();
      EXPECT_STREQ(name, backend == FA_BACKEND_REFERENCE ? "cpu-reference" : "cpu-flash");
    }
}

TEST(Dispatch, SelectValidatesLikeTheCall) {
  const Problem pr(small_case());
  fa_params p = pr.params(FA_BACKEND_AUTO, true);
  const char* name = "untouched";
  EXPECT_EQ(fa_select_kernel(&p, 1, nullptr), FA_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(fa_last_error()).find("name is NULL"), std::string::npos);
  p.softcap = -1.f;
  EXPECT_EQ(fa_select_kernel(&p, 0, &name), FA_ERROR_SOFTCAP);
  EXPECT_STREQ(name, "untouched");
  p = pr.params(FA_BACKEND_AUTO, false);
  p.dout.data = nullptr;  // the forward does not read it; the backward does
  EXPECT_EQ(fa_select_kernel(&p, 0, &name), FA_OK) << fa_last_error();
  EXPECT_EQ(fa_select_kernel(&p, 1, &name), FA_ERROR_NULL_POINTER);
  EXPECT_EQ(fa_select_kernel(nullptr, 0, &name), FA_ERROR_NULL_POINTER);
}

// A call through the internal entry points with the default knobs is the public call: same
// workspace size, same bytes out.
TEST(Dispatch, InternalEntryPointsWithDefaultKnobsAreThePublicOnes) {
  Problem a(small_case()), b(small_case());
  const fa_params pa = a.params(FA_BACKEND_AUTO, false), pb = b.params(FA_BACKEND_AUTO, false);
  size_t na = 0, nb = 0;
  ASSERT_EQ(fa_forward_workspace_size(&pa, &na), FA_OK);
  ASSERT_EQ(internal::workspace_size(&pb, Pass::Forward, Tuning{}, &nb), FA_OK);
  EXPECT_EQ(na, nb);
  std::vector<unsigned char> wa(na), wb(nb);
  ASSERT_EQ(fa_forward(&pa, wa.data(), na, nullptr), FA_OK);
  ASSERT_EQ(internal::run(&pb, Pass::Forward, Tuning{}, wb.data(), nb, nullptr), FA_OK);
  EXPECT_TRUE(a.out.bytes_equal(b.out));
  EXPECT_TRUE(a.lse.bytes_equal(b.lse));
}

}  // namespace
}  // namespace fa::test
