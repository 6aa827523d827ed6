// A fa::Communicator over NCCL for ring attention between GPUs (flashattn/ring.hpp), header-only:
// the program that includes it links NCCL and the CUDA runtime; libflashattn links neither.
//
// The caller owns the ncclComm_t (one rank per GPU, ranks in ring order) and comm_stream, a
// stream of its own for the transfers. The ring call's stream (the compute stream) and
// comm_stream are ordered by events, never by the host:
//   start: an event on the compute stream (the block to send is written, the buffer to receive
//          into is no longer read), comm_stream waits for it, then ncclSend / ncclRecv in one
//          ncclGroupStart / ncclGroupEnd so that the ring's sends and receives cannot deadlock;
//   wait:  an event on comm_stream, the compute stream waits for it.
// So the next block's transfer overlaps the attention of the block in hand on the GPU.
//
// Not run in this build's tests (it needs two GPUs); tests/ring/nccl_compile_check.cpp compiles
// it wherever CUDA and NCCL are found.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

#include "flashattn/ring.hpp"

namespace fa {

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t comm_stream)
      : comm_(comm), comm_stream_(comm_stream) {
    nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~NcclCommunicator() override {
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  void start(const void* send, int32_t send_peer, void* recv, int32_t recv_peer, size_t bytes,
             void* stream) override {
    cuda_check(cudaEventRecord(ready_, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(comm_stream_, ready_, 0), "cudaStreamWaitEvent");
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    nccl_check(ncclSend(send, bytes, ncclUint8, send_peer, comm_, comm_stream_), "ncclSend");
    nccl_check(ncclRecv(recv, bytes, ncclUint8, recv_peer, comm_, comm_stream_), "ncclRecv");
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void wait(void* stream) override {
    cuda_check(cudaEventRecord(done_, comm_stream_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0),
               "cudaStreamWaitEvent");
  }

 private:
  static void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
  }
  static void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
  ncclComm_t comm_;
  cudaStream_t comm_stream_;
  int rank_ = 0, size_ = 0;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace fa
