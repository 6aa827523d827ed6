#include "api/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/checked.h"

namespace fa {
namespace {

const char* dtype_name(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP32: return "fp32";
    case FA_DTYPE_FP16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
    case FA_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case FA_DTYPE_INT32: return "int32";
    default: return "unknown";
  }
}

std::string shape_str(const fa_tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank && i < FA_MAX_RANK; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + ")";
}

// Bytes of one element of an fa_dtype (1 for a value no role accepts: the dtype check names it).
int64_t elem_bytes(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP32: return 4;
    case FA_DTYPE_FP16: return 2;
    case FA_DTYPE_BF16: return 2;
    case FA_DTYPE_FP8_E4M3: return 1;
    case FA_DTYPE_INT32: return 4;
    default: return 1;
  }
}

std::string stride_str(const fa_tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.rank && i < FA_MAX_RANK; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.stride[i]);
  }
  return s + ")";
}

// Structural checks of one tensor that every role shares: present, rank, positive sizes,
// non-negative strides, optionally a contiguous last dimension; its element count and the bytes
// it spans from data (the farthest element's offset + 1) fit in int64 and in the address space,
// so that every index the backends compute inside it is a valid int64.
void check_tensor(const fa_tensor& t, const char* name, int rank, bool contiguous_last) {
  if (t.data == nullptr) fail(FA_ERROR_NULL_POINTER, name, ".data is NULL; expected a pointer");
  if (t.rank != rank)
    fail(FA_ERROR_RANK, name, ".rank=", t.rank, " must be ", rank);
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] <= 0)
      fail(FA_ERROR_SIZE, name, ".shape[", i, "]=", t.shape[i], " must be > 0 (shape ",
           shape_str(t), ")");
    if (t.stride[i] < 0)
      fail(FA_ERROR_STRIDE, name, ".stride[", i, "]=", t.stride[i], " must be >= 0");
  }
  if (contiguous_last && t.stride[rank - 1] != 1 && t.shape[rank - 1] != 1)
    fail(FA_ERROR_STRIDE, name, ".stride[", rank - 1, "]=", t.stride[rank - 1],
         " must be 1 (the last dimension must be contiguous)");
  Checked count = 1, last = 0;
  for (int i = 0; i < rank; ++i) {
    count *= t.shape[i];
    last += Checked(t.shape[i] - 1) * t.stride[i];
  }
  if (!count.ok())
    fail(FA_ERROR_SIZE, name, ".shape=", shape_str(t), " has more than 2^63 elements");
  const Checked span = (last + 1) * elem_bytes(t.dtype);
  if (!span.ok() ||
      uint64_t(span.value(name)) > UINTPTR_MAX - reinterpret_cast<uintptr_t>(t.data))
    fail(FA_ERROR_SIZE, name, " (shape ", shape_str(t), ", strides ", stride_str(t),
         ") spans more bytes than the address space holds from ", name, ".data=", t.data);
}

void check_dtype_is(const fa_tensor& t, const char* name, int32_t dtype) {
  if (t.dtype != dtype)
    fail(FA_ERROR_DTYPE, name, ".dtype=", dtype_name(t.dtype), " must be ", dtype_name(dtype));
}

void check_same_shape(const fa_tensor& t, const char* name, const fa_tensor& ref,
                      const char* ref_name) {
  for (int i = 0; i < ref.rank; ++i)
    if (t.shape[i] != ref.shape[i])
      fail(FA_ERROR_SHAPE, name, ".shape[", i, "]=", t.shape[i], " must equal ", ref_name,
           ".shape[", i, "]=", ref.shape[i], " (", name, " ", shape_str(t), ", ", ref_name, " ",
           shape_str(ref), ")");
}

void check_device(const fa_tensor& t, const char* name, const fa_device& dev) {
  if (t.device.type != dev.type || t.device.index != dev.index)
    fail(FA_ERROR_DEVICE, name, ".device=(", t.device.type, ", ", t.device.index,
         ") must equal q.device=(", dev.type, ", ", dev.index, ")");
}

void check_alignment(const fa_tensor& t, const char* name, int64_t bytes) {
  if (reinterpret_cast<uintptr_t>(t.data) % uintptr_t(bytes) != 0)
    fail(FA_ERROR_ALIGNMENT, name, ".data=", t.data, " must be aligned to ", bytes, " bytes");
}

