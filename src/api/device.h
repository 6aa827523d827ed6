// The few device facts the API layer needs. Implemented by src/cuda/device.cu when CUDA is
// built, else by src/api/device_none.cpp.
#pragma once

namespace fa {

int cuda_device_count();  // 0 when CUDA is not built or no GPU is present

}  // namespace fa
