// The data model's seams of 0.2 that are neither a KV cache nor positions (test_kv_cache.cpp,
// test_positions.cpp) nor the combine step (test_combine.cpp):
// - the forward's LSE is optional: without it, out has the same bytes and nothing is written;
// - dtypes by role: an fp32 out / dout with fp16 or bf16 inputs on the CPU backends;
// - what only the CPU backend implements is refused for CUDA tensors, naming the feature;
// - the layouts of fa_params: the 0.1 symbol fa_params_init, the 0.2 symbol fa_params_init_v2,
//   the 0.3 symbol fa_params_init_v3 and the 0.4 symbol fa_params_init_v4 write their layouts
//   only, and a struct of 0.1's, 0.2's, 0.3's or 0.4's size is read no further than its size
//   (tests/abi/ does the same from C, against the 0.1 to 0.4 headers).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "api/params_abi.h"
#include "api/validate.h"
#include "core/dtype.h"
#include "core/error.h"
#include "support.h"

// The symbols programs built against the 0.1, 0.2, 0.3 and 0.4 headers call (this header maps
// the name to fa_params_init_v5).
extern "C" void fa_params_init_0_1(fa_params* params) __asm__("fa_params_init");
extern "C" void fa_params_init_0_2(fa_params* params) __asm__("fa_params_init_v2");
extern "C" void fa_params_init_0_3(fa_params* params) __asm__("fa_params_init_v3");
extern "C" void fa_params_init_0_4(fa_params* params) __asm__("fa_params_init_v4");

namespace fa::test {
namespace {

// ---- optional LSE ----------------------------------------------------------------------------

TEST(OptionalLse, SameOutputAndNothingWritten) {
  Case fixed;
  fixed.batch = 2;
  fixed.heads_q = 4;
  fixed.heads_kv = 2;
  fixed.seqlen_q = 70;
  fixed.seqlen_k = 133;
  fixed.head_dim = 40;
  fixed.causal = true;
  fixed.dropout_p = 0.1f;
  Case packed = fixed;
  packed.lens_q = {70, 0, 9};
  packed.lens_k = {133, 5, 0};
  Case paged = fixed;
  paged.dropout_p = 0.f;
  paged.page_size = 7;
  paged.cache_lens = {100, 3};
  for (const Case& c : {fixed, packed, paged})
    for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      SCOPED_TRACE(c.name() + (backend == FA_BACKEND_FLASH ? " flash" : " reference"));
      Problem with(c), without(c);
      run_forward(with, backend);
      fa_params p = without.params(backend);
      p.lse = fa_tensor{};
      const fa_params q = with.params(backend);
      EXPECT_EQ(fa::forward_workspace_size(p), fa::forward_workspace_size(q));
      fa::HostWorkspace ws(fa::forward_workspace_size(p));
      ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
      EXPECT_TRUE(without.out.bytes_equal(with.out));
      HostTensor poisoned(FA_DTYPE_FP32, without.lse.shape());
      poisoned.poison();
      EXPECT_TRUE(without.lse.bytes_equal(poisoned)) << "lse written without being asked for";
    }
}

// ---- dtypes by role ----------------------------------------------------------------------------

// With fp16 / bf16 inputs, an fp32 out holds the kernels' fp32 result before its rounding: the
// 16-bit run's out is that rounded, bit for bit.
TEST(DtypeRoles, Fp32OutIsTheUnroundedOutput) {
  for (fa_dtype dt : {FA_DTYPE_FP16, FA_DTYPE_BF16})
    for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      Case c;
      c.dtype = dt;
      c.batch = 2;
      c.heads_q = 2;
      c.seqlen_q = 67;
      c.seqlen_k = 129;
      c.head_dim = 64;
      c.window_left = 30;
      c.alibi = true;
      Case wide = c;
      wide.out_dtype = FA_DTYPE_FP32;
      SCOPED_TRACE(wide.name());
      Problem narrow(c), fp32(wide);
      run_forward(narrow, backend);
      run_forward(fp32, backend);
      for (int64_t i = 0; i < narrow.out.numel(); ++i) {
        const float x = float(fp32.out.get(i));
        const double rounded = dt == FA_DTYPE_FP16 ? to_float(to_half(x)) : to_float(to_bf16(x));
        ASSERT_EQ(narrow.out.get(i), rounded) << "element " << i;
      }
      EXPECT_TRUE(narrow.lse.bytes_equal(fp32.lse));
    }
}

