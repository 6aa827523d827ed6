// Byte format -> Case (the format is described in fuzz_case.h).
//
// Edits, after the header: u8 target (b % 14), u8 op, then a tagged value when the op takes one.
//   target 0..11 (a Role), op % 14:
//     0 data NULL (or, when absent, present)   1 misalign, i64 b % 16 bytes   2 dtype, i32 b % 5
//     3 rank, i32 b % 6      4..7 shape[op - 4], i64 b      8..11 stride[op - 8], i64 b
//     12 device.type, i32 b % 2                             13 device.index, i32 b % 2
//   target 12 (params), op % 2:  0 struct_size, i64 sizeof(fa_params) + b - 8;  1 params NULL
//   target 13 (a cu_seqlens entry), op % 2 picks cu_seqlens_q / _k: i64 index b, i32 value b - 1
#include "fuzz_case.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace fa_fuzz {

const char* const kRoleNames[kRoles] = {"q",  "k",  "v",  "out",          "lse",          "dout",
                                        "dq", "dk", "dv", "cu_seqlens_q", "cu_seqlens_k", "alibi"};

int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}
int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return (a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min()
                            : std::numeric_limits<int64_t>::max();
}

namespace {

constexpr size_t kParamsSizeV0_1 = 1144;  // fa_params of 0.1 (LP64), before 0.2's fields
constexpr uint8_t kHostileTag = 0xF0;  // bytes from here on are not ordinary values
constexpr uint8_t kRawTag = 0xFF;      // followed by the value's raw bits

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();

// The hostile tables: tag 0xF0 + i selects entry i. make_seeds.py holds the same tables.
constexpr int64_t kHostile64[15] = {0,        -1,       1,        kI64Min,       kI64Max,
                                    kI32Max,  1LL << 31, 1LL << 32, 1LL << 40,     1LL << 48,
                                    1LL << 61, 1LL << 62, -(1LL << 31), kI64Max - 1023,
                                    3LL << 61};
constexpr int32_t kHostile32[15] = {0, -1, 1, kI32Min, kI32Max, -2, 2, 3, 4, 5, 16, 255, 256,
                                    65536, kI32Max - 1};
const float kHostileF[15] = {std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             -0.f,
                             FLT_MAX,
                             -FLT_MAX,
                             FLT_MIN,
                             std::numeric_limits<float>::denorm_min(),
                             1e30f,
                             -1.f,
                             1.f,
                             std::nextafter(1.f, 0.f),
                             1e-30f,
                             65504.f,
                             1e4f};

// Head dims of the bytes 0xE0..0xEF of head_dim: the wide ones and the edges of the range.
constexpr int64_t kWideHeadDims[16] = {80, 96, 100, 128, 160, 192, 200, 224,
                                       255, 256, 257, 512, 65, 63, 33, 17};

// OpenMP threads of the byte threads % 4: mostly one (fast), two and three for the workspace
// arithmetic that multiplies by the thread count.
constexpr int kThreads[4] = {1, 1, 2, 3};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}

  uint8_t u8(uint8_t dflt) {
    if (n_ == 0) return dflt;
    --n_;
    return *p_++;
  }
  uint64_t raw(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(u8(0)) << (8 * i);
    return v;
  }
  template <typename Map>
  int64_t i64(uint8_t dflt, Map ordinary) {
    const uint8_t b = u8(dflt);
    if (b < kHostileTag) return ordinary(b);
    if (b == kRawTag) return int64_t(raw(8));
    return kHostile64[b - kHostileTag];
  }
  template <typename Map>
  int32_t i32(uint8_t dflt, Map ordinary) {
    const uint8_t b = u8(dflt);
    if (b < kHostileTag) return ordinary(b);
    if (b == kRawTag) return int32_t(uint32_t(raw(4)));
    return kHostile32[b - kHostileTag];
  }
  template <typename Map>
  float f32(uint8_t dflt, Map ordinary) {
    const uint8_t b = u8(dflt);
    if (b < kHostileTag) return ordinary(b);
    if (b == kRawTag) {
      const uint32_t bits = uint32_t(raw(4));
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    return kHostileF[b - kHostileTag];
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

int64_t identity(uint8_t b) { return b; }

// Row-major strides of dims[0..rank) (saturating: hostile shapes must not overflow here).
void contiguous(TensorSpec& t) {
  int64_t s = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.stride[i] = s;
    s = sat_mul(s, std::max<int64_t>(t.shape[i], 1));
  }
}

// A (batch, seq, heads, dim) or packed (total, heads, dim) data tensor in the case's layout.
TensorSpec data_tensor(const Case& c, int64_t rows, int64_t heads) {
  TensorSpec t;
  t.dtype = c.dtype;
  t.present = true;
  const int64_t d = c.head_dim;
  if (c.packed) {
    t.rank = 3;
    t.shape[0] = rows, t.shape[1] = heads, t.shape[2] = d;
  } else {
    t.rank = 4;
    t.shape[0] = c.batch, t.shape[1] = rows, t.shape[2] = heads, t.shape[3] = d;
  }
  contiguous(t);
  const int s = c.packed ? 0 : 1;  // the sequence dim; heads is s + 1
  switch (c.layout) {
    case 1:  // padded: every dim but the last has slack
      t.stride[s + 1] = sat_add(d, 3);
      t.stride[s] = sat_add(sat_mul(heads, t.stride[s + 1]), 5);
      if (!c.packed) t.stride[0] = sat_add(sat_mul(rows, t.stride[1]), 7);
      break;
    case 2:  // head-major: (heads, seq, dim) in memory
      t.stride[s] = d;
      t.stride[s + 1] = sat_mul(rows, d);
      if (!c.packed) t.stride[0] = sat_mul(heads, t.stride[2]);
      break;
    case 3:  // every batch entry and sequence row aliases the first
      t.stride[s] = 0;
      if (!c.packed) t.stride[0] = 0;
      break;
  }
  return t;
}

TensorSpec lse_tensor(const Case& c, int64_t total_q) {
  TensorSpec t;
  t.dtype = FA_DTYPE_FP32;
  t.present = true;
  if (c.packed) {
    t.rank = 2;
    t.shape[0] = c.heads_q, t.shape[1] = total_q;
  } else {
    t.rank = 3;
    t.shape[0] = c.batch, t.shape[1] = c.heads_q, t.shape[2] = c.seqlen_q;
  }
  contiguous(t);
  const int h = c.packed ? 0 : 1;  // heads dim; the sequence dim follows it
  switch (c.layout) {
    case 1:
      t.stride[h] = sat_add(t.shape[h + 1], 1);
      if (!c.packed) t.stride[0] = sat_mul(c.heads_q, t.stride[1]);
      break;
    case 2:  // (seq, heads) in memory
      t.stride[h] = 1;
      t.stride[h + 1] = c.heads_q;
      if (!c.packed) t.stride[0] = sat_mul(c.seqlen_q, c.heads_q);
      break;
    case 3:
      t.stride[h] = 1;
      t.stride[h + 1] = 0;
      if (!c.packed) t.stride[0] = 0;
      break;
  }
  return t;
}

void apply_tensor_edit(Reader& r, TensorSpec& t, int op) {
  switch (op) {
    case 0: t.present = !t.present; break;
    case 1: t.misalign = r.i64(0, [](uint8_t b) { return int64_t(b % 16); }); break;
    case 2: t.dtype = r.i32(0, [](uint8_t b) { return int32_t(b % 5); }); break;
    case 3: t.rank = r.i32(0, [](uint8_t b) { return int32_t(b % 6); }); break;
    case 4: case 5: case 6: case 7: t.shape[op - 4] = r.i64(0, identity); break;
    case 8: case 9: case 10: case 11: t.stride[op - 8] = r.i64(0, identity); break;
    case 12: t.device.type = r.i32(0, [](uint8_t b) { return int32_t(b % 2); }); break;
    case 13: t.device.index = r.i32(0, [](uint8_t b) { return int32_t(b % 2); }); break;
  }
}

}  // namespace

