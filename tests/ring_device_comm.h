// An in-process communicator for ring attention on CUDA tensors (tests/test_gpu_ring.cpp): R ranks
// are R host threads, each with its own stream on one GPU, and a transfer is a cudaMemcpyAsync
// from the sender's buffer into the receiver's, ordered by events as flashattn/ring.h asks and
// never by the host waiting on the GPU:
//   start (rank r): an event `ready` on r's call stream (r's queued work is done with its send
//     buffer's contents and with its receive buffer); the offer {send buffer, bytes, ready} is
//     posted for the next rank; then r takes the previous rank's offer (blocking the host until
//     that rank has called start: a rendezvous of threads, not of GPU work), and on r's own copy
//     stream waits for both ranks' `ready`, copies, and records `copied`, which the sender gets
//     back as an acknowledgement;
//   wait (rank r): r's call stream waits for the `copied` of every receive and, once the
//     receivers have acknowledged them, of every send (the library writes a sent buffer again
//     after the wait).
// Like NCCL's ordering through a communication stream (flashattn/ring_nccl.hpp), the copies
// overlap the ranks' attention on the GPU. A host wait that sees nothing for kTimeout throws
// (fa::Communicator turns it into FA_ERROR_COMM) rather than hanging the test.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/ring.hpp"

namespace fa::test {

class DeviceRing {
 public:
  explicit DeviceRing(int32_t size) : size_(size) {}
  // Every event of every transfer; call after the ranks' streams are done.
  ~DeviceRing() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  DeviceRing(const DeviceRing&) = delete;
  DeviceRing& operator=(const DeviceRing&) = delete;

  class Rank : public Communicator {
   public:
    Rank(DeviceRing& ring, int32_t rank) : ring_(ring), rank_(rank) {
      check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~Rank() override {
      cudaStreamSynchronize(copy_stream_);
      cudaStreamDestroy(copy_stream_);
    }
    Rank(const Rank&) = delete;
    Rank& operator=(const Rank&) = delete;

    int32_t rank() const override { return rank_; }
    int32_t size() const override { return ring_.size_; }

    void start(const void* send, int32_t send_peer, void* recv, int32_t recv_peer, size_t bytes,
               void* stream) override {
      ++starts_;
      const auto s = static_cast<cudaStream_t>(stream);
      cudaEvent_t ready = ring_.event();
      check(cudaEventRecord(ready, s), "cudaEventRecord(ready)");
      ring_.post(ring_.offers_, {rank_, send_peer}, Offer{send, bytes, ready});
      const Offer in = ring_.take(ring_.offers_, {recv_peer, rank_}, rank_, "an offer");
      if (in.bytes != bytes)
        throw std::runtime_error("rank " + std::to_string(rank_) + " expected " +
                                 std::to_string(bytes) + " bytes, rank " +
                                 std::to_string(recv_peer) + " sends " + std::to_string(in.bytes));
      check(cudaStreamWaitEvent(copy_stream_, in.ready, 0), "cudaStreamWaitEvent(sender)");
      check(cudaStreamWaitEvent(copy_stream_, ready, 0), "cudaStreamWaitEvent(receiver)");
      check(cudaMemcpyAsync(recv, in.send, bytes, cudaMemcpyDeviceToDevice, copy_stream_),
            "cudaMemcpyAsync");
      cudaEvent_t copied = ring_.event();
      check(cudaEventRecord(copied, copy_stream_), "cudaEventRecord(copied)");
      ring_.post(ring_.acks_, {recv_peer, rank_}, Offer{nullptr, bytes, copied});
      received_.push_back(copied);
      sent_to_.push_back(send_peer);
    }

    void wait(void* stream) override {
      const auto s = static_cast<cudaStream_t>(stream);
      for (cudaEvent_t copied : received_)
        check(cudaStreamWaitEvent(s, copied, 0), "cudaStreamWaitEvent(received)");
      for (int32_t peer : sent_to_) {
        const Offer ack = ring_.take(ring_.acks_, {rank_, peer}, rank_, "an acknowledgement");
        check(cudaStreamWaitEvent(s, ack.ready, 0), "cudaStreamWaitEvent(sent)");
      }
      received_.clear();
      sent_to_.clear();
    }

    int starts() const { return starts_; }

   private:
    static void check(cudaError_t e, const char* what) {
      if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
    }
    DeviceRing& ring_;
    int32_t rank_;
    cudaStream_t copy_stream_ = nullptr;
    std::vector<cudaEvent_t> received_;  // `copied` of the receives since the last wait
    std::vector<int32_t> sent_to_;       // the peers of the sends since the last wait
    int starts_ = 0;
  };

  // Transfers posted and not taken by anyone (0 after a complete collective call).
  size_t in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto* box : {&offers_, &acks_})
      for (const auto& [pair, q] : *box) n += q.size();
    return n;
  }

 private:
  // A sender's buffer with the event after which it may be read; as an acknowledgement, the
  // event after which the copy has finished.
  struct Offer {
    const void* send;
    size_t bytes;
    cudaEvent_t ready;
  };
  using Box = std::map<std::pair<int32_t, int32_t>, std::deque<Offer>>;  // (from, to) -> FIFO
  static constexpr std::chrono::seconds kTimeout{60};

  cudaEvent_t event() {
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
      throw std::runtime_error("cudaEventCreate failed");
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    return e;
  }
  void post(Box& box, std::pair<int32_t, int32_t> key, const Offer& o) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      box[key].push_back(o);
    }
    cv_.notify_all();
  }
  Offer take(Box& box, std::pair<int32_t, int32_t> key, int32_t rank, const char* what) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = box[key];
    if (!cv_.wait_for(lock, kTimeout, [&] { return !q.empty(); }))
      throw std::runtime_error("rank " + std::to_string(rank) + " waited " +
                               std::to_string(kTimeout.count()) + " s for " + what +
                               " of rank " + std::to_string(key.first == rank ? key.second
                                                                               : key.first));
    const Offer o = q.front();
    q.pop_front();
    return o;
  }

  int32_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  Box offers_, acks_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace fa::test
