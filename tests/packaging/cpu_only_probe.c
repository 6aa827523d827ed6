/* What a CPU user's process sees of the CUDA backend (tests/packaging/cpu_only_test.py runs it).
 * Opens the library at argv[1] with dlopen (no link-time dependency, so that the path is exactly
 * the file under test), runs a forward on CPU tensors, checks that no CUDA library is mapped into
 * the process, then asks for CUDA tensors and prints the status and message as
 *   cuda_request <status> <message>
 * and, after it, whether the CUDA runtime is mapped now:
 *   cuda_mapped_after <0|1>
 * Exit status 0 when the CPU part passed (the script judges the CUDA part).
 *   cpu_only_probe LIBRARY */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn/flashattn.h"

typedef void (*init_fn)(fa_params*);
typedef fa_status (*size_fn)(const fa_params*, size_t*);
typedef fa_status (*fwd_fn)(const fa_params*, void*, size_t, void*);
typedef const char* (*msg_fn)(void);
typedef int32_t (*count_fn)(void);

/* 1 when a CUDA runtime, driver or cuBLAS library is mapped into this process. */
static int cuda_mapped(void) {
  char line[4096];
  int found = 0;
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f) != NULL)
    if (strstr(line, "libcudart") || strstr(line, "libcublas") || strstr(line, "libcuda.so"))
      found = 1;
  fclose(f);
  return found;
}

static fa_tensor tensor4(void* data, int64_t s, int64_t d, fa_device_type dev) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FA_DTYPE_FP32;
  t.rank = 4;
  t.shape[0] = 1; t.shape[1] = s; t.shape[2] = 1; t.shape[3] = d;
  t.stride[3] = 1; t.stride[2] = d; t.stride[1] = d; t.stride[0] = s * d;
  t.device.type = dev;
  return t;
}

static void* sym(void* h, const char* name) {
  void* p = dlsym(h, name);
  if (p == NULL) {
    fprintf(stderr, "FAIL: %s not exported\n", name);
    exit(1);
  }
  return p;
}

int main(int argc, char** argv) {
  enum { S = 3, D = 2 };
  float q[S * D] = {0}, k[S * D] = {0}, v[S * D] = {1, 2, 3, 4, 5, 6}, out[S * D];
  fa_params p;
  size_t bytes = 0;
  void* ws;
  void* h;
  init_fn init;
  size_fn fwd_size;
  fwd_fn fwd;
  msg_fn last_error;
  fa_status st;
  int i;
  if (argc != 2) {
    fprintf(stderr, "usage: cpu_only_probe LIBRARY\n");
    return 2;
  }
  h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "FAIL: dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  init = (init_fn)sym(h, "fa_params_init_v5");
  fwd_size = (size_fn)sym(h, "fa_forward_workspace_size");
  fwd = (fwd_fn)sym(h, "fa_forward");
  last_error = (msg_fn)sym(h, "fa_last_error");
  if (cuda_mapped()) {
    fprintf(stderr, "FAIL: loading %s mapped a CUDA library\n", argv[1]);
    return 1;
  }
  /* Equal scores: every output row is the mean of the values, (3, 4). */
  init(&p);
  p.q = tensor4(q, S, D, FA_DEVICE_CPU);
  p.k = tensor4(k, S, D, FA_DEVICE_CPU);
  p.v = tensor4(v, S, D, FA_DEVICE_CPU);
  p.out = tensor4(out, S, D, FA_DEVICE_CPU);
  if (fwd_size(&p, &bytes) != FA_OK) {
    fprintf(stderr, "FAIL: CPU workspace query: %s\n", last_error());
    return 1;
  }
  ws = malloc(bytes ? bytes : 1);
  st = fwd(&p, ws, bytes, NULL);
  free(ws);
  if (st != FA_OK) {
    fprintf(stderr, "FAIL: CPU forward: %s\n", last_error());
    return 1;
  }
  for (i = 0; i < S; ++i)
    if (fabsf(out[i * D] - 3.f) > 1e-5f || fabsf(out[i * D + 1] - 4.f) > 1e-5f) {
      fprintf(stderr, "FAIL: row %d is (%g, %g), expected (3, 4)\n", i, out[i * D], out[i * D + 1]);
      return 1;
    }
  if (cuda_mapped()) {
    fprintf(stderr, "FAIL: a CPU forward mapped a CUDA library\n");
    return 1;
  }
  printf("cpu_forward ok\n");
  p.q.device.type = p.k.device.type = p.v.device.type = p.out.device.type = FA_DEVICE_CUDA;
  st = fwd_size(&p, &bytes);
  printf("cuda_request %d %s\n", (int)st, st == FA_OK ? "" : last_error());
  printf("device_count %d\n", (int)((count_fn)sym(h, "fa_cuda_device_count"))());
  printf("cuda_mapped_after %d\n", cuda_mapped());
  return 0;
}
