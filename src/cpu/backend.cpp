#include "cpu/backend.h"

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <vector>

#include "core/splits.h"
#include "cpu/combine.h"
#include "cpu/kv_update.h"
#include "cpu/reference.h"
#include "cpu/scratch.h"

namespace fa::cpu {
namespace {

// F16C (CPUID leaf 1, ECX bit 29): read from cpuid, since clang's __builtin_cpu_supports does
// not know the name (clang 14 rejects "f16c" at compile time).
bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && ((c >> 29) & 1u) != 0;
#else
  return false;
#endif
}

// What the CPU must have for each build's flags (CMakeLists.txt, fa_cpu_isa).
bool cpu_runs(Isa isa) {
  switch (isa) {
    case Isa::Generic: return true;
    case Isa::Avx2:
#if defined(FA_HAVE_AVX2_KERNELS)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             cpu_has_f16c();
#else
      return false;
#endif
    case Isa::Avx512:
#if defined(FA_HAVE_AVX512_KERNELS)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
      return false;
#endif
  }
  return false;
}

void flash_forward(Isa isa, const Params& p, void* workspace, size_t bytes, int threads) {
  switch (isa) {
#if defined(FA_HAVE_AVX512_KERNELS)
    case Isa::Avx512: return avx512::flash_forward(p, workspace, bytes, threads);
#endif
#if defined(FA_HAVE_AVX2_KERNELS)
    case Isa::Avx2: return avx2::flash_forward(p, workspace, bytes, threads);
#endif
    default: return generic::flash_forward(p, workspace, bytes, threads);
  }
}
void flash_backward(Isa isa, const Params& p, void* workspace, size_t bytes, int threads) {
  switch (isa) {
#if defined(FA_HAVE_AVX512_KERNELS)
    case Isa::Avx512: return avx512::flash_backward(p, workspace, bytes, threads);
#endif
#if defined(FA_HAVE_AVX2_KERNELS)
    case Isa::Avx2: return avx2::flash_backward(p, workspace, bytes, threads);
#endif
    default: return generic::flash_backward(p, workspace, bytes, threads);
  }
}

// Workspace = fixed (shared by all threads) + threads * per_thread, plus alignment slack. The
// queries and the runs size it with the same (overflow-checked) Layout: a run accepts any
// workspace that holds one thread's worth and uses as many threads as fit.
struct Layout {
  Checked fixed, per_thread;
  size_t bytes(int threads) const {
    return (Checked(Arena::kAlign) + fixed + per_thread * threads).bytes("the CPU workspace size");
  }
  int threads_fitting(size_t bytes) const {
    const size_t base = Arena::kAlign + fixed.bytes("the CPU workspace size");
    const size_t one = per_thread.bytes("the CPU workspace size");
    if (bytes < base + one) return 0;
    return int(std::min<size_t>((bytes - base) / one, size_t(omp_get_max_threads())));
  }
};

// Split-KV on the CPU: the parts run concurrently, one per thread, each over every
// (batch, head) of its key range (so a decode call with fewer tasks than threads keeps them all
// busy), then the combine step merges them. A part shorter than this many keys costs more in
// partial traffic than it saves.
constexpr int64_t kMinKeysPerSplit = 256;

// The parts a forward runs in: the caller's num_splits, or the heuristic's choice for the
// machine's threads (so the query and the run agree: both see omp_get_max_threads()). The
// heuristic applies to KV-cache calls (flash_attn_with_kvcache's, where decode leaves threads
// idle); other calls, and the reference (the oracle), split only when asked to, so that their
// bits do not depend on the machine's thread count.
int64_t forward_splits(const Params& p, Impl impl) {
  if (p.num_splits > 0) return p.num_splits;
  if (impl == Impl::Reference || (p.cache_seqlens == nullptr && p.block_table == nullptr))
    return 1;
  const int threads = omp_get_max_threads();
  const int64_t task_rows = forward_blocks_per_task(p, threads) * kFwdBlockM;
  const int64_t tasks = p.batch * p.heads_q * ceil_div(p.seqlen_q, task_rows);
  return heuristic_splits(tasks, p.seqlen_k, threads, kMinKeysPerSplit);
}

// The forward's shared scratch, in the order forward() carves it: the rotated q, then per part
// its output (total_q, heads_q, d) and its LSE (heads_q, total_q). The flash parts' outputs are
// fp32, the reference's fp64 (the oracle loses no precision to a split).
struct ForwardShared {
  int64_t parts;
  DType part_dtype;
  Checked rotated_q = 0, part_out = 0, part_lse = 0;
  ForwardShared(const Params& p, Impl impl)
      : parts(forward_splits(p, impl)),
        part_dtype(impl == Impl::Reference ? DType::F64 : DType::F32) {
    rotated_q = Arena::checked_block_bytes(rotated_q_elems(p));  // as floats: room for any dtype
    if (parts > 1) {
      const int64_t floats = dtype_size(part_dtype) / int64_t(sizeof(float));
      part_out = Arena::checked_block_bytes(Checked(p.total_q) * p.heads_q * p.head_dim * floats);
      part_lse = Arena::checked_block_bytes(Checked(p.total_q) * p.heads_q);
    }
  }
  Checked bytes() const { return rotated_q + (part_out + part_lse) * parts; }
};

Layout forward_layout(const Params& p, Impl impl) {
  const Checked shared = ForwardShared(p, impl).bytes();
  if (impl == Impl::Reference) return {shared, reference_forward_thread_bytes(p)};
  return {shared, forward_thread_bytes(p)};
}
Layout backward_layout(const Params& p, Impl impl) {
  if (impl == Impl::Reference)
    return {reference_backward_shared_bytes(p), reference_backward_thread_bytes(p)};
  return {backward_shared_bytes(p), backward_thread_bytes(p)};
}

}  // namespace

