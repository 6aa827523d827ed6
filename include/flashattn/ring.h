/*
 * flashattn: ring attention (context parallelism) — part of the stable C ABI (flashattn.h).
 *
 * One attention call over a sequence whose rows are split across the R ranks of a communicator
 * the caller owns (NCCL between GPUs, torch.distributed, threads of one process in tests). Each
 * rank passes its shard of q, k, v (and out, lse; dout, dq, dk, dv in the backward) in an
 * ordinary fa_params; the K/V blocks travel around the ring (rank r sends to r + 1 and receives
 * from r - 1) while each rank attends to the block in hand, and the partial (out, lse) of the
 * blocks are merged by the library's combine step. The result on every rank is its rows of the
 * single-device call over the whole sequence. The backward sends dK / dV around the ring behind
 * their K / V, home to their rank; dQ stays local. docs/context-parallel.md has the details.
 *
 * Shards: the sequence of `seqlen` rows is cut into chunks of floor / ceil(seqlen / n) rows
 * (chunk c is rows [c * seqlen / n, (c + 1) * seqlen / n)).
 *   FA_RING_CONTIGUOUS: n = R, rank r holds chunk r.
 *   FA_RING_ZIGZAG:     n = 2R, rank r holds chunk r followed by chunk 2R - 1 - r, so that under
 *                       a causal mask every rank does the same work at every step.
 * fa_ring_shard says which rows a rank holds. Every rank must pass the same seqlen, layout,
 * batch, heads, head_dim, dtype and options; the library cannot see the other ranks' arguments.
 *
 * What the shard's fa_params may use: q, k, v of one dtype (fp32, fp16, bf16; fp16 / bf16 on
 * CUDA), out (fp32 with 16-bit inputs too; a CUDA backward reads a 16-bit out and dout),
 * dq / dk / dv (fp32 with 16-bit inputs too), lse (required in the backward), GQA / MQA,
 * causal, softmax_scale, softcap, backend, deterministic. Refused with
 * FA_ERROR_UNSUPPORTED, naming the field: packed batches (cu_seqlens), windows, ALiBi, dropout,
 * attn_bias, q_shift, the KV-cache fields, num_splits > 1, fp8 inputs.
 *
 * CPU or CUDA tensors. On CUDA a rank's tensors and workspace are memory of one device, and the
 * call is asynchronous like fa_forward: every block runs through fa_forward / fa_backward on
 * `stream`, the merges of partial results and the fp32 sums of gradients are small kernels on
 * `stream`, the transfers are ordered with it through the communicator (below), and the call
 * returns with that work queued; the library itself never waits on the GPU. Synchronise `stream`
 * (or queue more work on it) to use the outputs. Partial outputs on CUDA are in the inputs'
 * dtype (the kernels write it) and merged in fp32.
 */
#ifndef FLASHATTN_RING_H
#define FLASHATTN_RING_H

#include "flashattn/flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fa_ring_layout {
  FA_RING_CONTIGUOUS = 0, /* rank r holds chunk r of R */
  FA_RING_ZIGZAG = 1      /* rank r holds chunks r and 2R - 1 - r of 2R (load-balanced causal) */
} fa_ring_layout;

/* The caller's communicator: point-to-point transfers of bytes between ranks.
 *
 * start: begins sending `bytes` from send_buf to rank send_peer and receiving `bytes` into
 *   recv_buf from rank recv_peer, and returns without waiting for either (it may complete them
 *   at once, e.g. a copy). The buffers are in the memory of the tensors' device; stream is the
 *   stream the library was given. The library may call start several times before one wait;
 *   transfers between the same two ranks are matched in the order they were started.
 * wait: completes every transfer started since the last wait, both ways: the received bytes are
 *   in recv_buf and send_buf is no longer read (the library writes it again after a wait).
 * With CUDA tensors the library queues its reads and writes of these buffers on `stream` without
 * waiting for them, so the ordering is the stream's:
 *   - a transfer started by start must not read send_buf or write recv_buf before the work
 *     queued on `stream` so far has run (e.g. record an event on stream and make the transfer's
 *     stream wait for it);
 *   - after wait, the work queued on `stream` afterwards must not run before the transfers have
 *     completed (e.g. make stream wait for an event recorded after them).
 *   Neither needs to block the host; flashattn/ring_nccl.hpp's communicator does not.
 * Both return 0 on success; anything else stops the call with FA_ERROR_COMM quoting the value.
 * They are called from the thread that called the library. With size 1 neither is called, and
 * the call is the single-device one (fa_forward / fa_backward over the shard: the same results,
 * bit for bit, in either layout). */
typedef struct fa_comm {
  int32_t rank; /* this rank, in [0, size) */
  int32_t size; /* R >= 1 */
  void* ctx;    /* passed back to start and wait */
  int32_t (*start)(void* ctx, const void* send_buf, int32_t send_peer, void* recv_buf,
                   int32_t recv_peer, size_t bytes, void* stream);
  int32_t (*wait)(void* ctx, void* stream);
} fa_comm;

typedef struct fa_ring {
  size_t struct_size; /* sizeof(fa_ring); set by fa_ring_init */
  int64_t seqlen;     /* rows of the whole sequence (every rank's shard together) */
  int32_t layout;     /* fa_ring_layout */
  fa_comm comm;
} fa_ring;

/* Defaults: struct_size set, seqlen 0 (to be set), FA_RING_ZIGZAG, comm zeroed (rank 0 of 0). */
FA_API void fa_ring_init(fa_ring* ring);

/* The global rows rank `rank` holds under ring's seqlen, layout and comm.size (comm.rank is not
 * read): rows[0], rows[1] = start and length of its first chunk, rows[2], rows[3] of its second
 * (length 0 in the contiguous layout). Its shard is those rows in that order. */
FA_API fa_status fa_ring_shard(const fa_ring* ring, int32_t rank, int64_t rows[4]);

/* Workspace of the ring call, in the memory of the tensors' device (CUDA: device memory the
 * caller allocates once, e.g. cudaMalloc, any 16-byte aligned pointer; the library allocates
 * none): two K/V blocks in flight, the merged partial results, and the attention calls' own
 * workspace. Validates as the call. */
FA_API fa_status fa_ring_forward_workspace_size(const fa_params* params, const fa_ring* ring,
                                                size_t* bytes);
FA_API fa_status fa_ring_backward_workspace_size(const fa_params* params, const fa_ring* ring,
                                                 size_t* bytes);

/* out (and lse, if given) <- this rank's rows of attention(q, k, v) over the whole sequence.
 * Every rank of the communicator must make the call (it is collective). The outputs are written
 * only at the end (on CUDA: their writes are the last work queued): a rejected call, or one
 * stopped by the communicator, writes none of them. */
FA_API fa_status fa_ring_forward(const fa_params* params, const fa_ring* ring, void* workspace,
                                 size_t workspace_bytes, void* stream);

/* dq, dk, dv <- this rank's rows of the gradients, given dout and the ring forward's out and lse
 * (this rank's rows of each). Collective, as the forward. */
FA_API fa_status fa_ring_backward(const fa_params* params, const fa_ring* ring, void* workspace,
                                  size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_RING_H */