DType to_internal(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP16: return DType::F16;
    case FA_DTYPE_BF16: return DType::BF16;
    default: return DType::F32;
  }
}

View make_view(const fa_tensor& t, bool packed) {
  View v;
  v.data = t.data;
  v.dtype = to_internal(t.dtype);
  if (packed) {  // (total, heads, dim)
    v.stride_b = 0;
    v.stride_s = t.stride[0];
    v.stride_h = t.stride[1];
  } else {  // (batch, seqlen, heads, dim)
    v.stride_b = t.stride[0];
    v.stride_s = t.stride[1];
    v.stride_h = t.stride[2];
  }
  return v;
}

// A data tensor with q's role: dtype, rank, shape, contiguous last dim, device and alignment.
void check_like(const fa_tensor& t, const char* name, const fa_tensor& ref, const char* ref_name,
                const fa_device& dev) {
  check_tensor(t, name, ref.rank, true);
  check_dtype_is(t, name, ref.dtype);
  check_same_shape(t, name, ref, ref_name);
  check_device(t, name, dev);
  check_alignment(t, name, dtype_size(to_internal(t.dtype)));
}

// cu_seqlens values: start at 0, never decrease, end at the packed total, each length within
// max_seqlen. Returns the longest sequence's length, which sizes the CPU's work and scratch
// (not the caller's bound). Only host memory can be read here without a device synchronisation.
int64_t check_cu_seqlens(const fa_tensor& cu, const char* name, int64_t total, int64_t max_seqlen,
                         const char* max_name, const char* total_name) {
  const int32_t* c = static_cast<const int32_t*>(cu.data);
  const int64_t n = cu.shape[0];
  int64_t longest = 0;
  if (c[0] != 0) fail(FA_ERROR_CU_SEQLENS, name, "[0]=", c[0], " must be 0");
  for (int64_t i = 1; i < n; ++i) {
    const int64_t len = int64_t(c[i * cu.stride[0]]) - c[(i - 1) * cu.stride[0]];
    if (len < 0)
      fail(FA_ERROR_CU_SEQLENS, name, "[", i, "]=", c[i * cu.stride[0]], " < ", name, "[", i - 1,
           "]=", c[(i - 1) * cu.stride[0]], "; expected a non-decreasing prefix sum");
    if (len > max_seqlen)
      fail(FA_ERROR_CU_SEQLENS, name, " sequence ", i - 1, " has length ", len, " > ", max_name,
           "=", max_seqlen);
    longest = std::max(longest, len);
  }
  const int64_t last = c[(n - 1) * cu.stride[0]];
  if (last != total)
    fail(FA_ERROR_CU_SEQLENS, name, "[", n - 1, "]=", last, " must equal ", total_name, "=",
         total, " (the packed token count)");
  return longest;
}

