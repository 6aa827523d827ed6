// What the passes know about a tensor without running the graph: its element type, its shape as
// symbolic sizes, the contents of small tensors (shape arithmetic, scalars), and, for attention
// masks, a "band" description. Everything is derived from the graph alone and memoised; an
// unknown answer is nullopt and makes the passes refuse, never guess.
//
// Soundness rests on one rule: facts are what must hold for the graph to run at all. Two sizes
// that an elementwise op broadcasts together are equal unless one is 1, so the result takes the
// non-1 one; a Slice whose end is a symbol is taken to end there (the exporters slice their mask
// buffers to the sequence length, which the model requires to fit the buffer).
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "expr.h"
#include "graph.h"

namespace fa_onnx {

// Contents of a small tensor: integers as symbolic sizes (shape tensors), or numbers.
struct Value {
  Dims dims;                  // its shape (constants)
  bool is_int = false;
  std::vector<Expr> ints;     // when is_int
  std::vector<double> nums;   // otherwise (floats, bools as 0/1)
  size_t size() const { return is_int ? ints.size() : nums.size(); }
};

// A mask that is one value inside a diagonal band and another outside it. Over the last two axes
// (rows i, cols j) an element is "in" when  lo <= j - i + shift <= hi  (lo / hi may be unbounded).
// Leading axes, if any, have size 1. Both values are numbers (bools as 0/1).
struct Band {
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  Dims dims;                     // full shape
  double in = 0, out = 0;
  int64_t lo = -kUnbounded, hi = kUnbounded;
  Expr shift;                    // 0 for masks built from the scores' own sizes (top-left)
  bool buffer = false;           // a constant buffer (slicing shifts it)
  bool uniform() const { return lo == -kUnbounded && hi == kUnbounded; }
};

class Analysis {
 public:
  explicit Analysis(const Graph& g) : g_(g) {}

  std::optional<int32_t> dtype(const std::string& t);
  std::optional<Dims> shape(const std::string& t);
  std::optional<Value> value(const std::string& t);
  // The single number a tensor holds (every element equal, every dim 1): a scalar operand.
  std::optional<double> scalar(const std::string& t);
  std::optional<Band> band(const std::string& t);

 private:
  const Graph& g_;
  std::map<std::string, std::optional<int32_t>> dtypes_;
  std::map<std::string, std::optional<Dims>> shapes_;
  std::map<std::string, std::optional<Value>> values_;
  std::map<std::string, std::optional<Band>> bands_;
  int depth_ = 0;

  static constexpr int kMaxDepth = 400;  // nested questions at most (deep or cyclic graphs)

  // A fact of tensor t from its cache, else from rule() (memoised; nullopt past kMaxDepth
  // nested questions, so a deep or cyclic graph makes the passes refuse).
  template <typename V, typename Rule>
  std::optional<V> memo(std::map<std::string, std::optional<V>>& cache, const std::string& t,
                        Rule&& rule) {
    auto it = cache.find(t);
    if (it != cache.end()) return it->second;
    if (++depth_ > kMaxDepth) { --depth_; return std::nullopt; }
    auto r = rule();
    --depth_;
    cache[t] = r;
    return r;
  }

  std::optional<int32_t> dtype_rule(const std::string& t);
  std::optional<Dims> shape_rule(const std::string& t);
  std::optional<Value> value_rule(const std::string& t);
  std::optional<Band> band_rule(const std::string& t);
  std::optional<std::vector<int64_t>> const_ints(const std::string& t);
  // The axes a Slice node's `count` starts apply to: its axes input, else 0 .. count - 1; nullopt
  // where the input is not a constant of that length.
  std::optional<std::vector<int64_t>> slice_axes(const onnx::NodeProto& n, size_t count);
  std::optional<Band> band_of_buffer(const onnx::TensorProto& p);
};

// Broadcast two shapes (numpy rules); nullopt when they cannot broadcast.
std::optional<Dims> broadcast(const Dims& a, const Dims& b);

}  // namespace fa_onnx
