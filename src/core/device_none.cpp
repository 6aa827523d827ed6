#include "core/device.h"
#include "core/error.h"

namespace fa {

int cuda_device_count() { return 0; }

const DeviceProps& cuda_device_props(int device) {
  fail(FA_ERROR_BACKEND, "CUDA device ", device, ": this build has no CUDA backend");
}

void copy_to_host_sync(void*, const void*, size_t, int device, void*) {
  fail(FA_ERROR_BACKEND, "device memory of CUDA device ", device,
       " cannot be read: this build has no CUDA backend");
}

}  // namespace fa
