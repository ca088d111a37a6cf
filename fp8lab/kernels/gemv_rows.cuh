// gemv_rows.cuh -- fp8lab's row-major decode GEMV for 8-bit weights (issue 22, target 1: decode at the
// copy rate), the weight-only arms' "rows" schedule.
//
//   out[m, n] = out_factor * sum_k x[m, k] * value(w[n, k]) * s[n, k / 128]
//
// Why a second GEMV beside gemv_w16.cuh: at M = 1 a tensor-core tile of 16 rows x 128 K per warp,
// refilled through a three-step register ring at two CTAs per SM, streams 0.73-0.93 of the copy rate
// on notebook 08's shapes, and no change of grid, occupancy, bytes in flight or epilogue closed that
// (scripts/probes: decode_ablate, decode_pattern, decode-3cta). The probe scripts/probes/decode_rows.py
// measured this kernel's shape over 12 CTA configurations beside it (H200, 6641ef6): 4 warps x 4 rows
// x one 16-byte word per row per thread streamed 0.86-0.99 of copy where gemv_w16 reached 0.73-0.93.
//
// * The weight is row-major (N, K) bytes (e4m3 codes, or int8 codes as offset binary, value =
//   code - 128), with one 16-bit group scale per (row, 128 K) in the activation dtype. No tiles, no
//   tensor cores: at M = 1 a GEMV is N dot products, and the CUDA cores do 2-3 instructions per
//   weight byte, well inside their issue rate at the copy rate.
// * A CTA of kWarps = 4 warps owns kRows = 4 consecutive rows and splits their K among all 128
//   threads: per K block of 2048, thread t loads 16 bytes of every row at k = block + 16 t
//   (ld.global.nc.L1::no_allocate: one contiguous 512 bytes per warp instruction), then the rows'
//   scales and its 16 activations (L1-cached: every CTA reads the same vector), and only then does
//   arithmetic. Small CTAs (<= 56 registers) put nine per SM, so an SM keeps ~72 KB of weight loads in
//   flight without any register ring; the grid is N / 4 CTAs, no split-K, no workspace, no atomics.
// * e4m3 is decoded with cvt.rn.f16x2.e4m3x2 (so the two NaN codes decode as NaN, as OCP defines
//   them; gemv_w16's bit trick gives +-480); int8 with the 2^23 magic number (exact). Products and
//   sums in fp32: each thread sums its 16 products, scales the sum by its group scale and adds it to
//   its row's accumulator; a warp-shuffle tree and shared memory sum the 128 threads per row.
// * M > 1: blockIdx.y walks blocks of MB tokens (MB = 1, 2 or 4); every block streams the whole
//   weight again, so this kernel is for M = 1 (its CUDA-core work grows with M: the tensor-core
//   kernel is faster from M = 2 on, decode_rows probe).
// * The loads-only twin (gemv_rows_loads) issues the same weight, scale and activation loads on the
//   same grid, XORs them, and stores only where the XOR equals a key: this launch's access-pattern
//   ceiling (notebook 08's pattern columns).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "gemv_rows_params.h"

namespace fp8lab {
namespace rows {

enum Format : int { kFp8 = 0, kInt8 = 1 };   // gemv_w16.cuh's ids of the same formats

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 4;                     // rows of N per CTA
constexpr int kBlockK = kThreads * 16;       // K bytes per block: one 16-byte word per row per thread
constexpr int kGroupK = 128;                 // K per group scale

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <bool BF16>
__device__ __forceinline__ float scalar16(uint16_t v) {
  if constexpr (BF16) {
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
  } else {
    return __half2float(__ushort_as_half(v));
  }
}

// 8 16-bit activations (one 16-byte word) -> fp32
template <bool BF16>
__device__ __forceinline__ void act8(const uint4& v, float* f) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (BF16) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    } else {
      const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      f[2 * i] = h.x;
      f[2 * i + 1] = h.y;
    }
  }
}

// 16 weight codes (byte j of the word = k + j) dotted with 16 fp32 activations, in fp32
template <int F>
__device__ __forceinline__ float dot16(const uint4& w, const float (&x)[16]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (F == kFp8) {
      const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ws[i] & 0xffffu), __NV_E4M3);
      const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ws[i] >> 16), __NV_E4M3);
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      s0 = fmaf(a.x, x[4 * i + 0], s0);
      s1 = fmaf(a.y, x[4 * i + 1], s1);
      s0 = fmaf(b.x, x[4 * i + 2], s0);
      s1 = fmaf(b.y, x[4 * i + 3], s1);
    } else {
      // byte j into the low mantissa of 2^23: the float 2^23 + code, exactly; minus 2^23 + 128
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float v = __uint_as_float(__byte_perm(ws[i], 0x4B000000u, 0x7540u + j)) - 8388736.0f;
        if (j & 1) {
          s1 = fmaf(v, x[4 * i + j], s1);
        } else {
          s0 = fmaf(v, x[4 * i + j], s0);
        }
      }
    }
  }
  return s0 + s1;
}

