#include "record.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace fabench {
namespace {

using Json = nlohmann::ordered_json;  // keys in the schema's order

constexpr double kBackwardFlopRatio = 2.5;  // five GEMMs against the forward's two
constexpr double kFwdBwdFlopRatio = 3.5;    // forward + backward

Json row_json(const Row& r) {
  Json j{{"op", r.op},         {"dtype", r.dtype},   {"d", r.d},     {"causal", r.causal},
         {"b", r.b},           {"h", r.h},           {"h_kv", r.h_kv}, {"s_q", r.s_q},
         {"s_k", r.s_k},       {"backend", r.backend}};
  j["kernel"] = r.kernel.empty() ? Json() : Json(r.kernel);
  j["device"] = r.device;
  j["status"] = r.status;
  // A row that did not run has null figures.
  j["ms"] = r.ran() ? Json(r.ms) : Json();
  j["tflops"] = r.ran() ? Json(r.tflops) : Json();
  j["peak_bytes"] = r.ran() ? Json(r.peak_bytes) : Json();
  j["input_bytes"] = r.ran() ? Json(r.input_bytes) : Json();
  return j;
}

Json positive_or_null(double x) { return x > 0 ? Json(x) : Json(); }

// num / den of a byte count of two rows; 0 unless both ran.
double ratio(const Row* num, const Row* den, int64_t (*bytes)(const Row&)) {
  return num && den && num->ran() && den->ran() && bytes(*den) > 0
             ? double(bytes(*num)) / double(bytes(*den))
             : 0;
}

}  // namespace

const char* const kCsvHeader =
    "op,dtype,d,causal,b,h,h_kv,s_q,s_k,backend,kernel,device,status,ms,tflops,peak_bytes,"
    "input_bytes";

double CompareLine::speedup() const {
  return flash && vanilla && flash->ran() && vanilla->ran() && flash->ms > 0 ? vanilla->ms / flash->ms : 0;
}
double CompareLine::memory_ratio() const {
  return ratio(vanilla, flash, [](const Row& r) { return r.call_bytes(); });
}
double CompareLine::peak_ratio() const {
  return ratio(vanilla, flash, [](const Row& r) { return r.peak_bytes; });
}

double row_flops(const Row& r) {
  double f = 4.0 * double(r.b) * double(r.h) * double(r.s_q) * double(r.s_k) * double(r.d);
  if (r.causal) f /= 2;
  if (r.op == "bwd") f *= kBackwardFlopRatio;
  if (r.op == "fwdbwd") f *= kFwdBwdFlopRatio;
  return f;
}

std::string to_json(const Record& rec) {
  Json j{{"gpu", rec.gpu},         {"driver", rec.driver},   {"cuda", rec.cuda},
         {"torch", nullptr},       {"cudnn", nullptr},       {"commit", rec.commit},
         {"command", rec.command}, {"date", rec.date},       {"library", rec.library},
         {"ceilings", Json::object()}, {"rows", Json::array()}};
  for (const Row& r : rec.rows) j["rows"].push_back(row_json(r));
  if (!rec.compare.empty()) {
    Json& lines = j["compare"] = Json::array();
    for (const CompareLine& c : rec.compare)
      lines.push_back({{"s", c.s},
                       {"op", c.op},
                       {"vanilla_status", c.vanilla ? c.vanilla->status : "missing"},
                       {"flash_status", c.flash ? c.flash->status : "missing"},
                       {"speedup", positive_or_null(c.speedup())},
                       {"memory_ratio", positive_or_null(c.memory_ratio())},
                       {"peak_ratio", positive_or_null(c.peak_ratio())}});
  }
  return j.dump(1) + "\n";
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string to_csv(const std::vector<Row>& rows) {
  // Numbers as JSON writes them (the shortest text that reads back the same double).
  auto number = [](double x) { return Json(x).dump(); };
  std::string out = std::string(kCsvHeader) + "\r\n";
  for (const Row& r : rows) {
    const std::vector<std::string> fields{
        r.op, r.dtype, std::to_string(r.d), r.causal ? "1" : "0", std::to_string(r.b),
        std::to_string(r.h), std::to_string(r.h_kv), std::to_string(r.s_q), std::to_string(r.s_k),
        r.backend, r.kernel, r.device, r.status,
        r.ran() ? number(r.ms) : "", r.ran() ? number(r.tflops) : "",
        r.ran() ? std::to_string(r.peak_bytes) : "", r.ran() ? std::to_string(r.input_bytes) : ""};
    for (size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
    out += "\r\n";
  }
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open '" + path + "' for writing");
  f << text;
  if (!f) throw std::runtime_error("failed writing '" + path + "'");
}

}  // namespace fabench
