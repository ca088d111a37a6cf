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
// * quant_act_warp_ilp<kPairs>: the warp kernel rebuilt for bandwidth (notes in its comment):
//   16-byte loads (a warp load = 512 B = two groups), kPairs loads per lane issued before any
//   reduction (2 * kPairs groups per warp), the whole warp reduces both groups of a load with one
//   5-step xor butterfly on packed 15-bit maxima, and the division done with one reciprocal per
//   group (3 FFMA per element) wherever that is provably the IEEE quotient. With kPdl (variant bit
//   kPdlFlag), launched as a programmatic dependent launch (pdl_wait_then_release says what that does).
// * quant_act_warp_ilp_persistent<kPairs>: the same per-chunk work, on a grid no larger than what
//   is resident at once; each warp walks its chunks, loading the next before processing the current.
// * traffic_copy (diagnostic, not a quantiser): quant_act_warp_ilp's loads and stores with no
//   arithmetic: the bandwidth a kernel of this launch shape reaches; no bitwise check applies. With
//   kPdlFlag a programmatic dependent launch as subwarp's (the yardstick of a PDL quantiser).
// * quant_act_subwarp: 8 lanes per group, 32 bytes (two 16-byte loads) per lane, four groups per warp
//   reduced in one 3-step xor max inside each 8-lane segment, 16-byte code stores, a flat grid (one
//   group per 8 lanes, no loop); quant_act_warp_ilp's per-element arithmetic, so bit for bit its
//   outputs. The work split SGLang's per-token-group quantiser uses (measured faster than
//   quant_act_warp_ilp at M >= 256 in notebook 06b, 2026-12-04). With kPdl (variant bit kPdlFlag) a
//   programmatic dependent launch that waits before its loads and lets the next kernel launch after
//   its stores (the ilp kernel releases at once), or, with kEarlyReleaseFlag too, right after the wait
//   (pdl_begin / pdl_end say which). Three forms (issue 22's probe of what still
//   separates it from SGLang's kernel): 'ef' (variant 10: evict-first loads and stores, as every
//   kernel here), 'plain' (11: loads through the read-only path and stores with the default cache
//   policy, as SGLang's kernel, whose loads are plain ld.global), 'plain16' (12: those,
//   and quantise16: one reciprocal per lane instead of one per 16-byte half, code signs restored on
//   the packed codes, byte permutes for packing). Outputs are bit for bit the same in all three.
//
// nvcc compiles this file alone: nvcc -cubin -arch=sm_90a -O3 -Xptxas -v fp8lab/kernels/quant_act.cu
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/pdl.cuh"

