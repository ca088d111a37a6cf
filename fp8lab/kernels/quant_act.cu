// quant_act.cu -- 1x128 per-token activation quantisers (claim B6): bf16 in, e4m3 + fp32 scales out.
//
// For every group of 128 consecutive elements of a row of x (M, K):
//   amax  = max |x| over the group (exact; NaN propagates, as torch.amax does)
//   scale = amax > 0 ? amax / 448 : 1                 (NaN amax -> 1, as torch.where does)
//   q     = e4m3(x / scale)                            (IEEE division, round to nearest even)
// bit for bit what fp8lab.kernels.baselines.quant_act_reference computes with torch on a GPU.
// Two details decide "bit for bit":
// * torch evaluates `amax / 448.0` (tensor / Python scalar) on CUDA as amax * (1.0f / 448.0f):
//   ATen's div_true_kernel_cuda turns division by a CPU scalar into a multiplication by its fp32
//   reciprocal. The two differ in the last bit for about half of all amax values, so
//   kScaleMulRecip = true reproduces torch; false is the true division (what torch does on a CPU).
// * torch's float -> e4m3fn conversion rounds to nearest even and does not saturate (|v| > 464 ->
//   NaN, keeping the sign). By construction |x / scale| <= 448 (up to a last-bit wobble that
//   still rounds to 448), where the hardware's saturating cvt.rn.satfinite gives the same code,
//   so that is the fast path. Anything else (NaN / Inf inputs, a subnormal scale) takes
//   __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3), with the NaN sign restored (cuda_fp8
//   canonicalises a NaN to +NaN; torch keeps the sign).
//
// Three kernels (x viewed as G = M*K/128 consecutive groups of 128):
// * quant_act_naive: the seed's launch: a 32 x 32 = 1024-thread block per group, of which only
//   threadIdx.y == 0 (32 threads) has work, and max |x| reduced by 128 atomicMax calls on one
//   shared address.
// * quant_act_warp: one warp per group: 4 bf16 (one 8-byte load) per lane, a 5-step xor-shuffle
//   max, 4-byte stores. Each warp handles kGroupsPerWarp groups with every load issued before the
//   first reduction, so more bytes are in flight per SM (memory-bound kernels need that).
// * quant_act_16t: 16 threads per group: 8 bf16 per lane in one 16-byte load, a 4-step shuffle
//   inside each half-warp, 8-byte stores; a warp covers two groups per load.
//
// nvcc compiles this file alone: nvcc -cubin -arch=sm_90a -O3 -Xptxas -v fp8lab/kernels/quant_act.cu
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace fp8lab {
namespace quant {

constexpr int GROUP = 128;
constexpr float kFp8Max = 448.0f;
constexpr float kInvFp8Max = 1.0f / 448.0f;  // folded by the compiler in fp32, RN: torch's reciprocal
constexpr int kThreads = 256;                // warp and 16t kernels
constexpr int kGroupsPerWarp = 4;

template <bool kScaleMulRecip>
__device__ __forceinline__ float group_scale(float amax) {
  if (!(amax > 0.f)) return 1.f;  // zero group, and NaN (torch.where(NaN > 0) picks 1)
  return kScaleMulRecip ? amax * kInvFp8Max : __fdiv_rn(amax, kFp8Max);
}

__device__ __forceinline__ uint32_t e4m3_slow(float v) {
  uint32_t code = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3);
  if (isnan(v)) code = 0x7Fu | (signbit(v) ? 0x80u : 0u);
  return code;
}

// Two floats -> two e4m3 codes in the low 16 bits (first value in the low byte).
__device__ __forceinline__ uint32_t e4m3x2(float v0, float v1) {
  if (fabsf(v0) <= kFp8Max && fabsf(v1) <= kFp8Max)  // false for NaN
    return __nv_cvt_float2_to_fp8x2(make_float2(v0, v1), __NV_SATFINITE, __NV_E4M3);
  return e4m3_slow(v0) | (e4m3_slow(v1) << 8);
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// max |x| of two packed bf16, as the bits of |x|: for non-negative values (and NaN above Inf) the
// integer order of the bits is the float order, so the reduction needs no float compare.
__device__ __forceinline__ uint32_t abs_max_bits(uint32_t two_bf16) {
  return max(two_bf16 & 0x7FFFu, (two_bf16 >> 16) & 0x7FFFu);
}

// Scale output index for group g: s[row * ss_m + kb * ss_k] (row-major (KB, 1) or M-major (1, M)).
__device__ __forceinline__ long long scale_index(long long g, int kblocks, long long ss_m, long long ss_k) {
  return (g / kblocks) * ss_m + (g % kblocks) * ss_k;
}

// x: (M, K) bf16 as raw 16-bit words, row-major; q: (M, K) e4m3 codes, row-major;
// s: (M, K/128) fp32 with element strides (ss_m, ss_k); G = M * K / 128 groups; kblocks = K / 128.
template <bool kScaleMulRecip>
__global__ void __launch_bounds__(1024)
quant_act_naive_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                       long long G, int kblocks, long long ss_m, long long ss_k) {
  constexpr int kBlockSizeY = 1;  // the 1 x 128 group: one row of the 32 x 32 block has work
  __shared__ unsigned int s_amax;  // fp32 bits of max |x|
  const long long g = blockIdx.x;
  if (threadIdx.x == 0 && threadIdx.y == 0) s_amax = 0u;
  __syncthreads();
  for (int ly = threadIdx.y; ly < kBlockSizeY; ly += blockDim.y)
    for (int lx = threadIdx.x; lx < GROUP; lx += blockDim.x)
      atomicMax(&s_amax, __float_as_uint(fabsf(bf16_bits_to_float(x[g * GROUP + lx]))));
  __syncthreads();
  const float scale = group_scale<kScaleMulRecip>(__uint_as_float(s_amax));
  for (int ly = threadIdx.y; ly < kBlockSizeY; ly += blockDim.y)
    for (int lx = threadIdx.x; lx < GROUP; lx += blockDim.x) {
      const float v = __fdiv_rn(bf16_bits_to_float(x[g * GROUP + lx]), scale);
      q[g * GROUP + lx] = static_cast<uint8_t>(e4m3x2(v, 0.f) & 0xFFu);
    }
  if (threadIdx.x == 0 && threadIdx.y == 0) s[scale_index(g, kblocks, ss_m, ss_k)] = scale;
}

template <bool kScaleMulRecip>
__global__ void __launch_bounds__(kThreads)
quant_act_warp_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                      long long G, int kblocks, long long ss_m, long long ss_k) {
  const int lane = threadIdx.x & 31;
  const long long g0 = (static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * kGroupsPerWarp;
  uint2 v[kGroupsPerWarp];
#pragma unroll
  for (int i = 0; i < kGroupsPerWarp; ++i) {
    const long long g = g0 + i;
    v[i] = g < G ? __ldcs(reinterpret_cast<const uint2*>(x + g * GROUP) + lane) : make_uint2(0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kGroupsPerWarp; ++i) {
    const long long g = g0 + i;
    if (g >= G) break;  // g is the same for the whole warp: no lane leaves the shuffles early
    uint32_t m = max(abs_max_bits(v[i].x), abs_max_bits(v[i].y));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    const float scale = group_scale<kScaleMulRecip>(bf16_bits_to_float(m));
    const float f0 = __fdiv_rn(bf16_bits_to_float(v[i].x & 0xFFFFu), scale);
    const float f1 = __fdiv_rn(bf16_bits_to_float(v[i].x >> 16), scale);
    const float f2 = __fdiv_rn(bf16_bits_to_float(v[i].y & 0xFFFFu), scale);
    const float f3 = __fdiv_rn(bf16_bits_to_float(v[i].y >> 16), scale);
    const uint32_t packed = e4m3x2(f0, f1) | (e4m3x2(f2, f3) << 16);
    __stcs(reinterpret_cast<unsigned int*>(q + g * GROUP) + lane, packed);
    if (lane == 0) s[scale_index(g, kblocks, ss_m, ss_k)] = scale;
  }
}

template <bool kScaleMulRecip>
__global__ void __launch_bounds__(kThreads)
quant_act_16t_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                     long long G, int kblocks, long long ss_m, long long ss_k) {
  const int lane = threadIdx.x & 31, half = lane >> 4, l16 = lane & 15;
  // kGroupsPerWarp / 2 steps of two groups (one per half-warp): the same groups per warp as above
  constexpr int kSteps = kGroupsPerWarp / 2;
  const long long g0 = (static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * kGroupsPerWarp;
  uint4 v[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const long long g = g0 + 2 * i + half;
    v[i] = g < G ? __ldcs(reinterpret_cast<const uint4*>(x + g * GROUP) + l16) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const long long g = g0 + 2 * i + half;
    if (g0 + 2 * i >= G) break;  // uniform: both halves idle. A lone half still runs the shuffles.
    uint32_t m = max(max(abs_max_bits(v[i].x), abs_max_bits(v[i].y)), max(abs_max_bits(v[i].z), abs_max_bits(v[i].w)));
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));  // within a half
    if (g >= G) continue;
    const float scale = group_scale<kScaleMulRecip>(bf16_bits_to_float(m));
    const uint32_t w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
    uint32_t packed[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float f0 = __fdiv_rn(bf16_bits_to_float(w[2 * j] & 0xFFFFu), scale);
      const float f1 = __fdiv_rn(bf16_bits_to_float(w[2 * j] >> 16), scale);
      const float f2 = __fdiv_rn(bf16_bits_to_float(w[2 * j + 1] & 0xFFFFu), scale);
      const float f3 = __fdiv_rn(bf16_bits_to_float(w[2 * j + 1] >> 16), scale);
      packed[j] = e4m3x2(f0, f1) | (e4m3x2(f2, f3) << 16);
    }
    __stcs(reinterpret_cast<uint2*>(q + g * GROUP) + l16, make_uint2(packed[0], packed[1]));
    if (l16 == 0) s[scale_index(g, kblocks, ss_m, ss_k)] = scale;
  }
}

