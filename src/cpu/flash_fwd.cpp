// CPU FlashAttention forward: tiled K·Qᵀ, online softmax in fp32, P·V, never materialising the
// (seqlen_q x seqlen_k) score matrix. One task = (batch, head, forward_blocks_per_task blocks of
// kFwdBlockM query rows); OpenMP spreads tasks over threads, each with its own scratch carved from
// the workspace.
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
// kLanes queries at a time with no horizontal reductions. K is used as loaded (row-major, the
// GEMM's A); the GEMMs' B operands are packed into micro-kernel panels (tile.h) as they are
// loaded: Qᵀ once per task, for all its key tiles, V once per key tile. O += P V reads Pᵀ
// through gemm_at_packed_b.
//
// A task's query blocks (up to kFwdMaxBlocksPerTask) share each K / V tile it loads (scratch.h);
// each block keeps its own Qᵀ, O and statistics, and its own visible key range and masks.
struct QueryBlockScratch {
  float* qt;     // (dp, kFwdBlockM) packed (Q * softmax_scale)ᵀ, qn columns used
  float* o;      // (kFwdBlockM, dp)       unnormalised output accumulator
  float* m;      // (kFwdBlockM)           running row max of the logits
  float* l;      // (kFwdBlockM)           running row sum of exp(logit - m)
  float* alpha;  // (kFwdBlockM)           this key tile's rescale factor of O
};
struct ForwardScratch {
  QueryBlockScratch block[kFwdMaxBlocksPerTask];
  float* k;      // (kFwdBlockN, dp)
  float* v;      // (kFwdBlockN, dp) packed
  float* st;     // (kFwdBlockN, kFwdLd)   logits, then probabilities, transposed

  ForwardScratch(Arena& a, int64_t dp, int blocks) {
    for (int i = 0; i < blocks; ++i) {
      QueryBlockScratch& q = block[i];
      q.qt = a.floats(dp * kFwdBlockM);
      q.o = a.floats(kFwdBlockM * dp);
      q.m = a.floats(kFwdBlockM);
      q.l = a.floats(kFwdBlockM);
      q.alpha = a.floats(kFwdBlockM);
    }
    k = a.floats(kFwdBlockN * dp);
    v = a.floats(kFwdBlockN * dp);
    st = a.floats(kFwdBlockN * kFwdLd);
  }
};
static_assert(kFwdBlockM % kLanes == 0, "the softmax runs whole vectors of queries");

// Online softmax of one key tile for queries [0, qn) (qn a multiple of kLanes), kLanes queries
// at a time: m <- max(m, column max of Sᵀ), Sᵀ <- exp(Sᵀ - m), l <- alpha l + column sum, with
// alpha = exp(m_old - m) (exactly 1 where the max did not move), kept for O.
inline void online_softmax(float* __restrict st, const QueryBlockScratch& q, int64_t qn) {
  constexpr int64_t ld = kFwdLd;
  for (int64_t c = 0; c < qn; c += kLanes) {
    const fvec m_old = vload(q.m + c);
    fvec m_new = m_old;
    for (int64_t j = 0; j < kFwdBlockN; ++j) {
      const fvec x = vload(st + j * ld + c);
      m_new = x > m_new ? x : m_new;
    }
    // A query that has seen no visible key yet keeps m = -inf; use 0 so exp gives 0, not NaN.
    const fvec m_use = m_new == vsplat(kNegInf) ? vsplat(0.f) : m_new;
    // Subtract before scaling by log2(e): with |logits| ~ 1e4 the difference is exact where
    // the two products would each round to ~1e-3.
    fvec sum{};
    for (int64_t j = 0; j < kFwdBlockN; ++j) {
      float* s = st + j * ld + c;
      const fvec e = exp2_approx((vload(s) - m_use) * kLog2e);
      vstore(s, e);
      sum += e;
    }
    const fvec alpha = exp2_approx((m_old - m_use) * kLog2e);
    vstore(q.alpha + c, alpha);
    vstore(q.l + c, vload(q.l + c) * alpha + sum);
    vstore(q.m + c, m_new);
  }
}