namespace fp8lab {
namespace quant {

constexpr int GROUP = 128;
constexpr float kFp8Max = 448.0f;
constexpr float kInvFp8Max = 1.0f / 448.0f;  // folded by the compiler in fp32, RN: torch's reciprocal
constexpr int kThreads = 256;                // warp and 16t kernels
constexpr int kGroupsPerWarp = 4;
constexpr int kPdlFlag = 0x100;              // variant bit: programmatic dependent launch (ilp grid kernel)
// variant bit, with kPdlFlag, for subwarp and traffic_copy: release the next kernel right after the wait
// (before the loads) instead of after the stores (the ilp kernel always releases after the wait)
constexpr int kEarlyReleaseFlag = 0x200;
// A kernel's PDL mode (template parameter kPdl of subwarp and traffic_copy): none, or a programmatic
// dependent launch that waits before its loads and releases after its stores (kPdlLate) or at once
// after the wait (kPdlEarly).
constexpr int kPdlNone = 0, kPdlLate = 1, kPdlEarly = 2;

template <int kPdl>
__device__ __forceinline__ void pdl_begin() {
  if constexpr (kPdl == kPdlLate) pdl_wait();
  if constexpr (kPdl == kPdlEarly) pdl_wait_then_release();
}

template <int kPdl>
__device__ __forceinline__ void pdl_end() {
  if constexpr (kPdl == kPdlLate) pdl_release();
}

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
// Row-major contiguous scales (the default layout) need no division: the index is g. Otherwise a
// 32-bit division whenever g fits (a 64-bit one is a called subroutine of ~70 instructions, on the
// critical path of the lanes that store scales); the 64-bit one only past 2^32 groups.
__device__ __forceinline__ long long scale_index(long long g, int kblocks, long long ss_m, long long ss_k) {
  if (ss_k == 1 && ss_m == kblocks) return g;
  if (g <= 0xFFFFFFFFLL) {
    const uint32_t gu = static_cast<uint32_t>(g), kb = static_cast<uint32_t>(kblocks);
    const uint32_t row = gu / kb;
    return static_cast<long long>(row) * ss_m + static_cast<long long>(gu - row * kb) * ss_k;
  }
  return (g / kblocks) * ss_m + (g % kblocks) * ss_k;
}

// Programmatic dependent launch (sm_90+; launched with cudaLaunchAttributeProgrammaticStreamSerialization):
// the grid may start while the kernel before it in the stream is still running, so it waits for that
// kernel's completion and memory (griddepcontrol.wait) before touching global memory, then lets the
// next kernel in the stream start launching (griddepcontrol.launch_dependents): the launch latency of
// each kernel overlaps the tail of the one before. Without the launch attribute both are no-ops.
// pdl_wait_then_release, pdl_wait, pdl_release and launch_with_pdl: common/pdl.cuh.

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

// x / scale exactly as an IEEE division (div.rn.f32), from a per-group reciprocal. The sequence
//   y = rcp(b) refined once by Newton (e = fma(-b, y0, 1), y = fma(y0, e, y0)),
//   q0 = a * y, r = fma(-b, q0, a), q = fma(y, r, q0)
// is the fast path nvcc emits for div.rn.f32 (read off this file's SASS: MUFU.RCP, 5 FFMA), which
// it takes whenever FCHK finds the operands away from the range edges; the division is then
// correctly rounded because r is exact (Markstein). nvcc recomputes rcp(b) and re-runs FCHK for
// every element; here the group's scale b is fixed, so rcp is hoisted and the range check is done
// once per group (kFastScale*): b in [2^-80, 2^125] keeps y normal, and every element with
// |a| >= 2^-100 keeps r exact. An element below 2^-100 has |a / b| <= 2^-20, far under e4m3's
// smallest half-step (2^-10), so its code is +-0 whatever the last bits: the sign comes back with
// an OR (the FFMA chain turns -0 into +0; IEEE -0 / b is -0). An all-zero group (scale 1) is such
// a case. Groups outside the range (tiny scale, Inf / NaN) take __fdiv_rn per element.
constexpr float kFastScaleMin = 0x1p-80f;
constexpr float kFastScaleMax = 0x1p125f;

__device__ __forceinline__ float rcp_approx(float b) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(b));  // b >= 2^-80 here: ftz never applies
  return y;
}

__device__ __forceinline__ float div_by_scale(float a, float b, float y) {
  const float q0 = a * y;
  const float r = fmaf(-b, q0, a);
  const float q = fmaf(y, r, q0);
  return __uint_as_float(__float_as_uint(q) | (__float_as_uint(a) & 0x80000000u));
}

// 8 bf16 (one uint4) -> 8 e4m3 codes (one uint2), first element in the lowest byte.
template <bool kScaleMulRecip>
__device__ __forceinline__ uint2 quantise8(uint4 v, float scale, bool fast) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t c[4];
  if (fast) {
    // |x / scale| <= 448 (1 + 2^-22) here, where the saturating conversion equals torch's (NaN > 464)
    const float y0 = rcp_approx(scale);
    const float y = fmaf(y0, fmaf(-scale, y0, 1.f), y0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float f0 = div_by_scale(__uint_as_float(w[j] << 16), scale, y);
      const float f1 = div_by_scale(__uint_as_float(w[j] & 0xFFFF0000u), scale, y);
      c[j] = __nv_cvt_float2_to_fp8x2(make_float2(f0, f1), __NV_SATFINITE, __NV_E4M3);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      c[j] = e4m3x2(__fdiv_rn(__uint_as_float(w[j] << 16), scale), __fdiv_rn(__uint_as_float(w[j] & 0xFFFF0000u), scale));
  }
  return make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16));
}