// The backward reads an fp32 out and dout with 16-bit inputs (and writes 16-bit gradients):
// flash against the oracle by the accuracy rule.
TEST(DtypeRoles, BackwardWithFp32OutAndDout) {
  for (fa_dtype dt : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
    Case c;
    c.dtype = dt;
    c.out_dtype = FA_DTYPE_FP32;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 1;
    c.seqlen_q = 77;
    c.seqlen_k = 65;
    c.head_dim = 32;
    c.causal = true;
    c.strided = true;
    SCOPED_TRACE(c.name());
    Problem pr(c);
    run_forward(pr, FA_BACKEND_FLASH);
    run_backward(pr, FA_BACKEND_FLASH);
    const Dense got = outputs(pr, true);
    const Dense ref = reference(pr, false, true), naive = reference(pr, true, true);
    expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
    expect_rule("dq", got.dq, ref.dq, naive.dq, 3, 1e-4);
    expect_rule("dk", got.dk, ref.dk, naive.dk, 3, 1e-4);
    expect_rule("dv", got.dv, ref.dv, naive.dv, 3, 1e-4);
  }
}

// fp32 dq, dk, dv with 16-bit inputs (the unrounded gradients, as ring attention's block calls
// take them), GQA (the group's partials summed into fp32) and without: flash and the reference
// meet the rule against the fp64 oracle, and flash's 16-bit gradients are its fp32 ones rounded,
// bit for bit (one rounding, at the store).
TEST(DtypeRoles, BackwardWithFp32Gradients) {
  for (fa_dtype dt : {FA_DTYPE_FP16, FA_DTYPE_BF16})
    for (int64_t heads_kv : {4, 1}) {
      Case c;
      c.dtype = dt;
      c.batch = 2;
      c.heads_q = 4;
      c.heads_kv = heads_kv;
      c.seqlen_q = 77;
      c.seqlen_k = 65;
      c.head_dim = 32;
      c.causal = true;
      SCOPED_TRACE(c.name());
      Problem pr(c);
      run_forward(pr, FA_BACKEND_FLASH);
      run_backward(pr, FA_BACKEND_FLASH);
      const Dense rounded = outputs(pr, true);
      for (HostTensor* t : {&pr.dq, &pr.dk, &pr.dv}) *t = HostTensor(FA_DTYPE_FP32, t->shape());
      const Dense ref = reference(pr, false, true), naive = reference(pr, true, true);
      for (fa_backend be : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
        run_backward(pr, be);
        const Dense got = outputs(pr, true);
        expect_rule("dq", got.dq, ref.dq, naive.dq, 3, 1e-4);
        expect_rule("dk", got.dk, ref.dk, naive.dk, 3, 1e-4);
        expect_rule("dv", got.dv, ref.dv, naive.dv, 3, 1e-4);
        if (be != FA_BACKEND_FLASH) continue;
        auto round_to = [dt](const std::vector<double>& x) {
          HostTensor t(dt, {int64_t(x.size())});
          std::vector<double> r(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            t.set(int64_t(i), x[i]);
            r[i] = t.get(int64_t(i));
          }
          return r;
        };
        EXPECT_EQ(round_to(got.dq), rounded.dq);
        EXPECT_EQ(round_to(got.dk), rounded.dk);
        EXPECT_EQ(round_to(got.dv), rounded.dv);
      }
    }
}

