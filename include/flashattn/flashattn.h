/*
 * flashattn: exact, IO-aware attention (FlashAttention) — stable C ABI.
 *
 * C99-compatible. Every entry point validates its arguments before it touches any memory; a
 * rejected call returns a non-zero fa_status, writes nothing to any output, and leaves a message
 * naming the argument, its value and what was expected in fa_last_error() (per thread).
 *
 * Layouts follow FlashAttention's convention:
 *   q           (batch, seqlen_q, heads_q,  head_dim)      or packed (total_q, heads_q,  head_dim)
 *   k, v        (batch, seqlen_k, heads_kv, head_dim)      or packed (total_k, heads_kv, head_dim)
 *   out, dout, dq like q; dk, dv like k
 *   lse (fp32)  (batch, heads_q, seqlen_q)                 or packed (heads_q, total_q)
 *   k, v paged  (num_blocks, page_size, heads_kv, head_dim) with an int32 block_table
 * Strides are in elements and free, except that the last dimension must be contiguous.
 * Dtypes: q, k and v share one (fp32, fp16 or bf16); out, dout, dq, dk and dv have it too or
 * fp32 with fp16 / bf16 inputs (the unrounded results; on CUDA a backward's out and dout have the
 * inputs' dtype, and dk and dv one dtype). Since 0.5 q, k and v may be
 * fp8 e4m3 (forward only, CPU backend only in this build) with an fp16 or bf16 out: see
 * q_descale below.
 * heads_q must be a multiple of heads_kv (GQA / MQA): query head h reads kv head
 * h / (heads_q / heads_kv).
 *
 * Backends: CPU tensors run the CPU backend (any dtype, head_dim 1..256). CUDA tensors run the GPU
 * kernels (compute capability >= 8.0): fp16/bf16 only, head_dim a multiple of 8, data pointers
 * 16-byte aligned and strides multiples of 8 elements; cu_seqlens on the GPU are inspected only
 * with check_inputs (otherwise the kernels clamp each sequence into the packed tensors).
 *
 * Versioning: fa_params carries struct_size (set by fa_params_init). A library accepts every
 * struct_size it knows, so programs built against an older header keep working: fields are only
 * ever appended, and a struct of an older (smaller) size is read as far as its struct_size and
 * completed with the defaults of the fields it predates. The library never reads or writes a
 * byte past the caller's struct_size. Known sizes (LP64): 1144 (0.1), 1328 (0.2), 1864 (0.3),
 * 2040 (0.4), 2304 (0.5).
 */
#ifndef FLASHATTN_FLASHATTN_H
#define FLASHATTN_FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 5
#define FA_VERSION_PATCH 0
/* Encoded as major * 10000 + minor * 100 + patch. */
#define FA_VERSION (FA_VERSION_MAJOR * 10000 + FA_VERSION_MINOR * 100 + FA_VERSION_PATCH)

/* Largest tensor rank any argument has. */
#define FA_MAX_RANK 4
/* Largest supported head dimension. */
#define FA_MAX_HEAD_DIM 256

typedef enum fa_status {
  FA_OK = 0,
  FA_ERROR_NULL_POINTER = 1,   /* a required pointer (tensor data, params, out-argument) is NULL */
  FA_ERROR_DTYPE = 2,          /* unsupported dtype, or dtypes of related tensors differ */
  FA_ERROR_RANK = 3,           /* a tensor has the wrong number of dimensions */
  FA_ERROR_SHAPE = 4,          /* shapes of related tensors disagree */
  FA_ERROR_HEAD_DIM = 5,       /* head_dim outside [1, FA_MAX_HEAD_DIM] (or the backend's set) */
  FA_ERROR_HEADS = 6,          /* heads_q is not a multiple of heads_kv */
  FA_ERROR_STRIDE = 7,         /* last dimension not contiguous, or a negative stride */
  FA_ERROR_ALIGNMENT = 8,      /* a data pointer is not aligned as the backend requires */
  FA_ERROR_SIZE = 9,           /* a size is zero or negative */
  FA_ERROR_CU_SEQLENS = 10,    /* an index array's values: cu_seqlens not starting at 0, not
                                  monotone or not matching totals; cache_seqlens past the cache;
                                  a block_table entry that is not a block of k; cache_leftpad,
                                  cache_batch_idx out of range */
  FA_ERROR_WINDOW = 11,        /* window_left / window_right < -1 */
  FA_ERROR_DROPOUT = 12,       /* dropout_p outside [0, 1) */
  FA_ERROR_SOFTCAP = 13,       /* softcap negative or not finite */
  FA_ERROR_SCALE = 14,         /* softmax_scale NaN or infinite */
  FA_ERROR_DEVICE = 15,        /* tensors on different devices, or a device that does not exist */
  FA_ERROR_WORKSPACE = 16,     /* workspace NULL or smaller than the size query returned */
  FA_ERROR_ALIBI = 17,         /* alibi_slopes has the wrong dtype or shape */
  FA_ERROR_UNSUPPORTED = 18,   /* valid request this build or backend cannot run (e.g. fp8) */
  FA_ERROR_VERSION = 19,       /* params.struct_size is not one this library knows */
  FA_ERROR_BACKEND = 20,       /* unknown backend, or backend not available for the device */
  FA_ERROR_CUDA = 21,          /* a CUDA runtime call failed */
  FA_ERROR_INTERNAL = 22,      /* a bug: please report it with the message */
  FA_ERROR_COMM = 23           /* ring attention (flashattn/ring.h): the caller's communicator
                                  returned an error */
} fa_status;

