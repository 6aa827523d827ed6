// The cuda-kvcache family's warp-specialised attention kernel (sm90; Tuning::kvcache_ws, off by
// default), the same block and arithmetic as kvcache_kernel.cuh's kv_fwd_kernel with its loads
// taken off the arithmetic's warps.
//
// One producer warp streams the block's 32-key tiles through a ring of ws_stages(d) stages (6 at
// d 128, 96 KB; two blocks an SM to d 160, one above) with cp.async, each stage's copies
// completing on its `full` mbarrier (cp.async.mbarrier.arrive); four consumer warps take tiles
// j = w, w + 4, ..., wait on the stage's `full`, run the sm80 forward's Q·Kᵀ, online softmax and
// P·V on it and release it on its `empty` mbarrier, which the producer waits for before it
// refills the stage. The consumers then merge as the other kernel does (kv_block.cuh,
// merge_store), over the ring.
//
// Why, and the verdict. The sm80-instruction kernel's warps each issue their next tile only
// between two of their own, about one 16-key tile in flight a warp; the prediction was that bytes
// in flight set the decode rate (its b1 x 128k step read 3.1 TB/s at 05243cc against cuDNN's
// 4.2) and that a full ring would lift it to cuDNN's. Measured on the H200 side by side with it
// (078cbba, decode_bench --quick, dense and pages of 16): dense 0.83-1.07x (b1 x 128k with 8 kv
// heads +5%, b64 x 4k +3 to +7%; b1 x 4k -7 to -17%), geometric mean 0.99; pages of 16
// 0.83-0.89x. That run read the other kernel at 3.56 TB/s on b1 x 128k and 4.1-4.5 on the large
// cells, so bytes in flight were not what held it. Paged caches lose because the one producer
// warp waits out each tile's block-table read before it can form the copies' addresses (the four
// warps of the other kernel overlap theirs); looking the rows up two tiles ahead did not help
// (ff4e5e7: 0.83-0.88x), since the arithmetic on the entry followed the load in the same step.
// Left to try: the table entries loaded a few tiles ahead and the addresses formed at the copy.
//
// One block = (16 packed query rows, kv head, batch entry, split part), as kv_fwd_kernel's grid.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/arch/cp_async.cuh"
#include "cuda/arch/griddep.cuh"
#include "cuda/arch/ldmatrix.cuh"
#include "cuda/arch/sync.cuh"
#include "cuda/arch/tma.cuh"
#include "cuda/kernels/kvcache/kv_block.cuh"
#include "cuda/kernels/kvcache/kv_seq.cuh"
#include "cuda/kernels/kvcache/plan.h"
#include "cuda/kernels/sm80/fwd_tile.cuh"
#include "cuda/tile/swizzle.h"