// ---- CPU-only features on CUDA tensors -----------------------------------------------------------

// validate_* call check_cpu_only_features once q's device is known; without a GPU no CUDA tensor
// gets that far, so the check is called here directly, on a CPU problem's parameters moved to a
// CUDA device.
TEST(CpuOnlyFeatures, RefusedForCudaTensors) {
  Case c;
  c.dtype = FA_DTYPE_BF16;
  c.batch = 2;
  c.seqlen_q = 3;
  c.seqlen_k = 5;
  Problem pr(c);
  const HostTensor table(FA_DTYPE_INT32, {2, 1}), lens(FA_DTYPE_INT32, {2});
  auto cuda = [&](bool backward) {
    fa_params p = pr.params(FA_BACKEND_AUTO, backward);
    p.q.device = fa::cuda_device(0);
    return p;
  };
  auto expect_refused = [](const fa_params& p, bool backward, const char* fragment) {
    try {
      check_cpu_only_features(p, backward);
      ADD_FAILURE() << "not refused; expected \"" << fragment << "\"";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), FA_ERROR_UNSUPPORTED) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("supported on the CPU backend only in this build"),
                std::string::npos)
          << e.what();
    }
  };
  EXPECT_NO_THROW(check_cpu_only_features(cuda(false), false));
  EXPECT_NO_THROW(check_cpu_only_features(cuda(true), true));
  // A forward without its LSE runs on every backend (GpuForwardLse tests the CUDA kernels).
  fa_params p = cuda(false);
  p.lse.data = nullptr;
  EXPECT_NO_THROW(check_cpu_only_features(p, false));
  p = cuda(true);
  p.q_shift = -1;
  expect_refused(p, true, "q_shift");
  // The KV cache's fields (0.2's and 0.3's) and split-KV are the cuda-kvcache family's: not
  // CPU-only any more (the other CUDA families refuse them, naming it: test_gpu_kvcache.cpp).
  const HostTensor kv_new(FA_DTYPE_BF16, {2, 1, 1, 8}), cos(FA_DTYPE_BF16, {8, 2});
  const std::pair<fa_tensor fa_params::*, const HostTensor*> kv_fields[] = {
      {&fa_params::block_table, &table},     {&fa_params::cache_seqlens, &lens},
      {&fa_params::cache_batch_idx, &lens},  {&fa_params::cache_leftpad, &lens},
      {&fa_params::k_new, &kv_new},          {&fa_params::v_new, &kv_new},
      {&fa_params::rotary_cos, &cos},        {&fa_params::rotary_sin, &cos}};
  for (const auto& [field, tensor] : kv_fields) {
    p = cuda(false);
    p.*field = tensor->view().raw;
    EXPECT_NO_THROW(check_cpu_only_features(p, false));
  }
  for (int32_t n : {0, 1, 2, 128}) {
    p = cuda(false);
    p.num_splits = n;
    EXPECT_NO_THROW(check_cpu_only_features(p, false));
  }
  p = cuda(true);
  p.num_splits = 7;
  EXPECT_NO_THROW(check_cpu_only_features(p, true));
  // An fp32 out with 16-bit inputs is a CUDA forward's output (cuda-sm80 writes it; the other
  // families refuse it by name: test_gpu_ring.cpp), fp32 dq, dk, dv a CUDA backward's; the CUDA
  // backward reads out and dout in q's dtype only.
  p = cuda(false);
  p.out.dtype = FA_DTYPE_FP32;
  EXPECT_NO_THROW(check_cpu_only_features(p, false));
  p = cuda(true);
  p.out.dtype = FA_DTYPE_FP32;
  expect_refused(p, true, "out.dtype=fp32 with q.dtype=bf16 in fa_backward");
  p = cuda(true);
  p.dout.dtype = FA_DTYPE_FP32;
  expect_refused(p, true, "dout.dtype=fp32 with q.dtype=bf16 in fa_backward");
  p = cuda(true);
  p.dq.dtype = p.dk.dtype = p.dv.dtype = FA_DTYPE_FP32;
  EXPECT_NO_THROW(check_cpu_only_features(p, true));
  // A dtype no row accepts is the dtype check's to name (FA_ERROR_DTYPE), not this one's.
  p = cuda(false);
  p.out.dtype = FA_DTYPE_INT32;
  EXPECT_NO_THROW(check_cpu_only_features(p, false));
}

