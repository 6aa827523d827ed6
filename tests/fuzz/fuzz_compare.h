// Flash against the reference on the same accepted call: how far apart a correct pair can be,
// and the element-by-element comparison.
//
// The tolerance is a bound derived before looking at the result, never a fraction of what came
// out (an output that cancels to ~0, e.g. dQ when every key row is the same, would make such a
// rule fire on rounding noise). Inputs are |x| <= M by construction; N_x is the largest 2-norm
// of a head_dim row of input x. Then
//   R = |scale| N_q N_k + max|slope| (len_q + len_k) bounds the fp32 terms of a logit,
//   |logit| <= Lmax = R (with a softcap: min(|scale| N_q N_k, softcap) + the ALiBi term)
//   G = keep N_dO N_v bounds |dP_ij| = keep |dO_i . v_j| and |D_i| = |dO_i . out_i|
//   |out| <= keep M,   |dQ| <= |scale| M 2G,   |dK_j| <= |scale| M 2G C_j,   |dV_j| <= keep M C_j
// (keep = 1 / (1 - dropout_p)), where C_j = the sum over the kv head's query heads and rows i of
// P_ij, a column sum of the probabilities. The harness gets C_j from the library itself, as dV of
// one more reference backward with dout = 1 and no dropout (without it, C_j <= len_q * group).
//
// The backends read the same stored inputs and differ only in arithmetic (fp32 tiles against
// fp64) and in the rounding of what they store. With u = 2^-24, a flash logit is off by at most
// e_s = 2 (d + 2) u R (a d-term fp32 dot product and the scale; tanh passes its argument's error
// on where q.k cancels), a probability by a relative e_p = 2 e_s (logit and lse) +
// (len_q + len_k) u (the sums) + 1e-6 (the exp2 polynomial), and every output by at most
//   rel * bound,  rel = 4 u_dtype + 3 e_p + (d + len_q group + len_k) u
// (4 u_dtype: the backward's D reads the stored, rounded out, and both sides round their result),
// plus an underflow floor (Tolerance::floor); with a softcap c the gradients' rel also counts
// the slope of 1 - tanh²(x / c), up to 0.77 / c, times e_s. lse is off by at most
// 2 e_s + 1e-5 + u Lmax.
// An output's values are compared while its bound is far below the dtype's overflow and
// R <= 1e4; up to R = 1e30 only the classes (NaN, +-inf, finite) must agree; beyond that (scale * q
// overflowing fp32, where the flash backend's NaN is outside what fp32 kernels promise) nothing is.
#pragma once

#include <string>

#include "fuzz_case.h"

namespace fa_fuzz {

// Sizes of an accepted call as the library read them.
struct Problem {
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t max_len_q = 0, max_len_k = 0;     // real longest sequences
  double norm_q = 0, norm_k = 0, norm_v = 0, norm_dout = 0;  // largest row 2-norms
};

enum class Level { kNone, kClasses, kValues };

struct Tolerance {
  double lmax = 0;                         // bound of |logit|
  double raw = 0;                          // R: of the fp32 terms of a logit (before the softcap)
  double rel = 0;                          // times a bound below
  double out = 0, dq = 0, dk = 0, dv = 0;  // bounds of |value| (dk, dv: with C_j <= len_q group)
  double dk_per_colsum = 0, dv_per_colsum = 0;  // ... per unit of C_j
  double lse_abs = 0;                      // absolute, for lse
  double e_p = 0;                          // relative error of a probability
  double value_limit = 0;                  // bounds above this: classes at most
  double underflow = 0;                    // spacing of the dtype's subnormals
  // How closely an output whose |values| are below `bound` can be compared (lse: bound 0).
  Level level(double bound) const;
  // Absolute slack for underflow: fp32 intermediates below 2^-126 and fp16 subnormal results
  // lose the relative precision the rule above counts on.
  double floor(double bound) const;
};

Tolerance tolerance(const Case& c, const Problem& p);

// Largest |input| the harness writes for this case.
double input_magnitude(const Case& c);

// Compares t's elements in got against want; on the first mismatch returns false and describes
// it in *why. atol: the absolute tolerance (Level::kValues only).
// Per-element tolerance on top of atol: per_unit * |the weight tensor's element| at the same
// logical index (its own strides).
struct Weights {
  const TensorSpec* spec = nullptr;
  const uint8_t* data = nullptr;
  double per_unit = 0;
};

struct Stats {
  double max_ref = 0, max_err = 0;  // over the elements finite in both
};

// Compares t's elements in got against want; on the first mismatch returns false and describes
// it in *why. atol (+ weights): the tolerance of Level::kValues.
bool same(const TensorSpec& t, const uint8_t* got, const uint8_t* want, Level level, double atol,
          const Weights& weights, std::string* why, Stats* stats);

// Largest finite |element| of t, and the largest 2-norm of its rows (its last dimension).
double max_abs(const TensorSpec& t, const uint8_t* data);
double max_row_norm(const TensorSpec& t, const uint8_t* data);

// Whether distinct logical elements of t are distinct memory (else writes race for one slot,
// and two correct backends may leave different last values).
bool injective(const TensorSpec& t);

// Number of logical elements (t must be injective and allocated).
int64_t elements(const TensorSpec& t);

int64_t dtype_bytes(int32_t dtype);
float load(int32_t dtype, const uint8_t* data, int64_t index);

}  // namespace fa_fuzz
