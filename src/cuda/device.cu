#include <cuda_runtime.h>

#include "api/device.h"

namespace fa {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no GPU: clear the sticky error, report none
    return 0;
  }
  return n;
}

}  // namespace fa