// fp8 e4m3 inputs (0.5): validation leaves a CUDA forward to the families (cuda-kvcache takes
// it, the others refuse it naming fp8: tests/test_gpu_kvcache.cpp) and refuses the backward on
// every device.
TEST(CpuOnlyFeatures, Fp8OnCudaTensorsLeftToTheFamilies) {
  Case c;
  c.dtype = FA_DTYPE_FP8_E4M3;
  c.out_dtype = FA_DTYPE_BF16;
  c.descale = true;
  Problem pr(c);
  fa_params p = pr.params(FA_BACKEND_AUTO, false);
  EXPECT_NO_THROW(check_fp8(p, false));  // on the CPU
  p.q.device = fa::cuda_device(0);
  // A CUDA forward is the families' to take (cuda-kvcache) or refuse (cuda/backend.cu).
  EXPECT_NO_THROW(check_fp8(p, false));
  // What no fp8 path implements is refused on either device, by name.
  for (const fa_device_type dev : {FA_DEVICE_CPU, FA_DEVICE_CUDA}) {
    p.q.device.type = dev;
    try {
      check_fp8(p, true);
      ADD_FAILURE() << "an fp8 backward not refused";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), FA_ERROR_UNSUPPORTED) << e.what();
      EXPECT_NE(std::string(e.what()).find("fa_backward"), std::string::npos) << e.what();
    }
  }
  c.dtype = FA_DTYPE_BF16;  // other dtypes: not this check's
  Problem bf(c);
  p = bf.params(FA_BACKEND_AUTO, true);
  p.q.device = fa::cuda_device(0);
  EXPECT_NO_THROW(check_fp8(p, true));
}

// ---- layouts of fa_params ----------------------------------------------------------------------

TEST(ParamsLayouts, Sizes) {
  EXPECT_EQ(kParamsSize_0_5, sizeof(fa_params));
  if (sizeof(void*) == 8) {
    EXPECT_EQ(kParamsSize_0_1, 1144u);
    EXPECT_EQ(kParamsSize_0_2, 1328u);
    EXPECT_EQ(kParamsSize_0_3, 1864u);
    EXPECT_EQ(kParamsSize_0_4, 2040u);
    EXPECT_EQ(kParamsSize_0_5, 2304u);
  }
}

// fa_params_init (the header's, i.e. fa_params_init_v5) sets every field since 0.2 to zero: the
// defaults a 0.1, 0.2, 0.3 or 0.4 struct is completed with.
TEST(ParamsLayouts, NewFieldsDefaultToZero) {
  std::vector<unsigned char> buf(sizeof(fa_params), 0xAB);
  fa_params* p = reinterpret_cast<fa_params*>(buf.data());
  fa_params_init(p);
  EXPECT_EQ(p->struct_size, sizeof(fa_params));
  for (size_t i = kParamsSize_0_1; i < sizeof(fa_params); ++i)
    ASSERT_EQ(buf[i], 0) << "byte " << i << " of fa_params";
}

