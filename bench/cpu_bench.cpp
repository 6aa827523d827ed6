// fa-cpu-bench: speed and memory of the CPU backends, through the public API only.
//
//   fa-cpu-bench                   # flash fwd/bwd GFLOP/s, fp32 1x8x2048x64; memory sweep
//   fa-cpu-bench --with-reference  # also one timed forward of the reference backend
//   fa-cpu-bench --json out.json   # also write the rows as JSON
//   fa-cpu-bench --help            # every flag
//
// What it does, in order, each part in its own forked child process:
//   0. ceiling fp32 FMA throughput with 1 and with all threads: the roof, and a check of how many
//              cores the machine really gives (SMT siblings or a shared host core show no gain);
//   1. check   flash against the reference (forward and backward) on a small problem of the
//              benchmarked dtype / head_dim / causal, so a broken kernel is never timed;
//   2. speed   warm-up, then the median wall-clock (std::chrono::steady_clock) of --repeats calls
//              of fa_forward and of fa_backward on random normal inputs; FLOPs as in the
//              project's benchmark rules (BENCH.md): forward 4*b*h*s_q*s_k*d, halved for
//              causal; backward 2.5x the forward;
//   3. memory  per (backend, seqlen): one forward + backward at fp32, b=1, h=8, d=64; the peak
//              resident set above the child's baseline (VmHWM after resetting it through
//              /proc/self/clear_refs), next to the tensor bytes and the workspace the size
//              queries asked for.
// Children keep the measurements honest (a fresh heap and peak counter per configuration) and
// keep the parent free of OpenMP state, which GNU libgomp does not carry safely across fork().
// Results come back through a pipe as fixed-size records. Figures and verdicts:
// docs/cpu-benchmark.md.
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"  // tools/common: CLI11 validators, man-page --help
#include "core/dtype.h"  // header-only fp16/bf16 conversions (tested in tests/test_dtype.cpp)
#include "flashattn/flashattn.h"
#include "flashattn/flashattn.hpp"
#include "text.h"  // tools/common: fatools::Table, sig

namespace {

// Backward FLOPs per forward FLOP (two GEMMs forward, five backward).
constexpr double kBackwardFlopRatio = 2.5;

// ---- command line ----------------------------------------------------------------------------

struct Shape {
  fa_dtype dtype = FA_DTYPE_FP32;
  int64_t b = 1, h = 8, s = 2048, d = 64;
  bool causal = false;
};

struct Options {
  Shape shape;
  int repeats = 5;
  bool with_reference = false;
  bool speed = true;
  bool memory = true;
  bool check = true;
  std::vector<int64_t> memory_seqlens{1024, 2048, 4096, 8192};
  // The reference's fwd + bwd dominates the run: on 2 cores ~25 s at 4096 but ~2.5 min at 8192,
  // which would triple the default run; 4096 already shows its quadratic growth.
  int64_t max_reference_seqlen = 4096;
  bool ceiling = true;
  std::string json_path;
  std::string command;
};

const char* dtype_name(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
    default: return "fp32";
  }
}