template <bool kScaleMulRecip>
cudaError_t launch(int variant, const uint16_t* x, uint8_t* q, float* s, long long M, int K, long long ss_m,
                   long long ss_k, cudaStream_t stream) {
  const int kblocks = K / GROUP;
  const long long G = M * kblocks;
  if (G <= 0) return cudaSuccess;
  if (variant == 0) {
    if (G > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    quant_act_naive_kernel<kScaleMulRecip><<<static_cast<unsigned>(G), dim3(32, 32), 0, stream>>>(
        x, q, s, G, kblocks, ss_m, ss_k);
  } else if (variant == 1 || variant == 2) {
    const long long per_block = (kThreads / 32) * kGroupsPerWarp;
    const long long blocks = (G + per_block - 1) / per_block;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    if (variant == 1)
      quant_act_warp_kernel<kScaleMulRecip><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          x, q, s, G, kblocks, ss_m, ss_k);
    else
      quant_act_16t_kernel<kScaleMulRecip><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          x, q, s, G, kblocks, ss_m, ss_k);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace quant
}  // namespace fp8lab

// The binding's entry point. variant: 0 naive, 1 warp, 2 16t. scale_mul_recip: 1 = torch on CUDA
// (amax * fp32(1/448)), 0 = true division. x (M, K) bf16; q (M, K) e4m3; s (M, K/128) fp32 with
// element strides (ss_m, ss_k). x and q 16-byte aligned, K a multiple of 128 (the wrapper checks).
cudaError_t fp8lab_quant_act_launch(int variant, int scale_mul_recip, const void* x, void* q, float* s,
                                    long long M, int K, long long ss_m, long long ss_k, cudaStream_t stream) {
  const auto* X = static_cast<const uint16_t*>(x);
  auto* Q = static_cast<uint8_t*>(q);
  if (scale_mul_recip) return fp8lab::quant::launch<true>(variant, X, Q, s, M, K, ss_m, ss_k, stream);
  return fp8lab::quant::launch<false>(variant, X, Q, s, M, K, ss_m, ss_k, stream);
}
