#include "api/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "api/params_abi.h"
#include "core/checked.h"
#include "core/cuda_backend.h"
#include "core/device.h"
#include "core/error.h"
#include "core/splits.h"

namespace fa {
namespace {

const char* dtype_name(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP32: return "fp32";
    case FA_DTYPE_FP16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
    case FA_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case FA_DTYPE_INT32: return "int32";
    case FA_DTYPE_BOOL: return "bool";
    case FA_DTYPE_INT8: return "int8";
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
    case FA_DTYPE_BOOL: return 1;
    case FA_DTYPE_INT8: return 1;
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

// ---- dtypes by role ----------------------------------------------------------------------------
// Which dtype each tensor may have is a function of its role and of the inputs' dtype (q's, which
// k and v share). One row per accepted (inputs, role, dtype); cuda_forward_only rows are refused
// for CUDA tensors of a backward with FA_ERROR_UNSUPPORTED (check_cpu_only_features). fp8 e4m3
// inputs (0.5) take an fp16 or bf16 out and have no gradient or rotary rows: their backward and
// rotary are refused by name (check_fp8). On CUDA the families that do not write an fp32 out or
// fp32 gradients with 16-bit inputs refuse them by name (cuda-sm80 writes them).
enum class Role {
  Input,     // k, v: the inputs' dtype
  Output,    // out, and dout (a gradient has its tensor's dtype)
  Gradient,  // dq, dk, dv: their input's dtype, or fp32 with 16-bit inputs (unrounded)
  Rotary,    // rotary_cos, rotary_sin: the inputs' dtype or fp32 (CPU only, as rotary is)
};
struct DtypeRow {
  int32_t inputs;
  Role role;
  int32_t dtype;
  bool cuda_forward_only;  // CUDA: out of a forward only (the backward kernels read out and dout
                           // in the inputs' dtype)
};
constexpr DtypeRow kDtypeRows[] = {
    // inputs        role            dtype           CUDA: forward only
    {FA_DTYPE_FP32, Role::Input,    FA_DTYPE_FP32, false},
    {FA_DTYPE_FP16, Role::Input,    FA_DTYPE_FP16, false},
    {FA_DTYPE_BF16, Role::Input,    FA_DTYPE_BF16, false},
    {FA_DTYPE_FP8_E4M3, Role::Input, FA_DTYPE_FP8_E4M3, false},
    {FA_DTYPE_FP32, Role::Output,   FA_DTYPE_FP32, false},
    {FA_DTYPE_FP16, Role::Output,   FA_DTYPE_FP16, false},
    {FA_DTYPE_FP16, Role::Output,   FA_DTYPE_FP32, true},  // the unrounded result
    {FA_DTYPE_BF16, Role::Output,   FA_DTYPE_BF16, false},
    {FA_DTYPE_BF16, Role::Output,   FA_DTYPE_FP32, true},
    {FA_DTYPE_FP8_E4M3, Role::Output, FA_DTYPE_FP16, false},  // FlashAttention-3: bf16 (or fp16)
    {FA_DTYPE_FP8_E4M3, Role::Output, FA_DTYPE_BF16, false},
    {FA_DTYPE_FP32, Role::Gradient, FA_DTYPE_FP32, false},
    {FA_DTYPE_FP16, Role::Gradient, FA_DTYPE_FP16, false},
    {FA_DTYPE_FP16, Role::Gradient, FA_DTYPE_FP32, false},  // the unrounded gradients
    {FA_DTYPE_BF16, Role::Gradient, FA_DTYPE_BF16, false},
    {FA_DTYPE_BF16, Role::Gradient, FA_DTYPE_FP32, false},
    {FA_DTYPE_FP32, Role::Rotary,   FA_DTYPE_FP32, false},
    {FA_DTYPE_FP16, Role::Rotary,   FA_DTYPE_FP16, false},
    {FA_DTYPE_FP16, Role::Rotary,   FA_DTYPE_FP32, false},
    {FA_DTYPE_BF16, Role::Rotary,   FA_DTYPE_BF16, false},
    {FA_DTYPE_BF16, Role::Rotary,   FA_DTYPE_FP32, false},
};

const DtypeRow* dtype_row(int32_t inputs, Role role, int32_t dtype) {
  for (const DtypeRow& r : kDtypeRows)
    if (r.inputs == inputs && r.role == role && r.dtype == dtype) return &r;
  return nullptr;
}

// t's dtype is one its role accepts with these inputs (the device is checked by
// check_cpu_only_features).
void check_role_dtype(const fa_tensor& t, const char* name, Role role, int32_t inputs) {
  if (dtype_row(inputs, role, t.dtype) != nullptr) return;
  std::string allowed;
  for (const DtypeRow& r : kDtypeRows)
    if (r.inputs == inputs && r.role == role)
      allowed += (allowed.empty() ? "" : " or ") + std::string(dtype_name(r.dtype));
  fail(FA_ERROR_DTYPE, name, ".dtype=", dtype_name(t.dtype), " must be ", allowed, " (q.dtype=",
       dtype_name(inputs), ")");
}

DType to_internal(int32_t t) {
  switch (t) {
    case FA_DTYPE_FP16: return DType::F16;
    case FA_DTYPE_BF16: return DType::BF16;
    case FA_DTYPE_FP8_E4M3: return DType::E4M3;
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

// A data tensor shaped like ref: rank, its role's dtype, shape, contiguous last dim, device and
// alignment.
void check_like(const fa_tensor& t, const char* name, Role role, int32_t inputs,
                const fa_tensor& ref, const char* ref_name, const fa_device& dev) {
  check_tensor(t, name, ref.rank, true);
  check_role_dtype(t, name, role, inputs);
  check_same_shape(t, name, ref, ref_name);
  check_device(t, name, dev);
  check_alignment(t, name, dtype_size(to_internal(t.dtype)));
}

// A 1-D int32 index array, contiguous: its values are read at stride 1.
void check_index_vector(const fa_tensor& t, const char* name, const fa_device& dev) {
  check_tensor(t, name, 1, false);
  check_dtype_is(t, name, FA_DTYPE_INT32);
  check_device(t, name, dev);
  check_alignment(t, name, 4);
  // Before the values are read: a wider stride would read past the tensor.
  if (t.stride[0] != 1) fail(FA_ERROR_STRIDE, name, ".stride[0]=", t.stride[0], " must be 1");
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

// Whether a call uses any KV-cache field, and the name of the first one given (for the refusals
// of the backward and of packed batches).
// with_table false: the fields beside block_table (those a packed batch may not take).
const char* kv_cache_feature(const fa_params& p, bool with_table = true) {
  if (with_table && p.block_table.data != nullptr) return "block_table (a paged KV cache)";
  if (p.cache_seqlens.data != nullptr) return "cache_seqlens";
  if (p.cache_batch_idx.data != nullptr) return "cache_batch_idx";
  if (p.cache_leftpad.data != nullptr) return "cache_leftpad";
  if (p.k_new.data != nullptr) return "k_new (keys appended to the cache)";
  if (p.v_new.data != nullptr) return "v_new (values appended to the cache)";
  if (p.rotary_cos.data != nullptr) return "rotary_cos";
  if (p.rotary_sin.data != nullptr) return "rotary_sin";
  return nullptr;
}

// A 1-D int32 (batch) index array of the KV cache.
const int32_t* check_batch_vector(const fa_tensor& t, const char* name, int64_t batch,
                                  const fa_device& dev) {
  check_index_vector(t, name, dev);
  if (t.shape[0] != batch)
    fail(FA_ERROR_SHAPE, name, ".shape[0]=", t.shape[0], " must equal q.shape[0]=", batch,
         " (batch)");
  return static_cast<const int32_t*>(t.data);
}

// k_new, v_new: (batch, seqlen_new, heads_kv, d) in the inputs' dtype, both or neither.
void check_append(const fa_params* p, Params& r) {
  const bool has_k = p->k_new.data != nullptr, has_v = p->v_new.data != nullptr;
  if (!has_k && !has_v) return;
  if (!has_k) fail(FA_ERROR_NULL_POINTER, "k_new.data is NULL while v_new is given");
  if (!has_v) fail(FA_ERROR_NULL_POINTER, "v_new.data is NULL while k_new is given");
  const fa_device dev = p->q.device;
  for (const auto& [t, name] : {std::pair{&p->k_new, "k_new"}, std::pair{&p->v_new, "v_new"}}) {
    check_tensor(*t, name, 4, true);
    check_role_dtype(*t, name, Role::Input, p->q.dtype);
    check_device(*t, name, dev);
    check_alignment(*t, name, dtype_size(to_internal(t->dtype)));
  }
  const fa_tensor& kn = p->k_new;
  const int64_t want[4] = {r.batch, kn.shape[1], r.heads_kv, r.head_dim};
  const char* what[4] = {"q.shape[0] (batch)", "", "k.shape[2] (heads_kv)", "q.shape[3] (head_dim)"};
  for (int i : {0, 2, 3})
    if (kn.shape[i] != want[i])
      fail(FA_ERROR_SHAPE, "k_new.shape[", i, "]=", kn.shape[i], " must equal ", what[i], "=",
           want[i], " (k_new is (batch, seqlen_new, heads_kv, head_dim))");
  check_same_shape(p->v_new, "v_new", kn, "k_new");
  if (p->cache_seqlens.data == nullptr)
    fail(FA_ERROR_NULL_POINTER, "cache_seqlens.data is NULL; k_new is appended at cache_seqlens, "
         "so it needs them (as flash_attn_with_kvcache)");
  r.k_new = make_view(p->k_new, false);
  r.v_new = make_view(p->v_new, false);
  r.seqlen_new = kn.shape[1];
}

// rotary_cos, rotary_sin: (seqlen_ro, rotary_dim / 2), both or neither, only with k_new. Every
// position the call rotates must be a row of them (the CPU reads cache_seqlens: host memory).
void check_rotary(const fa_params* p, Params& r) {
  const bool has_cos = p->rotary_cos.data != nullptr, has_sin = p->rotary_sin.data != nullptr;
  if (!has_cos && !has_sin) return;
  if (!has_cos) fail(FA_ERROR_NULL_POINTER, "rotary_cos.data is NULL while rotary_sin is given");
  if (!has_sin) fail(FA_ERROR_NULL_POINTER, "rotary_sin.data is NULL while rotary_cos is given");
  if (r.seqlen_new == 0)
    fail(FA_ERROR_NULL_POINTER, "k_new.data is NULL; rotary_cos / rotary_sin rotate the keys "
         "appended to the cache (and q), so they need k_new and v_new");
  const fa_device dev = p->q.device;
  for (const auto& [t, name] :
       {std::pair{&p->rotary_cos, "rotary_cos"}, std::pair{&p->rotary_sin, "rotary_sin"}}) {
    check_tensor(*t, name, 2, true);
    check_role_dtype(*t, name, Role::Rotary, p->q.dtype);
    check_device(*t, name, dev);
    check_alignment(*t, name, dtype_size(to_internal(t->dtype)));
  }
  const fa_tensor& cos = p->rotary_cos;
  if (p->rotary_sin.dtype != cos.dtype)
    fail(FA_ERROR_DTYPE, "rotary_sin.dtype=", dtype_name(p->rotary_sin.dtype),
         " must equal rotary_cos.dtype=", dtype_name(cos.dtype));
  check_same_shape(p->rotary_sin, "rotary_sin", cos, "rotary_cos");
  if (2 * cos.shape[1] > r.head_dim)
    fail(FA_ERROR_SHAPE, "rotary_cos.shape[1]=", cos.shape[1], " (rotary_dim / 2) must be <= ",
         r.head_dim / 2, ": rotary_dim=", 2 * cos.shape[1], " must be <= head_dim=", r.head_dim);
  Params::Rotary& ro = r.rotary;
  ro.cos = cos.data;
  ro.sin = p->rotary_sin.data;
  ro.dtype = to_internal(cos.dtype);
  ro.cos_stride_s = cos.stride[0];
  ro.sin_stride_s = p->rotary_sin.stride[0];
  ro.dim = 2 * cos.shape[1];
  ro.seqlen = cos.shape[0];
  ro.interleaved = p->rotary_interleaved != 0;
  // flash_attn_with_kvcache: causal or local calls rotate query i at cache_seqlens + i.
  ro.q_positions_advance = p->causal != 0 || p->window_left >= 0 || p->window_right >= 0;
}

// Every position the call rotates is a row of rotary_cos / rotary_sin; seqlens: cache_seqlens in
// host memory.
void check_rotary_positions(const Params& r, const int32_t* seqlens) {
  const Params::Rotary& ro = r.rotary;
  if (ro.dim == 0) return;
  const int64_t rows = std::max(r.seqlen_new, ro.q_positions_advance ? r.seqlen_q : int64_t(1));
  for (int64_t b = 0; b < r.batch; ++b) {
    const int64_t need = int64_t(seqlens[b]) + rows;  // positions [cache_seqlens, need)
    if (need > ro.seqlen)
      fail(FA_ERROR_SHAPE, "rotary_cos.shape[0]=", ro.seqlen, " (seqlen_ro) must be >= ", need,
           ": batch entry ", b, " rotates positions cache_seqlens[", b, "]=", seqlens[b],
           " to ", need - 1, " (", rows, ro.q_positions_advance ? " rows of k_new / q)" : " rows of k_new)");
  }
}

// The KV cache's index arrays as host memory (the CPU's own, or check_inputs' copies of a CUDA
// call's); nullptr where the call has none.
struct KvArrays {
  const int32_t* block_table;
  const int32_t* seqlens;
  const int32_t* batch_idx;
  const int32_t* leftpad;
};

// The values of the KV cache's arrays: every row, length, left padding and block within the
// cache (shapes already checked by check_kv_cache, which set r's cache fields). Returns the most
// keys a batch entry attends to.
int64_t check_kv_values(const fa_params* p, const Params& r, const KvArrays& a) {
  const bool paged = a.block_table != nullptr, cached = a.seqlens != nullptr;
  const int64_t capacity = r.cache_capacity;
  const char* capacity_name = paged ? "block_table.shape[1] * k.shape[1]" : "k.shape[1]";
  if (a.batch_idx) {
    const int64_t rows = p->k.shape[0];
    for (int64_t b = 0; b < r.batch; ++b) {
      const int32_t row = a.batch_idx[b];
      if (row < 0 || row >= rows)
        fail(FA_ERROR_CU_SEQLENS, "cache_batch_idx[", b, "]=", row, " must be in [0, ", rows,
             ") (k.shape[0], the rows of the dense cache)");
    }
    if (r.seqlen_new > 0) {  // two entries appending into one row would race
      std::vector<int64_t> first(size_t(rows), -1);
      for (int64_t b = 0; b < r.batch; ++b) {
        int64_t& f = first[size_t(a.batch_idx[b])];
        if (f >= 0)
          fail(FA_ERROR_CU_SEQLENS, "cache_batch_idx[", b, "]=", a.batch_idx[b],
               " repeats cache_batch_idx[", f, "]: with k_new every batch entry appends to its "
               "own cache row");
        f = b;
      }
    }
  }
  int64_t longest = 0;
  for (int64_t b = 0; b < r.batch; ++b) {
    int64_t end = capacity;
    if (cached) {
      const int64_t len = a.seqlens[b];
      if (len < 0 || len > capacity)
        fail(FA_ERROR_CU_SEQLENS, "cache_seqlens[", b, "]=", len, " must be in [0, ", capacity,
             "] (", capacity_name, ", the cache's capacity)");
      if (len + r.seqlen_new > capacity)
        fail(FA_ERROR_CU_SEQLENS, "cache_seqlens[", b, "]=", len, " + k_new.shape[1]=",
             r.seqlen_new, " (seqlen_new) must be <= ", capacity, " (", capacity_name,
             "): the appended keys must fit in the cache");
      end = len + r.seqlen_new;
    }
    const int64_t start = a.leftpad ? int64_t(a.leftpad[b]) : 0;
    if (start < 0 || start > end - r.seqlen_new)
      fail(FA_ERROR_CU_SEQLENS, "cache_leftpad[", b, "]=", start, " must be in [0, ",
           end - r.seqlen_new, "] (", cached ? "cache_seqlens[" + std::to_string(b) + "]"
                                             : std::string(capacity_name),
           "): entry ", b, "'s keys start there");
    longest = std::max(longest, end - start);
    if (paged) {  // the entries this batch entry reads (and writes) name blocks of k
      const int64_t used = ceil_div(end, r.page_size);
      for (int64_t n = start / r.page_size; n < used; ++n) {
        const int32_t block = a.block_table[b * r.block_table_stride + n];
        if (block >= 0 && block < r.num_blocks) continue;
        const std::string reads = start < r.page_size
                                      ? "its first " + std::to_string(used) + " entries"
                                      : "its entries " + std::to_string(start / r.page_size) +
                                            " to " + std::to_string(used - 1);
        fail(FA_ERROR_CU_SEQLENS, "block_table[", b, "][", n, "]=", block,
             " is not a block of k: must be in [0, ", r.num_blocks, ") (k.shape[0]); batch entry ",
             b, " reads ", reads);
      }
    }
  }
  if (cached) check_rotary_positions(r, a.seqlens);
  return longest;
}

// block_table: int32 (batch, max_blocks) over k, v of (num_blocks, page_size, heads_kv, d). Sets
// r's table fields and returns the capacity, max_blocks * page_size keys an entry.
int64_t check_block_table(const fa_params* p, Params& r, const char* batch_name) {
  const fa_tensor& bt = p->block_table;
  check_tensor(bt, "block_table", 2, true);
  check_dtype_is(bt, "block_table", FA_DTYPE_INT32);
  check_device(bt, "block_table", p->q.device);
  check_alignment(bt, "block_table", 4);
  if (bt.shape[0] != r.batch)
    fail(FA_ERROR_SHAPE, "block_table.shape[0]=", bt.shape[0], " must equal ", batch_name, "=",
         r.batch, " (batch)");
  r.block_table = static_cast<const int32_t*>(bt.data);
  r.block_table_stride = bt.stride[0];
  r.max_blocks = bt.shape[1];
  r.num_blocks = p->k.shape[0];
  r.page_size = p->k.shape[1];
  return (Checked(r.max_blocks) * r.page_size)
      .value("the paged cache's capacity block_table.shape[1] * k.shape[1]");
}

// The values: cu (cu_seqlens_k, already checked as prefix sums) and table (the block table's
// rows block_table_stride apart) in host memory.
void check_paged_packed_values(const Params& r, const int32_t* cu, const int32_t* table) {
  for (int64_t b = 0; b < r.batch; ++b) {
    const int64_t len = int64_t(cu[b + 1]) - cu[b];  // validated: non-negative
    if (len > r.cache_capacity)
      fail(FA_ERROR_CU_SEQLENS, "cu_seqlens_k: sequence ", b, " has ", len, " keys > ",
           r.cache_capacity, " (block_table.shape[1] * k.shape[1], the keys its pages hold)");
    for (int64_t n = 0; n < ceil_div(len, r.page_size); ++n) {
      const int32_t block = table[b * r.block_table_stride + n];
      if (block < 0 || block >= r.num_blocks)
        fail(FA_ERROR_CU_SEQLENS, "block_table[", b, "][", n, "]=", block,
             " is not a block of k: must be in [0, ", r.num_blocks, ") (k.shape[0]); sequence ",
             b, " reads its first ", ceil_div(len, r.page_size), " entries");
    }
  }
}

// A packed batch over a paged cache (flash_attn_varlen_func's block_table): sequence b's keys are
// the first cu_seqlens_k[b + 1] - cu_seqlens_k[b] rows of its pages. Sets r's table fields, the
// capacity and seqlen_k (at most the capacity); on the CPU every sequence must fit its pages and
// name blocks of k. cu_seqlens_k is checked as usual (r.total_k: its last entry).
void check_paged_packed(const fa_params* p, Params& r) {
  r.cache_capacity = check_block_table(p, r, "cu_seqlens_q.shape[0] - 1");
  r.cache_rows = p->k.shape[0];
  r.seqlen_k = std::min(r.seqlen_k, r.cache_capacity);
  // Device memory is read only with check_inputs (validate_device_inputs); the kernels clamp.
  if (p->q.device.type == FA_DEVICE_CPU)
    check_paged_packed_values(r, static_cast<const int32_t*>(p->cu_seqlens_k.data), r.block_table);
}

// Total keys of a packed batch over a paged cache: cu_seqlens_k's last entry (on the CPU, where
// check_cu_seqlens then checks the array against it; else an upper bound, batch * capacity).
int64_t paged_packed_total_k(const fa_params* p, int64_t batch) {
  const fa_tensor& bt = p->block_table;
  if (p->q.device.type != FA_DEVICE_CPU)
    return (Checked(batch) * bt.shape[1] * p->k.shape[1]).value("the paged batch's key count");
  const int32_t last = static_cast<const int32_t*>(p->cu_seqlens_k.data)[batch];
  return last < 0 ? 0 : last;
}

// The KV cache (block_table, cache_seqlens, cache_batch_idx, cache_leftpad, k_new / v_new,
// rotary) of a fixed-length batch: shapes, and on the CPU the values. Sets r's cache fields and
// seqlen_k (the most keys a batch entry attends to).
void check_kv_cache(const fa_params* p, Params& r) {
  const bool paged = p->block_table.data != nullptr, cached = p->cache_seqlens.data != nullptr;
  const fa_device dev = p->q.device;
  int64_t capacity = p->k.shape[1];  // keys a batch entry can hold
  if (paged) capacity = check_block_table(p, r, "q.shape[0]");
  r.cache_capacity = capacity;
  r.cache_rows = p->k.shape[0];
  r.seqlen_k = capacity;
  if (p->cache_batch_idx.data != nullptr) {
    if (paged)
      fail(FA_ERROR_UNSUPPORTED, "cache_batch_idx with block_table is not supported: the block "
           "table already names each batch entry's blocks (as flash_attn_with_kvcache)");
    r.cache_batch_idx = check_batch_vector(p->cache_batch_idx, "cache_batch_idx", r.batch, dev);
  }
  check_append(p, r);
  if (cached) r.cache_seqlens = check_batch_vector(p->cache_seqlens, "cache_seqlens", r.batch, dev);
  if (p->cache_leftpad.data != nullptr)
    r.cache_leftpad = check_batch_vector(p->cache_leftpad, "cache_leftpad", r.batch, dev);

  check_rotary(p, r);
  if (dev.type == FA_DEVICE_CPU) {
    r.seqlen_k = check_kv_values(p, r, KvArrays{r.block_table, r.cache_seqlens, r.cache_batch_idx,
                                                r.cache_leftpad});
  } else {
    // Device memory: the values are read only with check_inputs (validate_device_inputs); the
    // kernels clamp what they read (cuda/kernels/kvcache), and size the call by the capacity.
    r.seqlen_k = capacity;
  }
}

// ---- attn_bias and dbias (0.4) -------------------------------------------------------------------

// attn_bias: rank 4, each dimension 1 or the call's (batch, heads_q, seqlen_q, seqlen_k), where a
// packed batch's query and key dimensions may be any size >= its longest sequences; any
// non-negative strides. Sets r.bias (strides 0 on dimensions of size 1).
void check_attn_bias(const fa_params* p, Params& r, bool packed, const char* kv_cache) {
  const fa_tensor& t = p->attn_bias;
  if (t.data == nullptr) return;
  if (kv_cache)
    fail(FA_ERROR_UNSUPPORTED, "attn_bias with ", kv_cache, " is not supported yet: an attention "
         "bias takes q, k and v without a KV cache");
  if (t.rank != 4)
    fail(FA_ERROR_RANK, "attn_bias.rank=", t.rank, " must be 4: (batch, heads_q, seqlen_q, "
         "seqlen_k), each dimension that size or 1");
  Params::Bias::Kind kind = Params::Bias::Kind::None;
  switch (t.dtype) {
    case FA_DTYPE_FP32: kind = Params::Bias::Kind::F32; break;
    case FA_DTYPE_FP16: kind = Params::Bias::Kind::F16; break;
    case FA_DTYPE_BF16: kind = Params::Bias::Kind::BF16; break;
    case FA_DTYPE_BOOL:
    case FA_DTYPE_INT8: kind = Params::Bias::Kind::Mask; break;
    default:
      fail(FA_ERROR_DTYPE, "attn_bias.dtype=", dtype_name(t.dtype), " (", t.dtype,
           ") must be fp32, fp16 or bf16 (an additive bias) or bool or int8 (a mask)");
  }
  check_tensor(t, "attn_bias", 4, false);
  check_device(t, "attn_bias", p->q.device);
  check_alignment(t, "attn_bias", elem_bytes(t.dtype));
  const int64_t full[4] = {r.batch, r.heads_q, r.seqlen_q, r.seqlen_k};
  const char* what[4] = {"q.shape[0] (batch)", "q.shape[2] (heads_q)", "q.shape[1] (seqlen_q)",
                         "k.shape[1] (seqlen_k)"};
  if (packed) {
    what[0] = "cu_seqlens_q.shape[0] - 1 (batch)";
    what[1] = "q.shape[1] (heads_q)";
  }
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] == 1 || t.shape[i] == full[i]) continue;
    if (packed && i >= 2) {
      if (t.shape[i] > full[i]) continue;  // rows / columns past a sequence are never read
      fail(FA_ERROR_SHAPE, "attn_bias.shape[", i, "]=", t.shape[i], " must be 1 or >= ",
           full[i], ", the longest sequence of ", i == 2 ? "cu_seqlens_q" : "cu_seqlens_k",
           " (a packed batch's bias is indexed from each sequence's first ",
           i == 2 ? "query" : "key", "; attn_bias ", shape_str(t), ")");
    }
    fail(FA_ERROR_SHAPE, "attn_bias.shape[", i, "]=", t.shape[i], " must be 1 or ", what[i], "=",
         full[i], " (attn_bias ", shape_str(t), " broadcasts to (batch, heads_q, seqlen_q, "
         "seqlen_k))");
  }
  Params::Bias& bias = r.bias;
  bias.kind = kind;
  bias.data = t.data;
  int64_t* strides[4] = {&bias.stride_b, &bias.stride_h, &bias.stride_q, &bias.stride_k};
  for (int i = 0; i < 4; ++i) *strides[i] = t.shape[i] == 1 ? 0 : t.stride[i];
}

// dbias (backward): attn_bias's shape, fp32 or its dtype, strides that give every element its
// own memory (it is written), attn_bias an fp32 / fp16 / bf16 bias.
void check_dbias(const fa_params* p, Params& r) {
  const fa_tensor& g = p->dbias;
  if (g.data == nullptr) return;
  const fa_tensor& t = p->attn_bias;
  if (t.data == nullptr)
    fail(FA_ERROR_NULL_POINTER, "attn_bias.data is NULL while dbias is given: dbias is the "
         "gradient of attn_bias");
  if (r.bias.kind == Params::Bias::Kind::Mask)
    fail(FA_ERROR_DTYPE, "dbias is given but attn_bias.dtype=", dtype_name(t.dtype),
         " is a mask, which has no gradient (dbias needs an fp32, fp16 or bf16 attn_bias)");
  check_tensor(g, "dbias", 4, false);
  if (g.dtype != FA_DTYPE_FP32 && g.dtype != t.dtype)
    fail(FA_ERROR_DTYPE, "dbias.dtype=", dtype_name(g.dtype), " must be fp32 or attn_bias.dtype=",
         dtype_name(t.dtype));
  check_same_shape(g, "dbias", t, "attn_bias");
  check_device(g, "dbias", p->q.device);
  check_alignment(g, "dbias", elem_bytes(g.dtype));
  // Every element its own memory: ordered by stride, each dimension (of size > 1) steps past the
  // whole extent of the smaller ones.
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return g.stride[a] < g.stride[b]; });
  int64_t extent = 1;  // elements spanned by the dimensions so far (overflow: check_tensor)
  for (int k = 0; k < 4; ++k) {
    const int i = order[k];
    if (g.shape[i] == 1) continue;
    if (g.stride[i] < extent)
      fail(FA_ERROR_STRIDE, "dbias.stride[", i, "]=", g.stride[i], " makes elements overlap "
           "(dbias shape ", shape_str(g), ", strides ", stride_str(g), "): dbias is written, "
           "every element needs its own memory");
    extent = g.stride[i] * (g.shape[i] - 1) + extent;
  }
  Params::Bias& bias = r.bias;
  bias.grad = g.data;
  bias.grad_dtype = to_internal(g.dtype);
  for (int i = 0; i < 4; ++i) {
    bias.grad_shape[i] = g.shape[i];
    bias.grad_stride[i] = g.stride[i];
  }
}

// ---- fp8 descales (0.5) ---------------------------------------------------------------------------

// q_descale, k_descale, v_descale: optional fp32 (batch, heads_kv), any non-negative strides,
// fp8 inputs only. Sets r's descales (strides 0 on dimensions of size 1).
void check_descales(const fa_params* p, Params& r) {
  const std::pair<const fa_tensor*, const char*> all[] = {
      {&p->q_descale, "q_descale"}, {&p->k_descale, "k_descale"}, {&p->v_descale, "v_descale"}};
  Params::Descale* out[] = {&r.q_descale, &r.k_descale, &r.v_descale};
  const char* batch_name = r.varlen() ? "cu_seqlens_q.shape[0] - 1 (batch)" : "q.shape[0] (batch)";
  for (int i = 0; i < 3; ++i) {
    const auto& [t, name] = all[i];
    if (t->data == nullptr) continue;
    if (p->q.dtype != FA_DTYPE_FP8_E4M3)
      fail(FA_ERROR_DTYPE, name, " is given but q.dtype=", dtype_name(p->q.dtype),
           ": descales scale fp8_e4m3 inputs only");
    check_tensor(*t, name, 2, false);
    check_dtype_is(*t, name, FA_DTYPE_FP32);
    if (t->shape[0] != r.batch || t->shape[1] != r.heads_kv)
      fail(FA_ERROR_SHAPE, name, ".shape=", shape_str(*t), " must be (", r.batch, ", ", r.heads_kv,
           "): (batch, heads_kv) as FlashAttention-3's, batch = ", batch_name, ", heads_kv = ",
           "k's heads");
    check_device(*t, name, p->q.device);
    check_alignment(*t, name, 4);
    out[i]->data = static_cast<const float*>(t->data);
    out[i]->stride_b = t->shape[0] == 1 ? 0 : t->stride[0];
    out[i]->stride_h = t->shape[1] == 1 ? 0 : t->stride[1];
  }
}

Params validate_common(const fa_params* caller, bool backward) {
  if (caller == nullptr) fail(FA_ERROR_NULL_POINTER, "params is NULL");
  // Never a byte past the caller's struct_size: an older layout is read into the current one.
  const fa_params current = current_layout(*caller);
  const fa_params* p = &current;
  if (p->backend < FA_BACKEND_AUTO || p->backend > FA_BACKEND_VANILLA)
    fail(FA_ERROR_BACKEND, "params.backend=", p->backend, " is not an fa_backend value");

  // Both cu_seqlens or neither, before q: with only one given, the tensors' rank is ambiguous.
  const bool packed = p->cu_seqlens_q.data != nullptr || p->cu_seqlens_k.data != nullptr;
  if (packed && p->cu_seqlens_q.data == nullptr)
    fail(FA_ERROR_NULL_POINTER, "cu_seqlens_q.data is NULL while cu_seqlens_k is given");
  if (packed && p->cu_seqlens_k.data == nullptr)
    fail(FA_ERROR_NULL_POINTER, "cu_seqlens_k.data is NULL while cu_seqlens_q is given");
  const int rank = packed ? 3 : 4;
  const bool paged = p->block_table.data != nullptr;
  const bool mapped = p->cache_batch_idx.data != nullptr;  // k.shape[0] counts cache rows

  // q first: every other tensor is checked against it.
  check_tensor(p->q, "q", rank, true);
  if (p->q.dtype != FA_DTYPE_FP32 && p->q.dtype != FA_DTYPE_FP16 && p->q.dtype != FA_DTYPE_BF16 &&
      p->q.dtype != FA_DTYPE_FP8_E4M3)
    fail(FA_ERROR_DTYPE, "q.dtype=", dtype_name(p->q.dtype), " (", p->q.dtype,
         ") must be fp32, fp16, bf16 or fp8_e4m3");
  const fa_device dev = p->q.device;
  if (dev.type == FA_DEVICE_CPU) {
    if (dev.index != 0) fail(FA_ERROR_DEVICE, "q.device.index=", dev.index, " must be 0 for the CPU");
  } else if (dev.type == FA_DEVICE_CUDA) {
    // A CUDA build whose backend library (or the CUDA runtime it links) cannot be loaded says
    // so (FA_ERROR_BACKEND with the loader's message) rather than "no such device".
    require_cuda_backend_if_built();
    const int n = cuda_device_count();
    if (dev.index < 0 || dev.index >= n)
      fail(FA_ERROR_DEVICE, "q.device.index=", dev.index, " is not a CUDA device (this build sees ",
           n, ")");
  } else {
    fail(FA_ERROR_DEVICE, "q.device.type=", dev.type, " must be FA_DEVICE_CPU or FA_DEVICE_CUDA");
  }
  check_alignment(p->q, "q", dtype_size(to_internal(p->q.dtype)));
  check_cpu_only_features(*p, backward);
  check_fp8(*p, backward);
  const char* kv_cache = kv_cache_feature(*p);
  if (kv_cache && backward)
    fail(FA_ERROR_UNSUPPORTED, kv_cache,
         " is forward-only: fa_backward does not take a KV cache (as FlashAttention's "
         "flash_attn_with_kvcache)");
  // A packed batch takes a paged cache (block_table) and no other cache field.
  const char* kv_packed = packed ? kv_cache_feature(*p, false) : nullptr;
  if (kv_packed)
    fail(FA_ERROR_UNSUPPORTED, kv_packed,
         " with cu_seqlens (a packed batch) is not supported yet: KV caches take fixed-length "
         "batches (a packed batch takes a paged cache alone, block_table)");

  const int64_t d = p->q.shape[rank - 1];
  if (d > FA_MAX_HEAD_DIM)
    fail(FA_ERROR_HEAD_DIM, "q.shape[", rank - 1, "]=", d, " (head_dim) must be in [1, ",
         FA_MAX_HEAD_DIM, "]");

  const int kv_rank = paged ? 4 : rank;  // a paged cache is (num_blocks, page_size, heads_kv, d)
  for (const auto& [t, name] : {std::pair{&p->k, "k"}, std::pair{&p->v, "v"}}) {
    check_tensor(*t, name, kv_rank, true);
    check_role_dtype(*t, name, Role::Input, p->q.dtype);
    check_device(*t, name, dev);
    check_alignment(*t, name, dtype_size(to_internal(t->dtype)));
  }
  check_same_shape(p->v, "v", p->k, "k");
  if (p->k.shape[kv_rank - 1] != d)
    fail(FA_ERROR_SHAPE, "k.shape[", kv_rank - 1, "]=", p->k.shape[kv_rank - 1],
         " must equal q.shape[", rank - 1, "]=", d, " (head_dim)");
  // paged: k.shape[0] counts blocks; with cache_batch_idx, cache rows
  if (!packed && !paged && !mapped && p->k.shape[0] != p->q.shape[0])
    fail(FA_ERROR_SHAPE, "k.shape[0]=", p->k.shape[0], " must equal q.shape[0]=", p->q.shape[0],
         " (batch)");
  const int64_t hq = p->q.shape[rank - 2], hk = p->k.shape[kv_rank - 2];
  if (hq % hk != 0)
    fail(FA_ERROR_HEADS, "k.shape[", kv_rank - 2, "]=", hk, " (heads_kv) must divide q.shape[",
         rank - 2, "]=", hq, " (heads_q)");

  check_like(p->out, "out", Role::Output, p->q.dtype, p->q, "q", dev);

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
      check_index_vector(*t, name, dev);
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
    r.total_k = paged ? paged_packed_total_k(p, r.batch) : p->k.shape[0];
    // max_seqlen is the caller's bound on the longest sequence; none is longer than the packed
    // tensor, so a larger bound is still true and is tightened to the token count: it sizes the
    // launches and the workspace, which must follow what the tensors hold, not the claim.
    r.seqlen_q = std::min(p->max_seqlen_q, r.total_q);
    r.seqlen_k = std::min(p->max_seqlen_k, r.total_k);
    if (dev.type == FA_DEVICE_CPU) {  // the real longest sequences, read from the arrays
      r.seqlen_q = check_cu_seqlens(p->cu_seqlens_q, "cu_seqlens_q", r.total_q, p->max_seqlen_q,
                                    "max_seqlen_q", "q.shape[0]");
      r.seqlen_k = check_cu_seqlens(p->cu_seqlens_k, "cu_seqlens_k", r.total_k, p->max_seqlen_k,
                                    "max_seqlen_k", paged ? "cu_seqlens_k's last entry" : "k.shape[0]");
    }
    r.cu_seqlens_q = static_cast<const int32_t*>(p->cu_seqlens_q.data);
    r.cu_seqlens_k = static_cast<const int32_t*>(p->cu_seqlens_k.data);
    if (paged) check_paged_packed(p, r);
  } else {
    r.batch = p->q.shape[0];
    r.seqlen_q = p->q.shape[1];
    r.seqlen_k = p->k.shape[1];
    r.total_q = r.batch * r.seqlen_q;
    // Rows of k: validated above to fit (k's element count does).
    r.total_k = paged || mapped ? p->k.shape[0] * p->k.shape[1] : r.batch * r.seqlen_k;
    if (kv_cache) check_kv_cache(p, r);
  }

