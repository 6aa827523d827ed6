// Host side of the Hopper-native backward (bwd_kernel.cuh): what it serves, the workspace (the
// sm80 backward's layout, no split tail), the TMA maps and three launches on the caller's
// stream: the sm80 family's preprocess, the sm90 main kernel, the sm80 family's postprocess
// (reading the accumulator in the main kernel's tile order, BwdTraits::DqLayout).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/bwd_sm80.h"  // bwd_layout, bwd_rows
#include "cuda/bwd_sm90.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"
#include "cuda/kernels/sm80/bwd_prepost.cuh"
#include "cuda/kernels/sm90/bwd_kernel.cuh"

namespace fa::cuda {
namespace {

bool built_for_sm90a() {
  static const bool built = [] {
    cudaFuncAttributes a{};
    const bool ok =
        cudaFuncGetAttributes(&a, sm90::bwd_kernel<sm90::BwdTraits<64, Bf16Tag>>) == cudaSuccess &&
        a.binaryVersion >= 90;
    (void)cudaGetLastError();
    return ok;
  }();
  return built;
}

// The layout the shared pre- and postprocess know (bwd_sm80.h), without the split tail: its
// counters and partial sums are empty; its semaphores are the deterministic mode's.
sm80::BwdLayout layout(const Params& p, int kernel_d) {
  return sm80::bwd_layout(p, kernel_d, sm80::BwdTail{});
}

// The batch and rows of the maps: a packed batch is one entry of its total rows (the kernel adds
// each sequence's start).
struct MapExtents {
  int64_t batch, rows_q, rows_k;
};
MapExtents map_extents(const Params& p) {
  if (p.varlen()) return {1, p.total_q, p.total_k};
  return {p.batch, p.seqlen_q, p.seqlen_k};
}

template <class T>
void launch(const Params& p, const Context& ctx, void* workspace, cudaStream_t stream) {
  (void)ctx;
  constexpr int kD = T::kHeadDim;
  const sm80::BwdLayout l = layout(p, kD);
  sm80::BwdWorkspace ws{};
  ws.rows = int64_t(sm80::bwd_rows(p));
  ws.m_blocks = int(l.m_blocks);
  ws.tma = 0;
  ws.dq_acc = static_cast<float*>(workspace);
  ws.tail_cnt = reinterpret_cast<int*>(ws.dq_acc + l.dq_acc_elems);  // (no split tail: empty)
  ws.sem = ws.tail_cnt + l.tail_cnt_elems;
  ws.dsum = reinterpret_cast<float*>(ws.sem + l.sem_elems);
  ws.lse2 = ws.dsum + l.dsum_elems;
  ws.tail_part = nullptr;
  ws.tail_dp = ws.tail_units = 0;
  ws.tail_steps = ws.tail_ctas = 0;

  sm90::BwdMaps maps{};
  const MapExtents e = map_extents(p);
  if (!encode_row_tiles(p.q, e.batch, e.rows_q, p.heads_q, p.head_dim, T::kBlockM, &maps.q) ||
      !encode_row_tiles(p.dout, e.batch, e.rows_q, p.heads_q, p.head_dim, T::kBlockM, &maps.dout) ||
      !encode_row_tiles(p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim, T::kBlockN, &maps.k) ||
      !encode_row_tiles(p.v, e.batch, e.rows_k, p.heads_kv, p.head_dim, T::kBlockN, &maps.v))
    fail(FA_ERROR_UNSUPPORTED, "the sm90 backward's tensor maps could not be encoded for these views");

  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      fail(FA_ERROR_CUDA, what, " (sm90 backward, d", T::kHeadDim, "): ", cudaGetErrorString(e));
  };
  auto rows_grid = [&p](int rows_per_block, int64_t rows) {
    return dim3(unsigned((rows + rows_per_block - 1) / rows_per_block), unsigned(p.heads_q),
                unsigned(p.batch));
  };
  if (p.deterministic)  // the turns' semaphores (bwd_kernel.cuh)
    check(cudaMemsetAsync(ws.sem, 0, l.sem_elems * sizeof(int), stream), "clearing the semaphores");
  // Scale · D, LSE · log2 e, the accumulator cleared (whole 128-row tiles a sequence: more than
  // the main kernel's 64-row tiles add into).
  sm80::bwd_preprocess<typename T::Tag, kD>
      <<<rows_grid(sm80::kPreRows<kD>, sm80::bwd_clear_rows(p.seqlen_q)), 32 * sm80::kRowWarps, 0,
         stream>>>(p, ws);
  check(cudaGetLastError(), "preprocess launch");
  static std::atomic<uint64_t> opted_in{0};
  check(opt_in_smem(reinterpret_cast<const void*>(sm90::bwd_kernel<T>), T::kSmemBytes,
                    p.device.index, opted_in),
        "cudaFuncSetAttribute");
  const dim3 grid(unsigned((p.seqlen_k + T::kBlockN - 1) / T::kBlockN), unsigned(p.heads_kv),
                  unsigned(p.batch));
  sm90::bwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, maps, ws);
  check(cudaGetLastError(), "main kernel launch");
  sm80::bwd_postprocess<T>
      <<<rows_grid(sm80::kPostRows<kD>, p.seqlen_q), 32 * sm80::kRowWarps, 0, stream>>>(p, ws);
  check(cudaGetLastError(), "postprocess launch");
}