// max |x| of 8 bf16 as 15 bits: two per 32-bit word with the SIMD max, then the two halves.
__device__ __forceinline__ uint32_t abs_max8(uint4 v) {
  const uint32_t m = __vmaxu2(__vmaxu2(v.x & 0x7FFF7FFFu, v.y & 0x7FFF7FFFu), __vmaxu2(v.z & 0x7FFF7FFFu, v.w & 0x7FFF7FFFu));
  return max(m & 0xFFFFu, m >> 16);
}

// Two e4m3 pairs -> 4 codes in one word, first value in the lowest byte (cvt's first operand is
// the high byte of each pair; mov.b32 {lo, hi} puts the first pair low). cvt to e4m3 exists from
// sm_89 on; before it, cuda_fp8.h's conversion (done in software there) gives the same RN satfinite
// codes, so the file still builds and runs on sm_80.
__device__ __forceinline__ uint32_t e4m3x4_satfinite(float f0, float f1, float f2, float f3) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  uint32_t r;
  asm("{\n\t.reg .b16 lo, hi;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
      "mov.b32 %0, {lo, hi};\n\t}"
      : "=r"(r) : "f"(f0), "f"(f1), "f"(f2), "f"(f3));
  return r;
#else
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(f0, f1), __NV_SATFINITE, __NV_E4M3)) |
         (static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(f2, f3), __NV_SATFINITE, __NV_E4M3)) << 16);
#endif
}

// 16 bf16 (a then b) -> 16 e4m3 codes: quantise8 of each half, with the fast path's reciprocal
// computed once. Fast path: q = the FFMA chain of div_by_scale without its sign OR; the sign goes
// on the codes instead (each code ORed with its input's bf16 sign bit). Equal to quantise8's codes:
// for a >= 0 nothing is ORed in either; for a < 0 the chain gives q < 0 (whose code has the sign
// already) or +0 (code 0x00 -> 0x80, the code of -0, which quantise8 converts).
template <bool kScaleMulRecip>
__device__ __forceinline__ uint4 quantise16(uint4 a, uint4 b, float scale, bool fast) {
  if (!fast) {
    const uint2 c0 = quantise8<kScaleMulRecip>(a, scale, false), c1 = quantise8<kScaleMulRecip>(b, scale, false);
    return make_uint4(c0.x, c0.y, c1.x, c1.y);
  }
  const float y0 = rcp_approx(scale);
  const float y = fmaf(y0, fmaf(-scale, y0, 1.f), y0);
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  uint32_t c[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float f[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t word = w[2 * j + (e >> 1)];
      const float v = __uint_as_float((e & 1) ? (word & 0xFFFF0000u) : (word << 16));
      const float q0 = v * y;
      f[e] = fmaf(y, fmaf(-scale, q0, v), q0);
    }
    const uint32_t signs = __byte_perm(w[2 * j], w[2 * j + 1], 0x7531) & 0x80808080u;
    c[j] = e4m3x4_satfinite(f[0], f[1], f[2], f[3]) | signs;
  }
  return make_uint4(c[0], c[1], c[2], c[3]);
}

// Groups per block of quant_act_warp_ilp<kPairs>: 8 warps x 2 groups per load x kPairs loads.
template <int kPairs>
constexpr int ilp_groups_per_block() { return (kThreads / 32) * 2 * kPairs; }

