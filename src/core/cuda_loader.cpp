// Finding and opening the CUDA backend (core/cuda_backend.h), and the device facts of
// core/device.h on top of it. Three builds of this file:
//   FA_CUDA_BACKEND_LINKED  the internal static library: the backend's objects are linked in;
//   FA_WITH_CUDA            libflashattn.so of a CUDA build: dlopen libflashattn_cuda.so from
//                           the directory of this library on first use;
//   neither                 a CPU-only build: no backend, no CUDA device.
#include <string>

#include "core/cuda_backend.h"
#include "core/device.h"
#include "core/error.h"

#if defined(FA_WITH_CUDA) && !defined(FA_CUDA_BACKEND_LINKED)
#include <dlfcn.h>
#endif

namespace fa {
namespace {

struct Loaded {
  const CudaBackend* table = nullptr;
  std::string error;  // why table is null
};

#if defined(FA_CUDA_BACKEND_LINKED) || defined(FA_WITH_CUDA)
const CudaBackend* handshake(CudaBackendEntry entry, std::string& error) {
  const char* why = nullptr;
  const CudaBackend* t = entry(kCudaBackendAbi, FA_VERSION, sizeof(Params), sizeof(Context),
                               sizeof(DeviceProps), &why);
  if (t == nullptr) error = why != nullptr ? why : "the backend refused the handshake";
  return t;
}
#endif

#if defined(FA_CUDA_BACKEND_LINKED)
Loaded open_backend() {
  Loaded l;
  l.table = handshake(&fa_cuda_backend, l.error);
  return l;
}
#elif defined(FA_WITH_CUDA)
// The directory of the file this code was loaded from ("" when dladdr cannot say).
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&fa_version), &info) == 0 || info.dli_fname == nullptr)
    return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Loaded open_backend() {
  Loaded l;
  const std::string dir = own_directory();
  const std::string path = dir + kCudaBackendFile;
  // RTLD_LOCAL: the backend's symbols (and its CUDA runtime's) stay out of the global scope.
  // The handle is never closed: kernels registered with the runtime live as long as the process.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    l.error = "the CUDA backend (" + path + ") or the CUDA runtime it needs could not be loaded: " +
              (e != nullptr ? e : "dlopen failed");
    return l;
  }
  auto entry = reinterpret_cast<CudaBackendEntry>(dlsym(handle, kCudaBackendEntry));
  if (entry == nullptr) {
    l.error = "the CUDA backend " + path + " has no entry point " + kCudaBackendEntry;
    return l;
  }
  l.table = handshake(entry, l.error);
  if (l.table == nullptr) l.error = "the CUDA backend " + path + " does not fit this library: " + l.error;
  return l;
}
#else
Loaded open_backend() {
  Loaded l;
  l.error = "this build has no CUDA backend (built without CUDA)";
  return l;
}
#endif

const Loaded& loaded() {
  static const Loaded l = open_backend();  // once per process, thread-safe
  return l;
}

}  // namespace

void check_backend(fa_status status, const char* const* message) {
  if (status != FA_OK)
    throw ApiError(status, *message != nullptr ? *message : "CUDA backend error (no message)");
}

const CudaBackend& cuda_backend() {
  const Loaded& l = loaded();
  if (l.table == nullptr) fail(FA_ERROR_BACKEND, l.error);
  return *l.table;
}

void require_cuda_backend_if_built() {
#if defined(FA_CUDA_BACKEND_LINKED) || defined(FA_WITH_CUDA)
  (void)cuda_backend();
#endif
}

int cuda_device_count() {
  const Loaded& l = loaded();
  return l.table == nullptr ? 0 : l.table->device_count();
}

const DeviceProps& cuda_device_props(int device) {
  const char* message = nullptr;
  const DeviceProps* props = nullptr;
  check_backend(cuda_backend().device_props(device, &props, &message), &message);
  return *props;
}

void copy_to_host_sync(void* dst, const void* src, size_t bytes, int device, void* stream) {
  const char* message = nullptr;
  check_backend(cuda_backend().copy_to_host_sync(dst, src, bytes, device, stream, &message),
                &message);
}

}  // namespace fa
