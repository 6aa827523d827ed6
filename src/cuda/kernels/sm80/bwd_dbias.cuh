// The attention bias in the sm80 backward's bias kernels (BwdTraits::kBias; issue 31): each
// step's bias elements read into its logits as the forward reads them (fwd_tile.cuh, BiasRows:
// after softcap, before ALiBi, a mask's 0 as -inf, rows and keys past the sequence clamped into
// it), and dBias = d loss / d logit = P ∘ (dP ∘ keep - D), the step's dS before softcap's factor
// and the softmax scale (the CPU backward's definition, cpu/flash_bwd.cpp), summed over the axes
// where dbias is 1 (BwdDbiasPlan, bwd_sm80.h). The host side: the clear and the conversion
// kernels below, launched by run_bwd (bwd_launch.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/mask.h"
#include "core/params.h"
#include "cuda/kernels/sm80/bwd_traits.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"  // kNegInf

namespace fa::cuda::sm80 {

// What a step of a bias kernel reads and writes of the bias (StepBias<false>: the other
// kernels', empty). Made once a step by bwd_block: (b, hq) is the step's batch entry and query
// head, (m0, n0) its first query and key. Element (qc, kr) of the step is query m0 + qc, key
// n0 + kr of the sequence.
template <bool kOn>
struct StepBias {};

template <>
struct StepBias<true> {
  const char* bias;        // the bias element of (b, hq, m0, n0)
  Params::Bias::Kind kind;
  // Of the bias, in elements: a step's offsets from its first element fit 32 bits
  // (bwd_bias_offsets_fit, checked when the call is dispatched).
  int stride_q, stride_k;
  int rows, keys;          // the step's queries and keys inside the sequence (>= 1)
  // dBias: op kNone when not asked; out at (b, hq, m0, n0) of its target; its strides (32 bits as
  // the bias's) 0 where summed; sum_q / sum_k as BwdDbias's.
  DbiasOp op;
  int sum_q, sum_k;
  char* out;
  int out_q, out_k;
  float inv_scale;  // 1 / softmax scale: the kernel's dS carries the scale (bwd_pointwise)

  __device__ __forceinline__ static StepBias make(const Params& p, const BwdDbias& d, int64_t b,
                                                  int64_t hq, int64_t m0, int64_t n0,
                                                  int64_t len_q, int64_t len_k) {
    const Params::Bias& bias = p.bias;
    StepBias s;
    s.kind = bias.kind;
    const int bsize = bias.kind == Params::Bias::Kind::F32    ? 4
                      : bias.kind == Params::Bias::Kind::Mask ? 1
                                                              : 2;
    s.bias = static_cast<const char*>(bias.data) + bias.offset(b, hq, m0, n0) * bsize;
    s.stride_q = int(bias.stride_q);
    s.stride_k = int(bias.stride_k);
    s.rows = int(len_q - m0);
    s.keys = int(len_k - n0);
    s.op = d.op;
    s.sum_q = d.sum_q;
    s.sum_k = d.sum_k;
    const int esize = d.op == DbiasOp::kStoreF16 || d.op == DbiasOp::kStoreBF16 ? 2 : 4;
    s.out = static_cast<char*>(d.out) +
            (b * d.stride[0] + hq * d.stride[1] + m0 * d.stride[2] + n0 * d.stride[3]) * esize;
    s.out_q = int(d.stride[2]);
    s.out_k = int(d.stride[3]);
    s.inv_scale = 1.f / p.softmax_scale;
    return s;
  }

  // Whether query qc of the step lies inside the sequence (its LSE is then read).
  __device__ __forceinline__ bool row_in(int qc) const { return qc < rows; }

  // The bias element of query qc, key kr as a term of the logit (BiasRows::at's values); 0
  // outside the sequence, where P is 0 whatever the logit (rows: an LSE of +inf; keys: masked).
  __device__ __forceinline__ float at(int qc, int kr) const {
    if (qc >= rows || kr >= keys) return 0.f;
    const int o = qc * stride_q + kr * stride_k;
    switch (kind) {
      case Params::Bias::Kind::F32: return reinterpret_cast<const float*>(bias)[o];
      case Params::Bias::Kind::F16: return to_float(reinterpret_cast<const half_t*>(bias)[o]);
      case Params::Bias::Kind::BF16:
        return to_float(reinterpret_cast<const bfloat16_t*>(bias)[o]);
      case Params::Bias::Kind::Mask:
        return reinterpret_cast<const uint8_t*>(bias)[o] != 0 ? 0.f : kNegInf;
      default: return 0.f;
    }
  }

