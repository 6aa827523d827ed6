/* ctest abi_v0_1_caller: callers compiled against the 0.1, 0.2, 0.3 and 0.4 headers keep working
 * with this library. Each runs a forward and a backward (the 0.2, 0.3 and 0.4 callers also a paged
 * KV-cache forward) through its own fa_params of its header's size, 1144, 1328, 1864 and 2040 bytes
 * (heap-allocated at exactly that size: under the asan preset any byte the library wrote or read
 * past it would be reported), and its results must be the bytes of the same calls made through
 * the current header. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "problem.h"

static abi_results old_r, v2_r, v3_r, v4_r, new_r;

int main(void) {
  int i;
  if (abi_run_v0_1(&old_r) != 0 || abi_run_v0_2(&v2_r) != 0 || abi_run_v0_3(&v3_r) != 0 ||
      abi_run_v0_4(&v4_r) != 0 || abi_run_current(&new_r) != 0)
    return 1;
  if (sizeof(void*) == 8 && v4_r.struct_size != 2040) {
    fprintf(stderr, "fa_params_init of the 0.4 caller set struct_size=%zu, expected 2040\n",
            v4_r.struct_size);
    return 1;
  }
  if (new_r.struct_size <= v4_r.struct_size || v4_r.struct_size <= v3_r.struct_size) {
    fprintf(stderr, "the 0.4 struct (%zu bytes) does not sit between 0.3's (%zu) and the "
            "current one (%zu)\n", v4_r.struct_size, v3_r.struct_size, new_r.struct_size);
    return 1;
  }
  if (memcmp(v4_r.out, new_r.out, sizeof v4_r.out) != 0 ||
      memcmp(v4_r.lse, new_r.lse, sizeof v4_r.lse) != 0 ||
      memcmp(v4_r.dq, new_r.dq, sizeof v4_r.dq) != 0 ||
      memcmp(v4_r.dk, new_r.dk, sizeof v4_r.dk) != 0 ||
      memcmp(v4_r.dv, new_r.dv, sizeof v4_r.dv) != 0 ||
      memcmp(v4_r.kv_out, new_r.kv_out, sizeof v4_r.kv_out) != 0 ||
      memcmp(v4_r.kv_lse, new_r.kv_lse, sizeof v4_r.kv_lse) != 0) {
    fprintf(stderr, "the 0.4 caller's results differ from the current header's\n");
    return 1;
  }
  if (sizeof(void*) == 8 && v3_r.struct_size != 1864) {
    fprintf(stderr, "fa_params_init of the 0.3 caller set struct_size=%zu, expected 1864\n",
            v3_r.struct_size);
    return 1;
  }
  if (v4_r.struct_size <= v3_r.struct_size || v3_r.struct_size <= v2_r.struct_size) {
    fprintf(stderr, "the 0.3 struct (%zu bytes) does not sit between 0.2's (%zu) and 0.4's "
            "(%zu)\n", v3_r.struct_size, v2_r.struct_size, v4_r.struct_size);
    return 1;
  }
  if (memcmp(v3_r.out, new_r.out, sizeof v3_r.out) != 0 ||
      memcmp(v3_r.lse, new_r.lse, sizeof v3_r.lse) != 0 ||
      memcmp(v3_r.dq, new_r.dq, sizeof v3_r.dq) != 0 ||
      memcmp(v3_r.dk, new_r.dk, sizeof v3_r.dk) != 0 ||
      memcmp(v3_r.dv, new_r.dv, sizeof v3_r.dv) != 0 ||
      memcmp(v3_r.kv_out, new_r.kv_out, sizeof v3_r.kv_out) != 0 ||
      memcmp(v3_r.kv_lse, new_r.kv_lse, sizeof v3_r.kv_lse) != 0) {
    fprintf(stderr, "the 0.3 caller's results differ from the current header's\n");
    return 1;
  }
  if (sizeof(void*) == 8 && (old_r.struct_size != 1144 || v2_r.struct_size != 1328)) {
    fprintf(stderr, "fa_params_init of the 0.1 / 0.2 callers set struct_size=%zu / %zu, "
            "expected 1144 / 1328\n", old_r.struct_size, v2_r.struct_size);
    return 1;
  }
  if (new_r.struct_size <= v2_r.struct_size || v2_r.struct_size <= old_r.struct_size) {
    fprintf(stderr, "the structs (%zu, %zu, %zu bytes) do not grow with the version\n",
            old_r.struct_size, v2_r.struct_size, new_r.struct_size);
    return 1;
  }
  for (i = 0; i < LSE_ELEMS; ++i)
    if (!isfinite(v2_r.kv_lse[i])) {
      fprintf(stderr, "kv_lse[%d]=%g: every causal row sees a key here\n", i, v2_r.kv_lse[i]);
      return 1;
    }
  if (memcmp(v2_r.out, new_r.out, sizeof v2_r.out) != 0 ||
      memcmp(v2_r.lse, new_r.lse, sizeof v2_r.lse) != 0 ||
      memcmp(v2_r.dq, new_r.dq, sizeof v2_r.dq) != 0 ||
      memcmp(v2_r.dk, new_r.dk, sizeof v2_r.dk) != 0 ||
      memcmp(v2_r.dv, new_r.dv, sizeof v2_r.dv) != 0 ||
      memcmp(v2_r.kv_out, new_r.kv_out, sizeof v2_r.kv_out) != 0 ||
      memcmp(v2_r.kv_lse, new_r.kv_lse, sizeof v2_r.kv_lse) != 0) {
    fprintf(stderr, "the 0.2 caller's results differ from the current header's\n");
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
  printf("0.1, 0.2, 0.3 and 0.4 callers ok: struct_size %zu, %zu, %zu and %zu (current %zu), "
         "forward and backward (0.2 to 0.4: and a paged forward) bit-identical\n",
         old_r.struct_size, v2_r.struct_size, v3_r.struct_size, v4_r.struct_size,
         new_r.struct_size);
  return 0;
}