// One task: query blocks [block0, block0 + blocks) of (batch b, head h).
template <typename T>
class ForwardTask {
 public:
  ForwardTask(const Params& p, const ForwardScratch& w, int64_t b, int64_t h, int64_t block0,
              int blocks)
      : p_(p), w_(w), b_(b), h_(h), blocks_n_(blocks), sq_(p.sequence(b)), d_(p.head_dim), dp_(pad_cols(d_)),
        hk_(h / p.group()), vis_{sq_.diag, p.window_left, p.window_right},
        logit_{p.softcap, p.alibi_slope(b, h), sq_.diag},
        transform_(p.softcap > 0.f || logit_.alibi_slope != 0.f),
        biased_(p.bias.kind != Params::Bias::Kind::None),
        bias_key0_(sq_.k_start - p.seq(b).k_start),  // a split part's first key
        drop_(DropoutStream::make(p.seed, p.offset, p.dropout_p)),
        bh_(uint32_t(b * p.heads_q + h)) {
    for (int i = 0; i < blocks_n_; ++i) {
      Block& blk = blocks_[i];
      blk.row0 = (block0 + i) * kFwdBlockM;
      blk.rows = std::clamp<int64_t>(sq_.len_q - blk.row0, 0, kFwdBlockM);
      blk.qn = round_up(blk.rows, kLanes);  // query columns of Sᵀ, whole vectors
      if (blk.rows == 0) continue;
      blk.key_begin = vis_.key_begin(blk.row0, sq_.len_k);
      blk.key_end = vis_.key_end(blk.row0 + blk.rows, sq_.len_k);
    }
  }

  void run() {
    int64_t key_begin = sq_.len_k, key_end = 0;  // the keys some block's row can see
    for (int i = 0; i < blocks_n_; ++i) {
      if (blocks_[i].rows == 0) continue;
      start(i);
      key_begin = std::min(key_begin, blocks_[i].key_begin);
      key_end = std::max(key_end, blocks_[i].key_end);
    }
    for (int64_t n0 = key_begin / kFwdBlockN * kFwdBlockN; n0 < key_end; n0 += kFwdBlockN) {
      const int64_t cols = std::min(kFwdBlockN, sq_.len_k - n0);
      bool sees[kFwdMaxBlocksPerTask] = {};
      bool any = false;
      for (int i = 0; i < blocks_n_; ++i) any |= sees[i] = sees_tile(blocks_[i], n0, cols);
      if (!any) continue;
      // Dense or paged: key rows through Params::key_row.
      load_rows<T>(KeyRows<T>{p_, p_.k, b_, sq_.k_start + n0, hk_}, cols, kFwdBlockN, d_, 1.f, w_.k,
                   dp_);
      load_rows_packed<T>(KeyRows<T>{p_, p_.v, b_, sq_.k_start + n0, hk_}, cols, kFwdBlockN, d_, dp_,
                          1.f, w_.v);
      for (int i = 0; i < blocks_n_; ++i)
        if (sees[i]) key_tile(i, n0, cols);
    }
    for (int i = 0; i < blocks_n_; ++i)
      if (blocks_[i].rows > 0) finish(i);
  }

 private:
  struct Block {
    int64_t row0 = 0, rows = 0, qn = 0;  // rows past the sequence: none (the block is idle)
    int64_t key_begin = 0, key_end = 0;  // the keys its rows can see
  };

  // Whether any row of the block can see a key of tile [n0, n0 + cols): a tile outside its
  // rows' windows, or one a mask hides entirely, leaves its m, l and O as they are.
  bool sees_tile(const Block& blk, int64_t n0, int64_t cols) const {
    if (blk.rows == 0 || n0 + cols <= blk.key_begin || n0 >= blk.key_end) return false;
    return !(biased_ &&
             mask_hides_tile(p_.bias, b_, h_, blk.row0, blk.rows, bias_key0_ + n0, cols));
  }

  void start(int i) {
    const Block& blk = blocks_[i];
    const QueryBlockScratch& q = w_.block[i];
    // fp8: q's and k's descales fold into the scale of Q, v's into the normalisation (each 1 for
    // other dtypes: the same bits as without them). Padding queries [rows, qn) are zero columns:
    // finite logits whose results are never stored.
    const float q_scale = p_.softmax_scale * p_.q_descale.at(b_, hk_) * p_.k_descale.at(b_, hk_);
    load_rows_t_packed<T>([&](int64_t r) { return p_.q.at<T>(b_, sq_.q_start + blk.row0 + r, h_); },
                          blk.rows, blk.qn, d_, dp_, q_scale, q.qt);
    std::fill(q.o, q.o + blk.qn * dp_, 0.f);
    std::fill(q.m, q.m + blk.qn, kNegInf);
    std::fill(q.l, q.l + blk.qn, 0.f);
  }

