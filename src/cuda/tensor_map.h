// Host side of the sm90 bulk tensor copies (src/cuda/arch/tma.cuh): tensor maps of the views the
// kernels read by TMA.
#pragma once

#include <cuda.h>  // CUtensorMap (the driver's entry point is looked up at run time: no -lcuda)

#include <cstdint>

#include "core/params.h"

namespace fa::cuda {

// The tensor map of a 16-bit or fp8 e4m3 (batch, rows, heads, head_dim) view (a fixed-length
// batch; a packed one is batch 1 with its total rows) for boxes of one 128-byte block of columns
// (64 16-bit values, 128 e4m3 ones; v.dtype says which) x box_rows rows of one head, stored
// as the kernels' 128-byte swizzled column blocks (src/cuda/tile/swizzle.h); the map's dims,
// innermost first, are (head_dim, heads, rows, batch). Columns past head_dim and rows past `rows`
// arrive as zeros. False, with *map untouched, where the driver lacks tensor maps or refuses
// this view; the caller then copies without them.
// The Q and dO maps of the backward's main kernel (a __grid_constant__ parameter: the copies take
// its address).
struct QdoMaps {
  CUtensorMap q, dout;
};

// box_heads > 1: boxes of box_heads consecutive heads x box_rows rows, landing in shared memory
// as box_rows * box_heads rows (row-major: a row's heads together), e.g. the sm90 forward's GQA
// packing.
bool encode_row_tiles(const View& v, int64_t batch, int64_t rows, int64_t heads, int64_t head_dim,
                      int box_rows, CUtensorMap* map, int box_heads = 1);

// Whether encode_row_tiles can take the view at all (before any box): its address 16-byte
// aligned, its head / row / sequence strides positive multiples of 16 bytes below 2^40, its
// extents 32-bit. A family that needs the maps refuses the call where this is false.
bool row_tiles_encodable(const View& v, int64_t batch, int64_t rows, int64_t heads,
                         int64_t head_dim);

}  // namespace fa::cuda