// The command line (CLI11); returns -1 to go on, else the exit status (0 after --help, 2 after a
// usage error).
int parse_args(int argc, char** argv, Options* o) {
  CLI::App app{"speed (GFLOP/s) and peak memory of the CPU attention backends", "fa-cpu-bench"};
  fatools::setup(
      app,
      {{"fa-cpu-bench",
        {"Speed and peak memory of the CPU attention backends through the public API only, each "
         "part in its own forked child process: the fp32 FMA ceiling (1 and all threads), a check "
         "of flash against the fp64 reference, flash forward and backward at one shape, and a "
         "memory sweep (fp32, b=1, h=8, d=64) of one forward + backward per backend and length. "
         "Threads: OpenMP's default (all cores) unless OMP_NUM_THREADS is set.",
         {{"EXAMPLES", " fa-cpu-bench\n fa-cpu-bench --max-reference-seqlen 8192 --json cpu.json\n"
                       " OMP_NUM_THREADS=1 fa-cpu-bench --no-memory\n"
                       " fa-cpu-bench --dtype bf16 --causal -s 4096 --no-memory"},
          {"EXIT STATUS", "0 done; 1 the check or a measurement failed; 2 bad arguments."},
          {"SEE ALSO", "docs/cpu-benchmark.md (method, figures)."}}}}});
  const auto positive = fatools::integer(1);
  std::string dtype = "fp32";
  bool no_speed = false, no_memory = false, no_check = false, no_ceiling = false;
  app.add_option("--dtype", dtype, "speed part: element type of q, k, v, out and the gradients.")
      ->check(fatools::one_of({"fp32", "fp16", "bf16"}))->type_name("TYPE")->capture_default_str();
  app.add_option("-b,--batch", o->shape.b, "speed part: batch size.")->check(positive)->type_name("N")
      ->capture_default_str();
  app.add_option("--heads", o->shape.h, "speed part: heads (query and key/value alike).")
      ->check(positive)->type_name("N")->capture_default_str();
  app.add_option("-s,--seqlen", o->shape.s, "speed part: sequence length, queries and keys.")
      ->check(positive)->type_name("N")->capture_default_str();
  app.add_option("-d,--head-dim", o->shape.d, "speed part: head dimension.")->check(positive)
      ->type_name("N")->capture_default_str();
  app.add_flag("--causal", o->shape.causal, "speed part: causal mask (FLOPs halved).");
  app.add_option("--repeats", o->repeats, "timed calls after one warm-up; the median is shown.")
      ->check(positive)->type_name("N")->capture_default_str();
  app.add_flag("--with-reference", o->with_reference,
               "also time one forward of the reference backend (no warm-up; it is slow: naive, "
               "fp64).");
  app.add_flag("--no-speed", no_speed, "skip the speed part.");
  app.add_option("--memory-seqlens", o->memory_seqlens, "memory part: sequence lengths, comma-separated.")
      ->check(positive)->delimiter(',')->type_name("LIST")->capture_default_str();
  app.add_option("--max-reference-seqlen", o->max_reference_seqlen,
                 "memory part: run the reference only up to this length; longer ones report the "
                 "workspace sizes only (the reference needs 16*s^2 bytes per thread, ~2.5 min at "
                 "8192).")
      ->check(fatools::integer(0))->type_name("N")->capture_default_str();
  app.add_flag("--no-memory", no_memory, "skip the memory part.");
  app.add_flag("--no-check", no_check, "skip the flash-vs-reference check before timing.");
  app.add_flag("--no-ceiling", no_ceiling, "skip the fp32 FMA-throughput ceiling (1 and all threads).");
  app.add_option("--json", o->json_path, "also write {machine, library, command, ceilings, rows} here.")
      ->type_name("PATH");
  if (const int rc = fatools::parse(app, argc, argv); rc >= 0) return rc;
  for (fa_dtype t : {FA_DTYPE_FP32, FA_DTYPE_FP16, FA_DTYPE_BF16})
    if (dtype == dtype_name(t)) o->shape.dtype = t;
  o->speed = !no_speed;
  o->memory = !no_memory;
  o->check = !no_check;
  o->ceiling = !no_ceiling;
  for (int i = 0; i < argc; ++i) o->command += (i ? " " : "") + std::string(argv[i]);
  return -1;
}

int omp_threads();

// ---- results: fixed-size records that cross the pipe from a child ----------------------------

struct Row {
  char op[8] = "";        // fwd, bwd, fwdbwd
  char backend[16] = "";  // flash, reference
  int32_t dtype = FA_DTYPE_FP32;
  int64_t b = 0, h = 0, s = 0, d = 0;
  int32_t causal = 0;
  int32_t threads = 0;  // OpenMP threads (std::threads for the FMA ceiling)
  double ms = 0, gflops = 0;
  int64_t peak_rss_bytes = -1;  // peak resident set above the child's baseline; -1: not measured
  int64_t workspace_bytes = 0;  // the buffer handed to the library: max of the two size queries
  int64_t workspace_fwd_bytes = 0, workspace_bwd_bytes = 0;
  int64_t tensor_bytes = 0;  // q, k, v, out, lse (+ dout, dq, dk, dv when backward runs)
  char note[80] = "";        // non-empty: why the configuration was not run (sizes only)
  char error[240] = "";      // non-empty: the configuration failed
};