// The 0.1 symbol writes exactly the 0.1 layout, with fa_params_init_v2's values there.
TEST(ParamsLayouts, SymbolOf0_1WritesItsLayoutOnly) {
  std::vector<unsigned char> old_buf(sizeof(fa_params), 0xAB), new_buf(sizeof(fa_params), 0xCD);
  fa_params_init_0_1(reinterpret_cast<fa_params*>(old_buf.data()));
  fa_params_init(reinterpret_cast<fa_params*>(new_buf.data()));
  fa_params old_p;
  std::memcpy(&old_p, old_buf.data(), sizeof old_p);
  EXPECT_EQ(old_p.struct_size, kParamsSize_0_1);
  for (size_t i = kParamsSize_0_1; i < sizeof(fa_params); ++i)
    ASSERT_EQ(old_buf[i], 0xAB) << "fa_params_init wrote byte " << i << ", past the 0.1 layout";
  // Every field of 0.1 but struct_size (padding aside: its bytes are the compiler's).
#define FA_FIELD(f) {#f, offsetof(fa_params, f), sizeof(fa_params::f)}
  const struct {
    const char* name;
    size_t offset, size;
  } fields[] = {FA_FIELD(backend),       FA_FIELD(q),            FA_FIELD(k),
                FA_FIELD(v),             FA_FIELD(out),          FA_FIELD(lse),
                FA_FIELD(dout),          FA_FIELD(dq),           FA_FIELD(dk),
                FA_FIELD(dv),            FA_FIELD(cu_seqlens_q), FA_FIELD(cu_seqlens_k),
                FA_FIELD(max_seqlen_q),  FA_FIELD(max_seqlen_k), FA_FIELD(softmax_scale),
                FA_FIELD(causal),        FA_FIELD(window_left),  FA_FIELD(window_right),
                FA_FIELD(softcap),       FA_FIELD(alibi_slopes), FA_FIELD(dropout_p),
                FA_FIELD(seed),          FA_FIELD(offset),       FA_FIELD(deterministic),
                FA_FIELD(check_inputs)};
#undef FA_FIELD
  for (const auto& f : fields)
    EXPECT_EQ(std::memcmp(old_buf.data() + f.offset, new_buf.data() + f.offset, f.size), 0)
        << f.name << " differs from fa_params_init_v5's";
}

// The 0.2 symbol writes exactly the 0.2 layout: the 0.1 fields as fa_params_init_v5 sets them, the
// 0.2 fields zero, nothing past 1328 bytes.
TEST(ParamsLayouts, SymbolOf0_2WritesItsLayoutOnly) {
  std::vector<unsigned char> old_buf(sizeof(fa_params), 0xAB), new_buf(sizeof(fa_params), 0xCD);
  fa_params_init_0_2(reinterpret_cast<fa_params*>(old_buf.data()));
  fa_params_init(reinterpret_cast<fa_params*>(new_buf.data()));
  fa_params old_p, new_p;
  std::memcpy(&old_p, old_buf.data(), sizeof old_p);
  std::memcpy(&new_p, new_buf.data(), sizeof new_p);
  EXPECT_EQ(old_p.struct_size, kParamsSize_0_2);
  for (size_t i = kParamsSize_0_2; i < sizeof(fa_params); ++i)
    ASSERT_EQ(old_buf[i], 0xAB) << "fa_params_init_v2 wrote byte " << i << ", past the 0.2 layout";
  for (size_t i = kParamsSize_0_1; i < kParamsSize_0_2; ++i)
    ASSERT_EQ(old_buf[i], 0) << "byte " << i << " of a 0.2 field";
  EXPECT_EQ(old_p.backend, new_p.backend);
  EXPECT_EQ(old_p.window_left, -1);
  EXPECT_EQ(old_p.window_right, -1);
  EXPECT_EQ(old_p.causal, new_p.causal);
  EXPECT_EQ(old_p.softmax_scale, new_p.softmax_scale);
}

