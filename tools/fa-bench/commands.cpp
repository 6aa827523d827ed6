#include "commands.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace fabench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

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

void print_header() {
  std::printf("%-7s %-5s %4s %-6s %5s %4s %4s %7s %7s %-9s %-13s %10s %9s %12s %12s  %s\n",
              "op", "dtype", "d", "causal", "b", "h", "h_kv", "s_q", "s_k", "backend", "kernel",
              "ms", "TFLOP/s", "peak MiB", "call MiB", "status");
}

void print_row(const Row& r) {
  std::printf("%-7s %-5s %4lld %-6s %5lld %4lld %4lld %7lld %7lld %-9s %-13s ", r.op.c_str(),
              r.dtype.c_str(), (long long)r.d, r.causal ? "yes" : "no", (long long)r.b,
              (long long)r.h, (long long)r.h_kv, (long long)r.s_q, (long long)r.s_k,
              r.backend.c_str(), r.kernel.empty() ? "-" : r.kernel.c_str());
  if (r.ran())
    std::printf("%10.3f %9.2f %12.1f %12.1f  ok\n", r.ms, r.tflops, double(r.peak_bytes) / kMiB,
                double(r.call_bytes()) / kMiB);
  else
    std::printf("%10s %9s %12s %12s  %s\n", "-", "-", "-", "-", r.status.c_str());
  std::fflush(stdout);
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

void progress(size_t i, size_t n, const Row& r) {
  std::fprintf(stderr, "[%zu/%zu] %s %s d%lld %s s%lld %s (%s): %s\n", i, n, r.dtype.c_str(),
               r.op.c_str(), (long long)r.d, r.causal ? "causal" : "full", (long long)r.s_q,
               r.backend.c_str(), r.kernel.empty() ? "-" : r.kernel.c_str(),
               r.ran() ? (std::to_string(r.ms) + " ms, " + std::to_string(r.tflops) + " TFLOP/s").c_str()
                       : r.status.c_str());
}

// The kernel families a backend's rows ran, each once in order of appearance ("-" for none):
// a compare table's header names them.
std::string families(const std::vector<Row>& rows, const std::string& backend) {
  std::vector<std::string> seen;
  for (const Row& r : rows)
    if (r.backend == backend && !r.kernel.empty() &&
        std::find(seen.begin(), seen.end(), r.kernel) == seen.end())
      seen.push_back(r.kernel);
  std::string out;
  for (const std::string& k : seen) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "-" : out;
}

}  // namespace

int cmd_run(const RunArgs& a, const Timing& t, const Output& o) {
  Record rec = new_record(t, o);
  print_header();
  for (const std::string& op : a.ops)
    for (const std::string& be : a.backends) {
      rec.rows.push_back(measure(config(t, be, op, a.dtype, a.b, a.h, a.h_kv ? a.h_kv : a.h, a.s_q,
                                        a.s_k ? a.s_k : a.s_q, a.d, a.causal)));
      print_row(rec.rows.back());
    }
  save(rec, o);
  return 0;
}

int cmd_sweep(const SweepArgs& a, const Timing& t, const Output& o) {
  Record rec = new_record(t, o);
  std::vector<Config> grid;
  for (fa_dtype dt : a.dtypes)
    for (int64_t d : a.dims)
      for (bool causal : a.causal)
        for (int64_t s : a.seqlens)
          for (const std::string& op : a.ops)
            for (const std::string& be : a.backends) {
              const int64_t h = a.hidden / d, b = std::max<int64_t>(1, a.tokens / s);
              grid.push_back(config(t, be, op, dt, b, h, h, s, s, d, causal));
            }
  print_header();
  for (size_t i = 0; i < grid.size(); ++i) {
    rec.rows.push_back(measure(grid[i]));
    progress(i + 1, grid.size(), rec.rows.back());
    print_row(rec.rows.back());
  }
  save(rec, o);
  return 0;
}

