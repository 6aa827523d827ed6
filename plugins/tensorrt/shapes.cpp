#include "shapes.h"

#include <limits>

namespace fa_trt {

namespace {

bool known(int64_t x) { return x >= 0; }

bool fail(std::string* error, const std::string& msg) {
  *error = msg;
  return false;
}

std::string dims_str(const nvinfer1::Dims& d) {
  std::string s = "(";
  for (int32_t i = 0; i < d.nbDims; ++i) s += (i ? ", " : "") + std::to_string(d.d[i]);
  return s + ")";
}

std::string dim_name(const char* input, int i) { return std::string(input) + ".shape[" + std::to_string(i) + "]"; }

// a == b where both are known.
bool agree(int64_t a, int64_t b) { return !known(a) || !known(b) || a == b; }

bool product_fits(const nvinfer1::Dims& d) {
  int64_t n = 1;
  for (int32_t i = 0; i < d.nbDims; ++i) {
    if (!known(d.d[i])) return true;
    if (__builtin_mul_overflow(n, d.d[i], &n)) return false;
  }
  return true;
}

fa_tensor view(const void* base, fa_dtype dt, int64_t offset, const int64_t shape[4], const int64_t stride[4],
               fa_device dev) {
  fa_tensor t{};
  t.data = const_cast<char*>(static_cast<const char*>(base)) + offset * 2;  // fp16 / bf16: 2 bytes
  t.dtype = dt;
  t.rank = 4;
  for (int k = 0; k < 4; ++k) {
    t.shape[k] = shape[k];
    t.stride[k] = stride[k];
  }
  t.device = dev;
  return t;
}

}  // namespace

std::string input_count_error(const Config& c, int32_t nb_inputs) {
  return std::string("layout ") + layout_name(c.layout) + " takes " + std::to_string(c.nb_inputs()) +
         (c.nb_inputs() == 1 ? " input (qkv)" : " inputs (q, k, v)") + "; the node has " + std::to_string(nb_inputs);
}

bool read_sizes(const Config& c, const nvinfer1::Dims* in, int32_t nb_inputs, Sizes* out, std::string* error) {
  *out = Sizes{};
  Sizes& s = *out;
  const char* layout = layout_name(c.layout);
  if (nb_inputs != c.nb_inputs()) return fail(error, input_count_error(c, nb_inputs));
  const char* names[3] = {c.layout == Layout::PackedQkv ? "qkv" : "q", "k", "v"};
  const int rank = c.layout == Layout::PackedQkv ? 3 : 4;
  for (int32_t i = 0; i < nb_inputs; ++i) {
    if (in[i].nbDims != rank)
      return fail(error, std::string(names[i]) + " has shape " + dims_str(in[i]) + "; layout " + layout + " takes " +
                             std::to_string(rank) + "-D inputs");
    if (!product_fits(in[i])) return fail(error, std::string(names[i]) + " has shape " + dims_str(in[i]) +
                                                     ": its element count does not fit in int64");
  }

  if (c.layout == Layout::PackedQkv) {
    const nvinfer1::Dims& x = in[0];
    s.batch = x.d[0];
    s.seqlen_q = s.seqlen_k = x.d[1];
    s.packed_features = x.d[2];
    s.heads_q = c.num_heads;
    s.heads_kv = c.num_kv_heads;
    const int64_t per_dim = int64_t(c.num_heads) + 2 * int64_t(c.num_kv_heads);
    if (known(x.d[2])) {
      if (x.d[2] % per_dim != 0 || x.d[2] == 0)
        return fail(error, "qkv.shape[2]=" + std::to_string(x.d[2]) + " must be (num_heads + 2 num_kv_heads) * " +
                               "head_dim = " + std::to_string(per_dim) + " * head_dim (num_heads=" +
                               std::to_string(c.num_heads) + ", num_kv_heads=" + std::to_string(c.num_kv_heads) +
                               ")");
      s.head_dim = x.d[2] / per_dim;
    }
  } else {
    const nvinfer1::Dims &q = in[0], &k = in[1], &v = in[2];
    const bool bhsd = c.layout == Layout::Bhsd;
    const int seq = bhsd ? 2 : 1, heads = bhsd ? 1 : 2;
    for (int i = 0; i < 4; ++i)
      if (!agree(k.d[i], v.d[i]))
        return fail(error, "v has shape " + dims_str(v) + "; it must have k's " + dims_str(k));
    s.batch = q.d[0];
    s.seqlen_q = q.d[seq];
    s.seqlen_k = k.d[seq];
    s.heads_q = q.d[heads];
    s.heads_kv = k.d[heads];
    s.head_dim = q.d[3];
    if (!agree(k.d[0], q.d[0]))
      return fail(error, dim_name("k", 0) + "=" + std::to_string(k.d[0]) + " must equal " + dim_name("q", 0) + "=" +
                             std::to_string(q.d[0]) + " (batch)");
    if (!agree(k.d[3], q.d[3]))
      return fail(error, dim_name("k", 3) + "=" + std::to_string(k.d[3]) + " must equal " + dim_name("q", 3) + "=" +
                             std::to_string(q.d[3]) + " (head_dim)");
    if (c.num_heads > 0 && !agree(s.heads_q, c.num_heads))
      return fail(error, dim_name("q", heads) + "=" + std::to_string(s.heads_q) + " (heads) differs from num_heads=" +
                             std::to_string(c.num_heads));
    if (c.num_kv_heads > 0 && !agree(s.heads_kv, c.num_kv_heads))
      return fail(error, dim_name("k", heads) + "=" + std::to_string(s.heads_kv) +
                             " (heads_kv) differs from num_kv_heads=" + std::to_string(c.num_kv_heads));
    if (s.heads_kv == 0) return fail(error, dim_name("k", heads) + "=0 (heads_kv) must be > 0");
    if (known(s.heads_q) && known(s.heads_kv) && s.heads_q % s.heads_kv != 0)
      return fail(error, dim_name("k", heads) + "=" + std::to_string(s.heads_kv) + " (heads_kv) must divide " +
                             dim_name("q", heads) + "=" + std::to_string(s.heads_q) + " (heads_q)");
  }
  if (known(s.head_dim) && (s.head_dim < 1 || s.head_dim > FA_MAX_HEAD_DIM))
    return fail(error, "head_dim=" + std::to_string(s.head_dim) + " must be in [1, " +
                           std::to_string(FA_MAX_HEAD_DIM) + "]");
  return true;
}

nvinfer1::Dims output_dims(const Config& c, const Sizes& s) {
  nvinfer1::Dims d{};
  d.nbDims = 4;
  const bool bhsd = c.layout == Layout::Bhsd;
  d.d[0] = s.batch;
  d.d[1] = bhsd ? s.heads_q : s.seqlen_q;
  d.d[2] = bhsd ? s.seqlen_q : s.heads_q;
  d.d[3] = s.head_dim;
  return d;
}

fa_params make_params(const Config& c, const Sizes& s, fa_dtype dt, const void* const* inputs, void* output,
                      fa_device dev) {
  fa_params p;
  fa_params_init(&p);
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  p.softmax_scale = c.scale;
  const int64_t b = s.batch, sq = s.seqlen_q, sk = s.seqlen_k, hq = s.heads_q, hk = s.heads_kv, d = s.head_dim;
  const int64_t q_shape[4] = {b, sq, hq, d}, k_shape[4] = {b, sk, hk, d};
  switch (c.layout) {
    case Layout::Bshd: {
      const int64_t qs[4] = {sq * hq * d, hq * d, d, 1}, ks[4] = {sk * hk * d, hk * d, d, 1};
      p.q = view(inputs[0], dt, 0, q_shape, qs, dev);
      p.k = view(inputs[1], dt, 0, k_shape, ks, dev);
      p.v = view(inputs[2], dt, 0, k_shape, ks, dev);
      p.out = view(output, dt, 0, q_shape, qs, dev);
      break;
    }
    case Layout::Bhsd: {  // memory (b, h, s, d), seen as (b, s, h, d)
      const int64_t qs[4] = {hq * sq * d, d, sq * d, 1}, ks[4] = {hk * sk * d, d, sk * d, 1};
      p.q = view(inputs[0], dt, 0, q_shape, qs, dev);
      p.k = view(inputs[1], dt, 0, k_shape, ks, dev);
      p.v = view(inputs[2], dt, 0, k_shape, ks, dev);
      p.out = view(output, dt, 0, q_shape, qs, dev);
      break;
    }
    case Layout::PackedQkv: {  // one row of (hq + 2 hk) heads per token
      const int64_t row = (hq + 2 * hk) * d;
      const int64_t st[4] = {sq * row, row, d, 1}, os[4] = {sq * hq * d, hq * d, d, 1};
      p.q = view(inputs[0], dt, 0, q_shape, st, dev);
      p.k = view(inputs[0], dt, hq * d, k_shape, st, dev);
      p.v = view(inputs[0], dt, (hq + hk) * d, k_shape, st, dev);
      p.out = view(output, dt, 0, q_shape, os, dev);
      break;
    }
  }
  return p;
}

}  // namespace fa_trt
