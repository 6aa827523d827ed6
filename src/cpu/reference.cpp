#include "cpu/reference.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/fp8.h"
#include "core/mask.h"
#include "core/philox.h"
#include "cpu/bias.h"
#include "cpu/element.h"
#include "cpu/scratch.h"

namespace fa::cpu {
namespace {

// Round to the low-precision input type (identity for fp32 inputs); fp8 e4m3 as the GPU's
// cvt.rn.satfinite does (the naive fp8 baseline's P).
float round_to(DType t, float x) {
  switch (t) {
    case DType::F16: return to_float(to_half(x));
    case DType::BF16: return to_float(to_bf16(x));
    case DType::E4M3: return round_to_e4m3(x);
    default: return x;
  }
}

// Dropout factor of every (row, key) of one (batch, head): 0 or 1 / (1 - p).
template <typename Acc>
Acc keep_factor(const DropoutStream& drop, uint32_t bh, int64_t i, int64_t j) {
  return drop.keep(bh, uint32_t(i), uint32_t(j)) ? Acc(drop.keep_scale) : Acc(0);
}

// Rows [row0, row0 + rows) of head h of a view, densely into dst (rows, d) in Acc.
// Each element times `descale` (fp8 inputs' dequantization; 1 otherwise, which is exact).
template <typename Acc>
void gather(const View& v, int64_t b, int64_t row0, int64_t rows, int64_t h, int64_t d, Acc* dst,
            float descale = 1.f) {
  for (int64_t r = 0; r < rows; ++r) {
    const void* src = row_of(v, b, row0 + r, h);
    for (int64_t c = 0; c < d; ++c)
      dst[r * d + c] = Acc(load_element(v.dtype, src, c)) * Acc(descale);
  }
}
// The keys [0, len_k) of sequence sq, head h, of k or v (dense or paged), into dst (len_k, d),
// dequantized by `descale`.
template <typename Acc>
void gather_keys(const Params& p, const View& v, int64_t b, const Sequence& sq, int64_t h,
                 Acc* dst, float descale = 1.f) {
  const int64_t d = p.head_dim;
  for (int64_t r = 0; r < sq.len_k; ++r) {
    const void* src = key_row_of(p, v, b, sq.k_start + r, h);
    for (int64_t c = 0; c < d; ++c)
      dst[r * d + c] = Acc(load_element(v.dtype, src, c)) * Acc(descale);
  }
}

// P (len_q, len_k) of one (batch, query head) from dense Q (len_q, d) and K (len_k, d):
// normalised probabilities, 0 where masked; dlogit (if given) gets d logit / d x; lse_out[i]
// gets the row's log-sum-exp (-inf for a row with no visible key).
template <typename Acc>
void probabilities(const Params& p, const Sequence& sq, int64_t b, int64_t h, const Acc* Q,
                   const Acc* K, Acc* P, Acc* dlogit, Acc* lse_out) {
  const int64_t d = p.head_dim;
  const Visibility vis{sq.diag, p.window_left, p.window_right};
  const Logit<Acc> logit{Acc(p.softcap), Acc(p.alibi_slope(b, h)), sq.diag};
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const bool biased = p.bias.kind != Params::Bias::Kind::None;
  const int64_t bias_key0 = sq.k_start - p.seq(b).k_start;  // a split part's first key
  for (int64_t i = 0; i < sq.len_q; ++i) {
    const Acc* q = Q + i * d;
    Acc* s = P + i * sq.len_k;
    Acc mx = neg_inf;
    for (int64_t j = 0; j < sq.len_k; ++j) {
      if (dlogit) dlogit[i * sq.len_k + j] = 0;
      if (!vis.visible(i, j)) {
        s[j] = neg_inf;
        continue;
      }
      const Acc* k = K + j * d;
      Acc dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += q[c] * k[c];
      s[j] = logit(Acc(p.softmax_scale) * dot, i, j, dlogit ? dlogit + i * sq.len_k + j : nullptr);
      // softcap(scale q.k) + bias - ALiBi: a -inf bias (a mask's 0) hides the key.
      if (biased) s[j] += Acc(load_bias(p.bias, b, h, i, bias_key0 + j));
      mx = std::max(mx, s[j]);
    }
    if (mx == neg_inf) {  // no visible key
      std::fill(s, s + sq.len_k, Acc(0));
      lse_out[i] = neg_inf;
      continue;
    }
    Acc sum = 0;
    for (int64_t j = 0; j < sq.len_k; ++j) {
      s[j] = s[j] == neg_inf ? Acc(0) : std::exp(s[j] - mx);
      sum += s[j];
    }
    for (int64_t j = 0; j < sq.len_k; ++j) s[j] /= sum;
    lse_out[i] = mx + std::log(sum);
  }
}

int64_t matrix_elems(const Params& p) { return p.seqlen_q * p.seqlen_k; }

}  // namespace

// Scratch of one thread, block by block exactly as the loops below carve it (doubles at most),
// overflow-checked: the (seqlen_q, seqlen_k) matrices are the first to overflow.
Checked reference_forward_thread_bytes(const Params& p) {
  auto doubles = [](Checked n) { return Arena::checked_block_bytes(n * 2); };
  const Checked matrix = Checked(p.seqlen_q) * p.seqlen_k;
  return doubles(matrix)                                  // P
         + doubles(Checked(p.seqlen_q) * p.head_dim)      // Q
         + doubles(Checked(p.seqlen_k) * p.head_dim) * 2  // K, V
         + doubles(p.seqlen_q) + doubles(p.head_dim);     // lse, an output row
}
Checked reference_backward_shared_bytes(const Params& p) {
  return Arena::checked_block_bytes(dbias_partial_elems(p) * 2);  // doubles
}
Checked reference_backward_thread_bytes(const Params& p) {
  auto doubles = [](Checked n) { return Arena::checked_block_bytes(n * 2); };
  const Checked matrix = Checked(p.seqlen_q) * p.seqlen_k;
  return doubles(matrix) * 2                              // P, d logit
         + doubles(Checked(p.seqlen_q) * p.head_dim) * 2  // Q, dO
         + doubles(Checked(p.seqlen_k) * p.head_dim) * 4  // K, V, dK, dV
         + doubles(p.seqlen_q) + doubles(p.seqlen_k)      // lse, a dP row
         + doubles(p.head_dim) * 2;                       // dQ row, O row
}

namespace {

template <typename Acc>
Acc* take(Arena& a, int64_t n) {
  return reinterpret_cast<Acc*>(a.floats(size_t(n) * sizeof(Acc) / sizeof(float)));
}

}  // namespace

size_t reference_forward_workspace(const Params& p, int threads) {
  return (Checked(Arena::kAlign) + reference_forward_thread_bytes(p) * threads)
      .bytes("the reference forward's workspace size");
}

size_t reference_backward_workspace(const Params& p, int threads) {
  return (Checked(Arena::kAlign) + reference_backward_shared_bytes(p) +
          reference_backward_thread_bytes(p) * threads)
      .bytes("the reference backward's workspace size");
}

template <typename Acc>
void reference_forward(const Params& p, void* workspace, size_t bytes, int threads,
                       ReferenceOptions opts) {
  const size_t per_thread =
      reference_forward_thread_bytes(p).bytes("the reference forward's scratch");
  const DropoutStream drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const int64_t d = p.head_dim;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < p.batch * p.heads_q; ++t) {
    const int64_t b = t / p.heads_q, h = t % p.heads_q, hk = h / p.group();
    Arena arena(workspace, bytes);
    arena.skip(per_thread * size_t(omp_get_thread_num()));
    const Sequence sq = p.sequence(b);
    Acc* P = take<Acc>(arena, matrix_elems(p));
    Acc* Q = take<Acc>(arena, p.seqlen_q * d);
    Acc* K = take<Acc>(arena, p.seqlen_k * d);
    Acc* V = take<Acc>(arena, p.seqlen_k * d);
    Acc* lse = take<Acc>(arena, p.seqlen_q);
    Acc* o = take<Acc>(arena, d);
    // fp8: the attention of the dequantized tensors (descales 1 for other dtypes).
    gather(p.q, b, sq.q_start, sq.len_q, h, d, Q, p.q_descale.at(b, hk));
    gather_keys(p, p.k, b, sq, hk, K, p.k_descale.at(b, hk));
    gather_keys(p, p.v, b, sq, hk, V, p.v_descale.at(b, hk));
    probabilities<Acc>(p, sq, b, h, Q, K, P, nullptr, lse);
    const uint32_t bh = uint32_t(b * p.heads_q + h);
    for (int64_t i = 0; i < sq.len_q; ++i) {
      Acc* prow = P + i * sq.len_k;
      std::fill(o, o + d, Acc(0));
      for (int64_t j = 0; j < sq.len_k; ++j) {
        if (opts.round_p) prow[j] = Acc(round_to(p.dtype, float(prow[j])));
        if (p.dropout_p > 0.f) prow[j] *= keep_factor<Acc>(drop, bh, i, j);
        if (prow[j] == Acc(0)) continue;
        for (int64_t c = 0; c < d; ++c) o[c] += prow[j] * V[j * d + c];
      }
      for (int64_t c = 0; c < d; ++c) store_element(p.out, b, sq.q_start + i, h, c, double(o[c]));
      if (p.lse.data) p.lse.at(b, h, sq.q_start + i) = float(lse[i]);
    }
  }
}

