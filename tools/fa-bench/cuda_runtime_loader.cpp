#include "cuda_runtime_loader.h"

#include <dlfcn.h>

namespace fabench {
namespace {

// A function's exported name: the macro some runtime headers map a name to (a _v2 or
// per-thread-stream variant) expanded first, so that dlsym looks up what a linked call would.
#define FA_BENCH_NAME2(x) #x
#define FA_BENCH_NAME(x) FA_BENCH_NAME2(x)

struct Loaded {
  CudaRuntime rt{};
  bool ok = false;
  std::string why;
};

template <class F>
bool resolve(void* lib, const char* name, F* fn, std::string* why) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr && why->empty()) *why = std::string(FA_BENCH_CUDART_SONAME) + " has no " + name;
  return *fn != nullptr;
}

Loaded load() {
  Loaded l;
  // RTLD_NOLOAD first: the library's CUDA backend has normally opened the runtime already.
  void* lib = dlopen(FA_BENCH_CUDART_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen(FA_BENCH_CUDART_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    l.why = err ? err : "dlopen(" FA_BENCH_CUDART_SONAME ") failed";
    return l;
  }
  CudaRuntime& r = l.rt;
  bool ok = true;
  ok &= resolve(lib, FA_BENCH_NAME(cudaMalloc), &r.Malloc, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaFree), &r.Free, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaMemcpy), &r.Memcpy, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaMemGetInfo), &r.MemGetInfo, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaGetLastError), &r.GetLastError, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaGetErrorString), &r.GetErrorString, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaGetDeviceProperties), &r.GetDeviceProperties, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaDeviceGetAttribute), &r.DeviceGetAttribute, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaDriverGetVersion), &r.DriverGetVersion, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaRuntimeGetVersion), &r.RuntimeGetVersion, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaDeviceSynchronize), &r.DeviceSynchronize, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaEventCreate), &r.EventCreate, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaEventRecord), &r.EventRecord, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaEventSynchronize), &r.EventSynchronize, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaEventElapsedTime), &r.EventElapsedTime, &l.why);
  ok &= resolve(lib, FA_BENCH_NAME(cudaEventDestroy), &r.EventDestroy, &l.why);
  l.ok = ok;  // the handle stays open for the process's life
  return l;
}

}  // namespace

const CudaRuntime* cuda_runtime(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.ok && why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.rt : nullptr;
}

}  // namespace fabench