// The 0.3 symbol writes exactly the 0.3 layout: the fields before 0.4's as fa_params_init_v5 sets
// them, nothing past 1864 bytes.
TEST(ParamsLayouts, SymbolOf0_3WritesItsLayoutOnly) {
  std::vector<unsigned char> old_buf(sizeof(fa_params), 0xAB), new_buf(sizeof(fa_params), 0xCD);
  fa_params_init_0_3(reinterpret_cast<fa_params*>(old_buf.data()));
  fa_params_init(reinterpret_cast<fa_params*>(new_buf.data()));
  fa_params old_p;
  std::memcpy(&old_p, old_buf.data(), sizeof old_p);
  EXPECT_EQ(old_p.struct_size, kParamsSize_0_3);
  for (size_t i = kParamsSize_0_3; i < sizeof(fa_params); ++i)
    ASSERT_EQ(old_buf[i], 0xAB) << "fa_params_init_v3 wrote byte " << i << ", past the 0.3 layout";
  // struct_size aside, the same bytes as the current initialiser's.
  EXPECT_EQ(std::memcmp(old_buf.data() + sizeof(size_t), new_buf.data() + sizeof(size_t),
                        kParamsSize_0_3 - sizeof(size_t)),
            0);
}

// The 0.4 symbol writes exactly the 0.4 layout: the fields before 0.5's as fa_params_init_v5 sets
// them, nothing past 2040 bytes.
TEST(ParamsLayouts, SymbolOf0_4WritesItsLayoutOnly) {
  std::vector<unsigned char> old_buf(sizeof(fa_params), 0xAB), new_buf(sizeof(fa_params), 0xCD);
  fa_params_init_0_4(reinterpret_cast<fa_params*>(old_buf.data()));
  fa_params_init(reinterpret_cast<fa_params*>(new_buf.data()));
  fa_params old_p;
  std::memcpy(&old_p, old_buf.data(), sizeof old_p);
  EXPECT_EQ(old_p.struct_size, kParamsSize_0_4);
  for (size_t i = kParamsSize_0_4; i < sizeof(fa_params); ++i)
    ASSERT_EQ(old_buf[i], 0xAB) << "fa_params_init_v4 wrote byte " << i << ", past the 0.4 layout";
  EXPECT_EQ(std::memcmp(old_buf.data() + sizeof(size_t), new_buf.data() + sizeof(size_t),
                        kParamsSize_0_4 - sizeof(size_t)),
            0);
}

// A struct of 0.1's size runs as 0.1 did: whatever lies past its size (here a 0.2 struct's
// fields, set to values that would change the result or be refused) is never read.
TEST(ParamsLayouts, StructOf0_1SizeIgnoresLaterFields) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.seqlen_q = 20;
  c.seqlen_k = 30;
  c.causal = true;
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Problem plain(c), old(c);
    run_forward(plain, backend);
    run_backward(plain, backend);
    fa_params p = old.params(backend, true);
    p.struct_size = kParamsSize_0_1;
    p.q_shift = 5;
    p.block_table.data = reinterpret_cast<void*>(uintptr_t(8));  // not a tensor
    p.cache_seqlens.data = reinterpret_cast<void*>(uintptr_t(16));
    fa::HostWorkspace ws(fa::forward_workspace_size(p));
    ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
    fa::HostWorkspace wsb(fa::backward_workspace_size(p));
    ASSERT_EQ(fa_backward(&p, wsb.data(), wsb.size(), nullptr), FA_OK) << fa_last_error();
    for (auto [a, b] : {std::pair{&plain.out, &old.out}, std::pair{&plain.lse, &old.lse},
                        std::pair{&plain.dq, &old.dq}, std::pair{&plain.dk, &old.dk},
                        std::pair{&plain.dv, &old.dv}})
      EXPECT_TRUE(a->bytes_equal(*b));
  }
}