  // lse: fp32 (batch, heads_q, seqlen_q) or packed (heads_q, total_q); any strides. Optional in
  // the forward.
  const bool want_lse = p->lse.data != nullptr;
  if (!want_lse && backward)
    fail(FA_ERROR_NULL_POINTER, "lse.data is NULL; the backward needs the forward's lse");
  if (want_lse) {
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
  }

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
  // Positions i + len_k - len_q + q_shift, the window bounds around them and ALiBi's distances
  // are computed in int64 without checks (core/mask.h): keep them all representable.
  const int64_t reach = (Checked(r.seqlen_q) + r.seqlen_k + (int64_t(1) << 32))
                            .value("seqlen_q + seqlen_k, the span of the positions");
  if (p->q_shift < reach - INT64_MAX || p->q_shift > INT64_MAX - reach)
    fail(FA_ERROR_SIZE, "q_shift=", p->q_shift, " is too far from 0: |q_shift| + seqlen_q + ",
         "seqlen_k + 2^32 must fit in int64 (seqlen_q=", r.seqlen_q, ", seqlen_k=", r.seqlen_k, ")");
  r.q_shift = p->q_shift;
  if (p->num_splits < 0 || p->num_splits > kMaxSplits)
    fail(FA_ERROR_SIZE, "num_splits=", p->num_splits, " must be in [0, ", kMaxSplits,
         "] (0 = the heuristic, 1 = no split)");
  if (p->num_splits > 1 && p->dropout_p > 0.f && !backward)
    fail(FA_ERROR_UNSUPPORTED, "num_splits=", p->num_splits, " with dropout_p=", p->dropout_p,
         " is not supported: split-KV runs without dropout (use num_splits 0 or 1)");
  r.num_splits = backward ? 1 : p->num_splits;

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
  r.k = make_view(p->k, packed && !paged);
  r.v = make_view(p->v, packed && !paged);
  r.out = make_view(p->out, packed);
  r.lse.data = static_cast<float*>(p->lse.data);
  if (!want_lse) {
    r.lse = LseView{};
  } else if (packed) {
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
  check_attn_bias(p, r, packed, kv_cache);
  check_descales(p, r);
  return r;
}

}  // namespace

