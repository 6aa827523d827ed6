/* The attention call both callers make (old_caller.c with the 0.1 header, new_caller.c with the
 * current one): sizes, deterministic inputs, and where the results go. Plain C99; no fa_ types,
 * so that each caller's translation unit sees only its own header. */
#ifndef FA_ABI_PROBLEM_H
#define FA_ABI_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

enum { B = 2, SQ = 5, SK = 7, HQ = 4, HK = 2, D = 8 };
enum { Q_ELEMS = B * SQ * HQ * D, K_ELEMS = B * SK * HK * D, LSE_ELEMS = B * HQ * SQ };

/* The paged KV-cache forward of callers whose header has 0.2's fields: 6 blocks of 3 keys, each
 * entry's table {2 * b + 1, 2 * b, 5 - b}, cache_seqlens {7, 4}, q_shift 1. */
enum { PAGES = 6, PAGE = 3, MAX_BLOCKS = 3, KV_ELEMS = PAGES * PAGE * HK * D };

/* Results of one forward + backward (causal, GQA 2:1, fp32, CPU flash backend) and, for callers
 * of 0.2 and later, of the paged forward (kv_out, kv_lse; else left zero). */
typedef struct abi_results {
  float out[Q_ELEMS], lse[LSE_ELEMS], dq[Q_ELEMS], dk[K_ELEMS], dv[K_ELEMS];
  float kv_out[Q_ELEMS], kv_lse[LSE_ELEMS];
  size_t struct_size; /* what fa_params_init set */
} abi_results;

/* Inputs: a fixed pseudo-random sequence in [-1, 1). */
static void abi_fill(float* x, int n, uint32_t seed) {
  int i;
  for (i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
  }
}

/* 0 on success; else prints the library's message and returns 1. */
int abi_run_v0_1(abi_results* r);
int abi_run_v0_2(abi_results* r);
int abi_run_v0_3(abi_results* r);
int abi_run_v0_4(abi_results* r);
int abi_run_current(abi_results* r);

#endif