  // Block i's step over the key tile [n0, n0 + cols) in w_.k and w_.v.
  void key_tile(int i, int64_t n0, int64_t cols) {
    constexpr int64_t ld = kFwdLd;  // of st
    const Block& blk = blocks_[i];
    const QueryBlockScratch& q = w_.block[i];
    const int64_t row0 = blk.row0, rows = blk.rows, qn = blk.qn;
    float* st = w_.st;

    // Sᵀ (kFwdBlockN, qn) = K (scale Q)ᵀ
    gemm_packed_b(kFwdBlockN, qn, dp_, w_.k, dp_, q.qt, st, ld, false);

    // Element (query r, key j) is st[j ld + r].
    if (transform_)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t r = 0; r < rows; ++r) st[j * ld + r] = logit_(st[j * ld + r], row0 + r, n0 + j);
    // softcap(scale q.k) + bias - ALiBi (the order commutes past softcap); masks -> -inf.
    if (biased_) add_bias(p_.bias, b_, h_, row0, rows, bias_key0_ + n0, cols, st, 1, ld);
    // The common path (a full tile inside every row's window) carries no mask arithmetic.
    const bool masked = cols < kFwdBlockN || !vis_.block_unmasked(row0, row0 + rows, n0, n0 + cols);
    if (masked)
      for (int64_t j = 0; j < kFwdBlockN; ++j)
        for (int64_t r = 0; r < rows; ++r)
          if (j >= cols || !vis_.visible(row0 + r, n0 + j)) st[j * ld + r] = kNegInf;

    online_softmax(st, q, qn);
    for (int64_t r = 0; r < qn; ++r) {
      const float alpha = q.alpha[r];
      if (alpha == 1.f) continue;  // the max did not move
      float* o = q.o + r * dp_;
      for (int64_t c = 0; c < dp_; ++c) o[c] *= alpha;
    }
    if (p_.dropout_p > 0.f)  // l is the undropped normaliser; dropout acts on what P·V sees
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; j += DropoutStream::kCols) {
          const uint32_t bits = drop_.keep_row32(bh_, uint32_t(row0 + r), uint32_t(n0 + j));
          for (int64_t t = 0; t < int64_t(DropoutStream::kCols) && j + t < cols; ++t) {
            float& x = st[(j + t) * ld + r];
            x = (bits >> t) & 1u ? x * drop_.keep_scale : 0.f;
          }
        }

    // O (qn, dp) += P V, P read from Pᵀ
    gemm_at_packed_b(qn, dp_, kFwdBlockN, st, ld, w_.v, q.o, dp_, true);
  }

  // Normalise; a row with no visible key outputs 0 and lse = -inf (when the caller wants it).
  void finish(int i) {
    const Block& blk = blocks_[i];
    const QueryBlockScratch& q = w_.block[i];
    const float v_descale = p_.v_descale.at(b_, hk_);
    for (int64_t r = 0; r < blk.rows; ++r) {
      const bool empty = q.l[r] == 0.f;
      const float inv = empty ? 0.f : v_descale / q.l[r];
      float* o = q.o + r * dp_;
      for (int64_t c = 0; c < d_; ++c) o[c] *= inv;
      if (p_.lse.data)
        p_.lse.at(b_, h_, sq_.q_start + blk.row0 + r) = empty ? kNegInf : q.m[r] + std::log(q.l[r]);
    }
    store_rows_as(p_.out, b_, sq_.q_start + blk.row0, blk.rows, h_, d_, q.o, dp_, 1.f);  // out's own dtype
  }

  const Params& p_;
  const ForwardScratch& w_;
  const int64_t b_, h_;
  const int blocks_n_;
  const Sequence sq_;
  const int64_t d_, dp_, hk_;
  const Visibility vis_;
  const Logit<float> logit_;
  const bool transform_, biased_;
  const int64_t bias_key0_;
  const DropoutStream drop_;
  const uint32_t bh_;
  Block blocks_[kFwdMaxBlocksPerTask];
};

template <typename T>
void forward(const Params& p, void* workspace, size_t bytes, int threads) {
  const int blocks = forward_blocks_per_task(p, threads);
  const int64_t task_rows = blocks * kFwdBlockM;
  const int64_t m_tasks = (p.seqlen_q + task_rows - 1) / task_rows;
  const int64_t tasks = p.batch * p.heads_q * m_tasks;
  const size_t per_thread = forward_thread_bytes(p).bytes("the CPU forward's scratch");
#pragma omp parallel num_threads(threads)
  {
    Arena arena(static_cast<char*>(workspace), bytes);
    arena.skip(per_thread * size_t(omp_get_thread_num()));
    const ForwardScratch w(arena, pad_cols(p.head_dim), blocks);
    // Dynamic: causal and window blocks differ in cost by up to seqlen_k / kFwdBlockN.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t mt = t % m_tasks, h = (t / m_tasks) % p.heads_q, b = t / (m_tasks * p.heads_q);
      if (mt * task_rows < p.seq(b).len_q)
        ForwardTask<T>(p, w, b, h, mt * blocks, blocks).run();
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