// One CTA: rows n0 .. n0 + kRows - 1, tokens m0 .. m0 + MB - 1 (fewer in the last block).
template <int F, bool BF16, int MB, bool LOADS_ONLY>
__device__ __forceinline__ void rows_body(const RowsParams& p) {
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * kRows;
  const int m0 = blockIdx.y * MB;
  const int mb = min(MB, p.M - m0);
  const int groups = p.K / kGroupK;
  const uint16_t* x16 = static_cast<const uint16_t*>(p.x);

  float acc[MB][kRows];
#pragma unroll
  for (int m = 0; m < MB; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[m][r] = 0.f;
  }
  uint32_t hx = 0u;

  for (int kb = 0; kb < p.K; kb += kBlockK) {
    const int k0 = kb + tid * 16;
    const bool kin = k0 < p.K;
    uint4 wv[kRows];
    float sc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool ok = kin && n0 + r < p.N;
      wv[r] = ok ? ldg_stream(p.w + static_cast<size_t>(n0 + r) * p.K + k0) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool ok = kin && n0 + r < p.N;
      sc[r] = ok ? scalar16<BF16>(__ldg(p.s + static_cast<size_t>(n0 + r) * groups + k0 / kGroupK)) : 0.f;
    }
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      if (kin && m < mb) {
        const uint4* xp = reinterpret_cast<const uint4*>(x16 + static_cast<size_t>(m0 + m) * p.K + k0);
        const uint4 xa = __ldg(xp), xb = __ldg(xp + 1);
        if constexpr (LOADS_ONLY) {
          hx ^= xa.x ^ xa.y ^ xa.z ^ xa.w ^ xb.x ^ xb.y ^ xb.z ^ xb.w;
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            hx ^= wv[r].x ^ wv[r].y ^ wv[r].z ^ wv[r].w ^ __float_as_uint(sc[r]);
        } else {
          float xf[16];
          act8<BF16>(xa, xf);
          act8<BF16>(xb, xf + 8);
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[m][r] = fmaf(dot16<F>(wv[r], xf), sc[r], acc[m][r]);
        }
      }
    }
  }

  if constexpr (LOADS_ONLY) {
    if (hx == p.key) p.sink[(static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kThreads + tid] = hx;
  } else {
    __shared__ float red[kWarps][MB * kRows];
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int m = 0; m < MB; ++m) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float v = acc[m][r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[warp][m * kRows + r] = v;
      }
    }
    __syncthreads();
    if (tid < MB * kRows) {
      const int m = tid / kRows, r = tid % kRows;
      if (m < mb && n0 + r < p.N) {
        float v = 0.f;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) v += red[i][tid];
        v *= p.out_factor;
        const size_t idx = static_cast<size_t>(m0 + m) * p.N + n0 + r;
        if constexpr (BF16) {
          static_cast<__nv_bfloat16*>(p.out)[idx] = __float2bfloat16_rn(v);
        } else {
          static_cast<__half*>(p.out)[idx] = __float2half_rn(v);
        }
      }
    }
  }
}

// CTAs per SM the launch bounds ask for: ptxas then keeps MB = 1 at <= 56 registers (nine CTAs per
// SM, the probe's occupancy) and gives MB = 2 / 4 the registers they need without spills.
__host__ __device__ constexpr int min_ctas(int MB) { return MB == 1 ? 9 : (MB == 2 ? 6 : 4); }

// One __global__ per format, named after the arm (the SASS census and ncu name the scheme).
template <bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(MB)) gemv_w8a16_fp8_rows(const RowsParams p) {
  rows_body<kFp8, BF16, MB, false>(p);
}
template <bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(MB)) gemv_w8a16_int8_rows(const RowsParams p) {
  rows_body<kInt8, BF16, MB, false>(p);
}
template <int F, bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(MB)) gemv_rows_loads(const RowsParams p) {
  rows_body<F, BF16, MB, true>(p);
}

// Tokens per CTA for M tokens: 1, 2, else 4 (blocks of 4).
__host__ __device__ constexpr int mb_for(int M) { return M <= 1 ? 1 : (M == 2 ? 2 : 4); }

