// CPU FlashAttention forward: tiled K·Qᵀ, online softmax in fp32, P·V, never materialising the
// (seqlen_q x seqlen_k) score matrix. One task = (batch, head, block of kFwdBlockM query rows);
// OpenMP spreads tasks over threads, each with its own scratch carved from the workspace.
//
// Built once per instruction set (FA_CPU_ISA = generic / avx2 / avx512).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/mask.h"
#include "core/philox.h"
#include "cpu/scratch.h"
#include "cpu/tile.h"

namespace fa::cpu::FA_CPU_ISA {
namespace {

// The block is held transposed: Sᵀ = K (Q scale)ᵀ is (keys x queries), so each query's softmax
// statistics (max, sum, rescale factor) are lanes of a vector and the online softmax runs
// kLanes queries at a time with no horizontal reductions. K and V tiles are used as loaded
// (row-major, no per-query-block transpose); Q is transposed once per task, for all its key
// tiles; O += P V reads Pᵀ through gemm_at.
struct ForwardScratch {
  float* qt;     // (dp, kFwdLd)           (Q * softmax_scale)ᵀ, kFwdBlockM columns used
  float* k;      // (kBlockN, dp)
  float* v;      // (kBlockN, dp)
  float* st;     // (kBlockN, kFwdLd)      logits, then probabilities, transposed
  float* o;      // (kFwdBlockM, dp)       unnormalised output accumulator
  float* m;      // (kFwdBlockM)           running row max of the logits
  float* l;      // (kFwdBlockM)           running row sum of exp(logit - m)
  float* alpha;  // (kFwdBlockM)           this key tile's rescale factor of O

  ForwardScratch(Arena& a, int64_t dp) {
    qt = a.floats(dp * kFwdLd);
    o = a.floats(kFwdBlockM * dp);
    k = a.floats(kBlockN * dp);
    v = a.floats(kBlockN * dp);
    st = a.floats(kBlockN * kFwdLd);
    m = a.floats(kFwdBlockM);
    l = a.floats(kFwdBlockM);
    alpha = a.floats(kFwdBlockM);
  }
};
static_assert(kFwdBlockM % kLanes == 0, "the softmax runs whole vectors of queries");

// Online softmax of one key tile for queries [0, qn) (qn a multiple of kLanes), kLanes queries
// at a time: m <- max(m, column max of Sᵀ), Sᵀ <- exp(Sᵀ - m), l <- alpha l + column sum, with
// alpha = exp(m_old - m) (exactly 1 where the max did not move), kept for O.
inline void online_softmax(const ForwardScratch& w, int64_t qn) {
  constexpr int64_t ld = kFwdLd;
  for (int64_t c = 0; c < qn; c += kLanes) {
    const fvec m_old = vload(w.m + c);
    fvec m_new = m_old;
    for (int64_t j = 0; j < kBlockN; ++j) {
      const fvec x = vload(w.st + j * ld + c);
      m_new = x > m_new ? x : m_new;
    }
    // A query that has seen no visible key yet keeps m = -inf; use 0 so exp gives 0, not NaN.
    const fvec m_use = m_new == vsplat(kNegInf) ? vsplat(0.f) : m_new;
    // Subtract before scaling by log2(e): with |logits| ~ 1e4 the difference is exact where
    // the two products would each round to ~1e-3.
    fvec sum{};
    for (int64_t j = 0; j < kBlockN; ++j) {
      float* s = w.st + j * ld + c;
      const fvec e = exp2_approx((vload(s) - m_use) * kLog2e);
      vstore(s, e);
      sum += e;
    }
    const fvec alpha = exp2_approx((m_old - m_use) * kLog2e);
    vstore(w.alpha + c, alpha);
    vstore(w.l + c, vload(w.l + c) * alpha + sum);
    vstore(w.m + c, m_new);
  }
}

template <typename T>
void forward_block(const Params& p, const ForwardScratch& w, int64_t b, int64_t h, int64_t row0) {
  constexpr int64_t ld = kFwdLd;  // of qt and st
  const Sequence sq = p.sequence(b);
  const int64_t rows = std::min(kFwdBlockM, sq.len_q - row0);
  const int64_t qn = round_up(rows, kLanes);  // query columns of Sᵀ, whole vectors
  const int64_t d = p.head_dim, dp = pad_cols(d);
  const int64_t hk = h / p.group();
  const Visibility vis{sq.diag, p.window_left, p.window_right};
  const Logit<float> logit{p.softcap, p.alibi_slope(b, h), sq.diag};
  const bool transform = p.softcap > 0.f || logit.alibi_slope != 0.f;
  const bool biased = p.bias.kind != Params::Bias::Kind::None;
  const int64_t bias_key0 = sq.k_start - p.seq(b).k_start;  // a split part's first key
  const bool dropout = p.dropout_p > 0.f;
  const DropoutStream drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const uint32_t bh = uint32_t(b * p.heads_q + h);

  // fp8: q's and k's descales fold into the scale of Q, v's into the normalisation below (each
  // 1 for other dtypes: the same bits as without them). Padding queries [rows, qn) are zero
  // columns: finite logits whose results are never stored.
  const float q_scale = p.softmax_scale * p.q_descale.at(b, hk) * p.k_descale.at(b, hk);
  load_rows_t<T>([&](int64_t r) { return p.q.at<T>(b, sq.q_start + row0 + r, h); }, rows, qn, d,
                 dp, q_scale, w.qt, ld);
  std::fill(w.o, w.o + qn * dp, 0.f);
  std::fill(w.m, w.m + qn, kNegInf);
  std::fill(w.l, w.l + qn, 0.f);

  // Only key tiles that some row of this block can see.
  const int64_t key_begin = vis.key_begin(row0, sq.len_k);
  const int64_t key_end = vis.key_end(row0 + rows, sq.len_k);
  for (int64_t n0 = key_begin / kBlockN * kBlockN; n0 < key_end; n0 += kBlockN) {
    const int64_t cols = std::min(kBlockN, sq.len_k - n0);
    // A tile a mask hides entirely leaves m, l and O as they are: skip it.
    if (biased && mask_hides_tile(p.bias, b, h, row0, rows, bias_key0 + n0, cols)) continue;
    // Dense or paged: key rows through Params::key_row.
    load_rows<T>(KeyRows<T>{p, p.k, b, sq.k_start + n0, hk}, cols, kBlockN, d, 1.f, w.k, dp);
    load_rows<T>(KeyRows<T>{p, p.v, b, sq.k_start + n0, hk}, cols, kBlockN, d, 1.f, w.v, dp);

    // Sᵀ (kBlockN, qn) = K (scale Q)ᵀ
    gemm(kBlockN, qn, dp, w.k, dp, w.qt, ld, w.st, ld, false);

    // Element (query r, key j) is st[j ld + r].
    if (transform)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t r = 0; r < rows; ++r)
          w.st[j * ld + r] = logit(w.st[j * ld + r], row0 + r, n0 + j);
    // softcap(scale q.k) + bias - ALiBi (the order commutes past softcap); masks -> -inf.
    if (biased) add_bias(p.bias, b, h, row0, rows, bias_key0 + n0, cols, w.st, 1, ld);
    // The common path (a full tile inside every row's window) carries no mask arithmetic.
    const bool masked = cols < kBlockN || !vis.block_unmasked(row0, row0 + rows, n0, n0 + cols);
    if (masked)
      for (int64_t j = 0; j < kBlockN; ++j)
        for (int64_t r = 0; r < rows; ++r)
          if (j >= cols || !vis.visible(row0 + r, n0 + j)) w.st[j * ld + r] = kNegInf;

    online_softmax(w, qn);
    for (int64_t r = 0; r < qn; ++r) {
      const float alpha = w.alpha[r];
      if (alpha == 1.f) continue;  // the max did not move
      float* o = w.o + r * dp;
      for (int64_t c = 0; c < dp; ++c) o[c] *= alpha;
    }
    if (dropout)  // l is the undropped normaliser; dropout acts on what P·V sees
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; j += DropoutStream::kCols) {
          const uint32_t bits = drop.keep_row32(bh, uint32_t(row0 + r), uint32_t(n0 + j));
          for (int64_t t = 0; t < int64_t(DropoutStream::kCols) && j + t < cols; ++t) {
            float& x = w.st[(j + t) * ld + r];
            x = (bits >> t) & 1u ? x * drop.keep_scale : 0.f;
          }
        }

