// The pass: find attention subgraphs, check that one FlashAttention node computes exactly what
// they compute, and replace them; pack the Q / K / V projections that feed a fused node.
//
// The node it writes (domain "flashattn", version 1):
//   FlashAttention(q, k, v) -> out            layout "bshd": (batch, seq, heads, head_dim) each,
//                                             "bhsd": (batch, heads, seq, head_dim); out like q
//   FlashAttention(qkv) -> out                layout "packed_qkv": qkv (batch, seq,
//                                             (num_heads + 2 num_kv_heads) head_dim), Q heads then
//                                             K heads then V heads; out (batch, seq, heads, head_dim)
// attributes: causal, window_left, window_right (-1 unbounded; bottom-right aligned, as the
// library's C ABI), softcap (0 off), scale (0 = 1/sqrt(head_dim)), num_heads, num_kv_heads, layout.
#pragma once

#include <string>
#include <vector>

#include "graph.h"

namespace fa_onnx {

struct Options {
  bool pack_qkv = true;
};

// One attention subgraph (a Softmax, or an Attention node) and what became of it.
struct Outcome {
  std::string anchor;     // the Softmax's / Attention's node name (or its output when unnamed)
  std::string pattern;    // "matmul-softmax-matmul" or "Attention"
  bool fused = false;
  std::string reason;     // why not, when refused
  // When fused:
  std::string node, layout, dtype;
  int64_t causal = 0, window_left = -1, window_right = -1, num_heads = 0, num_kv_heads = 0,
          head_dim = 0;
  double scale = 0, softcap = 0;
  std::vector<std::string> removed_ops;   // op types of the nodes that died, in graph order
  std::string packing;    // "packed from 3 projections", "packed from a Split", or why not
};

// Rewrites the model in place; returns one outcome per attention subgraph found.
std::vector<Outcome> fuse_model(onnx::ModelProto& model, const Options& opt);

}  // namespace fa_onnx
