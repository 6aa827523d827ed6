// fa-onnx-fuse: replaces the attention subgraphs of an ONNX model by FlashAttention nodes
// (docs/onnx.md). Prints one line per subgraph: what it fused, or what it refused and why.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "fuse.h"

namespace {

const char* kUsage =
    "usage: fa-onnx-fuse INPUT.onnx -o OUTPUT.onnx [--report REPORT.json] [--no-pack-qkv] [--quiet]\n"
    "  Replaces attention subgraphs (MatMul -> scale -> mask -> Softmax -> MatMul, and ONNX\n"
    "  Attention nodes) by one FlashAttention node (domain flashattn) each, packs the Q/K/V\n"
    "  projections that feed it, and reports per subgraph what it fused or refused and why.\n"
    "  Without -o it only reports. Exit status: 0 ok, 1 bad input, 2 usage.\n";

std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += char(c);
    else if (c == '\n') r += "\\n";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else r += char(c);
  }
  return r + "\"";
}

std::string num(double x) {
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}

std::string removed_summary(const std::vector<std::string>& ops) {
  std::map<std::string, int> count;
  for (const auto& o : ops) ++count[o];
  std::string s;
  for (const auto& [op, n] : count) s += (s.empty() ? "" : ", ") + op + (n > 1 ? " x" + std::to_string(n) : "");
  return s;
}

std::string to_json(const std::string& input, const std::vector<fa_onnx::Outcome>& os) {
  std::ostringstream j;
  j << "{\n  \"model\": " << json_str(input) << ",\n  \"subgraphs\": [";
  for (size_t i = 0; i < os.size(); ++i) {
    const auto& o = os[i];
    j << (i ? "," : "") << "\n    {\"anchor\": " << json_str(o.anchor) << ", \"pattern\": " << json_str(o.pattern)
      << ", \"fused\": " << (o.fused ? "true" : "false");
    if (!o.fused) {
      j << ", \"reason\": " << json_str(o.reason) << "}";
      continue;
    }
    j << ", \"node\": " << json_str(o.node) << ", \"layout\": " << json_str(o.layout)
      << ", \"dtype\": " << json_str(o.dtype) << ", \"causal\": " << o.causal
      << ", \"window_left\": " << o.window_left << ", \"window_right\": " << o.window_right
      << ", \"softcap\": " << num(o.softcap) << ", \"scale\": " << num(o.scale)
      << ", \"num_heads\": " << o.num_heads << ", \"num_kv_heads\": " << o.num_kv_heads
      << ", \"head_dim\": " << o.head_dim << ", \"packing\": " << json_str(o.packing)
      << ", \"removed_ops\": [";
    for (size_t k = 0; k < o.removed_ops.size(); ++k) j << (k ? ", " : "") << json_str(o.removed_ops[k]);
    j << "]}";
  }
  j << "\n  ]\n}\n";
  return j.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, report;
  fa_onnx::Options opt;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "-o" || a == "--output") && i + 1 < argc) output = argv[++i];
    else if (a == "--report" && i + 1 < argc) report = argv[++i];
    else if (a == "--no-pack-qkv") opt.pack_qkv = false;
    else if (a == "--quiet") quiet = true;
    else if (a == "-h" || a == "--help") { std::fputs(kUsage, stdout); return 0; }
    else if (!a.empty() && a[0] != '-' && input.empty()) input = a;
    else { std::fprintf(stderr, "fa-onnx-fuse: unexpected argument '%s'\n%s", a.c_str(), kUsage); return 2; }
  }
  if (input.empty()) { std::fputs(kUsage, stderr); return 2; }
  onnx::ModelProto model;
  {
    std::ifstream f(input, std::ios::binary);
    if (!f || !model.ParseFromIstream(&f)) {
      std::fprintf(stderr, "fa-onnx-fuse: cannot read an ONNX model from '%s'\n", input.c_str());
      return 1;
    }
  }
  std::vector<fa_onnx::Outcome> outcomes;
  try {
    outcomes = fa_onnx::fuse_model(model, opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa-onnx-fuse: %s\n", e.what());
    return 1;
  }
  int fused = 0;
  for (const auto& o : outcomes) fused += o.fused;
  if (!quiet) {
    std::printf("fa-onnx-fuse: %s: %zu attention subgraph(s), %d fused, %zu refused\n", input.c_str(),
                outcomes.size(), fused, outcomes.size() - size_t(fused));
    for (const auto& o : outcomes) {
      if (!o.fused) {
        std::printf("  refused %s (%s): %s\n", o.anchor.c_str(), o.pattern.c_str(), o.reason.c_str());
        continue;
      }
      std::printf("  fused   %s (%s) -> %s: layout %s, %s, heads %lld/%lld, head_dim %lld, scale %s",
                  o.anchor.c_str(), o.pattern.c_str(), o.node.c_str(), o.layout.c_str(), o.dtype.c_str(),
                  (long long)o.num_heads, (long long)o.num_kv_heads, (long long)o.head_dim, num(o.scale).c_str());
      if (o.causal) std::printf(", causal");
      if (o.window_left >= 0 || o.window_right >= 0)
        std::printf(", window (%lld, %lld)", (long long)o.window_left, (long long)o.window_right);
      if (o.softcap > 0) std::printf(", softcap %s", num(o.softcap).c_str());
      std::printf("\n          removed %zu ops (%s); %s\n", o.removed_ops.size(),
                  removed_summary(o.removed_ops).c_str(), o.packing.empty() ? "no packing" : o.packing.c_str());
    }
  }
  if (!report.empty()) {
    std::ofstream r(report);
    r << to_json(input, outcomes);
    if (!r) { std::fprintf(stderr, "fa-onnx-fuse: cannot write '%s'\n", report.c_str()); return 1; }
  }
  if (!output.empty()) {
    std::ofstream f(output, std::ios::binary);
    if (!f || !model.SerializeToOstream(&f)) {
      std::fprintf(stderr, "fa-onnx-fuse: cannot write '%s'\n", output.c_str());
      return 1;
    }
  }
  return 0;
}