Params validate_common(const fa_params* p) {
  if (p == nullptr) fail(FA_ERROR_NULL_POINTER, "params is NULL");
  if (p->struct_size != sizeof(fa_params))
    fail(FA_ERROR_VERSION, "params.struct_size=", p->struct_size, " is not a known size (",
         sizeof(fa_params), " for version ", FA_VERSION_MAJOR, ".", FA_VERSION_MINOR,
         "); call fa_params_init first");
  if (p->backend < FA_BACKEND_AUTO || p->backend > FA_BACKEND_VANILLA)
    fail(FA_ERROR_BACKEND, "params.backend=", p->backend, " is not an fa_backend value");

  // Both cu_seqlens or neither, before q: with only one given, the tensors' rank is ambiguous.
  const bool packed = p->cu_seqlens_q.data != nullptr || p->cu_seqlens_k.data != nullptr;
  if (packed && p->cu_seqlens_q.data == nullptr)
    fail(FA_ERROR_NULL_POINTER, "cu_seqlens_q.data is NULL while cu_seqlens_k is given");
  if (packed && p->cu_seqlens_k.data == nullptr)
    fail(FA_ERROR_NULL_POINTER, "cu_seqlens_k.data is NULL while cu_seqlens_q is given");
  const int rank = packed ? 3 : 4;

  // q first: every other tensor is checked against it.
  check_tensor(p->q, "q", rank, true);
  if (p->q.dtype == FA_DTYPE_FP8_E4M3)
    fail(FA_ERROR_UNSUPPORTED, "q.dtype=fp8_e4m3 is reserved; no backend implements it yet");
  if (p->q.dtype != FA_DTYPE_FP32 && p->q.dtype != FA_DTYPE_FP16 && p->q.dtype != FA_DTYPE_BF16)
    fail(FA_ERROR_DTYPE, "q.dtype=", dtype_name(p->q.dtype), " (", p->q.dtype,
         ") must be fp32, fp16 or bf16");
  const fa_device dev = p->q.device;
  if (dev.type == FA_DEVICE_CPU) {
    if (dev.index != 0) fail(FA_ERROR_DEVICE, "q.device.index=", dev.index, " must be 0 for the CPU");
  } else if (dev.type == FA_DEVICE_CUDA) {
    const int n = cuda_device_count();
    if (dev.index < 0 || dev.index >= n)
      fail(FA_ERROR_DEVICE, "q.device.index=", dev.index, " is not a CUDA device (this build sees ",
           n, ")");
  } else {
    fail(FA_ERROR_DEVICE, "q.device.type=", dev.type, " must be FA_DEVICE_CPU or FA_DEVICE_CUDA");
  }
  check_alignment(p->q, "q", dtype_size(to_internal(p->q.dtype)));

  const int64_t d = p->q.shape[rank - 1];
  if (d > FA_MAX_HEAD_DIM)
    fail(FA_ERROR_HEAD_DIM, "q.shape[", rank - 1, "]=", d, " (head_dim) must be in [1, ",
         FA_MAX_HEAD_DIM, "]");

  for (const auto& [t, name] : {std::pair{&p->k, "k"}, std::pair{&p->v, "v"}}) {
    check_tensor(*t, name, rank, true);
    check_dtype_is(*t, name, p->q.dtype);
    check_device(*t, name, dev);
    check_alignment(*t, name, dtype_size(to_internal(t->dtype)));
  }
  check_same_shape(p->v, "v", p->k, "k");
  if (p->k.shape[rank - 1] != d)
    fail(FA_ERROR_SHAPE, "k.shape[", rank - 1, "]=", p->k.shape[rank - 1],
         " must equal q.shape[", rank - 1, "]=", d, " (head_dim)");
  if (!packed && p->k.shape[0] != p->q.shape[0])
    fail(FA_ERROR_SHAPE, "k.shape[0]=", p->k.shape[0], " must equal q.shape[0]=", p->q.shape[0],
         " (batch)");
  const int64_t hq = p->q.shape[rank - 2], hk = p->k.shape[rank - 2];
  if (hq % hk != 0)
    fail(FA_ERROR_HEADS, "k.shape[", rank - 2, "]=", hk, " (heads_kv) must divide q.shape[",
         rank - 2, "]=", hq, " (heads_q)");

  check_like(p->out, "out", p->q, "q", dev);

  Params r;
  r.backend = static_cast<fa_backend>(p->backend);
  r.device = dev;
  r.dtype = to_internal(p->q.dtype);
  r.heads_q = hq;
  r.heads_kv = hk;
  r.head_dim = d;

  if (packed) {
    for (const auto& [t, name] :
         {std::pair{&p->cu_seqlens_q, "cu_seqlens_q"}, std::pair{&p->cu_seqlens_k, "cu_seqlens_k"}}) {
      check_tensor(*t, name, 1, false);
      check_dtype_is(*t, name, FA_DTYPE_INT32);
      check_device(*t, name, dev);
      check_alignment(*t, name, 4);
      // Before the values are read below: a wider stride would read past the tensor.
      if (t->stride[0] != 1)
        fail(FA_ERROR_STRIDE, name, ".stride[0]=", t->stride[0], " must be 1");
      if (t->shape[0] < 2)
        fail(FA_ERROR_CU_SEQLENS, name, ".shape[0]=", t->shape[0],
             " must be batch + 1 >= 2");
    }
    if (p->cu_seqlens_k.shape[0] != p->cu_seqlens_q.shape[0])
      fail(FA_ERROR_CU_SEQLENS, "cu_seqlens_k.shape[0]=", p->cu_seqlens_k.shape[0],
           " must equal cu_seqlens_q.shape[0]=", p->cu_seqlens_q.shape[0]);
    if (p->max_seqlen_q <= 0)
      fail(FA_ERROR_SIZE, "max_seqlen_q=", p->max_seqlen_q, " must be > 0 for packed batches");
    if (p->max_seqlen_k <= 0)
      fail(FA_ERROR_SIZE, "max_seqlen_k=", p->max_seqlen_k, " must be > 0 for packed batches");
    r.batch = p->cu_seqlens_q.shape[0] - 1;
    r.total_q = p->q.shape[0];
    r.total_k = p->k.shape[0];
    // max_seqlen is the caller's bound on the longest sequence; none is longer than the packed
    // tensor, so a larger bound is still true and is tightened to the token count: it sizes the
    // launches and the workspace, which must follow what the tensors hold, not the claim.
    r.seqlen_q = std::min(p->max_seqlen_q, r.total_q);
    r.seqlen_k = std::min(p->max_seqlen_k, r.total_k);
    if (dev.type == FA_DEVICE_CPU) {  // the real longest sequences, read from the arrays
      r.seqlen_q = check_cu_seqlens(p->cu_seqlens_q, "cu_seqlens_q", r.total_q, p->max_seqlen_q,
                                    "max_seqlen_q", "q.shape[0]");
      r.seqlen_k = check_cu_seqlens(p->cu_seqlens_k, "cu_seqlens_k", r.total_k, p->max_seqlen_k,
                                    "max_seqlen_k", "k.shape[0]");
    }
    r.cu_seqlens_q = static_cast<const int32_t*>(p->cu_seqlens_q.data);
    r.cu_seqlens_k = static_cast<const int32_t*>(p->cu_seqlens_k.data);
  } else {
    r.batch = p->q.shape[0];
    r.seqlen_q = p->q.shape[1];
    r.seqlen_k = p->k.shape[1];
    r.total_q = r.batch * r.seqlen_q;
    r.total_k = r.batch * r.seqlen_k;
  }

  // lse: fp32 (batch, heads_q, seqlen_q) or packed (heads_q, total_q); any strides.
  check_tensor(p->lse, "lse", packed ? 2 : 3, false);
  check_dtype_is(p->lse, "lse", FA_DTYPE_FP32);
  check_device(p->lse, "lse", dev);
  check_alignment(p->lse, "lse", 4);
  const int64_t want_fixed[3] = {r.batch, hq, r.seqlen_q};
  const int64_t want_packed[2] = {hq, r.total_q};
  const int64_t* want = packed ? want_packed : want_fixed;
  for (int i = 0; i < p->lse.rank; ++i)
    if (p->lse.shape[i] != want[i])
      fail(FA_ERROR_SHAPE, "lse.shape[", i, "]=", p->lse.shape[i], " must be ", want[i],
           packed ? " (lse is (heads_q, total_q) for packed batches)"
                  : " (lse is (batch, heads_q, seqlen_q))");

  // Scalars.
  if (!std::isfinite(p->softmax_scale))
    fail(FA_ERROR_SCALE, "softmax_scale=", p->softmax_scale, " must be finite (0 = 1/sqrt(d))");
  if (!std::isfinite(p->softcap) || p->softcap < 0.f)
    fail(FA_ERROR_SOFTCAP, "softcap=", p->softcap, " must be finite and >= 0 (0 = off)");
  if (p->window_left < -1)
    fail(FA_ERROR_WINDOW, "window_left=", p->window_left, " must be >= -1 (-1 = unbounded)");
  if (p->window_right < -1)
    fail(FA_ERROR_WINDOW, "window_right=", p->window_right, " must be >= -1 (-1 = unbounded)");
  if (!(p->dropout_p >= 0.f && p->dropout_p < 1.f))
    fail(FA_ERROR_DROPOUT, "dropout_p=", p->dropout_p, " must be in [0, 1)");

  // ALiBi slopes: fp32 (heads_q) or (batch, heads_q).
  if (p->alibi_slopes.data != nullptr) {
    const fa_tensor& a = p->alibi_slopes;
    if (a.dtype != FA_DTYPE_FP32)
      fail(FA_ERROR_ALIBI, "alibi_slopes.dtype=", dtype_name(a.dtype), " must be fp32");
    if (a.rank != 1 && a.rank != 2)
      fail(FA_ERROR_ALIBI, "alibi_slopes.rank=", a.rank, " must be 1 (heads_q) or 2 (batch, heads_q)");
    if (a.shape[a.rank - 1] != hq || (a.rank == 2 && a.shape[0] != r.batch))
      fail(FA_ERROR_ALIBI, "alibi_slopes.shape=", shape_str(a), " must be (", hq, ") or (", r.batch,
           ", ", hq, ")");
    for (int i = 0; i < a.rank; ++i)
      if (a.stride[i] < 0)
        fail(FA_ERROR_STRIDE, "alibi_slopes.stride[", i, "]=", a.stride[i], " must be >= 0");
    check_device(a, "alibi_slopes", dev);
    check_alignment(a, "alibi_slopes", 4);
    r.alibi_slopes = static_cast<const float*>(a.data);
    r.alibi_stride_b = a.rank == 2 ? a.stride[0] : 0;
    r.alibi_stride_h = a.stride[a.rank - 1];
  }

  r.q = make_view(p->q, packed);
  r.k = make_view(p->k, packed);
  r.v = make_view(p->v, packed);
  r.out = make_view(p->out, packed);
  r.lse.data = static_cast<float*>(p->lse.data);
  if (packed) {
    r.lse.stride_b = 0;
    r.lse.stride_h = p->lse.stride[0];
    r.lse.stride_s = p->lse.stride[1];
  } else {
    r.lse.stride_b = p->lse.stride[0];
    r.lse.stride_h = p->lse.stride[1];
    r.lse.stride_s = p->lse.stride[2];
  }

  r.softmax_scale = p->softmax_scale != 0.f ? p->softmax_scale : 1.f / std::sqrt(float(d));
  r.softcap = p->softcap;
  r.causal = p->causal != 0;
  r.window_left = p->window_left;
  // Causal is the window (window_left, 0), as in FlashAttention.
  r.window_right = r.causal ? 0 : p->window_right;
  r.dropout_p = p->dropout_p;
  r.seed = p->seed;
  r.offset = p->offset;
  r.deterministic = p->deterministic != 0;
  return r;
}

}  // namespace