// src into a fixed-size field of a Row, cut to fit and terminated.
void copy_text(char* dst, size_t n, const std::string& src) {
  *fmt::format_to_n(dst, n - 1, "{}", src).out = '\0';
}

double forward_flops(const Shape& sh) {
  const double f = 4.0 * double(sh.b) * double(sh.h) * double(sh.s) * double(sh.s) * double(sh.d);
  return sh.causal ? f / 2 : f;
}

Row make_row(const char* op, const char* backend, const Shape& sh) {
  Row r;
  copy_text(r.op, sizeof r.op, op);
  copy_text(r.backend, sizeof r.backend, backend);
  r.dtype = sh.dtype;
  r.b = sh.b, r.h = sh.h, r.s = sh.s, r.d = sh.d;
  r.causal = sh.causal;
  r.threads = omp_threads();
  return r;
}

// ---- forked children ---------------------------------------------------------------------------

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = write(fd, p, n);
    if (k <= 0) _exit(3);
    p += k, n -= size_t(k);
  }
}

// Runs job() in a child process and returns its rows. A child that dies (a signal, e.g. the OOM
// killer) or throws yields a single row carrying the reason, built from `failed`.
template <typename Job>
std::vector<Row> in_child(const Row& failed, Job job) {
  std::fflush(stdout);
  std::fflush(stderr);
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (pid == 0) {
    close(fds[0]);
    std::vector<Row> rows;
    try {
      rows = job();
    } catch (const std::exception& e) {
      Row r = failed;
      copy_text(r.error, sizeof r.error, e.what());
      rows = {r};
    }
    write_all(fds[1], rows.data(), rows.size() * sizeof(Row));
    close(fds[1]);
    std::fflush(stdout);
    _exit(0);
  }
  close(fds[1]);
  std::vector<Row> rows;
  Row r;
  size_t got = 0;
  for (;;) {
    const ssize_t k = read(fds[0], reinterpret_cast<char*>(&r) + got, sizeof r - got);
    if (k <= 0) break;
    got += size_t(k);
    if (got == sizeof r) rows.push_back(r), got = 0;
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Row bad = failed;
    copy_text(bad.error, sizeof bad.error,
              WIFSIGNALED(status)
                  ? "child killed by signal " + std::to_string(WTERMSIG(status))
                  : "child exited with status " + std::to_string(WEXITSTATUS(status)));
    rows = {bad};
  }
  return rows;
}

// ---- /proc readings (Linux) -------------------------------------------------------------------

// A "VmXXX:   1234 kB" field of /proc/self/status, in bytes; -1 when absent.
int64_t proc_status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  const size_t n = std::strlen(field);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::atoll(line.c_str() + n + 1) * 1024;
  return -1;
}

// Resets this process's peak RSS (VmHWM) to its current RSS; false where the kernel refuses.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      size_t start = colon == std::string::npos ? line.size() : colon + 1;
      while (start < line.size() && line[start] == ' ') ++start;
      return line.substr(start);
    }
  return "unknown";
}

// The 1, 5 and 15 minute load averages: other work on the machine skews every timing here.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

int cpu_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return int(sysconf(_SC_NPROCESSORS_ONLN));
}

// Threads the library's OpenMP regions use by default.
int omp_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env && std::atoi(env) > 0) return std::atoi(env);
  return cpu_cores();
}

// ---- host tensors in fp32 / fp16 / bf16 -------------------------------------------------------


// An owning contiguous (b, s, h, d) tensor.
struct HostTensor {
  fa_dtype dtype = FA_DTYPE_FP32;
  std::vector<int64_t> shape;
  std::vector<uint32_t> storage;  // 4-byte words: aligned for every dtype used here