// quant_act_warp_ilp: warp w of the grid owns groups [2 kPairs w, 2 kPairs (w + 1)). Load j of a
// lane reads bytes [16 lane, 16 lane + 16) of the 512-byte pair (2 kPairs w + 2 j, + 1): lanes
// 0-15 hold the first group, lanes 16-31 the second. All kPairs loads are issued before the first
// reduction (kPairs x 512 B in flight per warp, 16 to 64 KB per SM at full occupancy). Each lane
// puts its 15-bit partial max in the high half (first group) or low half (second group) of a word
// and all 32 lanes run one 5-step xor butterfly with a per-half max (__vmaxu2): every lane ends
// with both groups' maxima. Stores: 8 codes (8 bytes) per lane, contiguous over the warp; one
// scale per group from lanes 0 and 16.
// The kPairs loads of the 2 kPairs groups from g0 (warp-uniform); loads past G are skipped (zeros).
template <int kPairs>
__device__ __forceinline__ void ilp_load(uint4 (&v)[kPairs], const uint16_t* __restrict__ x, long long g0, long long G,
                                         int lane) {
  const int half = lane >> 4;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const long long g = g0 + 2 * j + half;
    v[j] = g < G ? __ldcs(reinterpret_cast<const uint4*>(x + g * GROUP) + (lane & 15)) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Reduce, quantise and store the 2 kPairs groups from g0 held in v (loaded by ilp_load).
template <bool kScaleMulRecip, int kPairs>
__device__ __forceinline__ void ilp_process(const uint4 (&v)[kPairs], uint8_t* __restrict__ q, float* __restrict__ s,
                                            long long g0, long long G, int kblocks, long long ss_m, long long ss_k,
                                            int lane) {
  const int half = lane >> 4;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const long long g = g0 + 2 * j + half;
    if (g0 + 2 * j >= G) break;  // warp-uniform; a lone first group still runs the butterfly in full
    const uint32_t m = abs_max8(v[j]);
    uint32_t p = half ? m : (m << 16);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) p = __vmaxu2(p, __shfl_xor_sync(0xffffffffu, p, off));
    if (g >= G) continue;
    const uint32_t amax_bits = half ? (p & 0xFFFFu) : (p >> 16);
    const float scale = group_scale<kScaleMulRecip>(bf16_bits_to_float(amax_bits));
    const bool fast = scale >= kFastScaleMin && scale <= kFastScaleMax && amax_bits < 0x7F80u;
    __stcs(reinterpret_cast<uint2*>(q + g * GROUP) + (lane & 15), quantise8<kScaleMulRecip>(v[j], scale, fast));
    if ((lane & 15) == 0) s[scale_index(g, kblocks, ss_m, ss_k)] = scale;
  }
}