void decode(const uint8_t* data, size_t size, Case* out) {
  Reader r(data, size);
  Case& c = *out;
  const uint8_t flags = r.u8(0);
  c.packed = flags & 1;
  c.layout = (flags >> 1) & 3;
  c.causal = flags & 8;
  c.alibi = flags & 16;
  c.alibi_2d = flags & 32;
  c.deterministic = flags & 64;
  c.null_size_ptr = flags & 128;
  c.dtype = r.i32(0, [](uint8_t b) { return int32_t(b % 3); });
  c.backend = r.i32(0, [](uint8_t b) { return int32_t(b % 4); });
  c.threads = kThreads[r.u8(0) % 4];
  c.batch = r.i64(0, [](uint8_t b) { return int64_t(1 + b % 4); });
  c.heads_q = r.i64(0, [](uint8_t b) { return int64_t(1 + b % 8); });
  c.heads_kv = r.i64(0, [](uint8_t b) { return int64_t(1 + b % 8); });
  c.head_dim = r.i64(15, [](uint8_t b) {
    return b < 0xE0 ? int64_t(1 + b % 64) : kWideHeadDims[b - 0xE0];
  });

  int64_t longest_q, longest_k, total_q = 0, total_k = 0;
  if (c.packed) {
    const int64_t read = std::clamp<int64_t>(c.batch, 0, kReadSeqs);
    for (int64_t i = 0; i < read; ++i) {
      c.len_q.push_back(r.u8(1));
      c.len_k.push_back(r.u8(1));
      total_q += c.len_q.back();
      total_k += c.len_k.back();
    }
    longest_q = c.len_q.empty() ? 0 : *std::max_element(c.len_q.begin(), c.len_q.end());
    longest_k = c.len_k.empty() ? 0 : *std::max_element(c.len_k.begin(), c.len_k.end());
  } else {
    c.seqlen_q = r.i64(1, identity);
    c.seqlen_k = r.i64(1, identity);
    longest_q = c.seqlen_q;
    longest_k = c.seqlen_k;
  }
  for (int pass = 0; pass < 2; ++pass) {
    c.max_seqlen_q[pass] = r.i64(2, [&](uint8_t b) { return sat_add(longest_q, int64_t(b) - 2); });
    c.max_seqlen_k[pass] = r.i64(2, [&](uint8_t b) { return sat_add(longest_k, int64_t(b) - 2); });
  }
  c.window_left = r.i32(0, [](uint8_t b) { return int32_t(b) - 1; });
  c.window_right = r.i32(0, [](uint8_t b) { return int32_t(b) - 1; });
  c.softcap = r.f32(0, [](uint8_t b) { return b < 0x80 ? 0.f : float(b - 0x7F) / 4.f; });
  c.softmax_scale =
      r.f32(0, [](uint8_t b) { return b < 0x80 ? 0.f : float(int(b) - 0xB0) / 32.f; });
  c.dropout_p = r.f32(0, [](uint8_t b) { return b < 0xB0 ? 0.f : float(b - 0xAF) / 64.f; });
  c.seed = uint64_t(r.i64(0, identity));
  c.offset = uint64_t(r.i64(0, identity));
  c.data_seed = r.u8(0);
  c.magnitude_shift = r.u8(0) % 4;
  c.poison = r.u8(0xFF);
  for (Workspace& w : c.workspace) {
    w.mode = WorkspaceMode(r.u8(0) % uint8_t(WorkspaceMode::kCount));
    w.arg = r.i64(0, identity);
  }
  c.status_probe = r.i32(0, identity);

  // The tensors of the valid problem...
  const int64_t rows_q = c.packed ? total_q : c.seqlen_q;
  const int64_t rows_k = c.packed ? total_k : c.seqlen_k;
  TensorSpec* t = c.tensor;
  t[kQ] = data_tensor(c, rows_q, c.heads_q);
  t[kK] = data_tensor(c, rows_k, c.heads_kv);
  t[kV] = t[kK];
  t[kOut] = t[kDout] = t[kDq] = t[kQ];
  t[kDk] = t[kDv] = t[kK];
  t[kLse] = lse_tensor(c, total_q);
  if (c.packed) {
    for (Role role : {kCuQ, kCuK}) {
      TensorSpec& cu = t[role];
      cu.dtype = FA_DTYPE_INT32;
      cu.present = true;
      cu.rank = 1;
      cu.shape[0] = sat_add(c.batch, 1);
      cu.stride[0] = 1;
    }
  }
  if (c.alibi) {
    TensorSpec& a = t[kAlibi];
    a.dtype = FA_DTYPE_FP32;
    a.present = true;
    a.rank = c.alibi_2d ? 2 : 1;
    if (c.alibi_2d) a.shape[0] = c.batch;
    a.shape[a.rank - 1] = c.heads_q;
    contiguous(a);
  }

  // ... then what the edits break.
  const int edits = r.u8(0) % 16;
  for (int e = 0; e < edits; ++e) {
    const int target = r.u8(0) % 14;
    const int op = r.u8(0);
    if (target < kRoles) {
      apply_tensor_edit(r, t[target], op % 14);
    } else if (target == 12) {
      if (op % 3 == 0)
        c.struct_size = size_t(r.i64(8, [](uint8_t b) {
          return int64_t(sizeof(fa_params)) + int64_t(b) - 8;
        }));
      else if (op % 3 == 1)
        c.null_params = true;
      else
        c.struct_size = kParamsSizeV0_1;
    } else {
      CuEdit ce;
      ce.role = op % 2 ? kCuK : kCuQ;
      ce.index = r.i64(0, identity);
      ce.value = r.i32(1, [](uint8_t b) { return int32_t(b) - 1; });
      c.cu_edits.push_back(ce);
    }
  }
  c.q_shift = r.i64(0, [](uint8_t b) { return int64_t(b) - 0x40; });
}

}  // namespace fa_fuzz
