// flashattn C++ API for ring attention (context parallelism): a header-only layer over
// flashattn/ring.h. A communicator is a class with start / wait; the library calls it through
// the C struct, and an exception it throws comes back as fa::Error (FA_ERROR_COMM) naming it.
//
//   MyComm comm(...);                                   // a fa::Communicator
//   fa::RingOptions ring;  ring.seqlen = L;             // zig-zag by default
//   auto rows = fa::ring_shard(ring, comm.size(), comm.rank());   // which rows this rank holds
//   fa::ring_forward(q, k, v, out, lse, opt, ring, comm);        // this rank's shard of each
//
// CUDA tensors: the overloads on fa_params with a device workspace and a stream.
// flashattn/ring_nccl.hpp has a communicator over NCCL.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "flashattn/flashattn.hpp"
#include "flashattn/ring.h"

namespace fa {

// Point-to-point transfers between the ranks of one ring (fa_comm's contract, flashattn/ring.h).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  // Begin sending `bytes` from send to send_peer and receiving `bytes` into recv from
  // recv_peer; stream is the one the ring call was given. Throw on failure.
  virtual void start(const void* send, int32_t send_peer, void* recv, int32_t recv_peer,
                     size_t bytes, void* stream) = 0;
  // Complete every transfer started since the last wait. Throw on failure.
  virtual void wait(void* stream) = 0;

  // The C struct whose functions call this object. Valid while it lives.
  fa_comm raw() {
    fa_comm c{};
    c.rank = rank();
    c.size = size();
    c.ctx = this;
    c.start = &start_thunk;
    c.wait = &wait_thunk;
    return c;
  }
  // What the last failed start / wait threw ("" if nothing failed).
  const std::string& last_failure() const { return failure_; }

 private:
  template <typename F>
  static int32_t guarded(void* ctx, F&& f) {
    auto* self = static_cast<Communicator*>(ctx);
    try {
      f(*self);
      return 0;
    } catch (const std::exception& e) {
      self->failure_ = e.what();
    } catch (...) {
      self->failure_ = "unknown exception";
    }
    return 1;
  }
  static int32_t start_thunk(void* ctx, const void* send, int32_t send_peer, void* recv,
                             int32_t recv_peer, size_t bytes, void* stream) {
    return guarded(ctx, [&](Communicator& c) {
      c.start(send, send_peer, recv, recv_peer, bytes, stream);
    });
  }
  static int32_t wait_thunk(void* ctx, void* stream) {
    return guarded(ctx, [&](Communicator& c) { c.wait(stream); });
  }
  std::string failure_;
};

struct RingOptions {
  int64_t seqlen = 0;                      // rows of the whole sequence
  fa_ring_layout layout = FA_RING_ZIGZAG;  // FA_RING_CONTIGUOUS: rank r holds chunk r of R
};

inline fa_ring make_ring(const RingOptions& o, const fa_comm& comm) {
  fa_ring r;
  fa_ring_init(&r);
  r.seqlen = o.seqlen;
  r.layout = o.layout;
  r.comm = comm;
  return r;
}

// The global rows `rank` of `size` ranks holds: {start, length} of its first chunk, then of its
// second (length 0 in the contiguous layout).
inline std::array<int64_t, 4> ring_shard(const RingOptions& o, int32_t size, int32_t rank) {
  fa_comm comm{};
  comm.size = size;
  const fa_ring r = make_ring(o, comm);
  std::array<int64_t, 4> rows{};
  check(fa_ring_shard(&r, rank, rows.data()));
  return rows;
}

namespace detail {
// A ring call's status as fa::Error, with the communicator's own failure appended.
inline void check_ring(fa_status status, const Communicator& comm) {
  if (status == FA_OK) return;
  std::string message = fa_last_error();
  if (status == FA_ERROR_COMM && !comm.last_failure().empty())
    message += ": " + comm.last_failure();
  throw Error(status, message);
}
// A ring size query (fa_ring_forward_workspace_size or the backward's) on p.
inline size_t ring_workspace(fa_status (*query)(const fa_params*, const fa_ring*, size_t*),
                             const fa_params& p, const RingOptions& ring, Communicator& comm) {
  const fa_ring r = make_ring(ring, comm.raw());
  size_t bytes = 0;
  check(query(&p, &r, &bytes));
  return bytes;
}
}  // namespace detail

// The ring call on a shard's params (fa::make_params, with dout, dq, dk, dv for the backward),
// the caller's workspace and stream: CPU or CUDA tensors. CUDA: a device workspace of the
// queried size, the call queued on stream (flashattn/ring.h). Collective.
inline size_t ring_forward_workspace_size(const fa_params& p, const RingOptions& ring,
                                          Communicator& comm) {
  return detail::ring_workspace(fa_ring_forward_workspace_size, p, ring, comm);
}
inline size_t ring_backward_workspace_size(const fa_params& p, const RingOptions& ring,
                                           Communicator& comm) {
  return detail::ring_workspace(fa_ring_backward_workspace_size, p, ring, comm);
}
inline void ring_forward(const fa_params& p, const RingOptions& ring, Communicator& comm,
                         void* workspace, size_t bytes, void* stream) {
  const fa_ring r = make_ring(ring, comm.raw());
  detail::check_ring(fa_ring_forward(&p, &r, workspace, bytes, stream), comm);
}
inline void ring_backward(const fa_params& p, const RingOptions& ring, Communicator& comm,
                          void* workspace, size_t bytes, void* stream) {
  const fa_ring r = make_ring(ring, comm.raw());
  detail::check_ring(fa_ring_backward(&p, &r, workspace, bytes, stream), comm);
}

// out, lse <- this rank's rows of attention over the whole sequence (CPU tensors: allocates the
// host workspace). Collective: every rank of comm calls it.
inline void ring_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Options& o, const RingOptions& ring,
                         Communicator& comm) {
  const fa_params p = make_params(q, k, v, out, lse, o);
  const size_t bytes = ring_forward_workspace_size(p, ring, comm);
  detail::require_host(p, "fa::ring_forward");
  HostWorkspace ws(bytes);
  ring_forward(p, ring, comm, ws.data(), ws.size(), nullptr);
}

// dq, dk, dv <- this rank's rows of the gradients, given dout and the ring forward's out, lse.
inline void ring_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, const Options& o,
                          const RingOptions& ring, Communicator& comm) {
  fa_params p = make_params(q, k, v, out, lse, o);
  p.dout = dout.raw;
  p.dq = dq.raw;
  p.dk = dk.raw;
  p.dv = dv.raw;
  const size_t bytes = ring_backward_workspace_size(p, ring, comm);
  detail::require_host(p, "fa::ring_backward");
  HostWorkspace ws(bytes);
  ring_backward(p, ring, comm, ws.data(), ws.size(), nullptr);
}

}  // namespace fa
