// Overflow-checked size arithmetic. Every product of sizes, strides and element widths that
// becomes an element count, a byte span or a workspace size goes through Checked, so that a
// hostile size is refused with FA_ERROR_SIZE instead of wrapping into a small allocation (the
// workspace query and the run compute their sizes with the same Checked expressions and cannot
// disagree). Host code only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/error.h"

namespace fa {

// A non-negative int64 that remembers whether any step of its computation overflowed.
class Checked {
 public:
  constexpr Checked(int64_t v) : v_(v), ok_(v >= 0) {}  // NOLINT: sizes convert implicitly

  friend Checked operator*(Checked a, Checked b) {
    Checked r(0);
    r.ok_ = a.ok_ && b.ok_ && !__builtin_mul_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  friend Checked operator+(Checked a, Checked b) {
    Checked r(0);
    r.ok_ = a.ok_ && b.ok_ && !__builtin_add_overflow(a.v_, b.v_, &r.v_);
    return r;
  }
  Checked& operator*=(Checked b) { return *this = *this * b; }
  Checked& operator+=(Checked b) { return *this = *this + b; }

  // The largest multiple of m (> 0) not above the value.
  Checked round_down(int64_t m) const {
    Checked r = *this;
    r.v_ = v_ / m * m;
    return r;
  }

  bool ok() const { return ok_; }
  // The value, or FA_ERROR_SIZE naming what was being computed ("q's element count").
  int64_t value(const char* what) const {
    if (!ok_) fail(FA_ERROR_SIZE, what, " overflows 64 bits: the sizes are too large");
    return v_;
  }
  size_t bytes(const char* what) const { return size_t(value(what)); }

 private:
  int64_t v_;
  bool ok_;
};

// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace fa
