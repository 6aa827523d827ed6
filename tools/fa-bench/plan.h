// fa-bench plan: attention activation memory of standard vs Flash attention for a model, and the
// longest sequence that fits. Pure arithmetic (no GPU), unit-tested in tests/fa_bench/.
//
// Notation: b batch, s sequence length, h query heads, h_kv key/value heads, d head dim, e bytes
// per element (2 for bf16/fp16, 4 for fp32), L layers. Per layer:
//   Q, O   : b*s*h*d*e each          K, V : b*s*h_kv*d*e each        A = b*h*s*s score elements
// Inference (prefill; one layer runs at a time, the KV cache of every layer stays):
//   kept      standard = flash = K + V (the KV cache)
//   transient standard = 2*A*e (S and P);  flash = b*h*s*4 (the fp32 LSE)
// Training (every layer keeps what its backward needs until the backward runs):
//   kept      standard = Q + K + V + O + A*e (P) [+ A bytes of dropout mask when dropout > 0]
//             flash    = Q + K + V + O + b*h*s*4 (LSE)
//   transient standard = 2*A*e (dP and dS of the layer being differentiated)
//             flash    = b*s*h*d*4 (the fp32 dQ accumulator)
// Per model: L * kept + transient (layers run one at a time). Weights, optimizer states and the
// rest of the network's activations are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fabench {

struct ModelShape {
  std::string name;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
};

// Published configurations (the models' config.json / papers).
const std::vector<ModelShape>& model_presets();
// Case-insensitive lookup; nullptr when unknown.
const ModelShape* find_preset(const std::string& name);

struct PlanInput {
  ModelShape model;
  int64_t batch = 1, seqlen = 0;
  int64_t elem_bytes = 2;
  bool training = false;
  bool dropout = false;
};

struct AttentionMemory {
  double kept = 0, transient = 0;  // bytes per layer
  double per_layer() const { return kept + transient; }
};

struct PlanResult {
  AttentionMemory standard, flash;  // per layer
  double standard_model = 0, flash_model = 0;  // L * kept + transient
};

PlanResult plan(const PlanInput& in);

// Largest seqlen (multiple of `step`) whose per-model total fits `budget_bytes`, for standard
// (flash = false) or Flash attention; 0 when not even `step` fits. Searches up to `limit`.
int64_t max_seqlen(PlanInput in, double budget_bytes, bool flash, int64_t step = 128,
                   int64_t limit = int64_t(1) << 30);

}  // namespace fabench
