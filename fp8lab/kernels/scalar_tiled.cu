// scalar_tiled.cu -- seed 001's scalar kernel (fp8_matmul_tiled), rebuilt to measure claim B1.
//
//   C[m, n] = sum_k  f32(A[m, k]) * f32(W[n, k] * w_scale[n / 128][k / 128])
//
// A is bf16 activations, W is e4m3 weights with one fp32 scale per 128x128 block. One thread
// computes one output; a TILE x TILE block stages a TILE-wide K slice of A and of the
// dequantised W in shared memory and runs the seed's inner loop
//
//   acc += s_in[ty][k] * s_w[tx][k];
//
// Two shared-memory loads feed each FMA and nothing is kept in registers across k, so the loop
// is bound by the shared-memory pipe (32 floats per clock per SM against 128 FP32 lanes), not by
// the FP32 units: the seed's "structural ceiling of ~1/4". The kernel is kept that way on
// purpose: it is the control arm, not something to tune.
//
// Numerics, as in the seed: every weight is dequantised to fp32 (w * scale rounded to fp32)
// before the product, and the fp32 accumulator runs over the whole K in one chain.
//
// nvcc compiles this file alone (no torch, no GPU), e.g.
//   nvcc -cubin -arch=sm_90a -O3 -Xptxas -v fp8lab/kernels/scalar_tiled.cu -o scalar_tiled.cubin
// The host launchers at the bottom are what the torch binding (seed001_ext.cpp) calls.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/tile.cuh"

namespace fp8lab {
namespace scalar {

// e4m3 code -> fp32, exact (every e4m3 value is an fp16 value and every fp16 value an fp32 one).
__device__ __forceinline__ float e4m3_to_float(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

// fp32 -> OutT for the output store (from_float): common/tile.cuh.

// a:       (M, K) bf16, row-major
// w:       (N, K) e4m3 codes (uint8), row-major (the nn.Linear weight layout)
// w_scale: (ceil(N/128), K/128) fp32, row-major
// c:       (M, N) OutT (bf16, or fp32 for the numerics study), row-major
// M, N >= 1; K a multiple of 128 (hence of TILE): checked by the Python wrapper.
template <int TILE, typename OutT>
__global__ void __launch_bounds__(TILE * TILE)
scalar_tiled_kernel(const __nv_bfloat16* __restrict__ a, const uint8_t* __restrict__ w,
                    const float* __restrict__ w_scale, OutT* __restrict__ c, int M, int N, int K) {
  static_assert(128 % TILE == 0, "a K tile must not straddle two 128-wide scale blocks");
  __shared__ float s_in[TILE][TILE];
  // +1: the inner loop walks s_w down a column (s_w[tx][k], tx across the warp); without the pad
  // every lane of a warp would hit the same bank. (The WMMA kernel next door needs +8 instead.)
  __shared__ float s_w[TILE][TILE + 1];

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * TILE + ty;      // output row of this thread
  const int n = blockIdx.x * TILE + tx;      // output column of this thread
  const int wn = blockIdx.x * TILE + ty;     // weight row this thread stages
  const int kblocks = K / 128;
  float acc = 0.f;

  for (int k0 = 0; k0 < K; k0 += TILE) {  // fp8lab:excerpt scalar_main_loop
    s_in[ty][tx] = (m < M) ? __bfloat162float(a[static_cast<size_t>(m) * K + k0 + tx]) : 0.f;
    float wv = 0.f;
    if (wn < N) {
      const float scale = w_scale[(wn / 128) * kblocks + (k0 + tx) / 128];
      wv = e4m3_to_float(w[static_cast<size_t>(wn) * K + k0 + tx]) * scale;  // rounded to fp32
    }
    s_w[ty][tx] = wv;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += s_in[ty][k] * s_w[tx][k];
    __syncthreads();
  }  // fp8lab:excerpt-end scalar_main_loop
  if (m < M && n < N) c[static_cast<size_t>(m) * N + n] = from_float<OutT>(acc);
}

template <int TILE, typename OutT>
cudaError_t launch(const __nv_bfloat16* a, const uint8_t* w, const float* w_scale, OutT* c, int M, int N,
                   int K, cudaStream_t stream) {
  const dim3 block(TILE, TILE);
  const dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  if (grid.y > 65535u) return cudaErrorInvalidConfiguration;
  scalar_tiled_kernel<TILE, OutT><<<grid, block, 0, stream>>>(a, w, w_scale, c, M, N, K);
  return cudaGetLastError();
}

}  // namespace scalar
}  // namespace fp8lab

// The binding's entry point. tile: 16 or 32 (32 = 1024 threads, the seed's launch); out_fp32:
// 0 writes bf16, 1 writes fp32. Returns cudaErrorInvalidValue for anything else.
cudaError_t fp8lab_scalar_tiled_launch(const void* a, const void* w, const float* w_scale, void* c, int M,
                                       int N, int K, int tile, int out_fp32, cudaStream_t stream) {
  using namespace fp8lab::scalar;
  const auto* A = static_cast<const __nv_bfloat16*>(a);
  const auto* W = static_cast<const uint8_t*>(w);
  if (tile == 32 && !out_fp32) return launch<32>(A, W, w_scale, static_cast<__nv_bfloat16*>(c), M, N, K, stream);
  if (tile == 32 && out_fp32) return launch<32>(A, W, w_scale, static_cast<float*>(c), M, N, K, stream);
  if (tile == 16 && !out_fp32) return launch<16>(A, W, w_scale, static_cast<__nv_bfloat16*>(c), M, N, K, stream);
  if (tile == 16 && out_fp32) return launch<16>(A, W, w_scale, static_cast<float*>(c), M, N, K, stream);
  return cudaErrorInvalidValue;
}
