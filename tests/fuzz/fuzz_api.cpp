// libFuzzer target for the C ABI on the CPU backend: a hostile caller.
//
// Each input (fuzz_case.h) is an attention problem plus edits that break it (hostile sizes,
// max_seqlen claims, strides, ranks, dtypes, NULLs, misaligned pointers, cu_seqlens contents,
// workspaces, struct_size ...). The harness calls all five entry points (the four calls and
// fa_select_kernel) with it and stops the process (a printed reason, then abort) when an
// invariant of the ABI breaks:
//   - no call returns FA_ERROR_INTERNAL; fa_last_error() names something after a failure and is
//     "" after a success;
//   - a query writes only *bytes, and only when it succeeds;
//   - a refused call writes nothing: outputs, workspace and the size out-argument keep their
//     bytes (everything is poisoned or snapshotted before, guard bytes surround every buffer);
//   - an accepted call writes only its outputs and its workspace (inputs, and out / lse in the
//     backward, keep their bytes);
//   - fa_select_kernel refuses only what the query refuses (with the same status), writes only
//     *name, and names a CPU family (the reference's for REFERENCE / VANILLA);
//   - query and run agree: a run refuses what its query refused, is not refused for workspace
//     when given the queried size, and the size a refusal names is exact (one byte less is
//     refused, that size is not);
//   - an accepted FLASH / AUTO call agrees with FA_BACKEND_REFERENCE on the same params
//     (fuzz_compare.h: the tolerance and when values are compared at all).
// Memory is bounded by the real extent of each tensor (shapes and strides as decoded, capped
// below); a run is skipped when its real work (the real sequence lengths, never max_seqlen) is
// above kMaxWork, so a claimed max_seqlen that makes the library slow shows as a timeout.
//
// FA_FUZZ_TRACE=1 prints a line a call (status, message, comparisons) to see what an input does.
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "flashattn/flashattn.h"
#include "fuzz_case.h"
#include "fuzz_compare.h"
#include "fuzz_memory.h"

extern "C" const char* fa_fuzz_status_string(int status);  // fuzz_c_abi.c

namespace fa_fuzz {
namespace {

constexpr int64_t kMaxTensorBytes = int64_t(1) << 16;  // one buffer's real extent
constexpr int64_t kMaxTotalBytes = int64_t(1) << 19;   // all buffers of an input
constexpr size_t kMaxWorkspaceBytes = size_t(4) << 20;
constexpr double kMaxWork = double(1 << 18);  // multiply-adds of one pass, in 64 x 64 x 16 tiles
constexpr size_t kSentinel = 0x5A5A5A5A5A5A5A5Aull;  // *bytes before a query
constexpr size_t kRefusedQueryBytes = 4096;  // "queried" for workspace modes when the query refused

const bool kTrace = [] {
  const char* v = std::getenv("FA_FUZZ_TRACE");
  return v != nullptr && *v == '1';
}();

void trace(const char* fmt, ...) {
  if (!kTrace) return;
  std::va_list args;
  va_start(args, fmt);
  std::fputs("fa_fuzz_api: ", stderr);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
}

[[noreturn]] void broken(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::fputs("fa_fuzz_api: invariant broken: ", stderr);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::abort();
}

const char* level_name(Level l) {
  return l == Level::kValues ? "values" : l == Level::kClasses ? "classes" : "none";
}

// splitmix64: input values from the data_seed byte.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// Elements the library may address through t: 1 + sum (shape - 1) * stride over its rank dims;
// 0 for an empty or malformed tensor (which the library must refuse); -1 above the cap.
int64_t extent(const TensorSpec& t) {
  if (!t.present || t.rank < 1 || t.rank > FA_MAX_RANK) return 0;
  __int128 e = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0) return 0;
    e += __int128(t.shape[i] - 1) * std::max<int64_t>(t.stride[i], 0);
    if (e > kMaxTensorBytes) return -1;
  }
  return int64_t(e);
}

int64_t misalign_of(const TensorSpec& t) { return t.misalign & 63; }

const char* call_name(Pass p, bool query) {
  if (p == kForward) return query ? "fa_forward_workspace_size" : "fa_forward";
  return query ? "fa_backward_workspace_size" : "fa_backward";
}

