#include "parallel/ring.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "parallel/rows.h"
#include "parallel/ring_plan.h"

namespace fa::ring {
namespace {

// 256: what the CUDA families carve their own workspaces at (cuda/workspace_align.h), so every
// buffer here and the block calls' workspace meet any kernel's alignment.
constexpr size_t kAlign = 256;
// The size queries lay the workspace out from this stand-in address, never dereferenced: the
// block calls' own size queries read only shapes, dtypes and the pointers' alignment.
constexpr uintptr_t kProbeBase = 4096;
static_assert(kProbeBase % kAlign == 0, "the probe needs no leading padding");

// Regions of the workspace in order, each at a kAlign-aligned address. A caller's workspace
// aligned less than kAlign loses up to kAlign - 1 leading bytes, which the sizes include
// (with_slack).
class Carver {
 public:
  explicit Carver(uintptr_t base) : base_(base) {}
  void* take(size_t bytes) {
    used_ = (base_ + used_ + kAlign - 1) / kAlign * kAlign - base_;
    void* p = reinterpret_cast<void*>(base_ + used_);
    used_ += bytes;
    return p;
  }
  size_t used() const { return used_; }
  // The probe's size plus the leading padding any base may need.
  size_t with_slack() const { return used_ + kAlign - 1; }

 private:
  uintptr_t base_;
  size_t used_ = 0;
};

// The sizes of one rank's call.
struct Geometry {
  int32_t rank, size;
  Shard mine;
  RowBlock q;   // this rank's rows of q, out, dq: (batch, mine.rows, heads_q, d)
  RowBlock kv;  // one K or V block in flight: (batch, longest shard, heads_kv, d)
  RowBlock q_chunk, kv_chunk;  // the longest chunk's rows of q, of k
};

// The block calls' layout (ring_plan.h's call_layout: one rank's shard is one chunk).
fa_ring_layout layout_of(const fa_ring& r) {
  return call_layout(r.comm.size, static_cast<fa_ring_layout>(r.layout));
}

Geometry geometry(const Call& c) {
  const fa_ring& r = c.ring;
  const Params& p = c.p;
  Geometry g;
  g.rank = r.comm.rank;
  g.size = r.comm.size;
  g.mine = shard_of(r.seqlen, g.size, layout_of(r), g.rank);
  const int64_t rows = max_shard_rows(r.seqlen, g.size, layout_of(r));
  const int64_t chunk = max_chunk_rows(r.seqlen, g.size, layout_of(r));
  g.q = {p.batch, g.mine.rows, p.heads_q, p.head_dim};
  g.kv = {p.batch, rows, p.heads_kv, p.head_dim};
  g.q_chunk = {p.batch, chunk, p.heads_q, p.head_dim};
  g.kv_chunk = {p.batch, chunk, p.heads_kv, p.head_dim};
  return g;
}

size_t bytes_of(const RowBlock& n, DType t) {
  return size_t(n.batch * n.rows * n.heads * n.dim * dtype_size(t));
}

// fn(query chunk, key chunk, visibility) for the blocks of `step` that see anything.
template <typename Fn>
void for_each_block(const Call& c, const Geometry& g, int32_t step, Fn&& fn) {
  const Shard theirs =
      shard_of(c.ring.seqlen, g.size, layout_of(c.ring), origin(g.rank, g.size, step));
  for (int i = 0; i < g.mine.count; ++i)
    for (int j = 0; j < theirs.count; ++j) {
      const Visibility vis = visibility(c.p.causal, g.mine.chunk[i].index, theirs.chunk[j].index);
      if (vis != Visibility::None) fn(g.mine.chunk[i], theirs.chunk[j], vis);
    }
}

// ---- the block calls, through the C ABI ----------------------------------------------------

fa_dtype public_dtype(DType t) {
  switch (t) {
    case DType::F16: return FA_DTYPE_FP16;
    case DType::BF16: return FA_DTYPE_BF16;
    default: return FA_DTYPE_FP32;  // validation admits no other dtype into a ring call
  }
}

fa_tensor tensor(const View& v, const RowBlock& n, fa_device dev) {
  fa_tensor t{};
  t.data = v.data;
  t.dtype = public_dtype(v.dtype);
  t.rank = 4;
  const int64_t shape[4] = {n.batch, n.rows, n.heads, n.dim};
  const int64_t stride[4] = {v.stride_b, v.stride_s, v.stride_h, 1};
  std::copy(shape, shape + 4, t.shape);
  std::copy(stride, stride + 4, t.stride);
  t.device = dev;
  return t;
}

LseView lse_rows_from(const LseView& l, int64_t row) {
  LseView r = l;
  r.data = l.data + row * l.stride_s;
  return r;
}

// (batch, heads, rows) of lse from its row `row` on.
fa_tensor lse_tensor(const LseView& l, int64_t row, const RowBlock& n, fa_device dev) {
  fa_tensor t{};
  t.data = lse_rows_from(l, row).data;
  t.dtype = FA_DTYPE_FP32;
  t.rank = 3;
  t.shape[0] = n.batch;
  t.shape[1] = n.heads;
  t.shape[2] = n.rows;
  t.stride[0] = l.stride_b;
  t.stride[1] = l.stride_h;
  t.stride[2] = l.stride_s;
  t.device = dev;
  return t;
}

LseView dense_lse(float* data, const RowBlock& n) {
  LseView l;
  l.data = data;
  l.stride_s = 1;
  l.stride_h = n.rows;
  l.stride_b = n.heads * n.rows;
  return l;
}

// One K / V block in flight: K then V, each (batch, rows, heads_kv, d), contiguous.
struct KvBlock {
  View k, v;
};
KvBlock kv_block(void* data, DType t, const RowBlock& n) {
  unsigned char* base = static_cast<unsigned char*>(data);
  return {dense_view(base, t, n), dense_view(base + bytes_of(n, t), t, n)};
}

// The block (query chunk qc of this rank, key chunk kc of the block in hand) as a call of the
// shard's options (backend, scale, softcap, deterministic): the diagonal causal, the rest not.
fa_params block_params(const Call& c, const Chunk& qc, const KvBlock& kv, const Chunk& kc,
                       Visibility vis) {
  const Params& p = c.p;
  const RowBlock qn{p.batch, qc.len, p.heads_q, p.head_dim};
  const RowBlock kn{p.batch, kc.len, p.heads_kv, p.head_dim};
  fa_params b = c.fp;
  b.q = tensor(rows_from(p.q, qc.local), qn, p.device);
  b.k = tensor(rows_from(kv.k, kc.local), kn, p.device);
  b.v = tensor(rows_from(kv.v, kc.local), kn, p.device);
  b.causal = vis == Visibility::Diagonal;
  return b;
}

void check_block(fa_status status, const char* what, int32_t step, const Geometry& g) {
  if (status != FA_OK)
    throw ApiError(status, std::string(what) + " of ring step " + std::to_string(step) +
                               " (rank " + std::to_string(g.rank) + " of " +
                               std::to_string(g.size) + "): " + fa_last_error());
}

// The communicator's transfers of one rank: to the next rank, from the previous one.
class Exchange {
 public:
  Exchange(const fa_comm& comm, void* stream) : comm_(comm), stream_(stream) {}
  void start(const void* send, void* recv, size_t bytes, int32_t step) {
    const int32_t rc = comm_.start(comm_.ctx, send, next_rank(comm_.rank, comm_.size), recv,
                                   prev_rank(comm_.rank, comm_.size), bytes, stream_);
    if (rc != 0) failed("start", rc, step);
    pending_ = true;
  }
  void wait(int32_t step) {
    if (!pending_) return;
    pending_ = false;
    const int32_t rc = comm_.wait(comm_.ctx, stream_);
    if (rc != 0) failed("wait", rc, step);
  }

