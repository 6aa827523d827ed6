// fa-bench: the standard-vs-FlashAttention tables of this library (docs/fa-bench.md).
//   fa-bench run      one shape, chosen backends and passes
//   fa-bench sweep    the standard grid of shared/BENCH.md, JSON + CSV
//   fa-bench compare  standard vs flash time and peak memory against sequence length
//   fa-bench plan     attention activation memory of a model, standard vs flash
// Every flag is described by `fa-bench <subcommand> --help`. Bad input exits with status 2, a
// message naming the flag, and writes nothing.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "commands.h"

namespace {

using namespace fabench;

const std::map<std::string, fa_dtype> kDtypes{
    {"fp32", FA_DTYPE_FP32}, {"fp16", FA_DTYPE_FP16}, {"bf16", FA_DTYPE_BF16}};

const char* kPlanFormula =
    "Formula (b batch, s seqlen, h heads, h_kv kv heads, d head_dim, e bytes per element,\n"
    "L layers; Q = O = b*s*h*d*e, K = V = b*s*h_kv*d*e, A = b*h*s*s score elements):\n"
    "  inference, per layer: kept = K + V (KV cache) for both;\n"
    "      transient: standard 2*A*e (S and P), flash b*h*s*4 (fp32 LSE)\n"
    "  training, per layer:  kept standard = Q+K+V+O + A*e (P) [+ A bytes dropout mask],\n"
    "      flash = Q+K+V+O + b*h*s*4 (LSE);\n"
    "      transient: standard 2*A*e (dP, dS), flash b*s*h*d*4 (fp32 dQ accumulator)\n"
    "  per model = L * kept + transient (one layer computes at a time).\n"
    "Weights, optimizer states and non-attention activations are not counted.";

// A path we will write at the end: its directory must exist now, so that a long run never
// ends in an unwritable file.
std::string writable(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (access(dir.c_str(), W_OK) != 0) return "directory '" + dir + "' is not writable";
  return "";
}

void add_timing(CLI::App* app, Timing& t, std::string& device) {
  app->add_option("--device", device,
                  "where to run: cuda (the GPU; needs a CUDA build and device), cpu (the CPU "
                  "backends), auto (cuda when available)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app->add_option("--warmup", t.warmup, "untimed calls before timing")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app->add_option("--warmup-ms", t.warmup_ms,
                  "GPU: after --warmup, untimed calls (each waited for) until this many ms have "
                  "passed since the first, so that the clock settles under the call")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  app->add_option("--repeats", t.repeats,
                  "timed calls; the median is reported (GPU: CUDA events per call, input sets "
                  "rotated to defeat the L2; CPU: wall clock)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
}

void add_output(CLI::App* app, Output& o) {
  app->add_option("--json", o.json, "write the record (shared/BENCH.md schema) to this file")
      ->check(CLI::Validator(writable, "PATH"));
  app->add_option("--csv", o.csv, "write the rows as CSV to this file")
      ->check(CLI::Validator(writable, "PATH"));
  app->add_option("--commit", o.commit, "commit recorded in the JSON (default: $FA_COMMIT)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fa-bench: standard attention vs FlashAttention - time, TFLOP/s, peak memory, "
               "and a memory planner. Docs: docs/fa-bench.md"};
  app.require_subcommand(1, 1);
  Timing timing;
  std::string device = "auto";
  Output out;
  if (const char* c = std::getenv("FA_COMMIT")) out.commit = c;
  if (out.commit.empty()) out.commit = "unknown";
  std::string dtype = "bf16";
  std::vector<std::string> dtypes{"bf16"};

  RunArgs run;
  CLI::App* run_cmd = app.add_subcommand("run", "time one shape with the chosen backends and passes");
  add_timing(run_cmd, timing, device);
  add_output(run_cmd, out);
  run_cmd->add_option("--backend", run.backends, "backends: flashattn (the library's default "
                      "kernel), vanilla (standard attention: cuBLAS + softmax; CPU: reference)")
      ->check(CLI::IsMember({"flashattn", "vanilla"}))->delimiter(',')->capture_default_str();
  run_cmd->add_option("--op", run.ops, "passes: fwd, bwd (timed after one forward), fwdbwd")
      ->check(CLI::IsMember({"fwd", "bwd", "fwdbwd"}))->delimiter(',')->capture_default_str();
  run_cmd->add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  run_cmd->add_option("-b,--batch", run.b, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  run_cmd->add_option("--heads", run.h, "query heads")->check(CLI::PositiveNumber)->capture_default_str();
  run_cmd->add_option("--kv-heads", run.h_kv, "key/value heads, dividing --heads (default: --heads)")
      ->check(CLI::PositiveNumber);
  run_cmd->add_option("-s,--seqlen", run.s_q, "query sequence length")->check(CLI::PositiveNumber)
      ->capture_default_str();
  run_cmd->add_option("--seqlen-k", run.s_k, "key sequence length (default: --seqlen)")
      ->check(CLI::PositiveNumber);
  run_cmd->add_option("-d,--head-dim", run.d, "head dimension (1..256)")->check(CLI::Range(1, 256))
      ->capture_default_str();
  run_cmd->add_flag("--causal", run.causal, "causal mask, bottom-right aligned (FLOPs halved)");

  SweepArgs sweep;
  std::vector<std::string> causal_modes{"no", "yes"};
  CLI::App* sweep_cmd = app.add_subcommand(
      "sweep", "the standard grid (shared/BENCH.md): heads = hidden / d, batch = tokens / seqlen");
  add_timing(sweep_cmd, timing, device);
  add_output(sweep_cmd, out);
  sweep_cmd->add_option("--backend", sweep.backends, "backends: flashattn, vanilla")
      ->check(CLI::IsMember({"flashattn", "vanilla"}))->delimiter(',')->capture_default_str();
  sweep_cmd->add_option("--op", sweep.ops, "passes: fwd, bwd, fwdbwd")
      ->check(CLI::IsMember({"fwd", "bwd", "fwdbwd"}))->delimiter(',')->capture_default_str();
  sweep_cmd->add_option("--dtype", dtypes, "element types: fp32, fp16, bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->delimiter(',')->capture_default_str();
  sweep_cmd->add_option("--hidden", sweep.hidden, "model width: heads = hidden / head_dim")
      ->check(CLI::PositiveNumber)->capture_default_str();
  sweep_cmd->add_option("--tokens", sweep.tokens, "batch * seqlen (batch at least 1)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  sweep_cmd->add_option("--seqlens", sweep.seqlens, "sequence lengths")->check(CLI::PositiveNumber)
      ->delimiter(',')->capture_default_str();
  sweep_cmd->add_option("--dims", sweep.dims, "head dims (each must divide --hidden)")
      ->check(CLI::Range(1, 256))->delimiter(',')->capture_default_str();
  sweep_cmd->add_option("--causal", causal_modes, "mask modes: no (full), yes (causal)")
      ->check(CLI::IsMember({"no", "yes"}))->delimiter(',')->capture_default_str();

  CompareArgs cmp;
  CLI::App* cmp_cmd = app.add_subcommand(
      "compare", "standard (vanilla) vs FlashAttention: time and peak memory against seqlen, "
                 "speed-up and memory ratio; vanilla rows that do not fit say so");
  add_timing(cmp_cmd, timing, device);
  add_output(cmp_cmd, out);
  cmp_cmd->add_option("--op", cmp.ops, "passes: fwd, bwd, fwdbwd")
      ->check(CLI::IsMember({"fwd", "bwd", "fwdbwd"}))->delimiter(',')->capture_default_str();
  cmp_cmd->add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  cmp_cmd->add_option("-b,--batch", cmp.b, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  cmp_cmd->add_option("--heads", cmp.h, "heads")->check(CLI::PositiveNumber)->capture_default_str();
  cmp_cmd->add_option("-d,--head-dim", cmp.d, "head dimension")->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmp_cmd->add_option("--seqlens", cmp.seqlens, "sequence lengths")->check(CLI::PositiveNumber)
      ->delimiter(',')->capture_default_str();
  cmp_cmd->add_flag("--causal", cmp.causal, "causal mask");

  PlanArgs plan_args;
  std::string model, mode = "inference";
  std::vector<int64_t> plan_seqlens{2048, 4096, 8192, 16384, 32768};
  ModelShape custom{"custom"};
  bool list = false;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "attention activation memory of a model with standard vs Flash attention, per "
              "layer and per model, and the largest seqlen that fits");
  plan_cmd->footer(kPlanFormula);
  plan_cmd->add_flag("--list-models", list, "print the model presets and exit");
  plan_cmd->add_option("--model", model, "preset (see --list-models); or give the five numbers below");
  plan_cmd->add_option("--layers", custom.layers, "transformer layers")->check(CLI::PositiveNumber);
  plan_cmd->add_option("--hidden", custom.hidden, "model width")->check(CLI::PositiveNumber);
  plan_cmd->add_option("--heads", custom.heads, "query heads")->check(CLI::PositiveNumber);
  plan_cmd->add_option("--kv-heads", custom.kv_heads, "key/value heads (default: --heads)")
      ->check(CLI::PositiveNumber);
  plan_cmd->add_option("--head-dim", custom.head_dim, "head dim (default: hidden / heads)")
      ->check(CLI::PositiveNumber);
  plan_cmd->add_option("-b,--batch", plan_args.in.batch, "batch size")->check(CLI::PositiveNumber)
      ->capture_default_str();
  plan_cmd->add_option("-s,--seqlen", plan_seqlens, "sequence lengths (comma-separated)")
      ->check(CLI::PositiveNumber)->delimiter(',')->capture_default_str();
  plan_cmd->add_option("--dtype", dtype, "activation dtype (fp32: 4 bytes, fp16/bf16: 2)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->capture_default_str();
  plan_cmd->add_option("--mode", mode, "inference (prefill, KV cache kept) or training "
                       "(activations kept for the backward)")
      ->check(CLI::IsMember({"inference", "training"}))->capture_default_str();
  plan_cmd->add_flag("--dropout", plan_args.in.dropout,
                     "training with attention dropout: standard attention also keeps its mask");
  plan_cmd->add_option("--memory-gib", plan_args.memory_gib,
                       "also print the largest seqlen whose attention memory fits this many GiB")
      ->check(CLI::PositiveNumber);
  plan_cmd->add_option("--json", plan_args.json, "write the table as JSON to this file")
      ->check(CLI::Validator(writable, "PATH"));

  CLI11_PARSE(app, argc, argv);
  out.command.clear();
  for (int i = 0; i < argc; ++i) out.command += (i ? " " : "") + std::string(argv[i]);

  auto usage_error = [](const std::string& msg) {
    std::fprintf(stderr, "fa-bench: %s\n", msg.c_str());
    return 2;
  };
  try {
    if (plan_cmd->parsed()) {
      if (list) { list_models(); return 0; }
      if (!model.empty()) {
        const ModelShape* m = find_preset(model);
        if (!m) return usage_error("--model '" + model + "' is not a preset (see --list-models)");
        if (plan_cmd->count("--layers") + plan_cmd->count("--hidden") + plan_cmd->count("--heads") > 0)
          return usage_error("--model excludes --layers/--hidden/--heads");
        plan_args.in.model = *m;
      } else {
        if (!custom.layers || !custom.hidden || !custom.heads)
          return usage_error("give --model, or --layers, --hidden and --heads");
        if (!custom.kv_heads) custom.kv_heads = custom.heads;
        if (!custom.head_dim) custom.head_dim = custom.hidden / custom.heads;
        if (custom.head_dim == 0) return usage_error("--head-dim: hidden / heads is 0; give --head-dim");
        if (custom.heads % custom.kv_heads)
          return usage_error("--kv-heads=" + std::to_string(custom.kv_heads) + " must divide --heads=" +
                             std::to_string(custom.heads));
        plan_args.in.model = custom;
      }
      plan_args.in.elem_bytes = dtype_bytes(kDtypes.at(dtype));
      plan_args.in.training = mode == "training";
      if (plan_args.in.dropout && !plan_args.in.training)
        return usage_error("--dropout applies to --mode training only");
      plan_args.seqlens = plan_seqlens;
      return cmd_plan(plan_args);
    }
    if (device == "cuda" && !cuda_available())
      return usage_error("--device cuda: this build has no CUDA backend or no GPU is present");
    timing.cuda = device == "cuda" || (device == "auto" && cuda_available());
    if (run_cmd->parsed()) {
      run.dtype = kDtypes.at(dtype);
      const int64_t hkv = run.h_kv ? run.h_kv : run.h;
      if (run.h % hkv)
        return usage_error("--kv-heads=" + std::to_string(hkv) + " must divide --heads=" +
                           std::to_string(run.h));
      return cmd_run(run, timing, out);
    }
    if (sweep_cmd->parsed()) {
      sweep.dtypes.clear();
      for (const std::string& d : dtypes) sweep.dtypes.push_back(kDtypes.at(d));
      sweep.causal.clear();
      for (const std::string& c : causal_modes) sweep.causal.push_back(c == "yes");
      for (int64_t d : sweep.dims)
        if (sweep.hidden % d)
          return usage_error("--dims: " + std::to_string(d) + " does not divide --hidden=" +
                             std::to_string(sweep.hidden));
      return cmd_sweep(sweep, timing, out);
    }
    cmp.dtype = kDtypes.at(dtype);
    return cmd_compare(cmp, timing, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa-bench: %s\n", e.what());
    return 1;
  }
}