// The workspace size a refusal names ("... need >= N", "... needs at least N bytes"); 0 if none.
size_t named_need(const char* msg) {
  const char* at = nullptr;
  for (const char* p = std::strstr(msg, "need"); p; p = std::strstr(p + 1, "need")) at = p;
  if (at == nullptr) return 0;
  while (*at && !std::isdigit(static_cast<unsigned char>(*at))) ++at;
  size_t n = 0;
  for (; std::isdigit(static_cast<unsigned char>(*at)); ++at) {
    if (n > (SIZE_MAX - 9) / 10) return 0;
    n = n * 10 + size_t(*at - '0');
  }
  return n;
}

void check_status(const char* call, fa_status s) {
  const char* name = fa_status_string(s);
  if (name == nullptr || *name == '\0') broken("fa_status_string(%d) is empty", int(s));
  if (s < FA_OK || s > FA_ERROR_INTERNAL) broken("%s returned %d, not an fa_status", call, int(s));
  const char* msg = fa_last_error();
  if (msg == nullptr) broken("fa_last_error() is NULL after %s", call);
  trace("%s -> %s%s%s", call, name, *msg ? ": " : "", msg);
  if (s == FA_ERROR_INTERNAL) broken("%s returned FA_ERROR_INTERNAL: %s", call, msg);
  if (s == FA_OK && *msg != '\0') broken("%s succeeded but fa_last_error() is \"%s\"", call, msg);
  if (s != FA_OK) {
    int letters = 0;
    for (const char* p = msg; *p; ++p) letters += std::isalpha(static_cast<unsigned char>(*p)) != 0;
    if (letters < 2) broken("%s refused (%s) with message \"%s\"", call, name, msg);
  }
}

// Buffers of one input: the call's tensors (slot = Role), the reference's outputs, and the
// column-sum call's dout (all ones) and outputs (see column_sums).
enum Slot {
  kRefOut = kRoles, kRefLse, kRefDq, kRefDk, kRefDv,
  kOnes, kSumDq, kSumDk, kSumDv,
  kSlots
};
static_assert(kSlots <= 32, "slot sets are 32-bit masks");
constexpr Role kSlotRole[kSlots] = {
    kQ, kK, kV, kOut, kLse, kDout, kDq, kDk, kDv, kCuQ, kCuK, kAlibi,  // the call's
    kOut, kLse, kDq, kDk, kDv,                                          // the reference's
    kDout, kDq, kDk, kDv};                                              // the column-sum call's
const char* slot_owner(int s) {
  return s < kRoles ? "" : s < kOnes ? "the reference's " : "the column-sum call's ";
}
constexpr unsigned bit(int slot) { return 1u << slot; }

// Which slots a call's out, lse, dout, dq, dk, dv point at.
struct Binding {
  int out = kOut, lse = kLse, dout = kDout, dq = kDq, dk = kDk, dv = kDv;
  unsigned writes(Pass p) const {
    return p == kForward ? bit(out) | bit(lse) : bit(dq) | bit(dk) | bit(dv);
  }
};
constexpr Binding kUnderTest{};
constexpr Binding kReferenceFwd{kRefOut, kRefLse, kDout, kDq, kDk, kDv};
constexpr Binding kReferenceBwd{kOut, kLse, kDout, kRefDq, kRefDk, kRefDv};
constexpr Binding kColumnSums{kOut, kLse, kOnes, kSumDq, kSumDk, kSumDv};

class Harness {
 public:
  explicit Harness(const Case& c) : c_(c) {}

  // False when the tensors' real extents are above the caps (the input is skipped).
  bool allocate() {
    int64_t total = 0;
    for (int s = 0; s < kSlots; ++s) {
      const TensorSpec& t = spec(s);
      const int64_t e = extent(t);
      if (e < 0) return false;
      const int64_t bytes = e * dtype_bytes(t.dtype) + misalign_of(t);
      total += bytes;
      if (bytes > kMaxTensorBytes || total > kMaxTotalBytes) return false;
      buf_[s] = std::make_unique<GuardedBuffer>(size_t(bytes));
    }
    return true;
  }

  void fill() {
    Rng rng{0x243F6A8885A308D3ull ^ c_.data_seed};
    for (int s = 0; s < kSlots; ++s) std::memset(buf_[s]->data(), c_.poison, buf_[s]->size());
    for (Role r : {kQ, kK, kV, kDout}) fill_values(r, rng);
    fill_ones(kOnes);
    fill_cu(kCuQ, c_.len_q);
    fill_cu(kCuK, c_.len_k);
    fill_slopes(rng);
    for (auto& b : buf_) b->snapshot();
  }

