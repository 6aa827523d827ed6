// Host side of the sm80 backward (bwd_kernel.cuh): the workspace split, the dQ accumulator and
// semaphores cleared, three launches on the caller's stream. Included only by the generated
// instantiation files (src/cuda/instantiations/bwd_sm80_*), one (dtype, head_dim) each.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "core/error.h"
#include "cuda/bwd_sm80.h"
#include "cuda/device_props.h"
#include "cuda/kernels/sm80/bwd_kernel.cuh"
#include "cuda/kernels/varlen/sanitize.h"
#include "cuda/tensor_map.h"

namespace fa::cuda::sm80 {

// The main kernel of traits T. On sm90 (where T::kTmaQdo) Q and dO arrive by TMA, through tensor
// maps encoded here for T's query tile (two driver calls on the host, no GPU work); where the
// driver refuses a map, by cp.async as on the sm80 family.
// dbias: the bias kernels' dBias target (the others ignore it).
template <class T>
void launch_bwd_kernel(const Params& p, const Context& ctx, const BwdWorkspace& ws_in,
                       const BwdDbias& dbias, cudaStream_t stream) {
  BwdWorkspace ws = ws_in;
  QdoMaps maps{};
  ws.tma = 0;
  if (T::kTmaQdo && ctx.device.major >= 9) {
    const int64_t batch = p.varlen() ? 1 : p.batch;
    const int64_t rows = p.varlen() ? p.total_q : p.seqlen_q;
    ws.tma = encode_row_tiles(p.q, batch, rows, p.heads_q, p.head_dim, T::kBlockM, &maps.q) &&
             encode_row_tiles(p.dout, batch, rows, p.heads_q, p.head_dim, T::kBlockM, &maps.dout);
  }
  // One block per whole key tile, x fastest (key tile, kv head, batch), then the split tail's
  // (bwd_sm80.h, BwdTail, which chose the same tile sizes).
  const int64_t tiles = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN * p.heads_kv * p.batch;
  if (ws.tail_ctas == 0) {
    ws.tail_dp = tiles;
  } else if (ws.tail_dp + ws.tail_units / ws.tail_steps != tiles ||
             ws.tail_steps != (p.seqlen_q + T::kBlockM - 1) / T::kBlockM * p.group()) {
    fail(FA_ERROR_INTERNAL, "sm80 backward d", T::kHeadDim, ": the split tail's plan (",
         ws.tail_dp, " + ", ws.tail_units / ws.tail_steps, " tiles of ", ws.tail_steps,
         " steps) does not match the kernel's tiles (", tiles, ")");
  }
  // The whole tiles, then the tail. The launches run in order on the stream: the tail kernel
  // starts once every whole-tile block has finished (a partial last wave would have started
  // block by block as SMs freed up). The first of them follows the preprocess as its
  // programmatic dependent where bwd_pdl says so (bwd_block waits for the preprocess's grid
  // after its K / V copies).
  bool dependent = bwd_pdl(ctx);
  auto launch = [&](auto kernel, std::atomic<uint64_t>& opted_in, dim3 blocks,
                    const char* what) {
    cudaError_t e = opt_in_smem(reinterpret_cast<const void*>(kernel), T::kSmemBytes,
                                p.device.index, opted_in);
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, "cudaFuncSetAttribute (sm80 backward ", what, ", d", T::kHeadDim,
           "): ", cudaGetErrorString(e));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = blocks;
    cfg.blockDim = dim3(T::kThreads);
    cfg.dynamicSmemBytes = T::kSmemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = dependent ? 1 : 0;
    dependent = false;
    BwdDbiasArg<T> dbias_arg{};
    if constexpr (T::kBias) dbias_arg = dbias;
    e = cudaLaunchKernelEx(&cfg, kernel, p, ws, maps, dbias_arg);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, what, " launch (sm80 backward, d", T::kHeadDim,
           "): ", cudaGetErrorString(e));
  };
  static std::atomic<uint64_t> opted_in{0}, opted_in_tail{0};  // once per device
  if (ws.tail_dp > 0)
    launch(bwd_kernel<T, false>, opted_in,
           dim3(unsigned((p.seqlen_k + T::kBlockN - 1) / T::kBlockN), unsigned(p.heads_kv),
                unsigned(p.batch)),
           "main kernel");
  if constexpr (!T::kDropout && !T::kBias) {  // (bwd_tail plans no tail for these)
    if (ws.tail_ctas > 0)
      launch(bwd_kernel<T, true>, opted_in_tail, dim3(unsigned(ws.tail_ctas)), "tail kernel");
  }
}

