// Host side of the sm90 forward for fp8 e4m3 inputs (fwd_kernel.cuh with FwdTraits::kFp8, issue
// 30): what it serves, the Vᵀ pre-pass (fp8_v_layout.h) and its workspace, the maps and the
// launch. Head dims 64, 128, 256 (and the multiples of 16 below each), output fp16 or bf16, the
// ping-pong schedule only (Tuning::sm90_fwd_schedule is the 16-bit kernels' ablation).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/device_guard.h"
#include "cuda/device_props.h"
#include "cuda/fwd_sm90.h"
#include "cuda/kernels/sm90/fp8_v_layout.h"
#include "cuda/kernels/sm90/fwd_host.h"
#include "cuda/kernels/sm90/fwd_kernel.cuh"
#include "cuda/workspace_align.h"

namespace fa::cuda {
namespace {
using namespace sm90_host;

constexpr int kVtThreads = 256;

// The Vᵀ pre-pass: block (key tile, kv head, batch entry) stages the tile's keys (rows of
// head_dim bytes, zeros past len_k and head_dim) in shared memory and writes its Vᵀ block:
// row r (a head-dim index), position a holds key fp8_key_at(a) (fp8_v_layout.h). kD: the kernel
// head dim.
template <int kD>
__global__ void __launch_bounds__(kVtThreads)
    vt_kernel(const __grid_constant__ Params p, const __grid_constant__ sm90::Fp8VLayout vt) {
  constexpr int kN = sm90::fp8_block_n(kD);
  // A staged key's bytes: kD + 4 spreads the keys a warp gathers (16 apart) over two banks' worth
  // of words, 4-way conflicts where kD + 16 had 8; the rows are then 4-byte aligned (staged as
  // words). The gathers are a few microseconds against the copy's tens.
  constexpr int kPitch = kD + 4;
  __shared__ __align__(16) unsigned char keys[kN * kPitch];
  const int tile = int(blockIdx.x), hk = int(blockIdx.y), b = int(blockIdx.z);
  const SeqInfo sq = p.seq(b);
  const int64_t key0 = int64_t(tile) * kN;
  if (key0 >= sq.len_k) return;  // past this entry's keys (packed batches): no block
  const int d = int(p.head_dim);
  for (int i = int(threadIdx.x); i < kN * (kD / 16); i += kVtThreads) {
    const int r = i / (kD / 16), c = i % (kD / 16);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (key0 + r < sq.len_k && 16 * c < d)
      v = *reinterpret_cast<const uint4*>(
          p.v.at<unsigned char>(b, sq.k_start + key0 + r, hk) + 16 * c);
    uint32_t* row = reinterpret_cast<uint32_t*>(&keys[r * kPitch + 16 * c]);
    row[0] = v.x, row[1] = v.y, row[2] = v.z, row[3] = v.w;
  }
  __syncthreads();
  unsigned char* out = vt.block(b, hk, sq.k_start, tile);
  for (int i = int(threadIdx.x); i < kD * (kN / 16); i += kVtThreads) {
    const int r = i / (kN / 16), a0 = 16 * (i % (kN / 16));  // row r, positions a0 .. a0 + 15
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      w[q] = 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        w[q] |= uint32_t(keys[sm90::fp8_key_at(a0 + 4 * q + e) * kPitch + r]) << (8 * e);
    }
    *reinterpret_cast<uint4*>(out + sm90::fp8_vt_offset(r, a0, kN)) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The workspace: the dynamic scheduler's counter (where the launch takes it), then the Vᵀ blocks
// of every kv head.
struct Fp8Workspace {
  size_t vt_offset, bytes;
  sm90::Fp8VLayout vt;  // data unset
};
Fp8Workspace fp8_workspace(const Params& p, int kernel_d) {
  Fp8Workspace w{};
  const int n = sm90::fp8_block_n(kernel_d);
  w.vt.packed = p.varlen();
  w.vt.blocks_per_head = sm90::fp8_vt_blocks_per_head(w.vt.packed, p.batch, p.seqlen_k, p.total_k, n);
  w.vt.tiles_per_seq = int((p.seqlen_k + n - 1) / n);
  w.vt.block_n = n;
  w.vt.block_bytes = kernel_d * n;
  w.vt_offset = kWorkspaceAlign;  // (the counter's 16 bytes, aligned)
  w.bytes = w.vt_offset + size_t(p.heads_kv) * size_t(w.vt.blocks_per_head) * size_t(w.vt.block_bytes);
  return w;
}

template <int kD, typename OutTag>
void launch(const Params& p, const Context& ctx, void* ws, size_t ws_bytes, cudaStream_t stream) {
  using T = sm90::FwdTraits<kD, OutTag, sm90::Schedule::kPingPong, false, 2, true>;
  const Fp8Workspace w = fp8_workspace(p, kD);
  if (ws == nullptr || ws_bytes < w.bytes || reinterpret_cast<uintptr_t>(ws) % 16 != 0)
    fail(FA_ERROR_INTERNAL, "the sm90 fp8 forward's workspace of ", ws_bytes, " bytes is below its ",
         w.bytes, " (or not 16-byte aligned)");
  sm90::FwdMaps maps{};
  maps.pack_log2 = pack_log2(p, ctx);
  const int pack = 1 << maps.pack_log2;
  const MapExtents e = map_extents(p);
  if (!encode_row_tiles(p.q, e.batch, e.rows_q, p.heads_q, p.head_dim, T::kBlockM / pack, &maps.q, pack) ||
      !encode_row_tiles(p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim, T::kBlockN, &maps.k))
    fail(FA_ERROR_UNSUPPORTED, "the sm90 fp8 forward's tensor maps could not be encoded for these views");
  maps.o_tma = 0;  // O is stored from the registers (an fp8 Q buffer is half O's size)
  maps.vt = w.vt;
  maps.vt.data = static_cast<unsigned char*>(ws) + w.vt_offset;
  if (p.seqlen_k > 0) {
    const dim3 grid(unsigned(w.vt.tiles_per_seq), unsigned(p.heads_kv), unsigned(p.batch));
    vt_kernel<kD><<<grid, kVtThreads, 0, stream>>>(p, maps.vt);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
      fail(FA_ERROR_CUDA, "fp8 V transpose (sm90, d", kD, ") launch: ", cudaGetErrorString(err));
  }
  static std::atomic<uint64_t> opted_in{0};
  cudaError_t err = opt_in_smem(reinterpret_cast<const void*>(sm90::fwd_kernel<T>), T::kSmemBytes,
                                p.device.index, opted_in);
  if (err != cudaSuccess)
    fail(FA_ERROR_CUDA, "cudaFuncSetAttribute(fwd sm90 fp8 d", kD, "): ", cudaGetErrorString(err));
  const int64_t tiles = work_tiles(p, maps.pack_log2, T::kBlockM);
  const Launch mode = launch_mode(p, ctx, true);
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
    fail(FA_ERROR_CUDA, "forward kernel (sm90 fp8, d", kD, ") launch: ", cudaGetErrorString(err));
}

template <typename OutTag>
void run(const Params& p, const Context& ctx, void* ws, size_t bytes, cudaStream_t stream) {
  switch (sm90_kernel_head_dim(p.head_dim)) {
    case 64: return launch<64, OutTag>(p, ctx, ws, bytes, stream);
    case 128: return launch<128, OutTag>(p, ctx, ws, bytes, stream);
    default: return launch<256, OutTag>(p, ctx, ws, bytes, stream);
  }
}

}  // namespace

// (sm90_fwd_refusal has checked the knob, the device and the build.)
std::string sm90_fp8_fwd_refusal(const Params& p, const Context& ctx) {
  if (p.out.dtype != DType::BF16 && p.out.dtype != DType::F16) return "fp8: out must be fp16 or bf16";
  if (p.dropout_p > 0.f) return "fp8 with dropout";
  if (p.q_shift != 0) return "fp8 with q_shift";
  if (p.head_dim % 16 != 0 || sm90_kernel_head_dim(p.head_dim) == 0)
    return "fp8: head_dim must be a multiple of 16 up to 256";
  if (const char* why = size_refusal(p, ctx)) return why;
  // Q and K arrive by TMA (V through the pre-pass's 16-byte loads: check_forward's alignment).
  const MapExtents e = map_extents(p);
  if (!row_tiles_encodable(p.q, e.batch, e.rows_q, p.heads_q, p.head_dim))
    return "fp8: q's strides or address (TMA: positive multiples of 16 bytes)";
  if (!row_tiles_encodable(p.k, e.batch, e.rows_k, p.heads_kv, p.head_dim))
    return "fp8: k's strides or address (TMA: positive multiples of 16 bytes)";
  return "";
}

size_t sm90_fp8_forward_workspace(const Params& p, const Context& ctx) {
  (void)ctx;
  return fp8_workspace(p, sm90_kernel_head_dim(p.head_dim)).bytes;
}

void sm90_fp8_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                      void* stream) {
  DeviceGuard guard(p.device.index);
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.out.dtype == DType::BF16)
    run<Bf16Tag>(p, ctx, workspace, bytes, s);
  else
    run<Fp16Tag>(p, ctx, workspace, bytes, s);
}

}  // namespace fa::cuda