  HostTensor(fa_dtype t, std::vector<int64_t> dims) : dtype(t), shape(std::move(dims)) {
    storage.assign(size_t((bytes() + 3) / 4), 0u);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    return n;
  }
  int64_t elem_bytes() const { return dtype == FA_DTYPE_FP32 ? 4 : 2; }
  int64_t bytes() const { return numel() * elem_bytes(); }
  fa::Tensor view() const {
    fa::Tensor t;
    t.raw.data = const_cast<uint32_t*>(storage.data());
    t.raw.dtype = dtype;
    t.raw.device = fa::cpu_device();
    t.raw.rank = int32_t(shape.size());
    int64_t stride = 1;
    for (int i = t.raw.rank - 1; i >= 0; --i) {
      t.raw.shape[i] = shape[size_t(i)];
      t.raw.stride[i] = stride;
      stride *= shape[size_t(i)];
    }
    return t;
  }
  float get(int64_t i) const {
    const auto* p16 = reinterpret_cast<const uint16_t*>(storage.data());
    switch (dtype) {
      case FA_DTYPE_FP16: return fa::to_float(fa::half_t{p16[i]});
      case FA_DTYPE_BF16: return fa::to_float(fa::bfloat16_t{p16[i]});
      default: return reinterpret_cast<const float*>(storage.data())[i];
    }
  }
  void set(int64_t i, float x) {
    auto* p16 = reinterpret_cast<uint16_t*>(storage.data());
    switch (dtype) {
      case FA_DTYPE_FP16: p16[i] = fa::to_half(x).bits; break;
      case FA_DTYPE_BF16: p16[i] = fa::to_bf16(x).bits; break;
      default: reinterpret_cast<float*>(storage.data())[i] = x;
    }
  }
  void fill_normal(std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t i = 0, n = numel(); i < n; ++i) set(i, normal(rng));
  }
};

// Bytes of q, k, v, out, lse, and with the gradients also dout, dq, dk, dv.
int64_t problem_bytes(const Shape& sh, bool with_grads) {
  const int64_t elem = sh.dtype == FA_DTYPE_FP32 ? 4 : 2;
  const int64_t qkv = sh.b * sh.s * sh.h * sh.d * elem, lse = sh.b * sh.h * sh.s * 4;
  return (with_grads ? 8 : 4) * qkv + lse;
}

// Every tensor of one forward + backward call; inputs (q, k, v, dout) random normal.
struct Problem {
  Shape sh;
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;

  Problem(const Shape& s, uint64_t seed)
      : sh(s),
        q(s.dtype, {s.b, s.s, s.h, s.d}),
        k(q),
        v(q),
        out(q),
        lse(FA_DTYPE_FP32, {s.b, s.h, s.s}),
        dout(q),
        dq(q),
        dk(q),
        dv(q) {
    std::mt19937_64 rng(seed);
    for (HostTensor* t : {&q, &k, &v, &dout}) t->fill_normal(rng);
  }
  int64_t bytes(bool with_grads) const { return problem_bytes(sh, with_grads); }
  fa_params params(fa_backend backend, bool with_grads) const {
    fa::Options o;
    o.backend = backend;
    o.causal = sh.causal;
    fa_params p = fa::make_params(q.view(), k.view(), v.view(), out.view(), lse.view(), o);
    if (with_grads) {
      p.dout = dout.view().raw;
      p.dq = dq.view().raw;
      p.dk = dk.view().raw;
      p.dv = dv.view().raw;
    }
    return p;
  }
};

template <typename F>
double time_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- the machine's ceiling ------------------------------------------------------------------

constexpr int kFmaChains = 10;  // independent FMA chains: covers latency (4) x FMA ports (2) on x86
constexpr int64_t kFmaIters = 100'000'000;  // ~0.2 s per thread at 2.5 GHz

