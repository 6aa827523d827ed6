// fa-bench records: the rows of shared/BENCH.md's schema and their JSON (nlohmann-json) and CSV
// (RFC 4180) files.
//   {gpu, driver, cuda, torch, cudnn, commit, command, ceilings, rows: [{op, dtype, d, causal, b,
//    h, s_q, s_k, backend, ms, tflops, peak_bytes}, ...]}
// Rows also carry h_kv, device, kernel (the library's kernel family, fa_select_kernel), status
// ("ok", "oom: ...", "unsupported: ...") and input_bytes (the part of peak_bytes that the inputs
// q, k, v - and dout for a backward - took); a row that did not run has ms, tflops, peak_bytes and
// input_bytes null, and kernel null where the library refused the configuration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fabench {

struct Row {
  std::string op;       // fwd, bwd, fwdbwd
  std::string dtype;    // fp32, fp16, bf16
  int64_t d = 0, b = 0, h = 0, h_kv = 0, s_q = 0, s_k = 0;
  bool causal = false;
  std::string backend;  // flashattn, vanilla
  // The kernel family the timed passes ran (fa_select_kernel): "cpu-flash", "cuda-sm80", ...;
  // for fwdbwd "fwd+bwd" where the two passes' differ; "" where the library refused the call.
  std::string kernel;
  std::string device;   // cpu, cuda
  std::string status = "ok";
  double ms = 0, tflops = 0;
  int64_t peak_bytes = 0;   // inputs + outputs + workspace, as the device counted them
  int64_t input_bytes = 0;  // of which the inputs (q, k, v; dout for a backward)
  // What the attention call itself needs beyond its inputs: outputs, LSE, gradients, workspace.
  // FlashAttention's memory figures (and the targets) count this part.
  int64_t call_bytes() const { return peak_bytes - input_bytes; }
  bool ran() const { return status == "ok"; }
};

// One line of the compare table: standard (vanilla) vs flash at one sequence length.
struct CompareLine {
  int64_t s = 0;
  std::string op;
  const Row* flash = nullptr;
  const Row* vanilla = nullptr;
  double speedup() const;       // vanilla ms / flash ms (0 when either did not run)
  double memory_ratio() const;  // vanilla / flash call_bytes (0 when either did not run)
  double peak_ratio() const;    // vanilla / flash peak_bytes, inputs included (likewise)
};

struct Record {
  std::string gpu, driver, cuda, commit, command, date, library;
  std::vector<Row> rows;
  std::vector<CompareLine> compare;  // filled by `compare` only
};

// FLOPs of one row (shared/BENCH.md): forward 4*b*h*s_q*s_k*d, halved for causal; backward
// 2.5x, forward + backward 3.5x.
double row_flops(const Row& r);

std::string to_json(const Record& rec);
// Header kCsvHeader, then a line per row; lines end in CRLF and a field holding a comma, a quote
// or a line break is quoted, its quotes doubled (RFC 4180).
std::string to_csv(const std::vector<Row>& rows);
extern const char* const kCsvHeader;
std::string csv_field(const std::string& text);

// Writes text to path; throws std::runtime_error naming the path on failure.
void write_file(const std::string& path, const std::string& text);

}  // namespace fabench