template <bool kScaleMulRecip, int kPairs, bool kPdl>
__global__ void __launch_bounds__(kThreads)
quant_act_warp_ilp_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                          long long G, int kblocks, long long ss_m, long long ss_k) {
  const int lane = threadIdx.x & 31;
  const long long g0 = (static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * (2 * kPairs);
  if constexpr (kPdl) pdl_wait_then_release();
  uint4 v[kPairs];
  ilp_load<kPairs>(v, x, g0, G, lane);
  ilp_process<kScaleMulRecip, kPairs>(v, q, s, g0, G, kblocks, ss_m, ss_k, lane);
}

// quant_act_warp_ilp_persistent: the same per-chunk work (a chunk = 2 kPairs consecutive groups,
// what one warp of quant_act_warp_ilp owns), but a grid no larger than what is resident at once
// and each warp walking chunks w, w + W, w + 2W, ... (W = warps in the grid). Why: with one chunk
// per warp, a warp's loads sit idle while it reduces and stores, and the last partial wave of
// blocks leaves the SMs part-empty (at M = 1024, K = 7168 every groups_per_warp left ~15%). Here a
// warp issues the loads of its next chunk before working on the current one (two register
// buffers, the loop unrolled twice so they swap without copies), so loads stay in flight through
// the arithmetic, and the launcher picks W so that every warp gets the same number of chunks
// (to within one): no tail wave. Per-chunk arithmetic and the fallback division are
// ilp_process's: outputs are bit for bit those of quant_act_warp_ilp.
template <bool kScaleMulRecip, int kPairs>
__global__ void __launch_bounds__(kThreads)
quant_act_warp_ilp_persistent_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                                     long long G, int kblocks, long long ss_m, long long ss_k) {
  const int lane = threadIdx.x & 31;
  const long long stride = static_cast<long long>(gridDim.x) * (kThreads / 32) * (2 * kPairs);  // groups per sweep
  long long g0 = (static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * (2 * kPairs);
  if (g0 >= G) return;  // warp-uniform (the launcher sizes the grid so this is at most the last block's spare warps)
  uint4 a[kPairs], b[kPairs];
  ilp_load<kPairs>(a, x, g0, G, lane);
  for (;;) {
    const long long g1 = g0 + stride;
    ilp_load<kPairs>(b, x, g1, G, lane);  // no-op past G
    ilp_process<kScaleMulRecip, kPairs>(a, q, s, g0, G, kblocks, ss_m, ss_k, lane);
    if (g1 >= G) break;
    g0 = g1 + stride;
    ilp_load<kPairs>(a, x, g0, G, lane);
    ilp_process<kScaleMulRecip, kPairs>(b, q, s, g1, G, kblocks, ss_m, ss_k, lane);
    if (g0 >= G) break;
  }
}

// Diagnostic: quant_act_warp_ilp<2>'s memory traffic (16-byte loads, 8-byte stores of the high
// bytes, one fp32 per group) with no reduction and no division.
template <int kPdl>
__global__ void __launch_bounds__(kThreads)
traffic_copy_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                    long long G, int kblocks, long long ss_m, long long ss_k) {
  constexpr int kPairs = 2;
  const int lane = threadIdx.x & 31, half = lane >> 4;
  const long long g0 = (static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * (2 * kPairs);
  pdl_begin<kPdl>();
  uint4 v[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const long long g = g0 + 2 * j + half;
    v[j] = g < G ? __ldcs(reinterpret_cast<const uint4*>(x + g * GROUP) + (lane & 15)) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const long long g = g0 + 2 * j + half;
    if (g >= G) continue;
    const uint2 c = make_uint2(__byte_perm(v[j].x, v[j].y, 0x7531), __byte_perm(v[j].z, v[j].w, 0x7531));
    __stcs(reinterpret_cast<uint2*>(q + g * GROUP) + (lane & 15), c);
    if ((lane & 15) == 0) s[scale_index(g, kblocks, ss_m, ss_k)] = 1.f;
  }
  pdl_end<kPdl>();
}

// quant_act_subwarp: warp w owns groups [4 w, 4 w + 4); lanes 8 i .. 8 i + 7 hold group 4 w + i, lane
// 8 i + l its bytes [32 l, 32 l + 32) (two adjacent 16-byte loads, both issued before any arithmetic).
// max |x|: abs_max8 of each load, then a 3-step xor butterfly that stays inside the 8-lane segment.
// Codes: quantise8 of each load (ilp_process's arithmetic and fast-path condition), stored as one
// 16-byte word per lane; the scale by the segment's first lane. A warp past G exits before the PDL
// wait (an exited thread counts as released); a partly live warp runs the butterfly in full.
// kForm: 0 'ef', 1 'plain', 2 'plain16' (see the file's head).
template <typename T>
__device__ __forceinline__ T load_hinted(const T* p, bool evict_first) { return evict_first ? __ldcs(p) : *p; }

template <bool kScaleMulRecip, int kPdl, int kForm>
__global__ void __launch_bounds__(kThreads)
quant_act_subwarp_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                         long long G, int kblocks, long long ss_m, long long ss_k) {
  const int lane = threadIdx.x & 31, seg = lane & 7;
  const long long gw = (static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32) * 4;
  if (gw >= G) return;  // warp-uniform
  pdl_begin<kPdl>();
  const long long g = gw + (lane >> 3);
  const bool live = g < G;
  uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
  if (live) {
    const uint4* p = reinterpret_cast<const uint4*>(x + g * GROUP) + 2 * seg;
    a = load_hinted(p, kForm == 0);
    b = load_hinted(p + 1, kForm == 0);
  }
  uint32_t m = max(abs_max8(a), abs_max8(b));
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (live) {
    const float scale = group_scale<kScaleMulRecip>(bf16_bits_to_float(m));
    const bool fast = scale >= kFastScaleMin && scale <= kFastScaleMax && m < 0x7F80u;
    uint4 codes;
    if constexpr (kForm == 2) {
      codes = quantise16<kScaleMulRecip>(a, b, scale, fast);
    } else {
      const uint2 c0 = quantise8<kScaleMulRecip>(a, scale, fast), c1 = quantise8<kScaleMulRecip>(b, scale, fast);
      codes = make_uint4(c0.x, c0.y, c1.x, c1.y);
    }
    uint4* dst = reinterpret_cast<uint4*>(q + g * GROUP) + seg;
    if constexpr (kForm == 0) __stcs(dst, codes); else *dst = codes;
    if (seg == 0) s[scale_index(g, kblocks, ss_m, ss_k)] = scale;
  }
  pdl_end<kPdl>();
}

