#include <cuda_runtime.h>

#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"

namespace fa::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no GPU: clear the sticky error, report none
    return 0;
  }
  return n;
}

void copy_to_host_sync(void* dst, const void* src, size_t bytes, int device, void* stream) {
  const DeviceGuard guard(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DeviceGuard::check(cudaStreamIsCapturing(s, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone)
    fail(FA_ERROR_UNSUPPORTED, "check_inputs=1 on a stream that is capturing a CUDA graph: the "
         "check reads device memory back and waits for it; validate before the capture");
  DeviceGuard::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s),
                     "cudaMemcpyAsync (check_inputs)");
  DeviceGuard::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (check_inputs)");
}

namespace {
constexpr int kCachedDevices = 64;

DeviceProps query(int device) {
  DeviceProps d;
  const struct {
    int* out;
    cudaDeviceAttr attr;
  } queries[] = {{&d.major, cudaDevAttrComputeCapabilityMajor},
                 {&d.minor, cudaDevAttrComputeCapabilityMinor},
                 {&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin},
                 {&d.sms, cudaDevAttrMultiProcessorCount}};
  for (const auto& q : queries) {
    const cudaError_t e = cudaDeviceGetAttribute(q.out, q.attr, device);
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, "cudaDeviceGetAttribute(device ", device, "): ", cudaGetErrorString(e));
  }
  return d;
}
}  // namespace

const DeviceProps& device_props(int device) {
  static std::once_flag once[kCachedDevices];
  static DeviceProps props[kCachedDevices];
  if (device < 0 || device >= kCachedDevices) {
    thread_local DeviceProps uncached;
    uncached = query(device);
    return uncached;
  }
  // A throwing query leaves its flag unset: the next call asks again.
  std::call_once(once[device], [device] { props[device] = query(device); });
  return props[device];
}

}  // namespace fa::cuda
