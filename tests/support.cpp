#include "support.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "api/validate.h"
#include "core/fp8.h"
#include "core/dtype.h"
#include "cpu/reference.h"

namespace fa::test {

HostTensor::HostTensor(fa_dtype dtype, std::vector<int64_t> shape, std::vector<int> order,
                       int64_t pad)
    : dtype_(dtype), shape_(std::move(shape)) {
  const int r = int(shape_.size());
  if (order.empty()) {
    order.resize(size_t(r));
    std::iota(order.begin(), order.end(), 0);
  }
  strides_.assign(size_t(r), 0);
  int64_t running = 1;
  for (int i = r - 1; i >= 0; --i) {
    const int dim = order[size_t(i)];
    strides_[size_t(dim)] = running;
    running *= shape_[size_t(dim)] + (i == r - 1 ? pad : 0);
  }
  storage_elems_ = running;
  storage_.reset(new unsigned char[size_t(std::max<int64_t>(running, 1) * elem_size())]);
  std::memset(storage_.get(), 0, size_t(std::max<int64_t>(running, 1) * elem_size()));
}

fa::Tensor HostTensor::view() const {
  fa::Tensor t;
  t.raw.data = storage_.get();
  t.raw.dtype = dtype_;
  t.raw.rank = int32_t(shape_.size());
  t.raw.device = fa::cpu_device();
  for (size_t i = 0; i < shape_.size(); ++i) {
    t.raw.shape[i] = shape_[i];
    t.raw.stride[i] = strides_[i];
  }
  return t;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

int64_t HostTensor::elem_size() const {
  if (dtype_ == FA_DTYPE_BOOL || dtype_ == FA_DTYPE_INT8 || dtype_ == FA_DTYPE_FP8_E4M3) return 1;
  return dtype_ == FA_DTYPE_FP16 || dtype_ == FA_DTYPE_BF16 ? 2 : 4;
}

int64_t HostTensor::offset(int64_t flat) const {
  int64_t off = 0;
  for (int i = int(shape_.size()) - 1; i >= 0; --i) {
    off += (flat % shape_[size_t(i)]) * strides_[size_t(i)];
    flat /= shape_[size_t(i)];
  }
  return off;
}

double HostTensor::get(int64_t flat) const {
  const unsigned char* p = storage_.get() + offset(flat) * elem_size();
  switch (dtype_) {
    case FA_DTYPE_FP16: { half_t h; std::memcpy(&h, p, 2); return to_float(h); }
    case FA_DTYPE_BF16: { bfloat16_t h; std::memcpy(&h, p, 2); return to_float(h); }
    case FA_DTYPE_INT32: { int32_t i; std::memcpy(&i, p, 4); return i; }
    case FA_DTYPE_BOOL: return *p != 0;
    case FA_DTYPE_INT8: return double(int8_t(*p));
    case FA_DTYPE_FP8_E4M3: return to_float(e4m3_t{*p});
    default: { float f; std::memcpy(&f, p, 4); return f; }
  }
}

void HostTensor::set(int64_t flat, double x) {
  unsigned char* p = storage_.get() + offset(flat) * elem_size();
  switch (dtype_) {
    case FA_DTYPE_FP16: { const half_t h = to_half(float(x)); std::memcpy(p, &h, 2); break; }
    case FA_DTYPE_BF16: { const bfloat16_t h = to_bf16(float(x)); std::memcpy(p, &h, 2); break; }
    case FA_DTYPE_INT32: { const int32_t i = int32_t(x); std::memcpy(p, &i, 4); break; }
    case FA_DTYPE_BOOL: *p = x != 0 ? 1 : 0; break;
    case FA_DTYPE_INT8: *p = static_cast<unsigned char>(int8_t(x)); break;
    case FA_DTYPE_FP8_E4M3: *p = to_e4m3(float(x)).bits; break;  // saturating, as the GPU's
    default: { const float f = float(x); std::memcpy(p, &f, 4); break; }
  }
}

void HostTensor::fill_normal(std::mt19937_64& rng, double stddev) {
  std::normal_distribution<double> dist(0.0, stddev);
  for (int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
}

void HostTensor::poison() {
  std::memset(storage_.get(), 0xFF, size_t(std::max<int64_t>(storage_elems_, 1) * elem_size()));
}

bool HostTensor::bytes_equal(const HostTensor& o) const {
  return storage_elems_ == o.storage_elems_ && elem_size() == o.elem_size() &&
         std::memcmp(storage_.get(), o.storage_.get(), size_t(storage_elems_ * elem_size())) == 0;
}

std::string Case::name() const {
  std::ostringstream os;
  const char* dt = dtype == FA_DTYPE_FP16        ? "fp16"
                   : dtype == FA_DTYPE_BF16      ? "bf16"
                   : dtype == FA_DTYPE_FP8_E4M3 ? "fp8"
                                                 : "fp32";
  os << dt << "_b" << batch << "_h" << heads_q << "x" << heads_kv << "_s" << seqlen_q << "x"
     << seqlen_k << "_d" << head_dim;
  if (causal) os << "_causal";
  if (window_left >= 0 || window_right >= 0) os << "_win" << window_left << "," << window_right;
  if (softcap > 0) os << "_softcap" << softcap;
  if (alibi) os << "_alibi";
  if (dropout_p > 0) os << "_drop" << dropout_p;
  if (deterministic) os << "_det";
  if (varlen()) os << "_varlen";
  if (strided) os << "_strided";
  if (out_dtype >= 0 && out_dtype != dtype)
    os << "_out" << (out_dtype == FA_DTYPE_FP32   ? "fp32"
                     : dtype != FA_DTYPE_FP8_E4M3 ? "16"
                     : out_dtype == FA_DTYPE_FP16 ? "fp16"
                                                  : "bf16");
  if (descale) os << "_descale";
  if (page_size > 0) os << "_page" << page_size;
  if (!cache_lens.empty()) os << "_cache";
  if (q_shift != 0) os << "_shift" << q_shift;
  if (softmax_scale != 0.f) os << "_scale" << (softmax_scale < 0 ? "m" : "") << std::fabs(softmax_scale);
  if (has_bias()) {
    const char* names[] = {"fp32", "fp16", "bf16", "fp8", "int32", "bool", "int8"};
    os << "_bias" << names[bias_dtype];
    for (bool f : bias_full) os << (f ? "F" : "1");
    if (bias_empty_rows) os << "_empty";
    if (dbias) os << "_dbias" << (dbias_dtype < 0 ? "fp32" : names[dbias_dtype]);
  }
  std::string s = os.str();  // a valid GoogleTest name: letters, digits, underscores
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

Problem::Problem(const Case& cs) : c(cs) {
  std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + 12345);
  const int64_t hq = c.heads_q, hk = c.heads_kv, d = c.head_dim;
  std::vector<int> order4, order3;
  int64_t pad = 0;
  if (c.strided) {
    order4 = {0, 2, 1, 3};  // (batch, heads, seq, dim) in memory
    order3 = {1, 0, 2};     // (heads, tokens, dim)
    pad = c.pad;
  }
  if (c.varlen()) {
    std::vector<int32_t> cq{0}, ck{0};
    for (size_t i = 0; i < c.lens_q.size(); ++i) {
      cq.push_back(cq.back() + c.lens_q[i]);
      ck.push_back(ck.back() + c.lens_k[i]);
      max_q = std::max<int64_t>(max_q, c.lens_q[i]);
      max_k = std::max<int64_t>(max_k, c.lens_k[i]);
    }
    total_q = cq.back();
    total_k = ck.back();
    const int64_t nb = int64_t(c.lens_q.size());
    cu_q = HostTensor(FA_DTYPE_INT32, {nb + 1});
    cu_k = HostTensor(FA_DTYPE_INT32, {nb + 1});
    for (int64_t i = 0; i <= nb; ++i) {
      cu_q.set(i, cq[size_t(i)]);
      cu_k.set(i, ck[size_t(i)]);
    }
    q = HostTensor(c.dtype, {total_q, hq, d}, order3, pad);
    k = HostTensor(c.dtype, {total_k, hk, d}, order3, pad);
    lse = HostTensor(FA_DTYPE_FP32, {hq, total_q}, {}, c.strided ? 2 : 0);
  } else {
    max_q = c.seqlen_q;
    max_k = c.seqlen_k;
    total_q = c.batch * c.seqlen_q;
    total_k = c.batch * c.seqlen_k;
    q = HostTensor(c.dtype, {c.batch, c.seqlen_q, hq, d}, order4, pad);
    k = HostTensor(c.dtype, {c.batch, c.seqlen_k, hk, d}, order4, pad);
    lse = HostTensor(FA_DTYPE_FP32, {c.batch, hq, c.seqlen_q}, {}, c.strided ? 2 : 0);
  }
  v = HostTensor(c.dtype, k.shape(), c.strided ? (c.varlen() ? order3 : order4) : std::vector<int>{}, pad);
  out = HostTensor(c.out_type(), q.shape(), c.strided ? (c.varlen() ? order3 : order4) : std::vector<int>{}, pad);
  dout = HostTensor(c.out_type(), q.shape());
  dq = HostTensor(c.dtype, q.shape(), c.strided ? (c.varlen() ? order3 : order4) : std::vector<int>{}, pad);
  dk = HostTensor(c.dtype, k.shape());
  dv = HostTensor(c.dtype, k.shape());
  q.fill_normal(rng, c.input_scale);
  k.fill_normal(rng, c.input_scale);
  v.fill_normal(rng);
  dout.fill_normal(rng);
  if (c.alibi) {
    const int64_t nb = c.varlen() ? int64_t(c.lens_q.size()) : c.batch;
    // Per-batch slopes when the seed is odd, else one vector: both layouts get exercised.
    alibi = (c.seed % 2) ? HostTensor(FA_DTYPE_FP32, {nb, hq}) : HostTensor(FA_DTYPE_FP32, {hq});
    std::uniform_real_distribution<double> u(0.05, 1.0);
    for (int64_t i = 0; i < alibi.numel(); ++i) alibi.set(i, u(rng));
  }
  if (!c.cache_lens.empty() || c.page_size > 0) make_cache(order4, pad);
  if (c.has_bias()) make_bias();
  if (c.descale) {  // its own random stream, as the bias's
    std::mt19937_64 drng(c.seed * 0xA0761D6478BD642Full + 99);
    std::uniform_real_distribution<double> u(0.25, 2.0);
    const int64_t nb = c.varlen() ? int64_t(c.lens_q.size()) : c.batch;
    for (HostTensor* t : {&q_descale, &k_descale, &v_descale}) {
      *t = HostTensor(FA_DTYPE_FP32, {nb, hk});
      for (int64_t i = 0; i < t->numel(); ++i) t->set(i, u(drng));
    }
  }
  poison_outputs();
}

void Problem::make_bias() {
  // Its own random stream: q, k, v, dout are those of the same Case without a bias.
  std::mt19937_64 rng(c.seed * 0xD6E8FEB86659FD93ull + 4242);
  const int64_t full[4] = {c.varlen() ? int64_t(c.lens_q.size()) : c.batch, c.heads_q,
                           c.varlen() ? max_q + 2 : c.seqlen_q, c.varlen() ? max_k + 2 : c.seqlen_k};
  std::vector<int64_t> shape(4);
  for (int i = 0; i < 4; ++i) shape[size_t(i)] = c.bias_full[i] ? full[i] : 1;
  // Strided cases: keys outermost in memory after the batch, padding after each row.
  const std::vector<int> order = c.strided ? std::vector<int>{0, 3, 1, 2} : std::vector<int>{};
  bias = HostTensor(fa_dtype(c.bias_dtype), shape, order, c.strided ? 5 : 0);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::bernoulli_distribution keep(c.bias_keep);
  const double hidden = c.bias_is_mask() ? 0.0 : -HUGE_VAL;
  for (int64_t e = 0; e < bias.numel(); ++e) {
    const int64_t j = e % shape[3], i = (e / shape[3]) % shape[2];
    double x = c.bias_is_mask() ? (keep(rng) ? (c.bias_dtype == FA_DTYPE_INT8 ? -3 : 1) : 0)
                                : normal(rng);
    if (c.bias_empty_rows && (shape[2] > 1 ? i % 7 == 2 : j % 5 == 3)) x = hidden;
    bias.set(e, x);
  }
  if (c.dbias)
    dbias = HostTensor(c.dbias_dtype < 0 ? FA_DTYPE_FP32 : fa_dtype(c.dbias_dtype), shape,
                       order, c.strided ? 2 : 0);
}

void Problem::make_cache(const std::vector<int>& order4, int64_t pad) {
  // Its own random stream: the values above are those of the same Case without a cache.
  std::mt19937_64 rng(c.seed * 0x2545F4914F6CDD1Dull + 777);
  std::vector<int32_t> lens = c.cache_lens;
  const int64_t page = c.page_size;
  // A packed batch's pages hold its longest sequence; each sequence's keys are counted by
  // cu_seqlens_k (no cache_seqlens).
  const int64_t keys_max = c.varlen() ? max_k : c.seqlen_k;
  const int64_t max_blocks = page > 0 ? (keys_max + page - 1) / page : 0;
  if (!c.varlen() && lens.empty() && page > 0 && max_blocks * page != c.seqlen_k)
    lens.assign(size_t(c.batch), int32_t(c.seqlen_k));  // keys past seqlen_k are not keys
  if (!lens.empty()) {
    cache_seqlens = HostTensor(FA_DTYPE_INT32, {c.batch});
    for (int64_t b = 0; b < c.batch; ++b) cache_seqlens.set(b, lens[size_t(b)]);
  }
  if (page == 0) return;
  // The blocks of every batch entry, in a random order among two spare ones; the spare blocks
  // and the rows past each entry's keys stay poisoned (NaN), and so do the block table's entries
  // past the keys: nothing may read them.
  const int64_t batch = c.varlen() ? int64_t(c.lens_k.size()) : c.batch;
  const int64_t num_blocks = batch * max_blocks + 2;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<int64_t> shape = {num_blocks, page, c.heads_kv, c.head_dim};
  k_pages = HostTensor(c.dtype, shape, order4, pad);
  v_pages = HostTensor(c.dtype, shape, order4, pad);
  k_pages.poison();
  v_pages.poison();
  block_table = HostTensor(FA_DTYPE_INT32, {batch, max_blocks});
  const int64_t hk = c.heads_kv, d = c.head_dim;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t keys = c.varlen() ? c.lens_k[size_t(b)]
                         : lens.empty() ? c.seqlen_k : lens[size_t(b)];
    // The dense row of key t: packed rows from the sequence's start, or (b, t).
    const int64_t row0 = c.varlen() ? int64_t(cu_k.get(b)) : b * c.seqlen_k;
    for (int64_t n = 0; n < max_blocks; ++n)
      block_table.set(b * max_blocks + n, n * page < keys ? perm[size_t(b * max_blocks + n)] : -1);
    for (int64_t t = 0; t < keys; ++t) {
      const int64_t block = perm[size_t(b * max_blocks + t / page)];
      for (int64_t h = 0; h < hk; ++h)
        for (int64_t x = 0; x < d; ++x) {
          const int64_t from = ((row0 + t) * hk + h) * d + x;
          const int64_t to = ((block * page + t % page) * hk + h) * d + x;
          k_pages.set(to, k.get(from));
          v_pages.set(to, v.get(from));
        }
    }
  }
}

void Problem::poison_outputs() {
  out.poison();
  lse.poison();
  dq.poison();
  dk.poison();
  dv.poison();
  if (dbias.data()) dbias.poison();
}

fa_params Problem::params(fa_backend backend, bool with_grads) const {
  fa::Options o;
  o.backend = backend;
  o.softmax_scale = c.softmax_scale;
  o.causal = c.causal;
  o.window_left = c.window_left;
  o.window_right = c.window_right;
  o.softcap = c.softcap;
  if (c.alibi) o.alibi_slopes = alibi.view();
  o.dropout_p = c.dropout_p;
  o.deterministic = c.deterministic;
  o.seed = 0x1234567890abcdefull ^ c.seed;
  o.offset = 977 * c.seed;
  if (c.varlen()) {
    o.cu_seqlens_q = cu_q.view();
    o.cu_seqlens_k = cu_k.view();
    o.max_seqlen_q = max_q;
    o.max_seqlen_k = max_k;
  }
  if (cache_seqlens.data()) o.cache_seqlens = cache_seqlens.view();
  if (block_table.data()) o.block_table = block_table.view();
  o.q_shift = c.q_shift;
  if (bias.data()) o.attn_bias = bias.view();
  if (with_grads && dbias.data()) o.dbias = dbias.view();
  if (q_descale.data()) {
    o.q_descale = q_descale.view();
    o.k_descale = k_descale.view();
    o.v_descale = v_descale.view();
  }
  const bool paged = block_table.data() != nullptr;
  fa_params p = fa::make_params(q.view(), paged ? k_pages.view() : k.view(),
                                paged ? v_pages.view() : v.view(), out.view(), lse.view(), o);
  if (with_grads) {
    p.dout = dout.view().raw;
    p.dq = dq.view().raw;
    p.dk = dk.view().raw;
    p.dv = dv.view().raw;
  }
  return p;
}

namespace {
double round_to_dtype(fa_dtype t, double x) {
  switch (t) {
    case FA_DTYPE_FP16: return to_float(to_half(float(x)));
    case FA_DTYPE_BF16: return to_float(to_bf16(float(x)));
    default: return float(x);
  }
}

// Dense (rows, heads, d) doubles; per-batch stride for fixed-length batches.
View dense_view(std::vector<double>& buf, const Problem& pr, int64_t heads, int64_t seqlen) {
  View v;
  v.data = buf.data();
  v.dtype = DType::F64;
  v.stride_h = pr.c.head_dim;
  v.stride_s = heads * pr.c.head_dim;
  v.stride_b = pr.c.varlen() ? 0 : seqlen * heads * pr.c.head_dim;
  return v;
}
}  // namespace

Dense reference(const Problem& pr, bool use_float, bool grads, bool round_p) {
  const fa_params fp = pr.params(FA_BACKEND_REFERENCE, grads);
  Params p = grads ? validate_backward(&fp) : validate_forward(&fp);
  const int64_t hq = pr.c.heads_q, hk = pr.c.heads_kv, d = pr.c.head_dim;
  Dense r;
  r.out.assign(size_t(pr.total_q * hq * d), 0.0);
  std::vector<float> lse(size_t(pr.total_q * hq));
  p.out = dense_view(r.out, pr, hq, p.seqlen_q);
  p.lse.data = lse.data();
  p.lse.stride_s = 1;
  p.lse.stride_h = pr.c.varlen() ? pr.total_q : p.seqlen_q;
  p.lse.stride_b = pr.c.varlen() ? 0 : hq * p.seqlen_q;
  const int threads = omp_get_max_threads();
  std::vector<unsigned char> ws(cpu::reference_forward_workspace(p, threads));
  if (use_float) {
    cpu::ReferenceOptions opts;
    opts.round_p = round_p;
    cpu::reference_forward<float>(p, ws.data(), ws.size(), threads, opts);
  } else {
    cpu::reference_forward<double>(p, ws.data(), ws.size(), threads);
  }
  r.lse.assign(lse.begin(), lse.end());
  if (use_float)  // a same-precision implementation stores its output in the tensors' dtype
    for (double& x : r.out) x = round_to_dtype(pr.c.out_type(), x);
  if (grads) {
    r.dq.assign(size_t(pr.total_q * hq * d), 0.0);
    r.dk.assign(size_t(pr.total_k * hk * d), 0.0);
    r.dv.assign(size_t(pr.total_k * hk * d), 0.0);
    p.dq = dense_view(r.dq, pr, hq, p.seqlen_q);
    p.dk = dense_view(r.dk, pr, hk, p.seqlen_k);
    p.dv = dense_view(r.dv, pr, hk, p.seqlen_k);
    if (p.bias.grad) {  // into a dense double buffer of the bias's shape
      r.dbias.assign(size_t(pr.dbias.numel()), 0.0);
      p.bias.grad = r.dbias.data();
      p.bias.grad_dtype = DType::F64;
      int64_t stride = 1;
      for (int i = 3; i >= 0; --i) {
        p.bias.grad_stride[i] = stride;
        stride *= p.bias.grad_shape[i];
      }
    }
    std::vector<unsigned char> wsb(cpu::reference_backward_workspace(p, threads));
    if (use_float) {
      // Its backward reads that stored output for D = rowsum(dO * O), as FlashAttention's does.
      cpu::ReferenceOptions opts;
      opts.round_p = round_p;
      opts.stored_out_delta = true;
      cpu::reference_backward<float>(p, wsb.data(), wsb.size(), threads, opts);
    } else {
      cpu::reference_backward<double>(p, wsb.data(), wsb.size(), threads);
    }
  }
  if (use_float) {
    for (auto* v : {&r.dq, &r.dk, &r.dv})
      for (double& x : *v) x = round_to_dtype(pr.c.dtype, x);
    if (pr.dbias.data())
      for (double& x : r.dbias) x = round_to_dtype(pr.dbias.dtype(), x);
  }
  return r;
}

Dense outputs(const Problem& pr, bool grads) {
  auto all = [](const HostTensor& t) {
    std::vector<double> v(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get(i);
    return v;
  };
  Dense r;
  r.out = all(pr.out);
  r.lse = all(pr.lse);
  if (grads) {
    r.dq = all(pr.dq);
    r.dk = all(pr.dk);
    r.dv = all(pr.dv);
    if (pr.dbias.data()) r.dbias = all(pr.dbias);
  }
  return r;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const double d = std::fabs(a[i] - b[i]);
    if (!(d <= std::numeric_limits<double>::max())) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

void expect_rule(const char* what, const std::vector<double>& got, const std::vector<double>& ref,
                 const std::vector<double>& naive, double factor, double atol) {
  const double err = max_abs_diff(got, ref), base = max_abs_diff(naive, ref);
  // Where the error is largest (the first such element), for the failure's message.
  size_t at = 0;
  if (got.size() == ref.size())
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != ref[i] && !(std::fabs(got[i] - ref[i]) <= std::fabs(got[at] - ref[at]))) at = i;
  EXPECT_LE(err, factor * base + atol)
      << what << ": error " << err << ", same-precision naive error " << base << ", |ref| max "
      << max_abs(ref) << "; worst at element " << at << " of " << ref.size() << ": got "
      << (at < got.size() ? got[at] : 0.0) << ", ref " << (at < ref.size() ? ref[at] : 0.0)
      << ", naive " << (at < naive.size() ? naive[at] : 0.0);
}

void expect_rules(const Dense& got, const Dense& ref, const Dense& naive, bool grads) {
  expect_rule("out", got.out, ref.out, naive.out, 2, 1e-5);
  expect_rule("lse", got.lse, ref.lse, naive.lse, 2, 1e-5);
  if (!grads) return;
  expect_rule("dq", got.dq, ref.dq, naive.dq, 3, 1e-4);
  expect_rule("dk", got.dk, ref.dk, naive.dk, 3, 1e-4);
  expect_rule("dv", got.dv, ref.dv, naive.dv, 3, 1e-4);
}

void run_forward(Problem& pr, fa_backend backend) {
  const fa_params p = pr.params(backend, false);
  fa::HostWorkspace ws(fa::forward_workspace_size(p));
  fa::forward(p, ws.data(), ws.size());
}

void run_backward(Problem& pr, fa_backend backend) {
  const fa_params p = pr.params(backend, true);
  fa::HostWorkspace ws(fa::backward_workspace_size(p));
  fa::backward(p, ws.data(), ws.size());
}

}  // namespace fa::test