const std::vector<Isa>& available_isas() {
  static const std::vector<Isa> isas = [] {
    std::vector<Isa> out;
    for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Generic})
      if (cpu_runs(isa)) out.push_back(isa);
    return out;
  }();
  return isas;
}
Isa best_isa() { return available_isas().front(); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "generic";
}
const char* isa_name() { return isa_name(best_isa()); }

size_t forward_workspace(const Params& p, Impl impl) {
  return forward_layout(p, impl).bytes(omp_get_max_threads());
}
size_t backward_workspace(const Params& p, Impl impl) {
  return backward_layout(p, impl).bytes(omp_get_max_threads());
}
size_t min_forward_workspace(const Params& p, Impl impl) { return forward_layout(p, impl).bytes(1); }
size_t min_backward_workspace(const Params& p, Impl impl) { return backward_layout(p, impl).bytes(1); }

namespace {

// The attention of p (one part, or the whole call) with the given scratch.
void attend(const Params& p, Impl impl, Isa isa, void* workspace, size_t bytes, int threads) {
  if (impl == Impl::Reference)
    return reference_forward<double>(p, workspace, bytes, threads);
  return flash_forward(isa, p, workspace, bytes, threads);
}

}  // namespace

void forward(const Params& call, Impl impl, void* workspace, size_t bytes) {
  forward(call, impl, workspace, bytes, best_isa());
}
void backward(const Params& p, Impl impl, void* workspace, size_t bytes) {
  backward(p, impl, workspace, bytes, best_isa());
}

void forward(const Params& call, Impl impl, void* workspace, size_t bytes, Isa isa) {
  const Layout layout = forward_layout(call, impl);
  const int threads = layout.threads_fitting(bytes);
  const ForwardShared shared(call, impl);
  // The shared blocks from the aligned start, the threads' scratch after them (Layout's order).
  Arena arena(workspace, bytes);
  char* base = reinterpret_cast<char*>(arena.floats(0));
  const size_t shared_bytes = shared.bytes().bytes("the CPU forward's shared scratch");
  char* scratch = base + shared_bytes;
  const size_t scratch_bytes = arena.size() - shared_bytes;

  Params p = call;
  if (p.seqlen_new > 0) append_kv(p, threads);  // the attention reads the new keys from the cache
  if (p.rotary.dim > 0) p.q = rotate_queries(p, base, threads);
  if (shared.parts <= 1) return attend(p, impl, isa, scratch, scratch_bytes, threads);

  // Split-KV: part s over its keys into its partials, the parts concurrently (each on one
  // thread with that thread's scratch), then the combine step into out and lse.
  const int64_t n = shared.parts, hq = p.heads_q, d = p.head_dim;
  std::vector<Partial> parts(static_cast<size_t>(n));
  char* part_base = base + shared.rotated_q.bytes("the rotated q");
  const size_t out_bytes = shared.part_out.bytes("split-KV partials");
  const size_t lse_bytes = shared.part_lse.bytes("split-KV partials");
  for (int64_t s = 0; s < n; ++s) {
    Partial& part = parts[size_t(s)];
    char* at = part_base + size_t(s) * (out_bytes + lse_bytes);
    part.out.data = at;
    part.out.dtype = shared.part_dtype;
    part.out.stride_h = d;
    part.out.stride_s = hq * d;
    part.out.stride_b = p.varlen() ? 0 : p.seqlen_q * hq * d;
    part.lse.data = reinterpret_cast<float*>(at + out_bytes);
    part.lse.stride_s = 1;
    part.lse.stride_h = p.varlen() ? p.total_q : p.seqlen_q;
    part.lse.stride_b = p.varlen() ? 0 : hq * p.seqlen_q;
  }
  const size_t per_thread = layout.per_thread.bytes("the CPU forward's scratch");
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t s = 0; s < n; ++s) {
    Params ps = p;
    ps.split_index = s;
    ps.split_count = n;
    ps.out = parts[size_t(s)].out;
    ps.lse = parts[size_t(s)].lse;
    // Nested: the part's own loop runs on this thread alone, in this thread's scratch.
    attend(ps, impl, isa, scratch + per_thread * size_t(omp_get_thread_num()), per_thread, 1);
  }
  combine(p, parts.data(), n, threads);
}

void backward(const Params& p, Impl impl, void* workspace, size_t bytes, Isa isa) {
  const int threads = backward_layout(p, impl).threads_fitting(bytes);
  if (impl == Impl::Reference) return reference_backward<double>(p, workspace, bytes, threads);
  flash_backward(isa, p, workspace, bytes, threads);
}

}  // namespace fa::cpu