  // One dBias element where no axis of the step is summed (sum_q, sum_k 0): added (summed over
  // batch or heads) or stored, inside the sequence only.
  __device__ __forceinline__ void put(int qc, int kr, float v) const {
    if (qc >= rows || kr >= keys) return;
    const int o = qc * out_q + kr * out_k;
    switch (op) {
      case DbiasOp::kAddF32: atomicAdd(reinterpret_cast<float*>(out) + o, v); break;
      case DbiasOp::kStoreF32: reinterpret_cast<float*>(out)[o] = v; break;
      case DbiasOp::kStoreF16: reinterpret_cast<half_t*>(out)[o] = to_half(v); break;
      case DbiasOp::kStoreBF16: reinterpret_cast<bfloat16_t*>(out)[o] = to_bf16(v); break;
      default: break;
    }
  }
  // One dBias element stored in dBias's dtype E (no axis summed), inside the sequence only.
  template <typename E>
  __device__ __forceinline__ void store(int qc, int kr, float v) const {
    if (qc >= rows || kr >= keys) return;
    reinterpret_cast<E*>(out)[qc * out_q + kr * out_k] = convert<E>(v);
  }
  // A partial sum (over keys, queries or both), or an element summed over batch or heads, added
  // at query qc, key kr (0 on summed axes).
  __device__ __forceinline__ void add(int qc, int kr, float v) const {
    if (qc >= rows || kr >= keys) return;
    atomicAdd(reinterpret_cast<float*>(out) + (qc * out_q + kr * out_k), v);
  }
};

// A warp's dBias of one step, as its element-wise pass produces the elements (bwd_pointwise's
// order: element e of [mt][nt] is key key0 + 16 mt + g + 8 (e / 2), query query0 + 8 nt + 2t +
// e % 2). Summed over keys, each lane keeps a sum per query it holds (q_part); over queries (or
// both), per key (k_part); flush reduces them across the lanes that share a query / key by
// shuffles and adds one value per query / key / warp. Otherwise each element leaves at once.
template <int kSMt, int kSNt>
struct StepDbias {
  float q_part[kSNt][2];
  float k_part[kSMt][2];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kSNt; ++i) q_part[i][0] = q_part[i][1] = 0.f;
#pragma unroll
    for (int i = 0; i < kSMt; ++i) k_part[i][0] = k_part[i][1] = 0.f;
  }
  // Element e of [mt][nt] at (query qc, key kr): v = dBias (0 outside the sequence and where P
  // is 0).
  __device__ __forceinline__ void take(const StepBias<true>& sb, int mt, int nt, int e, int qc,
                                       int kr, float v) {
    if (sb.sum_q)
      k_part[mt][e / 2] += v;
    else if (sb.sum_k)
      q_part[nt][e % 2] += v;
    else
      sb.put(qc, kr, v);
  }
  // Every lane of the warp calls it (shuffles), with its key0, query0, g, t.
  __device__ __forceinline__ void flush(const StepBias<true>& sb, int key0, int query0, int g,
                                        int t) {
    constexpr unsigned kAll = 0xffffffffu;
    if (sb.sum_q && sb.sum_k) {
      float v = 0.f;
#pragma unroll
      for (int mt = 0; mt < kSMt; ++mt) v += k_part[mt][0] + k_part[mt][1];
#pragma unroll
      for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(kAll, v, m);
      if (g == 0 && t == 0) sb.add(0, 0, v);
    } else if (sb.sum_q) {  // one sum per key: over the lanes of one g (t = 0..3)
#pragma unroll
      for (int mt = 0; mt < kSMt; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float v = k_part[mt][r];
          v += __shfl_xor_sync(kAll, v, 1);
          v += __shfl_xor_sync(kAll, v, 2);
          if (t == 0) sb.add(0, key0 + 16 * mt + g + 8 * r, v);
        }
    } else if (sb.sum_k) {  // one sum per query: over the lanes of one t (g = 0..7)
#pragma unroll
      for (int nt = 0; nt < kSNt; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float v = q_part[nt][c];
          v += __shfl_xor_sync(kAll, v, 4);
          v += __shfl_xor_sync(kAll, v, 8);
          v += __shfl_xor_sync(kAll, v, 16);
          if (g == 0) sb.add(query0 + 8 * nt + 2 * t + c, 0, v);
        }
    }
  }
};

// dBias's target cleared before the main kernel (BwdDbiasPlan): dbias itself (its dtype and
// strides) or the workspace's fp32 sums (contiguous, dbias's shape). Grid-stride over the
// elements; shape (n0, n1, n2, n3), strides in elements of esize bytes.
struct DbiasView {
  void* data;
  int esize;
  int64_t shape[4], stride[4];
  __device__ __forceinline__ int64_t offset(int64_t e) const {
    const int64_t j = e % shape[3], i = e / shape[3] % shape[2];
    const int64_t h = e / (shape[3] * shape[2]) % shape[1], b = e / (shape[3] * shape[2] * shape[1]);
    return b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3];
  }
  __host__ __device__ int64_t elems() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
};

// (Templates on the kernel's traits: each instantiation unit has its own copy.)
template <class T>
__global__ void __launch_bounds__(256) dbias_clear(DbiasView v) {
  const int64_t n = v.elems();
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = v.offset(e);
    if (v.esize == 4)
      static_cast<float*>(v.data)[o] = 0.f;
    else
      static_cast<uint16_t*>(v.data)[o] = 0;  // +0 in fp16 and bf16
  }
}

// The workspace's fp32 sums (contiguous, row-major) into dbias in its 16-bit dtype, rounded to
// nearest even as the CPU backend rounds (core/dtype.h).
template <class T>
__global__ void __launch_bounds__(256) dbias_convert(const float* sums, DbiasView v, int bf16) {
  const int64_t n = v.elems();
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = v.offset(e);
    if (bf16)
      static_cast<bfloat16_t*>(v.data)[o] = to_bf16(sums[e]);
    else
      static_cast<half_t*>(v.data)[o] = to_half(sums[e]);
  }
}

}  // namespace fa::cuda::sm80