// The kernel of the call's head dim, with or without the logit transform (softcap or ALiBi:
// BwdTraits::kTransform) and dropout (BwdTraits::kDropout).
template <typename Tag, bool kTransform, bool kDropout>
void run_dim(const Params& p, const Context& ctx, void* ws, cudaStream_t stream) {
  if (p.head_dim == 64)
    return launch<sm90::BwdTraits<64, Tag, kTransform, kDropout>>(p, ctx, ws, stream);
  return launch<sm90::BwdTraits<128, Tag, kTransform, kDropout>>(p, ctx, ws, stream);
}

template <typename Tag>
void run(const Params& p, const Context& ctx, void* ws, cudaStream_t stream) {
  const bool transform = p.softcap > 0.f || p.alibi_slopes != nullptr, dropout = p.dropout_p > 0.f;
  if (transform)
    return dropout ? run_dim<Tag, true, true>(p, ctx, ws, stream)
                   : run_dim<Tag, true, false>(p, ctx, ws, stream);
  return dropout ? run_dim<Tag, false, true>(p, ctx, ws, stream)
                 : run_dim<Tag, false, false>(p, ctx, ws, stream);
}

}  // namespace

std::string sm90_bwd_refusal(const Params& p, const Context& ctx) {
  if (ctx.tuning.sm90_bwd == 0) return "off (Tuning::sm90_bwd)";
  if (ctx.device.major != 9) return "needs an sm90 device";  // (the registry row checks both first)
  if (!built_for_sm90a()) return "this build has no sm_90a code (FA_ARCHS)";
  if (p.dtype != DType::BF16 && p.dtype != DType::F16) return "fp16 / bf16 only";
  if (p.dq.dtype == DType::F32 || p.dk.dtype == DType::F32) return "fp32 dq / dk / dv";
  if (p.head_dim != 64 && p.head_dim != 128)
    return "backward head_dim " + std::to_string(p.head_dim) + " (64 and 128 only, first version)";
  // The default (2): where it measured faster than cuda-sm80 (core/tuning.h).
  if (ctx.tuning.sm90_bwd == 2 && p.head_dim != 128)
    return "head_dim " + std::to_string(p.head_dim) + ": cuda-sm80 is faster (Tuning::sm90_bwd 2)";
  if (ctx.tuning.sm90_bwd == 2 && p.deterministic)
    return "deterministic: cuda-sm80's mode is cheaper (Tuning::sm90_bwd 2)";
  if (p.deterministic && !FA_TUNING_SM90_BWD_DQ_BULK)
    return "deterministic backward with FA_TUNING_SM90_BWD_DQ_BULK=0";
  if (p.q_shift != 0) return "q_shift not yet";
  if (p.bias.kind != Params::Bias::Kind::None) return "attention bias not yet";
  const MapExtents e = map_extents(p);  // the kernel's row coordinates are int32
  if (e.rows_q > (int64_t(1) << 30) || e.rows_k > (int64_t(1) << 30)) return "rows > 2^30";
  if (p.heads_kv > 65535) return "heads_kv > 65535 (grid)";
  // Q, dO, K and V arrive by TMA: views it cannot map go to the sm80 family.
  if (!row_tiles_encodable(p.q, e.batch, e.rows_q, p.heads_q, p.head_dim))
    return "q's strides or address (TMA)";
  if (!row_tiles_encodable(p.dout, e.batch, e.rows_q, p.heads_q, p.head_dim))
    return "dout's strides or address (TMA)";
  if (!row_tiles_encodable(p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim))
    return "k's strides or address (TMA)";
  if (!row_tiles_encodable(p.v, e.batch, e.rows_k, p.heads_kv, p.head_dim))
    return "v's strides or address (TMA)";
  return "";
}

size_t sm90_backward_workspace(const Params& p, const Context& ctx) {
  (void)ctx;
  return layout(p, p.head_dim <= 64 ? 64 : 128).bytes();
}

void sm90_backward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                   void* stream) {
  DeviceGuard guard(p.device.index);
  if (workspace == nullptr || bytes < sm90_backward_workspace(p, ctx))
    fail(FA_ERROR_INTERNAL, "sm90 backward workspace of ", bytes, " bytes is below its size ",
         sm90_backward_workspace(p, ctx));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::BF16)
    run<Bf16Tag>(p, ctx, workspace, s);
  else
    run<Fp16Tag>(p, ctx, workspace, s);
}

}  // namespace fa::cuda