// Launch with the programmatic-stream-serialization attribute (sm_90+; the wrapper checks).
template <typename Kernel>
cudaError_t launch_pdl(Kernel kernel, long long blocks, cudaStream_t stream, const uint16_t* x, uint8_t* q, float* s,
                       long long G, int kblocks, long long ss_m, long long ss_k) {
  return launch_with_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, x, q, s, G, kblocks,
                         ss_m, ss_k);
}

template <bool kScaleMulRecip, int kForm>
cudaError_t launch_subwarp(const uint16_t* x, uint8_t* q, float* s, long long G, int kblocks, long long ss_m,
                           long long ss_k, cudaStream_t stream, int pdl) {
  constexpr long long per_block = (kThreads / 32) * 4;
  const long long blocks = (G + per_block - 1) / per_block;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (pdl == kPdlLate)
    return launch_pdl(quant_act_subwarp_kernel<kScaleMulRecip, kPdlLate, kForm>, blocks, stream, x, q, s, G, kblocks,
                      ss_m, ss_k);
  if (pdl == kPdlEarly)
    return launch_pdl(quant_act_subwarp_kernel<kScaleMulRecip, kPdlEarly, kForm>, blocks, stream, x, q, s, G, kblocks,
                      ss_m, ss_k);
  quant_act_subwarp_kernel<kScaleMulRecip, kPdlNone, kForm><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, q, s, G, kblocks, ss_m, ss_k);
  return cudaSuccess;
}

cudaError_t launch_traffic_copy(const uint16_t* x, uint8_t* q, float* s, long long G, int kblocks, long long ss_m,
                                long long ss_k, cudaStream_t stream, int pdl) {
  const long long per_block = ilp_groups_per_block<2>();
  const long long blocks = (G + per_block - 1) / per_block;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (pdl == kPdlLate)
    return launch_pdl(traffic_copy_kernel<kPdlLate>, blocks, stream, x, q, s, G, kblocks, ss_m, ss_k);
  if (pdl == kPdlEarly)
    return launch_pdl(traffic_copy_kernel<kPdlEarly>, blocks, stream, x, q, s, G, kblocks, ss_m, ss_k);
  traffic_copy_kernel<kPdlNone><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, q, s, G, kblocks, ss_m,
                                                                                        ss_k);
  return cudaSuccess;
}

