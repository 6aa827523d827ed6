// CPU FlashAttention backward: recomputes P from Q, K and the saved LSE tile by tile, never
// materialising the (seqlen_q x seqlen_k) matrix.
//
// One task = (batch, query head). It owns its dQ rows outright (accumulated in fp32 over all key
// blocks), and produces that head's contribution to dK and dV key block by key block. With one
// query head per kv head the contribution is the answer and is written directly; under GQA each
// query head writes an fp32 partial and a second pass sums every kv head's group in a fixed
// order. No atomics and no order-dependent sums: the CPU backward is always deterministic.
//
// Built once per instruction set (FA_CPU_ISA = generic / avx2 / avx512).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/mask.h"
#include "core/philox.h"
#include "cpu/bias.h"
#include "cpu/element.h"
#include "cpu/scratch.h"
#include "cpu/tile.h"

namespace fa::cpu::FA_CPU_ISA {
namespace {

// Every GEMM's right-hand operand is packed into micro-kernel panels (tile.h) as it is loaded, so
// the micro-kernel reads it as one sequential stream: row-major, dO, Q and K have rows dp floats
// apart (512 bytes at d 128), which puts a 16-column panel's rows in 8 of L1's 64 sets (the
// forward measured 66-71 GFLOP/s unpacked against ~90 packed on that shape). The left-hand
// operands that are a (query, key) tile are read transposed (gemm_at_packed_b), so no tile is
// transposed.
struct BackwardScratch {
  float* dq_acc;   // (pad_rows(seqlen_q), dp)  dQ / softmax_scale, whole sequence
  float* delta;    // (pad_rows(seqlen_q))      D_i = rowsum(dO_i * O_i)
  float* kp;       // (bn, dp)      packed      K: dQ += dS K's B
  float* dk;       // (bn, dp)                  dK accumulator of the key block (final scale)
  float* dv;       // (bn, dp)                  dV accumulator of the key block
  float* ktp;      // (dp, bn)      packed      Kᵀ: S = (scale Q) Kᵀ's B
  float* vtp;      // (dp, bn)      packed      Vᵀ: dP = dO Vᵀ's B
  float* q;        // (pad_rows(seqlen_q), dp)  Q * softmax_scale, whole sequence (S's A)
  float* dout;     // (pad_rows(seqlen_q), dp)  dO, whole sequence (dP's A)
  float* qp;       // (pad_rows(seqlen_q), dp)  the same as packed_query_block()s: dK's B
  float* doutp;    // (pad_rows(seqlen_q), dp)  the same for dO: dV's B
  float* o_row;    // (dp)                      a row of O (for D)
  float* p;        // (kBlockM, bn)             logits, then P
  float* keep;     // (kBlockM, bn)             dropout factor: 0 (dropped) or 1 / (1 - p)
  float* ds;       // (kBlockM, bn)             dP, then dS
  float* slope;    // (kBlockM, bn)             d logit / d (scale q·k): softcap's 1 - tanh²
  float* pkeep;    // (kBlockM, bn)             P * keep (dropout only)
  float* lse;      // (kBlockM)

  // bn: the call's keys per step (backward_block_n), as backward_thread_bytes sizes them.
  BackwardScratch(Arena& a, int64_t rows_q, int64_t dp, int64_t bn) {
    dq_acc = a.floats(rows_q * dp);
    delta = a.floats(rows_q);
    kp = a.floats(bn * dp);
    dk = a.floats(bn * dp);
    dv = a.floats(bn * dp);
    ktp = a.floats(dp * bn);
    vtp = a.floats(dp * bn);
    q = a.floats(rows_q * dp);
    dout = a.floats(rows_q * dp);
    qp = a.floats(rows_q * dp);
    doutp = a.floats(rows_q * dp);
    o_row = a.floats(dp);
    p = a.floats(kBlockM * bn);
    keep = a.floats(kBlockM * bn);
    ds = a.floats(kBlockM * bn);
    slope = a.floats(kBlockM * bn);
    pkeep = a.floats(kBlockM * bn);
    lse = a.floats(kBlockM);
  }
};

// Rows [m0, m0 + kBlockM) of a whole-sequence (rows, dp) matrix, packed as their own
// (pad_rows(rows in the block), dp) matrix at the same offset m0 dp: a query block as a GEMM's B.
inline void pack_query_blocks(const float* src, int64_t len_q, int64_t dp, float* dst) {
  for (int64_t m0 = 0; m0 < len_q; m0 += kBlockM) {
    const int64_t rows_pad = pad_rows(std::min(kBlockM, len_q - m0));
    load_rows_packed<float>([&](int64_t r) { return src + (m0 + r) * dp; }, rows_pad, rows_pad,
                            dp, dp, 1.f, dst + m0 * dp);
  }
}

// Where a task's dK / dV rows go: the outputs directly, or fp32 partials (GQA).
struct KvSink {
  float* dk_partial;  // (heads_q, total_k, d) or nullptr
  float* dv_partial;

