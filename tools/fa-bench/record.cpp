#include "record.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fabench {
namespace {

constexpr double kBackwardFlopRatio = 2.5;     // five GEMMs against the forward's two
constexpr double kFwdBwdFlopRatio = 3.5;       // forward + backward

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string row_json(const Row& r) {
  std::ostringstream os;
  os << "{\"op\": " << quote(r.op) << ", \"dtype\": " << quote(r.dtype) << ", \"d\": " << r.d
     << ", \"causal\": " << (r.causal ? "true" : "false") << ", \"b\": " << r.b << ", \"h\": " << r.h
     << ", \"h_kv\": " << r.h_kv << ", \"s_q\": " << r.s_q << ", \"s_k\": " << r.s_k
     << ", \"backend\": " << quote(r.backend)
     << ", \"kernel\": " << (r.kernel.empty() ? "null" : quote(r.kernel))
     << ", \"device\": " << quote(r.device)
     << ", \"status\": " << quote(r.status);
  if (r.ran())
    os << ", \"ms\": " << number(r.ms) << ", \"tflops\": " << number(r.tflops)
       << ", \"peak_bytes\": " << r.peak_bytes << ", \"input_bytes\": " << r.input_bytes;
  else
    os << ", \"ms\": null, \"tflops\": null, \"peak_bytes\": null, \"input_bytes\": null";
  os << "}";
  return os.str();
}

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
  std::ostringstream os;
  os << "{\n \"gpu\": " << quote(rec.gpu) << ",\n \"driver\": " << quote(rec.driver)
     << ",\n \"cuda\": " << quote(rec.cuda) << ",\n \"torch\": null,\n \"cudnn\": null"
     << ",\n \"commit\": " << quote(rec.commit) << ",\n \"command\": " << quote(rec.command)
     << ",\n \"date\": " << quote(rec.date) << ",\n \"library\": " << quote(rec.library)
     << ",\n \"ceilings\": {},\n \"rows\": [";
  for (size_t i = 0; i < rec.rows.size(); ++i)
    os << (i ? ",\n  " : "\n  ") << row_json(rec.rows[i]);
  os << "\n ]";
  if (!rec.compare.empty()) {
    os << ",\n \"compare\": [";
    for (size_t i = 0; i < rec.compare.size(); ++i) {
      const CompareLine& c = rec.compare[i];
      os << (i ? ",\n  " : "\n  ") << "{\"s\": " << c.s << ", \"op\": " << quote(c.op)
         << ", \"vanilla_status\": " << quote(c.vanilla ? c.vanilla->status : "missing")
         << ", \"flash_status\": " << quote(c.flash ? c.flash->status : "missing")
         << ", \"speedup\": " << (c.speedup() > 0 ? number(c.speedup()) : "null")
         << ", \"memory_ratio\": " << (c.memory_ratio() > 0 ? number(c.memory_ratio()) : "null")
         << ", \"peak_ratio\": " << (c.peak_ratio() > 0 ? number(c.peak_ratio()) : "null")
         << "}";
    }
    os << "\n ]";
  }
  os << "\n}\n";
  return os.str();
}

std::string to_csv(const std::vector<Row>& rows) {
  std::ostringstream os;
  os << kCsvHeader << "\n";
  for (const Row& r : rows) {
    std::string status = r.status;  // CSV: no commas or quotes inside the field
    for (char& c : status)
      if (c == ',' || c == '"' || c == '\n') c = ';';
    os << r.op << ',' << r.dtype << ',' << r.d << ',' << (r.causal ? 1 : 0) << ',' << r.b << ','
       << r.h << ',' << r.h_kv << ',' << r.s_q << ',' << r.s_k << ',' << r.backend << ','
       << r.kernel << ',' << r.device << ',' << status << ',';
    if (r.ran())
      os << number(r.ms) << ',' << number(r.tflops) << ',' << r.peak_bytes << ',' << r.input_bytes;
    else
      os << ",,,";
    os << "\n";
  }
  return os.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open '" + path + "' for writing");
  f << text;
  if (!f) throw std::runtime_error("failed writing '" + path + "'");
}

}  // namespace fabench