template <typename Acc>
void reference_backward(const Params& p, void* workspace, size_t bytes, int threads,
                        ReferenceOptions opts) {
  const size_t per_thread =
      reference_backward_thread_bytes(p).bytes("the reference backward's scratch");
  const DropoutStream drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const Acc scale = Acc(p.softmax_scale);
  const int64_t d = p.head_dim;
  // dbias: per (batch, query head) partials at the workspace's start, summed after the loop.
  Arena shared(workspace, bytes);
  Acc* dbias_parts = take<Acc>(shared, dbias_partial_elems(p).value("the dbias partials"));
  const size_t shared_bytes =
      reference_backward_shared_bytes(p).bytes("the reference backward's dbias partials");
  const int64_t dbias_rows = p.bias.grad_shape[2], dbias_cols = p.bias.grad_shape[3];
  // One task per (batch, kv head): it owns dK, dV of that head and dQ of its query heads.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < p.batch * p.heads_kv; ++t) {
    const int64_t b = t / p.heads_kv, hk = t % p.heads_kv;
    Arena arena(workspace, bytes);
    arena.skip(shared_bytes + per_thread * size_t(omp_get_thread_num()));
    const Sequence sq = p.sequence(b);
    Acc* P = take<Acc>(arena, matrix_elems(p));
    Acc* G = take<Acc>(arena, matrix_elems(p));  // d logit / d x
    Acc* Q = take<Acc>(arena, p.seqlen_q * d);
    Acc* dO = take<Acc>(arena, p.seqlen_q * d);
    Acc* K = take<Acc>(arena, p.seqlen_k * d);
    Acc* V = take<Acc>(arena, p.seqlen_k * d);
    Acc* dK = take<Acc>(arena, p.seqlen_k * d);
    Acc* dV = take<Acc>(arena, p.seqlen_k * d);
    Acc* lse = take<Acc>(arena, p.seqlen_q);
    Acc* dP = take<Acc>(arena, p.seqlen_k);
    Acc* dq = take<Acc>(arena, d);
    Acc* o = take<Acc>(arena, d);
    gather_keys(p, p.k, b, sq, hk, K);
    gather_keys(p, p.v, b, sq, hk, V);
    std::fill(dK, dK + sq.len_k * d, Acc(0));
    std::fill(dV, dV + sq.len_k * d, Acc(0));
    for (int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
      gather(p.q, b, sq.q_start, sq.len_q, h, d, Q);
      gather(p.dout, b, sq.q_start, sq.len_q, h, d, dO);
      probabilities<Acc>(p, sq, b, h, Q, K, P, G, lse);
      const uint32_t bh = uint32_t(b * p.heads_q + h);
      Acc* dbias = p.bias.grad ? dbias_partial(p, dbias_parts, b, h) : nullptr;
      if (dbias) std::fill(dbias, dbias + dbias_rows * dbias_cols, Acc(0));
      for (int64_t i = 0; i < sq.len_q; ++i) {
        const Acc* prow = P + i * sq.len_k;
        const Acc* g = dO + i * d;
        // dP_ij = (dO_i · V_j) * keep_ij;  D_i = Σ_j P_ij dP_ij;  dV_j += P_ij keep_ij dO_i
        Acc D = 0;
        for (int64_t j = 0; j < sq.len_k; ++j) {
          dP[j] = 0;
          if (prow[j] == Acc(0)) continue;
          Acc dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += g[c] * V[j * d + c];
          const Acc keep = p.dropout_p > 0.f ? keep_factor<Acc>(drop, bh, i, j) : Acc(1);
          dP[j] = dot * keep;
          D += prow[j] * dP[j];
          // The same 16-bit P in dV = Pᵀ dO as in the forward's P·V (round_p).
          const Acc pv = opts.round_p ? Acc(round_to(p.dtype, float(prow[j]))) : prow[j];
          for (int64_t c = 0; c < d; ++c) dV[j * d + c] += pv * keep * g[c];
        }
        if (opts.stored_out_delta) {
          gather(p.out, b, sq.q_start + i, 1, h, d, o);
          D = 0;
          for (int64_t c = 0; c < d; ++c) D += g[c] * o[c];
        }
        // dS_ij = P_ij (dP_ij - D_i) d logit_ij, x = scale q·k:  dQ_i = scale Σ_j dS_ij K_j,
        // dK_j += scale dS_ij Q_i
        std::fill(dq, dq + d, Acc(0));
        // d loss / d bias_ij = d loss / d logit_ij = P_ij (dP_ij - D_i), summed over the rows
        // (and keys) dbias broadcasts.
        Acc* dbias_row = dbias ? dbias + (dbias_rows == 1 ? 0 : i) * dbias_cols : nullptr;
        for (int64_t j = 0; j < sq.len_k; ++j) {
          if (prow[j] == Acc(0)) continue;
          if (dbias_row) dbias_row[dbias_cols == 1 ? 0 : j] += prow[j] * (dP[j] - D);
          const Acc ds = prow[j] * (dP[j] - D) * G[i * sq.len_k + j];
          for (int64_t c = 0; c < d; ++c) {
            dq[c] += ds * K[j * d + c];
            dK[j * d + c] += scale * ds * Q[i * d + c];
          }
        }
        for (int64_t c = 0; c < d; ++c) store_element(p.dq, b, sq.q_start + i, h, c, double(scale * dq[c]));
      }
    }
    for (int64_t j = 0; j < sq.len_k; ++j)
      for (int64_t c = 0; c < d; ++c) {
        store_element(p.dk, b, sq.k_start + j, hk, c, double(dK[j * d + c]));
        store_element(p.dv, b, sq.k_start + j, hk, c, double(dV[j * d + c]));
      }
  }
  if (p.bias.grad) reduce_dbias(p, dbias_parts, threads);
}

template void reference_forward<double>(const Params&, void*, size_t, int, ReferenceOptions);
template void reference_forward<float>(const Params&, void*, size_t, int, ReferenceOptions);
template void reference_backward<double>(const Params&, void*, size_t, int, ReferenceOptions);
template void reference_backward<float>(const Params&, void*, size_t, int, ReferenceOptions);

}  // namespace fa::cpu
