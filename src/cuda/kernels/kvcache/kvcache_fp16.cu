// The cuda-kvcache family's launches for fp16 inputs (kvcache_launch.cuh).
#include "cuda/kernels/kvcache/kvcache_launch.cuh"

namespace fa::cuda::kvcache {
template void run<Fp16Tag, false, Fp16Tag>(const Params&, const Context&, void*, size_t, void*);
}  // namespace fa::cuda::kvcache
