#include "commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "progress.h"
#include "text.h"  // tools/common: fatools::sig, Table

namespace fabench {
namespace {

using fatools::sig;
using Json = nlohmann::ordered_json;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

void out(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);  // rows stream as they are measured
}

Record new_record(const Timing& t, const Output& o) {
  const Machine m = machine(t.cuda);
  Record rec;
  rec.gpu = m.gpu;
  rec.driver = m.driver;
  rec.cuda = m.cuda;
  rec.commit = o.commit;
  rec.command = o.command;
  rec.library = fa_build_info();
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  rec.date = date;
  return rec;
}

void save(const Record& rec, const Output& o) {
  if (!o.json.empty()) write_file(o.json, to_json(rec));
  if (!o.csv.empty()) write_file(o.csv, to_csv(rec.rows));
}

// Rates in the unit of their scale: a GPU's attention runs at tens to hundreds of TFLOP/s, the
// CPU's at GFLOP/s (a TFLOP/s column there would read 0.00).
struct RateUnit {
  const char* name;
  double per_tflops;
};
RateUnit rate_unit(bool cuda) { return cuda ? RateUnit{"TFLOP/s", 1} : RateUnit{"GFLOP/s", 1e3}; }

fatools::Table row_table(bool cuda) {
  return fatools::Table({{"op", 6, true}, {"dtype", 5, true}, {"d", 4}, {"causal", 6, true},
                         {"b", 5}, {"h", 4}, {"h_kv", 4}, {"s_q", 6}, {"s_k", 6},
                         {"backend", 9, true}, {"kernel", 13, true}, {"ms", 9},
                         {rate_unit(cuda).name, 7}, {"peak MiB", 8}, {"call MiB", 8},
                         {"status", 0, true}});
}

std::string row_line(const fatools::Table& table, const Row& r, bool cuda) {
  std::vector<std::string> cells{r.op, r.dtype, std::to_string(r.d), r.causal ? "yes" : "no",
                                 std::to_string(r.b), std::to_string(r.h), std::to_string(r.h_kv),
                                 std::to_string(r.s_q), std::to_string(r.s_k), r.backend,
                                 r.kernel.empty() ? "-" : r.kernel};
  if (r.ran())
    for (std::string c : {sig(r.ms), sig(r.tflops * rate_unit(cuda).per_tflops),
                          fatools::mib(double(r.peak_bytes)), fatools::mib(double(r.call_bytes())),
                          std::string("ok")})
      cells.push_back(c);
  else
    for (std::string c : {"-", "-", "-", "-", r.status.c_str()}) cells.push_back(c);
  return table.row(cells);
}

Config config(const Timing& t, const std::string& backend, const std::string& op, fa_dtype dt,
              int64_t b, int64_t h, int64_t h_kv, int64_t s_q, int64_t s_k, int64_t d, bool causal) {
  Config c;
  c.backend = backend;
  c.op = op;
  c.dtype = dt;
  c.b = b; c.h = h; c.h_kv = h_kv; c.s_q = s_q; c.s_k = s_k; c.d = d;
  c.causal = causal;
  c.cuda = t.cuda;
  c.warmup = t.warmup;
  c.warmup_ms = t.warmup_ms;
  c.repeats = t.repeats;
  return c;
}

std::string cell_label(const Config& c) {
  return fmt::format("{} {} d{} {} s{} {}", dtype_name(c.dtype), c.op, c.d,
                     c.causal ? "causal" : "full", c.s_q, c.backend);
}

// A measured cell's result line on stderr (sweep, compare): the cell, its kernel family, and its
// time and rate or why it did not run.
void report(size_t i, size_t n, const Row& r, bool cuda) {
  const std::string result =
      r.ran() ? fmt::format("{} ms, {} {}", sig(r.ms), sig(r.tflops * rate_unit(cuda).per_tflops),
                            rate_unit(cuda).name)
              : r.status;
  std::fputs(fmt::format("[{}/{}] {} {} d{} {} s{} {} ({}): {}\n", i, n, r.dtype, r.op, r.d,
                         r.causal ? "causal" : "full", r.s_q, r.backend,
                         r.kernel.empty() ? "-" : r.kernel, result)
                 .c_str(),
             stderr);
}

// Measures every cell in order with the live progress line; each row goes to `done` as soon as
// it is measured.
template <typename Done>
void measure_all(const std::vector<Config>& cells, const Timing& t, std::vector<double> estimate,
                 Done done) {
  Progress progress(t.live, cells.size(), std::move(estimate));
  for (size_t i = 0; i < cells.size(); ++i) {
    Config c = cells[i];
    c.on_call = progress.cell(i, cell_label(c), c.warmup + c.repeats);
    const Row r = measure(c);
    progress.clear();
    done(i, r);
  }
}

// The seconds each cell should take, printed before a sweep or compare starts: one call of every
// (backend, op) at its smallest cell, scaled by FLOPs to each cell and by the calls a cell makes
// (plus the GPU's time-based warm-up). Small cells run at a lower rate than large ones, so the
// estimate errs long. Cells whose calibration did not run (out of memory, unsupported) count 0.
std::vector<double> estimate(const std::vector<Config>& cells) {
  const auto t0 = std::chrono::steady_clock::now();
  auto flops = [](const Config& c) {
    Row r;
    r.op = c.op;
    r.b = c.b; r.h = c.h; r.s_q = c.s_q; r.s_k = c.s_k; r.d = c.d;
    r.causal = c.causal;
    return row_flops(r);
  };
  std::map<std::pair<std::string, std::string>, const Config*> smallest;
  for (const Config& c : cells) {
    const Config*& s = smallest[{c.backend, c.op}];
    if (!s || flops(c) < flops(*s)) s = &c;
  }
  std::map<std::pair<std::string, std::string>, double> ms_per_flop;
  for (const auto& [key, c] : smallest) {
    Config once = *c;
    once.warmup = 0;
    once.repeats = 1;
    once.warmup_ms = 0;
    once.on_call = nullptr;
    const Row r = measure(once);
    ms_per_flop[key] = r.ran() ? r.ms / flops(*c) : 0;
  }
  std::vector<double> seconds;
  double total = 0;
  for (const Config& c : cells) {
    const double per_call_ms = ms_per_flop[{c.backend, c.op}] * flops(c);
    seconds.push_back(per_call_ms > 0 ? (c.warmup + c.repeats) * per_call_ms / 1e3 +
                                            (c.cuda ? c.warmup_ms / 1e3 : 0)
                                      : 0);
    total += seconds.back();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (total > 0)
    std::fputs(fmt::format("estimate: {} cells, about {} (from one call per backend and pass at "
                           "its smallest cell, scaled by FLOPs; that took {})\n",
                           cells.size(), duration_text(total), duration_text(took))
                   .c_str(),
               stderr);
  return seconds;
}

// The kernel families a backend's cells will run, each once in order of appearance ("-" for
// none): a compare table's header names them.
std::string families(const std::vector<Config>& cells, const std::string& backend) {
  std::vector<std::string> seen;
  for (const Config& c : cells) {
    const std::string k = c.backend == backend ? kernel_family(c) : "";
    if (!k.empty() && std::find(seen.begin(), seen.end(), k) == seen.end()) seen.push_back(k);
  }
  std::string out;
  for (const std::string& k : seen) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "-" : out;
}

}  // namespace

// ---- defaults --------------------------------------------------------------------------------
// The CPU's: a 2-core machine runs the reference (vanilla) at ~1 GFLOP/s and the flash kernel at
// ~10-60, so shapes are chosen for `run` to take a few seconds and `compare` and `sweep` ~20-30 s
// there (docs/fa-bench.md has the measured times), in fp32, the CPU kernels' native type. The median of
// 5 repeats after one warm-up call: the CPU's clock needs no settling, and the calls are long.

Timing timing_defaults(bool cuda) {
  Timing t;
  if (!cuda) {
    t.warmup = 1;
    t.repeats = 5;
  }
  return t;
}

RunArgs run_defaults(bool cuda) {
  RunArgs a;
  if (!cuda) {
    a.dtype = "fp32";
    a.h = 8;
    a.d = 64;
  }
  return a;
}

SweepArgs sweep_defaults(bool cuda) {
  SweepArgs a;
  if (!cuda) {  // heads 8 at d 64; batch 8 / 4 / 2
    a.dtypes = {"fp32"};
    a.hidden = 512;
    a.tokens = 1024;
    a.seqlens = {128, 256, 512};
    a.dims = {64};
  }
  return a;
}

CompareArgs compare_defaults(bool cuda) {
  CompareArgs a;
  if (!cuda) {  // the reference's fwd+bwd at 1024 takes ~1 s a call; at 2048 ~3 s
    a.dtype = "fp32";
    a.h = 8;
    a.d = 64;
    a.seqlens = {256, 512, 1024};
  }
  return a;
}

fa_dtype dtype_from_name(const std::string& name) {
  if (name == "fp32") return FA_DTYPE_FP32;
  if (name == "fp16") return FA_DTYPE_FP16;
  if (name == "bf16") return FA_DTYPE_BF16;
  throw std::invalid_argument("unknown dtype '" + name + "' (fp32, fp16, bf16)");
}

// ---- subcommands -----------------------------------------------------------------------------

int cmd_run(const RunArgs& a, const Timing& t, const Output& o) {
  Record rec = new_record(t, o);
  std::vector<Config> cells;
  for (const std::string& op : a.ops)
    for (const std::string& be : a.backends)
      cells.push_back(config(t, be, op, dtype_from_name(a.dtype), a.b, a.h, a.h_kv ? a.h_kv : a.h,
                             a.s_q, a.s_k ? a.s_k : a.s_q, a.d, a.causal));
  const fatools::Table table = row_table(t.cuda);
  out(table.header());
  measure_all(cells, t, {}, [&](size_t, const Row& r) {
    rec.rows.push_back(r);
    out(row_line(table, r, t.cuda));
  });
  save(rec, o);
  return 0;
}

int cmd_sweep(const SweepArgs& a, const Timing& t, const Output& o) {
  Record rec = new_record(t, o);
  std::vector<Config> cells;
  for (const std::string& dt : a.dtypes)
    for (int64_t d : a.dims)
      for (const std::string& causal : a.causal)
        for (int64_t s : a.seqlens)
          for (const std::string& op : a.ops)
            for (const std::string& be : a.backends) {
              const int64_t h = a.hidden / d, b = std::max<int64_t>(1, a.tokens / s);
              cells.push_back(config(t, be, op, dtype_from_name(dt), b, h, h, s, s, d, causal == "yes"));
            }
  std::vector<double> est = estimate(cells);
  const fatools::Table table = row_table(t.cuda);
  out(table.header());
  measure_all(cells, t, std::move(est), [&](size_t i, const Row& r) {
    rec.rows.push_back(r);
    report(i + 1, cells.size(), r, t.cuda);
    out(row_line(table, r, t.cuda));
  });
  save(rec, o);
  return 0;
}

int cmd_compare(const CompareArgs& a, const Timing& t, const Output& o) {
  Record rec = new_record(t, o);
  const fa_dtype dt = dtype_from_name(a.dtype);
  std::vector<Config> cells;  // per (op, seqlen): flash, then vanilla
  for (const std::string& op : a.ops)
    for (int64_t s : a.seqlens)
      for (const char* be : {"flashattn", "vanilla"})
        cells.push_back(config(t, be, op, dt, a.b, a.h, a.h, s, s, a.d, a.causal));
  out(fmt::format("standard (vanilla) vs FlashAttention: {}, b={}, h={}, d={}, {}, {}; "
                  "kernels: vanilla {}, flash {}\n",
                  a.dtype, a.b, a.h, a.d, a.causal ? "causal" : "non-causal", t.cuda ? "GPU" : "CPU",
                  families(cells, "vanilla"), families(cells, "flashattn")));
  std::vector<double> est = estimate(cells);
  // Memory: what each call needs beyond its inputs (outputs, LSE, workspace; FlashAttention's
  // convention), and the ratio with the inputs counted too.
  const fatools::Table table({{"op", 6, true}, {"seqlen", 6}, {"vanilla ms", 10}, {"flash ms", 9},
                              {"speed-up", 8}, {"vanilla MiB", 11}, {"flash MiB", 9},
                              {"mem ratio", 9}, {"peak ratio", 10}, {"note", 0, true}});
  out(table.header());
  rec.rows.reserve(cells.size());  // CompareLine points into rows
  measure_all(cells, t, std::move(est), [&](size_t i, const Row& r) {
    rec.rows.push_back(r);
    report(i + 1, cells.size(), r, t.cuda);
    if (i % 2 == 0) return;  // the line prints when its vanilla row is in
    CompareLine c;
    c.s = r.s_q;
    c.op = r.op;
    c.flash = &rec.rows[i - 1];
    c.vanilla = &rec.rows[i];
    rec.compare.push_back(c);
    auto ms = [](const Row* x) { return x->ran() ? sig(x->ms) : "-"; };
    auto call_mib = [](const Row* x) { return x->ran() ? fatools::mib(double(x->call_bytes())) : "-"; };
    std::string note;
    if (!c.vanilla->ran()) note += "vanilla " + c.vanilla->status;
    if (!c.flash->ran()) note += (note.empty() ? "" : "; ") + std::string("flash ") + c.flash->status;
    out(table.row({c.op, std::to_string(c.s), ms(c.vanilla), ms(c.flash), fatools::times(c.speedup()),
                   call_mib(c.vanilla), call_mib(c.flash), fatools::times(c.memory_ratio()),
                   fatools::times(c.peak_ratio()), note}));
  });
  save(rec, o);
  return 0;
}

void list_models() {
  const fatools::Table table({{"model", 12, true}, {"layers", 6}, {"hidden", 6}, {"heads", 5},
                              {"kv_heads", 8}, {"head_dim", 8}});
  out(table.header());
  for (const ModelShape& m : model_presets())
    out(table.row({m.name, std::to_string(m.layers), std::to_string(m.hidden),
                   std::to_string(m.heads), std::to_string(m.kv_heads), std::to_string(m.head_dim)}));
}

int cmd_plan(const PlanArgs& a) {
  const ModelShape& m = a.in.model;
  out(fmt::format("model {}: {} layers, hidden {}, {} heads, {} kv heads, head_dim {}; batch {}, "
                  "{}-byte elements, {}{}\n",
                  m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, a.in.batch,
                  a.in.elem_bytes, a.in.training ? "training" : "inference",
                  a.in.dropout ? " with dropout" : ""));
  const fatools::Table table({{"seqlen", 8}, {"std/layer MiB", 13}, {"flash/layer MiB", 15},
                              {"std model GiB", 13}, {"flash model GiB", 15}, {"ratio", 7}});
  out(table.header());
  Json j{{"model",
          {{"name", m.name}, {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads},
           {"kv_heads", m.kv_heads}, {"head_dim", m.head_dim}}},
         {"batch", a.in.batch},
         {"elem_bytes", a.in.elem_bytes},
         {"training", a.in.training},
         {"rows", Json::array()}};
  for (int64_t s : a.seqlens) {
    PlanInput in = a.in;
    in.seqlen = s;
    const PlanResult r = plan(in);
    out(table.row({std::to_string(s), sig(r.standard.per_layer() / kMiB), sig(r.flash.per_layer() / kMiB),
                   sig(r.standard_model / kGiB), sig(r.flash_model / kGiB),
                   fatools::times(r.standard_model / r.flash_model)}));
    // Byte counts are whole numbers, written as integers.
    j["rows"].push_back({{"seqlen", s},
                         {"standard_layer_kept", int64_t(r.standard.kept)},
                         {"standard_layer_transient", int64_t(r.standard.transient)},
                         {"flash_layer_kept", int64_t(r.flash.kept)},
                         {"flash_layer_transient", int64_t(r.flash.transient)},
                         {"standard_model", int64_t(r.standard_model)},
                         {"flash_model", int64_t(r.flash_model)}});
  }
  if (a.memory_gib > 0) {
    const double budget = a.memory_gib * kGiB;
    const int64_t s_std = max_seqlen(a.in, budget, false), s_flash = max_seqlen(a.in, budget, true);
    out(fmt::format("largest seqlen (multiple of 128) within {} GiB: standard {}, flash {}\n",
                    sig(a.memory_gib), s_std, s_flash));
    j["memory_gib"] = a.memory_gib;
    j["max_seqlen_standard"] = s_std;
    j["max_seqlen_flash"] = s_flash;
  }
  if (!a.json.empty()) write_file(a.json, j.dump(1) + "\n");
  return 0;
}

}  // namespace fabench