// A struct of 0.2's size runs as 0.2 did: a paged forward with cache_seqlens and q_shift whose
// 0.3 fields (here set to values that would change the result or be refused: an append, rotary,
// a leftpad, a split count out of range) are never read.
TEST(ParamsLayouts, StructOf0_2SizeIgnoresLaterFields) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.seqlen_q = 3;
  c.seqlen_k = 30;
  c.page_size = 7;
  c.cache_lens = {30, 11};
  c.causal = true;
  c.q_shift = -1;
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Problem plain(c), old(c);
    run_forward(plain, backend);
    fa_params p = old.params(backend, false);
    p.struct_size = kParamsSize_0_2;
    p.k_new.data = reinterpret_cast<void*>(uintptr_t(8));  // not tensors
    p.v_new.data = reinterpret_cast<void*>(uintptr_t(16));
    p.rotary_cos.data = reinterpret_cast<void*>(uintptr_t(24));
    p.cache_leftpad.data = reinterpret_cast<void*>(uintptr_t(32));
    p.num_splits = -5;
    fa::HostWorkspace ws(fa::forward_workspace_size(p));
    ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
    EXPECT_TRUE(plain.out.bytes_equal(old.out));
    EXPECT_TRUE(plain.lse.bytes_equal(old.lse));
  }
}

// A struct of 0.3's size runs as 0.3 did: 0.4's attn_bias and dbias past its size (here set to
// pointers that are not tensors) are never read, forward and backward.
TEST(ParamsLayouts, StructOf0_3SizeIgnoresLaterFields) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.seqlen_q = 20;
  c.seqlen_k = 30;
  c.causal = true;
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Problem plain(c), old(c);
    run_forward(plain, backend);
    run_backward(plain, backend);
    fa_params p = old.params(backend, true);
    p.struct_size = kParamsSize_0_3;
    p.attn_bias.data = reinterpret_cast<void*>(uintptr_t(8));
    p.attn_bias.rank = 7;
    p.dbias.data = reinterpret_cast<void*>(uintptr_t(16));
    fa::HostWorkspace ws(fa::forward_workspace_size(p));
    ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
    fa::HostWorkspace wsb(fa::backward_workspace_size(p));
    ASSERT_EQ(fa_backward(&p, wsb.data(), wsb.size(), nullptr), FA_OK) << fa_last_error();
    for (auto [a, b] : {std::pair{&plain.out, &old.out}, std::pair{&plain.lse, &old.lse},
                        std::pair{&plain.dq, &old.dq}, std::pair{&plain.dk, &old.dk},
                        std::pair{&plain.dv, &old.dv}})
      EXPECT_TRUE(a->bytes_equal(*b));
  }
}

// A struct of 0.4's size runs as 0.4 did: 0.5's descales past its size (here pointers that are
// not tensors) are never read.
TEST(ParamsLayouts, StructOf0_4SizeIgnoresLaterFields) {
  Case c;
  c.batch = 2;
  c.heads_q = 2;
  c.seqlen_q = 20;
  c.seqlen_k = 30;
  c.causal = true;
  for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
    Problem plain(c), old(c);
    run_forward(plain, backend);
    run_backward(plain, backend);
    fa_params p = old.params(backend, true);
    p.struct_size = kParamsSize_0_4;
    for (fa_tensor* t : {&p.q_descale, &p.k_descale, &p.v_descale}) {
      t->data = reinterpret_cast<void*>(uintptr_t(8));
      t->rank = 9;
    }
    fa::HostWorkspace ws(fa::forward_workspace_size(p));
    ASSERT_EQ(fa_forward(&p, ws.data(), ws.size(), nullptr), FA_OK) << fa_last_error();
    fa::HostWorkspace wsb(fa::backward_workspace_size(p));
    ASSERT_EQ(fa_backward(&p, wsb.data(), wsb.size(), nullptr), FA_OK) << fa_last_error();
    for (auto [a, b] : {std::pair{&plain.out, &old.out}, std::pair{&plain.lse, &old.lse},
                        std::pair{&plain.dq, &old.dq}, std::pair{&plain.dk, &old.dk},
                        std::pair{&plain.dv, &old.dv}})
      EXPECT_TRUE(a->bytes_equal(*b));
  }
}

}  // namespace
}  // namespace fa::test
