// fa-bench subcommands, separate from their command-line parsing (main.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch_model.h"
#include "measure.h"
#include "plan.h"
#include "record.h"

namespace fabench {

// Where results go and how they are labelled; shared by run, sweep and compare.
struct Output {
  std::string json, csv, commit, command;
};

// The structs' defaults are the GPU's (shared/BENCH.md's shapes and method); on the CPU the
// *_defaults(false) functions give fp32, smaller shapes and fewer repeats (commands.cpp says
// why), and main.cpp applies them to every flag the command line did not give.
struct Timing {
  bool cuda = false;
  bool live = false;  // the live progress line on stderr (progress.h)
  int warmup = 3, repeats = 30;
  double warmup_ms = 200;  // GPU: untimed calls go on until this much time has passed
};

struct RunArgs {
  std::vector<std::string> backends{"flashattn", "vanilla"};
  std::vector<std::string> ops{"fwd"};
  std::string dtype = "bf16";
  int64_t b = 1, h = 16, h_kv = 0, s_q = 1024, s_k = 0, d = 128;  // 0: like h / s_q
  bool causal = false;
};

struct SweepArgs {
  std::vector<std::string> backends{"flashattn", "vanilla"};
  std::vector<std::string> ops{"fwd", "bwd"};
  std::vector<std::string> dtypes{"bf16"};
  int64_t hidden = 2048, tokens = 16384;
  std::vector<int64_t> seqlens{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int64_t> dims{64, 128, 256};
  std::vector<std::string> causal{"no", "yes"};
};

struct CompareArgs {
  std::vector<std::string> ops{"fwd", "fwdbwd"};
  std::string dtype = "bf16";
  int64_t b = 1, h = 16, d = 128;
  std::vector<int64_t> seqlens{1024, 2048, 4096, 8192, 16384, 32768, 65536};
  bool causal = false;
};

Timing timing_defaults(bool cuda);
RunArgs run_defaults(bool cuda);
SweepArgs sweep_defaults(bool cuda);
CompareArgs compare_defaults(bool cuda);

fa_dtype dtype_from_name(const std::string& name);  // fp32, fp16, bf16

struct PlanArgs {
  PlanInput in;
  std::vector<int64_t> seqlens;  // rows of the table
  double memory_gib = 0;         // > 0: also the largest seqlen that fits this much
  std::string json;
};

struct ArchArgs {
  std::vector<std::string> gpus;  // keys; empty: every GPU of the model
  std::vector<std::string> ops{"fwd", "bwd"};
  AttnShape shape;
  int64_t layers = 1;  // times are for this many layers (a model preset's)
  std::string model;   // the preset's name, "" for a bare shape
  std::string json, csv, command;
  std::string chart;   // an SVG bar chart of the rows' TFLOP/s (arch_chart.h), "" for none
  bool measure = false;  // also time the shape here (one layer's call), beside the model
  Timing timing;         // the measurement's (timing_defaults of the device it runs on)
};

// Each returns the process exit code; tables go to stdout, progress to stderr.
int cmd_run(const RunArgs& a, const Timing& t, const Output& o);
int cmd_sweep(const SweepArgs& a, const Timing& t, const Output& o);
int cmd_compare(const CompareArgs& a, const Timing& t, const Output& o);
int cmd_plan(const PlanArgs& a);
int cmd_arch(const ArchArgs& a);  // arch.cpp
void list_models();

}  // namespace fabench
