// fa-bench: the standard-vs-FlashAttention tables of this library (docs/fa-bench.md).
//   fa-bench run      one shape, chosen backends and passes
//   fa-bench sweep    the standard grid of shared/BENCH.md, JSON + CSV
//   fa-bench compare  standard vs flash time and peak memory against sequence length
//   fa-bench plan     attention activation memory of a model, standard vs flash
//   fa-bench arch     the support matrix and the modeled standard vs flash figures per GPU
// Every flag is described by `fa-bench <subcommand> --help` (a man page). Bad input exits with
// status 2, a message naming the flag and what it expects, and writes nothing. Defaults that
// depend on the device (shapes, dtype, repeats) are applied once --device is known.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"  // tools/common: validators, man-page --help, parse()
#include "commands.h"

namespace {

using namespace fabench;

const char* kPlanFormula =
    "Formula (b batch, s seqlen, h heads, h_kv kv heads, d head_dim, e bytes per element, L "
    "layers; Q = O = b*s*h*d*e, K = V = b*s*h_kv*d*e, A = b*h*s*s score elements):\n"
    "  inference, per layer: kept = K + V (KV cache) for both;\n"
    "      transient: standard 2*A*e (S and P), flash b*h*s*4 (fp32 LSE)\n"
    "  training, per layer:  kept standard = Q+K+V+O + A*e (P) [+ A bytes dropout mask],\n"
    "      flash = Q+K+V+O + b*h*s*4 (LSE);\n"
    "      transient: standard 2*A*e (dP, dS), flash b*s*h*d*4 (fp32 dQ accumulator)\n"
    "  per model = L * kept + transient (one layer computes at a time).\n"
    "Weights, optimizer states and non-attention activations are not counted.";

const char* kExitStatus =
    "0 done (rows that could not run - out of memory, unsupported - are rows with a status, not "
    "failures); 1 a failure while running or writing; 2 bad arguments (nothing is run or "
    "written).";

const char* kSeeAlso = "docs/fa-bench.md (method, record schema), shared/BENCH.md (the grid).";

std::map<std::string, fatools::ManPage> man_pages() {
  const std::pair<std::string, std::string> exit_status{"EXIT STATUS", kExitStatus},
      see_also{"SEE ALSO", kSeeAlso},
      environment{"ENVIRONMENT", "FA_COMMIT: the commit recorded in the JSON when --commit is not "
                                 "given. OMP_NUM_THREADS: the CPU backends' threads."};
  const std::string defaults =
      "Defaults depend on the device: on a GPU the standard shapes of shared/BENCH.md (bf16, 30 "
      "repeats); on the CPU fp32, smaller shapes and 5 repeats, so that the default commands finish "
      "in seconds on a 2-core machine. Each option's text gives both.";
  const std::string progress =
      "Progress: a line on stderr redrawn after every call (warm-up and timed repeats) with the "
      "time left, when stderr is a terminal or with --progress on.";
  return {
      {"fa-bench",
       {"Measures this library's attention backends through its public C API - flashattn (the "
        "library's default kernel for the device) against vanilla (standard attention) - and "
        "writes records in the schema of shared/BENCH.md; plans attention memory for real models.",
        {{"EXAMPLES",
          " fa-bench run                      # one shape, both backends, on the best device\n"
          " fa-bench compare --json cmp.json  # standard vs flash against seqlen\n"
          " fa-bench plan --model llama-3-8b -s 8192 --memory-gib 80"},
         exit_status, see_also}}},
      {"fa-bench run",
       {"Times one shape with each backend and pass and prints a row per (pass, backend) as it is "
        "measured: ms (median), the rate (TFLOP/s on a GPU, GFLOP/s on the CPU), peak MiB and call "
        "MiB (the peak less the inputs), and the kernel family that ran.\n\n" + defaults + "\n\n" +
            progress,
        {{"EXAMPLES", " fa-bench run\n fa-bench run --op fwd,bwd -s 4096 --causal --json run.json\n"
                      " fa-bench run --device cpu --dtype fp32 --heads 4 -s 256 -d 64"},
         exit_status, environment, see_also}}},
      {"fa-bench sweep",
       {"Runs the standard grid: heads = --hidden / d, batch = --tokens / seqlen, every seqlen x "
        "head dim x mask x dtype x pass x backend. Prints an estimate first (from one call per "
        "backend and pass at its smallest cell), then a result line per cell on stderr and the "
        "table on stdout as cells finish.\n\n" + defaults + "\n\n" + progress,
        {{"EXAMPLES", " fa-bench sweep --json sweep.json --csv sweep.csv\n"
                      " fa-bench sweep --dims 128 --seqlens 1024,4096 --op fwd"},
         exit_status, environment, see_also}}},
      {"fa-bench compare",
       {"Standard attention (vanilla) against FlashAttention per seqlen: both times, the speed-up "
        "(vanilla ms / flash ms), what each call needs beyond its inputs (outputs, LSE, gradients, "
        "workspace) and its ratio ('mem ratio'), and the ratio of the whole peaks ('peak ratio', "
        "inputs included, nearer 1). Vanilla rows that do not fit say 'oom' in the note. Prints an "
        "estimate first; each line appears as soon as its two cells are measured.\n\n" +
            defaults + "\n\n" + progress,
        {{"EXAMPLES", " fa-bench compare\n fa-bench compare --seqlens 1024,4096,16384 --op fwd --causal"},
         exit_status, environment, see_also}}},
      {"fa-bench plan",
       {"Attention activation memory of a model with standard vs Flash attention, per layer and "
        "per model, for each sequence length; with --memory-gib also the largest sequence length "
        "(multiple of 128) whose total fits. Pure arithmetic: nothing runs.\n\n" +
            std::string(kPlanFormula),
        {{"EXAMPLES", " fa-bench plan --list-models\n"
                      " fa-bench plan --model llama-2-7b -s 4096,8192 --mode training --memory-gib 80\n"
                      " fa-bench plan --layers 24 --hidden 2048 --heads 16 --kv-heads 4 -s 4096"},
         exit_status, see_also}}},
      {"fa-bench arch",
       {"Which of our kernel families each GPU runs (the support matrix, with the family the "
        "library dispatches per pass), then, for one shape or a model preset, the modeled time, "
        "TFLOP/s and memory of standard attention (vanilla) against the library's flash call on "
        "each GPU: ms, TFLOP/s, MiB beyond the call's inputs, speed-up and memory ratio. With "
        "--model the times are the model's layers' (one attention call each) and the mask is "
        "causal unless --mask says otherwise. Every figure is modeled, not measured: "
        "bench/arch_model.json's constants (compiled in), calibrated on H200 measurements and "
        "carried to the other GPUs by their datasheet rates (docs/architectures.md states the "
        "error on the H200; elsewhere it is unknown). bench/arch_model.py computes the same "
        "numbers. Pure arithmetic unless --measure: then the shape is also timed here (standard "
        "and flash, one layer's call, as `run` times it; --device, --warmup, --repeats as "
        "there), labelled measured, with the model's error where this machine's GPU is one of "
        "the model's. --chart writes the TFLOP/s as an SVG bar chart.",
        {{"EXAMPLES", " fa-bench arch\n"
                      " fa-bench arch --model llama-3-8b --seqlen 8192 --batch 8\n"
                      " fa-bench arch --gpu a100-80gb,h100-sxm --op fwdbwd -s 16384 -d 128 --json a.json\n"
                      " fa-bench arch --gpu h200-sxm -b 16 --heads 16 -s 1024 -d 128 --measure --chart h200.svg"},
         exit_status, see_also}}},
  };
}

// --device cuda where cuda_available() is false.
constexpr const char* kNoCuda =
    "--device cuda: this build has no CUDA backend, no GPU is present or the CUDA runtime cannot "
    "be opened";

template <typename T>
std::string text(const T& v) {
  return fmt::format("{}", v);
}
template <typename T>
std::string text(const std::vector<T>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

// Options whose default depends on the device: bound to the GPU's default, and after parsing set
// to the CPU's when the run is on the CPU and the command line did not give them. The help text
// names both defaults.
class DeviceDefaults {
 public:
  explicit DeviceDefaults(CLI::App* app) : app_(app) {}
  template <typename T>
  CLI::Option* add(const std::string& names, T& field, const T& gpu, const T& cpu,
                   const std::string& help, const std::string& type) {
    field = gpu;
    const std::string dflt = text(gpu) == text(cpu)
                                 ? fmt::format(" Default: {}.", text(gpu))
                                 : fmt::format(" Default: {} on a GPU, {} on the CPU.", text(gpu), text(cpu));
    CLI::Option* opt = app_->add_option(names, field, help + dflt)->type_name(type);
    apply_.push_back([opt, &field, cpu] {
      if (opt->count() == 0) field = cpu;
    });
    return opt;
  }
  void apply(bool cuda) {
    if (!cuda && app_->parsed())
      for (auto& f : apply_) f();
  }

 private:
  CLI::App* app_;
  std::vector<std::function<void()>> apply_;
};

const std::vector<std::string> kBackends{"flashattn", "vanilla"}, kOps{"fwd", "bwd", "fwdbwd"},
    kDtypeNames{"fp32", "fp16", "bf16"};

void add_timing(DeviceDefaults& dd, CLI::App* app, Timing& t, std::string& device,
                std::string& progress) {
  const Timing gpu = timing_defaults(true), cpu = timing_defaults(false);
  app->add_option("--device", device,
                  "where to run: cuda (the GPU; needs a CUDA build and a device), cpu (the CPU "
                  "backends), auto (cuda when available).")
      ->check(fatools::one_of({"auto", "cpu", "cuda"}))
      ->type_name("WHERE")
      ->capture_default_str();
  dd.add("--warmup", t.warmup, gpu.warmup, cpu.warmup, "untimed calls before timing.", "N")
      ->check(fatools::integer(0, 1000));
  app->add_option("--warmup-ms", t.warmup_ms,
                  "GPU: after --warmup, untimed calls (each waited for) until this many ms have "
                  "passed since the first, so that the clock settles under the call.")
      ->check(fatools::number(0, 60000))
      ->type_name("MS")
      ->capture_default_str();
  dd.add("--repeats", t.repeats, gpu.repeats, cpu.repeats,
         "timed calls; the median is reported (GPU: CUDA events per call, input sets rotated to "
         "defeat the L2; CPU: wall clock).",
         "N")
      ->check(fatools::integer(1, 100000));
  app->add_option("--progress", progress,
                  "the live progress line on stderr: auto (when stderr is a terminal), on, off.")
      ->check(fatools::one_of({"auto", "on", "off"}))
      ->type_name("WHEN")
      ->capture_default_str();
}

void add_output(CLI::App* app, Output& o) {
  app->add_option("--json", o.json, "write the record (shared/BENCH.md schema) to this file.")
      ->check(fatools::writable())
      ->type_name("PATH");
  app->add_option("--csv", o.csv, "write the rows as CSV (RFC 4180) to this file.")
      ->check(fatools::writable())
      ->type_name("PATH");
  app->add_option("--commit", o.commit, "commit recorded in the JSON (default: $FA_COMMIT).")
      ->type_name("SHA");
}

int usage_error(const std::string& msg) {
  std::fputs(("fa-bench: " + msg + "\n").c_str(), stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"standard attention vs FlashAttention: time, FLOP rate, peak memory, and a memory "
               "planner",
               "fa-bench"};
  fatools::setup(app, man_pages());
  app.require_subcommand(1, 1);
  Timing timing;
  std::string device = "auto", progress = "auto";
  Output out;
  if (const char* c = std::getenv("FA_COMMIT")) out.commit = c;
  if (out.commit.empty()) out.commit = "unknown";
  const auto positive = fatools::integer(1);
  const auto head_dim = fatools::integer(1, 256);

  RunArgs run;
  const RunArgs run_gpu = run_defaults(true), run_cpu = run_defaults(false);
  CLI::App* run_cmd = app.add_subcommand("run", "time one shape with the chosen backends and passes");
  DeviceDefaults run_dd(run_cmd);
  run_dd.add("--backend", run.backends, run_gpu.backends, run_cpu.backends,
             "backends, comma-separated: flashattn (the library's default kernel), vanilla "
             "(standard attention: cuBLAS + softmax; CPU: the fp64 reference).", "LIST")
      ->check(fatools::one_of(kBackends))->delimiter(',');
  run_dd.add("--op", run.ops, run_gpu.ops, run_cpu.ops,
             "passes, comma-separated: fwd, bwd (timed after one forward), fwdbwd.", "LIST")
      ->check(fatools::one_of(kOps))->delimiter(',');
  run_dd.add("--dtype", run.dtype, run_gpu.dtype, run_cpu.dtype, "element type: fp32, fp16, bf16.", "TYPE")
      ->check(fatools::one_of(kDtypeNames));
  run_dd.add("-b,--batch", run.b, run_gpu.b, run_cpu.b, "batch size.", "N")->check(positive);
  run_dd.add("--heads", run.h, run_gpu.h, run_cpu.h, "query heads.", "N")->check(positive);
  run_cmd->add_option("--kv-heads", run.h_kv, "key/value heads, dividing --heads (default: --heads).")
      ->check(positive)->type_name("N");
  run_dd.add("-s,--seqlen", run.s_q, run_gpu.s_q, run_cpu.s_q, "query sequence length.", "N")->check(positive);
  run_cmd->add_option("--seqlen-k", run.s_k, "key sequence length (default: --seqlen).")
      ->check(positive)->type_name("N");
  run_dd.add("-d,--head-dim", run.d, run_gpu.d, run_cpu.d, "head dimension (1..256).", "N")->check(head_dim);
  run_cmd->add_flag("--causal", run.causal, "causal mask, bottom-right aligned (FLOPs halved).");
  add_timing(run_dd, run_cmd, timing, device, progress);
  add_output(run_cmd, out);

  SweepArgs sweep;
  const SweepArgs sweep_gpu = sweep_defaults(true), sweep_cpu = sweep_defaults(false);
  CLI::App* sweep_cmd = app.add_subcommand(
      "sweep", "the standard grid (shared/BENCH.md): heads = hidden / d, batch = tokens / seqlen");
  DeviceDefaults sweep_dd(sweep_cmd);
  sweep_dd.add("--backend", sweep.backends, sweep_gpu.backends, sweep_cpu.backends,
               "backends: flashattn, vanilla.", "LIST")
      ->check(fatools::one_of(kBackends))->delimiter(',');
  sweep_dd.add("--op", sweep.ops, sweep_gpu.ops, sweep_cpu.ops, "passes: fwd, bwd, fwdbwd.", "LIST")
      ->check(fatools::one_of(kOps))->delimiter(',');
  sweep_dd.add("--dtype", sweep.dtypes, sweep_gpu.dtypes, sweep_cpu.dtypes,
               "element types: fp32, fp16, bf16.", "LIST")
      ->check(fatools::one_of(kDtypeNames))->delimiter(',');
  sweep_dd.add("--hidden", sweep.hidden, sweep_gpu.hidden, sweep_cpu.hidden,
               "model width: heads = hidden / head_dim.", "N")->check(positive);
  sweep_dd.add("--tokens", sweep.tokens, sweep_gpu.tokens, sweep_cpu.tokens,
               "batch * seqlen (batch at least 1).", "N")->check(positive);
  sweep_dd.add("--seqlens", sweep.seqlens, sweep_gpu.seqlens, sweep_cpu.seqlens, "sequence lengths.", "LIST")
      ->check(positive)->delimiter(',');
  sweep_dd.add("--dims", sweep.dims, sweep_gpu.dims, sweep_cpu.dims,
               "head dims (1..256, each dividing --hidden).", "LIST")
      ->check(head_dim)->delimiter(',');
  sweep_dd.add("--causal", sweep.causal, sweep_gpu.causal, sweep_cpu.causal,
               "mask modes: no (full), yes (causal).", "LIST")
      ->check(fatools::one_of({"no", "yes"}))->delimiter(',');
  add_timing(sweep_dd, sweep_cmd, timing, device, progress);
  add_output(sweep_cmd, out);

  CompareArgs cmp;
  const CompareArgs cmp_gpu = compare_defaults(true), cmp_cpu = compare_defaults(false);
  CLI::App* cmp_cmd = app.add_subcommand(
      "compare", "standard (vanilla) vs FlashAttention: time and memory against seqlen, speed-up "
                 "and memory ratio");
  DeviceDefaults cmp_dd(cmp_cmd);
  cmp_dd.add("--op", cmp.ops, cmp_gpu.ops, cmp_cpu.ops, "passes: fwd, bwd, fwdbwd.", "LIST")
      ->check(fatools::one_of(kOps))->delimiter(',');
  cmp_dd.add("--dtype", cmp.dtype, cmp_gpu.dtype, cmp_cpu.dtype, "element type: fp32, fp16, bf16.", "TYPE")
      ->check(fatools::one_of(kDtypeNames));
  cmp_dd.add("-b,--batch", cmp.b, cmp_gpu.b, cmp_cpu.b, "batch size.", "N")->check(positive);
  cmp_dd.add("--heads", cmp.h, cmp_gpu.h, cmp_cpu.h, "heads.", "N")->check(positive);
  cmp_dd.add("-d,--head-dim", cmp.d, cmp_gpu.d, cmp_cpu.d, "head dimension (1..256).", "N")->check(head_dim);
  cmp_dd.add("--seqlens", cmp.seqlens, cmp_gpu.seqlens, cmp_cpu.seqlens, "sequence lengths.", "LIST")
      ->check(positive)->delimiter(',');
  cmp_cmd->add_flag("--causal", cmp.causal, "causal mask.");
  add_timing(cmp_dd, cmp_cmd, timing, device, progress);
  add_output(cmp_cmd, out);

  PlanArgs plan_args;
  std::string model, mode = "inference", plan_dtype = "bf16";
  std::vector<int64_t> plan_seqlens{2048, 4096, 8192, 16384, 32768};
  ModelShape custom{"custom"};
  bool list = false;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "attention activation memory of a model with standard vs Flash attention, per "
              "layer and per model, and the largest seqlen that fits");
  plan_cmd->add_flag("--list-models", list, "print the model presets and exit.");
  plan_cmd->add_option("--model", model, "preset (see --list-models); or give --layers, --hidden "
                       "and --heads.")->type_name("NAME");
  plan_cmd->add_option("--layers", custom.layers, "transformer layers.")->check(positive)->type_name("N");
  plan_cmd->add_option("--hidden", custom.hidden, "model width.")->check(positive)->type_name("N");
  plan_cmd->add_option("--heads", custom.heads, "query heads.")->check(positive)->type_name("N");
  plan_cmd->add_option("--kv-heads", custom.kv_heads, "key/value heads (default: --heads).")
      ->check(positive)->type_name("N");
  plan_cmd->add_option("--head-dim", custom.head_dim, "head dim (default: hidden / heads).")
      ->check(positive)->type_name("N");
  plan_cmd->add_option("-b,--batch", plan_args.in.batch, "batch size.")->check(positive)
      ->type_name("N")->capture_default_str();
  plan_cmd->add_option("-s,--seqlen", plan_seqlens, "sequence lengths, comma-separated.")
      ->check(positive)->delimiter(',')->type_name("LIST")->capture_default_str();
  plan_cmd->add_option("--dtype", plan_dtype, "activation dtype (fp32: 4 bytes, fp16/bf16: 2).")
      ->check(fatools::one_of(kDtypeNames))->type_name("TYPE")->capture_default_str();
  plan_cmd->add_option("--mode", mode, "inference (prefill, KV cache kept) or training "
                       "(activations kept for the backward).")
      ->check(fatools::one_of({"inference", "training"}))->type_name("MODE")->capture_default_str();
  plan_cmd->add_flag("--dropout", plan_args.in.dropout,
                     "training with attention dropout: standard attention also keeps its mask.");
  plan_cmd->add_option("--memory-gib", plan_args.memory_gib,
                       "also print the largest seqlen whose attention memory fits this many GiB.")
      ->check(fatools::positive_number())->type_name("GIB");
  plan_cmd->add_option("--json", plan_args.json, "write the table as JSON to this file.")
      ->check(fatools::writable())->type_name("PATH");

  ArchArgs arch;
  std::string arch_model_name, arch_mask = "auto", arch_dtype = "auto";
  std::vector<std::string> gpu_keys;
  for (const ArchGpu& g : arch_model().gpus) gpu_keys.push_back(g.key);
  CLI::App* arch_cmd = app.add_subcommand(
      "arch", "the support matrix and the modeled time, TFLOP/s and memory of standard vs flash "
              "attention per GPU (modeled: calibrated on H200 measurements)");
  arch_cmd->add_option("--gpu", arch.gpus, fmt::format("GPUs, comma-separated: {} (default: all).",
                                                       fmt::join(gpu_keys, ", ")))
      ->check(fatools::one_of(gpu_keys))->delimiter(',')->type_name("LIST");
  arch_cmd->add_option("--op", arch.ops, "passes, comma-separated: fwd, bwd, fwdbwd.")
      ->check(fatools::one_of(kOps))->delimiter(',')->type_name("LIST")->capture_default_str();
  arch_cmd->add_option("--model", arch_model_name, "a preset of `fa-bench plan --list-models`: its "
                       "heads, kv heads, head dim and layers.")->type_name("NAME");
  arch_cmd->add_option("-b,--batch", arch.shape.b, "batch size.")->check(positive)
      ->type_name("N")->capture_default_str();
  arch_cmd->add_option("--heads", arch.shape.h, "query heads.")->check(positive)
      ->type_name("N")->capture_default_str();
  arch_cmd->add_option("--kv-heads", arch.shape.h_kv, "key/value heads, dividing --heads "
                       "(default: --heads).")->check(positive)->type_name("N");
  arch_cmd->add_option("-s,--seqlen", arch.shape.s_q, "query sequence length.")->check(positive)
      ->type_name("N")->capture_default_str();
  arch_cmd->add_option("--seqlen-k", arch.shape.s_k, "key sequence length (default: --seqlen).")
      ->check(positive)->type_name("N");
  arch_cmd->add_option("-d,--head-dim", arch.shape.d, "head dimension (1..256).")->check(head_dim)
      ->type_name("N")->capture_default_str();
  arch_cmd->add_option("--layers", arch.layers, "layers the times are summed over (default: 1, or "
                       "the preset's).")->check(positive)->type_name("N");
  arch_cmd->add_option("--mask", arch_mask, "full, causal, or auto (causal with --model, full "
                       "otherwise).")->check(fatools::one_of({"auto", "full", "causal"}))
      ->type_name("MASK")->capture_default_str();
  arch_cmd->add_option("--dtype", arch_dtype, "bf16, fp16, or auto (each GPU's grid dtype: bf16, "
                       "fp16 on Turing, which has no bf16 tensor cores).")
      ->check(fatools::one_of({"auto", "bf16", "fp16"}))->type_name("TYPE")->capture_default_str();
  arch_cmd->add_option("--json", arch.json, "write the support matrix and the rows as JSON.")
      ->check(fatools::writable())->type_name("PATH");
  arch_cmd->add_option("--csv", arch.csv, "write the rows as CSV (RFC 4180).")
      ->check(fatools::writable())->type_name("PATH");
  arch_cmd->add_option("--chart", arch.chart, "write an SVG bar chart of the rows' TFLOP/s "
                       "(standard and flash per pass and GPU; with --measure, this machine's too).")
      ->check(fatools::writable())->type_name("PATH");
  arch_cmd->add_flag("--measure", arch.measure, "also time the shape on this machine (one layer's "
                     "call, standard and flash, as `run` times it) and, where this machine's GPU "
                     "is one of the model's, show the model's error against it.");
  DeviceDefaults arch_dd(arch_cmd);
  add_timing(arch_dd, arch_cmd, timing, device, progress);

  if (const int rc = fatools::parse(app, argc, argv); rc >= 0) return rc;
  out.command.clear();
  for (int i = 0; i < argc; ++i) out.command += (i ? " " : "") + std::string(argv[i]);

  try {
    if (arch_cmd->parsed()) {
      if (!arch_model_name.empty()) {
        const ModelShape* m = find_preset(arch_model_name);
        if (!m) return usage_error("--model '" + arch_model_name + "' is not a preset (see plan --list-models)");
        if (arch_cmd->count("--heads") + arch_cmd->count("--kv-heads") + arch_cmd->count("--head-dim") > 0)
          return usage_error("--model excludes --heads/--kv-heads/--head-dim");
        arch.model = m->name;
        arch.shape.h = m->heads;
        arch.shape.h_kv = m->kv_heads;
        arch.shape.d = m->head_dim;
        if (arch_cmd->count("--layers") == 0) arch.layers = m->layers;
      }
      if (arch.shape.d > 256)
        return usage_error(fmt::format("--model: head_dim {} is above 256", arch.shape.d));
      if (arch.shape.h % arch.shape.kv_heads())
        return usage_error(fmt::format("--kv-heads={} must divide --heads={}", arch.shape.kv_heads(), arch.shape.h));
      arch.shape.causal = arch_mask == "causal" || (arch_mask == "auto" && !arch.model.empty());
      arch.shape.dtype = arch_dtype == "auto" ? "" : arch_dtype;
      arch.command = out.command;
      if (arch.measure) {
        if (device == "cuda" && !cuda_available())
          return usage_error(kNoCuda);
        timing.cuda = device == "cuda" || (device == "auto" && cuda_available());
        arch_dd.apply(timing.cuda);
        arch.timing = timing;
      }
      return cmd_arch(arch);
    }
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
          return usage_error(fmt::format("--kv-heads={} must divide --heads={}", custom.kv_heads, custom.heads));
        plan_args.in.model = custom;
      }
      plan_args.in.elem_bytes = dtype_bytes(dtype_from_name(plan_dtype));
      plan_args.in.training = mode == "training";
      if (plan_args.in.dropout && !plan_args.in.training)
        return usage_error("--dropout applies to --mode training only");
      plan_args.seqlens = plan_seqlens;
      return cmd_plan(plan_args);
    }
    if (device == "cuda" && !cuda_available())
      return usage_error(kNoCuda);
    timing.cuda = device == "cuda" || (device == "auto" && cuda_available());
    timing.live = progress == "on" || (progress == "auto" && isatty(STDERR_FILENO));
    for (DeviceDefaults* dd : {&run_dd, &sweep_dd, &cmp_dd}) dd->apply(timing.cuda);
    if (run_cmd->parsed()) {
      const int64_t hkv = run.h_kv ? run.h_kv : run.h;
      if (run.h % hkv)
        return usage_error(fmt::format("--kv-heads={} must divide --heads={}", hkv, run.h));
      return cmd_run(run, timing, out);
    }
    if (sweep_cmd->parsed()) {
      for (int64_t d : sweep.dims)
        if (sweep.hidden % d)
          return usage_error(fmt::format("--dims: {} does not divide --hidden={}", d, sweep.hidden));
      return cmd_sweep(sweep, timing, out);
    }
    return cmd_compare(cmp, timing, out);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fa-bench: {}\n", e.what()).c_str(), stderr);
    return 1;
  }
}