  void write(const Params& p, int64_t b, int64_t h, int64_t k_row0, int64_t cols, const float* dk,
             const float* dv, int64_t dp) const {
    const int64_t d = p.head_dim;
    if (dk_partial == nullptr) {
      store_rows_as(p.dk, b, k_row0, cols, h, d, dk, dp, 1.f);  // their own dtype
      store_rows_as(p.dv, b, k_row0, cols, h, d, dv, dp, 1.f);
      return;
    }
    const int64_t packed_row0 = p.varlen() ? k_row0 : b * p.seqlen_k + k_row0;
    for (int64_t j = 0; j < cols; ++j) {
      float* pk = dk_partial + (h * p.total_k + packed_row0 + j) * d;
      float* pv = dv_partial + (h * p.total_k + packed_row0 + j) * d;
      for (int64_t c = 0; c < d; ++c) {
        pk[c] = dk[j * dp + c];
        pv[c] = dv[j * dp + c];
      }
    }
  }
};

template <typename T>
void backward_head(const Params& p, const BackwardScratch& w, const KvSink& sink, int64_t b,
                   int64_t h, float* dbias) {
  const Sequence sq = p.sequence(b);
  const int64_t d = p.head_dim, dp = pad_cols(d);
  const int64_t hk = h / p.group();
  const int64_t bn = backward_block_n(p);  // keys per step, as the scratch was sized
  const int64_t kv_head_out = sink.dk_partial ? h : hk;  // partials are per query head
  const Visibility vis{sq.diag, p.window_left, p.window_right};
  const Logit<float> logit{p.softcap, p.alibi_slope(b, h), sq.diag};
  const bool transform = p.softcap > 0.f || logit.alibi_slope != 0.f;
  const bool softcap = p.softcap > 0.f;
  const bool biased = p.bias.kind != Params::Bias::Kind::None;
  const int64_t bias_key0 = sq.k_start - p.seq(b).k_start;
  // dbias: this task's partial (grad_shape[2] x grad_shape[3]; 1 where dbias sums over them).
  const int64_t dbias_rows = p.bias.grad_shape[2], dbias_cols = p.bias.grad_shape[3];
  if (dbias) std::fill(dbias, dbias + dbias_rows * dbias_cols, 0.f);
  const bool dropout = p.dropout_p > 0.f;
  const DropoutStream drop = DropoutStream::make(p.seed, p.offset, p.dropout_p);
  const uint32_t bh = uint32_t(b * p.heads_q + h);

  // Q (scaled) and dO of the whole sequence, converted once: every key block's steps read them
  // (loading them per step re-read them from memory for every key block: ~15% of the time).
  const int64_t rows_q = pad_rows(sq.len_q);
  load_tile<T>(p.q, b, sq.q_start, sq.len_q, rows_q, h, d, p.softmax_scale, w.q, dp);
  load_tile_as(p.dout, b, sq.q_start, sq.len_q, rows_q, h, d, 1.f, w.dout, dp);
  // D_i = rowsum(dO_i * O_i), from the stored (rounded) output as FlashAttention does; out in
  // its own dtype, a row at a time.
  for (int64_t i = 0; i < sq.len_q; ++i) {
    load_tile_as(p.out, b, sq.q_start + i, 1, 1, h, d, 1.f, w.o_row, dp);
    const float* dout = w.dout + i * dp;
    float acc = 0.f;
    for (int64_t c = 0; c < d; ++c) acc += w.o_row[c] * dout[c];
    w.delta[i] = acc;
  }
  pack_query_blocks(w.q, sq.len_q, dp, w.qp);
  pack_query_blocks(w.dout, sq.len_q, dp, w.doutp);
  std::fill(w.dq_acc, w.dq_acc + pad_rows(sq.len_q) * dp, 0.f);

  for (int64_t n0 = 0; n0 < sq.len_k; n0 += bn) {
    const int64_t cols = std::min(bn, sq.len_k - n0);
    std::fill(w.dk, w.dk + bn * dp, 0.f);
    std::fill(w.dv, w.dv + bn * dp, 0.f);
    const int64_t row_begin = vis.row_begin(n0, sq.len_q);
    const int64_t row_end = vis.row_end(n0 + cols, sq.len_q);
    if (row_begin < row_end) {
      const auto k_row = [&](int64_t r) { return p.k.at<T>(b, sq.k_start + n0 + r, hk); };
      const auto v_row = [&](int64_t r) { return p.v.at<T>(b, sq.k_start + n0 + r, hk); };
      load_rows_packed<T>(k_row, cols, bn, d, dp, 1.f, w.kp);
      load_rows_t_packed<T>(k_row, cols, bn, d, dp, 1.f, w.ktp);
      load_rows_t_packed<T>(v_row, cols, bn, d, dp, 1.f, w.vtp);
    }
    // No query row sees the block when row_begin == row_end (reachable with a q_shift that moves
    // every query past it: found by the fuzzer, dQ read the unloaded K tile): its dK, dV are 0.
    const int64_t m_end = row_begin < row_end ? row_end : 0;
    for (int64_t m0 = row_begin / kBlockM * kBlockM; m0 < m_end; m0 += kBlockM) {
      const int64_t rows = std::min(kBlockM, sq.len_q - m0);
      const int64_t rows_pad = pad_rows(rows);
      // A tile a mask hides entirely has P = 0: it adds nothing to dQ, dK, dV or dbias.
      if (biased && mask_hides_tile(p.bias, b, h, m0, rows, bias_key0 + n0, cols)) continue;
      const float* q = w.q + m0 * dp;        // (rows_pad, dp), zero rows past the sequence
      const float* dout = w.dout + m0 * dp;  // (rows_pad, dp)
      const float* qp = w.qp + m0 * dp;      // the same two, packed
      const float* doutp = w.doutp + m0 * dp;
      for (int64_t r = 0; r < rows_pad; ++r)
        w.lse[r] = r < rows ? p.lse.at(b, h, sq.q_start + m0 + r) : kNegInf;

      // S (rows_pad, bn) = (scale Q) Kᵀ, then logits and P = exp(logit - lse).
      gemm_packed_b(rows_pad, bn, dp, q, dp, w.ktp, w.p, bn, false);
      if (transform)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) {
            float* s = w.p + r * bn + j;
            *s = logit(*s, m0 + r, n0 + j, w.slope + r * bn + j);
          }
      if (biased) add_bias(p.bias, b, h, m0, rows, bias_key0 + n0, cols, w.p, bn);
      const bool masked = cols < bn || rows < kBlockM ||
                          !vis.block_unmasked(m0, m0 + rows, n0, n0 + cols);
      for (int64_t r = 0; r < rows_pad; ++r) {
        float* s = w.p + r * bn;
        // A row with no visible key (lse = -inf) has P = 0: use 0 so that exp gives 0, not NaN.
        const bool row_empty = w.lse[r] == kNegInf;
        const float lse = row_empty ? 0.f : w.lse[r];
        if (masked)
          for (int64_t j = 0; j < bn; ++j)
            if (row_empty || j >= cols || !vis.visible(m0 + r, n0 + j)) s[j] = kNegInf;
        exp_shifted(s, bn, lse);
        if (row_empty) std::fill(s, s + bn, 0.f);
      }
      // The forward's P·V saw P * keep: regenerate the keep-mask (the forward stored none).
      const float* pv = w.p;  // what P·V saw: P, or P * keep
      if (dropout) {
        std::fill(w.keep, w.keep + rows_pad * bn, 0.f);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; j += DropoutStream::kCols) {
            const uint32_t bits = drop.keep_row32(bh, uint32_t(m0 + r), uint32_t(n0 + j));
            for (int64_t t = 0; t < int64_t(DropoutStream::kCols) && j + t < cols; ++t)
              w.keep[r * bn + j + t] = (bits >> t) & 1u ? drop.keep_scale : 0.f;
          }
        for (int64_t e = 0; e < rows_pad * bn; ++e) w.pkeep[e] = w.p[e] * w.keep[e];
        pv = w.pkeep;
      }

      // dV (bn, dp) += (P * keep)ᵀ dO
      gemm_at_packed_b(bn, dp, rows_pad, pv, bn, doutp, w.dv, dp, true);
      // dP (rows_pad, bn) = dO Vᵀ
      gemm_packed_b(rows_pad, bn, dp, dout, dp, w.vtp, w.ds, bn, false);
      // dS = P * (dP * keep - D) * d logit/dx   (x = scale q·k)
      for (int64_t r = 0; r < rows_pad; ++r) {
        const float dr = r < rows ? w.delta[m0 + r] : 0.f;
        float* ds = w.ds + r * bn;
        const float* pr = w.p + r * bn;
        if (dropout) {
          const float* keep = w.keep + r * bn;
#pragma omp simd
          for (int64_t j = 0; j < bn; ++j) ds[j] = pr[j] * (ds[j] * keep[j] - dr);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < bn; ++j) ds[j] = pr[j] * (ds[j] - dr);
        }
        // d loss / d bias = d loss / d logit: dS before softcap's factor.
        if (dbias && r < rows) {
          float* acc = dbias + (dbias_rows == 1 ? 0 : m0 + r) * dbias_cols;
          if (dbias_cols == 1) {
            for (int64_t j = 0; j < cols; ++j) acc[0] += ds[j];
          } else {
            for (int64_t j = 0; j < cols; ++j) acc[n0 + j] += ds[j];
          }
        }
        if (softcap && r < rows) {
          const float* sl = w.slope + r * bn;
          for (int64_t j = 0; j < cols; ++j) ds[j] *= sl[j];
        }
      }
      // dQ (rows, dp) += dS K    (times softmax_scale when written)
      gemm_packed_b(rows_pad, dp, bn, w.ds, bn, w.kp, w.dq_acc + m0 * dp, dp, true);
      // dK (bn, dp) += dSᵀ (scale Q)   (times softmax_scale when written: x = scale q·k)
      gemm_at_packed_b(bn, dp, rows_pad, w.ds, bn, qp, w.dk, dp, true);
    }
    sink.write(p, b, kv_head_out, sq.k_start + n0, cols, w.dk, w.dv, dp);
  }
  store_rows_as(p.dq, b, sq.q_start, sq.len_q, h, d, w.dq_acc, dp, p.softmax_scale);
}

