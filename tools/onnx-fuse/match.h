// Matching: from a Softmax (or an ONNX Attention node) to a plan for one FlashAttention node, or
// a refusal that says why. Nothing here edits the graph.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "analysis.h"
#include "fuse.h"
#include "views.h"

namespace fa_onnx {

struct Refusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Plan {
  Outcome outcome;              // attributes filled; fused / reason set by the caller
  Source q, k, v;               // where the node reads its inputs
  std::string layout;           // q's, k's and v's (and the node output's)
  int32_t dtype = 0;            // of q, k, v and the node output
  std::string sink;             // the tensor the node (through sink_transpose / sink_cast) produces
  bool sink_transpose = false;  // node output bshd, sink bhsd
  int32_t sink_dtype = 0;       // a Cast when it differs from dtype
  int sink_producer = -1;       // the node that produced `sink`, replaced by ours
};

Plan match_softmax(const Graph& g, Analysis& a, int node);
Plan match_attention_node(const Graph& g, Analysis& a, int node);

}  // namespace fa_onnx