typedef enum fa_dtype {
  FA_DTYPE_FP32 = 0,
  FA_DTYPE_FP16 = 1,
  FA_DTYPE_BF16 = 2,
  FA_DTYPE_FP8_E4M3 = 3, /* q, k, v only (0.5): 1 sign, 4 exponent (bias 7), 3 mantissa bits, no
                            infinities, 0x7F / 0xFF NaN, max 448 (PyTorch's float8_e4m3fn) */
  FA_DTYPE_INT32 = 4,    /* index arrays only: cu_seqlens, block_table, cache_seqlens,
                            cache_batch_idx, cache_leftpad */
  FA_DTYPE_BOOL = 5,     /* attn_bias only (0.4): one byte, 0 = masked, anything else = kept */
  FA_DTYPE_INT8 = 6      /* attn_bias only (0.4): the same as a mask: 0 = masked */
} fa_dtype;

typedef enum fa_device_type {
  FA_DEVICE_CPU = 0,
  FA_DEVICE_CUDA = 1
} fa_device_type;

typedef struct fa_device {
  int32_t type;  /* fa_device_type */
  int32_t index; /* CUDA ordinal; 0 for the CPU */
} fa_device;

/* A strided view of memory the caller owns. data == NULL marks an optional tensor as absent. */
typedef struct fa_tensor {
  void* data;
  int32_t dtype; /* fa_dtype */
  int32_t rank;
  int64_t shape[FA_MAX_RANK];
  int64_t stride[FA_MAX_RANK]; /* in elements */
  fa_device device;
} fa_tensor;

typedef enum fa_backend {
  FA_BACKEND_AUTO = 0,      /* the fastest implementation for the tensors' device */
  FA_BACKEND_FLASH = 1,     /* tiled FlashAttention (CPU: fp32 accumulation, OpenMP) */
  FA_BACKEND_REFERENCE = 2, /* CPU only: naive, materialises the scores, computes in double */
  FA_BACKEND_VANILLA = 3    /* standard materialising attention (GPU baseline; CPU = reference) */
} fa_backend;

