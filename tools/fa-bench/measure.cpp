#include "measure.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "core/dtype.h"  // header-only fp16/bf16 conversions (tests/test_dtype.cpp)
#include "text.h"        // tools/common: fatools::sig

#ifdef FA_BENCH_CUDA
#include "cuda_runtime_loader.h"
#endif

namespace fabench {
namespace {

#ifdef FA_BENCH_CUDA
// The CUDA runtime, opened at first use: every call below runs under a configuration on CUDA,
// which cuda_available() allowed only once it was open.
const CudaRuntime& cu() { return *cuda_runtime(); }
#endif

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Random values are drawn once into a pool this large and tiled (from varying offsets) into
// every tensor: drawing 10^8 normals per configuration would dominate a sweep.
constexpr size_t kPoolElems = size_t(1) << 22;
// Rotate input sets until they cover twice the L2, but never more than this many sets.
constexpr int kMaxInputSets = 4;

std::string gib(double bytes) { return fatools::sig(bytes / kGiB, 3) + " GiB"; }

const std::vector<unsigned char>& pool(fa_dtype t) {
  static std::vector<unsigned char> pools[3];
  std::vector<unsigned char>& p = pools[t == FA_DTYPE_FP32 ? 0 : t == FA_DTYPE_FP16 ? 1 : 2];
  if (!p.empty()) return p;
  std::mt19937_64 rng(12345 + uint64_t(t));
  std::normal_distribution<float> normal(0.f, 1.f);
  p.resize(kPoolElems * size_t(dtype_bytes(t)));
  for (size_t i = 0; i < kPoolElems; ++i) {
    const float x = normal(rng);
    if (t == FA_DTYPE_FP32) std::memcpy(&p[i * 4], &x, 4);
    if (t == FA_DTYPE_FP16) { const fa::half_t h = fa::to_half(x); std::memcpy(&p[i * 2], &h, 2); }
    if (t == FA_DTYPE_BF16) { const fa::bfloat16_t h = fa::to_bf16(x); std::memcpy(&p[i * 2], &h, 2); }
  }
  return p;
}

// Memory of the benchmark's device: host for the CPU backends, the GPU otherwise.
class Memory {
 public:
  explicit Memory(bool cuda) : cuda_(cuda) {}
  ~Memory() { release(); }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    if (bytes == 0) return nullptr;
#ifdef FA_BENCH_CUDA
    if (cuda_) {
      if (cu().Malloc(&p, bytes) != cudaSuccess) {
        (void)cu().GetLastError();  // clear the failure: the next configuration must not see it
        return nullptr;
      }
      ptrs_.push_back(p);
      return p;
    }
#endif
    p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p) ptrs_.push_back(p);
    return p;
  }
  void fill_random(void* dst, size_t bytes, fa_dtype t, size_t offset) {
    const std::vector<unsigned char>& src = pool(t);
    offset = (offset * size_t(dtype_bytes(t))) % src.size();
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(bytes - done, src.size() - offset);
      copy(static_cast<unsigned char*>(dst) + done, src.data() + offset, n);
      done += n;
      offset = 0;
    }
  }
  void release() {
    for (void* p : ptrs_) {
#ifdef FA_BENCH_CUDA
      if (cuda_) { cu().Free(p); continue; }
#endif
      std::free(p);
    }
    ptrs_.clear();
  }

 private:
  void copy(void* dst, const void* src, size_t n) {
#ifdef FA_BENCH_CUDA
    if (cuda_) { cu().Memcpy(dst, src, n, cudaMemcpyHostToDevice); return; }
#endif
    std::memcpy(dst, src, n);
  }
  bool cuda_;
  std::vector<void*> ptrs_;
};

size_t free_device_bytes() {
#ifdef FA_BENCH_CUDA
  size_t free = 0, total = 0;
  if (cu().MemGetInfo(&free, &total) == cudaSuccess) return free;
  (void)cu().GetLastError();
#endif
  return 0;
}

double host_available_bytes() {
  return double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
}

fa_tensor make_tensor(void* data, fa_dtype t, std::vector<int64_t> shape, bool cuda) {
  fa_tensor x{};
  x.data = data;
  x.dtype = t;
  x.rank = int32_t(shape.size());
  x.device = fa_device{cuda ? FA_DEVICE_CUDA : FA_DEVICE_CPU, 0};
  int64_t stride = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    x.shape[i] = shape[size_t(i)];
    x.stride[i] = stride;
    stride *= shape[size_t(i)];
  }
  return x;
}

