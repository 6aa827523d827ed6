// Host side of the Hopper-native forward (fwd_kernel.cuh): what it serves, the TMA maps, the
// shared-memory opt-in and the launch, for head dims 64 / 128 / 256 and fp16 / bf16 (fp8 e4m3
// inputs: fwd_fp8_sm90.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"
#include "cuda/fwd_sm90.h"
#include "cuda/kernels/sm90/fwd_host.h"
#include "cuda/kernels/sm90/fwd_kernel.cuh"

namespace fa::cuda {

bool sm90_host::built_for_sm90a() {
  static const bool built = [] {
    cudaFuncAttributes a{};
    const bool ok = cudaFuncGetAttributes(&a, sm90::fwd_kernel<sm90::FwdTraits<64, Bf16Tag>>) ==
                        cudaSuccess &&
                    a.binaryVersion >= 90;
    (void)cudaGetLastError();
    return ok;
  }();
  return built;
}

namespace {
using namespace sm90_host;

template <class T>
void launch(const Params& p, const Context& ctx, void* ws, size_t ws_bytes, cudaStream_t stream) {
  sm90::FwdMaps maps{};
  maps.pack_log2 = pack_log2(p, ctx);
  const int pack = 1 << maps.pack_log2;
  const MapExtents e = map_extents(p);
  if (!encode_row_tiles(p.q, e.batch, e.rows_q, p.heads_q, p.head_dim, T::kBlockM / pack, &maps.q, pack) ||
      !encode_row_tiles(p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim, T::kBlockN, &maps.k) ||
      !encode_row_tiles(p.v, e.batch, e.rows_k, p.heads_kv, p.head_dim, T::kBlockN, &maps.v))
    fail(FA_ERROR_UNSUPPORTED, "the sm90 forward's tensor maps could not be encoded for these views");
  // out's map for the TMA-store epilogue (boxes of one consumer warpgroup's rows), where the
  // kernel stages O and the view allows; else the kernel stores from registers.
  maps.o_tma = T::kQBuffers == 2 && ctx.tuning.sm90_fwd_tma_store &&
               encode_row_tiles(p.out, e.batch, e.rows_q, p.heads_q, p.head_dim, T::kWgRows / pack,
                                &maps.o, pack);
  static std::atomic<uint64_t> opted_in{0};
  cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(sm90::fwd_kernel<T>), T::kSmemBytes,
                                p.device.index, opted_in);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "cudaFuncSetAttribute(fwd sm90 d", T::kHeadDim, "): ", cudaGetErrorString(err));
  // Work tiles (tile_plan.h): one block each, or persistent blocks (one an SM) taking them.
  const int64_t tiles = work_tiles(p, maps.pack_log2, T::kBlockM);
  const Launch mode = launch_mode(p, ctx, ws != nullptr && ws_bytes >= sizeof(int));
  const int64_t blocks = mode == Launch::kPerTile ? tiles : std::min<int64_t>(tiles, ctx.device.sms);
  if (mode == Launch::kDynamic) {
    maps.tile_counter = static_cast<int*>(ws);
    err = cudaMemsetAsync(ws, 0, sizeof(int), stream);
    if (err != cudaSuccess)
      fail(FA_ERROR_CUDA, "cudaMemsetAsync(sm90 tile counter): ", cudaGetErrorString(err));
  }
  sm90::fwd_kernel<T><<<unsigned(blocks), T::kThreads, T::kSmemBytes, stream>>>(p, maps);
  err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "forward kernel (sm90, d", T::kHeadDim, ") launch: ", cudaGetErrorString(err));
}

// The call's launch arguments beyond Params and Context.
struct Where {
  void* ws;
  size_t bytes;
  cudaStream_t stream;
};

