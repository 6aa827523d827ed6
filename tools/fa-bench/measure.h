// fa-bench measurement of one configuration through the public C API: allocate, fill with
// random normal values, time, account memory. GPU: CUDA events, median; CPU: wall clock, median.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "flashattn/flashattn.h"
#include "record.h"

namespace fabench {

struct Config {
  std::string backend = "flashattn";  // flashattn (FA_BACKEND_AUTO) or vanilla
  std::string op = "fwd";             // fwd, bwd (timed alone, after one forward), fwdbwd
  fa_dtype dtype = FA_DTYPE_BF16;
  int64_t b = 1, h = 16, h_kv = 16, s_q = 1024, s_k = 1024, d = 128;
  bool causal = false;
  bool cuda = false;
  int warmup = 3, repeats = 30;
  // GPU: after the warmup calls, untimed calls (each waited for) until warmup_ms have passed
  // since the first, so that the card's clock settles under this call before timing (a backend
  // timed right after another read up to 14% slow with a few warm-up calls:
  // docs/performance-log.md, thirteenth session).
  double warmup_ms = 200;
  // Called after each call measure() makes, untimed ("warm-up") or timed ("repeat"), with the
  // calls done and planned in that phase (the GPU's warm-up goes on until warmup_ms: its plan is
  // c.warmup). Timed GPU calls report as each one's end event completes, after all are queued.
  std::function<void(const char* phase, int done, int planned)> on_call;
};

bool cuda_available();  // this build has CUDA and a device is present

struct Machine {
  std::string gpu, driver, cuda;
};
Machine machine(bool cuda);
// The kernel driver's version ("580.159.04") from the text of /proc/driver/nvidia/version (the
// first version-shaped token of its "NVRM version:" line), or "" where the text has none.
// machine() records it as the driver, or the CUDA driver API's version where the file is missing.
std::string nvidia_driver_version(const std::string& proc_text);

// Never throws for a configuration that cannot run: the row's status says why ("oom: ...",
// "unsupported: ...", "error: ..."). Peak bytes: on the GPU the cudaMemGetInfo drop while the
// tensors and workspace of one input set are allocated; on the CPU the bytes of those tensors
// plus the workspaces the library asked for.
Row measure(const Config& c);

// The kernel family measure(c) would time (its row's kernel), asked of the library without
// allocating or running anything; "" where the library refuses the configuration.
std::string kernel_family(const Config& c);

const char* dtype_name(fa_dtype t);
int64_t dtype_bytes(fa_dtype t);

}  // namespace fabench