// The tensors of one attention call, as (role, shape, dtype) and their bytes.
struct Tensors {
  fa_params p;
  size_t bytes = 0;        // every tensor
  size_t input_bytes = 0;  // q, k, v (and dout): what the caller already holds
  // The tensors filled with random values, as members of p: Tensors are copied into a vector of
  // input sets, so raw pointers into p would dangle (they did: the rotated sets' fills read
  // freed memory on the GPU, where more than one set is built).
  std::vector<fa_tensor fa_params::*> inputs;

  // Builds params whose pointers come from `at(bytes)`; at may return fake pointers (query only).
  // The inputs are allocated first, then `after_inputs()` runs, then the outputs and gradients.
  template <typename Alloc, typename AfterInputs = void (*)()>
  bool build(const Config& c, Alloc at, AfterInputs after_inputs = [] {}) {
    fa_params_init(&p);
    p.backend = c.backend == "vanilla" ? FA_BACKEND_VANILLA : FA_BACKEND_AUTO;
    p.causal = c.causal;
    const bool grads = c.op != "fwd";
    const int64_t e = dtype_bytes(c.dtype);
    bytes = 0;
    bool ok = true;
    auto t = [&](fa_tensor& dst, fa_dtype dt, std::vector<int64_t> shape) {
      size_t n = size_t(dt == FA_DTYPE_FP32 ? 4 : e);
      for (int64_t s : shape) n *= size_t(s);
      void* ptr = at(n);
      ok = ok && ptr != nullptr;
      bytes += n;
      dst = make_tensor(ptr, dt, shape, c.cuda);
    };
    t(p.q, c.dtype, {c.b, c.s_q, c.h, c.d});
    t(p.k, c.dtype, {c.b, c.s_k, c.h_kv, c.d});
    t(p.v, c.dtype, {c.b, c.s_k, c.h_kv, c.d});
    inputs = {&fa_params::q, &fa_params::k, &fa_params::v};
    if (grads) {
      t(p.dout, c.dtype, {c.b, c.s_q, c.h, c.d});
      inputs.push_back(&fa_params::dout);
    }
    input_bytes = bytes;
    after_inputs();
    t(p.out, c.dtype, {c.b, c.s_q, c.h, c.d});
    t(p.lse, FA_DTYPE_FP32, {c.b, c.h, c.s_q});
    if (grads) {
      t(p.dq, c.dtype, {c.b, c.s_q, c.h, c.d});
      t(p.dk, c.dtype, {c.b, c.s_k, c.h_kv, c.d});
      t(p.dv, c.dtype, {c.b, c.s_k, c.h_kv, c.d});
    }
    return ok;
  }
};

std::string failure(const char* what, fa_status st) {
  const std::string kind = st == FA_ERROR_BACKEND || st == FA_ERROR_UNSUPPORTED ||
                                   st == FA_ERROR_HEAD_DIM
                               ? "unsupported: "
                               : "error: ";
  return kind + what + ": " + fa_last_error();
}

// The family of the passes a row times (fa_select_kernel): the forward's (fwd), the backward's
// (bwd; its untimed forward is not the row's), or both as "fwd+bwd" where they differ (fwdbwd).
fa_status family_of(const fa_params& p, const std::string& op, std::string* family) {
  const char* fwd = nullptr;
  const char* bwd = nullptr;
  fa_status st = FA_OK;
  if (op != "bwd" && (st = fa_select_kernel(&p, 0, &fwd)) != FA_OK) return st;
  if (op != "fwd" && (st = fa_select_kernel(&p, 1, &bwd)) != FA_OK) return st;
  if (fwd == nullptr)
    *family = bwd;
  else if (bwd == nullptr || std::strcmp(fwd, bwd) == 0)
    *family = fwd;
  else
    *family = std::string(fwd) + "+" + bwd;
  return FA_OK;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

const char* dtype_name(fa_dtype t) {
  switch (t) {
    case FA_DTYPE_FP16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
    default: return "fp32";
  }
}
int64_t dtype_bytes(fa_dtype t) { return t == FA_DTYPE_FP32 ? 4 : 2; }

bool cuda_available() {
#ifdef FA_BENCH_CUDA
  return fa_cuda_device_count() > 0 && cuda_runtime() != nullptr;
#else
  return false;
#endif
}

std::string nvidia_driver_version(const std::string& proc_text) {
  // The first token of the "NVRM version:" line made of digits and dots, with a dot: the module's
  // name before it varies ("x86_64 Kernel Module", "Open Kernel Module for x86_64").
  const size_t at = proc_text.find("NVRM version:");
  if (at == std::string::npos) return "";
  std::istringstream line(proc_text.substr(at, proc_text.find('\n', at) - at));
  for (std::string tok; line >> tok;) {
    const bool digits_dots = std::all_of(tok.begin(), tok.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
    });
    if (digits_dots && std::isdigit(static_cast<unsigned char>(tok[0])) &&
        tok.find('.') != std::string::npos)
      return tok;
  }
  return "";
}

