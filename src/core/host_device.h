// Marks functions that host and device code both compile (CUDA sources see __host__ __device__).
#pragma once

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FA_HOST_DEVICE inline
#endif