#if defined(__x86_64__) || defined(_M_X64)
// kFmaIters steps of kFmaChains 8-wide fp32 FMAs; returns a sum so nothing is optimised away.
__attribute__((target("avx2,fma"))) float fma_chains() {
  __m256 acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_set1_ps(1e-3f * float(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < kFmaIters; ++i)
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  float lanes[8], sum = 0;
  for (int c = 0; c < kFmaChains; ++c) {
    _mm256_storeu_ps(lanes, acc[c]);
    for (float x : lanes) sum += x;
  }
  return sum;
}
bool have_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
float fma_chains() { return 0.f; }
bool have_fma() { return false; }
#endif

// Peak fp32 FMA GFLOP/s with one thread and with the OpenMP thread count: the roof over the
// flash kernels' figures (and a check of how many cores the machine really gives).
std::vector<Row> ceiling_job() {
  std::vector<Row> rows;
  for (int threads : {1, omp_threads()}) {
    Row r = make_row("fma", "ceiling", Shape{});
    r.threads = threads;
    if (!have_fma()) {
      copy_text(r.note, sizeof r.note, "no AVX2 + FMA on this CPU");
    } else {
      std::vector<float> sinks(size_t(threads), 0.f);
      r.ms = time_ms([&] {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
          pool.emplace_back([&, t] { sinks[size_t(t)] = fma_chains(); });
        for (std::thread& t : pool) t.join();
      });
      const double flops = double(threads) * double(kFmaIters) * kFmaChains * 8 * 2;
      r.gflops = flops / (r.ms * 1e6);
    }
    rows.push_back(r);
    if (omp_threads() == 1) break;
  }
  return rows;
}

// ---- the three parts ---------------------------------------------------------------------------

// Largest |a - b| over the elements, relative to max(1, max |b|).
double relative_error(const HostTensor& a, const HostTensor& b) {
  double diff = 0, scale = 1;
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    const double x = a.get(i), y = b.get(i);
    diff = std::isfinite(x) ? std::max(diff, std::fabs(x - y)) : INFINITY;
    scale = std::max(scale, std::fabs(y));
  }
  return diff / scale;
}

// Flash against the reference on a small problem of the benchmarked dtype, head_dim and mask.
// Returns one row per tensor checked; `gflops` carries the relative error, `error` a failure.
Shape check_shape(const Shape& bench) {
  Shape sh = bench;
  sh.b = 1, sh.h = 2, sh.s = std::min<int64_t>(bench.s, 256);
  return sh;
}

std::vector<Row> check_job(const Shape& bench) {
  const Shape sh = check_shape(bench);
  Problem flash(sh, 7), ref(sh, 7);
  for (auto [prob, backend] : {std::pair{&flash, FA_BACKEND_FLASH}, {&ref, FA_BACKEND_REFERENCE}}) {
    fa_params fwd = prob->params(backend, false), bwd = prob->params(backend, true);
    fa::HostWorkspace ws(
        std::max(fa::forward_workspace_size(fwd), fa::backward_workspace_size(bwd)));
    fa::forward(fwd, ws.data(), ws.size());
    fa::backward(bwd, ws.data(), ws.size());
  }
  // Flash computes in fp32 and rounds P for the 16-bit dtypes; the reference works in fp64.
  const double tol = sh.dtype == FA_DTYPE_FP32 ? 1e-4 : sh.dtype == FA_DTYPE_FP16 ? 1e-2 : 5e-2;
  std::vector<Row> rows;
  const std::pair<const char*, double> errors[] = {{"out", relative_error(flash.out, ref.out)},
                                                   {"dq", relative_error(flash.dq, ref.dq)},
                                                   {"dk", relative_error(flash.dk, ref.dk)},
                                                   {"dv", relative_error(flash.dv, ref.dv)}};
  for (const auto& [name, err] : errors) {
    Row r = make_row(name, "flash", sh);
    r.gflops = err;
    if (!(err <= tol))
      copy_text(r.error, sizeof r.error,
                fmt::format("{} differs from the reference by {:.3g} (tolerance {:.0e})", name, err, tol));
    rows.push_back(r);
  }
  return rows;
}

