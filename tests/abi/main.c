/* ctest abi_v0_1_caller: a caller compiled against the 0.1 header keeps working with this
 * library. It runs a forward and a backward through its own 1144-byte fa_params (heap-allocated
 * at exactly that size: under the asan preset any byte the library wrote or read past it would
 * be reported), and its results must be the bytes of the same calls made through the current
 * header. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "problem.h"

static abi_results old_r, new_r;

int main(void) {
  int i;
  if (abi_run_v0_1(&old_r) != 0 || abi_run_current(&new_r) != 0) return 1;
  if (sizeof(void*) == 8 && old_r.struct_size != 1144) {
    fprintf(stderr, "fa_params_init of a 0.1 caller set struct_size=%zu, expected 1144\n",
            old_r.struct_size);
    return 1;
  }
  if (new_r.struct_size <= old_r.struct_size) {
    fprintf(stderr, "the current struct (%zu bytes) is not larger than 0.1's (%zu)\n",
            new_r.struct_size, old_r.struct_size);
    return 1;
  }
  for (i = 0; i < LSE_ELEMS; ++i)
    if (!isfinite(old_r.lse[i])) {
      fprintf(stderr, "lse[%d]=%g: every causal row sees a key here\n", i, old_r.lse[i]);
      return 1;
    }
  if (memcmp(old_r.out, new_r.out, sizeof old_r.out) != 0 ||
      memcmp(old_r.lse, new_r.lse, sizeof old_r.lse) != 0 ||
      memcmp(old_r.dq, new_r.dq, sizeof old_r.dq) != 0 ||
      memcmp(old_r.dk, new_r.dk, sizeof old_r.dk) != 0 ||
      memcmp(old_r.dv, new_r.dv, sizeof old_r.dv) != 0) {
    fprintf(stderr, "the 0.1 caller's results differ from the current header's\n");
    return 1;
  }
  printf("0.1 caller ok: struct_size %zu (current %zu), forward and backward bit-identical\n",
         old_r.struct_size, new_r.struct_size);
  return 0;
}
