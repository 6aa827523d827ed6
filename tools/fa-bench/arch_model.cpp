#include "arch_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "arch_model_json.h"

namespace fabench {
namespace {

using Json = nlohmann::ordered_json;  // the data file's order (families)

constexpr double kElemBytes = 2;     // the model is of bf16 / fp16 calls
constexpr double kLseBytes = 4;      // fp32 log-sum-exp per (batch, head, row)
constexpr double kScoreBytes = 4;    // vanilla's fp32 S (P written over it)
constexpr double kAccumBytes = 4;    // fp32 accumulators (flash dQ, vanilla dK / dV)

std::optional<double> number_or_none(const Json& j, const char* key) {
  const Json& v = j.at(key);
  if (v.is_null()) return std::nullopt;
  return v.get<double>();
}

bool has(const std::vector<std::string>& list, const std::string& x) {
  return std::find(list.begin(), list.end(), x) != list.end();
}

ArchParams params_of(const Json& j) {
  ArchParams p;
  if (j.contains("eta"))
    for (const auto& [d, v] : j.at("eta").items()) p.eta[std::stoll(d)] = v.get<double>();
  auto get = [&](const char* key, double& field) {
    if (j.contains(key)) field = j.at(key).get<double>();
  };
  get("alpha", p.alpha);
  get("c", p.c);
  get("m", p.m);
  get("eta_g", p.eta_g);
  get("eta_m", p.eta_m);
  get("kappa", p.kappa);
  get("head_ms", p.head_ms);
  get("eta_bw", p.eta_bw);
  get("t0_ms", p.t0_ms);
  return p;
}

// eta at head dim d: the fitted points, linear in between, clamped outside.
double head_dim_eta(const std::map<int64_t, double>& eta, int64_t d) {
  if (eta.empty()) throw std::runtime_error("arch model: a tiled family without eta");
  if (d <= eta.begin()->first) return eta.begin()->second;
  for (auto hi = std::next(eta.begin()); hi != eta.end(); ++hi) {
    const auto lo = std::prev(hi);
    if (d <= hi->first)
      return lo->second + (hi->second - lo->second) * double(d - lo->first) /
                              double(hi->first - lo->first);
  }
  return eta.rbegin()->second;
}

struct Tiles {
  int64_t visited = 0, diagonal = 0, query_tiles = 0, key_tiles = 0;
};

// The (query, key) tiles of one head a kernel visits (causal: bottom-right aligned, a diagonal
// tile computed whole and masked).
Tiles tile_counts(int64_t s_q, int64_t s_k, bool causal, int64_t tile) {
  Tiles t;
  t.query_tiles = (s_q + tile - 1) / tile;
  t.key_tiles = (s_k + tile - 1) / tile;
  if (!causal) {
    t.visited = t.query_tiles * t.key_tiles;
    return t;
  }
  for (int64_t i = 0; i < t.query_tiles; ++i) {
    const int64_t first = s_k - s_q + i * tile;
    const int64_t last = s_k - s_q + std::min(s_q, (i + 1) * tile) - 1;
    if (last < 0) continue;
    const int64_t through = std::min(t.key_tiles, last / tile + 1);
    const int64_t full = first >= 0 ? std::max<int64_t>(0, std::min(t.key_tiles, (first + 1) / tile)) : 0;
    t.visited += through;
    t.diagonal += through - full;
  }
  return t;
}

// Compulsory HBM traffic of a flash call: its inputs read and outputs written once.
double io_bytes(const std::string& op, const AttnShape& s) {
  const double b = double(s.b), h = double(s.h), d = double(s.d);
  const double q = b * h * double(s.s_q) * d * kElemBytes;
  const double kv = b * double(s.kv_heads()) * double(s.keys()) * d * kElemBytes;
  if (op == "fwd") return q + 2 * kv + q + b * h * double(s.s_q) * kLseBytes;
  return 3 * q + 2 * kv + 2 * kv + b * h * double(s.s_q) * (8 + 4 * d);
}

std::optional<double> ceiling(const ArchModel& am, const ArchGpu& g, const ArchFamily& f,
                              const std::string& dtype) {
  if (!has(f.archs, g.arch)) return std::nullopt;
  const std::optional<double> rate = dtype == "bf16" ? g.bf16 : g.fp16;
  if (!rate) return std::nullopt;
  if (f.inst == "mma" && g.arch == "sm90") return am.mma_sync_sm90;
  return rate;
}

}  // namespace

const ArchGpu* ArchModel::gpu(const std::string& key) const {
  for (const ArchGpu& g : gpus)
    if (g.key == key) return &g;
  return nullptr;
}

namespace {
std::vector<std::string> upper_words(const std::string& text) {
  std::vector<std::string> words(1);
  for (const char ch : text) {
    if (ch == ' ' || ch == '-' || ch == '_') {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back() += char(std::toupper(static_cast<unsigned char>(ch)));
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}
}  // namespace

const ArchGpu* gpu_for_device(const ArchModel& am, const std::string& device_name) {
  const std::vector<std::string> device = upper_words(device_name);
  const ArchGpu* best = nullptr;
  size_t best_words = 0;
  for (const ArchGpu& g : am.gpus) {
    std::vector<std::string> want = upper_words(g.name);
    want.erase(std::remove(want.begin(), want.end(), "SXM"), want.end());
    if (want.empty()) continue;
    const bool all = std::all_of(want.begin(), want.end(), [&](const std::string& w) {
      return std::find(device.begin(), device.end(), w) != device.end();
    });
    if (all && want.size() > best_words) best = &g, best_words = want.size();
  }
  return best;
}

bool ArchFamily::planned(const std::string& op) const {
  return status == "planned" || has(planned_ops, op);
}

const ArchFamily* ArchModel::family(const std::string& name) const {
  for (const ArchFamily& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

std::vector<std::string> ArchModel::families_on(const std::string& arch) const {
  std::vector<std::string> out{"cpu", "vanilla"};
  for (const ArchFamily& f : families)
    if ((f.status == "shipped" || f.status == "planned") && f.name != "vanilla" && has(f.archs, arch))
      out.push_back(f.name + (f.status == "planned" ? " (planned)" : ""));
  return out;
}

std::string ArchModel::default_family(const ArchGpu& g, const std::string& pass) const {
  const auto a = defaults.find(g.arch);
  if (a == defaults.end()) return "";
  const auto p = a->second.find(pass);
  return p == a->second.end() ? "" : p->second;
}

ArchModel parse_arch_model(const std::string& json_text) {
  ArchModel am;
  try {
    const Json j = Json::parse(json_text);
    am.tile = j.at("tile").get<int64_t>();
    am.mma_sync_sm90 = j.at("mma_sync_sm90_tflops").get<double>();
    am.cublas_workspace = j.at("cublas_workspace_bytes").get<double>();
    for (const Json& r : j.at("gpus")) {
      ArchGpu g;
      g.key = r.at("key").get<std::string>();
      g.name = r.at("name").get<std::string>();
      g.arch = r.at("arch").get<std::string>();
      g.sms = r.at("sms").get<double>();
      g.boost_mhz = r.at("boost_mhz").get<double>();
      g.fp16 = number_or_none(r, "fp16");
      g.bf16 = number_or_none(r, "bf16");
      g.fp8 = number_or_none(r, "fp8");
      g.fp16_acc16 = r.at("fp16_acc16").get<double>();
      g.mufu_t = r.at("mufu_t").get<double>();
      g.bandwidth_gbs = r.at("bandwidth_gbs").get<double>();
      g.smem_sm_kb = r.at("smem_sm_kb").get<double>();
      g.smem_block_kb = r.at("smem_block_kb").get<double>();
      g.l2_mb = r.at("l2_mb").get<double>();
      g.memory_gb = r.at("memory_gb").get<double>();
      am.gpus.push_back(g);
    }
    for (const auto& [name, r] : j.at("families").items()) {
      ArchFamily f;
      f.name = name;
      f.label = r.at("label").get<std::string>();
      f.inst = r.at("inst").get<std::string>();
      f.calib = r.at("calib").get<std::string>();
      f.status = r.at("status").get<std::string>();
      f.archs = r.at("archs").get<std::vector<std::string>>();
      f.ops = r.at("ops").get<std::vector<std::string>>();
      if (r.contains("planned_ops")) f.planned_ops = r.at("planned_ops").get<std::vector<std::string>>();
      am.families.push_back(f);
    }
    for (const auto& [arch, passes] : j.at("defaults").items())
      for (const auto& [pass, fam] : passes.items())
        if (!fam.is_null()) am.defaults[arch][pass] = fam.get<std::string>();
    for (const auto& [fam, ops] : j.at("params").items())
      for (const auto& [op, p] : ops.items()) am.params[{fam, op}] = params_of(p);
  } catch (const Json::exception& e) {
    throw std::runtime_error(std::string("bench/arch_model.json: ") + e.what());
  }
  return am;
}

const ArchModel& arch_model() {
  static const ArchModel am = parse_arch_model(kArchModelJson);
  return am;
}

std::string grid_dtype(const ArchGpu& g) { return g.bf16 ? "bf16" : "fp16"; }

double counted_flops(const std::string& op, const AttnShape& s) {
  double f = 4.0 * double(s.b) * double(s.h) * double(s.s_q) * double(s.keys()) * double(s.d);
  if (s.causal) f /= 2;
  if (op == "bwd") f *= 2.5;
  if (op == "fwdbwd") f *= 3.5;
  return f;
}

std::optional<double> model_ms(const ArchModel& am, const ArchGpu& g, const std::string& family,
                               const std::string& op, const AttnShape& s) {
  if (op == "fwdbwd") {
    const auto f = model_ms(am, g, family, "fwd", s), b = model_ms(am, g, family, "bwd", s);
    if (!f || !b) return std::nullopt;
    return *f + *b;
  }
  const ArchFamily* fam = am.family(family);
  if (!fam) throw std::runtime_error("arch model: no family '" + family + "'");
  const std::optional<double> peak = ceiling(am, g, *fam, s.dtype.empty() ? grid_dtype(g) : s.dtype);
  if (!peak || !has(fam->ops, op)) return std::nullopt;
  const auto pi = am.params.find({fam->calib, op});
  if (pi == am.params.end())
    throw std::runtime_error("arch model: no constants for " + fam->calib + " " + op);
  const ArchParams& p = pi->second;
  const double flops_per_elem = (op == "fwd" ? 4.0 : 10.0) * double(s.d);  // tensor FLOPs per score
  const double bw = g.bandwidth_gbs * 1e9;
  if (family == "vanilla") {
    const double elems = double(s.b) * double(s.h) * double(s.s_q) * double(s.keys());
    const double score_bytes = op == "fwd" ? 12 : 26;  // S fp32 written, read; P 16-bit (+ dP, dS)
    const double traffic = elems * score_bytes * (s.causal ? p.kappa : 1.0);
    return 1e3 * (elems * flops_per_elem / (*peak * 1e12 * p.eta_g) + traffic / (bw * p.eta_m)) +
           double(s.h) * p.head_ms;
  }
  const Tiles t = tile_counts(s.s_q, s.keys(), s.causal, am.tile);
  const double e = double(am.tile * am.tile);
  double t_tile = e * flops_per_elem / (*peak * 1e12) + p.alpha * e / (g.mufu_t * 1e12);
  t_tile /= head_dim_eta(p.eta, s.d);
  const double blocks = double(op == "fwd" ? t.query_tiles : t.key_tiles);
  const double time = double(s.b) * double(s.h) *
                      (double(t.visited) + p.c * blocks + p.m * double(t.diagonal)) * t_tile;
  return 1e3 * std::max(time, io_bytes(op, s) / bw);
}

std::optional<double> flash_ms(const ArchModel& am, const ArchGpu& g, const std::string& op,
                               const AttnShape& s) {
  if (op == "fwdbwd") {
    const auto f = flash_ms(am, g, "fwd", s), b = flash_ms(am, g, "bwd", s);
    if (!f || !b) return std::nullopt;
    return *f + *b;
  }
  const std::string fam = am.default_family(g, op);
  if (fam.empty()) return std::nullopt;
  return model_ms(am, g, fam, op, s);
}

CallMemory memory_bytes(const ArchModel& am, const std::string& op, const AttnShape& s) {
  const double b = double(s.b), h = double(s.h), d = double(s.d);
  const double q = b * h * double(s.s_q) * d * kElemBytes;
  const double kv = b * double(s.kv_heads()) * double(s.keys()) * d * kElemBytes;
  const double lse = b * h * double(s.s_q) * kLseBytes;
  const double scores = b * h * double(s.s_q) * double(s.keys()) * kScoreBytes;
  CallMemory m;
  if (op == "fwd") {
    m.inputs = q + 2 * kv;
    const double outputs = q + lse;
    m.standard = outputs + scores + am.cublas_workspace;
    m.flash = outputs;
  } else {  // bwd, and fwdbwd (the backward's, the larger)
    m.inputs = 2 * q + 2 * kv + q + lse;  // q k v o do lse
    const double outputs = q + 2 * kv;    // dq dk dv
    m.standard = outputs + 2 * scores + 2 * b * h * double(s.keys()) * d * kAccumBytes +
                 am.cublas_workspace;
    m.flash = outputs + b * h * double(s.s_q) * d * kAccumBytes + 2 * lse;
  }
  return m;
}

}  // namespace fabench
