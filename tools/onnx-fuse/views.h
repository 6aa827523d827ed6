// Following Q, K, V and the output through the copies around attention.
//
// Between a projection and the attention MatMuls an exporter writes Transposes, Reshapes (the
// dynamo exporter's Kᵀ is Reshape -> Transpose -> Reshape), GQA's Unsqueeze -> Expand -> Reshape,
// Casts and the scale's scalar Muls. Each is a view of its input: every axis of the result is a
// list of "atoms", axes of the source tensor (or broadcast axes), in row-major order. Walking such
// a chain forward from a candidate source tells which source axis is batch, heads, sequence and
// head_dim at the MatMul, and whether heads were repeated the way the kernel reads them (query
// head h -> kv head h / rep, i.e. the repeat axis inside the kv-head axis; Tile's h % heads_kv is
// refused). A chain that would split a source axis starts later, at that Reshape's output.
#pragma once

#include <string>
#include <vector>

#include "analysis.h"
#include "graph.h"

namespace fa_onnx {

// A tensor the fused node can read in place of the operand.
struct Source {
  std::string tensor;
  std::string layout;     // "bshd" or "bhsd"
  int32_t dtype = 0;
  Dims dims;              // in the tensor's own order
  Expr batch, seq, heads, head_dim;
  int64_t rep = 1;        // heads repeated this many times (GQA / MQA) on the way
  double scale = 1;       // scalar Mul / Div on the way (Q and K only)
  int distance = 0;       // ops between it and the operand
};

// What the operand's axes hold, in order.
enum class Operand { Q, KT, K, V };  // Q (b,h,s,d); Kᵀ (b,h,d,s); K, V (b,h,s,d)

// The sources the operand can be read from, farthest first. Scalar Muls are crossed for Q and
// K / Kᵀ only; repeats for K and V only.
std::vector<Source> trace_operand(const Graph& g, Analysis& a, const std::string& operand, Operand role);

// Tensors downstream of an attention output `out` (b, h, s, d) that hold the same values in a
// fused node's layout: single-consumer Transpose / Reshape / Cast / Identity chains.
struct Sink {
  std::string tensor;
  std::string layout;
  int32_t dtype = 0;
  int distance = 0;
};
std::vector<Sink> trace_output(const Graph& g, Analysis& a, const std::string& out);

}  // namespace fa_onnx