typedef struct fa_params {
  size_t struct_size; /* sizeof(fa_params) of the caller's header; set by fa_params_init */
  int32_t backend;    /* fa_backend */

  /* Forward inputs and outputs (backward reads q, k, v, out, lse). */
  fa_tensor q, k, v;
  fa_tensor out;
  /* fp32. Forward: optional (data NULL: not computed, not written; CPU backend only in this
   * build); backward: required, the forward's. */
  fa_tensor lse;

  /* Backward only: dout in, dq / dk / dv out. */
  fa_tensor dout, dq, dk, dv;

  /* Packed variable-length batches: int32 (batch + 1) prefix sums; both or neither. */
  fa_tensor cu_seqlens_q, cu_seqlens_k;
  /* >= the longest sequence. A bound above the packed token count is tightened to it (on the CPU
   * the real longest sequence is used): the work and the workspace follow what the tensors hold. */
  int64_t max_seqlen_q, max_seqlen_k;

  float softmax_scale; /* 0 means 1 / sqrt(head_dim) */
  int32_t causal;      /* bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q
                        * (+ q_shift) */
  int32_t window_left, window_right; /* -1 = unbounded; same alignment */
  float softcap;       /* 0 = off; else scores become softcap * tanh(score / softcap) */
  /* Optional fp32 (heads_q) or (batch, heads_q): bias -slope * |i + seqlen_k - seqlen_q - j| (the
   * query's key position as for causal, q_shift included). */
  fa_tensor alibi_slopes;

  float dropout_p;     /* in [0, 1); kept probabilities are scaled by 1 / (1 - dropout_p) */
  uint64_t seed, offset; /* Philox4x32-10 stream of the keep-mask; see docs/dropout.md */

  int32_t deterministic; /* backward: bit-identical results from run to run */

  /* Since 0.2 (in what was padding: sizeof(fa_params) is unchanged, fa_params_init zeroes it).
   * Non-zero: before running, also validate the index arrays the host cannot otherwise see —
   * cu_seqlens of CUDA tensors — and refuse a bad one with FA_ERROR_CU_SEQLENS before anything is
   * written. Costs a device-to-host copy on the stream and a wait for that stream (so it is
   * refused while the stream captures a CUDA graph). Without it, bad device-side cu_seqlens give
   * wrong numbers at worst: the kernels clamp every sequence into the tensors. CPU tensors are
   * always validated; the workspace queries read no device memory either way. */
  int32_t check_inputs;

  /* ---- Since 0.2, appended: a 0.1 caller's struct (1144 bytes) ends above. Every field below
   * defaults to zero, which keeps the behaviour of 0.1 (so a 0.1 struct reads as one whose new
   * fields are zero). In this build the CPU backend implements them all; CUDA tensors refuse
   * each with FA_ERROR_UNSUPPORTED. ------------------------------------------------------- */

  /* KV cache, as FlashAttention's flash_attn_with_kvcache (forward only: the backward refuses
   * both with FA_ERROR_UNSUPPORTED; fixed-length batches only: not with cu_seqlens).
   * block_table: int32 (batch, max_blocks), last dimension contiguous; data NULL (default) =
   * dense k, v. Given, k and v are paged: (num_blocks, page_size, heads_kv, head_dim), any
   * page_size >= 1 (k.shape[1]), and key t of batch entry b is row t % page_size of block
   * block_table[b][t / page_size]. The entries a call reads (the first ceil(keys / page_size) of
   * each row) must be in [0, num_blocks); the others are never read. */
  fa_tensor block_table;
  /* int32 (batch): the number of keys of each batch entry, in [0, capacity] where capacity is
   * k.shape[1] (dense) or max_blocks * page_size (paged); data NULL (default) = the capacity.
   * The queries of entry b are aligned to its cache_seqlens[b] keys, as with seqlen_k. */
  fa_tensor cache_seqlens;
  /* Shift of the queries along the keys, for a query block that is a chunk of a longer sequence
   * (chunked prefill, context parallelism). Query row i of a sequence with len_q queries and
   * len_k keys sits at key position  i + len_k - len_q + q_shift : causal, the windows and ALiBi
   * all use that position. 0 (default): bottom-right aligned, as before 0.2. Examples: the query
   * rows [r0, r1) of a sequence of L queries, run against all of its keys, pass q_shift = r1 - L;
   * in ring attention a query block ending at position qe against a key block ending at ke
   * passes q_shift = qe - ke. Any value such that |q_shift| + seqlen_q + seqlen_k + 2^32 fits in
   * int64 (else FA_ERROR_SIZE); the same for every sequence of a packed batch. Forward and
   * backward. */
  int64_t q_shift;

  /* ---- Since 0.3, appended: a 0.2 caller's struct (1328 bytes) ends above. Every field below
   * defaults to zero, which keeps the behaviour of 0.2. The rest of flash_attn_with_kvcache: a
   * KV cache's row map and left padding, new keys appended in place, rotary embeddings, and the
   * split of the keys. Forward only, fixed-length batches only (as the KV cache above); in this
   * build the CPU backend implements them all and CUDA tensors refuse each (num_splits > 1
   * included) with FA_ERROR_UNSUPPORTED. -------------------------------------------------- */

  /* int32 (batch): the row of a dense cache that batch entry b uses, cache_batch_idx[b] in
   * [0, k.shape[0]) (k, v are then (batch_cache, capacity, heads_kv, d), any batch_cache >= 1);
   * data NULL (default) = entry b uses row b (k.shape[0] == batch). Not with block_table (the
   * table already names each entry's blocks). Entries may repeat, except with k_new. */
  fa_tensor cache_batch_idx;
  /* int32 (batch): where each entry's keys start in its cache row: entry b attends to the cache
   * rows [cache_leftpad[b], end_b) where end_b = cache_seqlens[b] (+ seqlen_new with k_new), or
   * the capacity without cache_seqlens; 0 <= cache_leftpad[b] <= cache_seqlens[b]. The queries
   * and the windows are aligned to those keys (as if the cache started at the pad). data NULL
   * (default) = 0. */
  fa_tensor cache_leftpad;
  /* (batch, seqlen_new, heads_kv, d), k's dtype, both or neither: new keys and values written
   * IN PLACE into the cache (dense or paged) at rows [cache_seqlens[b], cache_seqlens[b] +
   * seqlen_new) of entry b (cache_seqlens is then required, and cache_seqlens[b] + seqlen_new
   * must fit in the capacity) before the attention, which then sees cache_seqlens[b] +
   * seqlen_new keys. The copy is bit-exact (v always; k unless rotary is given). On a rejected
   * call the cache is not written. */
  fa_tensor k_new, v_new;
  /* (seqlen_ro, rotary_dim / 2), q's dtype or fp32, both or neither, only with k_new: rotary
   * embedding (rotary_dim <= head_dim, even) of the new keys at positions cache_seqlens[b] + j
   * and of the queries at cache_seqlens[b] + i when causal or windowed, else all at
   * cache_seqlens[b] (flash_attn_with_kvcache's convention); positions index rows of cos / sin
   * and must be < seqlen_ro. Dimensions from rotary_dim on are left as they are. With
   * x1 = x[j], x2 = x[j + rotary_dim / 2] (rotary_interleaved = 0, GPT-NeoX) or x1 = x[2j],
   * x2 = x[2j + 1] (rotary_interleaved != 0, GPT-J), j < rotary_dim / 2, c = cos[pos][j],
   * s = sin[pos][j]:  x1' = x1 c - x2 s,  x2' = x1 s + x2 c  in fp32, rounded to the tensor's
   * dtype (the rotated keys are what the cache stores). */
  fa_tensor rotary_cos, rotary_sin;
  int32_t rotary_interleaved;
  /* The forward's split of each sequence's keys into parts merged by the combine step (split-KV):
   * 0 (default) = the backend's heuristic, 1 = no split, n in [2, 128] = n parts (those past the
   * keys are empty). Results agree within FlashAttention's accuracy rule, not bit for bit. Not
   * with dropout_p > 0 when n > 1. The backward ignores it. */
  int32_t num_splits;

  /* ---- Since 0.4, appended: a 0.3 caller's struct (1864 bytes) ends above. Both default to
   * absent (data NULL), which keeps the behaviour of 0.3. CPU backend only in this build: CUDA
   * tensors refuse both with FA_ERROR_UNSUPPORTED. Not with the KV-cache fields (block_table,
   * cache_seqlens, cache_batch_idx, cache_leftpad, k_new / v_new, rotary). ------------------ */

  /* Optional bias or mask of the scores (PyTorch SDPA's attn_mask), rank 4, logically
   * (batch, heads_q, seqlen_q, seqlen_k): each dimension either that size or 1 (broadcast), any
   * non-negative strides (stride 0 broadcasts too). fp32 / fp16 / bf16: added to the logits;
   * bool / int8: a mask, 0 = the key is not seen (-inf), else nothing added. Element
   * [b][h][i][j] is that of query row i and key j of sequence b, both counted from the start of
   * the sequence (packed batches too: dimensions 2 and 3 must then be >= every sequence's
   * lengths, e.g. max_seqlen_q / _k, or 1). The logit of (i, j) is
   *   softcap(scale * q.k) + attn_bias[b][h][i][j] - slope * |pos - j|
   * then causal / window masks apply; a -inf (or masked) element is a key the row does not see,
   * and a row that sees none outputs 0 with LSE -inf. Forward and backward (the backward
   * recomputes the scores with it). */
  fa_tensor attn_bias;
  /* Backward only, optional output: the gradient of the loss in attn_bias (an fp32 / fp16 /
   * bf16 bias), in fp32 or attn_bias's dtype, of attn_bias's shape: dimensions of size 1 are
   * summed over (batch, heads, queries, keys). Non-overlapping strides. Entries no sequence of
   * a packed batch reads are written 0. data NULL: not computed, no cost. */
  fa_tensor dbias;

  /* ---- Since 0.5, appended: a 0.4 caller's struct (2040 bytes) ends above. All three default to
   * absent (data NULL), which keeps the behaviour of 0.4. -------------------------------------- */

  /* FP8 inputs (FlashAttention-3's q_descale / k_descale / v_descale): with q, k and v of dtype
   * FA_DTYPE_FP8_E4M3 (all three, or none), out fp16 or bf16 (out's dtype chooses), lse fp32.
   * Each descale is optional, fp32, rank 2 (batch, heads_kv) with any non-negative strides
   * (stride 0 broadcasts), on q's device; data NULL means 1. Element [b][g] multiplies the
   * decoded values of batch entry b: q's query heads g * (heads_q / heads_kv) ... (g + 1) *
   * (heads_q / heads_kv) - 1, and kv head g of k and v (packed batches: b is the sequence). The
   * attention is that of the dequantized tensors, softmax_scale applied to q.k as usual:
   *   out = softmax(softmax_scale * (q_descale q) . (k_descale k)) (v_descale v).
   * Descales with other input dtypes are refused (FA_ERROR_DTYPE). FP8 is forward only and is
   * refused (FA_ERROR_UNSUPPORTED, naming the feature) with dropout, attn_bias, rotary and by
   * fa_backward; KV caches (dense or paged, k_new appended bit for bit) take fp8 k / v. In this
   * build the CPU backend implements it (its kernels decode exactly and accumulate in fp32) and
   * CUDA tensors refuse fp8 with FA_ERROR_UNSUPPORTED. */
  fa_tensor q_descale, k_descale, v_descale;
} fa_params;

