// Compiles flashattn/ring_nccl.hpp against the CUDA toolkit's NCCL and links it (built where CUDA
// and NCCL are found; tests/CMakeLists.txt). Running it needs a GPU per rank, which CI has not:
// without one it says so and exits 77 (skipped). On a machine with GPUs it runs one rank
// (ncclCommInitAll over device 0): a ring of one, whose ring call makes no transfer.
#include <cstdio>

#include "flashattn/ring_nccl.hpp"

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: ring_nccl.hpp compiled and linked, not run\n");
    return 77;
  }
  ncclComm_t comm;
  int dev = 0;
  if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) return 1;
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  int status = 0;
  {
    fa::NcclCommunicator c(comm, stream);
    const fa_comm raw = c.raw();
    status = raw.rank == 0 && raw.size == 1 ? 0 : 1;
    std::printf("NcclCommunicator: rank %d of %d\n", raw.rank, raw.size);
  }
  cudaStreamDestroy(stream);
  ncclCommDestroy(comm);
  return status;
}