// Flash forward and backward: one warm-up each, then the median of `repeats` calls; optionally
// one reference forward.
std::vector<Row> speed_job(const Shape& sh, int repeats, bool with_reference) {
  Problem prob(sh, 1);
  const fa_params fwd = prob.params(FA_BACKEND_FLASH, false);
  const fa_params bwd = prob.params(FA_BACKEND_FLASH, true);
  const size_t ws_fwd = fa::forward_workspace_size(fwd), ws_bwd = fa::backward_workspace_size(bwd);
  fa::HostWorkspace ws(std::max(ws_fwd, ws_bwd));

  std::vector<Row> rows;
  auto timed = [&](const char* op, const fa_params& p, double flops, auto call) {
    call(p);  // warm-up: first touch of outputs and workspace, OpenMP thread start
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) ms.push_back(time_ms([&] { call(p); }));
    Row r = make_row(op, "flash", sh);
    r.ms = median(ms);
    r.gflops = flops / (r.ms * 1e6);
    r.workspace_fwd_bytes = int64_t(ws_fwd), r.workspace_bwd_bytes = int64_t(ws_bwd);
    r.workspace_bytes = int64_t(std::string(op) == "fwd" ? ws_fwd : ws_bwd);
    r.tensor_bytes = prob.bytes(std::string(op) == "bwd");
    rows.push_back(r);
  };
  timed("fwd", fwd, forward_flops(sh),
        [&](const fa_params& p) { fa::forward(p, ws.data(), ws.size()); });
  timed("bwd", bwd, kBackwardFlopRatio * forward_flops(sh),
        [&](const fa_params& p) { fa::backward(p, ws.data(), ws.size()); });

  if (with_reference) {
    const fa_params ref = prob.params(FA_BACKEND_REFERENCE, false);
    const size_t ws_ref = fa::forward_workspace_size(ref);
    fa::HostWorkspace ref_ws(ws_ref);
    Row r = make_row("fwd", "reference", sh);
    r.ms = time_ms([&] { fa::forward(ref, ref_ws.data(), ref_ws.size()); });
    r.gflops = forward_flops(sh) / (r.ms * 1e6);
    r.workspace_bytes = r.workspace_fwd_bytes = int64_t(ws_ref);
    r.tensor_bytes = prob.bytes(false);
    rows.push_back(r);
  }
  return rows;
}

// One forward + backward in a fresh child: the peak RSS it adds above the child's baseline.
// With a non-empty `skip` only the workspace size queries run, and the row carries it as a note.
std::vector<Row> memory_job(const Shape& sh, fa_backend backend, const std::string& skip) {
  Row r = make_row("fwdbwd", backend == FA_BACKEND_FLASH ? "flash" : "reference", sh);
  if (!skip.empty()) {
    Problem sizes(Shape{sh.dtype, 1, 1, 1, sh.d, sh.causal}, 0);  // placeholder buffers
    for (HostTensor* t :
         {&sizes.q, &sizes.k, &sizes.v, &sizes.out, &sizes.dout, &sizes.dq, &sizes.dk, &sizes.dv})
      t->shape = {sh.b, sh.s, sh.h, sh.d};
    sizes.lse.shape = {sh.b, sh.h, sh.s};
    const fa_params fwd = sizes.params(backend, false), bwd = sizes.params(backend, true);
    r.workspace_fwd_bytes = int64_t(fa::forward_workspace_size(fwd));
    r.workspace_bwd_bytes = int64_t(fa::backward_workspace_size(bwd));
    r.workspace_bytes = std::max(r.workspace_fwd_bytes, r.workspace_bwd_bytes);
    r.tensor_bytes = problem_bytes(sh, true);
    copy_text(r.note, sizeof r.note, skip);
    return {r};
  }
  if (!reset_peak_rss())
    throw std::runtime_error("cannot reset the peak RSS through /proc/self/clear_refs");
  const int64_t baseline = proc_status_bytes("VmRSS");

  Problem prob(sh, 2);
  const fa_params fwd = prob.params(backend, false), bwd = prob.params(backend, true);
  const size_t ws_fwd = fa::forward_workspace_size(fwd), ws_bwd = fa::backward_workspace_size(bwd);
  fa::HostWorkspace ws(std::max(ws_fwd, ws_bwd));  // one buffer, as a caller would reuse it
  r.ms = time_ms([&] {
    fa::forward(fwd, ws.data(), ws.size());
    fa::backward(bwd, ws.data(), ws.size());
  });

  r.peak_rss_bytes = proc_status_bytes("VmHWM") - baseline;
  r.gflops = (1 + kBackwardFlopRatio) * forward_flops(sh) / (r.ms * 1e6);
  r.workspace_bytes = int64_t(std::max(ws_fwd, ws_bwd));
  r.workspace_fwd_bytes = int64_t(ws_fwd), r.workspace_bwd_bytes = int64_t(ws_bwd);
  r.tensor_bytes = prob.bytes(true);
  return {r};
}