// The main kernel with or without dropout, with or without the bias (T: the 64-query traits;
// each explicitly instantiated in its own file), in its 128-query form where bwd_wide says so,
// in its compact one where bwd_compact does.
template <class T>
void launch_bwd_main(const Params& p, const Context& ctx, const BwdWorkspace& ws,
                     const BwdDbias& dbias, int smem_optin, cudaStream_t stream) {
  if constexpr (T::kHeadDim <= 64 && !T::kDropout && !T::kBias) {
    if (bwd_wide(p, T::kHeadDim, smem_optin)) {
      launch_bwd_kernel<BwdTraits<T::kHeadDim, typename T::Tag, T::kDropout, kBwdWideBlockM>>(
          p, ctx, ws, dbias, stream);
      return;
    }
  }
  if constexpr (T::kHeadDim > 64) {  // d <= 64 fits every sm80-family part
    if (bwd_compact(T::kHeadDim, smem_optin)) {
      launch_bwd_kernel<
          BwdTraits<T::kHeadDim, typename T::Tag, T::kDropout, kBwdBlockM, true, T::kBias>>(
          p, ctx, ws, dbias, stream);
      return;
    }
  }
  launch_bwd_kernel<T>(p, ctx, ws, dbias, stream);
}

// dBias's target (BwdDbiasPlan): dbias itself, or the fp32 sums at sums (a 16-bit dbias summed
// over an axis). None when not asked.
inline BwdDbias bwd_dbias_target(const Params& p, const BwdDbiasPlan& plan, float* sums) {
  BwdDbias d{};
  d.op = DbiasOp::kNone;
  if (p.bias.grad == nullptr) return d;
  const Params::Bias& g = p.bias;
  if (plan.any_sum) {
    d.op = DbiasOp::kAddF32;
    d.out = plan.ws_elems ? static_cast<void*>(sums) : g.grad;
  } else {
    d.op = g.grad_dtype == DType::F32    ? DbiasOp::kStoreF32
           : g.grad_dtype == DType::F16 ? DbiasOp::kStoreF16
                                        : DbiasOp::kStoreBF16;
    d.out = g.grad;
  }
  bwd_dbias_strides(p, plan, d.stride);
  d.sum_q = plan.sum[2];
  d.sum_k = plan.sum[3];
  return d;
}

// dbias (or the fp32 sums) as a strided view for the clear / conversion kernels.
inline DbiasView dbias_view(const Params& p, void* data, bool sums) {
  DbiasView v{};
  v.data = data;
  v.esize = sums || p.bias.grad_dtype == DType::F32 ? 4 : 2;
  int64_t contiguous = 1;
  for (int i = 3; i >= 0; --i) {
    v.shape[i] = p.bias.grad_shape[i];
    v.stride[i] = sums ? contiguous : p.bias.grad_stride[i];
    contiguous *= v.shape[i];
  }
  return v;
}
inline dim3 dbias_grid(const DbiasView& v) {
  const int64_t blocks = (v.elems() + 255) / 256;
  return dim3(unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096));
}