int cmd_compare(const CompareArgs& a, const Timing& t, const Output& o) {
  Record rec = new_record(t, o);
  rec.rows.reserve(a.ops.size() * a.seqlens.size() * 2);  // CompareLine points into rows
  for (const std::string& op : a.ops)
    for (int64_t s : a.seqlens) {
      CompareLine line;
      line.s = s;
      line.op = op;
      for (const char* be : {"flashattn", "vanilla"}) {
        rec.rows.push_back(measure(config(t, be, op, a.dtype, a.b, a.h, a.h, s, s, a.d, a.causal)));
        progress(rec.rows.size(), a.ops.size() * a.seqlens.size() * 2, rec.rows.back());
        (std::string(be) == "vanilla" ? line.vanilla : line.flash) = &rec.rows.back();
      }
      rec.compare.push_back(line);
    }
  std::printf("standard (vanilla) vs FlashAttention: %s, b=%lld, h=%lld, d=%lld, %s, %s; "
              "kernels: vanilla %s, flash %s\n",
              dtype_name(a.dtype), (long long)a.b, (long long)a.h, (long long)a.d,
              a.causal ? "causal" : "non-causal", t.cuda ? "GPU" : "CPU",
              families(rec.rows, "vanilla").c_str(), families(rec.rows, "flashattn").c_str());
  // Memory: what each call needs beyond its inputs (outputs, LSE, workspace; FlashAttention's
  // convention), and the ratio with the inputs counted too.
  std::printf("%-7s %7s %12s %12s %9s %14s %14s %9s %10s  %s\n", "op", "seqlen", "vanilla ms",
              "flash ms", "speed-up", "vanilla MiB", "flash MiB", "mem ratio", "peak ratio",
              "note");
  for (const CompareLine& c : rec.compare) {
    std::printf("%-7s %7lld ", c.op.c_str(), (long long)c.s);
    auto ms = [](const Row* r) { return r->ran() ? std::to_string(r->ms).substr(0, 10) : std::string("-"); };
    auto mib = [](const Row* r) {
      return r->ran() ? std::to_string(double(r->call_bytes()) / kMiB).substr(0, 12) : std::string("-");
    };
    std::printf("%12s %12s ", ms(c.vanilla).c_str(), ms(c.flash).c_str());
    c.speedup() > 0 ? std::printf("%8.2fx ", c.speedup()) : std::printf("%9s ", "-");
    std::printf("%14s %14s ", mib(c.vanilla).c_str(), mib(c.flash).c_str());
    c.memory_ratio() > 0 ? std::printf("%8.1fx ", c.memory_ratio()) : std::printf("%9s ", "-");
    c.peak_ratio() > 0 ? std::printf("%9.1fx ", c.peak_ratio()) : std::printf("%10s ", "-");
    std::string note;
    if (!c.vanilla->ran()) note += "vanilla " + c.vanilla->status;
    if (!c.flash->ran()) note += (note.empty() ? "" : "; ") + std::string("flash ") + c.flash->status;
    std::printf(" %s\n", note.c_str());
  }
  save(rec, o);
  return 0;
}

void list_models() {
  std::printf("%-12s %7s %7s %6s %9s %9s\n", "model", "layers", "hidden", "heads", "kv_heads",
              "head_dim");
  for (const ModelShape& m : model_presets())
    std::printf("%-12s %7lld %7lld %6lld %9lld %9lld\n", m.name.c_str(), (long long)m.layers,
                (long long)m.hidden, (long long)m.heads, (long long)m.kv_heads, (long long)m.head_dim);
}

int cmd_plan(const PlanArgs& a) {
  const ModelShape& m = a.in.model;
  std::printf("model %s: %lld layers, hidden %lld, %lld heads, %lld kv heads, head_dim %lld; "
              "batch %lld, %lld-byte elements, %s%s\n",
              m.name.c_str(), (long long)m.layers, (long long)m.hidden, (long long)m.heads,
              (long long)m.kv_heads, (long long)m.head_dim, (long long)a.in.batch,
              (long long)a.in.elem_bytes, a.in.training ? "training" : "inference",
              a.in.dropout ? " with dropout" : "");
  std::printf("%8s %14s %14s %14s %14s %10s\n", "seqlen", "std/layer MiB", "flash/layer MiB",
              "std model GiB", "flash model GiB", "ratio");
  std::string json = "{\"model\": {\"name\": \"" + m.name + "\", \"layers\": " +
                     std::to_string(m.layers) + ", \"hidden\": " + std::to_string(m.hidden) +
                     ", \"heads\": " + std::to_string(m.heads) + ", \"kv_heads\": " +
                     std::to_string(m.kv_heads) + ", \"head_dim\": " + std::to_string(m.head_dim) +
                     "}, \"batch\": " + std::to_string(a.in.batch) + ", \"elem_bytes\": " +
                     std::to_string(a.in.elem_bytes) + ", \"training\": " +
                     (a.in.training ? "true" : "false") + ", \"rows\": [";
  for (size_t i = 0; i < a.seqlens.size(); ++i) {
    PlanInput in = a.in;
    in.seqlen = a.seqlens[i];
    const PlanResult r = plan(in);
    std::printf("%8lld %14.1f %14.1f %14.2f %14.2f %9.1fx\n", (long long)in.seqlen,
                r.standard.per_layer() / kMiB, r.flash.per_layer() / kMiB,
                r.standard_model / kGiB, r.flash_model / kGiB, r.standard_model / r.flash_model);
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%s{\"seqlen\": %lld, \"standard_layer_kept\": %.0f, \"standard_layer_transient\": %.0f, "
                  "\"flash_layer_kept\": %.0f, \"flash_layer_transient\": %.0f, "
                  "\"standard_model\": %.0f, \"flash_model\": %.0f}",
                  i ? ", " : "", (long long)in.seqlen, r.standard.kept, r.standard.transient,
                  r.flash.kept, r.flash.transient, r.standard_model, r.flash_model);
    json += buf;
  }
  json += "]";
  if (a.memory_gib > 0) {
    const double budget = a.memory_gib * kGiB;
    const int64_t s_std = max_seqlen(a.in, budget, false), s_flash = max_seqlen(a.in, budget, true);
    std::printf("largest seqlen (multiple of 128) within %.1f GiB: standard %lld, flash %lld\n",
                a.memory_gib, (long long)s_std, (long long)s_flash);
    json += ", \"memory_gib\": " + std::to_string(a.memory_gib) + ", \"max_seqlen_standard\": " +
            std::to_string(s_std) + ", \"max_seqlen_flash\": " + std::to_string(s_flash);
  }
  json += "}\n";
  if (!a.json.empty()) write_file(a.json, json);
  return 0;
}

}  // namespace fabench