// ---- output -----------------------------------------------------------------------------------

using Json = nlohmann::ordered_json;

Json json_row(const Row& r) {
  const bool ran = !r.error[0] && !r.note[0];
  auto figure = [&](double x) { return ran && std::isfinite(x) ? Json(x) : Json(); };
  Json j{{"op", r.op},
         {"dtype", dtype_name(r.dtype)},
         {"b", r.b},
         {"h", r.h},
         {"s", r.s},
         {"d", r.d},
         {"causal", bool(r.causal)},
         {"backend", r.backend},
         {"threads", r.threads},
         {"ms", figure(r.ms)},
         {"gflops", figure(r.gflops)},
         {"peak_rss_bytes", ran && r.peak_rss_bytes >= 0 ? Json(r.peak_rss_bytes) : Json()},
         {"workspace_bytes", r.workspace_bytes},
         {"workspace_fwd_bytes", r.workspace_fwd_bytes},
         {"workspace_bwd_bytes", r.workspace_bwd_bytes},
         {"tensor_bytes", r.tensor_bytes}};
  if (r.note[0]) j["note"] = r.note;
  if (r.error[0]) j["error"] = r.error;
  return j;
}

void write_json(const Options& o, const std::string& load_before, const std::vector<Row>& ceilings,
                const std::vector<Row>& rows) {
  Json j{{"machine",
          {{"cpu", cpu_model()},
           {"cores", cpu_cores()},
           {"threads", omp_threads()},
           {"loadavg_before", load_before},
           {"loadavg_after", load_average()}}},
         {"library", {{"version", fa_version()}, {"build", fa_build_info()}}},
         {"command", o.command},
         {"ceilings", Json::array()},
         {"rows", Json::array()}};
  for (const Row& c : ceilings)
    j["ceilings"].push_back({{"what", "fp32 fma"},
                             {"threads", c.threads},
                             {"gflops", c.note[0] ? Json() : Json(c.gflops)}});
  for (const Row& r : rows) j["rows"].push_back(json_row(r));
  std::ofstream f(o.json_path);
  f << j.dump(1) << "\n";
  if (!f) {
    fmt::print(stderr, "fa-cpu-bench: cannot write {}\n", o.json_path);
    std::exit(1);
  }
  fmt::print("\nwrote {}\n", o.json_path);
}

std::string shape_text(const Shape& sh) {
  return fmt::format("{} b={} h={} s={} d={} {}", dtype_name(sh.dtype), sh.b, sh.h, sh.s, sh.d,
                     sh.causal ? "causal" : "non-causal");
}

// The memory table; growth compares the peak with the previous length's (x2 linear, x4
// quadratic when the lengths double).
const fatools::Table kMemoryTable({{"backend", 10, true}, {"s", 6}, {"tensors", 8}, {"ws fwd", 8},
                                   {"ws bwd", 8}, {"peak", 8}, {"beyond", 8}, {"growth", 6},
                                   {"ms", 8}, {"GFLOP/s", 7}});