 private:
  [[noreturn]] void failed(const char* what, int32_t rc, int32_t step) const {
    fail(FA_ERROR_COMM, "ring.comm.", what, " returned ", rc, " at step ", step, " (rank ",
         comm_.rank, " of ", comm_.size, ")");
  }
  const fa_comm& comm_;
  void* stream_;
  bool pending_ = false;
};

// The largest workspace any block call of this rank asks for (query: fa_forward's, or
// fa_backward's), over every step.
template <typename MakeBlock>
size_t inner_workspace(const Call& c, const Geometry& g, MakeBlock&& block, bool backward) {
  size_t most = 0;
  for (int32_t step = 0; step < g.size; ++step)
    for_each_block(c, g, step, [&](const Chunk& qc, const Chunk& kc, Visibility vis) {
      const fa_params b = block(qc, kc, vis);
      size_t bytes = 0;
      check_block(backward ? fa_backward_workspace_size(&b, &bytes)
                           : fa_forward_workspace_size(&b, &bytes),
                  "workspace query", step, g);
      most = std::max(most, bytes);
    });
  return most;
}

// ---- forward ---------------------------------------------------------------------------------

struct ForwardSpace {
  KvBlock kv[2];     // the block in hand and the one arriving
  View acc_o;        // fp32 (batch, mine.rows, heads_q, d): the merge so far
  LseView acc_lse;   // its LSE, (batch, heads_q, mine.rows)
  View part_o;       // one block call's output (batch, chunk, heads_q, d), fp32
  LseView part_lse;  // its LSE
  void* inner;       // the block calls' workspace (the rest)
};

ForwardSpace carve_forward(const Call& c, const Geometry& g, Carver& w) {
  ForwardSpace s;
  for (KvBlock& kv : s.kv) kv = kv_block(w.take(2 * bytes_of(g.kv, c.p.dtype)), c.p.dtype, g.kv);
  s.acc_o = dense_view(w.take(bytes_of(g.q, DType::F32)), DType::F32, g.q);
  s.acc_lse = dense_lse(static_cast<float*>(w.take(bytes_of(g.q, DType::F32) / g.q.dim)), g.q);
  // The block calls' outputs in fp32 (with 16-bit inputs: cuda-sm80's fp32 epilogue on CUDA),
  // so that a rank's rows are rounded once, at the end, as a single call's are.
  s.part_o = dense_view(w.take(bytes_of(g.q_chunk, DType::F32)), DType::F32, g.q_chunk);
  s.part_lse = dense_lse(static_cast<float*>(w.take(bytes_of(g.q_chunk, DType::F32) / g.q.dim)),
                         g.q_chunk);
  s.inner = w.take(0);
  return s;
}

// A block of the forward: its output and LSE into the space's partial buffers.
fa_params forward_block(const Call& c, const ForwardSpace& s, const KvBlock& kv, const Chunk& qc,
                        const Chunk& kc, Visibility vis) {
  fa_params b = block_params(c, qc, kv, kc, vis);
  const RowBlock qn{c.p.batch, qc.len, c.p.heads_q, c.p.head_dim};
  b.out = tensor(s.part_o, qn, c.p.device);
  b.lse = lse_tensor(s.part_lse, 0, qn, c.p.device);
  return b;
}

// ---- backward --------------------------------------------------------------------------------

struct BackwardSpace {
  KvBlock kv[2];      // the block in hand and the one arriving
  KvBlock dkv[2];     // fp32 dK, dV of the block in hand (filling) and of the previous step's
                      // block (travelling on to the next rank)
  KvBlock dkv_in;     // fp32: what the previous rank summed for the block in hand
  View dq_acc;        // fp32 (batch, mine.rows, heads_q, d)
  View dq_blk;        // one block call's dq, dk, dv, fp32 (unrounded, as the sums are)
  KvBlock dkv_blk;
  void* inner;
};

BackwardSpace carve_backward(const Call& c, const Geometry& g, Carver& w) {
  BackwardSpace s;
  const DType t = c.p.dtype;
  for (KvBlock& kv : s.kv) kv = kv_block(w.take(2 * bytes_of(g.kv, t)), t, g.kv);
  for (KvBlock& d : s.dkv)
    d = kv_block(w.take(2 * bytes_of(g.kv, DType::F32)), DType::F32, g.kv);
  s.dkv_in = kv_block(w.take(2 * bytes_of(g.kv, DType::F32)), DType::F32, g.kv);
  s.dq_acc = dense_view(w.take(bytes_of(g.q, DType::F32)), DType::F32, g.q);
  s.dq_blk = dense_view(w.take(bytes_of(g.q_chunk, DType::F32)), DType::F32, g.q_chunk);
  s.dkv_blk = kv_block(w.take(2 * bytes_of(g.kv_chunk, DType::F32)), DType::F32, g.kv_chunk);
  s.inner = w.take(0);
  return s;
}

// A block of the backward: the shard's out, lse, dout rows of qc; gradients into the space's
// block buffers.
fa_params backward_block(const Call& c, const BackwardSpace& s, const KvBlock& kv,
                         const Chunk& qc, const Chunk& kc, Visibility vis) {
  const Params& p = c.p;
  fa_params b = block_params(c, qc, kv, kc, vis);
  const RowBlock qn{p.batch, qc.len, p.heads_q, p.head_dim};
  const RowBlock kn{p.batch, kc.len, p.heads_kv, p.head_dim};
  b.out = tensor(rows_from(p.out, qc.local), qn, p.device);
  b.lse = lse_tensor(p.lse, qc.local, qn, p.device);
  b.dout = tensor(rows_from(p.dout, qc.local), qn, p.device);
  b.dq = tensor(s.dq_blk, qn, p.device);
  b.dk = tensor(s.dkv_blk.k, kn, p.device);
  b.dv = tensor(s.dkv_blk.v, kn, p.device);
  return b;
}

}  // namespace

size_t forward_workspace(const Call& c) {
  const Geometry g = geometry(c);
  Carver w(kProbeBase);
  const ForwardSpace s = carve_forward(c, g, w);
  const size_t inner = inner_workspace(
      c, g, [&](const Chunk& qc, const Chunk& kc, Visibility vis) {
        return forward_block(c, s, s.kv[0], qc, kc, vis);
      }, false);
  w.take(inner);
  return w.with_slack();
}

size_t backward_workspace(const Call& c) {
  const Geometry g = geometry(c);
  Carver w(kProbeBase);
  const BackwardSpace s = carve_backward(c, g, w);
  const size_t inner = inner_workspace(
      c, g, [&](const Chunk& qc, const Chunk& kc, Visibility vis) {
        return backward_block(c, s, s.kv[0], qc, kc, vis);
      }, true);
  w.take(inner);
  return w.with_slack();
}

void forward(const Call& c, void* workspace, size_t bytes, void* stream) {
  const Geometry g = geometry(c);
  Carver w(reinterpret_cast<uintptr_t>(workspace));
  const ForwardSpace s = carve_forward(c, g, w);
  const size_t inner_bytes = bytes - w.used();
  const Rows rows(c.p.device, stream);
  const RowBlock own{g.kv.batch, g.mine.rows, g.kv.heads, g.kv.dim};
  rows.copy(s.kv[0].k, c.p.k, own);
  rows.copy(s.kv[0].v, c.p.v, own);
  // Nothing merged yet: every row's LSE -inf (the merge then reads none of acc_o).
  rows.fill(s.acc_lse.data, g.q.batch * g.q.heads * g.q.rows,
            -std::numeric_limits<float>::infinity());
  Exchange ex(c.ring.comm, stream);
  for (int32_t step = 0, cur = 0; step < g.size; ++step, cur ^= 1) {
    if (step + 1 < g.size)
      ex.start(s.kv[cur].k.data, s.kv[cur ^ 1].k.data, 2 * bytes_of(g.kv, c.p.dtype), step);
    for_each_block(c, g, step, [&](const Chunk& qc, const Chunk& kc, Visibility vis) {
      const fa_params b = forward_block(c, s, s.kv[cur], qc, kc, vis);
      check_block(fa_forward(&b, s.inner, inner_bytes, stream), "fa_forward", step, g);
      // The block's (O, LSE) into the running merge of its query rows, in place.
      const View o[2] = {rows_from(s.acc_o, qc.local), s.part_o};
      const LseView l[2] = {lse_rows_from(s.acc_lse, qc.local), s.part_lse};
      rows.merge(o[0], l[0], o, l, 2, {c.p.batch, qc.len, c.p.heads_q, c.p.head_dim});
    });
    ex.wait(step);
  }
  // The merge into the caller's out (its dtype) and lse: a merge of the one part.
  rows.merge(c.p.out, c.p.lse, &s.acc_o, &s.acc_lse, 1, g.q);
}

void backward(const Call& c, void* workspace, size_t bytes, void* stream) {
  const Geometry g = geometry(c);
  Carver w(reinterpret_cast<uintptr_t>(workspace));
  const BackwardSpace s = carve_backward(c, g, w);
  const size_t inner_bytes = bytes - w.used();
  const Params& p = c.p;
  const Rows rows(p.device, stream);
  const RowBlock own{g.kv.batch, g.mine.rows, g.kv.heads, g.kv.dim};
  rows.copy(s.kv[0].k, p.k, own);
  rows.copy(s.kv[0].v, p.v, own);
  const int64_t kv_count = 2 * g.kv.batch * g.kv.rows * g.kv.heads * g.kv.dim;  // K and V
  rows.fill(s.dq_acc.data, g.q.batch * g.q.rows * g.q.heads * g.q.dim, 0.f);
  const size_t kv_bytes = 2 * bytes_of(g.kv, p.dtype), dkv_bytes = 2 * bytes_of(g.kv, DType::F32);
  Exchange ex(c.ring.comm, stream);
  // Step s: the block of rank origin(s) in hand. Its K / V go on to the next rank for step s + 1
  // while the previous step's dK / dV sums go on too, and the previous rank's sums for the block
  // in hand arrive; all of it overlaps the block calls.
  for (int32_t step = 0, cur = 0; step < g.size; ++step, cur ^= 1) {
    const int slot = step % 2;
    if (step + 1 < g.size) ex.start(s.kv[cur].k.data, s.kv[cur ^ 1].k.data, kv_bytes, step);
    if (step > 0) ex.start(s.dkv[slot ^ 1].k.data, s.dkv_in.k.data, dkv_bytes, step);
    rows.fill(s.dkv[slot].k.data, kv_count, 0.f);  // K's and V's sums are one region
    for_each_block(c, g, step, [&](const Chunk& qc, const Chunk& kc, Visibility vis) {
      const fa_params b = backward_block(c, s, s.kv[cur], qc, kc, vis);
      check_block(fa_backward(&b, s.inner, inner_bytes, stream), "fa_backward", step, g);
      rows.add(rows_from(s.dq_acc, qc.local), s.dq_blk, {p.batch, qc.len, p.heads_q, p.head_dim});
      const RowBlock kn{p.batch, kc.len, p.heads_kv, p.head_dim};
      rows.add(rows_from(s.dkv[slot].k, kc.local), s.dkv_blk.k, kn);
      rows.add(rows_from(s.dkv[slot].v, kc.local), s.dkv_blk.v, kn);
    });
    ex.wait(step);
    if (step > 0) {
      const Shard theirs =
          shard_of(c.ring.seqlen, g.size, layout_of(c.ring), origin(g.rank, g.size, step));
      const RowBlock n{p.batch, theirs.rows, p.heads_kv, p.head_dim};
      rows.add(s.dkv[slot].k, s.dkv_in.k, n);
      rows.add(s.dkv[slot].v, s.dkv_in.v, n);
    }
  }
  // After the last step the sums in hand are complete (every rank added its share) and belong
  // to the next rank: one more hop takes each home, and the previous rank's are this rank's.
  const KvBlock* done = &s.dkv[(g.size - 1) % 2];
  if (g.size > 1) {
    ex.start(done->k.data, s.dkv_in.k.data, dkv_bytes, g.size);
    ex.wait(g.size);
    done = &s.dkv_in;
  }
  rows.copy(p.dq, s.dq_acc, g.q);
  rows.copy(p.dk, done->k, own);
  rows.copy(p.dv, done->v, own);
}

}  // namespace fa::ring
