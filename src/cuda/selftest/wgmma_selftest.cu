#include "cuda/selftest/wgmma_selftest.h"

#include <cuda_runtime.h>

#include <cstring>
#include <type_traits>

#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/mma.cuh"
#include "cuda/arch/sync.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_desc.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // a_lane
#include "cuda/tile/swizzle.h"

namespace fa::cuda::selftest {
namespace {

template <int kN, int kK, bool kRS, bool kBmn>
__global__ void __launch_bounds__(128) wgmma_gemm_kernel(const uint16_t* a, const uint16_t* b,
                                                         float* c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using ATile = SwizzledTile<64, kK>;
  using BTile = std::conditional_t<kBmn, SwizzledTile<kK, kN>, SwizzledTile<kN, kK>>;
  extern __shared__ __align__(1024) uint16_t smem[];
  uint16_t* sA = smem;
  uint16_t* sB = smem + ATile::kElems;  // ATile::kElems * 2 is a multiple of 1024
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < 64 * kK; i += 128) sA[ATile::offset(i / kK, i % kK)] = a[i];
  constexpr int kBRows = kBmn ? kK : kN, kBCols = kBmn ? kN : kK;
  for (int i = tid; i < kBRows * kBCols; i += 128) sB[BTile::offset(i / kBCols, i % kBCols)] = b[i];
  fence_proxy_async_shared();  // the ordinary stores, before wgmma's operand reads
  __syncthreads();
  const uint32_t aA = smem_addr(sA), aB = smem_addr(sB);
  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
  uint32_t af[kK / 16][4];
  if constexpr (kRS) {
    const auto lanes = sm80::a_lane<ATile>(lane);  // this warp's 16 rows, as an mma.sync A fragment
#pragma unroll
    for (int ks = 0; ks < kK / 16; ++ks)
      ldmatrix_x4(af[ks], aA + ATile::frag_offset(lanes, 16 * warp, 16 * ks));
  }
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    const uint64_t db = kBmn ? mnmajor_sw128_desc(aB, kK, 16 * ks) : kmajor_sw128_desc(aB, kN, 16 * ks);
    if constexpr (kRS)
      wgmma_rs<Bf16Tag, kN, kBmn ? 1 : 0>(acc, af[ks], db, ks > 0);
    else
      wgmma_ss<Bf16Tag, kN, 0, kBmn ? 1 : 0>(acc, kmajor_sw128_desc(aA, 64, 16 * ks), db, ks > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_acc_fence(acc);
  const int g = lane / 4, t = lane % 4, row = 16 * warp + g;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      c[(row + 8 * (e / 2)) * kN + 8 * j + 2 * t + e % 2] = acc[4 * j + e];
#else
  (void)a, (void)b, (void)c;
#endif
}

template <int kN, int kK, bool kRS, bool kBmn>
std::string launch(const uint16_t* a, const uint16_t* b, float* c) {
  using BTile = std::conditional_t<kBmn, SwizzledTile<kK, kN>, SwizzledTile<kN, kK>>;
  const size_t bytes = size_t(2) * (SwizzledTile<64, kK>::kElems + BTile::kElems);  // padded
  auto kernel = wgmma_gemm_kernel<kN, kK, kRS, kBmn>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(bytes));
  if (e == cudaSuccess) {
    kernel<<<1, 128, bytes>>>(a, b, c);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

template <int kN, int kK>
std::string dispatch_ab(const WgmmaCase& w, const uint16_t* a, const uint16_t* b, float* c) {
  if (w.a_registers)
    return w.b_mn_major ? launch<kN, kK, true, true>(a, b, c) : launch<kN, kK, true, false>(a, b, c);
  return w.b_mn_major ? launch<kN, kK, false, true>(a, b, c) : launch<kN, kK, false, false>(a, b, c);
}

}  // namespace

std::string wgmma_gemm(const WgmmaCase& w, const uint16_t* a, const uint16_t* b, float* out) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "no CUDA device";
  if (prop.major != 9) return "the device is not sm90";
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, wgmma_gemm_kernel<64, 16, false, false>) != cudaSuccess ||
      attr.binaryVersion < 90)
    return "not built for sm_90a";
  const size_t a_bytes = size_t(64) * w.k * 2, b_bytes = size_t(w.n) * w.k * 2,
               c_bytes = size_t(64) * w.n * 4;
  void *da = nullptr, *db = nullptr, *dc = nullptr;
  std::string why;
  if (cudaMalloc(&da, a_bytes) != cudaSuccess || cudaMalloc(&db, b_bytes) != cudaSuccess ||
      cudaMalloc(&dc, c_bytes) != cudaSuccess) {
    why = "cudaMalloc failed";
  } else {
    cudaMemcpy(da, a, a_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, b_bytes, cudaMemcpyHostToDevice);
    cudaMemset(dc, 0xFF, c_bytes);
    const auto* pa = static_cast<const uint16_t*>(da);
    const auto* pb = static_cast<const uint16_t*>(db);
    auto* pc = static_cast<float*>(dc);
    if (w.n == 64 && w.k == 16) why = dispatch_ab<64, 16>(w, pa, pb, pc);
    else if (w.n == 64 && w.k == 64) why = dispatch_ab<64, 64>(w, pa, pb, pc);
    else if (w.n == 64 && w.k == 128) why = dispatch_ab<64, 128>(w, pa, pb, pc);
    else if (w.n == 128 && w.k == 16) why = dispatch_ab<128, 16>(w, pa, pb, pc);
    else if (w.n == 128 && w.k == 64) why = dispatch_ab<128, 64>(w, pa, pb, pc);
    else if (w.n == 128 && w.k == 128) why = dispatch_ab<128, 128>(w, pa, pb, pc);
    else why = "unsupported (n, k)";
    if (why.empty() && cudaMemcpy(out, dc, c_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      why = "copy back failed";
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return why;
}

}  // namespace fa::cuda::selftest
