/* Stand-ins for libflashattn_cuda.so (tests/packaging/cpu_only_test.py), for the loader's two
 * other failures: a backend whose handshake refuses the caller (built from other sources), and
 * one that cannot be opened because a library it needs is missing (as a backend without the
 * CUDA runtime on the machine). Neither has a kernel. */
#include <stddef.h>
#include <stdint.h>

#ifdef FA_FAKE_NEEDS_MISSING
int fa_fake_missing_dependency(void); /* in a library the test leaves behind */
#endif

__attribute__((visibility("default"))) const void* fa_cuda_backend(
    uint32_t abi, int32_t version, uint32_t params_size, uint32_t context_size,
    uint32_t props_size, const char** why) {
  (void)abi; (void)version; (void)params_size; (void)context_size; (void)props_size;
#ifdef FA_FAKE_NEEDS_MISSING
  if (fa_fake_missing_dependency() != 0) return NULL;
#endif
  *why = "fake backend: refuses every caller";
  return NULL;
}