Params validate_forward(const fa_params* p) { return validate_common(p); }

void validate_device_inputs(const fa_params* p, const Params& r, void* stream) {
  if (p->check_inputs == 0 || r.device.type != FA_DEVICE_CUDA || !r.varlen()) return;
  const int64_t n = r.batch + 1;
  std::vector<int32_t> host(size_t(2 * n));
  copy_to_host_sync(host.data(), r.cu_seqlens_q, size_t(n) * 4, r.device.index, stream);
  copy_to_host_sync(host.data() + n, r.cu_seqlens_k, size_t(n) * 4, r.device.index, stream);
  fa_tensor cq = p->cu_seqlens_q, ck = p->cu_seqlens_k;  // validated: (batch + 1), stride 1
  cq.data = host.data();
  ck.data = host.data() + n;
  check_cu_seqlens(cq, "cu_seqlens_q", r.total_q, p->max_seqlen_q, "max_seqlen_q", "q.shape[0]");
  check_cu_seqlens(ck, "cu_seqlens_k", r.total_k, p->max_seqlen_k, "max_seqlen_k", "k.shape[0]");
}

Params validate_backward(const fa_params* p) {
  Params r = validate_common(p);
  const bool packed = r.varlen();
  check_like(p->dout, "dout", p->q, "q", p->q.device);
  check_like(p->dq, "dq", p->q, "q", p->q.device);
  check_like(p->dk, "dk", p->k, "k", p->q.device);
  check_like(p->dv, "dv", p->v, "v", p->q.device);
  r.dout = make_view(p->dout, packed);
  r.dq = make_view(p->dq, packed);
  r.dk = make_view(p->dk, packed);
  r.dv = make_view(p->dv, packed);
  return r;
}

}  // namespace fa
