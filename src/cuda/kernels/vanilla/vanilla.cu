// Orchestration of the vanilla backend: workspace layout, one pass per batch of sequences,
// cuBLAS GEMMs around the fused softmax kernels (softmax.cuh). See vanilla.h for the algorithm.
//
// Batching: a fixed-length batch is one pass over all b * heads_q matrices at once (as standard
// attention does: its memory is the full (b, h, s_q, s_k) score tensor). A packed varlen batch
// runs one pass per sequence: its lengths are read once from cu_seqlens with a device-to-host
// copy, which synchronises the stream - acceptable for a baseline, and said in docs/api.md.
#include "cuda/kernels/vanilla/vanilla.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"
#include "cuda/kernels/vanilla/gemm.h"
#include "cuda/kernels/vanilla/rows.cuh"
#include "cuda/kernels/vanilla/softmax.cuh"
#include "cuda/workspace_align.h"

namespace fa::cuda::vanilla {
namespace {

enum class Pass { Forward, Backward };

// A GEMM reads rows of a view with leading dimension stride_s: it must cover a row (>= d) and
// fit cuBLAS's int. Other views are packed into the workspace first.
bool gemm_ready(const View& v, int64_t d) { return v.stride_s >= d && v.stride_s <= INT_MAX; }

int64_t rows_of(const Params& p, bool q_side) {
  return q_side ? p.total_q : p.total_k;  // batch * seqlen when not packed
}

// Dense (rows, heads, d) replacement of a view, same dtype, in the workspace.
View dense_view(const Params& p, const View& like, void* data, bool q_side, int64_t heads) {
  View v = like;
  v.data = data;
  v.stride_h = p.head_dim;
  v.stride_s = heads * p.head_dim;
  v.stride_b = p.varlen() ? 0 : (q_side ? p.seqlen_q : p.seqlen_k) * v.stride_s;
  return v;
}

// Byte offsets of everything the call keeps in the workspace.
struct Layout {
  struct Packed {
    View Params::*view;
    bool q_side, is_output;
    size_t offset;
  };
  size_t cublas = 0, pointers = 0, scores = 0, dscores = 0, dk_acc = 0, dv_acc = 0, total = 0;
  int64_t entries = 0;  // matrices per pass
  std::vector<Packed> packed;
};

Layout layout(const Params& p, Pass pass) {
  Layout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t off = at;
    at = workspace_align(at + bytes);
    return off;
  };
  const int64_t n_b = p.varlen() ? 1 : p.batch;  // sequences per pass
  l.entries = n_b * p.heads_q;
  const size_t matrices = size_t(l.entries) * size_t(p.seqlen_q) * size_t(p.seqlen_k) * 4;
  l.cublas = take(kCublasWorkspaceBytes);
  l.pointers = take(3 * size_t(l.entries) * sizeof(void*));
  l.scores = take(matrices);
  if (pass == Pass::Backward) {
    l.dscores = take(matrices);
    const size_t acc = size_t(n_b * p.heads_kv) * size_t(p.seqlen_k * p.head_dim) * 4;
    l.dk_acc = take(acc);
    l.dv_acc = take(acc);
  }
  std::vector<Layout::Packed> roles = {{&Params::q, true, false, 0},
                                       {&Params::k, false, false, 0},
                                       {&Params::v, false, false, 0}};
  if (pass == Pass::Forward) {
    roles.push_back({&Params::out, true, true, 0});
  } else {
    roles.push_back({&Params::dout, true, false, 0});
    roles.push_back({&Params::dq, true, true, 0});
  }
  for (auto& r : roles) {
    if (gemm_ready(p.*r.view, p.head_dim)) continue;
    const int64_t heads = r.q_side ? p.heads_q : p.heads_kv;
    r.offset = take(size_t(rows_of(p, r.q_side) * heads * p.head_dim * dtype_size(p.dtype)));
    l.packed.push_back(r);
  }
  l.total = at + kWorkspaceAlign;  // slack to align the caller's pointer
  return l;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// The sequences of one pass: fixed-length batches are one segment of every sequence.
struct Segment {
  RowBatch rows;       // b_first, entries, len_q, len_k, q_row0
  int64_t n_b, k_row0;
};

std::vector<Segment> segments(const Params& p, const Layout& l, cudaStream_t stream) {
  if (!p.varlen())
    return {Segment{RowBatch{0, l.entries, p.seqlen_q, p.seqlen_k, 0}, p.batch, 0}};
  std::vector<int32_t> cq(size_t(p.batch + 1)), ck(size_t(p.batch + 1));
  const size_t bytes = cq.size() * sizeof(int32_t);
  DeviceGuard::check(cudaMemcpyAsync(cq.data(), p.cu_seqlens_q, bytes, cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync(cu_seqlens_q)");
  DeviceGuard::check(cudaMemcpyAsync(ck.data(), p.cu_seqlens_k, bytes, cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync(cu_seqlens_k)");
  DeviceGuard::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<Segment> out;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t lq = cq[b + 1] - cq[b], lk = ck[b + 1] - ck[b];
    // cu_seqlens on the GPU are not validated (docs/api.md); do not read past the buffers.
    if (lq < 0 || lk < 0 || lq > p.seqlen_q || lk > p.seqlen_k || cq[b + 1] > p.total_q ||
        ck[b + 1] > p.total_k)
      fail(FA_ERROR_CU_SEQLENS, "cu_seqlens sequence ", b, " (q ", cq[b], "..", cq[b + 1], ", k ",
           ck[b], "..", ck[b + 1], ") exceeds max_seqlen or the packed totals");
    out.push_back(Segment{RowBatch{b, p.heads_q, lq, lk, cq[b]}, 1, ck[b]});
  }
  return out;
}

// An input/output view as a GEMM operand over the entries (b, query head) of a segment.
Operand operand(const Params& p, const View& v, int64_t b_first, int64_t row0, int64_t heads,
                int64_t head_div) {
  const int64_t es = dtype_size(v.dtype);
  Operand o;
  o.base = static_cast<const char*>(v.data) + (b_first * v.stride_b + row0 * v.stride_s) * es;
  o.stride_b = v.stride_b * es;
  o.stride_h = v.stride_h * es;
  o.heads = heads;
  o.head_div = head_div;
  o.ld = v.stride_s;
  o.type = cuda_type(p.dtype);
  return o;
}

// The per-entry (len_q, len_k) fp32 matrices of a segment, read as fp32 or as T written over them.
Operand matrices(const Params& p, char* base, const RowBatch& t, bool as_dtype) {
  Operand o;
  o.base = base;
  o.stride_h = t.matrix_elems() * 4;
  o.stride_b = p.heads_q * o.stride_h;
  o.heads = p.heads_q;
  o.ld = as_dtype ? t.len_k * 4 / dtype_size(p.dtype) : t.len_k;
  o.type = as_dtype ? cuda_type(p.dtype) : CUDA_R_32F;
  return o;
}

void launched(const char* what) { DeviceGuard::check(cudaGetLastError(), what); }

// Forward / backward of one dtype; the Params views already point at packed copies if needed.
template <typename T>
struct Runner {
  const Params& p;
  const Layout& l;
  char* ws;
  cudaStream_t stream;
  cublasHandle_t blas;

  void** pointers() const { return reinterpret_cast<void**>(ws + l.pointers); }
  float* scores() const { return reinterpret_cast<float*>(ws + l.scores); }
  float* dscores() const { return reinterpret_cast<float*>(ws + l.dscores); }

  // S = Q·Kᵀ (raw, unscaled) into buf, fp32.
  void scores_gemm(const Segment& s, const View& a, const View& b, float* buf) const {
    const RowBatch& t = s.rows;
    batched_gemm(blas, stream, {t.len_q, t.len_k, p.head_dim, false, true},
                 operand(p, a, t.b_first, t.q_row0, p.heads_q, 1),
                 operand(p, b, t.b_first, s.k_row0, p.heads_q, p.group()),
                 matrices(p, reinterpret_cast<char*>(buf), t, false), 1.f, 0.f, t.entries,
                 pointers());
  }

  void forward_segment(const Segment& s) const {
    const RowBatch& t = s.rows;
    const RowBlock q_rows{t.b_first, s.n_b, t.q_row0, t.len_q, p.heads_q, p.head_dim};
    if (t.len_k == 0) {  // no keys: out = 0, lse = -inf, as the reference
      zero_rows<T><<<blocks_for(q_rows.elems()), kCopyThreads, 0, stream>>>(p.out, q_rows);
      if (p.lse.data != nullptr)  // NULL: a forward without its LSE
        empty_lse<<<blocks_for(q_rows.elems() / p.head_dim), kCopyThreads, 0, stream>>>(p.lse,
                                                                                      q_rows);
      return launched("vanilla empty-sequence kernels");
    }
    scores_gemm(s, p.q, p.k, scores());
    softmax_forward<T><<<unsigned(t.entries * t.len_q), kRowThreads, 0, stream>>>(p, t, scores());
    launched("vanilla softmax_forward");
    batched_gemm(blas, stream, {t.len_q, p.head_dim, t.len_k, false, false},
                 matrices(p, ws + l.scores, t, true),
                 operand(p, p.v, t.b_first, s.k_row0, p.heads_q, p.group()),
                 operand(p, p.out, t.b_first, t.q_row0, p.heads_q, 1), 1.f, 0.f, t.entries,
                 pointers());
  }

  // Σ over a GQA group: acc[b, hk] += X[b, hk*group + g]ᵀ · Y[b, hk*group + g] for every g.
  void group_sum_gemm(const Segment& s, char* matrix_base, const View& y, float* acc) const {
    const RowBatch& t = s.rows;
    const int64_t count = s.n_b * p.heads_kv;
    for (int64_t g = 0; g < p.group(); ++g) {
      Operand x = matrices(p, matrix_base, t, true);
      x.heads = p.heads_kv;
      x.head_mul = p.group();
      x.head_add = g;
      Operand yo = operand(p, y, t.b_first, t.q_row0, p.heads_kv, 1);
      yo.head_mul = p.group();
      yo.head_add = g;
      Operand c;
      c.base = reinterpret_cast<char*>(acc);
      c.stride_h = t.len_k * p.head_dim * 4;
      c.stride_b = p.heads_kv * c.stride_h;
      c.heads = p.heads_kv;
      c.ld = p.head_dim;
      c.type = CUDA_R_32F;
      batched_gemm(blas, stream, {t.len_k, p.head_dim, t.len_q, true, false}, x, yo, c, 1.f, 1.f,
                   count, pointers());
    }
  }

  void backward_segment(const Segment& s) const {
    const RowBatch& t = s.rows;
    const RowBlock q_rows{t.b_first, s.n_b, t.q_row0, t.len_q, p.heads_q, p.head_dim};
    const RowBlock k_rows{t.b_first, s.n_b, s.k_row0, t.len_k, p.heads_kv, p.head_dim};
    float* dk_acc = reinterpret_cast<float*>(ws + l.dk_acc);
    float* dv_acc = reinterpret_cast<float*>(ws + l.dv_acc);
    const size_t acc_bytes = size_t(k_rows.elems()) * 4;
    DeviceGuard::check(cudaMemsetAsync(dk_acc, 0, acc_bytes, stream), "cudaMemsetAsync(dK)");
    DeviceGuard::check(cudaMemsetAsync(dv_acc, 0, acc_bytes, stream), "cudaMemsetAsync(dV)");
    if (t.len_k == 0 && t.len_q > 0) {  // no keys: no gradient reaches q
      zero_rows<T><<<blocks_for(q_rows.elems()), kCopyThreads, 0, stream>>>(p.dq, q_rows);
      launched("vanilla zero_rows(dq)");
    }
    if (t.len_q > 0 && t.len_k > 0) {
      scores_gemm(s, p.q, p.k, scores());
      scores_gemm(s, p.dout, p.v, dscores());  // dP = dO·Vᵀ: the same shapes as Q·Kᵀ
      softmax_backward<T><<<unsigned(t.entries * t.len_q), kRowThreads, 0, stream>>>(
          p, t, scores(), dscores());
      launched("vanilla softmax_backward");
      group_sum_gemm(s, ws + l.scores, p.dout, dv_acc);  // dV = Pᵀ·dO
      group_sum_gemm(s, ws + l.dscores, p.q, dk_acc);    // dK = dSᵀ·Q
      batched_gemm(blas, stream, {t.len_q, p.head_dim, t.len_k, false, false},  // dQ = dS·K
                   matrices(p, ws + l.dscores, t, true),
                   operand(p, p.k, t.b_first, s.k_row0, p.heads_q, p.group()),
                   operand(p, p.dq, t.b_first, t.q_row0, p.heads_q, 1), 1.f, 0.f, t.entries,
                   pointers());
    }
    if (t.len_k > 0) {
      store_accumulator<T><<<blocks_for(k_rows.elems()), kCopyThreads, 0, stream>>>(dk_acc, p.dk, k_rows);
      store_accumulator<T><<<blocks_for(k_rows.elems()), kCopyThreads, 0, stream>>>(dv_acc, p.dv, k_rows);
      launched("vanilla store_accumulator");
    }
  }
};

// Copies between a caller's view and its packed stand-in, over every row of the tensor.
template <typename T>
void copy_all(const Params& p, const View& src, const View& dst, bool q_side, int64_t heads,
              cudaStream_t stream) {
  const int64_t n_b = p.varlen() ? 1 : p.batch;
  const int64_t rows = p.varlen() ? rows_of(p, q_side) : (q_side ? p.seqlen_q : p.seqlen_k);
  const RowBlock blk{0, n_b, 0, rows, heads, p.head_dim};
  copy_rows<T><<<blocks_for(blk.elems()), kCopyThreads, 0, stream>>>(src, dst, blk);
  launched("vanilla copy_rows");
}

template <typename T>
void run(const Params& caller, Pass pass, void* workspace, cudaStream_t stream) {
  const Layout l = layout(caller, pass);
  char* ws = reinterpret_cast<char*>(workspace_align(reinterpret_cast<uintptr_t>(workspace)));
  Params p = caller;
  for (const auto& r : l.packed) {
    const int64_t heads = r.q_side ? p.heads_q : p.heads_kv;
    const View dense = dense_view(p, caller.*r.view, ws + r.offset, r.q_side, heads);
    if (!r.is_output) copy_all<T>(p, caller.*r.view, dense, r.q_side, heads, stream);
    p.*r.view = dense;
  }
  const Runner<T> run{p, l, ws, stream, handle_for(stream, ws + l.cublas, kCublasWorkspaceBytes)};
  for (const Segment& s : segments(p, l, stream)) {
    if (s.rows.len_q == 0 && pass == Pass::Forward) continue;
    if (pass == Pass::Forward)
      run.forward_segment(s);
    else
      run.backward_segment(s);
  }
  for (const auto& r : l.packed)
    if (r.is_output)
      copy_all<T>(p, p.*r.view, caller.*r.view, r.q_side, r.q_side ? p.heads_q : p.heads_kv, stream);
}

void run_typed(const Params& p, Pass pass, void* workspace, size_t bytes, void* stream) {
  DeviceGuard guard(p.device.index);
  if (bytes < layout(p, pass).total)
    fail(FA_ERROR_WORKSPACE, "workspace_bytes=", bytes, " is too small for the vanilla backend; need ",
         layout(p, pass).total);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::F16: return run<__half>(p, pass, workspace, s);
    case DType::BF16: return run<__nv_bfloat16>(p, pass, workspace, s);
    default: return run<float>(p, pass, workspace, s);
  }
}

}  // namespace

void check(const Params& p, const Context& ctx) {
  if (p.dtype == DType::E4M3)  // run_typed would read the bytes as fp32
    fail(FA_ERROR_UNSUPPORTED, "cuda-vanilla: q.dtype=fp8_e4m3 has no vanilla kernel");
  const DeviceProps& dev = ctx.device;
  const int major = dev.major, minor = dev.minor;
  const int need = p.dtype == DType::BF16 ? 8 : 7;  // cuBLAS bf16 GEMMs need Ampere
  if (major < need)
    fail(FA_ERROR_BACKEND, "CUDA device ", p.device.index, " has compute capability ", major, ".",
         minor, "; the vanilla backend needs >= ", need, ".0 for this dtype");
  // cuBLAS takes int sizes, and one thread block per score row is one grid of blocks.
  const int64_t entries = (p.varlen() ? 1 : p.batch) * p.heads_q;
  if (p.seqlen_k * 4 > INT_MAX || p.seqlen_q > INT_MAX)
    fail(FA_ERROR_SIZE, "seqlen_k=", p.seqlen_k, " must be <= ", INT_MAX / 4, " for the vanilla backend");
  if (entries * p.seqlen_q > INT_MAX)
    fail(FA_ERROR_SIZE, "batch * heads_q * seqlen_q=", entries * p.seqlen_q, " must be <= ",
         INT_MAX, " for the vanilla backend");
}

size_t forward_workspace(const Params& p) { return layout(p, Pass::Forward).total; }
size_t backward_workspace(const Params& p) { return layout(p, Pass::Backward).total; }

void forward(const Params& p, void* workspace, size_t bytes, void* stream) {
  run_typed(p, Pass::Forward, workspace, bytes, stream);
}
void backward(const Params& p, void* workspace, size_t bytes, void* stream) {
  run_typed(p, Pass::Backward, workspace, bytes, stream);
}

}  // namespace fa::cuda::vanilla
