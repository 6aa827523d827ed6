#include "cuda/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cstdint>
#include <mutex>

#include "cuda/tile/swizzle.h"  // the kernels' 64-column blocks

namespace fa::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    else
      (void)cudaGetLastError();  // the failed query's error, not a later launch's
  });
  return fn;
}

}  // namespace

namespace {

// Bytes between consecutive heads, rows, sequences. A batch of one (or a packed batch) may carry
// any stride_b: its only coordinate is 0, so it gets one past the whole view.
struct RowStrides {
  int64_t head, row, seq;
};
// Bytes an element: 16-bit views, or 1 for fp8 e4m3 (the sm90 fp8 forward's q and k).
int64_t elem_bytes(const View& v) { return v.dtype == DType::E4M3 ? 1 : 2; }

RowStrides row_strides(const View& v, int64_t batch, int64_t rows, int64_t heads) {
  const int64_t es = elem_bytes(v), sh = v.stride_h * es, ss = v.stride_s * es;
  return {sh, ss, batch > 1 ? v.stride_b * es : ss * rows + sh * heads};
}

}  // namespace

bool row_tiles_encodable(const View& v, int64_t batch, int64_t rows, int64_t heads,
                         int64_t head_dim) {
  // The kernels pass coordinates as 32-bit ints.
  constexpr int64_t kMaxCoord = (int64_t(1) << 31) - 1;
  if (v.data == nullptr || reinterpret_cast<uintptr_t>(v.data) % 16 != 0 || batch < 1 ||
      rows < 1 || heads < 1 || head_dim < 1 || batch > kMaxCoord || rows > kMaxCoord ||
      heads > kMaxCoord)
    return false;
  // TMA's rule for the strides above the innermost dim: positive multiples of 16 bytes below
  // 2^40 (a broadcast view, stride 0, has none).
  const RowStrides st = row_strides(v, batch, rows, heads);
  for (int64_t s : {st.head, st.row, st.seq})
    if (s <= 0 || s % 16 != 0 || s >= (int64_t(1) << 40)) return false;
  return true;
}

bool encode_row_tiles(const View& v, int64_t batch, int64_t rows, int64_t heads, int64_t head_dim,
                      int box_rows, CUtensorMap* map, int box_heads) {
  const auto fn = encode_fn();
  if (fn == nullptr || !row_tiles_encodable(v, batch, rows, heads, head_dim) || box_heads < 1 ||
      box_heads > 256 || box_rows < 1 || box_rows > 256)
    return false;
  const RowStrides st = row_strides(v, batch, rows, heads);
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(rows),
                              cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(st.head), cuuint64_t(st.row), cuuint64_t(st.seq)};
  // A box's columns: one 128-byte block (64 16-bit values, 128 fp8 ones).
  const bool fp8 = elem_bytes(v) == 1;
  const cuuint32_t box[4] = {cuuint32_t(SwizzledTile<8, 64>::kBlockCols * (fp8 ? 2 : 1)),
                             cuuint32_t(box_heads), cuuint32_t(box_rows), 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  CUtensorMap m;
  const CUtensorMapDataType type = fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16;
  if (fn(&m, type, 4, v.data, dims, strides, box, unit,
         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
         CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  *map = m;
  return true;
}

}  // namespace fa::cuda