template <int kHeadDim, typename Tag>
void run_bwd(const Params& caller, const Context& ctx, void* workspace, cudaStream_t stream) {
  using T = BwdTraits<kHeadDim, Tag>;
  // (The traits' shared memory is bwd_smem_bytes by definition: bwd_traits.h.)
  static_assert(T::kBlockM == kBwdBlockM && T::kBlockN == bwd_block_n(kHeadDim) &&
                    BwdTraits<kHeadDim, Tag, false, kBwdBlockM, true>::kBlockN ==
                        kBwdCompactBlockN,
                "bwd_sm80.h's configuration figures follow the traits");
  const int smem_optin = bwd_smem_optin(ctx);
  const BwdTail tail = bwd_tail(caller, ctx, kHeadDim);
  const BwdLayout layout = bwd_layout(caller, kHeadDim, tail);
  // A packed batch's kernels index by safe copies of its cu_seqlens (seq_unclamped), made first
  // on the stream at the workspace's end: the caller's device arrays may hold anything.
  Params p = caller;
  if (p.varlen()) {
    int32_t* cu = static_cast<int32_t*>(workspace) + (layout.bytes() / 4 - layout.cu_elems);
    sanitize_cu_seqlens(caller, cu, cu + (p.batch + 1), stream);
    p.cu_seqlens_q = cu;
    p.cu_seqlens_k = cu + (p.batch + 1);
  }
  BwdWorkspace ws;
  ws.rows = int64_t(bwd_rows(p));
  ws.m_blocks = int(layout.m_blocks);
  ws.tma = 0;  // launch_bwd_kernel decides
  ws.dq_acc = static_cast<float*>(workspace);
  ws.tail_cnt = reinterpret_cast<int*>(ws.dq_acc + layout.dq_acc_elems);
  ws.tail_dp = tail.dp_tiles;
  ws.tail_units = tail.units;
  ws.tail_steps = tail.steps;
  ws.tail_ctas = tail.ctas;
  ws.sem = reinterpret_cast<int*>(ws.tail_cnt + layout.tail_cnt_elems);
  ws.dsum = reinterpret_cast<float*>(ws.sem + layout.sem_elems);
  ws.lse2 = ws.dsum + layout.dsum_elems;
  ws.tail_part = ws.lse2 + layout.lse2_elems + layout.pad_elems;
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, what, " (sm80 backward, d", kHeadDim, "): ", cudaGetErrorString(e));
  };
  // The preprocess clears the dQ accumulator; the tail's step counters and the semaphores
  // (adjacent, after it) are cleared here when used (the semaphores in deterministic mode only).
  const size_t small_elems = layout.tail_cnt_elems + (p.deterministic ? layout.sem_elems : 0);
  if (small_elems > 0)
    check(cudaMemsetAsync(ws.tail_cnt, 0, small_elems * 4, stream),
          "clearing the tail counters and semaphores");
  auto rows_grid = [&p](int rows_per_block, int64_t rows) {
    return dim3(unsigned((rows + rows_per_block - 1) / rows_per_block), unsigned(p.heads_q),
                unsigned(p.batch));
  };
  // dBias's target cleared (bwd_dbias.cuh); before the preprocess, so that the main kernel
  // stays its programmatic dependent.
  const BwdDbiasPlan dplan = bwd_dbias_plan(p);
  float* dbias_sums = ws.tail_part + layout.tail_part_elems;  // (layout.dbias_elems of them)
  const BwdDbias dbias = bwd_dbias_target(p, dplan, dbias_sums);
  if (dbias.op != DbiasOp::kNone) {
    const DbiasView target = dbias_view(p, dbias.out, dplan.ws_elems > 0);
    dbias_clear<T><<<dbias_grid(target), 256, 0, stream>>>(target);
    check(cudaGetLastError(), "dbias clear launch");
  }
  bwd_preprocess<Tag, kHeadDim>
      <<<rows_grid(kPreRows<kHeadDim>, bwd_clear_rows(p.seqlen_q)), 32 * kRowWarps, 0, stream>>>(
          p, ws);
  check(cudaGetLastError(), "preprocess launch");
  const bool dropout = p.dropout_p > 0.f;
  if (p.bias.kind != Params::Bias::Kind::None) {
    if (dropout)
      launch_bwd_main<BwdTraits<kHeadDim, Tag, true, kBwdBlockM, false, true>>(p, ctx, ws, dbias,
                                                                              smem_optin, stream);
    else
      launch_bwd_main<BwdTraits<kHeadDim, Tag, false, kBwdBlockM, false, true>>(
          p, ctx, ws, dbias, smem_optin, stream);
  } else if (dropout) {
    launch_bwd_main<BwdTraits<kHeadDim, Tag, true>>(p, ctx, ws, dbias, smem_optin, stream);
  } else {
    launch_bwd_main<T>(p, ctx, ws, dbias, smem_optin, stream);
  }
  if (dplan.ws_elems > 0) {  // the fp32 sums into the 16-bit dbias
    const DbiasView out = dbias_view(p, p.bias.grad, false);
    dbias_convert<T><<<dbias_grid(out), 256, 0, stream>>>(
        dbias_sums, out, p.bias.grad_dtype == DType::BF16 ? 1 : 0);
    check(cudaGetLastError(), "dbias conversion launch");
  }
  // The postprocess reads the accumulator in the main kernel's tile order (its kBlockM); the
  // 128-query form exists only at d <= 64.
  bool wide = false;
  if constexpr (kHeadDim <= 64) {
    wide = bwd_wide(p, kHeadDim, smem_optin);
    if (wide)
      bwd_postprocess<BwdTraits<kHeadDim, Tag, false, kBwdWideBlockM>>
          <<<rows_grid(kPostRows<kHeadDim>, p.seqlen_q), 32 * kRowWarps, 0, stream>>>(p, ws);
  }
  if (!wide)
    bwd_postprocess<T>
        <<<rows_grid(kPostRows<kHeadDim>, p.seqlen_q), 32 * kRowWarps, 0, stream>>>(p, ws);
  check(cudaGetLastError(), "postprocess launch");
}

}  // namespace fa::cuda::sm80