  void probe_strings() {
    for (int s = FA_OK; s <= FA_ERROR_INTERNAL + 1; ++s) {
      const char* name = fa_status_string(fa_status(s));
      if (name == nullptr || *name == '\0') broken("fa_status_string(%d) is empty", s);
    }
    if (fa_fuzz_status_string(c_.status_probe) == nullptr)  // any int, as from C
      broken("fa_status_string(%d) is NULL", int(c_.status_probe));
    if (fa_version() != FA_VERSION)
      broken("fa_version() = %d, header %d", fa_version(), FA_VERSION);
  }

  void pass(Pass pass) {
    const bool fwd = pass == kForward;
    if (!fwd && !forward_ok_) {  // the backward reads out and lse: give it finite values
      Rng rng{0x13198A2E03707344ull ^ c_.data_seed};
      fill_values(kOut, rng);
      fill_lse(rng);
      buf_[kOut]->snapshot();
      buf_[kLse]->snapshot();
    }
    const fa_params p = params(pass, c_.backend, kUnderTest);
    const bool accepted =
        checked_pass(pass, c_.null_params ? nullptr : &p, kUnderTest, true) == kAccepted;
    if (fwd) forward_ok_ = accepted;
    const bool flash = c_.backend == FA_BACKEND_AUTO || c_.backend == FA_BACKEND_FLASH;
    if (!accepted || !flash || c_.null_params) return;
    if (!fwd && !forward_ok_) return;  // out / lse are not the forward's: nothing to agree on
    if (!outputs_injective(pass)) {
      trace("no comparison: an output is not injective (aliased elements)");
      return;
    }
    const Tolerance tol = tolerance(c_, problem());
    if (tol.level(0) == Level::kNone) {
      trace("no comparison: fp32 logit terms up to %.3g (beyond the compared range)", tol.raw);
      return;
    }
    const fa_params rp = params(pass, FA_BACKEND_REFERENCE, fwd ? kReferenceFwd : kReferenceBwd);
    if (checked_pass(pass, &rp, fwd ? kReferenceFwd : kReferenceBwd, false) != kAccepted) return;
    if (fwd) {
      compare(kOut, kRefOut, tol, tol.out, tol.out);
      // lse is optional in the forward (fa_params 0.2): NULL is neither written nor compared.
      if (spec(kLse).present) compare(kLse, kRefLse, tol, 0, 0);
      return;
    }
    // The flash backward's D = rowsum(dO ∘ out) reads the stored out: where out's bound leaves
    // the dtype's range (an fp16 out that overflowed to inf, e.g. dropout_p = 1 - 2^-24 scaling
    // kept probabilities by 1.7e7), its gradients are NaN where the fp64 reference's are not,
    // as for FlashAttention. Nothing is compared then (found by the fuzzer on the H200 run).
    if (tol.level(tol.out) == Level::kNone) {
      trace("gradients not compared: out's bound %.3g is past the dtype's range", tol.out);
      return;
    }
    compare(kDq, kRefDq, tol, tol.dq, tol.dq);
    if (column_sums()) {
      compare(kDk, kRefDk, tol, tol.dk_per_colsum, tol.dk, kSumDv);
      compare(kDv, kRefDv, tol, tol.dv_per_colsum, tol.dv, kSumDv);
    } else {
      compare(kDk, kRefDk, tol, tol.dk, tol.dk);
      compare(kDv, kRefDv, tol, tol.dv, tol.dv);
    }
  }

 private:
  const TensorSpec& spec(int slot) const { return c_.tensor[kSlotRole[slot]]; }
  uint8_t* data(int slot) const { return buf_[slot]->data() + misalign_of(spec(slot)); }
  int64_t count(int slot) const { return std::max<int64_t>(extent(spec(slot)), 0); }

