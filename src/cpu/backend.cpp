#include "cpu/backend.h"

#include <omp.h>

#include <algorithm>

#include "cpu/reference.h"
#include "cpu/scratch.h"

namespace fa::cpu {
namespace {

bool has_avx2() {
#if defined(FA_HAVE_AVX2_KERNELS)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
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

Layout forward_layout(const Params& p, Impl impl) {
  if (impl == Impl::Reference) return {0, reference_forward_thread_bytes(p)};
  return {0, forward_thread_bytes(p)};
}
Layout backward_layout(const Params& p, Impl impl) {
  if (impl == Impl::Reference) return {0, reference_backward_thread_bytes(p)};
  return {backward_shared_bytes(p), backward_thread_bytes(p)};
}

}  // namespace

const char* isa_name() { return has_avx2() ? "avx2" : "generic"; }

size_t forward_workspace(const Params& p, Impl impl) {
  return forward_layout(p, impl).bytes(omp_get_max_threads());
}
size_t backward_workspace(const Params& p, Impl impl) {
  return backward_layout(p, impl).bytes(omp_get_max_threads());
}
size_t min_forward_workspace(const Params& p, Impl impl) { return forward_layout(p, impl).bytes(1); }
size_t min_backward_workspace(const Params& p, Impl impl) { return backward_layout(p, impl).bytes(1); }

void forward(const Params& p, Impl impl, void* workspace, size_t bytes) {
  const int threads = forward_layout(p, impl).threads_fitting(bytes);
  if (impl == Impl::Reference)
    return reference_forward<double>(p, workspace, bytes, threads);
#if defined(FA_HAVE_AVX2_KERNELS)
  if (has_avx2()) return avx2::flash_forward(p, workspace, bytes, threads);
#endif
  return generic::flash_forward(p, workspace, bytes, threads);
}

void backward(const Params& p, Impl impl, void* workspace, size_t bytes) {
  const int threads = backward_layout(p, impl).threads_fitting(bytes);
  if (impl == Impl::Reference) return reference_backward<double>(p, workspace, bytes, threads);
#if defined(FA_HAVE_AVX2_KERNELS)
  if (has_avx2()) return avx2::flash_backward(p, workspace, bytes, threads);
#endif
  return generic::flash_backward(p, workspace, bytes, threads);
}

}  // namespace fa::cpu