// The features only the CPU backend implements in this build, refused for tensors on any other
// device (the CUDA kernels read none of these fields: they would ignore them).
void check_cpu_only_features(const fa_params& p, bool backward) {
  if (p.q.device.type == FA_DEVICE_CPU) return;
  auto refuse = [](const char* what) {
    fail(FA_ERROR_UNSUPPORTED, what, " is supported on the CPU backend only in this build");
  };
  // The KV cache's fields (block_table, cache_seqlens, cache_batch_idx, cache_leftpad, k_new /
  // v_new, rotary, num_splits) are the cuda-kvcache family's (cuda/kernels/kvcache).
  if (p.q_shift != 0) refuse("q_shift != 0");
  // An fp32 out with 16-bit inputs is a forward's output on CUDA (cuda-sm80 writes it); the
  // CUDA backward kernels read out and dout in the inputs' dtype.
  const std::pair<const fa_tensor*, const char*> outputs[] = {{&p.out, "out"}, {&p.dout, "dout"}};
  for (const auto& [t, name] : outputs) {
    if (t->data == nullptr || !backward) continue;
    const DtypeRow* row = dtype_row(p.q.dtype, Role::Output, t->dtype);
    if (row != nullptr && row->cuda_forward_only)
      fail(FA_ERROR_UNSUPPORTED, name, ".dtype=", dtype_name(t->dtype), " with q.dtype=",
           dtype_name(p.q.dtype), " in fa_backward is supported on the CPU backend only in this "
           "build (the CUDA backward reads out and dout in q's dtype; fp32 dq, dk, dv it writes)");
  }
}