  void fill_values(int s, Rng& rng) {
    GuardedBuffer& b = *buf_[s];
    for (size_t i = 0; i < b.size(); ++i) b.data()[i] = uint8_t(rng.next());
    const float unit = std::ldexp(1.f, c_.magnitude_shift - 7);
    for (int64_t i = 0; i < count(s); ++i) store(s, i, float(int(rng.next() % 511) - 255) * unit);
  }
  void fill_ones(int s) {
    for (int64_t i = 0; i < count(s); ++i) store(s, i, 1.f);
  }
  // x must be exact in the slot's dtype (fuzz_memory.h); other dtypes keep their bytes.
  void store(int s, int64_t i, float x) {
    const int32_t dt = spec(s).dtype;
    uint8_t* p = data(s) + i * dtype_bytes(dt);
    if (dt == FA_DTYPE_FP32) {
      std::memcpy(p, &x, 4);
    } else if (dt == FA_DTYPE_FP16 || dt == FA_DTYPE_BF16) {
      const uint16_t h = dt == FA_DTYPE_FP16 ? float_to_fp16_exact(x) : float_to_bf16_exact(x);
      std::memcpy(p, &h, 2);
    }
  }
  void fill_lse(Rng& rng) {
    for (int64_t i = 0; i < count(kLse); ++i) store(kLse, i, float(rng.next() % 1024) / 256.f);
  }
  void fill_slopes(Rng& rng) {  // [-0.25, 1]
    for (int64_t i = 0; i < count(kAlibi); ++i)
      store(kAlibi, i, float(int(rng.next() % 321) - 64) / 256.f);
  }
  // Prefix sums of the decoded lengths, then the edits' entries.
  void fill_cu(Role r, const std::vector<int64_t>& lens) {
    const int64_t n = spec(r).dtype == FA_DTYPE_INT32 ? count(r) : 0;
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t v = int32_t(sum);
      std::memcpy(data(r) + 4 * i, &v, 4);
      if (i < int64_t(lens.size())) sum += lens[size_t(i)];
    }
    for (const CuEdit& e : c_.cu_edits)
      if (e.role == r && e.index >= 0 && e.index < n)
        std::memcpy(data(r) + 4 * e.index, &e.value, 4);
  }
  int32_t cu(Role r, int64_t i) const {
    int32_t v;
    std::memcpy(&v, data(r) + 4 * i, 4);
    return v;
  }

  fa_tensor tensor(int slot) const {
    const TensorSpec& s = spec(slot);
    fa_tensor t;
    t.data = s.present ? data(slot) : nullptr;
    t.dtype = s.dtype;
    t.rank = s.rank;
    std::copy(s.shape, s.shape + FA_MAX_RANK, t.shape);
    std::copy(s.stride, s.stride + FA_MAX_RANK, t.stride);
    t.device = s.device;
    return t;
  }

  fa_params params(Pass pass, int32_t backend, const Binding& b) const {
    fa_params p;
    fa_params_init(&p);
    p.struct_size = c_.struct_size;
    p.backend = backend;
    p.q = tensor(kQ), p.k = tensor(kK), p.v = tensor(kV);
    p.out = tensor(b.out), p.lse = tensor(b.lse), p.dout = tensor(b.dout);
    p.dq = tensor(b.dq), p.dk = tensor(b.dk), p.dv = tensor(b.dv);
    p.cu_seqlens_q = tensor(kCuQ), p.cu_seqlens_k = tensor(kCuK);
    p.alibi_slopes = tensor(kAlibi);
    p.max_seqlen_q = c_.max_seqlen_q[pass];
    p.max_seqlen_k = c_.max_seqlen_k[pass];
    p.softmax_scale = c_.softmax_scale;
    p.causal = c_.causal;
    p.window_left = c_.window_left;
    p.window_right = c_.window_right;
    p.softcap = c_.softcap;
    p.q_shift = c_.q_shift;
    p.dropout_p = c_.dropout_p;
    p.seed = c_.seed;
    p.offset = c_.offset;
    p.deterministic = c_.deterministic;
    return p;
  }

  // Every buffer kept its guards; those outside `writable` kept their bytes.
  void check_buffers(const char* call, unsigned writable) {
    for (int s = 0; s < kSlots; ++s) {
      const char* name = kRoleNames[kSlotRole[s]];
      if (!buf_[s]->guards_intact()) broken("%s wrote outside %s%s", call, slot_owner(s), name);
      if (writable & bit(s))
        buf_[s]->snapshot();
      else if (!buf_[s]->unchanged())
        broken("%s wrote %s%s, which it must not touch", call, slot_owner(s), name);
    }
  }

  // Packed as the library sees it (edits may have removed or added cu_seqlens).
  bool varlen() const { return c_.tensor[kCuQ].present || c_.tensor[kCuK].present; }

  // Sizes the library works with for an accepted call (from q, k and cu_seqlens as given).
  Problem problem() const {
    const TensorSpec& q = c_.tensor[kQ];
    const TensorSpec& k = c_.tensor[kK];
    Problem p;
    const int h = varlen() ? 1 : 2;
    p.heads_q = q.shape[h];
    p.heads_kv = k.shape[h];
    p.head_dim = q.shape[h + 1];
    p.norm_q = max_row_norm(q, data(kQ));
    p.norm_k = max_row_norm(k, data(kK));
    p.norm_v = max_row_norm(c_.tensor[kV], data(kV));
    p.norm_dout = max_row_norm(c_.tensor[kDout], data(kDout));
    if (!varlen()) {
      p.max_len_q = q.shape[1];
      p.max_len_k = k.shape[1];
      return p;
    }
    for (int64_t b = 0; b + 1 < count(kCuQ) && b + 1 < count(kCuK); ++b) {
      p.max_len_q = std::max<int64_t>(p.max_len_q, int64_t(cu(kCuQ, b + 1)) - cu(kCuQ, b));
      p.max_len_k = std::max<int64_t>(p.max_len_k, int64_t(cu(kCuK, b + 1)) - cu(kCuK, b));
    }
    return p;
  }

  // Multiply-adds of a run over the real lengths, in the flash backend's padded tiles (an
  // over-estimate for the reference). Invalid sizes count as 0: the call must refuse them.
  double work() const {
    const auto pad = [](double x, double m) { return std::ceil(std::max(x, 0.0) / m) * m; };
    const TensorSpec& q = c_.tensor[kQ];
    const TensorSpec& k = c_.tensor[kK];
    const int h = varlen() ? 1 : 2;
    const double heads = std::max(double(q.shape[h]), 0.0), dp = pad(double(q.shape[h + 1]), 16);
    const auto seq = [&](double lq, double lk) {
      return heads * (pad(lq, 64) * pad(lk, 64) * dp + 64 * dp + (lq + lk) * dp);
    };
    if (!varlen())
      return std::max(double(q.shape[0]), 0.0) * seq(double(q.shape[1]), double(k.shape[1]));
    double w = 0;
    for (int64_t b = 0; b + 1 < count(kCuQ) && b + 1 < count(kCuK); ++b)
      w += seq(std::fabs(double(cu(kCuQ, b + 1)) - cu(kCuQ, b)),
               std::fabs(double(cu(kCuK, b + 1)) - cu(kCuK, b)));
    return w;
  }

  bool outputs_injective(Pass pass) const {
    for (Role r : {kOut, kLse})  // the backward's inputs came from the forward's outputs
      if (!injective(c_.tensor[r])) return false;
    if (pass == kBackward)
      for (Role r : {kDq, kDk, kDv})
        if (!injective(c_.tensor[r])) return false;
    return true;
  }

  // Column sums of P, summed over each kv head's query heads, into kSumDv: dV of a reference
  // backward with dout = 1 and no dropout. They bound dK and dV element by element.
  bool column_sums() {
    fa_params p = params(kBackward, FA_BACKEND_REFERENCE, kColumnSums);
    p.dropout_p = 0.f;
    return checked_pass(kBackward, &p, kColumnSums, false) == kAccepted;
  }

  // bound: of |values| (fuzz_compare.h); with `sums`, per unit of the column sum held in that
  // slot. apriori: the bound without column sums (it sizes the underflow floor). lse: 0, 0.
  void compare(Role r, int ref, const Tolerance& tol, double bound, double apriori, int sums = -1) {
    Weights w;
    double largest = bound;
    if (sums >= 0) {
      w.spec = &spec(sums);
      w.data = data(sums);
      // C_j was stored in the dtype (1 + 2^-8 at most) and computed with the P error e_p.
      w.per_unit = tol.rel * bound * (1.02 + tol.e_p);
      largest = bound * max_abs(spec(sums), data(sums));
    }
    const Level level = tol.level(largest);
    const double atol =
        (r == kLse ? tol.lse_abs : sums >= 0 ? 0.0 : tol.rel * bound) + tol.floor(apriori);
    std::string why;
    Stats stats;
    if (!same(c_.tensor[r], data(r), data(ref), level, atol, w, &why, &stats))
      broken("flash %s differs from the reference: %s", kRoleNames[r], why.c_str());
    trace("  %s: %s, tolerance %.3g%s; max |reference| %.3g, max |flash - reference| %.3g",
          kRoleNames[r], level_name(level), sums >= 0 ? w.per_unit : atol,
          sums >= 0 ? " x column sum" : "", stats.max_ref, stats.max_err);
  }

  // A workspace of the given mode; false when it would exceed the cap.
  struct Ws {
    std::unique_ptr<GuardedBuffer> buf;
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  bool workspace(Workspace w, size_t queried, Ws* ws) const {
    const size_t arg = w.arg < 0 ? 0 : size_t(w.arg);
    const bool sized_by_query =
        w.mode == WorkspaceMode::kExact || w.mode == WorkspaceMode::kMore ||
        w.mode == WorkspaceMode::kLess || w.mode == WorkspaceMode::kMisaligned;
    if (sized_by_query && queried > kMaxWorkspaceBytes) return false;
    size_t alloc = 0, offset = 0;
    bool null = false;
    switch (w.mode) {
      case WorkspaceMode::kExact: ws->bytes = alloc = queried; break;
      case WorkspaceMode::kMore:
        if (arg > kMaxWorkspaceBytes) return false;
        ws->bytes = alloc = queried + arg;
        break;
      case WorkspaceMode::kLess: ws->bytes = alloc = queried - std::min(arg, queried); break;
      case WorkspaceMode::kNullQueried: ws->bytes = queried, null = true; break;
      case WorkspaceMode::kNullArg: ws->bytes = size_t(w.arg), null = true; break;
      case WorkspaceMode::kMisaligned:
        offset = size_t(w.arg & 15);
        ws->bytes = queried;
        alloc = queried + 16;
        break;
      case WorkspaceMode::kArg: ws->bytes = alloc = arg; break;
      case WorkspaceMode::kEmpty:
      case WorkspaceMode::kCount: ws->bytes = alloc = 0; break;
    }
    if (null) return true;
    if (alloc > kMaxWorkspaceBytes) return false;
    ws->buf = std::make_unique<GuardedBuffer>(alloc);
    std::memset(ws->buf->data(), c_.poison, alloc);
    ws->buf->snapshot();
    ws->ptr = ws->buf->data() + offset;
    return true;
  }

  // One run and the invariants of its buffers; writable: the call's outputs.
  fa_status checked_run(Pass pass, const fa_params* p, const Ws& ws, unsigned writable) {
    const char* call = call_name(pass, false);
    omp_set_num_threads(c_.threads);
    const fa_status st = pass == kForward ? fa_forward(p, ws.ptr, ws.bytes, nullptr)
                                          : fa_backward(p, ws.ptr, ws.bytes, nullptr);
    check_status(call, st);
    check_buffers(call, st == FA_OK ? writable : 0u);
    if (ws.buf && !ws.buf->guards_intact()) broken("%s wrote outside its workspace", call);
    if (ws.buf && st != FA_OK && !ws.buf->unchanged())
      broken("%s refused (%s) but wrote its workspace", call, fa_status_string(st));
    return st;
  }

  enum Outcome { kAccepted, kRefused, kSkipped };

  // fa_select_kernel validates as the call does and writes only *name: the query's success
  // implies its own, its refusal is one the query shares (the query may refuse more: a
  // workspace size that overflows), and the family it names belongs to the tensors' device.
  void select_agrees(Pass pass, const fa_params* p, fa_status query_status) {
    static const char kUntouched[] = "untouched";
    const char* name = kUntouched;
    const fa_status st = fa_select_kernel(p, pass == kBackward, &name);
    check_status("fa_select_kernel", st);
    check_buffers("fa_select_kernel", 0u);
    if (st != FA_OK) {
      if (name != kUntouched) broken("fa_select_kernel refused but wrote *name");
      if (query_status != st)
        broken("fa_select_kernel refused (%s) what %s answered with %s", fa_status_string(st),
               call_name(pass, true), fa_status_string(query_status));
      return;
    }
    const bool cpu = std::strcmp(name, "cpu-flash") == 0 || std::strcmp(name, "cpu-reference") == 0;
    if (!cpu) broken("fa_select_kernel named \"%s\" for CPU tensors", name);
    const bool reference = p->backend == FA_BACKEND_REFERENCE || p->backend == FA_BACKEND_VANILLA;
    if (reference != (std::strcmp(name, "cpu-reference") == 0))
      broken("fa_select_kernel named \"%s\" for backend %d", name, int(p->backend));
    if (query_status != FA_OK && query_status != FA_ERROR_SIZE)
      broken("%s refused (%s) what fa_select_kernel accepted", call_name(pass, true),
             fa_status_string(query_status));
  }

  // Query, then run (unless too slow or too large here), checking what ties the two together.
  // under_test: the case's own call (its NULL size pointer, its workspace mode), not a helper's.
  Outcome checked_pass(Pass pass, const fa_params* p, const Binding& b, bool under_test) {
    const char* qcall = call_name(pass, true);
    const char* rcall = call_name(pass, false);
    const auto query = [&](size_t* bytes) {
      omp_set_num_threads(c_.threads);
      const fa_status st = pass == kForward ? fa_forward_workspace_size(p, bytes)
                                            : fa_backward_workspace_size(p, bytes);
      check_status(qcall, st);
      check_buffers(qcall, 0u);
      return st;
    };
    if (under_test && c_.null_size_ptr && query(nullptr) == FA_OK)
      broken("%s accepted a NULL bytes pointer", qcall);
    size_t queried = kSentinel;
    const fa_status qs = query(&queried);
    const bool query_ok = qs == FA_OK;
    if (!query_ok && queried != kSentinel) broken("%s refused but wrote *bytes", qcall);
    select_agrees(pass, p, qs);
    // A refused query is followed by its run whatever the sizes: the run must refuse at once.
    if (query_ok && work() > kMaxWork) {
      trace("%s skipped: work %.3g > %.3g", rcall, work(), kMaxWork);
      return kSkipped;
    }
    if (!under_test && !query_ok) return kRefused;

    Ws ws;
    const Workspace mode = under_test ? c_.workspace[pass] : Workspace{};
    if (!workspace(mode, query_ok ? queried : kRefusedQueryBytes, &ws)) {
      trace("%s skipped: workspace above %zu bytes", rcall, kMaxWorkspaceBytes);
      return kSkipped;
    }
    const unsigned writable = b.writes(pass);
    const fa_status st = checked_run(pass, p, ws, writable);
    if (!query_ok) {
      if (st == FA_OK)
        broken("%s accepted what %s refused (%s)", rcall, qcall, fa_status_string(qs));
      return kRefused;
    }
    if (st == FA_OK) return kAccepted;
    if (st != FA_ERROR_WORKSPACE)
      broken("%s refused (%s: %s) what %s accepted", rcall, fa_status_string(st), fa_last_error(),
             qcall);

    // Refused for its workspace: the size the query returned must have been enough, and the
    // size the refusal names must be exact.
    const std::string msg = fa_last_error();
    if (ws.ptr != nullptr && ws.bytes >= queried)
      broken("%s refused the %zu bytes %s returned: %s", rcall, queried, qcall, msg.c_str());
    const size_t need = named_need(msg.c_str());
    if (need == 0) return kRefused;
    if (need > queried)
      broken("%s needs %zu bytes but %s returned %zu", rcall, need, qcall, queried);
    if (ws.ptr != nullptr && ws.bytes >= need)
      broken("%s refused %zu bytes though it says it needs %zu", rcall, ws.bytes, need);
    Ws less, exact;
    if (!workspace({WorkspaceMode::kExact, 0}, need - 1, &less)) return kRefused;
    if (checked_run(pass, p, less, writable) != FA_ERROR_WORKSPACE)
      broken("%s was not refused for its workspace with %zu bytes, one less than the %zu it "
             "named", rcall, need - 1, need);
    if (!workspace({WorkspaceMode::kExact, 0}, need, &exact)) return kRefused;
    const fa_status again = checked_run(pass, p, exact, writable);
    if (again != FA_OK)
      broken("%s refused the %zu bytes it named (%s: %s)", rcall, need, fa_status_string(again),
             fa_last_error());
    return kAccepted;
  }

  const Case& c_;
  std::unique_ptr<GuardedBuffer> buf_[kSlots];
  bool forward_ok_ = false;
};

}  // namespace
}  // namespace fa_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fa_fuzz;
  Case c;
  decode(data, size, &c);
  Harness h(c);
  if (!h.allocate()) return 0;  // a tensor's real extent is above the memory cap
  h.fill();
  h.probe_strings();
  h.pass(kForward);
  h.pass(kBackward);
  return 0;
}
