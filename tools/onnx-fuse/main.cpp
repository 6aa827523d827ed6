// fa-onnx-fuse: replaces the attention subgraphs of an ONNX model by FlashAttention nodes
// (docs/onnx.md). Prints one line per subgraph: what it fused, or what it refused and why; the
// command line is CLI11's (tools/common/cli.h), the report nlohmann-json's, the text {fmt}'s.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (format.h in fmt 9, ranges.h from 11)

#include <exception>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"  // tools/common: validators, man-page --help, parse()
#include "fuse.h"

namespace {

// Keys in the order a reader looks for them (anchor and verdict first), not sorted.
using Json = nlohmann::ordered_json;

// Attribute values as the node carries them: enough digits to read back the same float.
std::string num(double x) { return fmt::format("{:.9g}", x); }

// "Add, Cast x2, Concat x8": each op type once, with its count.
std::string removed_summary(const std::vector<std::string>& ops) {
  std::map<std::string, int> count;
  for (const auto& o : ops) ++count[o];
  std::vector<std::string> parts;
  for (const auto& [op, n] : count) parts.push_back(n > 1 ? fmt::format("{} x{}", op, n) : op);
  return fmt::format("{}", fmt::join(parts, ", "));
}

Json report_json(const std::string& input, const std::vector<fa_onnx::Outcome>& outcomes) {
  Json subgraphs = Json::array();
  for (const auto& o : outcomes) {
    Json s = {{"anchor", o.anchor}, {"pattern", o.pattern}, {"fused", o.fused}};
    if (!o.fused) {
      s["reason"] = o.reason;
    } else {
      s.update({{"node", o.node}, {"layout", o.layout}, {"dtype", o.dtype}, {"causal", o.causal},
                {"window_left", o.window_left}, {"window_right", o.window_right},
                {"softcap", o.softcap}, {"scale", o.scale}, {"num_heads", o.num_heads},
                {"num_kv_heads", o.num_kv_heads}, {"head_dim", o.head_dim},
                {"packing", o.packing}, {"removed_ops", o.removed_ops}});
    }
    subgraphs.push_back(std::move(s));
  }
  return {{"model", input}, {"subgraphs", std::move(subgraphs)}};
}

void print_outcomes(const std::string& input, const std::vector<fa_onnx::Outcome>& outcomes) {
  size_t fused = 0;
  for (const auto& o : outcomes) fused += o.fused;
  fmt::print("fa-onnx-fuse: {}: {} attention subgraph(s), {} fused, {} refused\n", input,
             outcomes.size(), fused, outcomes.size() - fused);
  for (const auto& o : outcomes) {
    if (!o.fused) {
      fmt::print("  refused {} ({}): {}\n", o.anchor, o.pattern, o.reason);
      continue;
    }
    std::string line = fmt::format("  fused   {} ({}) -> {}: layout {}, {}, heads {}/{}, head_dim {}, scale {}",
                                   o.anchor, o.pattern, o.node, o.layout, o.dtype, o.num_heads,
                                   o.num_kv_heads, o.head_dim, num(o.scale));
    if (o.causal) line += ", causal";
    if (o.window_left >= 0 || o.window_right >= 0)
      line += fmt::format(", window ({}, {})", o.window_left, o.window_right);
    if (o.softcap > 0) line += fmt::format(", softcap {}", num(o.softcap));
    fmt::print("{}\n          removed {} ops ({}); {}\n", line, o.removed_ops.size(),
               removed_summary(o.removed_ops), o.packing.empty() ? "no packing" : o.packing);
  }
}

// A failure after the command line was accepted: a model it cannot read or a file it cannot write.
int failure(const std::string& msg) {
  fmt::print(stderr, "fa-onnx-fuse: {}\n", msg);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"replace the attention subgraphs of an ONNX model by FlashAttention nodes",
               "fa-onnx-fuse"};
  fatools::setup(app, {{"fa-onnx-fuse",
                        {"Replaces attention subgraphs (MatMul -> scale -> mask -> Softmax -> "
                         "MatMul, and ONNX Attention nodes) by one FlashAttention node (domain "
                         "flashattn) each, packs the Q/K/V projections that feed it, and prints per "
                         "subgraph what it fused or refused and why. Without -o it only reports.",
                         {{"EXAMPLES", " fa-onnx-fuse model.onnx -o model.fused.onnx --report report.json\n"
                                       " fa-onnx-fuse model.onnx            # report only"},
                          {"EXIT STATUS", "0 done (refused subgraphs are reported, not failures); 1 "
                                          "a model it cannot read or a file it cannot write; 2 bad "
                                          "arguments (nothing is read or written)."},
                          {"SEE ALSO", "docs/onnx.md (the node, what it fuses, the ONNX Runtime "
                                       "custom op)."}}}}});
  std::string input, output, report;
  fa_onnx::Options opt;
  bool quiet = false, no_pack = false;
  app.add_option("INPUT", input, "the ONNX model to read.")->required()->type_name("");
  app.add_option("-o,--output", output, "write the fused model to this file.")
      ->check(fatools::writable())
      ->type_name("PATH");
  app.add_option("--report", report, "write the per-subgraph report as JSON to this file.")
      ->check(fatools::writable())
      ->type_name("PATH");
  app.add_flag("--no-pack-qkv", no_pack, "keep the Q/K/V projections as they are (no packing).");
  app.add_flag("--quiet", quiet, "print nothing on success.");
  if (const int status = fatools::parse(app, argc, argv); status >= 0) return status;
  opt.pack_qkv = !no_pack;

  onnx::ModelProto model;
  {
    std::ifstream f(input, std::ios::binary);
    if (!f) return failure(fmt::format("cannot open '{}'", input));
    if (!model.ParseFromIstream(&f)) return failure(fmt::format("'{}' is not an ONNX model", input));
  }
  std::vector<fa_onnx::Outcome> outcomes;
  try {
    outcomes = fa_onnx::fuse_model(model, opt);
  } catch (const std::exception& e) {
    return failure(e.what());
  }
  if (!quiet) print_outcomes(input, outcomes);
  if (!report.empty()) {
    std::ofstream r(report);
    r << report_json(input, outcomes).dump(2) << '\n';
    if (!r) return failure(fmt::format("cannot write '{}'", report));
  }
  if (!output.empty()) {
    std::ofstream f(output, std::ios::binary);
    if (!f || !model.SerializeToOstream(&f)) return failure(fmt::format("cannot write '{}'", output));
  }
  return 0;
}
