// Validation catalogue: every bad input the four entry points (fa_forward, fa_backward and their
// workspace queries) must reject before touching memory. One table row per case: the valid
// problem it starts from, the entry points it applies to, the one thing it breaks, the expected
// status and fragments of fa_last_error() that name the argument and its value. Every row checks
// that nothing was written: outputs are poisoned, every buffer of the call (inputs, outputs,
// workspace, the size out-argument) is snapshotted after the mutation and compared after the call.
//
// tests/validation_catalogue.md is the same table for readers; CatalogueDocumentMatchesTable
// keeps the two in sync (FA_UPDATE_VALIDATION_CATALOGUE=1 rewrites the document's table).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

namespace fa::test {
namespace {

// ---------------------------------------------------------------------------------------------
// Vocabulary

// Entry points, as a bit set.
enum EntryPoint : unsigned {
  kFwdSize = 1u << 0,  // fa_forward_workspace_size
  kBwdSize = 1u << 1,  // fa_backward_workspace_size
  kFwd = 1u << 2,      // fa_forward
  kBwd = 1u << 3,      // fa_backward
};
constexpr unsigned kAll = kFwdSize | kBwdSize | kFwd | kBwd;
constexpr unsigned kBackward = kBwdSize | kBwd;  // what only the backward reads: dout, dq, dk, dv
constexpr unsigned kQueries = kFwdSize | kBwdSize;
constexpr unsigned kRuns = kFwd | kBwd;
constexpr unsigned kForward = kFwdSize | kFwd;  // what the backward does not take: a KV cache
constexpr EntryPoint kEntryPoints[] = {kFwdSize, kBwdSize, kFwd, kBwd};

const char* entry_point_name(EntryPoint e) {
  switch (e) {
    case kFwdSize: return "fa_forward_workspace_size";
    case kBwdSize: return "fa_backward_workspace_size";
    case kFwd: return "fa_forward";
    case kBwd: return "fa_backward";
  }
  return "?";
}

std::string entry_points_text(unsigned set) {
  switch (set) {
    case kAll: return "all";
    case kBackward: return "backward, backward_size";
    case kQueries: return "forward_size, backward_size";
    case kRuns: return "forward, backward";
    case kForward: return "forward, forward_size";
  }
  return "?";
}

const char* status_name(fa_status s) {
  static const char* const kNames[] = {
      "FA_OK",           "FA_ERROR_NULL_POINTER", "FA_ERROR_DTYPE",       "FA_ERROR_RANK",
      "FA_ERROR_SHAPE",  "FA_ERROR_HEAD_DIM",     "FA_ERROR_HEADS",       "FA_ERROR_STRIDE",
      "FA_ERROR_ALIGNMENT", "FA_ERROR_SIZE",      "FA_ERROR_CU_SEQLENS",  "FA_ERROR_WINDOW",
      "FA_ERROR_DROPOUT", "FA_ERROR_SOFTCAP",     "FA_ERROR_SCALE",       "FA_ERROR_DEVICE",
      "FA_ERROR_WORKSPACE", "FA_ERROR_ALIBI",     "FA_ERROR_UNSUPPORTED", "FA_ERROR_VERSION",
      "FA_ERROR_BACKEND", "FA_ERROR_CUDA",        "FA_ERROR_INTERNAL"};
  const int i = int(s);
  return i >= 0 && i < int(std::size(kNames)) ? kNames[i] : "FA_STATUS_UNKNOWN";
}

// The valid problem a case starts from; its mutation then breaks exactly one thing.
//   F32, F16:  q (2, 5, 4, 8), k/v (2, 7, 2, 8), lse (2, 4, 5), contiguous
//   Strided:   the same shapes in bf16, (batch, heads, seq, dim) memory order, padded rows
//   Packed:    fp32, lens_q {3, 5}, lens_k {4, 6}: q (8, 4, 8), k/v (10, 2, 8), lse (4, 8),
//              cu_seqlens_q {0, 3, 8}, cu_seqlens_k {0, 4, 10}, max_seqlen 5 / 6
//   Alibi:     F32 plus fp32 slopes (2, 4);  PackedAlibi: Packed plus slopes (2, 4)
//   Paged:     F32 with k/v in a paged cache (forward only): 8 blocks of 3 keys (2, 3, 2, 8),
//              block_table (2, 3) {{b0, b1, b2}, {b3, b4, -1}}, cache_seqlens {7, 4}
//   Append:    F32 with a dense cache (forward only) and the rest of flash_attn_with_kvcache:
//              cache_seqlens {3, 4}, k_new / v_new (2, 2, 2, 8), rotary_cos / rotary_sin fp32
//              (8, 2) interleaved (rotary_dim 4 of 8), cache_leftpad {1, 0}, cache_batch_idx
//              {1, 0}, num_splits 3
//   Bias:      F32 plus an fp32 attn_bias (2, 4, 5, 7) and, in the backward, an fp32 dbias of
//              its shape (fa_params 0.4)
//   Fp8:       the F32 shapes with fp8 e4m3 q, k, v, a bf16 out and fp32 q_descale, k_descale,
//              v_descale (2, 2) (fa_params 0.5; forward only)
enum class Base { F32, F16, Strided, Packed, Alibi, PackedAlibi, Paged, Append, Bias, Fp8 };
constexpr Base kBases[] = {Base::F32,   Base::F16,         Base::Strided, Base::Packed,
                           Base::Alibi, Base::PackedAlibi, Base::Paged,   Base::Append,
                           Base::Bias,  Base::Fp8};
bool forward_only(Base b) { return b == Base::Paged || b == Base::Append || b == Base::Fp8; }

Case base_case(Base b) {
  Case c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.seqlen_q = 5;
  c.seqlen_k = 7;
  c.head_dim = 8;
  c.seed = 1;  // odd: ALiBi slopes are (batch, heads_q)
  const bool packed = b == Base::Packed || b == Base::PackedAlibi;
  if (packed) {
    c.lens_q = {3, 5};
    c.lens_k = {4, 6};
  }
  if (b == Base::F16) c.dtype = FA_DTYPE_FP16;
  if (b == Base::Strided) {
    c.dtype = FA_DTYPE_BF16;
    c.strided = true;
  }
  c.alibi = b == Base::Alibi || b == Base::PackedAlibi;
  if (b == Base::Paged) {
    c.page_size = 3;
    c.cache_lens = {7, 4};
  }
  if (b == Base::Append) c.cache_lens = {3, 4};  // the other inputs: Call::attach_append
  if (b == Base::Bias) {
    c.bias_dtype = FA_DTYPE_FP32;
    c.dbias = true;
  }
  if (b == Base::Fp8) {
    c.dtype = FA_DTYPE_FP8_E4M3;
    c.out_dtype = FA_DTYPE_BF16;
    c.descale = true;
  }
  return c;
}

const char* base_name(Base b) {
  switch (b) {
    case Base::F32: return "F32";
    case Base::F16: return "F16";
    case Base::Strided: return "Strided";
    case Base::Packed: return "Packed";
    case Base::Alibi: return "Alibi";
    case Base::PackedAlibi: return "PackedAlibi";
    case Base::Paged: return "Paged";
    case Base::Append: return "Append";
    case Base::Bias: return "Bias";
    case Base::Fp8: return "Fp8";
  }
  return "?";
}

// A byte-for-byte copy of a HostTensor's whole storage (padding included), as a 1-D tensor
// whose storage has the same size, so HostTensor::bytes_equal compares the two.
HostTensor clone(const HostTensor& t) {
  int64_t elems = 1;  // HostTensor storage = the outermost dim's extent = max(shape * stride)
  for (size_t i = 0; i < t.shape().size(); ++i)
    elems = std::max(elems, t.shape()[i] * t.strides()[i]);
  HostTensor copy(t.dtype(), {elems});
  std::memcpy(copy.data(), t.data(), size_t(elems * copy.elem_size()));
  return copy;
}

// One call of one entry point: a valid problem with poisoned outputs, its parameters, and a
// poisoned workspace of exactly the size the query reports. A case's mutation edits any of it.
class Call {
 public:
  Call(Base base, EntryPoint entry)
      : pr(base_case(base)), p(pr.params(FA_BACKEND_AUTO, (entry & kBackward) != 0)) {
    pr.poison_outputs();
    if (base == Base::Append) attach_append();
    size_t need = 0;
    const fa_status s = (entry & kBackward) ? fa_backward_workspace_size(&p, &need)
                                            : fa_forward_workspace_size(&p, &need);
    EXPECT_EQ(s, FA_OK) << "base problem " << base_name(base) << " is invalid: "
                        << fa_last_error();
    workspace_buf = HostTensor(FA_DTYPE_FP32, {int64_t(need / 4 + 1)});
    workspace_buf.poison();
    workspace = workspace_buf.data();
    workspace_bytes = need;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Keeps a tensor the mutation brings in alive (and snapshotted) for the call.
  HostTensor& add(HostTensor t) { return extra.emplace_back(std::move(t)); }
  // An int32 vector of the given values, kept alive.
  fa_tensor add_ints(const std::vector<int32_t>& values) {
    HostTensor& t = add(HostTensor(FA_DTYPE_INT32, {int64_t(values.size())}));
    for (size_t i = 0; i < values.size(); ++i) t.set(int64_t(i), values[i]);
    return t.view().raw;
  }
  // A tensor of fresh random values, kept alive.
  fa_tensor add_random(fa_dtype dtype, std::vector<int64_t> shape, uint64_t seed) {
    HostTensor& t = add(HostTensor(dtype, std::move(shape)));
    std::mt19937_64 rng(seed);
    t.fill_normal(rng);
    return t.view().raw;
  }
  // The Append base's inputs beyond its Problem (see Base).
  void attach_append() {
    p.k_new = add_random(FA_DTYPE_FP32, {2, 2, 2, 8}, 11);
    p.v_new = add_random(FA_DTYPE_FP32, {2, 2, 2, 8}, 12);
    p.rotary_cos = add_random(FA_DTYPE_FP32, {8, 2}, 13);
    p.rotary_sin = add_random(FA_DTYPE_FP32, {8, 2}, 14);
    p.rotary_interleaved = 1;
    p.cache_leftpad = add_ints({1, 0});
    p.cache_batch_idx = add_ints({1, 0});
    p.num_splits = 3;
  }

  fa_status invoke(EntryPoint entry, size_t* bytes) const {
    const fa_params* pp = null_params ? nullptr : &p;
    size_t* out = null_bytes ? nullptr : bytes;
    switch (entry) {
      case kFwdSize: return fa_forward_workspace_size(pp, out);
      case kBwdSize: return fa_backward_workspace_size(pp, out);
      case kFwd: return fa_forward(pp, workspace, workspace_bytes, nullptr);
      case kBwd: return fa_backward(pp, workspace, workspace_bytes, nullptr);
    }
    return FA_ERROR_INTERNAL;
  }

  // Every buffer of the call, by name.
  std::vector<std::pair<std::string, const HostTensor*>> buffers() const {
    std::vector<std::pair<std::string, const HostTensor*>> r = {
        {"q", &pr.q},       {"k", &pr.k},       {"v", &pr.v},   {"out", &pr.out},
        {"lse", &pr.lse},   {"dout", &pr.dout}, {"dq", &pr.dq}, {"dk", &pr.dk},
        {"dv", &pr.dv},     {"cu_seqlens_q", &pr.cu_q},         {"cu_seqlens_k", &pr.cu_k},
        {"alibi_slopes", &pr.alibi},            {"workspace", &workspace_buf},
        {"k_pages", &pr.k_pages},               {"v_pages", &pr.v_pages},
        {"block_table", &pr.block_table},       {"cache_seqlens", &pr.cache_seqlens},
        {"attn_bias", &pr.bias},                {"dbias", &pr.dbias},
        {"q_descale", &pr.q_descale},           {"k_descale", &pr.k_descale},
        {"v_descale", &pr.v_descale}};
    for (size_t i = 0; i < extra.size(); ++i) r.emplace_back("extra" + std::to_string(i), &extra[i]);
    return r;
  }

  Problem pr;
  fa_params p;
  bool null_params = false, null_bytes = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

 private:
  HostTensor workspace_buf;
  std::deque<HostTensor> extra;  // a deque: add() hands out references that must stay valid
};

// The tensors that share q's or k's layout (q, k, v, out and, for the backward, dout, dq, dk, dv).
void each_data_tensor(fa_params& p, const std::function<void(fa_tensor&)>& f) {
  for (fa_tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.dout, &p.dq, &p.dk, &p.dv})
    if (t->data != nullptr) f(*t);
}
// Every tensor present in the call.
void each_tensor(fa_params& p, const std::function<void(fa_tensor&)>& f) {
  each_data_tensor(p, f);
  for (fa_tensor* t : {&p.lse, &p.cu_seqlens_q, &p.cu_seqlens_k, &p.alibi_slopes, &p.block_table,
                       &p.cache_seqlens, &p.cache_batch_idx, &p.cache_leftpad, &p.k_new, &p.v_new,
                       &p.rotary_cos, &p.rotary_sin, &p.attn_bias, &p.dbias, &p.q_descale,
                       &p.k_descale, &p.v_descale})
    if (t->data != nullptr) f(*t);
}
void set_device(fa_params& p, fa_device d) {
  each_tensor(p, [&](fa_tensor& t) { t.device = d; });
}
void* shifted(void* p, int bytes) { return static_cast<unsigned char*>(p) + bytes; }
// An int32 index tensor the mutation brings in, all zeros.
fa_tensor index_tensor(Call& c, std::vector<int64_t> shape) {
  return c.add(HostTensor(FA_DTYPE_INT32, std::move(shape))).view().raw;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// The catalogue

struct Entry {
  const char* name;      // the test's name
  Base base;             // valid problem the mutation starts from
  unsigned points;       // entry points (EntryPoint bits) that must reject it
  const char* argument;  // catalogue: the bad argument
  const char* bad;       // catalogue: its bad value
  std::function<void(Call&)> mutate;
  fa_status status;
  std::vector<std::string> fragments;  // each must occur in fa_last_error()
};

void PrintTo(const Entry& e, std::ostream* os) { *os << e.name; }

const std::vector<Entry>& catalogue() {
  static const std::vector<Entry> entries = {
      // --- parameter block, out-argument, ABI version, backend ---------------------------------
      {"params_null", Base::F32, kAll, "params", "NULL",
       [](Call& c) { c.null_params = true; }, FA_ERROR_NULL_POINTER, {"params is NULL"}},
      {"bytes_null", Base::F32, kQueries, "bytes", "NULL",
       [](Call& c) { c.null_bytes = true; }, FA_ERROR_NULL_POINTER, {"bytes is NULL"}},
      {"struct_size_zero", Base::F32, kAll, "params.struct_size", "0 (fa_params_init not called)",
       [](Call& c) { c.p.struct_size = 0; }, FA_ERROR_VERSION,
       {"params.struct_size=0 is not a known size", "call fa_params_init first"}},
      {"struct_size_smaller", Base::F32, kAll, "params.struct_size", "sizeof(fa_params) - 8",
       [](Call& c) { c.p.struct_size -= 8; }, FA_ERROR_VERSION,
       {"params.struct_size=" + std::to_string(sizeof(fa_params) - 8)}},
      {"struct_size_larger", Base::F32, kAll, "params.struct_size", "sizeof(fa_params) + 8",
       [](Call& c) { c.p.struct_size += 8; }, FA_ERROR_VERSION,
       {"params.struct_size=" + std::to_string(sizeof(fa_params) + 8)}},
      {"struct_size_between_layouts", Base::F32, kAll, "params.struct_size",
       "1152 (between 0.1's 1144 and 0.2's 1328)", [](Call& c) { c.p.struct_size = 1152; },
       FA_ERROR_VERSION,
       {"params.struct_size=1152 is not a known size (1144 for version 0.1, 1328 for 0.2, 1864 "
        "for 0.3, 2040 for 0.4, 2304 for 0.5)"}},
      {"struct_size_between_0_2_and_0_3", Base::F32, kAll, "params.struct_size",
       "1400 (between 0.2's 1328 and 0.3's 1864)", [](Call& c) { c.p.struct_size = 1400; },
       FA_ERROR_VERSION, {"params.struct_size=1400 is not a known size"}},
      {"struct_size_between_0_3_and_0_4", Base::F32, kAll, "params.struct_size",
       "1952 (between 0.3's 1864 and 0.4's 2040)", [](Call& c) { c.p.struct_size = 1952; },
       FA_ERROR_VERSION, {"params.struct_size=1952 is not a known size"}},
      {"struct_size_between_0_4_and_0_5", Base::F32, kAll, "params.struct_size",
       "2128 (between 0.4's 2040 and 0.5's 2304)", [](Call& c) { c.p.struct_size = 2128; },
       FA_ERROR_VERSION, {"params.struct_size=2128 is not a known size"}},
      {"struct_size_below_0_1", Base::F32, kAll, "params.struct_size", "1136 (0.1's size - 8)",
       [](Call& c) { c.p.struct_size = 1136; }, FA_ERROR_VERSION,
       {"params.struct_size=1136 is not a known size"}},
      {"backend_past_last", Base::F32, kAll, "params.backend", "4",
       [](Call& c) { c.p.backend = 4; }, FA_ERROR_BACKEND,
       {"params.backend=4 is not an fa_backend value"}},
      {"backend_negative", Base::F32, kAll, "params.backend", "-1",
       [](Call& c) { c.p.backend = -1; }, FA_ERROR_BACKEND, {"params.backend=-1"}},

      // --- NULL tensor data --------------------------------------------------------------------
      {"q_data_null", Base::F32, kAll, "q.data", "NULL",
       [](Call& c) { c.p.q.data = nullptr; }, FA_ERROR_NULL_POINTER, {"q.data is NULL"}},
      {"k_data_null", Base::F32, kAll, "k.data", "NULL",
       [](Call& c) { c.p.k.data = nullptr; }, FA_ERROR_NULL_POINTER, {"k.data is NULL"}},
      {"v_data_null", Base::F32, kAll, "v.data", "NULL",
       [](Call& c) { c.p.v.data = nullptr; }, FA_ERROR_NULL_POINTER, {"v.data is NULL"}},
      {"out_data_null", Base::F32, kAll, "out.data", "NULL",
       [](Call& c) { c.p.out.data = nullptr; }, FA_ERROR_NULL_POINTER, {"out.data is NULL"}},
      {"lse_data_null_backward", Base::F32, kBackward, "lse.data",
       "NULL (optional in the forward only)", [](Call& c) { c.p.lse.data = nullptr; },
       FA_ERROR_NULL_POINTER, {"lse.data is NULL; the backward needs the forward's lse"}},
      {"dout_data_null", Base::F32, kBackward, "dout.data", "NULL",
       [](Call& c) { c.p.dout.data = nullptr; }, FA_ERROR_NULL_POINTER, {"dout.data is NULL"}},
      {"dq_data_null", Base::F32, kBackward, "dq.data", "NULL",
       [](Call& c) { c.p.dq.data = nullptr; }, FA_ERROR_NULL_POINTER, {"dq.data is NULL"}},
      {"dk_data_null", Base::F32, kBackward, "dk.data", "NULL",
       [](Call& c) { c.p.dk.data = nullptr; }, FA_ERROR_NULL_POINTER, {"dk.data is NULL"}},
      {"dv_data_null", Base::F32, kBackward, "dv.data", "NULL",
       [](Call& c) { c.p.dv.data = nullptr; }, FA_ERROR_NULL_POINTER, {"dv.data is NULL"}},
      {"cu_seqlens_k_null_packed", Base::Packed, kAll, "cu_seqlens_k.data",
       "NULL while cu_seqlens_q is given", [](Call& c) { c.p.cu_seqlens_k.data = nullptr; },
       FA_ERROR_NULL_POINTER, {"cu_seqlens_k.data is NULL while cu_seqlens_q is given"}},
      {"cu_seqlens_q_null_packed", Base::Packed, kAll, "cu_seqlens_q.data",
       "NULL while cu_seqlens_k is given", [](Call& c) { c.p.cu_seqlens_q.data = nullptr; },
       FA_ERROR_NULL_POINTER, {"cu_seqlens_q.data is NULL while cu_seqlens_k is given"}},
      {"cu_seqlens_q_only_fixed", Base::F32, kAll, "cu_seqlens_k.data",
       "NULL; only cu_seqlens_q given, with 4-D (fixed-length) tensors",
       [](Call& c) {
         HostTensor& cu = c.add(HostTensor(FA_DTYPE_INT32, {3}));
         cu.set(1, 5);
         cu.set(2, 10);
         c.p.cu_seqlens_q = cu.view().raw;
         c.p.max_seqlen_q = 5;
       },
       FA_ERROR_NULL_POINTER, {"cu_seqlens_k.data is NULL while cu_seqlens_q is given"}},

      // --- workspace (the runs only) -----------------------------------------------------------
      {"workspace_null", Base::F32, kRuns, "workspace", "NULL with the queried size",
       [](Call& c) { c.workspace = nullptr; }, FA_ERROR_WORKSPACE, {"workspace is NULL"}},
      {"workspace_null_zero_bytes", Base::F32, kRuns, "workspace", "NULL, 0 bytes",
       [](Call& c) { c.workspace = nullptr; c.workspace_bytes = 0; }, FA_ERROR_WORKSPACE,
       {"workspace is NULL", "needs at least"}},
      {"workspace_zero_bytes", Base::F32, kRuns, "workspace_bytes", "0",
       [](Call& c) { c.workspace_bytes = 0; }, FA_ERROR_WORKSPACE,
       {"workspace_bytes=0 is too small"}},
      {"workspace_one_byte", Base::F32, kRuns, "workspace_bytes", "1",
       [](Call& c) { c.workspace_bytes = 1; }, FA_ERROR_WORKSPACE,
       {"workspace_bytes=1 is too small"}},
      {"workspace_tiny_packed", Base::Packed, kRuns, "workspace_bytes", "16",
       [](Call& c) { c.workspace_bytes = 16; }, FA_ERROR_WORKSPACE,
       {"workspace_bytes=16 is too small"}},

      // --- dtypes ------------------------------------------------------------------------------
      {"q_dtype_int32", Base::F32, kAll, "q.dtype", "FA_DTYPE_INT32",
       [](Call& c) { c.p.q.dtype = FA_DTYPE_INT32; }, FA_ERROR_DTYPE,
       {"q.dtype=int32 (4) must be fp32, fp16, bf16 or fp8_e4m3"}},
      {"q_dtype_unknown", Base::F32, kAll, "q.dtype", "99",
       [](Call& c) { c.p.q.dtype = 99; }, FA_ERROR_DTYPE, {"q.dtype=unknown (99)"}},
      {"q_dtype_negative", Base::F32, kAll, "q.dtype", "-1",
       [](Call& c) { c.p.q.dtype = -1; }, FA_ERROR_DTYPE, {"q.dtype=unknown (-1)"}},
      {"k_dtype_vs_q", Base::F32, kAll, "k.dtype", "fp16 (q fp32)",
       [](Call& c) { c.p.k.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"k.dtype=fp16 must be fp32"}},
      {"k_dtype_fp8_vs_q", Base::F16, kAll, "k.dtype", "fp8_e4m3 (q fp16)",
       [](Call& c) { c.p.k.dtype = FA_DTYPE_FP8_E4M3; }, FA_ERROR_DTYPE,
       {"k.dtype=fp8_e4m3 must be fp16"}},
      {"v_dtype_vs_q", Base::F16, kAll, "v.dtype", "bf16 (q fp16)",
       [](Call& c) { c.p.v.dtype = FA_DTYPE_BF16; }, FA_ERROR_DTYPE,
       {"v.dtype=bf16 must be fp16"}},
      {"out_dtype_vs_q", Base::F16, kAll, "out.dtype", "bf16 (q fp16: fp16 or fp32)",
       [](Call& c) { c.p.out.dtype = FA_DTYPE_BF16; }, FA_ERROR_DTYPE,
       {"out.dtype=bf16 must be fp16 or fp32 (q.dtype=fp16)"}},
      {"out_dtype_fp16_vs_fp32", Base::F32, kAll, "out.dtype", "fp16 (q fp32: fp32 only)",
       [](Call& c) { c.p.out.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"out.dtype=fp16 must be fp32 (q.dtype=fp32)"}},
      {"lse_dtype_fp16", Base::F16, kAll, "lse.dtype", "fp16 (must be fp32)",
       [](Call& c) { c.p.lse.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"lse.dtype=fp16 must be fp32"}},
      {"lse_dtype_int32", Base::F32, kAll, "lse.dtype", "int32",
       [](Call& c) { c.p.lse.dtype = FA_DTYPE_INT32; }, FA_ERROR_DTYPE,
       {"lse.dtype=int32 must be fp32"}},
      {"dout_dtype_vs_q", Base::F16, kBackward, "dout.dtype", "bf16 (q fp16: fp16 or fp32)",
       [](Call& c) { c.p.dout.dtype = FA_DTYPE_BF16; }, FA_ERROR_DTYPE,
       {"dout.dtype=bf16 must be fp16 or fp32"}},
      {"dq_dtype_vs_q", Base::F16, kBackward, "dq.dtype", "bf16 (q fp16: fp16 or fp32)",
       [](Call& c) { c.p.dq.dtype = FA_DTYPE_BF16; }, FA_ERROR_DTYPE,
       {"dq.dtype=bf16 must be fp16 or fp32 (q.dtype=fp16)"}},
      {"dq_dtype_fp16_vs_bf16", Base::Strided, kBackward, "dq.dtype",
       "fp16 (q bf16: gradients have their input's dtype or fp32)",
       [](Call& c) { c.p.dq.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"dq.dtype=fp16 must be bf16 or fp32 (q.dtype=bf16)"}},
      {"dk_dtype_vs_k", Base::F16, kBackward, "dk.dtype", "bf16 (k fp16)",
       [](Call& c) { c.p.dk.dtype = FA_DTYPE_BF16; }, FA_ERROR_DTYPE,
       {"dk.dtype=bf16 must be fp16 or fp32"}},
      {"dv_dtype_vs_v", Base::F32, kBackward, "dv.dtype", "fp16 (v fp32)",
       [](Call& c) { c.p.dv.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"dv.dtype=fp16 must be fp32"}},
      {"cu_seqlens_q_dtype_fp32", Base::Packed, kAll, "cu_seqlens_q.dtype", "fp32",
       [](Call& c) { c.p.cu_seqlens_q.dtype = FA_DTYPE_FP32; }, FA_ERROR_DTYPE,
       {"cu_seqlens_q.dtype=fp32 must be int32"}},
      {"cu_seqlens_k_dtype_fp16", Base::Packed, kAll, "cu_seqlens_k.dtype", "fp16",
       [](Call& c) { c.p.cu_seqlens_k.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"cu_seqlens_k.dtype=fp16 must be int32"}},

      // --- ranks -------------------------------------------------------------------------------
      {"q_rank_3_fixed", Base::F32, kAll, "q.rank", "3 (4 without cu_seqlens)",
       [](Call& c) { c.p.q.rank = 3; }, FA_ERROR_RANK, {"q.rank=3 must be 4"}},
      {"q_rank_5", Base::F32, kAll, "q.rank", "5 (> FA_MAX_RANK)",
       [](Call& c) { c.p.q.rank = 5; }, FA_ERROR_RANK, {"q.rank=5 must be 4"}},
      {"q_rank_negative", Base::F32, kAll, "q.rank", "-1",
       [](Call& c) { c.p.q.rank = -1; }, FA_ERROR_RANK, {"q.rank=-1 must be 4"}},
      {"q_rank_4_packed", Base::Packed, kAll, "q.rank", "4 (3 with cu_seqlens)",
       [](Call& c) { c.p.q.rank = 4; c.p.q.shape[3] = 8; c.p.q.stride[3] = 1; },
       FA_ERROR_RANK, {"q.rank=4 must be 3"}},
      {"k_rank_3", Base::F32, kAll, "k.rank", "3",
       [](Call& c) { c.p.k.rank = 3; }, FA_ERROR_RANK, {"k.rank=3 must be 4"}},
      {"v_rank_0", Base::F32, kAll, "v.rank", "0",
       [](Call& c) { c.p.v.rank = 0; }, FA_ERROR_RANK, {"v.rank=0 must be 4"}},
      {"out_rank_3", Base::F32, kAll, "out.rank", "3",
       [](Call& c) { c.p.out.rank = 3; }, FA_ERROR_RANK, {"out.rank=3 must be 4"}},
      {"lse_rank_4", Base::F32, kAll, "lse.rank", "4",
       [](Call& c) { c.p.lse.rank = 4; c.p.lse.shape[3] = 1; }, FA_ERROR_RANK,
       {"lse.rank=4 must be 3"}},
      {"lse_rank_3_packed", Base::Packed, kAll, "lse.rank", "3 (2 with cu_seqlens)",
       [](Call& c) { c.p.lse.rank = 3; c.p.lse.shape[2] = 1; }, FA_ERROR_RANK,
       {"lse.rank=3 must be 2"}},
      {"dout_rank_3", Base::F32, kBackward, "dout.rank", "3",
       [](Call& c) { c.p.dout.rank = 3; }, FA_ERROR_RANK, {"dout.rank=3 must be 4"}},
      {"dq_rank_5", Base::F32, kBackward, "dq.rank", "5",
       [](Call& c) { c.p.dq.rank = 5; }, FA_ERROR_RANK, {"dq.rank=5 must be 4"}},
      {"dk_rank_2", Base::F32, kBackward, "dk.rank", "2",
       [](Call& c) { c.p.dk.rank = 2; }, FA_ERROR_RANK, {"dk.rank=2 must be 4"}},
      {"dv_rank_3_packed", Base::Packed, kBackward, "dv.rank", "2 (3 with cu_seqlens)",
       [](Call& c) { c.p.dv.rank = 2; }, FA_ERROR_RANK, {"dv.rank=2 must be 3"}},
      {"cu_seqlens_q_rank_2", Base::Packed, kAll, "cu_seqlens_q.rank", "2",
       [](Call& c) { c.p.cu_seqlens_q.rank = 2; c.p.cu_seqlens_q.shape[1] = 1; },
       FA_ERROR_RANK, {"cu_seqlens_q.rank=2 must be 1"}},

      // --- shapes of related tensors -----------------------------------------------------------
      {"k_head_dim_vs_q", Base::F32, kAll, "k.shape[3] (and v)", "16 (q head_dim 8)",
       [](Call& c) { c.p.k.shape[3] = c.p.v.shape[3] = 16; }, FA_ERROR_SHAPE,
       {"k.shape[3]=16 must equal q.shape[3]=8"}},
      {"k_batch_vs_q", Base::F32, kAll, "k.shape[0] (and v)", "3 (q batch 2)",
       [](Call& c) { c.p.k.shape[0] = c.p.v.shape[0] = 3; }, FA_ERROR_SHAPE,
       {"k.shape[0]=3 must equal q.shape[0]=2"}},
      {"v_seqlen_vs_k", Base::F32, kAll, "v.shape[1]", "6 (k seqlen 7)",
       [](Call& c) { c.p.v.shape[1] = 6; }, FA_ERROR_SHAPE,
       {"v.shape[1]=6 must equal k.shape[1]=7"}},
      {"v_heads_vs_k", Base::Strided, kAll, "v.shape[2]", "1 (k heads 2)",
       [](Call& c) { c.p.v.shape[2] = 1; }, FA_ERROR_SHAPE,
       {"v.shape[2]=1 must equal k.shape[2]=2"}},
      {"v_total_vs_k_packed", Base::Packed, kAll, "v.shape[0]", "9 (k total 10)",
       [](Call& c) { c.p.v.shape[0] = 9; }, FA_ERROR_SHAPE,
       {"v.shape[0]=9 must equal k.shape[0]=10"}},
      {"out_seqlen_vs_q", Base::F32, kAll, "out.shape[1]", "4 (q seqlen 5)",
       [](Call& c) { c.p.out.shape[1] = 4; }, FA_ERROR_SHAPE,
       {"out.shape[1]=4 must equal q.shape[1]=5"}},
      {"out_heads_vs_q", Base::F16, kAll, "out.shape[2]", "2 (q heads 4)",
       [](Call& c) { c.p.out.shape[2] = 2; }, FA_ERROR_SHAPE,
       {"out.shape[2]=2 must equal q.shape[2]=4"}},
      {"lse_batch", Base::F32, kAll, "lse.shape[0]", "1 (batch 2)",
       [](Call& c) { c.p.lse.shape[0] = 1; }, FA_ERROR_SHAPE, {"lse.shape[0]=1 must be 2"}},
      {"lse_heads", Base::F32, kAll, "lse.shape[1]", "2 (heads_q 4)",
       [](Call& c) { c.p.lse.shape[1] = 2; }, FA_ERROR_SHAPE, {"lse.shape[1]=2 must be 4"}},
      {"lse_seqlen_k_not_q", Base::Strided, kAll, "lse.shape[2]", "7 (seqlen_k; seqlen_q is 5)",
       [](Call& c) { c.p.lse.shape[2] = 7; }, FA_ERROR_SHAPE,
       {"lse.shape[2]=7 must be 5", "(batch, heads_q, seqlen_q)"}},
      {"lse_total_packed", Base::Packed, kAll, "lse.shape[1]", "10 (total_k; total_q is 8)",
       [](Call& c) { c.p.lse.shape[1] = 10; }, FA_ERROR_SHAPE,
       {"lse.shape[1]=10 must be 8", "(heads_q, total_q)"}},
      {"lse_transposed_packed", Base::Packed, kAll, "lse.shape", "(8, 4): (total_q, heads_q)",
       [](Call& c) { c.p.lse.shape[0] = 8; c.p.lse.shape[1] = 4; }, FA_ERROR_SHAPE,
       {"lse.shape[0]=8 must be 4"}},
      {"dout_shape_vs_q", Base::F32, kBackward, "dout.shape[1]", "4 (q seqlen 5)",
       [](Call& c) { c.p.dout.shape[1] = 4; }, FA_ERROR_SHAPE,
       {"dout.shape[1]=4 must equal q.shape[1]=5"}},
      {"dq_shape_vs_q", Base::F32, kBackward, "dq.shape[2]", "2 (q heads 4)",
       [](Call& c) { c.p.dq.shape[2] = 2; }, FA_ERROR_SHAPE,
       {"dq.shape[2]=2 must equal q.shape[2]=4"}},
      {"dk_shape_vs_k", Base::F32, kBackward, "dk.shape[2]", "4 (k heads 2: dk shaped like q)",
       [](Call& c) { c.p.dk.shape[2] = 4; }, FA_ERROR_SHAPE,
       {"dk.shape[2]=4 must equal k.shape[2]=2"}},
      {"dv_shape_vs_v", Base::F32, kBackward, "dv.shape[1]", "5 (v seqlen 7)",
       [](Call& c) { c.p.dv.shape[1] = 5; }, FA_ERROR_SHAPE,
       {"dv.shape[1]=5 must equal v.shape[1]=7"}},
      {"dk_total_vs_k_packed", Base::Packed, kBackward, "dk.shape[0]", "8 (k total 10)",
       [](Call& c) { c.p.dk.shape[0] = 8; }, FA_ERROR_SHAPE,
       {"dk.shape[0]=8 must equal k.shape[0]=10"}},

      // --- head_dim and heads ------------------------------------------------------------------
      {"head_dim_257", Base::F32, kAll, "q.shape[3] (head_dim, all tensors)", "257",
       [](Call& c) { each_data_tensor(c.p, [](fa_tensor& t) { t.shape[3] = 257; }); },
       FA_ERROR_HEAD_DIM, {"q.shape[3]=257 (head_dim) must be in [1, 256]"}},
      {"head_dim_512_packed", Base::Packed, kAll, "q.shape[2] (head_dim, all tensors)", "512",
       [](Call& c) { each_data_tensor(c.p, [](fa_tensor& t) { t.shape[2] = 512; }); },
       FA_ERROR_HEAD_DIM, {"q.shape[2]=512 (head_dim) must be in [1, 256]"}},
      {"heads_kv_3_of_4", Base::F32, kAll, "k.shape[2] (heads_kv, and v)", "3 (heads_q 4)",
       [](Call& c) { c.p.k.shape[2] = c.p.v.shape[2] = 3; }, FA_ERROR_HEADS,
       {"k.shape[2]=3 (heads_kv) must divide q.shape[2]=4 (heads_q)"}},
      {"heads_kv_8_of_4", Base::F16, kAll, "k.shape[2] (heads_kv, and v)", "8 (heads_q 4)",
       [](Call& c) { c.p.k.shape[2] = c.p.v.shape[2] = 8; }, FA_ERROR_HEADS,
       {"k.shape[2]=8 (heads_kv) must divide q.shape[2]=4"}},
      {"heads_kv_3_of_4_packed", Base::Packed, kAll, "k.shape[1] (heads_kv, and v)",
       "3 (heads_q 4)", [](Call& c) { c.p.k.shape[1] = c.p.v.shape[1] = 3; }, FA_ERROR_HEADS,
       {"k.shape[1]=3 (heads_kv) must divide q.shape[1]=4"}},

      // --- strides -----------------------------------------------------------------------------
      {"q_last_dim_stride_2", Base::F32, kAll, "q.stride[3]", "2 (last dim not contiguous)",
       [](Call& c) { c.p.q.stride[3] = 2; }, FA_ERROR_STRIDE,
       {"q.stride[3]=2 must be 1", "contiguous"}},
      {"k_last_dim_stride_0", Base::F32, kAll, "k.stride[3]", "0",
       [](Call& c) { c.p.k.stride[3] = 0; }, FA_ERROR_STRIDE, {"k.stride[3]=0 must be 1"}},
      {"v_last_dim_stride_2", Base::Strided, kAll, "v.stride[3]", "2",
       [](Call& c) { c.p.v.stride[3] = 2; }, FA_ERROR_STRIDE, {"v.stride[3]=2 must be 1"}},
      {"out_last_dim_stride_4_packed", Base::Packed, kAll, "out.stride[2]", "4",
       [](Call& c) { c.p.out.stride[2] = 4; }, FA_ERROR_STRIDE, {"out.stride[2]=4 must be 1"}},
      {"dout_last_dim_stride_2", Base::F32, kBackward, "dout.stride[3]", "2",
       [](Call& c) { c.p.dout.stride[3] = 2; }, FA_ERROR_STRIDE, {"dout.stride[3]=2 must be 1"}},
      {"dq_last_dim_stride_2", Base::F32, kBackward, "dq.stride[3]", "2",
       [](Call& c) { c.p.dq.stride[3] = 2; }, FA_ERROR_STRIDE, {"dq.stride[3]=2 must be 1"}},
      {"dk_last_dim_stride_2", Base::F16, kBackward, "dk.stride[3]", "2",
       [](Call& c) { c.p.dk.stride[3] = 2; }, FA_ERROR_STRIDE, {"dk.stride[3]=2 must be 1"}},
      {"dv_last_dim_stride_2", Base::F16, kBackward, "dv.stride[3]", "2",
       [](Call& c) { c.p.dv.stride[3] = 2; }, FA_ERROR_STRIDE, {"dv.stride[3]=2 must be 1"}},
      {"q_negative_stride", Base::Strided, kAll, "q.stride[1]", "-11",
       [](Call& c) { c.p.q.stride[1] = -11; }, FA_ERROR_STRIDE,
       {"q.stride[1]=-11 must be >= 0"}},
      {"k_negative_stride", Base::F32, kAll, "k.stride[0]", "-112",
       [](Call& c) { c.p.k.stride[0] = -112; }, FA_ERROR_STRIDE,
       {"k.stride[0]=-112 must be >= 0"}},
      {"out_negative_stride", Base::F32, kAll, "out.stride[2]", "-8",
       [](Call& c) { c.p.out.stride[2] = -8; }, FA_ERROR_STRIDE,
       {"out.stride[2]=-8 must be >= 0"}},
      {"lse_negative_stride", Base::F32, kAll, "lse.stride[2]", "-1",
       [](Call& c) { c.p.lse.stride[2] = -1; }, FA_ERROR_STRIDE,
       {"lse.stride[2]=-1 must be >= 0"}},
      {"dv_negative_stride", Base::F32, kBackward, "dv.stride[1]", "-16",
       [](Call& c) { c.p.dv.stride[1] = -16; }, FA_ERROR_STRIDE,
       {"dv.stride[1]=-16 must be >= 0"}},
      {"cu_seqlens_q_stride_2", Base::Packed, kAll, "cu_seqlens_q.stride[0]", "2",
       [](Call& c) { c.p.cu_seqlens_q.stride[0] = 2; }, FA_ERROR_STRIDE,
       {"cu_seqlens_q.stride[0]=2 must be 1"}},
      {"cu_seqlens_k_stride_0", Base::Packed, kAll, "cu_seqlens_k.stride[0]", "0",
       [](Call& c) { c.p.cu_seqlens_k.stride[0] = 0; }, FA_ERROR_STRIDE,
       {"cu_seqlens_k.stride[0]=0 must be 1"}},
      {"cu_seqlens_q_negative_stride", Base::Packed, kAll, "cu_seqlens_q.stride[0]", "-1",
       [](Call& c) { c.p.cu_seqlens_q.stride[0] = -1; }, FA_ERROR_STRIDE,
       {"cu_seqlens_q.stride[0]=-1 must be >= 0"}},
      {"alibi_negative_stride", Base::Alibi, kAll, "alibi_slopes.stride[1]", "-1",
       [](Call& c) { c.p.alibi_slopes.stride[1] = -1; }, FA_ERROR_STRIDE,
       {"alibi_slopes.stride[1]=-1 must be >= 0"}},

      // --- alignment ---------------------------------------------------------------------------
      {"q_fp16_odd_address", Base::F16, kAll, "q.data", "fp16 at an odd byte address",
       [](Call& c) { c.p.q.data = shifted(c.p.q.data, 1); }, FA_ERROR_ALIGNMENT,
       {"q.data=", "must be aligned to 2 bytes"}},
      {"k_fp32_address_mod4_2", Base::F32, kAll, "k.data", "fp32 at address % 4 == 2",
       [](Call& c) { c.p.k.data = shifted(c.p.k.data, 2); }, FA_ERROR_ALIGNMENT,
       {"k.data=", "must be aligned to 4 bytes"}},
      {"v_fp32_address_mod4_1", Base::F32, kAll, "v.data", "fp32 at address % 4 == 1",
       [](Call& c) { c.p.v.data = shifted(c.p.v.data, 1); }, FA_ERROR_ALIGNMENT,
       {"v.data=", "must be aligned to 4 bytes"}},
      {"out_bf16_odd_address", Base::Strided, kAll, "out.data", "bf16 at an odd byte address",
       [](Call& c) { c.p.out.data = shifted(c.p.out.data, 1); }, FA_ERROR_ALIGNMENT,
       {"out.data=", "must be aligned to 2 bytes"}},
      {"lse_address_mod4_2", Base::F16, kAll, "lse.data", "fp32 at address % 4 == 2",
       [](Call& c) { c.p.lse.data = shifted(c.p.lse.data, 2); }, FA_ERROR_ALIGNMENT,
       {"lse.data=", "must be aligned to 4 bytes"}},
      {"dout_fp16_odd_address", Base::F16, kBackward, "dout.data", "fp16 at an odd address",
       [](Call& c) { c.p.dout.data = shifted(c.p.dout.data, 1); }, FA_ERROR_ALIGNMENT,
       {"dout.data=", "must be aligned to 2 bytes"}},
      {"dq_fp16_odd_address", Base::F16, kBackward, "dq.data", "fp16 at an odd address",
       [](Call& c) { c.p.dq.data = shifted(c.p.dq.data, 1); }, FA_ERROR_ALIGNMENT,
       {"dq.data=", "must be aligned to 2 bytes"}},
      {"dk_fp16_odd_address", Base::F16, kBackward, "dk.data", "fp16 at an odd address",
       [](Call& c) { c.p.dk.data = shifted(c.p.dk.data, 1); }, FA_ERROR_ALIGNMENT,
       {"dk.data=", "must be aligned to 2 bytes"}},
      {"dv_fp32_address_mod4_3", Base::F32, kBackward, "dv.data", "fp32 at address % 4 == 3",
       [](Call& c) { c.p.dv.data = shifted(c.p.dv.data, 3); }, FA_ERROR_ALIGNMENT,
       {"dv.data=", "must be aligned to 4 bytes"}},
      {"cu_seqlens_q_address_mod4_2", Base::Packed, kAll, "cu_seqlens_q.data",
       "int32 at address % 4 == 2",
       [](Call& c) { c.p.cu_seqlens_q.data = shifted(c.p.cu_seqlens_q.data, 2); },
       FA_ERROR_ALIGNMENT, {"cu_seqlens_q.data=", "must be aligned to 4 bytes"}},
      {"alibi_address_mod4_1", Base::Alibi, kAll, "alibi_slopes.data", "fp32 at address % 4 == 1",
       [](Call& c) { c.p.alibi_slopes.data = shifted(c.p.alibi_slopes.data, 1); },
       FA_ERROR_ALIGNMENT, {"alibi_slopes.data=", "must be aligned to 4 bytes"}},

      // --- zero / negative sizes ---------------------------------------------------------------
      {"batch_zero", Base::F32, kAll, "q.shape[0] (batch)", "0",
       [](Call& c) { c.p.q.shape[0] = 0; }, FA_ERROR_SIZE, {"q.shape[0]=0 must be > 0"}},
      {"seqlen_q_zero", Base::F32, kAll, "q.shape[1] (seqlen_q)", "0",
       [](Call& c) { c.p.q.shape[1] = 0; }, FA_ERROR_SIZE, {"q.shape[1]=0 must be > 0"}},
      {"heads_q_zero", Base::F32, kAll, "q.shape[2] (heads_q)", "0",
       [](Call& c) { c.p.q.shape[2] = 0; }, FA_ERROR_SIZE, {"q.shape[2]=0 must be > 0"}},
      {"head_dim_zero", Base::F32, kAll, "q.shape[3] (head_dim)", "0",
       [](Call& c) { c.p.q.shape[3] = 0; }, FA_ERROR_SIZE, {"q.shape[3]=0 must be > 0"}},
      {"seqlen_k_negative", Base::F32, kAll, "k.shape[1] (seqlen_k, and v)", "-3",
       [](Call& c) { c.p.k.shape[1] = c.p.v.shape[1] = -3; }, FA_ERROR_SIZE,
       {"k.shape[1]=-3 must be > 0"}},
      {"out_seqlen_zero", Base::F32, kAll, "out.shape[1]", "0",
       [](Call& c) { c.p.out.shape[1] = 0; }, FA_ERROR_SIZE, {"out.shape[1]=0 must be > 0"}},
      {"lse_seqlen_zero", Base::F32, kAll, "lse.shape[2]", "0",
       [](Call& c) { c.p.lse.shape[2] = 0; }, FA_ERROR_SIZE, {"lse.shape[2]=0 must be > 0"}},
      {"dv_batch_negative", Base::F32, kBackward, "dv.shape[0]", "-1",
       [](Call& c) { c.p.dv.shape[0] = -1; }, FA_ERROR_SIZE, {"dv.shape[0]=-1 must be > 0"}},
      {"total_q_zero_packed", Base::Packed, kAll, "q.shape[0] (total_q)", "0",
       [](Call& c) { c.p.q.shape[0] = 0; }, FA_ERROR_SIZE, {"q.shape[0]=0 must be > 0"}},
      {"q_elements_overflow", Base::F32, kAll, "q.shape", "(2^32, 2^32, 4, 8), zero strides",
       [](Call& c) {
         c.p.q.shape[0] = c.p.q.shape[1] = int64_t(1) << 32;
         c.p.q.stride[0] = c.p.q.stride[1] = 0;
       },
       FA_ERROR_SIZE, {"q.shape=(4294967296, 4294967296, 4, 8) has more than 2^63 elements"}},
      {"k_span_overflow", Base::F32, kAll, "k.stride[0]", "2^62 (k spans > 2^63 bytes)",
       [](Call& c) { c.p.k.stride[0] = int64_t(1) << 62; }, FA_ERROR_SIZE,
       {"k (shape (2, 7, 2, 8), strides (4611686018427387904, 16, 8, 1)) spans more bytes"}},
      {"dq_span_past_address_space", Base::F32, kBackward, "dq.data",
       "0xffffffffffffff00 (dq would wrap the address space)",
       [](Call& c) { c.p.dq.data = reinterpret_cast<void*>(~uintptr_t(0xff)); }, FA_ERROR_SIZE,
       {"dq (shape (2, 5, 4, 8), strides (160, 32, 8, 1)) spans more bytes than the address "
        "space holds from dq.data="}},
      {"max_seqlen_q_zero", Base::Packed, kAll, "max_seqlen_q", "0",
       [](Call& c) { c.p.max_seqlen_q = 0; }, FA_ERROR_SIZE,
       {"max_seqlen_q=0 must be > 0 for packed batches"}},
      {"max_seqlen_k_negative", Base::Packed, kAll, "max_seqlen_k", "-1",
       [](Call& c) { c.p.max_seqlen_k = -1; }, FA_ERROR_SIZE,
       {"max_seqlen_k=-1 must be > 0"}},

      // --- cu_seqlens values and shapes (CPU tensors: the values are read on the host) ---------
      {"cu_seqlens_q_first_1", Base::Packed, kAll, "cu_seqlens_q[0]", "1",
       [](Call& c) { c.pr.cu_q.set(0, 1); }, FA_ERROR_CU_SEQLENS,
       {"cu_seqlens_q[0]=1 must be 0"}},
      {"cu_seqlens_k_first_negative", Base::Packed, kAll, "cu_seqlens_k[0]", "-1",
       [](Call& c) { c.pr.cu_k.set(0, -1); }, FA_ERROR_CU_SEQLENS,
       {"cu_seqlens_k[0]=-1 must be 0"}},
      {"cu_seqlens_q_decreasing", Base::Packed, kAll, "cu_seqlens_q", "{0, 3, 2}",
       [](Call& c) { c.pr.cu_q.set(2, 2); }, FA_ERROR_CU_SEQLENS,
       {"cu_seqlens_q[2]=2 < cu_seqlens_q[1]=3", "non-decreasing"}},
      {"cu_seqlens_k_decreasing", Base::Packed, kAll, "cu_seqlens_k", "{0, 4, 3}",
       [](Call& c) { c.pr.cu_k.set(2, 3); }, FA_ERROR_CU_SEQLENS,
       {"cu_seqlens_k[2]=3 < cu_seqlens_k[1]=4"}},
      {"cu_seqlens_q_last_short", Base::Packed, kAll, "cu_seqlens_q[batch]",
       "7 (q has 8 tokens)", [](Call& c) { c.pr.cu_q.set(2, 7); }, FA_ERROR_CU_SEQLENS,
       {"cu_seqlens_q[2]=7 must equal q.shape[0]=8"}},
      {"cu_seqlens_k_last_long", Base::Packed, kAll, "cu_seqlens_k[batch]",
       "10 (k, v have 9 tokens)", [](Call& c) { c.p.k.shape[0] = c.p.v.shape[0] = 9; },
       FA_ERROR_CU_SEQLENS, {"cu_seqlens_k[2]=10 must equal k.shape[0]=9"}},
      {"cu_seqlens_q_length_over_max", Base::Packed, kAll, "max_seqlen_q",
       "4 (longest query sequence 5)", [](Call& c) { c.p.max_seqlen_q = 4; },
       FA_ERROR_CU_SEQLENS, {"cu_seqlens_q sequence 1 has length 5 > max_seqlen_q=4"}},
      {"cu_seqlens_k_length_over_max", Base::Packed, kAll, "max_seqlen_k",
       "5 (longest key sequence 6)", [](Call& c) { c.p.max_seqlen_k = 5; },
       FA_ERROR_CU_SEQLENS, {"cu_seqlens_k sequence 1 has length 6 > max_seqlen_k=5"}},
      {"cu_seqlens_count_mismatch", Base::Packed, kAll, "cu_seqlens_k.shape[0]",
       "2 (cu_seqlens_q has 3)",
       [](Call& c) {
         HostTensor& cu = c.add(HostTensor(FA_DTYPE_INT32, {2}));
         cu.set(1, 10);
         c.p.cu_seqlens_k = cu.view().raw;
       },
       FA_ERROR_CU_SEQLENS, {"cu_seqlens_k.shape[0]=2 must equal cu_seqlens_q.shape[0]=3"}},
      {"cu_seqlens_single_entry", Base::Packed, kAll, "cu_seqlens_q.shape[0]",
       "1 (no sequence)", [](Call& c) { c.p.cu_seqlens_q.shape[0] = c.p.cu_seqlens_k.shape[0] = 1; },
       FA_ERROR_CU_SEQLENS, {"cu_seqlens_q.shape[0]=1 must be batch + 1 >= 2"}},

      // --- masking, dropout, softcap, scale ----------------------------------------------------
      {"window_left_minus_2", Base::F32, kAll, "window_left", "-2",
       [](Call& c) { c.p.window_left = -2; }, FA_ERROR_WINDOW,
       {"window_left=-2 must be >= -1"}},
      {"window_left_int_min", Base::F32, kAll, "window_left", "INT32_MIN",
       [](Call& c) { c.p.window_left = std::numeric_limits<int32_t>::min(); }, FA_ERROR_WINDOW,
       {"window_left=-2147483648 must be >= -1"}},
      {"window_right_minus_3", Base::Packed, kAll, "window_right", "-3",
       [](Call& c) { c.p.window_right = -3; }, FA_ERROR_WINDOW,
       {"window_right=-3 must be >= -1"}},
      {"dropout_one", Base::F32, kAll, "dropout_p", "1.0",
       [](Call& c) { c.p.dropout_p = 1.f; }, FA_ERROR_DROPOUT, {"dropout_p=1 must be in [0, 1)"}},
      {"dropout_above_one", Base::F32, kAll, "dropout_p", "1.5",
       [](Call& c) { c.p.dropout_p = 1.5f; }, FA_ERROR_DROPOUT,
       {"dropout_p=1.5 must be in [0, 1)"}},
      {"dropout_negative", Base::F32, kAll, "dropout_p", "-0.1",
       [](Call& c) { c.p.dropout_p = -0.1f; }, FA_ERROR_DROPOUT,
       {"dropout_p=-0.1 must be in [0, 1)"}},
      {"dropout_nan", Base::F32, kAll, "dropout_p", "NaN",
       [](Call& c) { c.p.dropout_p = kNaN; }, FA_ERROR_DROPOUT,
       {"dropout_p=", "nan must be in [0, 1)"}},
      {"dropout_inf", Base::F32, kAll, "dropout_p", "+inf",
       [](Call& c) { c.p.dropout_p = kInf; }, FA_ERROR_DROPOUT, {"dropout_p=inf"}},
      {"softcap_negative", Base::F32, kAll, "softcap", "-1",
       [](Call& c) { c.p.softcap = -1.f; }, FA_ERROR_SOFTCAP,
       {"softcap=-1 must be finite and >= 0"}},
      {"softcap_nan", Base::F32, kAll, "softcap", "NaN",
       [](Call& c) { c.p.softcap = kNaN; }, FA_ERROR_SOFTCAP,
       {"softcap=", "nan must be finite and >= 0"}},
      {"softcap_inf", Base::F32, kAll, "softcap", "+inf",
       [](Call& c) { c.p.softcap = kInf; }, FA_ERROR_SOFTCAP,
       {"softcap=inf must be finite and >= 0"}},
      {"scale_nan", Base::F32, kAll, "softmax_scale", "NaN",
       [](Call& c) { c.p.softmax_scale = kNaN; }, FA_ERROR_SCALE,
       {"softmax_scale=", "nan must be finite"}},
      {"scale_inf", Base::F32, kAll, "softmax_scale", "+inf",
       [](Call& c) { c.p.softmax_scale = kInf; }, FA_ERROR_SCALE,
       {"softmax_scale=inf must be finite"}},
      {"scale_minus_inf", Base::Packed, kAll, "softmax_scale", "-inf",
       [](Call& c) { c.p.softmax_scale = -kInf; }, FA_ERROR_SCALE,
       {"softmax_scale=-inf must be finite"}},

      // --- devices -----------------------------------------------------------------------------
      {"cpu_index_1", Base::F32, kAll, "q.device.index (all tensors)", "1 on FA_DEVICE_CPU",
       [](Call& c) { set_device(c.p, {FA_DEVICE_CPU, 1}); }, FA_ERROR_DEVICE,
       {"q.device.index=1 must be 0 for the CPU"}},
      {"device_type_unknown", Base::F32, kAll, "q.device.type (all tensors)", "7",
       [](Call& c) { set_device(c.p, {7, 0}); }, FA_ERROR_DEVICE,
       {"q.device.type=7 must be FA_DEVICE_CPU or FA_DEVICE_CUDA"}},
      {"cuda_index_out_of_range", Base::F32, kAll, "q.device.index (all tensors)",
       "fa_cuda_device_count() on FA_DEVICE_CUDA",
       [](Call& c) { set_device(c.p, {FA_DEVICE_CUDA, fa_cuda_device_count()}); },
       FA_ERROR_DEVICE,
       // The index in the message is the machine's device count; the fragments leave it out
       // so that the catalogue document reads the same on every machine.
       {"q.device.index=", " is not a CUDA device"}},
      {"cuda_index_negative", Base::Packed, kAll, "q.device.index (all tensors)",
       "-1 on FA_DEVICE_CUDA", [](Call& c) { set_device(c.p, {FA_DEVICE_CUDA, -1}); },
       FA_ERROR_DEVICE, {"q.device.index=-1 is not a CUDA device"}},
      {"k_device_index", Base::F32, kAll, "k.device", "(CPU, 1), q on (CPU, 0)",
       [](Call& c) { c.p.k.device.index = 1; }, FA_ERROR_DEVICE,
       {"k.device=(0, 1) must equal q.device=(0, 0)"}},
      {"v_device_cuda", Base::F32, kAll, "v.device", "(CUDA, 0), q on the CPU",
       [](Call& c) { c.p.v.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"v.device=(1, 0) must equal q.device=(0, 0)"}},
      {"out_device_cuda", Base::F32, kAll, "out.device", "(CUDA, 0)",
       [](Call& c) { c.p.out.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"out.device=(1, 0) must equal q.device=(0, 0)"}},
      {"lse_device_cuda", Base::F32, kAll, "lse.device", "(CUDA, 1)",
       [](Call& c) { c.p.lse.device = {FA_DEVICE_CUDA, 1}; }, FA_ERROR_DEVICE,
       {"lse.device=(1, 1) must equal q.device=(0, 0)"}},
      {"dout_device_cuda", Base::F32, kBackward, "dout.device", "(CUDA, 0)",
       [](Call& c) { c.p.dout.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"dout.device=(1, 0) must equal q.device=(0, 0)"}},
      {"dq_device_index", Base::F32, kBackward, "dq.device", "(CPU, 2)",
       [](Call& c) { c.p.dq.device.index = 2; }, FA_ERROR_DEVICE,
       {"dq.device=(0, 2) must equal q.device=(0, 0)"}},
      {"dk_device_cuda", Base::F32, kBackward, "dk.device", "(CUDA, 0)",
       [](Call& c) { c.p.dk.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"dk.device=(1, 0) must equal q.device=(0, 0)"}},
      {"dv_device_type", Base::F32, kBackward, "dv.device", "(type 5, 0)",
       [](Call& c) { c.p.dv.device.type = 5; }, FA_ERROR_DEVICE,
       {"dv.device=(5, 0) must equal q.device=(0, 0)"}},
      {"cu_seqlens_k_device_cuda", Base::Packed, kAll, "cu_seqlens_k.device", "(CUDA, 0)",
       [](Call& c) { c.p.cu_seqlens_k.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"cu_seqlens_k.device=(1, 0) must equal q.device=(0, 0)"}},
      {"alibi_device_index", Base::Alibi, kAll, "alibi_slopes.device", "(CPU, 3)",
       [](Call& c) { c.p.alibi_slopes.device.index = 3; }, FA_ERROR_DEVICE,
       {"alibi_slopes.device=(0, 3) must equal q.device=(0, 0)"}},

      // --- ALiBi slopes ------------------------------------------------------------------------
      {"alibi_dtype_fp16", Base::Alibi, kAll, "alibi_slopes.dtype", "fp16",
       [](Call& c) { c.p.alibi_slopes.dtype = FA_DTYPE_FP16; }, FA_ERROR_ALIBI,
       {"alibi_slopes.dtype=fp16 must be fp32"}},
      {"alibi_dtype_int32", Base::PackedAlibi, kAll, "alibi_slopes.dtype", "int32",
       [](Call& c) { c.p.alibi_slopes.dtype = FA_DTYPE_INT32; }, FA_ERROR_ALIBI,
       {"alibi_slopes.dtype=int32 must be fp32"}},
      {"alibi_rank_3", Base::Alibi, kAll, "alibi_slopes.rank", "3",
       [](Call& c) { c.p.alibi_slopes.rank = 3; c.p.alibi_slopes.shape[2] = 1; },
       FA_ERROR_ALIBI, {"alibi_slopes.rank=3 must be 1 (heads_q) or 2 (batch, heads_q)"}},
      {"alibi_rank_0", Base::Alibi, kAll, "alibi_slopes.rank", "0",
       [](Call& c) { c.p.alibi_slopes.rank = 0; }, FA_ERROR_ALIBI,
       {"alibi_slopes.rank=0 must be 1"}},
      {"alibi_heads_kv_not_q", Base::F32, kAll, "alibi_slopes.shape", "(2): heads_kv, not heads_q",
       [](Call& c) { c.p.alibi_slopes = c.add(HostTensor(FA_DTYPE_FP32, {2})).view().raw; },
       FA_ERROR_ALIBI, {"alibi_slopes.shape=(2) must be (4) or (2, 4)"}},
      {"alibi_batch_mismatch", Base::F32, kAll, "alibi_slopes.shape", "(3, 4): batch 2",
       [](Call& c) { c.p.alibi_slopes = c.add(HostTensor(FA_DTYPE_FP32, {3, 4})).view().raw; },
       FA_ERROR_ALIBI, {"alibi_slopes.shape=(3, 4) must be (4) or (2, 4)"}},
      {"alibi_transposed", Base::F32, kAll, "alibi_slopes.shape", "(4, 2): (heads_q, batch)",
       [](Call& c) { c.p.alibi_slopes = c.add(HostTensor(FA_DTYPE_FP32, {4, 2})).view().raw; },
       FA_ERROR_ALIBI, {"alibi_slopes.shape=(4, 2) must be (4) or (2, 4)"}},
      {"alibi_batch_mismatch_packed", Base::PackedAlibi, kAll, "alibi_slopes.shape",
       "(1, 4): packed batch is 2", [](Call& c) { c.p.alibi_slopes.shape[0] = 1; },
       FA_ERROR_ALIBI, {"alibi_slopes.shape=(1, 4) must be (4) or (2, 4)"}},

      // --- KV cache: block_table, cache_seqlens (forward only, fixed-length batches) ----------
      {"block_table_dtype_fp32", Base::Paged, kForward, "block_table.dtype", "fp32",
       [](Call& c) { c.p.block_table.dtype = FA_DTYPE_FP32; }, FA_ERROR_DTYPE,
       {"block_table.dtype=fp32 must be int32"}},
      {"block_table_rank_1", Base::Paged, kForward, "block_table.rank", "1",
       [](Call& c) { c.p.block_table.rank = 1; }, FA_ERROR_RANK,
       {"block_table.rank=1 must be 2"}},
      {"block_table_batch", Base::Paged, kForward, "block_table.shape[0]", "1 (batch 2)",
       [](Call& c) { c.p.block_table.shape[0] = 1; }, FA_ERROR_SHAPE,
       {"block_table.shape[0]=1 must equal q.shape[0]=2 (batch)"}},
      {"block_table_zero_blocks", Base::Paged, kForward, "block_table.shape[1]", "0",
       [](Call& c) { c.p.block_table.shape[1] = 0; }, FA_ERROR_SIZE,
       {"block_table.shape[1]=0 must be > 0"}},
      {"block_table_last_dim_stride_2", Base::Paged, kForward, "block_table.stride[1]", "2",
       [](Call& c) { c.p.block_table.stride[1] = 2; }, FA_ERROR_STRIDE,
       {"block_table.stride[1]=2 must be 1"}},
      {"block_table_negative_stride", Base::Paged, kForward, "block_table.stride[0]", "-3",
       [](Call& c) { c.p.block_table.stride[0] = -3; }, FA_ERROR_STRIDE,
       {"block_table.stride[0]=-3 must be >= 0"}},
      {"block_table_device_cuda", Base::Paged, kForward, "block_table.device", "(CUDA, 0)",
       [](Call& c) { c.p.block_table.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"block_table.device=(1, 0) must equal q.device=(0, 0)"}},
      {"block_table_address_mod4_2", Base::Paged, kForward, "block_table.data",
       "int32 at address % 4 == 2",
       [](Call& c) { c.p.block_table.data = shifted(c.p.block_table.data, 2); },
       FA_ERROR_ALIGNMENT, {"block_table.data=", "must be aligned to 4 bytes"}},
      {"block_table_entry_past_blocks", Base::Paged, kForward, "block_table[1][1]",
       "8 (k has 8 blocks)", [](Call& c) { c.pr.block_table.set(4, 8); }, FA_ERROR_CU_SEQLENS,
       {"block_table[1][1]=8 is not a block of k: must be in [0, 8) (k.shape[0])",
        "batch entry 1 reads its first 2 entries"}},
      {"block_table_entry_negative", Base::Paged, kForward, "block_table[0][2]", "-1 (read: 7 keys)",
       [](Call& c) { c.pr.block_table.set(2, -1); }, FA_ERROR_CU_SEQLENS,
       {"block_table[0][2]=-1 is not a block of k"}},
      {"paged_k_fewer_blocks", Base::Paged, kForward, "k.shape[0] (and v)",
       "1 (the table's 5 distinct entries name blocks of 8)",
       [](Call& c) { c.p.k.shape[0] = c.p.v.shape[0] = 1; }, FA_ERROR_CU_SEQLENS,
       {"is not a block of k: must be in [0, 1) (k.shape[0])"}},
      {"paged_v_page_size_vs_k", Base::Paged, kForward, "v.shape[1] (page size)", "2 (k's is 3)",
       [](Call& c) { c.p.v.shape[1] = 2; }, FA_ERROR_SHAPE,
       {"v.shape[1]=2 must equal k.shape[1]=3"}},
      {"paged_capacity_overflow", Base::Paged, kForward, "block_table.shape[1] * k.shape[1]",
       "2^40 blocks of 2^24 keys (zero strides)",
       [](Call& c) {
         c.p.block_table.shape[1] = int64_t(1) << 40;
         c.p.block_table.stride[0] = 0;
         c.p.k.shape[1] = c.p.v.shape[1] = int64_t(1) << 24;
         c.p.k.stride[1] = c.p.v.stride[1] = 0;
       },
       FA_ERROR_SIZE, {"the paged cache's capacity block_table.shape[1] * k.shape[1] overflows"}},
      {"cache_seqlens_dtype_fp16", Base::Paged, kForward, "cache_seqlens.dtype", "fp16",
       [](Call& c) { c.p.cache_seqlens.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"cache_seqlens.dtype=fp16 must be int32"}},
      {"cache_seqlens_rank_2", Base::Paged, kForward, "cache_seqlens.rank", "2",
       [](Call& c) { c.p.cache_seqlens.rank = 2; c.p.cache_seqlens.shape[1] = 1; },
       FA_ERROR_RANK, {"cache_seqlens.rank=2 must be 1"}},
      {"cache_seqlens_batch", Base::F32, kForward, "cache_seqlens.shape[0]", "3 (batch 2)",
       [](Call& c) { c.p.cache_seqlens = index_tensor(c, {3}); }, FA_ERROR_SHAPE,
       {"cache_seqlens.shape[0]=3 must equal q.shape[0]=2 (batch)"}},
      {"cache_seqlens_stride_2", Base::Paged, kForward, "cache_seqlens.stride[0]", "2",
       [](Call& c) { c.p.cache_seqlens.stride[0] = 2; }, FA_ERROR_STRIDE,
       {"cache_seqlens.stride[0]=2 must be 1"}},
      {"cache_seqlens_device_cuda", Base::Paged, kForward, "cache_seqlens.device", "(CUDA, 0)",
       [](Call& c) { c.p.cache_seqlens.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"cache_seqlens.device=(1, 0) must equal q.device=(0, 0)"}},
      {"cache_seqlens_past_dense_cache", Base::F32, kForward, "cache_seqlens[1]",
       "8 (k holds 7 keys)",
       [](Call& c) {
         HostTensor& cs = c.add(HostTensor(FA_DTYPE_INT32, {2}));
         cs.set(0, 7);
         cs.set(1, 8);
         c.p.cache_seqlens = cs.view().raw;
       },
       FA_ERROR_CU_SEQLENS, {"cache_seqlens[1]=8 must be in [0, 7] (k.shape[1], the cache's capacity)"}},
      {"cache_seqlens_past_paged_cache", Base::Paged, kForward, "cache_seqlens[0]",
       "10 (3 blocks of 3)", [](Call& c) { c.pr.cache_seqlens.set(0, 10); }, FA_ERROR_CU_SEQLENS,
       {"cache_seqlens[0]=10 must be in [0, 9] (block_table.shape[1] * k.shape[1]"}},
      {"cache_seqlens_negative", Base::Paged, kForward, "cache_seqlens[1]", "-1",
       [](Call& c) { c.pr.cache_seqlens.set(1, -1); }, FA_ERROR_CU_SEQLENS,
       {"cache_seqlens[1]=-1 must be in [0, 9]"}},
      {"block_table_in_backward", Base::F32, kBackward, "block_table", "given to fa_backward",
       [](Call& c) { c.p.block_table = index_tensor(c, {2, 3}); }, FA_ERROR_UNSUPPORTED,
       {"block_table (a paged KV cache) is forward-only"}},
      {"cache_seqlens_in_backward", Base::F32, kBackward, "cache_seqlens", "given to fa_backward",
       [](Call& c) { c.p.cache_seqlens = index_tensor(c, {2}); }, FA_ERROR_UNSUPPORTED,
       {"cache_seqlens is forward-only"}},
      {"block_table_packed_k_rank_3", Base::Packed, kForward, "k.rank",
       "3 with block_table (a packed batch's paged cache is 4-D)",
       [](Call& c) { c.p.block_table = index_tensor(c, {2, 3}); }, FA_ERROR_RANK,
       {"k.rank=3 must be 4"}},
      {"cache_seqlens_packed", Base::Packed, kForward, "cache_seqlens", "with cu_seqlens",
       [](Call& c) { c.p.cache_seqlens = index_tensor(c, {2}); }, FA_ERROR_UNSUPPORTED,
       {"cache_seqlens with cu_seqlens (a packed batch) is not supported yet"}},

      // --- positions ---------------------------------------------------------------------------
      // --- the rest of flash_attn_with_kvcache (0.3): append, rotary, leftpad, row map, splits --
      {"k_new_without_v_new", Base::Append, kForward, "v_new.data", "NULL while k_new is given",
       [](Call& c) { c.p.v_new.data = nullptr; }, FA_ERROR_NULL_POINTER,
       {"v_new.data is NULL while k_new is given"}},
      {"v_new_without_k_new", Base::Append, kForward, "k_new.data", "NULL while v_new is given",
       [](Call& c) { c.p.k_new.data = nullptr; }, FA_ERROR_NULL_POINTER,
       {"k_new.data is NULL while v_new is given"}},
      {"k_new_dtype_vs_k", Base::Append, kForward, "k_new.dtype", "fp16 (k fp32)",
       [](Call& c) { c.p.k_new.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"k_new.dtype=fp16 must be fp32"}},
      {"v_new_rank_3", Base::Append, kForward, "v_new.rank", "3",
       [](Call& c) { c.p.v_new.rank = 3; }, FA_ERROR_RANK, {"v_new.rank=3 must be 4"}},
      {"k_new_batch", Base::Append, kForward, "k_new.shape[0] (and v_new)", "1 (batch 2)",
       [](Call& c) { c.p.k_new.shape[0] = c.p.v_new.shape[0] = 1; }, FA_ERROR_SHAPE,
       {"k_new.shape[0]=1 must equal q.shape[0] (batch)=2"}},
      {"k_new_heads_vs_k", Base::Append, kForward, "k_new.shape[2] (and v_new)",
       "1 (heads_kv 2)", [](Call& c) { c.p.k_new.shape[2] = c.p.v_new.shape[2] = 1; },
       FA_ERROR_SHAPE, {"k_new.shape[2]=1 must equal k.shape[2] (heads_kv)=2"}},
      {"k_new_head_dim", Base::Append, kForward, "k_new.shape[3] (and v_new)", "4 (head_dim 8)",
       [](Call& c) { c.p.k_new.shape[3] = c.p.v_new.shape[3] = 4; }, FA_ERROR_SHAPE,
       {"k_new.shape[3]=4 must equal q.shape[3] (head_dim)=8"}},
      {"v_new_seqlen_vs_k_new", Base::Append, kForward, "v_new.shape[1]", "1 (k_new's is 2)",
       [](Call& c) { c.p.v_new.shape[1] = 1; }, FA_ERROR_SHAPE,
       {"v_new.shape[1]=1 must equal k_new.shape[1]=2"}},
      {"k_new_last_dim_stride_2", Base::Append, kForward, "k_new.stride[3]", "2",
       [](Call& c) { c.p.k_new.stride[3] = 2; }, FA_ERROR_STRIDE,
       {"k_new.stride[3]=2 must be 1"}},
      {"v_new_device_cuda", Base::Append, kForward, "v_new.device", "(CUDA, 0)",
       [](Call& c) { c.p.v_new.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"v_new.device=(1, 0) must equal q.device=(0, 0)"}},
      {"k_new_address_mod4_2", Base::Append, kForward, "k_new.data", "fp32 at address % 4 == 2",
       [](Call& c) { c.p.k_new.data = shifted(c.p.k_new.data, 2); }, FA_ERROR_ALIGNMENT,
       {"k_new.data=", "must be aligned to 4 bytes"}},
      {"k_new_without_cache_seqlens", Base::Append, kForward, "cache_seqlens.data",
       "NULL with k_new", [](Call& c) { c.p.cache_seqlens.data = nullptr; },
       FA_ERROR_NULL_POINTER, {"cache_seqlens.data is NULL; k_new is appended at cache_seqlens"}},
      {"append_past_capacity", Base::Append, kForward, "cache_seqlens[1]",
       "6 (+ 2 new keys > 7, the capacity)", [](Call& c) { c.pr.cache_seqlens.set(1, 6); },
       FA_ERROR_CU_SEQLENS,
       {"cache_seqlens[1]=6 + k_new.shape[1]=2 (seqlen_new) must be <= 7 (k.shape[1])",
        "the appended keys must fit"}},
      {"k_new_in_backward", Base::F32, kBackward, "k_new, v_new", "given to fa_backward",
       [](Call& c) {
         c.p.k_new = c.add_random(FA_DTYPE_FP32, {2, 2, 2, 8}, 1);
         c.p.v_new = c.add_random(FA_DTYPE_FP32, {2, 2, 2, 8}, 2);
       },
       FA_ERROR_UNSUPPORTED, {"k_new (keys appended to the cache) is forward-only"}},
      {"v_new_packed", Base::Packed, kForward, "v_new", "with cu_seqlens",
       [](Call& c) { c.p.v_new = c.add_random(FA_DTYPE_FP32, {2, 2, 2, 8}, 2); },
       FA_ERROR_UNSUPPORTED,
       {"v_new (values appended to the cache) with cu_seqlens (a packed batch) is not supported"}},
      {"cache_batch_idx_past_rows", Base::Append, kForward, "cache_batch_idx[0]",
       "2 (the cache has 2 rows)", [](Call& c) { static_cast<int32_t*>(c.p.cache_batch_idx.data)[0] = 2; },
       FA_ERROR_CU_SEQLENS,
       {"cache_batch_idx[0]=2 must be in [0, 2) (k.shape[0], the rows of the dense cache)"}},
      {"cache_batch_idx_negative", Base::Append, kForward, "cache_batch_idx[1]", "-1",
       [](Call& c) { static_cast<int32_t*>(c.p.cache_batch_idx.data)[1] = -1; },
       FA_ERROR_CU_SEQLENS, {"cache_batch_idx[1]=-1 must be in [0, 2)"}},
      {"cache_batch_idx_repeated_append", Base::Append, kForward, "cache_batch_idx",
       "{0, 0} with k_new", [](Call& c) { c.p.cache_batch_idx = c.add_ints({0, 0}); },
       FA_ERROR_CU_SEQLENS,
       {"cache_batch_idx[1]=0 repeats cache_batch_idx[0]: with k_new every batch entry appends "
        "to its own cache row"}},
      {"cache_batch_idx_paged", Base::Paged, kForward, "cache_batch_idx", "with block_table",
       [](Call& c) { c.p.cache_batch_idx = c.add_ints({1, 0}); }, FA_ERROR_UNSUPPORTED,
       {"cache_batch_idx with block_table is not supported"}},
      {"cache_batch_idx_dtype_fp32", Base::Append, kForward, "cache_batch_idx.dtype", "fp32",
       [](Call& c) { c.p.cache_batch_idx.dtype = FA_DTYPE_FP32; }, FA_ERROR_DTYPE,
       {"cache_batch_idx.dtype=fp32 must be int32"}},
      {"cache_batch_idx_batch", Base::Append, kForward, "cache_batch_idx.shape[0]", "3 (batch 2)",
       [](Call& c) { c.p.cache_batch_idx = c.add_ints({0, 1, 1}); }, FA_ERROR_SHAPE,
       {"cache_batch_idx.shape[0]=3 must equal q.shape[0]=2 (batch)"}},
      {"cache_batch_idx_in_backward", Base::F32, kBackward, "cache_batch_idx",
       "given to fa_backward", [](Call& c) { c.p.cache_batch_idx = c.add_ints({1, 0}); },
       FA_ERROR_UNSUPPORTED, {"cache_batch_idx is forward-only"}},
      {"cache_leftpad_past_seqlens", Base::Append, kForward, "cache_leftpad[1]",
       "5 (cache_seqlens[1] is 4)", [](Call& c) { static_cast<int32_t*>(c.p.cache_leftpad.data)[1] = 5; },
       FA_ERROR_CU_SEQLENS,
       {"cache_leftpad[1]=5 must be in [0, 4] (cache_seqlens[1]): entry 1's keys start there"}},
      {"cache_leftpad_negative", Base::Append, kForward, "cache_leftpad[0]", "-1",
       [](Call& c) { static_cast<int32_t*>(c.p.cache_leftpad.data)[0] = -1; },
       FA_ERROR_CU_SEQLENS, {"cache_leftpad[0]=-1 must be in [0, 3]"}},
      {"cache_leftpad_past_capacity", Base::F32, kForward, "cache_leftpad[0]",
       "8 (no cache_seqlens: k holds 7 keys)", [](Call& c) { c.p.cache_leftpad = c.add_ints({8, 0}); },
       FA_ERROR_CU_SEQLENS, {"cache_leftpad[0]=8 must be in [0, 7] (k.shape[1])"}},
      {"cache_leftpad_stride_2", Base::Append, kForward, "cache_leftpad.stride[0]", "2",
       [](Call& c) { c.p.cache_leftpad.stride[0] = 2; }, FA_ERROR_STRIDE,
       {"cache_leftpad.stride[0]=2 must be 1"}},
      {"cache_leftpad_device_cuda", Base::Append, kForward, "cache_leftpad.device", "(CUDA, 0)",
       [](Call& c) { c.p.cache_leftpad.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"cache_leftpad.device=(1, 0) must equal q.device=(0, 0)"}},
      {"rotary_cos_without_sin", Base::Append, kForward, "rotary_sin.data",
       "NULL while rotary_cos is given", [](Call& c) { c.p.rotary_sin.data = nullptr; },
       FA_ERROR_NULL_POINTER, {"rotary_sin.data is NULL while rotary_cos is given"}},
      {"rotary_without_k_new", Base::Paged, kForward, "k_new.data",
       "NULL with rotary_cos / rotary_sin",
       [](Call& c) {
         c.p.rotary_cos = c.add_random(FA_DTYPE_FP32, {8, 2}, 1);
         c.p.rotary_sin = c.add_random(FA_DTYPE_FP32, {8, 2}, 2);
       },
       FA_ERROR_NULL_POINTER, {"k_new.data is NULL; rotary_cos / rotary_sin rotate the keys"}},
      {"rotary_dtype_fp16_vs_fp32", Base::Append, kForward, "rotary_cos.dtype",
       "fp16 (q fp32: fp32 only)", [](Call& c) { c.p.rotary_cos.dtype = FA_DTYPE_FP16; },
       FA_ERROR_DTYPE, {"rotary_cos.dtype=fp16 must be fp32 (q.dtype=fp32)"}},
      {"rotary_rank_1", Base::Append, kForward, "rotary_cos.rank", "1",
       [](Call& c) { c.p.rotary_cos.rank = 1; }, FA_ERROR_RANK, {"rotary_cos.rank=1 must be 2"}},
      {"rotary_sin_rows_vs_cos", Base::Append, kForward, "rotary_sin.shape[0]",
       "7 (rotary_cos has 8)", [](Call& c) { c.p.rotary_sin.shape[0] = 7; }, FA_ERROR_SHAPE,
       {"rotary_sin.shape[0]=7 must equal rotary_cos.shape[0]=8"}},
      {"rotary_dim_past_head_dim", Base::Append, kForward, "rotary_cos.shape[1] (and sin)",
       "5 (rotary_dim 10 > head_dim 8)",
       [](Call& c) { c.p.rotary_cos.shape[1] = c.p.rotary_sin.shape[1] = 5; }, FA_ERROR_SHAPE,
       {"rotary_cos.shape[1]=5 (rotary_dim / 2) must be <= 4: rotary_dim=10 must be <= "
        "head_dim=8"}},
      {"rotary_too_few_positions", Base::Append, kForward, "rotary_cos.shape[0] (and sin)",
       "5 (entry 1 rotates positions 4, 5)",
       [](Call& c) { c.p.rotary_cos.shape[0] = c.p.rotary_sin.shape[0] = 5; }, FA_ERROR_SHAPE,
       {"rotary_cos.shape[0]=5 (seqlen_ro) must be >= 6: batch entry 1 rotates positions "
        "cache_seqlens[1]=4 to 5"}},
      {"rotary_causal_query_positions", Base::Append, kForward, "causal",
       "1 (the 5 queries of entry 1 sit at 4 to 8; rotary_cos has 8 rows)",
       [](Call& c) { c.p.causal = 1; }, FA_ERROR_SHAPE,
       {"rotary_cos.shape[0]=8 (seqlen_ro) must be >= 9: batch entry 1 rotates positions "
        "cache_seqlens[1]=4 to 8 (5 rows of k_new / q)"}},
      {"rotary_last_dim_stride_2", Base::Append, kForward, "rotary_sin.stride[1]", "2",
       [](Call& c) { c.p.rotary_sin.stride[1] = 2; }, FA_ERROR_STRIDE,
       {"rotary_sin.stride[1]=2 must be 1"}},
      {"rotary_device_cuda", Base::Append, kForward, "rotary_cos.device", "(CUDA, 0)",
       [](Call& c) { c.p.rotary_cos.device = {FA_DEVICE_CUDA, 0}; }, FA_ERROR_DEVICE,
       {"rotary_cos.device=(1, 0) must equal q.device=(0, 0)"}},
      {"rotary_in_backward", Base::F32, kBackward, "rotary_cos, rotary_sin",
       "given to fa_backward",
       [](Call& c) {
         c.p.rotary_cos = c.add_random(FA_DTYPE_FP32, {8, 2}, 1);
         c.p.rotary_sin = c.add_random(FA_DTYPE_FP32, {8, 2}, 2);
       },
       FA_ERROR_UNSUPPORTED, {"rotary_cos is forward-only"}},
      {"num_splits_negative", Base::F32, kAll, "num_splits", "-1",
       [](Call& c) { c.p.num_splits = -1; }, FA_ERROR_SIZE,
       {"num_splits=-1 must be in [0, 128] (0 = the heuristic, 1 = no split)"}},
      {"num_splits_129", Base::Append, kForward, "num_splits", "129",
       [](Call& c) { c.p.num_splits = 129; }, FA_ERROR_SIZE, {"num_splits=129 must be in [0, 128]"}},
      {"num_splits_with_dropout", Base::F32, kForward, "num_splits", "2 with dropout_p 0.25",
       [](Call& c) { c.p.num_splits = 2; c.p.dropout_p = 0.25f; }, FA_ERROR_UNSUPPORTED,
       {"num_splits=2 with dropout_p=0.25 is not supported"}},
      {"q_shift_int64_max", Base::F32, kAll, "q_shift", "INT64_MAX",
       [](Call& c) { c.p.q_shift = std::numeric_limits<int64_t>::max(); }, FA_ERROR_SIZE,
       {"q_shift=9223372036854775807 is too far from 0", "(seqlen_q=5, seqlen_k=7)"}},
      {"q_shift_int64_min", Base::Packed, kAll, "q_shift", "INT64_MIN",
       [](Call& c) { c.p.q_shift = std::numeric_limits<int64_t>::min(); }, FA_ERROR_SIZE,
       {"q_shift=-9223372036854775808 is too far from 0"}},
      {"q_shift_just_too_far", Base::F32, kAll, "q_shift", "INT64_MAX - (5 + 7 + 2^32) + 1",
       [](Call& c) {
         c.p.q_shift = std::numeric_limits<int64_t>::max() - (12 + (int64_t(1) << 32)) + 1;
       },
       FA_ERROR_SIZE, {"is too far from 0: |q_shift| + seqlen_q + seqlen_k + 2^32 must fit"}},

      // --- attn_bias and dbias (0.4) ----------------------------------------------------------
      {"bias_rank_3", Base::Bias, kAll, "attn_bias.rank", "3",
       [](Call& c) { c.p.attn_bias.rank = 3; }, FA_ERROR_RANK,
       {"attn_bias.rank=3 must be 4: (batch, heads_q, seqlen_q, seqlen_k)"}},
      {"bias_dtype_int32", Base::Bias, kAll, "attn_bias.dtype", "int32",
       [](Call& c) { c.p.attn_bias.dtype = FA_DTYPE_INT32; }, FA_ERROR_DTYPE,
       {"attn_bias.dtype=int32 (4) must be fp32, fp16 or bf16 (an additive bias) or bool or int8 "
        "(a mask)"}},
      {"bias_dtype_fp8", Base::Bias, kAll, "attn_bias.dtype", "fp8_e4m3",
       [](Call& c) { c.p.attn_bias.dtype = FA_DTYPE_FP8_E4M3; }, FA_ERROR_DTYPE,
       {"attn_bias.dtype=fp8_e4m3"}},
      {"bias_batch_3", Base::Bias, kAll, "attn_bias.shape[0]", "3 (batch 2)",
       [](Call& c) { c.p.attn_bias.shape[0] = 3; }, FA_ERROR_SHAPE,
       {"attn_bias.shape[0]=3 must be 1 or q.shape[0] (batch)=2"}},
      {"bias_heads_3", Base::Bias, kAll, "attn_bias.shape[1]", "3 (heads_q 4)",
       [](Call& c) { c.p.attn_bias.shape[1] = 3; }, FA_ERROR_SHAPE,
       {"attn_bias.shape[1]=3 must be 1 or q.shape[2] (heads_q)=4", "attn_bias (2, 3, 5, 7)"}},
      {"bias_seqlen_q_4", Base::Bias, kAll, "attn_bias.shape[2]", "4 (seqlen_q 5)",
       [](Call& c) { c.p.attn_bias.shape[2] = 4; }, FA_ERROR_SHAPE,
       {"attn_bias.shape[2]=4 must be 1 or q.shape[1] (seqlen_q)=5"}},
      {"bias_seqlen_k_8", Base::Bias, kAll, "attn_bias.shape[3]", "8 (seqlen_k 7)",
       [](Call& c) { c.p.attn_bias.shape[3] = 8; }, FA_ERROR_SHAPE,
       {"attn_bias.shape[3]=8 must be 1 or k.shape[1] (seqlen_k)=7"}},
      {"bias_shape_zero", Base::Bias, kAll, "attn_bias.shape[2]", "0",
       [](Call& c) { c.p.attn_bias.shape[2] = 0; }, FA_ERROR_SIZE,
       {"attn_bias.shape[2]=0 must be > 0"}},
      {"bias_negative_stride", Base::Bias, kAll, "attn_bias.stride[3]", "-1",
       [](Call& c) { c.p.attn_bias.stride[3] = -1; }, FA_ERROR_STRIDE,
       {"attn_bias.stride[3]=-1 must be >= 0"}},
      {"bias_address_mod4_2", Base::Bias, kAll, "attn_bias.data", "fp32 at address % 4 == 2",
       [](Call& c) { c.p.attn_bias.data = shifted(c.p.attn_bias.data, 2); }, FA_ERROR_ALIGNMENT,
       {"attn_bias.data=", "must be aligned to 4 bytes"}},
      {"bias_device_index", Base::Bias, kAll, "attn_bias.device", "(CPU, 3)",
       [](Call& c) { c.p.attn_bias.device.index = 3; }, FA_ERROR_DEVICE,
       {"attn_bias.device=(0, 3) must equal q.device=(0, 0)"}},
      {"bias_with_paged_cache", Base::Paged, kForward, "attn_bias", "with block_table",
       [](Call& c) { c.p.attn_bias = c.add_random(FA_DTYPE_FP32, {2, 4, 5, 7}, 3); },
       FA_ERROR_UNSUPPORTED,
       {"attn_bias with block_table (a paged KV cache) is not supported yet"}},
      {"bias_packed_queries_short", Base::Packed, kAll, "attn_bias.shape[2]",
       "4 (the longest query sequence is 5)",
       [](Call& c) { c.p.attn_bias = c.add_random(FA_DTYPE_FP32, {2, 4, 4, 6}, 4); },
       FA_ERROR_SHAPE,
       {"attn_bias.shape[2]=4 must be 1 or >= 5, the longest sequence of cu_seqlens_q"}},
      {"bias_packed_batch", Base::Packed, kAll, "attn_bias.shape[0]", "3 (2 sequences)",
       [](Call& c) { c.p.attn_bias = c.add_random(FA_DTYPE_FP32, {3, 4, 5, 6}, 5); },
       FA_ERROR_SHAPE, {"attn_bias.shape[0]=3 must be 1 or cu_seqlens_q.shape[0] - 1 (batch)=2"}},
      {"dbias_without_bias", Base::Bias, kBackward, "dbias", "given without attn_bias",
       [](Call& c) { c.p.attn_bias.data = nullptr; }, FA_ERROR_NULL_POINTER,
       {"attn_bias.data is NULL while dbias is given"}},
      {"dbias_of_a_mask", Base::Bias, kBackward, "dbias", "with a bool attn_bias",
       [](Call& c) { c.p.attn_bias.dtype = FA_DTYPE_BOOL; }, FA_ERROR_DTYPE,
       {"dbias is given but attn_bias.dtype=bool is a mask, which has no gradient"}},
      {"dbias_dtype_fp16", Base::Bias, kBackward, "dbias.dtype", "fp16 (attn_bias fp32)",
       [](Call& c) { c.p.dbias.dtype = FA_DTYPE_FP16; }, FA_ERROR_DTYPE,
       {"dbias.dtype=fp16 must be fp32 or attn_bias.dtype=fp32"}},
      {"dbias_rank_2", Base::Bias, kBackward, "dbias.rank", "2",
       [](Call& c) { c.p.dbias.rank = 2; }, FA_ERROR_RANK, {"dbias.rank=2 must be 4"}},
      {"dbias_shape", Base::Bias, kBackward, "dbias.shape[2]", "1 (attn_bias's is 5)",
       [](Call& c) { c.p.dbias.shape[2] = 1; }, FA_ERROR_SHAPE,
       {"dbias.shape[2]=1 must equal attn_bias.shape[2]=5"}},
      {"dbias_overlapping", Base::Bias, kBackward, "dbias.stride[1]", "0 (shape[1] = 4)",
       [](Call& c) { c.p.dbias.stride[1] = 0; }, FA_ERROR_STRIDE,
       {"dbias.stride[1]=0 makes elements overlap", "every element needs its own memory"}},
      {"dbias_address_mod4_1", Base::Bias, kBackward, "dbias.data", "fp32 at address % 4 == 1",
       [](Call& c) { c.p.dbias.data = shifted(c.p.dbias.data, 1); }, FA_ERROR_ALIGNMENT,
       {"dbias.data=", "must be aligned to 4 bytes"}},

      // --- fp8 e4m3 inputs and their descales (0.5) -------------------------------------------
      {"fp8_backward", Base::F16, kBackward, "q.dtype, k.dtype, v.dtype",
       "fp8_e4m3 given to fa_backward",
       [](Call& c) {
         for (fa_tensor* t : {&c.p.q, &c.p.k, &c.p.v}) t->dtype = FA_DTYPE_FP8_E4M3;
       },
       FA_ERROR_UNSUPPORTED,
       {"fa_backward (the gradients) with q.dtype=fp8_e4m3 is not supported"}},
      {"fp8_out_fp32", Base::Fp8, kForward, "out.dtype", "fp32 (q fp8_e4m3: fp16 or bf16)",
       [](Call& c) { c.p.out = c.add(HostTensor(FA_DTYPE_FP32, {2, 5, 4, 8})).view().raw; },
       FA_ERROR_DTYPE, {"out.dtype=fp32 must be fp16 or bf16 (q.dtype=fp8_e4m3)"}},
      {"fp8_out_fp8", Base::Fp8, kForward, "out.dtype", "fp8_e4m3",
       [](Call& c) { c.p.out.dtype = FA_DTYPE_FP8_E4M3; }, FA_ERROR_DTYPE,
       {"out.dtype=fp8_e4m3 must be fp16 or bf16"}},
      {"fp8_v_bf16", Base::Fp8, kForward, "v.dtype", "bf16 (q fp8_e4m3)",
       [](Call& c) { c.p.v = c.add(HostTensor(FA_DTYPE_BF16, {2, 7, 2, 8})).view().raw; },
       FA_ERROR_DTYPE, {"v.dtype=bf16 must be fp8_e4m3 (q.dtype=fp8_e4m3)"}},
      {"fp8_dropout", Base::Fp8, kForward, "dropout_p", "0.1 with fp8",
       [](Call& c) { c.p.dropout_p = 0.1f; }, FA_ERROR_UNSUPPORTED,
       {"dropout_p != 0 with q.dtype=fp8_e4m3 is not supported"}},
      {"fp8_attn_bias", Base::Fp8, kForward, "attn_bias", "an fp32 bias with fp8",
       [](Call& c) { c.p.attn_bias = c.add_random(FA_DTYPE_FP32, {2, 4, 5, 7}, 21); },
       FA_ERROR_UNSUPPORTED, {"attn_bias with q.dtype=fp8_e4m3 is not supported"}},
      {"fp8_rotary", Base::Fp8, kForward, "rotary_cos, rotary_sin", "given with fp8",
       [](Call& c) {
         c.p.rotary_cos = c.add_random(FA_DTYPE_FP32, {8, 2}, 22);
         c.p.rotary_sin = c.add_random(FA_DTYPE_FP32, {8, 2}, 23);
       },
       FA_ERROR_UNSUPPORTED, {"rotary_cos / rotary_sin (rotary embedding of fp8 keys)"}},
      {"descale_with_fp16", Base::F16, kForward, "q_descale", "given with fp16 inputs",
       [](Call& c) { c.p.q_descale = c.add_random(FA_DTYPE_FP32, {2, 2}, 24); }, FA_ERROR_DTYPE,
       {"q_descale is given but q.dtype=fp16: descales scale fp8_e4m3 inputs only"}},
      {"q_descale_dtype_fp16", Base::Fp8, kForward, "q_descale.dtype", "fp16",
       [](Call& c) { c.p.q_descale = c.add_random(FA_DTYPE_FP16, {2, 2}, 25); }, FA_ERROR_DTYPE,
       {"q_descale.dtype=fp16 must be fp32"}},
      {"k_descale_rank_1", Base::Fp8, kForward, "k_descale.rank", "1",
       [](Call& c) { c.p.k_descale.rank = 1; }, FA_ERROR_RANK, {"k_descale.rank=1 must be 2"}},
      {"v_descale_heads_q", Base::Fp8, kForward, "v_descale.shape", "(2, 4): heads_q, not heads_kv",
       [](Call& c) { c.p.v_descale = c.add_random(FA_DTYPE_FP32, {2, 4}, 26); }, FA_ERROR_SHAPE,
       {"v_descale.shape=(2, 4) must be (2, 2): (batch, heads_kv)"}},
      {"q_descale_batch_1", Base::Fp8, kForward, "q_descale.shape[0]", "1 (batch 2)",
       [](Call& c) { c.p.q_descale.shape[0] = 1; }, FA_ERROR_SHAPE,
       {"q_descale.shape=(1, 2) must be (2, 2)"}},
      {"k_descale_zero_size", Base::Fp8, kForward, "k_descale.shape[1]", "0",
       [](Call& c) { c.p.k_descale.shape[1] = 0; }, FA_ERROR_SIZE,
       {"k_descale.shape[1]=0 must be > 0"}},
      {"v_descale_negative_stride", Base::Fp8, kForward, "v_descale.stride[0]", "-2",
       [](Call& c) { c.p.v_descale.stride[0] = -2; }, FA_ERROR_STRIDE,
       {"v_descale.stride[0]=-2 must be >= 0"}},
      {"q_descale_device_index", Base::Fp8, kForward, "q_descale.device", "(CPU, 3)",
       [](Call& c) { c.p.q_descale.device.index = 3; }, FA_ERROR_DEVICE,
       {"q_descale.device=(0, 3) must equal q.device=(0, 0)"}},
      {"k_descale_address_mod4_2", Base::Fp8, kForward, "k_descale.data", "at address % 4 == 2",
       [](Call& c) { c.p.k_descale.data = shifted(c.p.k_descale.data, 2); }, FA_ERROR_ALIGNMENT,
       {"k_descale.data=", "must be aligned to 4 bytes"}},
  };
  return entries;
}

// ---------------------------------------------------------------------------------------------
// Running one case

// Runs `e` on every entry point it lists and checks status, message, and that no buffer changed.
void expect_rejected(const Entry& e) {
  for (EntryPoint ep : kEntryPoints) {
    if (!(e.points & ep)) continue;
    SCOPED_TRACE(entry_point_name(ep));
    Call call(e.base, ep);  // its query leaves fa_last_error() == "", so a message is this call's
    ASSERT_STREQ(fa_last_error(), "");
    e.mutate(call);
    std::vector<HostTensor> before;
    for (const auto& [name, t] : call.buffers()) before.push_back(t->data() ? clone(*t) : HostTensor());

    constexpr size_t kUntouched = 0x5EED5EEDu;
    size_t bytes = kUntouched;
    const fa_status s = call.invoke(ep, &bytes);
    const std::string msg = fa_last_error();

    EXPECT_EQ(s, e.status) << "got " << status_name(s) << " (\"" << msg << "\"), expected "
                           << status_name(e.status);
    for (const std::string& f : e.fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "message \"" << msg << "\" lacks \"" << f << "\"";
    EXPECT_EQ(bytes, kUntouched) << "a rejected query wrote *bytes";
    const auto buffers = call.buffers();
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].second->data() == nullptr) continue;
      EXPECT_TRUE(buffers[i].second->bytes_equal(before[i]))
          << buffers[i].first << " was written by a rejected call";
    }
  }
}

class ValidationCatalogue : public testing::TestWithParam<Entry> {};

TEST_P(ValidationCatalogue, RejectsBeforeWriting) { expect_rejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Validation, ValidationCatalogue, testing::ValuesIn(catalogue()),
                         [](const testing::TestParamInfo<Entry>& info) {
                           return std::string(info.param.name);
                         });

// ---------------------------------------------------------------------------------------------
// Around the table

// Every base problem is accepted by every entry point: so each catalogue case fails only
// because of its mutation.
TEST(Validation, BaseProblemsAreValid) {
  for (Base b : kBases) {
    for (EntryPoint ep : kEntryPoints) {
      if (forward_only(b) && (ep & kBackward)) continue;  // a KV cache: refused by the backward
      SCOPED_TRACE(std::string(base_name(b)) + " " + entry_point_name(ep));
      Call call(b, ep);
      size_t bytes = 0;
      EXPECT_EQ(call.invoke(ep, &bytes), FA_OK) << fa_last_error();
      EXPECT_STREQ(fa_last_error(), "");
    }
  }
}

// A row on a KV-cache base lists the forward's entry points only (the backward refuses the base).
TEST(Validation, ForwardOnlyBasesHaveForwardRows) {
  for (const Entry& e : catalogue())
    if (forward_only(e.base)) EXPECT_EQ(e.points & kBackward, 0u) << e.name;
}

TEST(Validation, SuccessClearsLastError) {
  for (EntryPoint ep : kEntryPoints) {
    SCOPED_TRACE(entry_point_name(ep));
    Call call(Base::F32, ep);
    size_t bytes = 0;
    ASSERT_EQ(fa_forward_workspace_size(nullptr, &bytes), FA_ERROR_NULL_POINTER);
    ASSERT_STRNE(fa_last_error(), "");
    EXPECT_EQ(call.invoke(ep, &bytes), FA_OK) << fa_last_error();
    EXPECT_STREQ(fa_last_error(), "");
  }
}

TEST(Validation, LastErrorIsPerThread) {
  size_t bytes = 0;
  ASSERT_EQ(fa_forward_workspace_size(nullptr, &bytes), FA_ERROR_NULL_POINTER);
  const std::string main_message = fa_last_error();
  ASSERT_NE(main_message.find("params is NULL"), std::string::npos);

  // The other thread fails differently, then (after the main thread succeeds) reads again.
  std::promise<void> other_failed, main_succeeded;
  std::string other_initial, other_after_fail, other_after_main_success;
  std::thread other([&] {
    other_initial = fa_last_error();
    fa_params p;
    fa_params_init(&p);
    p.struct_size = 1;
    size_t b = 0;
    (void)fa_backward_workspace_size(&p, &b);
    other_after_fail = fa_last_error();
    other_failed.set_value();
    main_succeeded.get_future().wait();
    other_after_main_success = fa_last_error();
  });
  other_failed.get_future().wait();
  EXPECT_EQ(fa_last_error(), main_message) << "another thread's error changed this thread's";
  Call call(Base::F32, kFwdSize);  // a successful query on this thread
  EXPECT_STREQ(fa_last_error(), "");
  main_succeeded.set_value();
  other.join();

  EXPECT_EQ(other_initial, "") << "a new thread starts with no message";
  EXPECT_NE(other_after_fail.find("params.struct_size=1"), std::string::npos) << other_after_fail;
  EXPECT_EQ(other_after_main_success, other_after_fail)
      << "a success on another thread cleared this thread's message";
}

TEST(Validation, StatusStringsAreDistinct) {
  std::set<std::string> seen;
  for (int s = FA_OK; s <= FA_ERROR_INTERNAL; ++s) {
    const char* text = fa_status_string(fa_status(s));
    ASSERT_NE(text, nullptr) << status_name(fa_status(s));
    EXPECT_STRNE(text, "") << status_name(fa_status(s));
    EXPECT_TRUE(seen.insert(text).second) << status_name(fa_status(s)) << " repeats \"" << text << "\"";
  }
  const char* unknown = fa_status_string(fa_status(999));
  ASSERT_NE(unknown, nullptr);
  EXPECT_STRNE(unknown, "");
  EXPECT_EQ(seen.count(unknown), 0u) << "an unknown status reads like a known one";
}

// fa::check and friends throw fa::Error carrying the status and the library's message.
TEST(Validation, CppWrapperThrowsError) {
  Problem pr(base_case(Base::F32));
  pr.poison_outputs();
  const HostTensor out0 = clone(pr.out), lse0 = clone(pr.lse), dq0 = clone(pr.dq),
                   dk0 = clone(pr.dk), dv0 = clone(pr.dv);
  auto expect_error = [](const std::function<void()>& f, fa_status status, const char* fragment) {
    try {
      f();
      ADD_FAILURE() << "no fa::Error thrown; expected " << status_name(status);
    } catch (const fa::Error& e) {
      EXPECT_EQ(e.status(), status) << status_name(e.status()) << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };

  fa::Tensor k = pr.k.view(), v = pr.v.view();
  k.raw.shape[2] = v.raw.shape[2] = 3;
  expect_error([&] { fa::forward(pr.q.view(), k, v, pr.out.view(), pr.lse.view()); },
               FA_ERROR_HEADS, "k.shape[2]=3");
  fa::Tensor dq = pr.dq.view();
  dq.raw.stride[3] = 2;
  expect_error([&] {
    fa::backward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), pr.lse.view(),
                 pr.dout.view(), dq, pr.dk.view(), pr.dv.view());
  }, FA_ERROR_STRIDE, "dq.stride[3]=2");
  fa::Options o;
  o.dropout_p = 1.f;
  expect_error([&] {
    fa::forward_workspace_size(fa::make_params(pr.q.view(), pr.k.view(), pr.v.view(),
                                               pr.out.view(), pr.lse.view(), o));
  }, FA_ERROR_DROPOUT, "dropout_p=1");
  const fa_params p = pr.params(FA_BACKEND_AUTO, true);
  expect_error([&] { fa::forward(p, nullptr, 0); }, FA_ERROR_WORKSPACE, "workspace is NULL");
  fa::HostWorkspace tiny(1);
  expect_error([&] { fa::backward(p, tiny.data(), tiny.size()); }, FA_ERROR_WORKSPACE,
               "workspace_bytes=1");
  expect_error([&] { fa::backward_workspace_size(fa_params{}); }, FA_ERROR_VERSION,
               "params.struct_size=0");

