// One fuzz input decoded: an attention problem, the hostile edits applied to it, and how the
// harness calls the library with it. The byte format is defined here and in fuzz_case.cpp only;
// tests/fuzz/make_seeds.py writes the same format (keep the two in step).
//
// Every field is read by a byte reader that returns the field's default once the input runs
// out, so any prefix of a seed is a valid (smaller) input. Integer and float fields are
// "tagged": one byte b < 0xF0 is a small ordinary value (the field's own mapping, e.g. batch =
// 1 + b % 4), 0xF0..0xFE picks a hostile value from a table (0, -1, INT64_MAX, 2^61, 2^62, NaN,
// FLT_MAX, ...), 0xFF is followed by the raw little-endian bits. So one byte of mutation reaches
// every hostile value, and a few bytes reach any value at all.
//
// Header, in order:
//   flags        u8   bit 0 packed (varlen), bits 1-2 layout (0 contiguous, 1 padded strides,
//                     2 head-major, 3 zero batch/sequence strides), bit 3 causal, bit 4 ALiBi,
//                     bit 5 ALiBi (batch, heads), bit 6 deterministic, bit 7 NULL size pointer
//   dtype        i32  b % 3: fp32, fp16, bf16
//   backend      i32  b % 4: AUTO, FLASH, REFERENCE, VANILLA (the backend under test)
//   threads      u8   b % 4 -> 1, 1, 2, 3 (omp_set_num_threads before every call)
//   batch        i64  1 + b % 4
//   heads_q      i64  1 + b % 8
//   heads_kv     i64  1 + b % 8
//   head_dim     i64  1 + b % 64 for b < 0xE0, else kWideHeadDims[b - 0xE0]
//   seqlen_q/k   i64  b (fixed length only; packed inputs read per-sequence lengths instead:
//                     u8 len_q, u8 len_k for each of the first kReadSeqs sequences, 0 after)
//   max_seqlen   i64  x4: q and k of the forward, then q and k of the backward;
//                     b -> (real longest) + b - 2, so 2 is exact
//   window l/r   i32  b - 1
//   softcap      f32  b < 0x80: 0, else (b - 0x7F) / 4
//   scale        f32  b < 0x80: 0 (1/sqrt(d)), else (b - 0xB0) / 32
//   dropout_p    f32  b < 0xB0: 0, else (b - 0xAF) / 64
//   seed, offset i64  b
//   data_seed    u8   seeds the input values
//   magnitude    u8   inputs are k * 2^(b % 4 - 7), |k| <= 255 (exact in fp16 and bf16)
//   poison       u8   byte that fills outputs and workspaces before a call (default 0xFF: NaN)
//   workspace    u8 mode + i64 argument, for the forward then the backward (WorkspaceMode)
//   status_probe i32  passed to fa_status_string
//   edits        u8 count (b % 16), then per edit: u8 target, u8 op, a tagged value (Edit);
//                target 12 edits the struct: op % 3 == 0 its size (sizeof + b - 8), 1 NULL params,
//                2 the 0.1 layout's size (1144: the fields since 0.2 are then not read)
//   q_shift      i64  b - 0x40 (fa_params 0.2; after the edits, so older inputs read 0)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"

namespace fa_fuzz {

// Tensors of one call, in the order edits name them.
enum Role { kQ, kK, kV, kOut, kLse, kDout, kDq, kDk, kDv, kCuQ, kCuK, kAlibi, kRoles };
extern const char* const kRoleNames[kRoles];

enum Pass { kForward, kBackward };

// A tensor as the library will be told it is, and how its memory is placed.
struct TensorSpec {
  int32_t dtype = FA_DTYPE_FP32;
  int32_t rank = 0;
  int64_t shape[FA_MAX_RANK] = {};
  int64_t stride[FA_MAX_RANK] = {};
  fa_device device{FA_DEVICE_CPU, 0};
  bool present = false;  // false: data = NULL (absent optional tensor, or an edit's NULL)
  int64_t misalign = 0;  // bytes between the buffer's start and data
};

// What workspace a run is given. "queried" is what the workspace query returned (4096 when it
// refused), arg the mode's tagged argument.
enum class WorkspaceMode : uint8_t {
  kExact,         // queried bytes
  kMore,          // queried + arg
  kLess,          // queried - arg (at least 0)
  kNullQueried,   // NULL, workspace_bytes = queried
  kNullArg,       // NULL, workspace_bytes = arg (any value: nothing is allocated)
  kMisaligned,    // queried bytes starting arg % 16 bytes into a buffer
  kArg,           // arg bytes (skipped when arg is above the workspace cap)
  kEmpty,         // a valid pointer, workspace_bytes = 0
  kCount
};

struct Workspace {
  WorkspaceMode mode = WorkspaceMode::kExact;
  int64_t arg = 0;
};

// A cu_seqlens entry overwritten after the prefix sums are laid out.
struct CuEdit {
  Role role;
  int64_t index;
  int32_t value;
};

struct Case {
  bool packed = false;
  int layout = 0;
  bool causal = false, alibi = false, alibi_2d = false, deterministic = false;
  bool null_size_ptr = false, null_params = false;
  int32_t dtype = FA_DTYPE_FP32;
  int32_t backend = FA_BACKEND_AUTO;
  int threads = 1;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, head_dim = 1;
  int64_t seqlen_q = 1, seqlen_k = 1;  // fixed length
  std::vector<int64_t> len_q, len_k;   // packed: per-sequence lengths (batch entries at most)
  int64_t max_seqlen_q[2] = {}, max_seqlen_k[2] = {};  // per Pass
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.f, softmax_scale = 0.f, dropout_p = 0.f;
  uint64_t seed = 0, offset = 0;
  uint8_t data_seed = 0, magnitude_shift = 0, poison = 0xFF;
  Workspace workspace[2];
  int32_t status_probe = 0;
  int64_t q_shift = 0;
  size_t struct_size = sizeof(fa_params);
  TensorSpec tensor[kRoles];
  std::vector<CuEdit> cu_edits;
};

// Sequences of a packed input whose lengths are read from the bytes; later ones are empty.
constexpr int64_t kReadSeqs = 16;

// Decodes data into *c (shapes, strides and cu_seqlens lengths included, edits applied).
void decode(const uint8_t* data, size_t size, Case* c);

// Saturating int64 arithmetic for sizes taken from the input (the harness must not overflow
// where the library is being tested for it).
int64_t sat_add(int64_t a, int64_t b);
int64_t sat_mul(int64_t a, int64_t b);

}  // namespace fa_fuzz
