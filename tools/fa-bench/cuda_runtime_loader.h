// The CUDA runtime's functions that fa-bench calls, opened at first use (dlopen of the toolkit's
// runtime, FA_BENCH_CUDART_SONAME, e.g. libcudart.so.13) instead of linked: fa-bench from a CUDA
// build then starts, and benchmarks the CPU, on a machine without the CUDA runtime, as the
// library does (its CUDA backend is a library of its own, opened only for a CUDA call). fa-bench
// asks for them only once the library has found a CUDA device (cuda_available), by which time
// the library's backend has loaded the same runtime, so both share its state (allocations,
// the current device, the default stream).
#pragma once

#include <string>

#include <cuda_runtime_api.h>  // declarations only: nothing of the runtime is linked

namespace fabench {

struct CudaRuntime {
  decltype(&::cudaMalloc) Malloc;
  decltype(&::cudaFree) Free;
  decltype(&::cudaMemcpy) Memcpy;
  decltype(&::cudaMemGetInfo) MemGetInfo;
  decltype(&::cudaGetLastError) GetLastError;
  decltype(&::cudaGetErrorString) GetErrorString;
  decltype(&::cudaGetDeviceProperties) GetDeviceProperties;
  decltype(&::cudaDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cudaDriverGetVersion) DriverGetVersion;
  decltype(&::cudaRuntimeGetVersion) RuntimeGetVersion;
  decltype(&::cudaDeviceSynchronize) DeviceSynchronize;
  decltype(&::cudaEventCreate) EventCreate;
  decltype(&::cudaEventRecord) EventRecord;
  decltype(&::cudaEventSynchronize) EventSynchronize;
  decltype(&::cudaEventElapsedTime) EventElapsedTime;
  decltype(&::cudaEventDestroy) EventDestroy;
};

// The runtime's functions, opened once (thread-safe); nullptr when the runtime cannot be opened
// or lacks one of them, with the loader's reason in *why when given.
const CudaRuntime* cuda_runtime(std::string* why = nullptr);

}  // namespace fabench