template <bool kScaleMulRecip, int kPairs>
cudaError_t launch_ilp(const uint16_t* x, uint8_t* q, float* s, long long G, int kblocks, long long ss_m,
                       long long ss_k, cudaStream_t stream, bool pdl) {
  const long long per_block = ilp_groups_per_block<kPairs>();
  const long long blocks = (G + per_block - 1) / per_block;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (!pdl) {
    quant_act_warp_ilp_kernel<kScaleMulRecip, kPairs, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        x, q, s, G, kblocks, ss_m, ss_k);
    return cudaSuccess;
  }
  return launch_pdl(quant_act_warp_ilp_kernel<kScaleMulRecip, kPairs, true>, blocks, stream, x, q, s, G, kblocks, ss_m,
                    ss_k);
}

// Blocks of `kernel` (kThreads threads, no dynamic shared memory) resident per SM and the SM
// count of the current device; queried once per device and kernel (it is not a stream operation,
// so calling it while a CUDA graph is captured is allowed; the cache makes it a lookup anyway).
constexpr int kMaxDevices = 64;
template <typename Kernel>
cudaError_t resident_slots(Kernel kernel, int (&cache)[kMaxDevices][2], int* sms, int* per_sm) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (cache[dev][0] <= 0 || cache[dev][1] <= 0) {
    int n = 0, b = 0;
    if ((e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0)) != cudaSuccess) return e;
    if (n <= 0 || b <= 0) return cudaErrorInvalidConfiguration;
    cache[dev][0] = n;
    cache[dev][1] = b;
  }
  *sms = cache[dev][0];
  *per_sm = cache[dev][1];
  return cudaSuccess;
}

// Grid of the persistent kernel (quant_act.py's persistent_launch mirrors this): C chunks of
// 2 kPairs groups, at most Wmax = SMs x resident blocks x 8 warps; sweeps n = ceil(C / Wmax);
// warps W = ceil(C / n) (every warp gets n or n - 1 chunks, instead of Wmax warps of which some
// get one chunk more than the rest); blocks = ceil(W / 8).
inline long long persistent_blocks(long long G, int groups_per_chunk, int sms, int per_sm) {
  const long long chunks = (G + groups_per_chunk - 1) / groups_per_chunk;
  const long long max_warps = static_cast<long long>(sms) * per_sm * (kThreads / 32);
  const long long sweeps = (chunks + max_warps - 1) / max_warps;
  const long long warps = (chunks + sweeps - 1) / sweeps;
  return (warps + (kThreads / 32) - 1) / (kThreads / 32);
}

template <bool kScaleMulRecip, int kPairs>
cudaError_t launch_ilp_persistent(const uint16_t* x, uint8_t* q, float* s, long long G, int kblocks, long long ss_m,
                                  long long ss_k, cudaStream_t stream) {
  static int cache[kMaxDevices][2];
  const auto kernel = quant_act_warp_ilp_persistent_kernel<kScaleMulRecip, kPairs>;
  int sms = 0, per_sm = 0;
  const cudaError_t e = resident_slots(kernel, cache, &sms, &per_sm);
  if (e != cudaSuccess) return e;
  const long long blocks = persistent_blocks(G, 2 * kPairs, sms, per_sm);
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, q, s, G, kblocks, ss_m, ss_k);
  return cudaSuccess;
}

