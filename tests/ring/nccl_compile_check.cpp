// Compiles flashattn/ring_nccl.hpp against the CUDA toolkit's NCCL and links it (built where CUDA
// and NCCL are found; tests/CMakeLists.txt). Without a GPU it says so and exits 77 (skipped). With
// one it runs a ring of one rank (ncclCommInitAll over device 0), which a single GPU allows:
//   1. the communicator's own contract: start sends a buffer to rank 0 (itself) and receives it
//      into another, ordered after a fill queued on the call's stream, and wait makes
//      the stream wait for it; the bytes read back after the stream must be the sent ones;
//   2. a ring forward of one rank on CUDA tensors (bf16, causal) through the library with this
//      communicator, against fa_forward of the same call: one rank's shard is the whole sequence
//      and the engine makes one block call over it in either layout (parallel/ring_plan.h's
//      call_layout; zig-zag's two chunks used to be three calls), and one part merged is the part
//      itself, so out and lse must be equal bit for bit (the CPU's
//      RingAttention.OneRankIsTheSingleDeviceCall asserts the same).
// Exit 0: both held; 1: one failed (the line says which).
#include <cstdio>
#include <cstring>
#include <vector>

#include "flashattn/ring_nccl.hpp"

namespace {

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Step 1: a self transfer through start / wait on `stream`.
bool self_transfer(fa::NcclCommunicator& comm, cudaStream_t stream) {
  constexpr size_t kBytes = 1 << 20;
  void *send = nullptr, *recv = nullptr;
  if (!cuda_ok(cudaMalloc(&send, kBytes), "cudaMalloc") ||
      !cuda_ok(cudaMalloc(&recv, kBytes), "cudaMalloc"))
    return false;
  cudaMemsetAsync(recv, 0, kBytes, stream);
  cudaMemsetAsync(send, 0x5A, kBytes, stream);  // queued before start: the transfer follows it
  bool ok = true;
  try {
    comm.start(send, 0, recv, 0, kBytes, stream);
    comm.wait(stream);
  } catch (const std::exception& e) {
    std::printf("start / wait: %s\n", e.what());
    ok = false;
  }
  std::vector<unsigned char> host(kBytes);
  ok = ok && cuda_ok(cudaMemcpyAsync(host.data(), recv, kBytes, cudaMemcpyDeviceToHost, stream),
                     "cudaMemcpyAsync") &&
       cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  size_t wrong = 0;
  for (unsigned char b : host) wrong += b != 0x5A;
  std::printf("self transfer of %zu bytes: %zu wrong\n", kBytes, wrong);
  cudaFree(send);
  cudaFree(recv);
  return ok && wrong == 0;
}

// Step 2: fa_ring_forward with one rank against fa_forward, bit for bit.
bool one_rank_ring(fa::NcclCommunicator& comm, cudaStream_t stream) {
  constexpr int64_t kRows = 77, kHeads = 2, kDim = 64;
  const size_t elems = size_t(kRows * kHeads * kDim), lse_elems = size_t(kHeads * kRows);
  std::vector<uint16_t> host(elems);
  uint32_t x = 12345;
  for (uint16_t& h : host) {  // bf16 values in [-1, 1): an exponent near 0, random mantissa
    x = x * 1664525u + 1013904223u;
    h = uint16_t(0x3E00u | ((x >> 9) & 0x01FFu) | ((x >> 31) << 15));
  }
  void* buf[7] = {};  // q, k, v, out (ring), out (plain), lse (ring), lse (plain)
  for (int i = 0; i < 7; ++i)
    if (!cuda_ok(cudaMalloc(&buf[i], i < 5 ? elems * 2 : lse_elems * 4), "cudaMalloc")) return false;
  for (int i = 0; i < 3; ++i)
    cudaMemcpy(buf[i], host.data(), elems * 2, cudaMemcpyHostToDevice);
  auto tensor = [&](void* data) {
    return fa::Tensor::contiguous(data, FA_DTYPE_BF16, {1, kRows, kHeads, kDim}, fa::cuda_device(0));
  };
  auto lse = [&](void* data) {
    return fa::Tensor::contiguous(data, FA_DTYPE_FP32, {1, kHeads, kRows}, fa::cuda_device(0));
  };
  fa::Options o;
  o.causal = true;
  const fa_params ring_p = fa::make_params(tensor(buf[0]), tensor(buf[1]), tensor(buf[2]),
                                           tensor(buf[3]), lse(buf[5]), o);
  const fa_params plain_p = fa::make_params(tensor(buf[0]), tensor(buf[1]), tensor(buf[2]),
                                            tensor(buf[4]), lse(buf[6]), o);
  bool ok = true;
  void* ws = nullptr;
  try {
    const fa::RingOptions ro{kRows, FA_RING_ZIGZAG};
    size_t bytes = fa::ring_forward_workspace_size(ring_p, ro, comm), plain = 0;
    fa::check(fa_forward_workspace_size(&plain_p, &plain));
    bytes = bytes > plain ? bytes : plain;
    ok = cuda_ok(cudaMalloc(&ws, bytes), "cudaMalloc(workspace)");
    fa::ring_forward(ring_p, ro, comm, ws, bytes, stream);
    fa::check(fa_forward(&plain_p, ws, bytes, stream));
  } catch (const std::exception& e) {
    std::printf("ring forward: %s\n", e.what());
    ok = false;
  }
  ok = ok && cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<unsigned char> a(elems * 2), b(elems * 2), la(lse_elems * 4), lb(lse_elems * 4);
  cudaMemcpy(a.data(), buf[3], a.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(b.data(), buf[4], b.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(la.data(), buf[5], la.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(lb.data(), buf[6], lb.size(), cudaMemcpyDeviceToHost);
  const bool same = a == b && la == lb;
  std::printf("one-rank ring forward on CUDA against fa_forward: %s\n",
              same ? "out and lse equal bit for bit" : "DIFFERENT");
  for (void* p : buf) cudaFree(p);
  cudaFree(ws);
  return ok && same;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: ring_nccl.hpp compiled and linked, not run\n");
    return 77;
  }
  ncclComm_t comm;
  int dev = 0;
  if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) {
    std::printf("ncclCommInitAll over device 0 failed\n");
    return 1;
  }
  cudaStream_t stream, comm_stream;
  cudaStreamCreate(&stream);
  cudaStreamCreate(&comm_stream);
  int status = 0;
  {
    fa::NcclCommunicator c(comm, comm_stream);
    const fa_comm raw = c.raw();
    std::printf("NcclCommunicator: rank %d of %d\n", raw.rank, raw.size);
    if (raw.rank != 0 || raw.size != 1) status = 1;
    if (!self_transfer(c, stream)) status = 1;
    if (!one_rank_ring(c, stream)) status = 1;
  }
  cudaStreamDestroy(stream);
  cudaStreamDestroy(comm_stream);
  ncclCommDestroy(comm);
  return status;
}
