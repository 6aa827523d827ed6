// fa-bench arch: the support matrix and the modeled time / TFLOP/s / memory of standard against
// flash attention per GPU (arch_model.h; docs/architectures.md). Pure arithmetic: nothing runs.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

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
      return fam && fam->status == "planned" ? f + " (planned)" : f;
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