namespace fa::cuda::kvcache {

// The warp-specialised kernel's configuration (the shared members: KvTraitsBase).
template <int kHeadDim_, typename Tag_>
struct KvWsTraits : KvTraitsBase<kHeadDim_, Tag_> {
  using Base = KvTraitsBase<kHeadDim_, Tag_>;
  using Base::kHeadDim;
  using typename Base::QTile;
  static constexpr int kBlockN = kWsBlockN;     // 32 keys: one row a producer lane
  static constexpr int kConsumers = kWsConsumers;
  static constexpr int kStages = ws_stages(kHeadDim);
  static constexpr int kProducerLanes = 32;  // one warp: a stage's full barrier counts its lanes
  static constexpr int kThreads = 32 * kConsumers + kProducerLanes;  // the producer warp last
  using KvTile = SwizzledTile<kBlockN, kHeadDim>;
  static constexpr int kStageElems = 2 * KvTile::kElems;  // K then V
  static constexpr int kBarrierOffset = 2 * (QTile::kElems + kStages * kStageElems);  // bytes
  static constexpr int kSmemBytes = kBarrierOffset + int(ws_barrier_bytes(kStages));
  // Blocks an SM at most, for the register cap: three to d 64, two to d 160, one from d 192.
  static constexpr int kFit = int(kSm90SmemPerBlock / kSmemBytes);
  static constexpr int kMinBlocks = kFit < 1 ? 1 : kFit;
  static_assert(kSmemBytes == ws_smem_bytes(kHeadDim), "plan.h's shared-memory figure");
  static_assert(kStages >= 2 && kSmemBytes <= kSm90SmemPerBlock, "a ring of two stages fits");
  static_assert(4 * merge_floats<kHeadDim, kConsumers>() <= 2 * kStages * kStageElems,
                "the merge fits over the ring");
};

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    kv_ws_kernel(const __grid_constant__ Params p, const KvArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  constexpr int kC = T::kConsumers, kN = T::kBlockN, kS = T::kStages;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* ring = smem + QTile::kElems;  // stage s: K at ring + s kStageElems, V after it
  // The barriers (8 bytes each): full[kS], empty[kS], then Q's.
  const uint32_t bars = smem_addr(reinterpret_cast<char*>(smem) + T::kBarrierOffset);
  constexpr uint32_t kBar = sizeof(uint64_t);
  const auto full = [&](int s) { return bars + kBar * uint32_t(s); };
  const auto empty = [&](int s) { return bars + kBar * uint32_t(kS + s); };
  const uint32_t q_full = bars + kBar * uint32_t(2 * kS);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tile = int(blockIdx.x % unsigned(a.row_tiles)), split = int(blockIdx.x / unsigned(a.row_tiles));
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  // As kv_fwd_kernel: launched as a programmatic dependent, the combine may start once every block
  // runs, and nothing is read before the kernel ahead on the stream has completed.
  grid_launch_dependents();
  grid_dependency_wait();
  const KvSeq sq = kv_sequence(p, b);
  const int rows_total = sq.len_q * a.group, r0 = tile * kBlockM;
  if (r0 >= rows_total) return;  // past this sequence's rows (packed batches: a shorter one)

  if (tid == 0) {
    // A stage's copies are the producer's 32 lanes' (one arrival each once its copies land); a
    // release is one consumer warp's (its lane 0, after the warp's reads).
    for (int s = 0; s < kS; ++s) {
      mbar_init(full(s), T::kProducerLanes);
      mbar_init(empty(s), 1);
    }
    mbar_init(q_full, T::kProducerLanes);
    mbar_init_fence();
  }
  __syncthreads();

  const BlockKeys keys = block_keys<kN>(p, a, sq, b, hk, r0, rows_total, split, lane / 4);
  const int n_tiles = (keys.key_hi - keys.key_lo + kN - 1) / kN;

  if (warp == kC) {  // the producer: Q, then tile j into stage j % kS once its last use is released
    copy_q_tile<T>(p, a, sq, b, hk, r0, rows_total, sQ, lane, T::kProducerLanes);
    cp_async_mbar_arrive(q_full);
    for (int j = 0, s = 0, use = 0; j < n_tiles; ++j) {
      const KvRows rows = lookup_rows<T>(p, sq, b, hk, keys.key_lo + j * kN, keys.key_hi, lane);
      if (use > 0) mbar_wait(empty(s), uint32_t(use - 1) & 1u);
      uint16_t* sK = ring + s * T::kStageElems;
      copy_rows<T>(p, rows, sK, sK + KvTile::kElems, lane);
      cp_async_mbar_arrive(full(s));
      if (++s == kS) s = 0, ++use;
    }
    cp_async_wait_all();  // the block outlives this warp's copies
    return;
  }

  // A consumer: tiles warp, warp + kC, ...
  float o[1][T::kHeadDim / 8][4];
#pragma unroll
  for (int nd = 0; nd < T::kHeadDim / 8; ++nd) o[0][nd][0] = o[0][nd][1] = o[0][nd][2] = o[0][nd][3] = 0.f;
  sm80::FwdState<1> st;
  st.m[0][0] = st.m[0][1] = sm80::kNegInf;
  st.l[0][0] = st.l[0][1] = 0.f;
  const auto q_lane = sm80::a_lane<QTile>(lane);
  const auto k_lane = sm80::bt_lane<KvTile>(lane);
  const auto v_lane = sm80::a_lane<KvTile>(lane);
  mbar_wait(q_full, 0);
  for (int j = warp; j < n_tiles; j += kC) {
    const int s = j % kS;
    mbar_wait(full(s), uint32_t(j / kS) & 1u);
    const uint32_t sK = smem_addr(ring + s * T::kStageElems);
    const uint32_t sV = sK + 2 * KvTile::kElems;
    float sc[1][kN / 8][4];  // S: (16, 32) fp32, this warp's tile
    sm80::QkGemm<T>{smem_addr(sQ), sK, q_lane, k_lane, 0}.run(sc);
    kv_transform_mask<T>(p, keys, keys.key_lo + j * kN, sc, lane);
    sm80::softmax_update<T, T::kLazyRescale>(sc, o, st, keys.scale_log2);
    sm80::PackedP<T> pp;
    sm80::pack_p<T>(sc, pp);
    sm80::PvGemm<T>{sV, v_lane}.run(o, pp);
    __syncwarp();  // every lane's reads of the stage done
    if (lane == 0) mbar_arrive(empty(s));
  }
  // Every consumer done with the ring (and every copy landed: each was waited for), so the
  // merge's scratch goes over it.
  named_barrier_sync(NamedBarrier::kKvConsumers, 32 * kC);
  merge_store<T, kC>(p, a, sq, b, hk, r0, rows_total, split, keys, st, o,
                     reinterpret_cast<float*>(ring), tid, [] {
                       named_barrier_sync(NamedBarrier::kKvConsumers, 32 * kC);
                     });
#endif
}

}  // namespace fa::cuda::kvcache
