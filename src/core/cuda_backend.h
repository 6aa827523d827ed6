// The seam between the core library (libflashattn.so: the C ABI, validation, dispatch, the CPU
// backend) and its CUDA backend (libflashattn_cuda.so: the kernels, linked to the CUDA runtime
// and cuBLAS). The core links no CUDA library; it opens the backend the first time a call needs
// CUDA (a CUDA tensor, fa_cuda_device_count) and reaches it only through this table of function
// pointers, which the backend's one exported symbol (kCudaBackendEntry) hands out.
//
// Where the backend is: next to the core library (the directory of the file that holds
// fa_version, from dladdr), so an installed tree, a wheel (flashattn/lib/) and a build directory
// all find their own copy and never another version's on the loader's path. When it cannot be
// opened (missing, or the CUDA runtime it links missing: dlerror says which), every CUDA request
// fails with FA_ERROR_BACKEND quoting dlerror, and fa_cuda_device_count() returns 0.
//
// The two libraries come from one build: the backend checks the core's version and the sizes of
// the structs passed by pointer (Params, Context, DeviceProps) and refuses a mismatch.
// Exceptions never cross the seam (each library may carry its own copy of the C++ runtime, see
// src/api/exports.map): every entry returns an fa_status, and on failure a message that stays
// valid on the calling thread until its next call into the backend.
//
// The internal static library (tests) links the backend's objects in and takes the table from a
// direct call instead of dlopen (FA_CUDA_BACKEND_LINKED); a CPU-only build has no table at all.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/params.h"
#include "core/row_ops.h"
#include "core/tuning.h"
#include "flashattn/flashattn.h"

namespace fa {

// The CUDA rows of the registry (src/api/dispatch.cpp orders them and says what they serve; the
// backend implements them).
enum class CudaFamily : int32_t {
  Sm90 = 0,     // Hopper-native forward and backward: TMA, wgmma, warp specialisation
  Sm80 = 1,     // FlashAttention-2: mma.sync + cp.async (Ampere, Ada, Hopper)
  Vanilla = 2,  // standard attention: cuBLAS + softmax kernel
  KvCache = 3,  // KV caches (dense, paged), split-KV, append + rotary: mma.sync + cp.async
  Sm75 = 4,     // Turing: fp16 mma.sync.m16n8k8, ldmatrix, register-staged loads (forward)
};

// Bumped whenever the table or the meaning of an entry changes.
constexpr uint32_t kCudaBackendAbi = 5;  // 4: the Sm75 family; 5: row_op

struct CudaBackend {
  // device_count never fails: 0 without a driver or a GPU.
  int32_t (*device_count)();
  // *props: the device's properties, cached by the backend for the process (stable storage).
  fa_status (*device_props)(int32_t device, const DeviceProps** props, const char** message);
  fa_status (*copy_to_host_sync)(void* dst, const void* src, size_t bytes, int32_t device,
                                 void* stream, const char** message);
  // A family's check (FA_OK: it runs the call; else its refusal), workspace and run;
  // backward: 0 forward, 1 backward.
  fa_status (*check)(CudaFamily family, const Params* p, int32_t backward, const Context* ctx,
                     const char** message);
  fa_status (*workspace)(CudaFamily family, const Params* p, int32_t backward, const Context* ctx,
                         size_t* bytes, const char** message);
  fa_status (*run)(CudaFamily family, const Params* p, int32_t backward, const Context* ctx,
                   void* workspace, size_t bytes, void* stream, const char** message);
  // Ring attention's bookkeeping (core/row_ops.h) on the memory of CUDA device `device`, queued
  // on stream as a small kernel; returns without waiting for it.
  fa_status (*row_op)(const RowOp* op, int32_t device, void* stream, const char** message);
};

// The backend's handshake: the table when the caller was built from the same sources (version,
// ABI and struct sizes agree), else nullptr with *why saying which differ.
using CudaBackendEntry = const CudaBackend* (*)(uint32_t abi, int32_t version,
                                                uint32_t params_size, uint32_t context_size,
                                                uint32_t props_size, const char** why);
constexpr const char* kCudaBackendEntry = "fa_cuda_backend";
constexpr const char* kCudaBackendFile = "libflashattn_cuda.so";

// The table, opened on first use (once per process: a failure is remembered and reported the
// same way every time). Throws FA_ERROR_BACKEND naming the library, its path and dlerror when
// the backend cannot be loaded, and when this build has no CUDA backend.
const CudaBackend& cuda_backend();

// Throws cuda_backend()'s error in a build that has a CUDA backend which cannot be loaded;
// returns in a CPU-only build (whose CUDA tensors then name a device that does not exist).
void require_cuda_backend_if_built();

// A backend entry's status as the core's exception: throws ApiError(status, *message) unless
// FA_OK. Takes the message's address, not its value: `check_backend(entry(..., &message),
// message)` would read the message before the call that sets it (argument order is unspecified).
void check_backend(fa_status status, const char* const* message);

}  // namespace fa

extern "C" {
// Defined by the backend (src/cuda/backend_table.cpp); a CudaBackendEntry.
const fa::CudaBackend* fa_cuda_backend(uint32_t abi, int32_t version, uint32_t params_size,
                                       uint32_t context_size, uint32_t props_size,
                                       const char** why);
}
