#include "api/dispatch.h"

#include "api/error.h"
#include "cpu/backend.h"

namespace fa {

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::CpuFlash: return "cpu-flash";
    case Kernel::CpuReference: return "cpu-reference";
  }
  return "?";
}

Kernel select_kernel(const Params& p, Pass) {
  if (p.device.type == FA_DEVICE_CPU) {
    switch (p.backend) {
      case FA_BACKEND_AUTO:
      case FA_BACKEND_FLASH: return Kernel::CpuFlash;
      case FA_BACKEND_REFERENCE:
      case FA_BACKEND_VANILLA: return Kernel::CpuReference;  // on the CPU the reference is vanilla
    }
  }
  if (p.backend == FA_BACKEND_REFERENCE)
    fail(FA_ERROR_BACKEND, "backend=FA_BACKEND_REFERENCE runs on the CPU only; q is on CUDA device ",
         p.device.index);
  fail(FA_ERROR_BACKEND, "no CUDA attention kernel in this build for q on CUDA device ",
       p.device.index, " (this version ships the CPU backend only)");
}

namespace {
cpu::Impl cpu_impl(Kernel k) { return k == Kernel::CpuReference ? cpu::Impl::Reference : cpu::Impl::Flash; }
}  // namespace

size_t workspace_size(Kernel k, const Params& p, Pass pass) {
  return pass == Pass::Forward ? cpu::forward_workspace(p, cpu_impl(k))
                               : cpu::backward_workspace(p, cpu_impl(k));
}

size_t min_workspace_size(Kernel k, const Params& p, Pass pass) {
  return pass == Pass::Forward ? cpu::min_forward_workspace(p, cpu_impl(k))
                               : cpu::min_backward_workspace(p, cpu_impl(k));
}

void run(Kernel k, const Params& p, Pass pass, void* workspace, size_t bytes, void* /*stream*/) {
  if (pass == Pass::Forward)
    cpu::forward(p, cpu_impl(k), workspace, bytes);
  else
    cpu::backward(p, cpu_impl(k), workspace, bytes);
}

}  // namespace fa
