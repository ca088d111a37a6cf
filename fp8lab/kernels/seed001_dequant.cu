// seed001_dequant.cu -- the step seed 001 wants to delete: dequantising FP8 block-scaled weights to
// bf16 before a cuBLAS BF16 GEMM (its dequantize_w(), 12.7 GB of traffic per decode step).
//
//   out[n, k] = bf16( float(q[n, k]) * scale[n / 128][k / 128] )
//
// Bit for bit fp8lab.kernels.baselines.dequantize_weight (fp32 product, rounded once to bf16), but
// one streaming pass: 16 codes in (one 16-byte load), 16 bf16 out (two 16-byte stores), so its time
// measures the traffic (1 + 2 bytes per weight) and nothing else.
//
// nvcc compiles this file alone: nvcc -cubin -arch=sm_90a -O3 fp8lab/kernels/seed001_dequant.cu
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace fp8lab {
namespace dequant {

// q: (N, K) e4m3 codes, row-major, 16-byte aligned; scale: (ceil(N/128), K/128) fp32, row-major;
// out: (N, K) bf16, row-major, 16-byte aligned; K a multiple of 128 (the wrapper checks).
__global__ void __launch_bounds__(256)
dequant_w8_bf16_kernel(const uint4* __restrict__ q, const float* __restrict__ scale, uint4* __restrict__ out,
                       int K, long long chunks) {
  const int kblocks = K / 128;
  const int chunks_per_row = K / 16;
  for (long long c = blockIdx.x * 256LL + threadIdx.x; c < chunks; c += 256LL * gridDim.x) {
    const long long n = c / chunks_per_row;
    const int k = static_cast<int>(c % chunks_per_row) * 16;
    const float s = __ldg(scale + (n / 128) * kblocks + k / 128);
    const uint4 v = __ldcs(q + c);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>((words[j] >> (16 * h)) & 0xFFFFu), __NV_E4M3);
        const float2 f = __half22float2(__half2(hr));  // exact
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
        o[2 * j + h] = *reinterpret_cast<const uint32_t*>(&b);
      }
    }
    __stcs(out + 2 * c, make_uint4(o[0], o[1], o[2], o[3]));
    __stcs(out + 2 * c + 1, make_uint4(o[4], o[5], o[6], o[7]));
  }
}

}  // namespace dequant
}  // namespace fp8lab

// The binding's entry point: q (N, K) e4m3, scale (ceil(N/128), K/128) fp32, out (N, K) bf16.
cudaError_t fp8lab_dequant_w8_bf16_launch(const void* q, const float* scale, void* out, long long N, int K,
                                          int sms, cudaStream_t stream) {
  if (N <= 0 || K <= 0 || K % 128) return cudaErrorInvalidValue;
  const long long chunks = N * (K / 16);
  long long blocks = (chunks + 255) / 256;
  const long long cap = static_cast<long long>(sms > 0 ? sms : 1) * 16;  // grid-stride past a few waves
  if (blocks > cap) blocks = cap;
  fp8lab::dequant::dequant_w8_bf16_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<const uint4*>(q), scale, static_cast<uint4*>(out), K, chunks);
  return cudaGetLastError();
}
