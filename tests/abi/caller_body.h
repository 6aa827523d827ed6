/* The body of a caller, included by old_caller.c, v0_2_caller.c, v0_3_caller.c, v0_4_caller.c and
 * new_caller.c after their own flashattn header: the same source compiled against five layouts
 * of fa_params. ABI_RUN names the function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fa_tensor abi_tensor(void* data, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int rank) {
  fa_tensor t;
  int64_t shape[4];
  int i;
  memset(&t, 0, sizeof t);
  shape[0] = d0; shape[1] = d1; shape[2] = d2; shape[3] = d3;
  t.data = data;
  t.dtype = FA_DTYPE_FP32;
  t.rank = rank;
  t.device.type = FA_DEVICE_CPU;
  t.stride[rank - 1] = 1;
  for (i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    if (i > 0) t.stride[i - 1] = t.stride[i] * shape[i];
  }
  return t;
}

static int abi_check(fa_status st, const char* what) {
  if (st == FA_OK) return 0;
  fprintf(stderr, "%s: %s (%s)\n", what, fa_status_string(st), fa_last_error());
  return 1;
}

int ABI_RUN(abi_results* r) {
  static float q[Q_ELEMS], k[K_ELEMS], v[K_ELEMS], dout[Q_ELEMS];
  /* Exactly this header's size on the heap, so that AddressSanitizer sees any byte the library
   * writes or reads past it. */
  fa_params* p = (fa_params*)malloc(sizeof(fa_params));
  size_t bytes = 0;
  void* ws;
  int bad = 0;
  abi_fill(q, Q_ELEMS, 1);
  abi_fill(k, K_ELEMS, 2);
  abi_fill(v, K_ELEMS, 3);
  abi_fill(dout, Q_ELEMS, 4);
  fa_params_init(p);
  r->struct_size = p->struct_size;
  p->backend = FA_BACKEND_FLASH;
  p->causal = 1;
  p->q = abi_tensor(q, B, SQ, HQ, D, 4);
  p->k = abi_tensor(k, B, SK, HK, D, 4);
  p->v = abi_tensor(v, B, SK, HK, D, 4);
  p->out = abi_tensor(r->out, B, SQ, HQ, D, 4);
  p->lse = abi_tensor(r->lse, B, HQ, SQ, 1, 3);
  p->dout = abi_tensor(dout, B, SQ, HQ, D, 4);
  p->dq = abi_tensor(r->dq, B, SQ, HQ, D, 4);
  p->dk = abi_tensor(r->dk, B, SK, HK, D, 4);
  p->dv = abi_tensor(r->dv, B, SK, HK, D, 4);
  bad = abi_check(fa_forward_workspace_size(p, &bytes), "fa_forward_workspace_size");
  if (!bad) {
    ws = malloc(bytes ? bytes : 1);
    bad = abi_check(fa_forward(p, ws, bytes, NULL), "fa_forward");
    free(ws);
  }
  if (!bad) bad = abi_check(fa_backward_workspace_size(p, &bytes), "fa_backward_workspace_size");
  if (!bad) {
    ws = malloc(bytes ? bytes : 1);
    bad = abi_check(fa_backward(p, ws, bytes, NULL), "fa_backward");
    free(ws);
  }
#if FA_VERSION_MINOR >= 2 || FA_VERSION_MAJOR > 0
  /* 0.2's fields: a paged cache read through a block table, cache_seqlens and q_shift. */
  if (!bad) {
    static float kc[KV_ELEMS], vc[KV_ELEMS];
    static int32_t table[B * MAX_BLOCKS], seqlens[B] = {7, 4};
    int b;
    for (b = 0; b < B; ++b) {
      table[b * MAX_BLOCKS + 0] = 2 * b + 1;
      table[b * MAX_BLOCKS + 1] = 2 * b;
      table[b * MAX_BLOCKS + 2] = 5 - b;
    }
    abi_fill(kc, KV_ELEMS, 5);
    abi_fill(vc, KV_ELEMS, 6);
    memset(&p->dout, 0, sizeof p->dout);
    memset(&p->dq, 0, sizeof p->dq);
    memset(&p->dk, 0, sizeof p->dk);
    memset(&p->dv, 0, sizeof p->dv);
    p->k = abi_tensor(kc, PAGES, PAGE, HK, D, 4);
    p->v = abi_tensor(vc, PAGES, PAGE, HK, D, 4);
    p->out = abi_tensor(r->kv_out, B, SQ, HQ, D, 4);
    p->lse = abi_tensor(r->kv_lse, B, HQ, SQ, 1, 3);
    p->block_table = abi_tensor(table, B, MAX_BLOCKS, 1, 1, 2);
    p->block_table.dtype = FA_DTYPE_INT32;
    p->cache_seqlens = abi_tensor(seqlens, B, 1, 1, 1, 1);
    p->cache_seqlens.dtype = FA_DTYPE_INT32;
    p->q_shift = 1;
    bad = abi_check(fa_forward_workspace_size(p, &bytes), "fa_forward_workspace_size (paged)");
    if (!bad) {
      ws = malloc(bytes ? bytes : 1);
      bad = abi_check(fa_forward(p, ws, bytes, NULL), "fa_forward (paged)");
      free(ws);
    }
  }
#endif
  free(p);
  return bad;
}