  EXPECT_TRUE(pr.out.bytes_equal(out0) && pr.lse.bytes_equal(lse0));
  EXPECT_TRUE(pr.dq.bytes_equal(dq0) && pr.dk.bytes_equal(dk0) && pr.dv.bytes_equal(dv0));
  EXPECT_NO_THROW(fa::forward(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), pr.lse.view()));
}

// A machine (or build) without a GPU: tensors that claim CUDA device 0 name a device that does
// not exist. Every entry point says so, and nothing is written.
TEST(Validation, CudaTensorsWithoutGpu) {
  if (fa_cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (Base b : {Base::F32, Base::Packed, Base::Alibi}) {
    SCOPED_TRACE(base_name(b));
    expect_rejected({"cuda_without_gpu", b, kAll, "q.device", "(CUDA, 0)",
                     [](Call& c) { set_device(c.p, fa::cuda_device(0)); }, FA_ERROR_DEVICE,
                     {"q.device.index=0 is not a CUDA device (this build sees 0)"}});
  }
}

// ---------------------------------------------------------------------------------------------
// The written catalogue

std::string md_escape(std::string s) {
  std::string r;
  for (char ch : s) r += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return r;
}

std::string catalogue_row(const Entry& e) {
  std::string frags;
  for (const std::string& f : e.fragments) frags += (frags.empty() ? "`" : " … `") + f + "`";
  return "| `" + std::string(e.name) + "` | `" + md_escape(e.argument) + "` | " + md_escape(e.bad) +
         " | `" + status_name(e.status) + "` | " + md_escape(frags) + " | " +
         entry_points_text(e.points) + " | " + base_name(e.base) + " |";
}

std::string catalogue_table() {
  std::string t =
      "| case | argument | bad value | status | message fragments | entry points | base |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const Entry& e : catalogue()) t += catalogue_row(e) + "\n";
  return t;
}

// The document's table between its markers must be exactly the one the test table generates.
TEST(Validation, CatalogueDocumentMatchesTable) {
  const std::string path =
      std::string(__FILE__).substr(0, std::string(__FILE__).find_last_of('/') + 1) +
      "validation_catalogue.md";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << path << " is not readable from here";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  const std::string begin = "<!-- catalogue:begin -->\n", end = "<!-- catalogue:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && b < e)
      << path << " lacks the catalogue markers";
  const std::string table = catalogue_table();
  const std::string have = doc.substr(b + begin.size(), e - b - begin.size());
  if (have != table && std::getenv("FA_UPDATE_VALIDATION_CATALOGUE") != nullptr) {
    doc.replace(b + begin.size(), e - b - begin.size(), table);
    std::ofstream(path) << doc;
    GTEST_SKIP() << "rewrote the table in " << path;
  }
  EXPECT_EQ(have, table) << path << " is out of date; rerun with FA_UPDATE_VALIDATION_CATALOGUE=1";
}

}  // namespace
}  // namespace fa::test