// fp8 e4m3 inputs (0.5): forward only, and not with the features the fp8 path does not take
// (FlashAttention-3's fp8 forward has no dropout; an attention bias and rotary are not
// implemented for fp8 here). Dtypes of k, v and out are the role table's (kDtypeRows).
void check_fp8(const fa_params& p, bool backward) {
  if (p.q.dtype != FA_DTYPE_FP8_E4M3) return;
  // On CUDA tensors the families take or refuse fp8 (cuda/backend.cu, check_forward_args: the
  // KV-cache family and cuda-sm90's forward read it).
  auto refuse = [](const char* what) {
    fail(FA_ERROR_UNSUPPORTED, what, " with q.dtype=fp8_e4m3 is not supported: the fp8 path is "
         "an inference forward");
  };
  if (backward) refuse("fa_backward (the gradients)");
  if (p.dropout_p != 0.f) refuse("dropout_p != 0");
  if (p.attn_bias.data != nullptr) refuse("attn_bias");
  if (p.rotary_cos.data != nullptr || p.rotary_sin.data != nullptr)
    refuse("rotary_cos / rotary_sin (rotary embedding of fp8 keys)");
}

Params validate_forward(const fa_params* p) { return validate_common(p, false); }

namespace {

// check_inputs on a CUDA call's KV cache: its index arrays copied to the host and checked as the
// CPU's are (the same messages).
void check_device_kv_values(const fa_params* p, const Params& r, void* stream) {
  std::vector<int32_t> seqlens, batch_idx, leftpad, table;
  auto copy = [&](std::vector<int32_t>& host, const int32_t* dev, int64_t n) -> const int32_t* {
    if (dev == nullptr) return nullptr;
    host.resize(size_t(n));
    copy_to_host_sync(host.data(), dev, size_t(n) * 4, r.device.index, stream);
    return host.data();
  };
  KvArrays a{};
  a.seqlens = copy(seqlens, r.cache_seqlens, r.batch);
  a.batch_idx = copy(batch_idx, r.cache_batch_idx, r.batch);
  a.leftpad = copy(leftpad, r.cache_leftpad, r.batch);
  if (r.block_table != nullptr) {  // rows block_table_stride apart: copy the span they cover
    const int64_t span = (r.batch - 1) * r.block_table_stride + r.max_blocks;
    a.block_table = copy(table, r.block_table, span);
  }
  check_kv_values(p, r, a);
}

}  // namespace

