// A check of the sm90 primitives on the device, apart from any attention kernel: one warpgroup
// multiplies C (64 x n, fp32) = A (64 x k) · B with wgmma, its operands in the 128-byte swizzled
// tiles of tile/swizzle.h read through the descriptors of arch/wgmma_desc.h - A from shared
// memory (SS) or from registers through ldmatrix (RS), B K-major (stored n x k, as K for Q·Kᵀ)
// or MN-major with the transpose bit (stored k x n, as V for P·V). A descriptor field or an
// accumulator layout that is wrong shows as a wrong C. tests/test_gpu_wgmma.cpp runs it.
#pragma once

#include <cstdint>
#include <string>

namespace fa::cuda::selftest {

struct WgmmaCase {
  int n, k;          // n in {64, 128}, k in {16, 64, 128}
  bool a_registers;  // RS (A through ldmatrix into registers) instead of SS
  bool b_mn_major;   // B stored k x n (N contiguous) and read with the transpose bit
};

// C = A · B on device 0 for bf16 A (64 x k, row-major) and B (n x k row-major, or k x n when
// b_mn_major), C (64 x n, row-major). Returns "" on success, else why it did not run ("not
// built for sm_90a", a CUDA error).
std::string wgmma_gemm(const WgmmaCase& c, const uint16_t* a, const uint16_t* b, float* out);

}  // namespace fa::cuda::selftest
