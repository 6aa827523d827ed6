/* Compiled as strict C99: the public header is C-compatible and a C program can run a forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flashattn/flashattn.h"
#include "flashattn/ring.h"

static fa_tensor tensor4(void* data, int32_t dtype, int64_t b, int64_t s, int64_t h, int64_t d) {
  fa_tensor t = {0};
  t.data = data;
  t.dtype = dtype;
  t.rank = 4;
  t.shape[0] = b; t.shape[1] = s; t.shape[2] = h; t.shape[3] = d;
  t.stride[3] = 1; t.stride[2] = d; t.stride[1] = h * d; t.stride[0] = s * h * d;
  t.device.type = FA_DEVICE_CPU;
  return t;
}

/* Every row of out is (3, 4), the mean of the values, and its lse log 3. */
static int mean_rows(const float* out, const float* lse, int rows, int d) {
  int i;
  for (i = 0; i < rows; ++i) {
    if (fabsf(out[i * d] - 3.f) > 1e-5f || fabsf(out[i * d + 1] - 4.f) > 1e-5f ||
        fabsf(lse[i] - logf(3.f)) > 1e-5f) {
      fprintf(stderr, "row %d: out (%g, %g) lse %g, expected (3, 4) and log 3\n", i, out[i * d],
              out[i * d + 1], lse[i]);
      return 0;
    }
  }
  return 1;
}

int main(void) {
  enum { B = 1, S = 3, H = 1, D = 2 };
  /* One query, keys with equal scores: the output is the mean of the values. */
  float q[B * S * H * D] = {0}, k[B * S * H * D] = {0}, v[B * S * H * D] = {1, 2, 3, 4, 5, 6};
  float out[B * S * H * D], lse[B * H * S];
  fa_params p;
  void* ws;
  size_t bytes = 0;
  int i;
  fa_params_init(&p);
  p.q = tensor4(q, FA_DTYPE_FP32, B, S, H, D);
  p.k = tensor4(k, FA_DTYPE_FP32, B, S, H, D);
  p.v = tensor4(v, FA_DTYPE_FP32, B, S, H, D);
  p.out = tensor4(out, FA_DTYPE_FP32, B, S, H, D);
  p.lse = tensor4(lse, FA_DTYPE_FP32, B, H, S, 1);
  p.lse.rank = 3;
  p.lse.stride[0] = H * S; p.lse.stride[1] = S; p.lse.stride[2] = 1;
  if (fa_forward_workspace_size(&p, &bytes) != FA_OK) {
    fprintf(stderr, "workspace query failed: %s\n", fa_last_error());
    return 1;
  }
  ws = malloc(bytes ? bytes : 1);
  if (fa_forward(&p, ws, bytes, NULL) != FA_OK) {
    fprintf(stderr, "forward failed: %s\n", fa_last_error());
    return 1;
  }
  free(ws);
  if (!mean_rows(out, lse, S, D)) return 1;
  /* The ring entry points (flashattn/ring.h): a ring of one rank, no transfers, same result. */
  {
    fa_ring ring;
    int64_t rows[4];
    fa_ring_init(&ring);
    ring.seqlen = S;
    ring.comm.size = 1;
    if (fa_ring_shard(&ring, 0, rows) != FA_OK || rows[1] + rows[3] != S ||
        fa_ring_forward_workspace_size(&p, &ring, &bytes) != FA_OK) {
      fprintf(stderr, "ring query failed: %s\n", fa_last_error());
      return 1;
    }
    for (i = 0; i < B * S * H * D; ++i) out[i] = 0.f;
    ws = malloc(bytes);
    if (fa_ring_forward(&p, &ring, ws, bytes, NULL) != FA_OK) {
      fprintf(stderr, "ring forward failed: %s\n", fa_last_error());
      return 1;
    }
    free(ws);
    if (!mean_rows(out, lse, S, D)) return 1;
  }
  printf("C ABI ok: %s\n", fa_build_info());
  return 0;
}