template <bool kScaleMulRecip>
cudaError_t launch(int variant, const uint16_t* x, uint8_t* q, float* s, long long M, int K, long long ss_m,
                   long long ss_k, cudaStream_t stream) {
  const int kblocks = K / GROUP;
  const long long G = M * kblocks;
  if (G <= 0) return cudaSuccess;
  const bool pdl = (variant & kPdlFlag) != 0, early = (variant & kEarlyReleaseFlag) != 0;
  variant &= ~(kPdlFlag | kEarlyReleaseFlag);
  if (pdl && !(variant == 3 || variant == 4 || variant == 5 || (variant >= 9 && variant <= 12)))
    return cudaErrorInvalidValue;  // the ilp grid kernels, traffic_copy and subwarp only
  if (early && !(pdl && variant >= 9 && variant <= 12))
    return cudaErrorInvalidValue;  // with PDL, traffic_copy and subwarp only (ilp always releases early)
  const int mode = !pdl ? kPdlNone : early ? kPdlEarly : kPdlLate;
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
  } else if (variant == 3 || variant == 4 || variant == 5) {
    // quant_act_warp_ilp with 4 (variant 3), 2 (4) or 8 (5) groups per warp
    const cudaError_t e = variant == 3 ? launch_ilp<kScaleMulRecip, 2>(x, q, s, G, kblocks, ss_m, ss_k, stream, pdl)
                          : variant == 4 ? launch_ilp<kScaleMulRecip, 1>(x, q, s, G, kblocks, ss_m, ss_k, stream, pdl)
                                         : launch_ilp<kScaleMulRecip, 4>(x, q, s, G, kblocks, ss_m, ss_k, stream, pdl);
    if (e != cudaSuccess) return e;
  } else if (variant == 6 || variant == 7 || variant == 8) {
    // quant_act_warp_ilp_persistent with 2 (variant 6), 4 (7) or 8 (8) groups per chunk
    const cudaError_t e =
        variant == 6   ? launch_ilp_persistent<kScaleMulRecip, 1>(x, q, s, G, kblocks, ss_m, ss_k, stream)
        : variant == 7 ? launch_ilp_persistent<kScaleMulRecip, 2>(x, q, s, G, kblocks, ss_m, ss_k, stream)
                       : launch_ilp_persistent<kScaleMulRecip, 4>(x, q, s, G, kblocks, ss_m, ss_k, stream);
    if (e != cudaSuccess) return e;
  } else if (variant == 9) {
    const cudaError_t e = launch_traffic_copy(x, q, s, G, kblocks, ss_m, ss_k, stream, mode);
    if (e != cudaSuccess) return e;
  } else if (variant >= 10 && variant <= 12) {
    // quant_act_subwarp in its form 'ef' (10), 'plain' (11) or 'plain16' (12)
    const cudaError_t e =
        variant == 10   ? launch_subwarp<kScaleMulRecip, 0>(x, q, s, G, kblocks, ss_m, ss_k, stream, mode)
        : variant == 11 ? launch_subwarp<kScaleMulRecip, 1>(x, q, s, G, kblocks, ss_m, ss_k, stream, mode)
                        : launch_subwarp<kScaleMulRecip, 2>(x, q, s, G, kblocks, ss_m, ss_k, stream, mode);
    if (e != cudaSuccess) return e;
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace quant
}  // namespace fp8lab

// The binding's entry point. variant: 0 naive, 1 warp, 2 16t, 3 / 4 / 5 warp_ilp with 4 / 2 / 8 groups
// per warp, 6 / 7 / 8 warp_ilp_persistent with 2 / 4 / 8 groups per chunk, 9 traffic_copy (diagnostic), 10 / 11 / 12
// subwarp in its form 'ef' / 'plain' / 'plain16'; 3 / 4 / 5 / 9 / 10 / 11 / 12 plus kPdlFlag (0x100): the same kernels with
// programmatic dependent launch; 9 / 10 / 11 / 12 plus kPdlFlag and kEarlyReleaseFlag (0x200): releasing the next
// kernel right after the wait instead of after the stores. scale_mul_recip: 1 = torch on CUDA
// (amax * fp32(1/448)), 0 = true division. x (M, K) bf16; q (M, K) e4m3; s (M, K/128) fp32 with
// element strides (ss_m, ss_k). x and q 16-byte aligned, K a multiple of 128 (the wrapper checks).
cudaError_t fp8lab_quant_act_launch(int variant, int scale_mul_recip, const void* x, void* q, float* s,
                                    long long M, int K, long long ss_m, long long ss_k, cudaStream_t stream) {
  const auto* X = static_cast<const uint16_t*>(x);
  auto* Q = static_cast<uint8_t*>(q);
  if (scale_mul_recip) return fp8lab::quant::launch<true>(variant, X, Q, s, M, K, ss_m, ss_k, stream);
  return fp8lab::quant::launch<false>(variant, X, Q, s, M, K, ss_m, ss_k, stream);
}
