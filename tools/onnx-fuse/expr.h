// Symbolic sizes: polynomials with integer coefficients over the graph's dimension symbols.
//
// A dimension is a constant (dim_value), a named symbol (dim_param "batch", shared by every tensor
// that names it: ONNX declares them equal), or a fresh symbol for an unnamed dynamic axis. Shape
// arithmetic in exported graphs (Shape -> Gather -> Mul -> Concat -> Reshape) stays polynomial,
// so two sizes are known equal exactly when their canonical polynomials are equal. Every symbol
// is a size, hence non-negative, which settles comparisons such as "dim == -1" in the exporters'
// Expand guards.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fa_onnx {

class Expr {
 public:
  Expr() = default;  // 0
  static Expr constant(int64_t v);
  static Expr symbol(const std::string& name);

  std::optional<int64_t> const_value() const;
  bool is_const() const { return const_value().has_value(); }
  // True when every coefficient is >= 0: the value is >= 0 for every assignment of sizes.
  bool known_nonnegative() const;

  Expr operator+(const Expr& o) const;
  Expr operator-(const Expr& o) const;
  Expr operator*(const Expr& o) const;
  // this / o when o divides every term exactly (o a single term); else nullopt.
  std::optional<Expr> divide_exact(const Expr& o) const;

  bool operator==(const Expr& o) const { return terms_ == o.terms_; }
  bool operator!=(const Expr& o) const { return !(*this == o); }
  std::string str() const;

 private:
  using Monomial = std::vector<std::string>;  // sorted symbol names; {} is the constant term
  std::map<Monomial, int64_t> terms_;         // no zero coefficients
  void add_term(const Monomial& m, int64_t c);
};

using Dims = std::vector<Expr>;
std::string dims_str(const Dims& d);

}  // namespace fa_onnx