template <typename Tag, sm90::Schedule kSchedule, bool kDropout = false>
void run_schedule(const Params& p, const Context& ctx, const Where& w) {
  switch (sm90_kernel_head_dim(p.head_dim)) {
    case 64:
      if (sm90::d64_consumers(ctx.tuning.sm90_fwd_d64_consumers, p.seqlen_q, p.seqlen_k) == 3)
        return launch<sm90::FwdTraits<64, Tag, kSchedule, kDropout, 3>>(p, ctx, w.ws, w.bytes, w.stream);
      return launch<sm90::FwdTraits<64, Tag, kSchedule, kDropout>>(p, ctx, w.ws, w.bytes, w.stream);
    case 128: return launch<sm90::FwdTraits<128, Tag, kSchedule, kDropout>>(p, ctx, w.ws, w.bytes, w.stream);
    default: return launch<sm90::FwdTraits<256, Tag, kSchedule, kDropout>>(p, ctx, w.ws, w.bytes, w.stream);
  }
}

// Dropout runs the ping-pong kernels whatever the schedule knob says (the ablation's other
// schedules are not instantiated with it).
template <typename Tag>
void run(const Params& p, const Context& ctx, const Where& w) {
  if (p.dropout_p > 0.f) return run_schedule<Tag, sm90::Schedule::kPingPong, true>(p, ctx, w);
  switch (ctx.tuning.sm90_fwd_schedule) {
    case 0: return run_schedule<Tag, sm90::Schedule::kSerial>(p, ctx, w);
    case 1: return run_schedule<Tag, sm90::Schedule::kOverlap>(p, ctx, w);
    default: return run_schedule<Tag, sm90::Schedule::kPingPong>(p, ctx, w);
  }
}

}  // namespace

std::string sm90_fwd_refusal(const Params& p, const Context& ctx) {
  if (!ctx.tuning.sm90_fwd) return "off (Tuning::sm90_fwd)";
  if (ctx.device.major != 9) return "needs an sm90 device";  // (the registry row checks both first)
  if (!built_for_sm90a()) return "this build has no sm_90a code (FA_ARCHS)";
  if (p.dtype == DType::E4M3) return sm90_fp8_fwd_refusal(p, ctx);  // fwd_fp8_sm90.cu
  if (p.dtype != DType::BF16 && p.dtype != DType::F16) return "fp16 / bf16 only";
  if (p.out.dtype == DType::F32) return "out.dtype=fp32 (cuda-sm80 writes it)";
  if (p.q_shift != 0) return "q_shift not yet";
  if (p.head_dim % 8 != 0 || sm90_kernel_head_dim(p.head_dim) == 0) return "head_dim";
  if (const char* why = size_refusal(p, ctx)) return why;
  // Q, K and V arrive by TMA: views it cannot map (a broadcast stride 0, a stride or address
  // that is not a multiple of 16 bytes) go to the sm80 family.
  const MapExtents e = map_extents(p);
  if (!row_tiles_encodable(p.q, e.batch, e.rows_q, p.heads_q, p.head_dim))
    return "q's strides or address (TMA)";
  if (!row_tiles_encodable(p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim))
    return "k's strides or address (TMA)";
  if (!row_tiles_encodable(p.v, e.batch, e.rows_k, p.heads_kv, p.head_dim))
    return "v's strides or address (TMA)";
  return "";
}

size_t sm90_forward_workspace(const Params& p, const Context& ctx) {
  if (p.dtype == DType::E4M3) return sm90_fp8_forward_workspace(p, ctx);
  // The dynamic scheduler's counter (16 bytes keep the workspace's alignment).
  return launch_mode(p, ctx, true) == Launch::kDynamic ? 16 : 0;
}

void sm90_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes, void* stream) {
  if (p.dtype == DType::E4M3) return sm90_fp8_forward(p, ctx, workspace, bytes, stream);
  DeviceGuard guard(p.device.index);
  const Where w{workspace, bytes, static_cast<cudaStream_t>(stream)};
  if (p.dtype == DType::BF16)
    run<Bf16Tag>(p, ctx, w);
  else
    run<Fp16Tag>(p, ctx, w);
}

}  // namespace fa::cuda