// dK, dV of kv head hk = the sum of its group's per-query-head partials, in head order.
void reduce_group_partials(const Params& p, const float* dk_partial, const float* dv_partial,
                           int threads) {
  const int64_t d = p.head_dim, g = p.group();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t row = 0; row < p.total_k; ++row) {
    // Packed row -> (batch, row in view) for View::at.
    const int64_t b = p.varlen() ? 0 : row / p.seqlen_k;
    const int64_t r = p.varlen() ? row : row % p.seqlen_k;
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      for (int64_t c = 0; c < d; ++c) {
        float sk = 0.f, sv = 0.f;
        for (int64_t i = 0; i < g; ++i) {
          sk += dk_partial[((hk * g + i) * p.total_k + row) * d + c];
          sv += dv_partial[((hk * g + i) * p.total_k + row) * d + c];
        }
        store_element(p.dk, b, r, hk, c, sk);  // in dk's / dv's own dtype
        store_element(p.dv, b, r, hk, c, sv);
      }
    }
  }
}

template <typename T>
void backward(const Params& p, void* workspace, size_t bytes, int threads) {
  Arena shared(workspace, bytes);
  KvSink sink{nullptr, nullptr};
  if (p.group() > 1) {
    // Sized by backward_shared_bytes, whose checked product bounds this one.
    sink.dk_partial = shared.floats(size_t(p.heads_q) * size_t(p.total_k) * size_t(p.head_dim));
    sink.dv_partial = shared.floats(size_t(p.heads_q) * size_t(p.total_k) * size_t(p.head_dim));
  }
  float* dbias_parts = nullptr;  // sized by backward_shared_bytes too
  if (p.bias.grad) dbias_parts = shared.floats(size_t(dbias_partial_elems(p).value("the dbias partials")));
  const size_t shared_used = shared.used();
  const size_t per_thread = backward_thread_bytes(p).bytes("the CPU backward's scratch");
  const int64_t tasks = p.batch * p.heads_q;
#pragma omp parallel num_threads(threads)
  {
    Arena arena(workspace, bytes);
    arena.skip(shared_used + per_thread * size_t(omp_get_thread_num()));
    const BackwardScratch w(arena, pad_rows(p.seqlen_q), pad_cols(p.head_dim), backward_block_n(p));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t b = t / p.heads_q, h = t % p.heads_q;
      backward_head<T>(p, w, sink, b, h,
                       dbias_parts ? dbias_partial(p, dbias_parts, b, h) : nullptr);
    }
  }
  if (p.group() > 1) reduce_group_partials(p, sink.dk_partial, sink.dv_partial, threads);
  if (dbias_parts) reduce_dbias(p, dbias_parts, threads);
}

}  // namespace

void flash_backward(const Params& p, void* workspace, size_t bytes, int threads) {
  switch (p.dtype) {
    case DType::F32: return backward<float>(p, workspace, bytes, threads);
    case DType::F16: return backward<half_t>(p, workspace, bytes, threads);
    case DType::BF16: return backward<bfloat16_t>(p, workspace, bytes, threads);
    case DType::F64: break;
    case DType::E4M3: break;  // forward only: validation refuses fp8 in the backward
  }
}

}  // namespace fa::cpu::FA_CPU_ISA