/* Library version (FA_VERSION encoding) and build description ("cpu", "cpu+cuda(80;90a)"). */
FA_API int32_t fa_version(void);
FA_API const char* fa_build_info(void);

/* Fills *params with defaults: AUTO backend, no tensors, scale 0 (1/sqrt(d)), windows -1, every
 * field since 0.2 zero; sets struct_size.
 *
 * The name is a macro for the symbol of this header's layout: fa_params_init_v5 writes
 * sizeof(fa_params) of 0.5. The library keeps exporting the symbols of the older layouts, each
 * writing its own layout only: fa_params_init (what a program built against the 0.1 header
 * calls; 1144 bytes), fa_params_init_v2 (0.2's header; 1328 bytes), fa_params_init_v3 (0.3's;
 * 1864 bytes) and fa_params_init_v4 (0.4's; 2040 bytes): the library cannot know a caller's size
 * from a pointer, so the header names it. Bindings that load the library dynamically (ctypes)
 * call the symbol of the layout they mirror. The next layout will get fa_params_init_v6 and keep
 * these five. */
#define fa_params_init fa_params_init_v5
FA_API void fa_params_init(fa_params* params);

/* Message of the last failed call on this thread ("" after a success). Valid until the next
 * call on this thread. */
FA_API const char* fa_last_error(void);
FA_API const char* fa_status_string(fa_status status);

/* Workspace the call needs, in bytes, in the memory of the tensors' device. Validates params. */
FA_API fa_status fa_forward_workspace_size(const fa_params* params, size_t* bytes);
FA_API fa_status fa_backward_workspace_size(const fa_params* params, size_t* bytes);

/* out, lse <- attention(q, k, v). stream: a cudaStream_t for CUDA tensors, ignored on CPU. */
FA_API fa_status fa_forward(const fa_params* params, void* workspace, size_t workspace_bytes,
                            void* stream);

/* dq, dk, dv <- gradients of the forward given dout, out and lse (recomputes the scores). */
FA_API fa_status fa_backward(const fa_params* params, void* workspace, size_t workspace_bytes,
                             void* stream);

/* Number of CUDA devices this build can use (0 in a CPU-only build or without a GPU). */
FA_API int32_t fa_cuda_device_count(void);

/* The kernel family that runs this call (backward != 0: fa_backward's, else fa_forward's), as
 * dispatch chooses it: "cuda-sm80", "cuda-vanilla", "cpu-flash", "cpu-reference" (docs/api.md).
 * Validates params as the call would; *name is a static string. */
FA_API fa_status fa_select_kernel(const fa_params* params, int32_t backward, const char** name);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_FLASHATTN_H */
