#include "plan.h"

#include <algorithm>
#include <cctype>

namespace fabench {
namespace {

constexpr double kLseBytes = 4;    // fp32 log-sum-exp per (batch, head, row)
constexpr double kAccumBytes = 4;  // fp32 dQ accumulator element of the flash backward
constexpr double kMaskBytes = 1;   // one byte per score element for a stored dropout mask

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<ModelShape>& model_presets() {
  // name, layers, hidden, heads, kv heads, head dim
  static const std::vector<ModelShape> presets = {
      {"gpt2", 12, 768, 12, 12, 64},
      {"gpt2-xl", 48, 1600, 25, 25, 64},
      {"llama-2-7b", 32, 4096, 32, 32, 128},
      {"llama-2-13b", 40, 5120, 40, 40, 128},
      {"llama-2-70b", 80, 8192, 64, 8, 128},
      {"llama-3-8b", 32, 4096, 32, 8, 128},
      {"llama-3-70b", 80, 8192, 64, 8, 128},
      {"mistral-7b", 32, 4096, 32, 8, 128},
      {"qwen2-7b", 28, 3584, 28, 4, 128},
      {"gemma-7b", 28, 3072, 16, 16, 256},
  };
  return presets;
}

const ModelShape* find_preset(const std::string& name) {
  const std::string want = lower(name);
  for (const ModelShape& m : model_presets())
    if (m.name == want) return &m;
  return nullptr;
}

PlanResult plan(const PlanInput& in) {
  const ModelShape& m = in.model;
  const double b = double(in.batch), s = double(in.seqlen), e = double(in.elem_bytes);
  const double q_or_o = b * s * double(m.heads * m.head_dim) * e;
  const double k_or_v = b * s * double(m.kv_heads * m.head_dim) * e;
  const double scores = b * double(m.heads) * s * s;
  const double lse = b * double(m.heads) * s * kLseBytes;
  PlanResult r;
  if (in.training) {
    r.standard.kept = 2 * q_or_o + 2 * k_or_v + scores * e + (in.dropout ? scores * kMaskBytes : 0);
    r.standard.transient = 2 * scores * e;
    r.flash.kept = 2 * q_or_o + 2 * k_or_v + lse;
    r.flash.transient = b * s * double(m.heads * m.head_dim) * kAccumBytes;
  } else {
    r.standard.kept = r.flash.kept = 2 * k_or_v;
    r.standard.transient = 2 * scores * e;
    r.flash.transient = lse;
  }
  const double layers = double(m.layers);
  r.standard_model = layers * r.standard.kept + r.standard.transient;
  r.flash_model = layers * r.flash.kept + r.flash.transient;
  return r;
}

int64_t max_seqlen(PlanInput in, double budget_bytes, bool flash, int64_t step, int64_t limit) {
  auto fits = [&](int64_t s) {
    in.seqlen = s;
    const PlanResult r = plan(in);
    return (flash ? r.flash_model : r.standard_model) <= budget_bytes;
  };
  // Memory grows monotonically with s: binary search over multiples of step.
  int64_t lo = 0, hi = limit / step;
  if (!fits(step)) return 0;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid * step))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * step;
}

}  // namespace fabench
