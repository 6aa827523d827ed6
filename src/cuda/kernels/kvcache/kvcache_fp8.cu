// The cuda-kvcache family's launches for fp8 e4m3 inputs (kvcache_launch.cuh): products in fp16,
// out in bf16 or fp16.
#include "cuda/kernels/kvcache/kvcache_launch.cuh"

namespace fa::cuda::kvcache {
template void run<Fp16Tag, true, Bf16Tag>(const Params&, const Context&, void*, size_t, void*);
template void run<Fp16Tag, true, Fp16Tag>(const Params&, const Context&, void*, size_t, void*);
}  // namespace fa::cuda::kvcache
