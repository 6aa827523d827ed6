// fa-bench arch: the support matrix and the modeled time / TFLOP/s / memory of standard against
// flash attention per GPU (arch_model.h; docs/architectures.md), pure arithmetic; with --measure
// also the shape timed on this machine (measure.h, as `run` times it) beside the model's figure
// for this machine's GPU, and with --chart an SVG of the TFLOP/s (arch_chart.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "arch_chart.h"
#include "arch_model.h"
#include "commands.h"
#include "text.h"  // tools/common: fatools::sig, Table

namespace fabench {
namespace {

using Json = nlohmann::ordered_json;
using fatools::sig;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGB = 1e9;  // datasheet memory sizes are decimal

void out(const std::string& text) { std::fputs(text.c_str(), stdout); }

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// A pass's family on a GPU; fwdbwd names both where they differ ("sm90+sm80").
std::string flash_family(const ArchModel& am, const ArchGpu& g, const std::string& op) {
  if (op != "fwdbwd") return am.default_family(g, op);
  const std::string f = am.default_family(g, "fwd"), b = am.default_family(g, "bwd");
  if (f.empty() || b.empty()) return "";
  return f == b ? f : f + "+" + b;
}

struct ArchRow {
  const ArchGpu* gpu = nullptr;
  std::string op, dtype, flash_family;
  std::optional<double> standard_ms, flash_ms;  // all layers
  double flops = 0;                              // all layers
  CallMemory memory;                             // one layer's call
  std::optional<double> tflops(const std::optional<double>& ms) const {
    if (!ms || *ms <= 0) return std::nullopt;
    return flops / *ms * 1e-9;
  }
};

Json number(const std::optional<double>& x) { return x ? Json(*x) : Json(); }
std::string text(const std::optional<double>& x) { return x ? sig(*x) : "-"; }

const char* const kArchCsvHeader =
    "gpu,arch,op,dtype,layers,b,h,h_kv,s_q,s_k,d,causal,standard_ms,standard_tflops,"
    "standard_bytes,flash_family,flash_ms,flash_tflops,flash_bytes,input_bytes,speedup,"
    "memory_ratio,memory_gb,modeled";

// --measure: one layer's call timed here, standard and flash, for each pass.
struct MeasuredRow {
  std::string op, dtype;
  Row standard, flash;
  double layers = 1;
  std::optional<double> modeled_flash_ms;  // the model's, for this machine's GPU (all layers)
  std::optional<double> ms(const Row& r) const {
    if (!r.ran()) return std::nullopt;
    return r.ms * layers;
  }
  std::optional<double> model_error() const {  // modeled / measured - 1
    const std::optional<double> m = ms(flash);
    if (!m || !modeled_flash_ms || *m <= 0) return std::nullopt;
    return *modeled_flash_ms / *m - 1;
  }
};

std::string status_note(const Row& r, const char* what) {
  return r.ran() ? std::string() : fmt::format("{}: {}", what, r.status);
}

}  // namespace

int cmd_arch(const ArchArgs& a) {
  const ArchModel& am = arch_model();
  std::vector<const ArchGpu*> gpus;
  for (const ArchGpu& g : am.gpus)
    if (a.gpus.empty() || std::find(a.gpus.begin(), a.gpus.end(), g.key) != a.gpus.end())
      gpus.push_back(&g);

  // The support matrix.
  Json support = Json::array();
  out("Support matrix (which of our kernel families each GPU runs; the library's choice per pass):\n");
  const fatools::Table st({{"gpu", 10, true}, {"name", 13, true}, {"arch", 4, true},
                           {"families", 33, true}, {"forward", 14, true}, {"backward", 14, true},
                           {"decode", 0, true}});
  out(st.header());
  for (const ArchGpu* g : gpus) {
    const std::vector<std::string> fams = am.families_on(g->arch);
    auto pass = [&](const char* p) {
      const std::string f = am.default_family(*g, p);
      const ArchFamily* fam = am.family(f);
      return fam && fam->planned(p) ? f + " (planned)" : f;
    };
    out(st.row({g->key, g->name, g->arch, fmt::format("{}", fmt::join(fams, ", ")),
                or_dash(pass("fwd")), or_dash(pass("bwd")), or_dash(pass("decode"))}));
    support.push_back({{"gpu", g->key}, {"name", g->name}, {"arch", g->arch}, {"families", fams},
                       {"fwd", pass("fwd")}, {"bwd", pass("bwd")}, {"decode", pass("decode")}});
  }

  // The modeled rows.
  const AttnShape& s = a.shape;
  const double layers = double(a.layers);
  out(fmt::format("\nModeled, not measured (bench/arch_model.json: calibrated on H200 "
                  "measurements; other GPUs by transfer, error unknown): {}b {}, heads {} / kv {}, "
                  "d {}, seqlen {}{}, {}{}\n",
                  a.model.empty() ? "" : a.model + ", ", s.b, s.h, s.kv_heads(), s.d, s.s_q,
                  s.keys() != s.s_q ? fmt::format(" x {} keys", s.keys()) : "",
                  s.causal ? "causal" : "full",
                  a.layers > 1 ? fmt::format("; times for {} layers, memory per layer call "
                                             "(beyond its inputs)", a.layers)
                               : "; memory beyond the call's inputs"));
  const fatools::Table mt({{"op", 6, true}, {"gpu", 10, true}, {"dtype", 5, true},
                           {"std ms", 9}, {"std TFLOP/s", 11}, {"std MiB", 9},
                           {"flash", 9, true}, {"flash ms", 9}, {"flash TFLOP/s", 13},
                           {"flash MiB", 9}, {"speed-up", 8}, {"mem ratio", 9}, {"note", 0, true}});
  out(mt.header());
  std::vector<ArchRow> rows;
  for (const std::string& op : a.ops)
    for (const ArchGpu* g : gpus) {
      ArchRow r;
      r.gpu = g;
      r.op = op;
      AttnShape shape = s;
      if (shape.dtype.empty()) shape.dtype = grid_dtype(*g);
      r.dtype = shape.dtype;
      r.flash_family = flash_family(am, *g, op);
      auto scaled = [&](std::optional<double> ms) -> std::optional<double> {
        if (ms) *ms *= layers;
        return ms;
      };
      r.standard_ms = scaled(model_ms(am, *g, "vanilla", op, shape));
      r.flash_ms = scaled(flash_ms(am, *g, op, shape));
      r.flops = counted_flops(op, shape) * layers;
      r.memory = memory_bytes(am, op, shape);
      std::string note;
      const double capacity = g->memory_gb * kGB;
      if (r.memory.inputs + r.memory.standard > capacity) note = "standard does not fit";
      if (r.memory.inputs + r.memory.flash > capacity) note = "neither fits";
      if (!r.flash_ms) note += std::string(note.empty() ? "" : "; ") + "no flash " + op + " here";
      const double speedup = r.standard_ms && r.flash_ms ? *r.standard_ms / *r.flash_ms : 0;
      out(mt.row({op, g->key, r.dtype, text(r.standard_ms), text(r.tflops(r.standard_ms)),
                  fatools::mib(r.memory.standard), or_dash(r.flash_family), text(r.flash_ms),
                  text(r.tflops(r.flash_ms)), fatools::mib(r.memory.flash),
                  fatools::times(speedup), fatools::times(r.memory.standard / r.memory.flash),
                  note}));
      rows.push_back(r);
    }

  // This machine: the shape timed as `fa-bench run` times it (one layer's call; a model's
  // layers are the same call repeated, so its time is the call's times the layers).
  std::vector<MeasuredRow> measured;
  std::string device;
  const ArchGpu* here = nullptr;
  if (a.measure) {
    const Timing& t = a.timing;
    device = t.cuda ? machine(true).gpu : "cpu";
    here = t.cuda ? gpu_for_device(am, device) : nullptr;
    out(fmt::format("\nMeasured on this machine ({}{}): one layer's call{}, median of {} calls "
                    "after {} warm-up; model error = modeled / measured - 1 (flash)\n",
                    device, here ? fmt::format(", the model's {}", here->key) : "",
                    a.layers > 1 ? fmt::format(" times {} layers", a.layers) : "", t.repeats,
                    t.warmup));
    const fatools::Table meas({{"op", 6, true}, {"dtype", 5, true}, {"std ms", 9},
                               {"std TFLOP/s", 11}, {"std MiB", 9}, {"flash", 11, true},
                               {"flash ms", 9}, {"flash TFLOP/s", 13}, {"flash MiB", 9},
                               {"speed-up", 8}, {"modeled ms", 10}, {"model error", 11},
                               {"note", 0, true}});
    out(meas.header());
    for (const std::string& op : a.ops) {
      MeasuredRow m;
      m.op = op;
      m.layers = layers;
      m.dtype = !s.dtype.empty() ? s.dtype : here ? grid_dtype(*here) : t.cuda ? "bf16" : "fp32";
      auto cell = [&](const char* backend) {
        Config c;
        c.backend = backend;
        c.op = op;
        c.dtype = dtype_from_name(m.dtype);
        c.b = s.b, c.h = s.h, c.h_kv = s.kv_heads(), c.s_q = s.s_q, c.s_k = s.keys(), c.d = s.d;
        c.causal = s.causal;
        c.cuda = t.cuda;
        c.warmup = t.warmup, c.repeats = t.repeats, c.warmup_ms = t.warmup_ms;
        return measure(c);
      };
      m.flash = cell("flashattn");
      m.standard = cell("vanilla");
      if (here) {
        AttnShape shape = s;
        shape.dtype = m.dtype;
        m.modeled_flash_ms = flash_ms(am, *here, op, shape);
        if (m.modeled_flash_ms) *m.modeled_flash_ms *= layers;
      }
      const double flops = counted_flops(op, s) * layers;
      auto tflops = [&](const std::optional<double>& ms) -> std::optional<double> {
        if (!ms || *ms <= 0) return std::nullopt;
        return flops / *ms * 1e-9;
      };
      auto bytes = [](const Row& r) {
        return r.ran() ? fatools::mib(double(r.call_bytes())) : std::string("-");
      };
      const std::optional<double> std_ms = m.ms(m.standard), fl_ms = m.ms(m.flash);
      std::string note = status_note(m.standard, "standard");
      const std::string fnote = status_note(m.flash, "flash");
      if (!fnote.empty()) note += (note.empty() ? "" : "; ") + fnote;
      const std::optional<double> err = m.model_error();
      out(meas.row({op, m.dtype, text(std_ms), text(tflops(std_ms)), bytes(m.standard),
                    or_dash(m.flash.kernel), text(fl_ms), text(tflops(fl_ms)), bytes(m.flash),
                    std_ms && fl_ms ? fatools::times(*std_ms / *fl_ms) : "-",
                    text(m.modeled_flash_ms),
                    err ? fmt::format("{:+.1f}%", 100 * *err) : "-", note}));
      measured.push_back(m);
    }
  }

  if (!a.chart.empty()) {
    std::vector<ChartGroup> groups;
    for (const ArchRow& r : rows)
      groups.push_back({r.op + " " + r.gpu->key,
                        {{"standard (modeled)", r.tflops(r.standard_ms).value_or(0)},
                         {"flash (modeled)", r.tflops(r.flash_ms).value_or(0)}}});
    for (const MeasuredRow& m : measured) {
      const double flops = counted_flops(m.op, s) * m.layers;
      auto tf = [&](const std::optional<double>& ms) { return ms && *ms > 0 ? flops / *ms * 1e-9 : 0.0; };
      groups.push_back({m.op + " here (" + device + ")",
                        {{"standard (measured here)", tf(m.ms(m.standard))},
                         {"flash (measured here)", tf(m.ms(m.flash))}}});
    }
    const std::string title = fmt::format(
        "fa-bench arch: {}b {}, heads {} / kv {}, d {}, seqlen {}, {} (modeled{})",
        a.model.empty() ? "" : a.model + ", ", s.b, s.h, s.kv_heads(), s.d, s.s_q,
        s.causal ? "causal" : "full", measured.empty() ? "" : "; measured here where so labelled");
    write_file(a.chart, arch_chart_svg(title, "TFLOP/s (FLOPs as shared/BENCH.md counts them)", groups));
  }

  if (!a.json.empty()) {
    Json j{{"modeled", true},
           {"model", "bench/arch_model.json (compiled in); bench/arch_model.py computes the same"},
           {"command", a.command},
           {"shape",
            {{"model", a.model.empty() ? Json() : Json(a.model)}, {"layers", a.layers},
             {"b", s.b}, {"h", s.h}, {"h_kv", s.kv_heads()}, {"s_q", s.s_q}, {"s_k", s.keys()},
             {"d", s.d}, {"causal", s.causal}}},
           {"support", support},
           {"rows", Json::array()}};
    for (const ArchRow& r : rows) {
      const double speedup = r.standard_ms && r.flash_ms ? *r.standard_ms / *r.flash_ms : 0;
      j["rows"].push_back({{"gpu", r.gpu->key}, {"name", r.gpu->name}, {"arch", r.gpu->arch},
                           {"op", r.op}, {"dtype", r.dtype}, {"layers", a.layers}, {"b", s.b},
                           {"h", s.h}, {"h_kv", s.kv_heads()}, {"s_q", s.s_q}, {"s_k", s.keys()},
                           {"d", s.d}, {"causal", s.causal}, {"standard_ms", number(r.standard_ms)},
                           {"standard_tflops", number(r.tflops(r.standard_ms))},
                           {"standard_bytes", r.memory.standard},
                           {"flash_family", r.flash_family.empty() ? Json() : Json(r.flash_family)},
                           {"flash_ms", number(r.flash_ms)},
                           {"flash_tflops", number(r.tflops(r.flash_ms))},
                           {"flash_bytes", r.memory.flash}, {"input_bytes", r.memory.inputs},
                           {"speedup", speedup > 0 ? Json(speedup) : Json()},
                           {"memory_ratio", r.memory.standard / r.memory.flash},
                           {"memory_gb", r.gpu->memory_gb}, {"modeled", true}});
    }
    if (a.measure) {
      j["measured"] = {{"device", device}, {"gpu", here ? Json(here->key) : Json()},
                       {"repeats", a.timing.repeats}, {"rows", Json::array()}};
      for (const MeasuredRow& m : measured) {
        auto ms = [&](const Row& r) { return number(m.ms(r)); };
        j["measured"]["rows"].push_back(
            {{"op", m.op}, {"dtype", m.dtype}, {"layers", a.layers},
             {"standard_ms", ms(m.standard)}, {"standard_status", m.standard.status},
             {"standard_bytes", m.standard.ran() ? Json(m.standard.call_bytes()) : Json()},
             {"flash_kernel", m.flash.kernel.empty() ? Json() : Json(m.flash.kernel)},
             {"flash_ms", ms(m.flash)}, {"flash_status", m.flash.status},
             {"flash_bytes", m.flash.ran() ? Json(m.flash.call_bytes()) : Json()},
             {"modeled_flash_ms", number(m.modeled_flash_ms)},
             {"model_error", number(m.model_error())}, {"modeled", false}});
      }
    }
    write_file(a.json, j.dump(1) + "\n");
  }
  if (!a.csv.empty()) {
    auto num = [](const std::optional<double>& x) { return x ? Json(*x).dump() : std::string(); };
    std::string csv = std::string(kArchCsvHeader) + "\r\n";
    for (const ArchRow& r : rows) {
      const double speedup = r.standard_ms && r.flash_ms ? *r.standard_ms / *r.flash_ms : 0;
      const std::vector<std::string> f{
          r.gpu->key, r.gpu->arch, r.op, r.dtype, std::to_string(a.layers), std::to_string(s.b),
          std::to_string(s.h), std::to_string(s.kv_heads()), std::to_string(s.s_q),
          std::to_string(s.keys()), std::to_string(s.d), s.causal ? "1" : "0",
          num(r.standard_ms), num(r.tflops(r.standard_ms)), Json(r.memory.standard).dump(),
          r.flash_family, num(r.flash_ms), num(r.tflops(r.flash_ms)), Json(r.memory.flash).dump(),
          Json(r.memory.inputs).dump(), speedup > 0 ? Json(speedup).dump() : "",
          Json(r.memory.standard / r.memory.flash).dump(), Json(r.gpu->memory_gb).dump(), "1"};
      for (size_t i = 0; i < f.size(); ++i) csv += (i ? "," : "") + csv_field(f[i]);
      csv += "\r\n";
    }
    write_file(a.csv, csv);
  }
  return 0;
}

}  // namespace fabench