    // O (qn, dp) += P V, P read from Pᵀ
    gemm_at(qn, dp, kBlockN, w.st, ld, w.v, dp, w.o, dp, true);
  }

  // Normalise; a row with no visible key outputs 0 and lse = -inf (when the caller wants it).
  const float v_descale = p.v_descale.at(b, hk);
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = w.l[r] == 0.f;
    const float inv = empty ? 0.f : v_descale / w.l[r];
    float* o = w.o + r * dp;
    for (int64_t c = 0; c < d; ++c) o[c] *= inv;
    if (p.lse.data) p.lse.at(b, h, sq.q_start + row0 + r) = empty ? kNegInf : w.m[r] + std::log(w.l[r]);
  }
  store_rows_as(p.out, b, sq.q_start + row0, rows, h, d, w.o, dp, 1.f);  // out's own dtype
}

template <typename T>
void forward(const Params& p, void* workspace, size_t bytes, int threads) {
  const int64_t m_blocks = (p.seqlen_q + kFwdBlockM - 1) / kFwdBlockM;
  const int64_t tasks = p.batch * p.heads_q * m_blocks;
  const size_t per_thread = forward_thread_bytes(p).bytes("the CPU forward's scratch");
#pragma omp parallel num_threads(threads)
  {
    Arena arena(static_cast<char*>(workspace), bytes);
    arena.skip(per_thread * size_t(omp_get_thread_num()));
    const ForwardScratch w(arena, pad_cols(p.head_dim));
    // Dynamic: causal and window blocks differ in cost by up to seqlen_k / kBlockN.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t mb = t % m_blocks, h = (t / m_blocks) % p.heads_q, b = t / (m_blocks * p.heads_q);
      if (mb * kFwdBlockM < p.seq(b).len_q) forward_block<T>(p, w, b, h, mb * kFwdBlockM);
    }
  }
}

}  // namespace

void flash_forward(const Params& p, void* workspace, size_t bytes, int threads) {
  switch (p.dtype) {
    case DType::F32: return forward<float>(p, workspace, bytes, threads);
    case DType::F16: return forward<half_t>(p, workspace, bytes, threads);
    case DType::BF16: return forward<bfloat16_t>(p, workspace, bytes, threads);
    case DType::E4M3: return forward<e4m3_t>(p, workspace, bytes, threads);
    case DType::F64: break;
  }
}

}  // namespace fa::cpu::FA_CPU_ISA
