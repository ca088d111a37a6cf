// hmma_peak.cu -- the mma.sync (HMMA) BF16 peak: what any wmma / mma.sync kernel can reach on this device.
//
// On Hopper the full BF16 tensor rate needs wgmma (warpgroup MMA, operands from shared memory); the
// warp-level mma.sync path that nvcuda::wmma and seed 001's W8A16 kernel use issues HMMA.16816 and
// reaches only part of it. This kernel measures that ceiling directly: every warp keeps kChains
// independent 16x16 fp32 accumulators and multiplies the same register-resident A and B fragments into
// them n_iters times. No memory traffic in the loop, enough independent chains per scheduler to cover
// the HMMA latency, so the time is the tensor pipe's issue rate for this instruction.
//
// Exactness (so the GPU test can compare bit for bit): A and B hold small integers, so every product
// and every partial sum is an integer below 2^24 and the fp32 accumulation is exact:
//   out[chain] = n_iters * (A @ B)   exactly.
//
// nvcc compiles this file alone:  nvcc -cubin -arch=sm_90 -O3 -Xptxas -v fp8lab/kernels/hmma_peak.cu
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

namespace fp8lab {
namespace hmma_peak {

using namespace nvcuda;
constexpr int kChains = 4;          // independent accumulators per warp (ILP against HMMA latency)
constexpr int kWarps = 8;           // warps per block

// a: (16, 16) bf16 row-major; b: (16, 16) bf16 column-major (element (k, n) at n * 16 + k);
// out: (gridDim.x * kWarps * kChains, 16, 16) fp32 row-major, one tile per (block, warp, chain).
__global__ void __launch_bounds__(kWarps * 32) hmma_peak_kernel(const __nv_bfloat16* __restrict__ a,
                                                               const __nv_bfloat16* __restrict__ b,
                                                               float* __restrict__ out, int n_iters) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kChains];
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
#pragma unroll
  for (int c = 0; c < kChains; ++c) wmma::fill_fragment(acc[c], 0.0f);
  for (int it = 0; it < n_iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) wmma::mma_sync(acc[c], fa, fb, acc[c]);
  }
  const int warp = threadIdx.x / 32;
  const long long tile = (static_cast<long long>(blockIdx.x) * kWarps + warp) * kChains;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
    wmma::store_matrix_sync(out + (tile + c) * 256, acc[c], 16, wmma::mem_row_major);
}

}  // namespace hmma_peak
}  // namespace fp8lab

// Host launcher (no torch headers here). blocks: grid size; out must hold blocks * kWarps * kChains tiles.
cudaError_t fp8lab_hmma_peak_launch(const void* a, const void* b, float* out, int blocks, int n_iters,
                                    cudaStream_t stream) {
  if (blocks <= 0 || n_iters <= 0) return cudaErrorInvalidValue;
  fp8lab::hmma_peak::hmma_peak_kernel<<<blocks, fp8lab::hmma_peak::kWarps * 32, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), out, n_iters);
  return cudaGetLastError();
}
