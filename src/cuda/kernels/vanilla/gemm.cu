#include "cuda/kernels/vanilla/gemm.h"

#include <unordered_map>

#include "core/error.h"

namespace fa::cuda::vanilla {
namespace {

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(FA_ERROR_CUDA, what, " failed: ", cublasGetStatusName(s), " (", cublasGetStatusString(s),
         ")");
}

constexpr int kPointerThreads = 256;

// pointers[0..count): A, [count..2count): B, [2count..3count): C.
__global__ void fill_pointers(Operand a, Operand b, Operand c, int64_t count, void** pointers) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  pointers[i] = const_cast<char*>(a.at(i));
  pointers[count + i] = const_cast<char*>(b.at(i));
  pointers[2 * count + i] = const_cast<char*>(c.at(i));
}

}  // namespace

cublasHandle_t handle_for(cudaStream_t stream, void* cublas_workspace, size_t bytes) {
  // One handle per (thread, device): a cuBLAS handle bound to a stream must not be shared by
  // threads that call concurrently. Handles live until the process ends; destroying them from a
  // thread_local destructor can run after the CUDA runtime has shut down.
  thread_local std::unordered_map<int, cublasHandle_t> handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) fail(FA_ERROR_CUDA, "cudaGetDevice failed");
  cublasHandle_t& h = handles[device];
  if (h == nullptr) check_cublas(cublasCreate(&h), "cublasCreate");
  check_cublas(cublasSetStream(h, stream), "cublasSetStream");
  check_cublas(cublasSetWorkspace(h, cublas_workspace, bytes), "cublasSetWorkspace");
  return h;
}

void batched_gemm(cublasHandle_t handle, cudaStream_t stream, const RowMajorGemm& g,
                  const Operand& a, const Operand& b, const Operand& c, float alpha, float beta,
                  int64_t count, void** pointers) {
  if (count == 0 || g.m == 0 || g.n == 0) return;
  const int blocks = int((count + kPointerThreads - 1) / kPointerThreads);
  fill_pointers<<<blocks, kPointerThreads, 0, stream>>>(a, b, c, count, pointers);
  if (cudaGetLastError() != cudaSuccess) fail(FA_ERROR_CUDA, "fill_pointers launch failed");
  // cuBLAS is column-major: a row-major C (m x n) is a column-major Cᵀ (n x m), and
  // Cᵀ = Bᵀ · Aᵀ, so B goes first. A row-major operand read as-is is already the transpose
  // cuBLAS wants (CUBLAS_OP_N); one whose memory holds the transpose needs CUBLAS_OP_T.
  const cublasOperation_t op_b = g.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const void* const* ptr_a = pointers;
  const void* const* ptr_b = pointers + count;
  void* const* ptr_c = pointers + 2 * count;
  check_cublas(cublasGemmBatchedEx(handle, op_b, op_a, int(g.n), int(g.m), int(g.k), &alpha,
                                   ptr_b, b.type, int(b.ld), ptr_a, a.type, int(a.ld), &beta,
                                   ptr_c, c.type, int(c.ld), int(count), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
               "cublasGemmBatchedEx");
}

}  // namespace fa::cuda::vanilla