template <int F, bool BF16, int MB, bool LOADS_ONLY>
inline const void* kernel_of() {
  if constexpr (LOADS_ONLY) {
    return reinterpret_cast<const void*>(&gemv_rows_loads<F, BF16, MB>);
  } else if constexpr (F == kFp8) {
    return reinterpret_cast<const void*>(&gemv_w8a16_fp8_rows<BF16, MB>);
  } else {
    return reinterpret_cast<const void*>(&gemv_w8a16_int8_rows<BF16, MB>);
  }
}

// The kernel for (fmt, bf16, M, loads_only), or nullptr for a format without a rows kernel.
inline const void* find_kernel(int fmt, bool bf16, int M, bool loads_only) {
  const int mb = mb_for(M);
  auto by_mb = [&](auto f, auto b, auto lo) -> const void* {
    constexpr int F = decltype(f)::value;
    constexpr bool B = decltype(b)::value;
    constexpr bool L = decltype(lo)::value;
    return mb == 1 ? kernel_of<F, B, 1, L>() : mb == 2 ? kernel_of<F, B, 2, L>() : kernel_of<F, B, 4, L>();
  };
  auto by_lo = [&](auto f, auto b) -> const void* {
    return loads_only ? by_mb(f, b, std::true_type{}) : by_mb(f, b, std::false_type{});
  };
  auto by_b = [&](auto f) -> const void* {
    return bf16 ? by_lo(f, std::true_type{}) : by_lo(f, std::false_type{});
  };
  if (fmt == kFp8) return by_b(std::integral_constant<int, kFp8>{});
  if (fmt == kInt8) return by_b(std::integral_constant<int, kInt8>{});
  return nullptr;
}

inline cudaError_t occupancy(int fmt, bool bf16, int M, bool loads_only, int* ctas_per_sm) {
  const void* k = find_kernel(fmt, bf16, M, loads_only);
  if (k == nullptr) return cudaErrorInvalidValue;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, k, kThreads, 0);
}

// The loads-only kernels need fewer registers than the GEMV, so alone an SM would hold more of
// them. Their launch pads dynamic shared memory (carveout max shared) so that an SM holds exactly
// the GEMV's CTAs per SM; *occ gets the occupancy the padded kernel has (the caller checks it).
// Attributes are set once per (kernel, pad).
inline cudaError_t pad_loads(const void* k, int ctas, int* pad, int* occ) {
  int dev = 0, per_sm = 0, optin = 0, reserved = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev);
  if (e != cudaSuccess) return e;
  int b = per_sm / (ctas < 1 ? 1 : ctas) - reserved - kWarps * 4 * kRows * 4;   // less the static smem
  b = b > optin ? optin : (b < 0 ? 0 : b / 128 * 128);
  static const void* seen_k[16] = {};
  static int seen_pad[16] = {}, seen_occ[16] = {};
  for (int i = 0; i < 16; ++i) {
    if (seen_k[i] == k && seen_pad[i] == b) {
      *pad = b;
      *occ = seen_occ[i];
      return cudaSuccess;
    }
  }
  e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, b);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                 cudaSharedmemCarveoutMaxShared);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, k, kThreads, b);
  if (e != cudaSuccess) return e;
  static int next = 0;
  seen_k[next] = k;
  seen_pad[next] = b;
  seen_occ[next] = *occ;
  next = (next + 1) % 16;
  *pad = b;
  return cudaSuccess;
}

// grid: (ceil(N / kRows), ceil(M / mb_for(M))), block kThreads. The GEMV takes no dynamic shared
// memory; the loads-only twin is padded to the GEMV's occupancy (*occ: what it ran at; may be null).
inline cudaError_t launch(int fmt, bool bf16, bool loads_only, const RowsParams& p, cudaStream_t stream,
                          int* occ = nullptr) {
  const void* k = find_kernel(fmt, bf16, p.M, loads_only);
  if (k == nullptr || p.N < 1 || p.M < 1 || p.K < kGroupK || p.K % kGroupK) return cudaErrorInvalidValue;
  const int mb = mb_for(p.M);
  const dim3 grid((p.N + kRows - 1) / kRows, (p.M + mb - 1) / mb);
  int pad = 0;
  if (loads_only) {
    int want = 0, got = 0;
    cudaError_t e = occupancy(fmt, bf16, p.M, false, &want);
    if (e == cudaSuccess) e = pad_loads(k, want, &pad, &got);
    if (e != cudaSuccess) return e;
    if (occ != nullptr) *occ = got;
  } else if (occ != nullptr) {
    cudaError_t e = occupancy(fmt, bf16, p.M, false, occ);
    if (e != cudaSuccess) return e;
  }
  RowsParams q = p;
  void* args[] = {&q};
  return cudaLaunchKernel(k, grid, dim3(kThreads), args, static_cast<size_t>(pad), stream);
}

}  // namespace rows
}  // namespace fp8lab