void print_memory_row(const Row& r, const Row* prev) {
  std::vector<std::string> cells{r.backend, std::to_string(r.s), fatools::mib(double(r.tensor_bytes)),
                                 fatools::mib(double(r.workspace_fwd_bytes)),
                                 fatools::mib(double(r.workspace_bwd_bytes))};
  if (r.error[0] || r.note[0]) {
    cells.push_back(r.error[0] ? r.error : r.note);
  } else {
    const bool grew = prev && !prev->error[0] && !prev->note[0] && prev->peak_rss_bytes > 0;
    for (std::string c : {fatools::mib(double(r.peak_rss_bytes)),
                          fatools::mib(double(r.peak_rss_bytes - r.tensor_bytes)),
                          grew ? fatools::times(double(r.peak_rss_bytes) / double(prev->peak_rss_bytes))
                               : std::string(),
                          fatools::sig(r.ms), fatools::sig(r.gflops)})
      cells.push_back(c);
  }
  fmt::print("{}", kMemoryTable.row(cells));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int rc = parse_args(argc, argv, &o); rc >= 0) return rc;
  fmt::print("fa-cpu-bench: flashattn {} ({})\n", fa_version(), fa_build_info());
  const std::string load_before = load_average();
  fmt::print("machine: {}, {} cores, {} OpenMP threads{}; load average {}\n", cpu_model(),
             cpu_cores(), omp_threads(), std::getenv("OMP_NUM_THREADS") ? " (OMP_NUM_THREADS)" : "",
             load_before);
  std::vector<Row> ceilings, rows;
  bool failed = false;

  if (o.ceiling) {
    ceilings = in_child(make_row("fma", "ceiling", Shape{}), ceiling_job);
    fmt::print("\nceiling: fp32 FMA throughput (AVX2),");
    for (const Row& c : ceilings) {
      if (c.note[0] || c.error[0])
        fmt::print(" {}", c.note[0] ? c.note : c.error);
      else
        fmt::print(" {} thread{} {} GFLOP/s;", c.threads, c.threads > 1 ? "s" : "", fatools::sig(c.gflops));
    }
    fmt::print("\n");
  }

  if (o.check && o.speed) {
    const std::vector<Row> checks =
        in_child(make_row("check", "flash", o.shape), [&] { return check_job(o.shape); });
    fmt::print("\ncheck: flash vs reference (fp64), {}, max |diff| / max(1, max |ref|):",
               shape_text(check_shape(o.shape)));
    for (const Row& r : checks) {
      if (r.error[0]) {
        failed = true;
        fmt::print("\n  FAILED: {}", r.error);
      } else {
        fmt::print(" {} {:.2g}", r.op, r.gflops);
      }
    }
    fmt::print("\n");
    if (failed) {
      fmt::print(stderr, "fa-cpu-bench: the check failed; not timing a wrong kernel\n");
      return 1;
    }
  }

  if (o.speed) {
    fmt::print("\nspeed: {}, warm-up + median of {} (reference: one call)\n", shape_text(o.shape),
               o.repeats);
    const fatools::Table table({{"op", 4, true}, {"backend", 10, true}, {"ms", 9}, {"GFLOP/s", 8},
                                {"workspace MiB", 13}});
    fmt::print("{}", table.header());
    for (const Row& r : in_child(make_row("fwd", "flash", o.shape),
                                 [&] { return speed_job(o.shape, o.repeats, o.with_reference); })) {
      rows.push_back(r);
      if (r.error[0]) {
        failed = true;
        fmt::print("{}", table.row({r.op, r.backend, r.error}));
        continue;
      }
      fmt::print("{}", table.row({r.op, r.backend, fatools::sig(r.ms), fatools::sig(r.gflops),
                                  fatools::mib(double(r.workspace_bytes))}));
    }
  }

  if (o.memory) {
    fmt::print(
        "\nmemory: one forward + backward per child process, fp32 b=1 h=8 d=64 non-causal, MiB\n"
        "peak = peak RSS above the child's baseline (inputs, outputs, workspace, library);\n"
        "beyond = peak - tensors; growth = peak / peak at the previous length\n");
    fmt::print("{}", kMemoryTable.header());
    for (fa_backend backend : {FA_BACKEND_FLASH, FA_BACKEND_REFERENCE}) {
      std::vector<Row> mine;
      mine.reserve(o.memory_seqlens.size());
      for (int64_t s : o.memory_seqlens) {
        Shape sh;
        sh.s = s;
        std::string skip;
        if (backend == FA_BACKEND_REFERENCE && s > o.max_reference_seqlen)
          skip = "not run: s > --max-reference-seqlen " + std::to_string(o.max_reference_seqlen);
        Row failed_row =
            make_row("fwdbwd", backend == FA_BACKEND_FLASH ? "flash" : "reference", sh);
        const Row r = in_child(failed_row, [&] { return memory_job(sh, backend, skip); }).front();
        if (r.error[0]) failed = true;
        print_memory_row(r, mine.empty() ? nullptr : &mine.back());
        mine.push_back(r);
      }
      rows.insert(rows.end(), mine.begin(), mine.end());
    }
  }

  fmt::print("\nload average at the end: {}\n", load_average());
  if (!o.json_path.empty()) write_json(o, load_before, ceilings, rows);
  return failed ? 1 : 0;
}