void validate_device_inputs(const fa_params* caller, const Params& r, void* stream) {
  const fa_params current = current_layout(*caller);  // validated: a known struct_size
  const fa_params* p = &current;
  if (p->check_inputs == 0 || r.device.type != FA_DEVICE_CUDA) return;
  if (kv_cache_feature(*p) != nullptr && !r.varlen()) return check_device_kv_values(p, r, stream);
  if (!r.varlen()) return;
  const int64_t n = r.batch + 1;
  std::vector<int32_t> host(size_t(2 * n));
  copy_to_host_sync(host.data(), r.cu_seqlens_q, size_t(n) * 4, r.device.index, stream);
  copy_to_host_sync(host.data() + n, r.cu_seqlens_k, size_t(n) * 4, r.device.index, stream);
  fa_tensor cq = p->cu_seqlens_q, ck = p->cu_seqlens_k;  // validated: (batch + 1), stride 1
  cq.data = host.data();
  ck.data = host.data() + n;
  check_cu_seqlens(cq, "cu_seqlens_q", r.total_q, p->max_seqlen_q, "max_seqlen_q", "q.shape[0]");
  if (r.block_table == nullptr) {
    check_cu_seqlens(ck, "cu_seqlens_k", r.total_k, p->max_seqlen_k, "max_seqlen_k", "k.shape[0]");
    return;
  }
  // A paged packed batch: cu_seqlens_k's total is its own last entry; then its pages.
  const int32_t* cu_k = host.data() + n;
  check_cu_seqlens(ck, "cu_seqlens_k", cu_k[r.batch] < 0 ? 0 : cu_k[r.batch], p->max_seqlen_k,
                   "max_seqlen_k", "cu_seqlens_k's last entry");
  std::vector<int32_t> table(size_t((r.batch - 1) * r.block_table_stride + r.max_blocks));
  copy_to_host_sync(table.data(), r.block_table, table.size() * 4, r.device.index, stream);
  check_paged_packed_values(r, cu_k, table.data());
}

Params validate_backward(const fa_params* caller) {
  Params r = validate_common(caller, true);
  const fa_params current = current_layout(*caller);
  const fa_params* p = &current;
  const bool packed = r.varlen();
  const int32_t in = p->q.dtype;
  check_like(p->dout, "dout", Role::Output, in, p->q, "q", p->q.device);
  check_like(p->dq, "dq", Role::Gradient, in, p->q, "q", p->q.device);
  check_like(p->dk, "dk", Role::Gradient, in, p->k, "k", p->q.device);
  check_like(p->dv, "dv", Role::Gradient, in, p->v, "v", p->q.device);
  r.dout = make_view(p->dout, packed);
  r.dq = make_view(p->dq, packed);
  r.dk = make_view(p->dk, packed);
  r.dv = make_view(p->dv, packed);
  check_dbias(p, r);
  return r;
}

}  // namespace fa
