// An in-process communicator for ring attention's tests: R ranks are R threads of one process,
// and a transfer is a copy through a queue per (sender, receiver) pair guarded by a mutex and a
// condition variable. start copies the bytes out at once (the sender may reuse its buffer);
// wait blocks until every receive it owes has arrived, in the order they were started. A wait
// that sees nothing for kTimeout fails (returns non-zero through fa::Communicator) rather than
// hanging the test.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "flashattn/ring.hpp"

namespace fa::test {

class InProcessRing {
 public:
  explicit InProcessRing(int32_t size) : size_(size) {}

  class Rank : public Communicator {
   public:
    Rank(InProcessRing& ring, int32_t rank) : ring_(ring), rank_(rank) {}
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return ring_.size_; }
    void start(const void* send, int32_t send_peer, void* recv, int32_t recv_peer, size_t bytes,
               void*) override {
      ++starts_;
      if (fail_start_at_ == starts_) throw std::runtime_error("injected failure of start");
      const auto* s = static_cast<const unsigned char*>(send);
      {
        std::lock_guard<std::mutex> lock(ring_.mu_);
        ring_.queues_[{rank_, send_peer}].emplace_back(s, s + bytes);
      }
      ring_.cv_.notify_all();
      pending_.push_back({recv, recv_peer, bytes});
      bytes_sent_ += bytes;
    }
    void wait(void*) override {
      std::unique_lock<std::mutex> lock(ring_.mu_);
      for (const Pending& p : pending_) {
        auto& q = ring_.queues_[{p.from, rank_}];
        if (!ring_.cv_.wait_for(lock, kTimeout, [&] { return !q.empty(); }))
          throw std::runtime_error("rank " + std::to_string(rank_) + " waited " +
                                   std::to_string(kTimeout.count()) + " s for rank " +
                                   std::to_string(p.from));
        if (q.front().size() != p.bytes)
          throw std::runtime_error("rank " + std::to_string(rank_) + " expected " +
                                   std::to_string(p.bytes) + " bytes, got " +
                                   std::to_string(q.front().size()));
        std::memcpy(p.recv, q.front().data(), p.bytes);
        q.pop_front();
      }
      pending_.clear();
    }
    // The n-th call of start (from 1) throws.
    void fail_start_at(int n) { fail_start_at_ = n; }
    int starts() const { return starts_; }
    size_t bytes_sent() const { return bytes_sent_; }

   private:
    struct Pending {
      void* recv;
      int32_t from;
      size_t bytes;
    };
    InProcessRing& ring_;
    int32_t rank_;
    std::vector<Pending> pending_;
    int starts_ = 0, fail_start_at_ = 0;
    size_t bytes_sent_ = 0;
  };

  // Bytes sent and not received by anyone (0 after a complete collective call).
  size_t in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [pair, q] : queues_)
      for (const auto& m : q) n += m.size();
    return n;
  }

 private:
  static constexpr std::chrono::seconds kTimeout{60};
  int32_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int32_t, int32_t>, std::deque<std::vector<unsigned char>>> queues_;
};

// fn(rank) on one thread per rank; returns when all have finished.
template <typename Fn>
void on_ranks(int32_t size, Fn&& fn) {
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < size; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

}  // namespace fa::test
