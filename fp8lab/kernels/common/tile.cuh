// common/tile.cuh -- the small plain-C++ device helpers fp8lab's hand-written kernels share (no
// inline PTX: that is common/ptx.cuh): the grouped launch order of the GEMM tiles, zeroing an fp32
// accumulator array, and the epilogue's fp32 -> output-type conversion.
//
// Used by mma_blockwise.cuh, gemv_w16.cuh, wmma_w8a16.cu and scalar_tiled.cu, each of which had its
// own copy. Every helper is __forceinline__ and computes exactly what the copies computed, so the
// kernels' SASS is unchanged by the move. Include it as "common/tile.cuh" from a file in
// fp8lab/kernels/ (found next to the including file, no -I needed); build caches hash it through
// kernels/_build.py COMMON_HEADERS (every common/*.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fp8lab {

// Grouped launch order (Triton's "grouped ordering"): CTA `pid` of a tiles_m x tiles_n grid of
// output tiles -> its (tile row m, tile column n). Tiles are launched `group` tile rows at a time,
// column by column inside the group, so consecutive CTAs share a column of B / W tiles while it is
// in L2. group >= 1; group = 1 is plain row-major launch order.
struct TileCoord {
  int m, n;
};
__device__ __forceinline__ TileCoord grouped_tile(int pid, int tiles_m, int tiles_n, int group) {
  const int per_group = group * tiles_n;
  const int first_m = (pid / per_group) * group;
  const int group_m = min(tiles_m - first_m, group);  // tile rows in this (possibly ragged last) group
  return {first_m + (pid % per_group) % group_m, (pid % per_group) / group_m};
}

// Every element of an [A][B][C] fp32 register array (an mma accumulator: tiles x tiles x 4) = 0.
template <int A, int B, int C>
__device__ __forceinline__ void zero_fill(float (&x)[A][B][C]) {
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int b = 0; b < B; ++b)
#pragma unroll
      for (int c = 0; c < C; ++c) x[a][b][c] = 0.f;
}

// fp32 -> the output element type of an epilogue: fp32 as is, bf16 rounded to nearest even.
template <typename OutT>
__device__ __forceinline__ OutT from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

}  // namespace fp8lab
