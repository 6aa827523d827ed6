#include "expr.h"

#include <algorithm>

namespace fa_onnx {

Expr Expr::constant(int64_t v) {
  Expr e;
  e.add_term({}, v);
  return e;
}

Expr Expr::symbol(const std::string& name) {
  Expr e;
  e.add_term({name}, 1);
  return e;
}

void Expr::add_term(const Monomial& m, int64_t c) {
  if (c == 0) return;
  int64_t& slot = terms_[m];
  slot += c;
  if (slot == 0) terms_.erase(m);
}

std::optional<int64_t> Expr::const_value() const {
  if (terms_.empty()) return 0;
  if (terms_.size() == 1 && terms_.begin()->first.empty()) return terms_.begin()->second;
  return std::nullopt;
}

bool Expr::known_nonnegative() const {
  return std::all_of(terms_.begin(), terms_.end(), [](const auto& t) { return t.second >= 0; });
}

Expr Expr::operator+(const Expr& o) const {
  Expr r = *this;
  for (const auto& [m, c] : o.terms_) r.add_term(m, c);
  return r;
}

Expr Expr::operator-(const Expr& o) const {
  Expr r = *this;
  for (const auto& [m, c] : o.terms_) r.add_term(m, -c);
  return r;
}

Expr Expr::operator*(const Expr& o) const {
  Expr r;
  for (const auto& [ma, ca] : terms_)
    for (const auto& [mb, cb] : o.terms_) {
      Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end());
      r.add_term(m, ca * cb);
    }
  return r;
}

std::optional<Expr> Expr::divide_exact(const Expr& o) const {
  if (o.terms_.size() != 1) return std::nullopt;
  const auto& [dm, dc] = *o.terms_.begin();
  if (dc == 0) return std::nullopt;
  Expr r;
  for (const auto& [m, c] : terms_) {
    if (c % dc != 0) return std::nullopt;
    Monomial rest = m;
    for (const auto& s : dm) {
      auto it = std::find(rest.begin(), rest.end(), s);
      if (it == rest.end()) return std::nullopt;
      rest.erase(it);
    }
    r.add_term(rest, c / dc);
  }
  return r;
}

std::string Expr::str() const {
  if (terms_.empty()) return "0";
  std::string s;
  for (const auto& [m, c] : terms_) {
    std::string t;
    if (m.empty() || c != 1) t = std::to_string(c);
    for (const auto& v : m) t += (t.empty() || t == "-" ? "" : "*") + v;
    if (!s.empty()) s += (t[0] == '-') ? " - " + t.substr(1) : " + " + t;
    else s = t;
  }
  return s;
}

std::string dims_str(const Dims& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + d[i].str();
  return s + ")";
}

}  // namespace fa_onnx