Machine machine(bool cuda) {
  Machine m{"cpu", "", ""};
#ifdef FA_BENCH_CUDA
  if (cuda) {
    cudaDeviceProp prop{};
    if (cu().GetDeviceProperties(&prop, 0) == cudaSuccess) m.gpu = prop.name;
    std::ifstream proc("/proc/driver/nvidia/version");
    std::stringstream text;
    text << proc.rdbuf();
    m.driver = nvidia_driver_version(text.str());
    int v = 0;
    if (m.driver.empty() && cu().DriverGetVersion(&v) == cudaSuccess)
      m.driver = "cuda-driver-api " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    if (cu().RuntimeGetVersion(&v) == cudaSuccess)
      m.cuda = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }
#else
  (void)cuda;
#endif
  return m;
}

std::string kernel_family(const Config& c) {
  Tensors probe;
  probe.build(c, [](size_t) { return reinterpret_cast<void*>(uintptr_t(1) << 12); });
  std::string family;
  return family_of(probe.p, c.op, &family) == FA_OK ? family : "";
}

Row measure(const Config& c) {
  Row r;
  r.op = c.op;
  r.dtype = dtype_name(c.dtype);
  r.d = c.d; r.b = c.b; r.h = c.h; r.h_kv = c.h_kv; r.s_q = c.s_q; r.s_k = c.s_k;
  r.causal = c.causal;
  r.backend = c.backend;
  r.device = c.cuda ? "cuda" : "cpu";
  const bool bwd = c.op != "fwd";

  // 1. Ask the library first, with placeholder pointers (the queries validate alignment, never
  //    read memory), so that a configuration too large for the device is reported, not run.
  Tensors probe;
  probe.build(c, [](size_t) { return reinterpret_cast<void*>(uintptr_t(1) << 12); });
  size_t ws_fwd = 0, ws_bwd = 0;
  fa_status st = fa_forward_workspace_size(&probe.p, &ws_fwd);
  if (st != FA_OK) { r.status = failure("forward", st); return r; }
  if (bwd && (st = fa_backward_workspace_size(&probe.p, &ws_bwd)) != FA_OK) {
    r.status = failure("backward", st);
    return r;
  }
  // Validated above, so this names the family that runs (or would, for an oom row below).
  if ((st = family_of(probe.p, c.op, &r.kernel)) != FA_OK) {
    r.status = failure("fa_select_kernel", st);
    return r;
  }
  const size_t ws_bytes = std::max(ws_fwd, ws_bwd);  // one workspace serves both passes
  const double need = double(probe.bytes) + double(ws_bytes);
  const size_t free_before = c.cuda ? free_device_bytes() : 0;
  const double available = c.cuda ? double(free_before) : host_available_bytes();
  if (need > available) {
    r.status = "oom: needs " + gib(need) + " (tensors " + gib(double(probe.bytes)) +
               " + workspace " + gib(double(ws_bytes)) + "), " + gib(available) + " free";
    return r;
  }

  // 2. One input set plus the workspace; the peak is what that took from the device.
  Memory mem(c.cuda);
  std::vector<Tensors> sets(1);
  size_t free_after_inputs = 0;
  if (!sets[0].build(c, [&](size_t n) { return mem.alloc(n); },
                     [&] { free_after_inputs = c.cuda ? free_device_bytes() : 0; })) {
    r.status = "oom: allocating " + gib(double(probe.bytes)) + " of tensors failed";
    return r;
  }
  void* ws = mem.alloc(ws_bytes);
  if (ws_bytes > 0 && ws == nullptr) {
    r.status = "oom: allocating the " + gib(double(ws_bytes)) + " workspace failed";
    return r;
  }
  r.peak_bytes = c.cuda ? int64_t(free_before) - int64_t(free_device_bytes())
                        : int64_t(probe.bytes + ws_bytes);
  r.input_bytes = c.cuda ? int64_t(free_before) - int64_t(free_after_inputs)
                         : int64_t(sets[0].input_bytes);
  // More input sets, while they fit, until they cover twice the last-level cache the inputs could
  // hide in: the GPU's L2, or on the CPU a fixed 32 MiB (the benchmark machines' L3 is smaller).
  size_t cache = size_t(32) << 20;
#ifdef FA_BENCH_CUDA
  if (c.cuda) {
    int l2 = 0;
    cu().DeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    cache = size_t(l2);
  }
#endif
  const size_t want = std::min<size_t>(kMaxInputSets, 1 + 2 * cache / std::max<size_t>(probe.bytes, 1));
  auto room = [&] {
    return (c.cuda ? double(free_device_bytes()) : host_available_bytes()) > 2.0 * double(probe.bytes);
  };
  while (sets.size() < want && room()) {
    Tensors t;
    if (!t.build(c, [&](size_t n) { return mem.alloc(n); })) break;
    sets.push_back(t);
  }
  for (size_t s = 0; s < sets.size(); ++s)
    for (size_t i = 0; i < sets[s].inputs.size(); ++i) {
      const fa_tensor* t = &(sets[s].p.*sets[s].inputs[i]);
      size_t n = size_t(dtype_bytes(c.dtype));
      for (int k = 0; k < t->rank; ++k) n *= size_t(t->shape[k]);
      mem.fill_random(t->data, n, c.dtype, 7919 * (s * 5 + i));
    }

  // 3. Time. bwd: each set's forward runs once first (the backward reads its out and lse).
  auto call = [&](const fa_params& p, bool backward) {
    return backward ? fa_backward(&p, ws, ws_bytes, nullptr) : fa_forward(&p, ws, ws_bytes, nullptr);
  };
  auto step = [&](size_t i) -> fa_status {
    const fa_params& p = sets[i % sets.size()].p;
    fa_status s = FA_OK;
    if (c.op != "bwd") s = call(p, false);
    if (s == FA_OK && bwd) s = call(p, true);
    return s;
  };
  if (c.op == "bwd")
    for (const Tensors& t : sets)
      if ((st = call(t.p, false)) != FA_OK) { r.status = failure("forward", st); return r; }
  [[maybe_unused]] const auto warm0 = std::chrono::steady_clock::now();  // GPU warm-up below
  auto tick = [&](const char* phase, int done, int planned) {
    if (c.on_call) c.on_call(phase, done, planned);
  };
  for (int i = 0; i < c.warmup; ++i) {
    if ((st = step(size_t(i))) != FA_OK) { r.status = failure(c.op.c_str(), st); return r; }
#ifdef FA_BENCH_CUDA
    if (c.cuda && c.on_call) cu().DeviceSynchronize();  // so that the report means "done"
#endif
    tick("warm-up", i + 1, c.warmup);
  }
  std::vector<double> ms;
#ifdef FA_BENCH_CUDA
  if (c.cuda) {
    // Untimed calls, each waited for, until warmup_ms have passed since the first.
    for (size_t i = size_t(c.warmup);; ++i) {
      const cudaError_t sync = cu().DeviceSynchronize();
      if (sync != cudaSuccess) {
        r.status = std::string("error: CUDA: ") + cu().GetErrorString(sync);
        return r;
      }
      if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm0)
              .count() >= c.warmup_ms)
        break;
      if ((st = step(i)) != FA_OK) { r.status = failure(c.op.c_str(), st); return r; }
      tick("warm-up", int(i) + 1, c.warmup);
    }
    std::vector<cudaEvent_t> ev(2 * size_t(c.repeats));
    for (cudaEvent_t& e : ev) cu().EventCreate(&e);
    for (int i = 0; i < c.repeats && st == FA_OK; ++i) {
      cu().EventRecord(ev[2 * size_t(i)], nullptr);
      st = step(size_t(i));
      cu().EventRecord(ev[2 * size_t(i) + 1], nullptr);
    }
    // Every call is queued; wait for each end event in turn, to report progress without
    // leaving the GPU idle between calls.
    for (int i = 0; i < c.repeats && st == FA_OK && c.on_call; ++i)
      if (cu().EventSynchronize(ev[2 * size_t(i) + 1]) == cudaSuccess) tick("repeat", i + 1, c.repeats);
    const cudaError_t sync = cu().DeviceSynchronize();
    for (int i = 0; i < c.repeats && st == FA_OK && sync == cudaSuccess; ++i) {
      float t = 0;
      cu().EventElapsedTime(&t, ev[2 * size_t(i)], ev[2 * size_t(i) + 1]);
      ms.push_back(t);
    }
    for (cudaEvent_t& e : ev) cu().EventDestroy(e);
    if (sync != cudaSuccess) {
      r.status = std::string("error: CUDA: ") + cu().GetErrorString(sync);
      return r;
    }
  }
#endif
  if (!c.cuda)
    for (int i = 0; i < c.repeats && st == FA_OK; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      st = step(size_t(i));
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (st == FA_OK) tick("repeat", i + 1, c.repeats);
    }
  if (st != FA_OK) { r.status = failure(c.op.c_str(), st); return r; }
  r.ms = median(ms);
  r.tflops = row_flops(r) / (r.ms * 1e-3) / 1e12;
  return r;
}

}  // namespace fabench
