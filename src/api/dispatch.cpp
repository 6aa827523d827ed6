#include "api/dispatch.h"

#include "core/error.h"
#include "cpu/backend.h"
#ifdef FA_WITH_CUDA
#include "cuda/backend.h"
#include "cuda/kernels/vanilla/vanilla.h"
#endif

namespace fa {

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::CpuFlash: return "cpu-flash";
    case Kernel::CpuReference: return "cpu-reference";
    case Kernel::CudaSm80: return "cuda-sm80";
    case Kernel::CudaVanilla: return "cuda-vanilla";
  }
  return "?";
}

Kernel select_kernel(const Params& p, Pass pass) {
  if (p.device.type == FA_DEVICE_CPU) {
    switch (p.backend) {
      case FA_BACKEND_AUTO:
      case FA_BACKEND_FLASH: return Kernel::CpuFlash;
      case FA_BACKEND_REFERENCE:
      case FA_BACKEND_VANILLA: return Kernel::CpuReference;  // on the CPU the reference is vanilla
    }
  }
#ifdef FA_WITH_CUDA
  if (p.backend == FA_BACKEND_VANILLA) {  // forward and backward, every dtype
    cuda::vanilla::check(p);
    return Kernel::CudaVanilla;
  }
  if (pass == Pass::Backward)
    cuda::check_backward(p);  // FA_ERROR_BACKEND in a build without backward kernels
  else
    cuda::check_forward(p);
  return Kernel::CudaSm80;
#else
  (void)pass;
  fail(FA_ERROR_BACKEND, "q is on CUDA device ", p.device.index, " but this build has no CUDA backend");
#endif
}

namespace {
cpu::Impl cpu_impl(Kernel k) { return k == Kernel::CpuReference ? cpu::Impl::Reference : cpu::Impl::Flash; }
}  // namespace

size_t workspace_size(Kernel k, const Params& p, Pass pass) {
#ifdef FA_WITH_CUDA
  if (k == Kernel::CudaVanilla)  // the materialised score matrices: standard attention's cost
    return pass == Pass::Forward ? cuda::vanilla::forward_workspace(p)
                                 : cuda::vanilla::backward_workspace(p);
  if (k == Kernel::CudaSm80)  // the forward needs none; the backward its dQ accumulator and D
    return pass == Pass::Forward ? 0 : cuda::backward_workspace(p);
#endif
  return pass == Pass::Forward ? cpu::forward_workspace(p, cpu_impl(k))
                               : cpu::backward_workspace(p, cpu_impl(k));
}

size_t min_workspace_size(Kernel k, const Params& p, Pass pass) {
  if (k == Kernel::CudaVanilla || k == Kernel::CudaSm80) return workspace_size(k, p, pass);
  return pass == Pass::Forward ? cpu::min_forward_workspace(p, cpu_impl(k))
                               : cpu::min_backward_workspace(p, cpu_impl(k));
}

void run(Kernel k, const Params& p, Pass pass, void* workspace, size_t bytes, void* stream) {
#ifdef FA_WITH_CUDA
  if (k == Kernel::CudaSm80)
    return pass == Pass::Forward ? cuda::forward(p, stream)
                                 : cuda::backward(p, workspace, bytes, stream);
  if (k == Kernel::CudaVanilla)
    return pass == Pass::Forward ? cuda::vanilla::forward(p, workspace, bytes, stream)
                                 : cuda::vanilla::backward(p, workspace, bytes, stream);
#else
  (void)stream;
#endif
  if (pass == Pass::Forward)
    cpu::forward(p, cpu_impl(k), workspace, bytes);
  else
    cpu::backward(p, cpu_impl(k), workspace, bytes);
}

}  // namespace fa
