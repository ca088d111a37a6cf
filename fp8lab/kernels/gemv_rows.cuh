// gemv_rows.cuh -- fp8lab's row-major decode GEMV for 8-bit and 4-bit weights (issue 22, target 1:
// decode at the copy rate), the weight-only arms' "rows" schedule.
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
// * INT4 (value = code - 8, two codes per byte, the even k in the low nibble): a thread's word holds
//   32 codes, so a K block is 4096 and the thread reads 32 activations. At 2 codes per byte the fp32
//   path above costs ~5 SASS instructions per code, more than the ~3.9 the issue rate allows at the
//   copy rate, so INT4 dequantises with Marlin's bit trick on fp16 pairs and multiplies and sums in
//   fp16 (HFMA2, ~2.2 instructions per code; dot32_int4), 16 products per fp16 sum, then fp32. The
//   activations are scaled per thread by a power of two into [1, 2) before fp16 (act32_to_h2), so
//   no bf16 input overflows fp16 and no sum of 16 products exceeds 256.
// * NVFP4 (e2m1 codes packed as INT4's; one e4m3 scale per (row, 16 K); an fp32 global scale in
//   out_factor): e2m1_pairs puts the codes into fp16 pairs as e2m1 x 2^-14, exactly, by two LOP3s, two
//   byte permutes and two masks per 8 codes (no table, no conversion); HFMA2 sums 8 products per fp16
//   lane on activations scaled into [2^13, 2^14) (products in fp16's normal range); each block of 16
//   is multiplied by its e4m3 scale in fp16 (exact; the pair of scales decoded by one
//   cvt.rn.f16x2.e4m3x2), the thread's two blocks added there, then fp32 (dot32_nvfp4).
// * The 4-bit formats' form of 8 rows per CTA (kRows8, MB = 1, "cuda8"): a thread's activation loads
//   and conversion to fp16 pairs then serve 8 rows, and (rows8 only: registers allow) its loads go
//   without per-row predicates: sm_90 SASS per K block, INT4 494 instructions at 4 rows and 735 at 8,
//   NVFP4 526 and 794: 2.9 / 3.1 per code instead of 3.9 / 4.1 (16 rows: 3.0 / 3.3, worse). Four CTAs
//   of up to 128 registers per SM keep the same 64 KB of weight words in flight per SM as eight of 4.
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

enum Format : int { kFp8 = 0, kInt8 = 1, kNvfp4 = 2, kInt4 = 3 };   // gemv_w16.cuh's ids of the same formats

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 4;                     // rows of N per CTA
constexpr int kRows8 = 8;                    // rows per CTA of the 4-bit formats' opt-in form ("cuda8")
constexpr int kGroupK = 128;                 // K per group scale (nvfp4: kGroupNv)
constexpr int kGroupNv = 16;                 // nvfp4: K per e4m3 block scale

__host__ __device__ constexpr bool four_bit(int F) { return F == kInt4 || F == kNvfp4; }

// K elements in one 16-byte weight word (a thread's share of a row per K block): 16 bytes, 32 nibbles
__host__ __device__ constexpr int elems(int F) { return four_bit(F) ? 32 : 16; }

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

// out[idx] = v, rounded once to the activation dtype
template <bool BF16>
__device__ __forceinline__ void store_out(void* out, size_t idx, float v) {
  if constexpr (BF16) {
    static_cast<__nv_bfloat16*>(out)[idx] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(out)[idx] = __float2half_rn(v);
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

// 32 int4 codes (one word; nibble j of 32-bit word i = k + 8 i + j, the low nibble first; value =
// code - 8) dotted with 32 activations given as fp16 pairs xh[4 i + j] = (x[8 i + j], x[8 i + j + 4]).
// Marlin's bit trick on packed halves: one LOP3 puts nibbles j and j + 4 of a word into the low
// mantissa bits of two fp16 1024s (1024 + code, exact), another nibbles j + 1 and j + 5 into bits 4-7
// (1024 + 16 code); HSUB2 / HFMA2 make them code - 8 (exact); HFMA2 multiplies by the activations and
// sums 16 products per fp16 accumulator, then fp32. ~2.2 SASS instructions per weight at 4 rows per
// CTA where the fp32 dequants of scripts/probes/decode_rows.py took ~5.
__device__ __forceinline__ float dot32_int4(const uint4& w, const __half2 (&xh)[16]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const __half2 off = __halves2half2(__ushort_as_half(0x6408u), __ushort_as_half(0x6408u));  // 1032
  const __half2 s16 = __halves2half2(__ushort_as_half(0x2C00u), __ushort_as_half(0x2C00u));  // 1/16
  const __half2 m72 = __halves2half2(__ushort_as_half(0xD480u), __ushort_as_half(0xD480u));  // -72
  __half2 a0 = __float2half2_rn(0.f), a1 = a0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t q = ws[i];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t lo, hi;   // (q & mask) | 1024s in one LOP3 each (C++ gives two: one immediate per LOP3)
      asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(lo) : "r"(q), "n"(0x000F000F), "n"(0x64006400));
      asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(hi) : "r"(q), "n"(0x00F000F0), "n"(0x64006400));
      const __half2 vl = __hsub2(*reinterpret_cast<const __half2*>(&lo), off);
      const __half2 vh = __hfma2(*reinterpret_cast<const __half2*>(&hi), s16, m72);
      a0 = __hfma2(vl, xh[4 * i + 2 * h], a0);
      a1 = __hfma2(vh, xh[4 * i + 2 * h + 1], a1);
      q >>= 8;
    }
  }
  const float2 f = __half22float2(__hadd2(a0, a1));
  return f.x + f.y;
}

// A thread's 32 fp32 activations -> fp16 pairs for dot32_int4 / dot32_nvfp4, scaled by the power of
// two 2^(T - e) that puts their largest magnitude in [2^T, 2^(T + 1)): any bf16 / fp16 input fits
// fp16. int4 (T = 0): a dot of 32 products (|code - 8| <= 8) stays below 512. nvfp4 (T = 13): its
// weights enter as e2m1 x 2^-14 (e2m1_pairs), so the products lie in [2^-2, 12] where fp16 is normal,
// and a sum of 16 stays below 192. Returns 2^(e - T), which multiplies the dot back (exact).
template <int T = 0>
__device__ __forceinline__ float act32_to_h2(const float (&xf)[32], __half2 (&xh)[16]) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(xf[i]));
  // biased exponent of amax, clamped so both 2^(127 + T - e) and 2^(e - T - 127) are normal floats
  const uint32_t e = min(max((__float_as_uint(amax) >> 23) & 0xFFu, 1u + T), 253u);
  const float inv = __uint_as_float((254u + T - e) << 23);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) xh[4 * i + j] = __floats2half2_rn(xf[8 * i + j] * inv, xf[8 * i + j + 4] * inv);
  }
  return __uint_as_float((e - T) << 23);
}

// 8 e2m1 codes (nibble j of q = k + j, the low nibble first) -> four fp16 pairs of e2m1 x 2^-14, exact:
// h[j] = (code j, code j + 4) for j = 0, 1, 2, 3 (dot32_int4's pairing of activations). A code's sign
// goes to bit 15 of its half and E1 E0 M to bits 11..9 (exponent bits 1..0, the mantissa's top bit),
// which is e2m1 x 2^-14 for every code, subnormals (+-0.5) included. One LOP3 builds four codes at
// once, each as the high byte of its half ("S000EEM0"): the even codes from x = qe << 4 (sign at bit 7
// of each byte) and y = qe << 1 (E E M at bits 3..1), qe = q & 0x0F0F0F0F; wherever the mask keeps a
// bit one of x, y is zero there, so (x | y) & mask is exact. The odd codes likewise from qo =
// q & 0xF0F0F0F0 and qo >> 3. A byte permute (codes 0, 4 / 1, 5) or a mask (2, 6 / 3, 7) then puts
// two codes into the high bytes of a pair: 11 instructions per 8 codes.
__device__ __forceinline__ void e2m1_pairs(uint32_t q, uint32_t (&h)[4]) {
  // the masks in PTX: else the compiler rewrites (q & m) << s as (q << s) & (m << s), one mask per
  // shift (12 instructions per 8 codes instead of 11)
  uint32_t qe, qo;
  asm("and.b32 %0, %1, 0x0F0F0F0F;" : "=r"(qe) : "r"(q));
  asm("and.b32 %0, %1, 0xF0F0F0F0;" : "=r"(qo) : "r"(q));
  uint32_t ue, uo;   // (a | b) & c in one LOP3 each
  asm("lop3.b32 %0, %1, %2, %3, 0xa8;" : "=r"(ue) : "r"(qe << 4), "r"(qe << 1), "n"(0x8E8E8E8E));
  asm("lop3.b32 %0, %1, %2, %3, 0xa8;" : "=r"(uo) : "r"(qo), "r"(qo >> 3), "n"(0x8E8E8E8E));
  h[0] = __byte_perm(ue, 0u, 0x2404u);   // bytes 0, 2 -> high bytes: codes 0, 4
  h[1] = __byte_perm(uo, 0u, 0x2404u);   // codes 1, 5
  h[2] = ue & 0xFF00FF00u;               // codes 2, 6
  h[3] = uo & 0xFF00FF00u;               // codes 3, 7
}

// 32 nvfp4 codes (one word; nibble j of 32-bit word i = k + 8 i + j) dotted with act32_to_h2<13>'s
// pairs: two blocks of 16 (words 0-1, 2-3), each summed in one fp16 pair over its 16 products (8 per
// lane), scaled by its e4m3 block scale in fp16 (sraw = the two scale bytes, the low byte the first
// block's; decoded by one cvt.rn.f16x2.e4m3x2, each broadcast to both lanes) and the two blocks added
// there; then fp32. Exact where the seed's kernels are: e2m1 x e4m3 has <= 6 significant bits. No
// overflow: |x'| < 2^14 and |e2m1 x 2^-14| <= 6 x 2^-14 make each product < 6, a lane's 8 < 48, times
// a scale <= 448 < 21504, two blocks < 43008 < 65504.
// Returns sum over blocks of s_b x sum_k x'_k e2m1_k 2^-14.
__device__ __forceinline__ float dot32_nvfp4(const uint4& w, uint32_t sraw, const __half2 (&xh)[16]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const __half2_raw sh = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(sraw & 0xffffu), __NV_E4M3);
  const __half2 s = *reinterpret_cast<const __half2*>(&sh);
  __half2 g[2];
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    __half2 a = __float2half2_rn(0.f);
#pragma unroll
    for (int i = 2 * b; i < 2 * b + 2; ++i) {
      uint32_t h[4];
      e2m1_pairs(ws[i], h);
#pragma unroll
      for (int j = 0; j < 4; ++j) a = __hfma2(*reinterpret_cast<const __half2*>(&h[j]), xh[4 * i + j], a);
    }
    g[b] = a;
  }
  const __half2 r = __hfma2(g[1], __high2half2(s), __hmul2(g[0], __low2half2(s)));
  const float2 f = __half22float2(r);
  return f.x + f.y;
}

// One CTA: rows n0 .. n0 + R - 1, tokens m0 .. m0 + MB - 1 (fewer in the last block).
template <int F, bool BF16, int MB, bool LOADS_ONLY, int R = kRows>
__device__ __forceinline__ void rows_body(const RowsParams& p) {
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * R;
  const int m0 = blockIdx.y * MB;
  const int mb = min(MB, p.M - m0);
  const int groups = p.K / kGroupK;
  const uint16_t* x16 = static_cast<const uint16_t*>(p.x);

  float acc[MB][R];
#pragma unroll
  for (int m = 0; m < MB; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;
  }
  uint32_t hx = 0u;

  constexpr int E = elems(F);                     // K per thread per block
  constexpr int kBlockK = kThreads * E;           // K per block: one 16-byte word per row per thread
  const size_t row_bytes = four_bit(F) ? static_cast<size_t>(p.K) / 2 : static_cast<size_t>(p.K);

  // The 8-row form: rows past N read row N - 1 (the last CTA's; their outputs are never stored), so
  // the K loop has no per-row predicate: each row's weight and scale addresses are a CTA-uniform
  // offset plus the thread's K offset (sm_90 SASS per K block: INT4 784 -> 735, NVFP4 856 -> 794,
  // where a predicated row recomputed its address from the parameters each step). Not at 4 rows:
  // under their 64-register bound the offsets spilled.
  constexpr bool kHoist = R == kRows8;
  size_t wrow[R], srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const size_t n = static_cast<size_t>(min(n0 + r, p.N - 1));
    wrow[r] = n * row_bytes;
    // nvfp4: (N, K / 16) e4m3 bytes, two per 16-bit word (K / 16 even); else (N, K / 128) 16-bit scales
    srow[r] = F == kNvfp4 ? n * static_cast<size_t>(p.K / kGroupNv / 2) : n * static_cast<size_t>(groups);
  }

  for (int kb = 0; kb < p.K; kb += kBlockK) {
    const int k0 = kb + tid * E;
    const bool kin = k0 < p.K;                    // K % 128 == 0: a thread's K lies all in or all out
    const size_t wk = four_bit(F) ? k0 / 2 : k0;  // the thread's byte offset in a row
    // its scale word: nvfp4 the pair of k0's two blocks of 16 (k0 / 16 even), else k0's group of 128
    const size_t sk = F == kNvfp4 ? k0 / (2 * kGroupNv) : k0 / kGroupK;
    uint4 wv[R];
    uint32_t sraw[R];                             // the rows' scale bits: a 16-bit group scale, or nvfp4's two e4m3
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const bool ok = kin && (kHoist || n0 + r < p.N);
      const size_t wo = kHoist ? wrow[r] : static_cast<size_t>(n0 + r) * row_bytes;
      wv[r] = ok ? ldg_stream(p.w + wo + wk) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const bool ok = kin && (kHoist || n0 + r < p.N);
      const size_t so = kHoist ? srow[r]
                               : static_cast<size_t>(n0 + r) * (F == kNvfp4 ? p.K / kGroupNv / 2 : groups);
      sraw[r] = ok ? __ldg(p.s + so + sk) : 0u;
    }
    float sc[R];                                  // 16-bit group scales as fp32 (nvfp4: unused)
#pragma unroll
    for (int r = 0; r < R; ++r) sc[r] = F == kNvfp4 ? 0.f : scalar16<BF16>(static_cast<uint16_t>(sraw[r]));
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      if (kin && m < mb) {
        const uint4* xp = reinterpret_cast<const uint4*>(x16 + static_cast<size_t>(m0 + m) * p.K + k0);
        uint4 xw[E / 8];                          // E activations, 8 per 16-byte word
#pragma unroll
        for (int i = 0; i < E / 8; ++i) xw[i] = __ldg(xp + i);
        if constexpr (LOADS_ONLY) {
#pragma unroll
          for (int i = 0; i < E / 8; ++i) hx ^= xw[i].x ^ xw[i].y ^ xw[i].z ^ xw[i].w;
#pragma unroll
          for (int r = 0; r < R; ++r)
            hx ^= wv[r].x ^ wv[r].y ^ wv[r].z ^ wv[r].w ^ sraw[r];
        } else if constexpr (F == kNvfp4) {
          float xf[32];
#pragma unroll
          for (int i = 0; i < 4; ++i) act8<BF16>(xw[i], xf + 8 * i);
          __half2 xh[16];
          const float back = act32_to_h2<13>(xf, xh);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[m][r] = fmaf(dot32_nvfp4(wv[r], sraw[r], xh), back, acc[m][r]);
        } else if constexpr (F == kInt4) {
          float xf[32];
#pragma unroll
          for (int i = 0; i < 4; ++i) act8<BF16>(xw[i], xf + 8 * i);
          __half2 xh[16];
          const float back = act32_to_h2(xf, xh);
#pragma unroll
          for (int r = 0; r < R; ++r)
            acc[m][r] = fmaf(dot32_int4(wv[r], xh), sc[r] * back, acc[m][r]);
        } else {
          const uint4 xa = xw[0], xb = xw[1];
          float xf[16];
          act8<BF16>(xa, xf);
          act8<BF16>(xb, xf + 8);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[m][r] = fmaf(dot16<F>(wv[r], xf), sc[r], acc[m][r]);
        }
      }
    }
  }

  if constexpr (LOADS_ONLY) {
    if (hx == p.key) p.sink[(static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kThreads + tid] = hx;
  } else {
    __shared__ float red[kWarps][MB * R];
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int m = 0; m < MB; ++m) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float v = acc[m][r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[warp][m * R + r] = v;
      }
    }
    __syncthreads();
    if (tid < MB * R) {
      const int m = tid / R, r = tid % R;
      if (m < mb && n0 + r < p.N) {
        float v = 0.f;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) v += red[i][tid];
        store_out<BF16>(p.out, static_cast<size_t>(m0 + m) * p.N + n0 + r, v * p.out_factor);
      }
    }
  }
}

// CTAs per SM the launch bounds ask for: ptxas then keeps 8-bit MB = 1 at <= 56 registers (nine CTAs
// per SM, the probe's occupancy) and gives MB = 2 / 4 the registers they need without spills. INT4
// holds a thread's 32 activations as fp16 pairs beside its four rows' words: eight CTAs per SM at
// MB = 1 (64 registers; asked for nine, ptxas spilled 64 bytes); nvfp4 the same. The 4-bit formats'
// 8-row form (R = 8, MB = 1): four CTAs per SM (<= 128 registers), the same 64 KB of weight words in
// flight per SM as eight CTAs of 4 rows, with each thread's activation conversion serving 8 rows.
__host__ __device__ constexpr int min_ctas(int F, int MB, int R = kRows) {
  return R == kRows8 ? 4 : (MB == 1 ? (four_bit(F) ? 8 : 9) : (MB == 2 ? (F == kNvfp4 ? 5 : 6) : 4));
}

// One __global__ per format, named after the arm (the SASS census and ncu name the scheme).
template <bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(kFp8, MB)) gemv_w8a16_fp8_rows(const RowsParams p) {
  rows_body<kFp8, BF16, MB, false>(p);
}
template <bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(kInt8, MB)) gemv_w8a16_int8_rows(const RowsParams p) {
  rows_body<kInt8, BF16, MB, false>(p);
}
template <bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(kInt4, MB)) gemv_w4a16_int4_rows(const RowsParams p) {
  rows_body<kInt4, BF16, MB, false>(p);
}
template <bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(kNvfp4, MB)) gemv_w4a16_nvfp4_rows(const RowsParams p) {
  rows_body<kNvfp4, BF16, MB, false>(p);
}
template <int F, bool BF16, int MB>
__global__ void __launch_bounds__(kThreads, min_ctas(F, MB)) gemv_rows_loads(const RowsParams p) {
  rows_body<F, BF16, MB, true>(p);
}
// The 4-bit formats' 8-row form ("cuda8"): one token per CTA (blockIdx.y walks the tokens).
template <bool BF16>
__global__ void __launch_bounds__(kThreads, min_ctas(kInt4, 1, kRows8)) gemv_w4a16_int4_rows8(const RowsParams p) {
  rows_body<kInt4, BF16, 1, false, kRows8>(p);
}
template <bool BF16>
__global__ void __launch_bounds__(kThreads, min_ctas(kNvfp4, 1, kRows8)) gemv_w4a16_nvfp4_rows8(const RowsParams p) {
  rows_body<kNvfp4, BF16, 1, false, kRows8>(p);
}
template <int F, bool BF16>
__global__ void __launch_bounds__(kThreads, min_ctas(F, 1, kRows8)) gemv_rows8_loads(const RowsParams p) {
  rows_body<F, BF16, 1, true, kRows8>(p);
}

// Tokens per CTA for M tokens: 1, 2, else 4 (blocks of 4).
__host__ __device__ constexpr int mb_for(int M) { return M <= 1 ? 1 : (M == 2 ? 2 : 4); }

template <int F, bool BF16, int MB, bool LOADS_ONLY>
inline const void* kernel_of() {
  if constexpr (LOADS_ONLY) {
    return reinterpret_cast<const void*>(&gemv_rows_loads<F, BF16, MB>);
  } else if constexpr (F == kFp8) {
    return reinterpret_cast<const void*>(&gemv_w8a16_fp8_rows<BF16, MB>);
  } else if constexpr (F == kInt4) {
    return reinterpret_cast<const void*>(&gemv_w4a16_int4_rows<BF16, MB>);
  } else if constexpr (F == kNvfp4) {
    return reinterpret_cast<const void*>(&gemv_w4a16_nvfp4_rows<BF16, MB>);
  } else {
    return reinterpret_cast<const void*>(&gemv_w8a16_int8_rows<BF16, MB>);
  }
}

template <int F, bool BF16, bool LOADS_ONLY>
inline const void* kernel8_of() {
  if constexpr (!four_bit(F)) {
    return nullptr;                               // 8-bit formats have no 8-row form
  } else if constexpr (LOADS_ONLY) {
    return reinterpret_cast<const void*>(&gemv_rows8_loads<F, BF16>);
  } else if constexpr (F == kInt4) {
    return reinterpret_cast<const void*>(&gemv_w4a16_int4_rows8<BF16>);
  } else {
    return reinterpret_cast<const void*>(&gemv_w4a16_nvfp4_rows8<BF16>);
  }
}

// pick(f, b, lo) with the run-time (fmt, bf16, loads_only) as compile-time constants (f, b, lo:
// std::integral_constant), for both forms' kernel tables; nullptr for a format without rows kernels
// (WITH_NVFP4 = false: the tensor-core form, which has no nvfp4 kernels).
template <bool WITH_NVFP4 = true, class Pick>
inline const void* by_format(int fmt, bool bf16, bool loads_only, Pick pick) {
  auto by_lo = [&](auto f, auto b) -> const void* {
    return loads_only ? pick(f, b, std::true_type{}) : pick(f, b, std::false_type{});
  };
  auto by_b = [&](auto f) -> const void* {
    return bf16 ? by_lo(f, std::true_type{}) : by_lo(f, std::false_type{});
  };
  if (fmt == kFp8) return by_b(std::integral_constant<int, kFp8>{});
  if (fmt == kInt8) return by_b(std::integral_constant<int, kInt8>{});
  if (fmt == kInt4) return by_b(std::integral_constant<int, kInt4>{});
  if constexpr (WITH_NVFP4) {
    if (fmt == kNvfp4) return by_b(std::integral_constant<int, kNvfp4>{});
  }
  return nullptr;
}

// The kernel for (fmt, bf16, M, loads_only), or nullptr for a format without a rows kernel.
inline const void* find_kernel(int fmt, bool bf16, int M, bool loads_only) {
  const int mb = mb_for(M);
  return by_format(fmt, bf16, loads_only, [&](auto f, auto b, auto lo) -> const void* {
    constexpr int F = decltype(f)::value;
    constexpr bool B = decltype(b)::value;
    constexpr bool L = decltype(lo)::value;
    return mb == 1 ? kernel_of<F, B, 1, L>() : mb == 2 ? kernel_of<F, B, 2, L>() : kernel_of<F, B, 4, L>();
  });
}

// The 8-row kernel for (fmt, bf16, loads_only): the 4-bit formats only, else nullptr.
inline const void* find_kernel8(int fmt, bool bf16, bool loads_only) {
  return by_format(fmt, bf16, loads_only, [&](auto f, auto b, auto lo) -> const void* {
    return kernel8_of<decltype(f)::value, decltype(b)::value, decltype(lo)::value>();
  });
}

inline cudaError_t occupancy(int fmt, bool bf16, int M, bool loads_only, int* ctas_per_sm, bool rows8 = false) {
  const void* k = rows8 ? find_kernel8(fmt, bf16, loads_only) : find_kernel(fmt, bf16, M, loads_only);
  if (k == nullptr) return cudaErrorInvalidValue;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, k, kThreads, 0);
}

// The loads-only kernels may need fewer registers than the GEMV, so alone an SM could hold more of
// them. Then their launch pads dynamic shared memory (carveout max shared) so that an SM holds
// exactly the GEMV's CTAs per SM; *occ gets the occupancy the padded kernel has (the caller checks it).
// Attributes are set once per (kernel, pad).
inline cudaError_t pad_loads(const void* k, int ctas, int* pad, int* occ, int threads = kThreads) {
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
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, k, threads, b);
  if (e != cudaSuccess) return e;
  static int next = 0;
  seen_k[next] = k;
  seen_pad[next] = b;
  seen_occ[next] = *occ;
  next = (next + 1) % 16;
  *pad = b;
  return cudaSuccess;
}

// Launch k_gemv (or, loads_only, its twin k_loads) on grid with blocks of threads. The GEMV takes no
// dynamic shared memory; the loads-only twin is padded to the GEMV's occupancy (*occ: what it ran
// at; may be null). Both forms (this file's CUDA-core kernels and gemv_rows_mma.cuh's) launch here.
inline cudaError_t launch_on(const void* k_gemv, const void* k_loads, bool loads_only, dim3 grid, const RowsParams& p,
                             cudaStream_t stream, int* occ, int threads = kThreads) {
  if (k_gemv == nullptr || k_loads == nullptr) return cudaErrorInvalidValue;
  const void* k = loads_only ? k_loads : k_gemv;
  int pad = 0;
  if (loads_only) {
    // padded only where the twin alone would hold more CTAs per SM than the GEMV: the padding's
    // max-shared carveout shrinks L1, where the GEMV's activations are cached (at K = 28672 an
    // unneeded pad made the twin stream 0.94 of copy beside the GEMV's 0.98, H200, 648d9df)
    int want = 0, got = 0, natural = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&want, k_gemv, threads, 0);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&natural, k_loads, threads, 0);
    if (e == cudaSuccess && natural != want) e = pad_loads(k, want, &pad, &got, threads);
    if (e != cudaSuccess) return e;
    if (natural == want) got = natural;
    if (occ != nullptr) *occ = got;
  } else if (occ != nullptr) {
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, k_gemv, threads, 0);
    if (e != cudaSuccess) return e;
  }
  RowsParams q = p;
  void* args[] = {&q};
  return cudaLaunchKernel(k, grid, dim3(threads), args, static_cast<size_t>(pad), stream);
}

// grid: (ceil(N / kRows), ceil(M / mb_for(M))), block kThreads; rows8 (the 4-bit formats' 8-row
// form): (ceil(N / kRows8), M).
inline cudaError_t launch(int fmt, bool bf16, bool loads_only, const RowsParams& p, cudaStream_t stream,
                          int* occ = nullptr, bool rows8 = false) {
  if (p.N < 1 || p.M < 1 || p.K < kGroupK || p.K % kGroupK) return cudaErrorInvalidValue;
  if (rows8) {
    if (p.M > 65535) return cudaErrorInvalidValue;
    const dim3 grid((p.N + kRows8 - 1) / kRows8, p.M);
    return launch_on(find_kernel8(fmt, bf16, false), find_kernel8(fmt, bf16, true), loads_only, grid, p, stream, occ);
  }
  const int mb = mb_for(p.M);
  const dim3 grid((p.N + kRows - 1) / kRows, (p.M + mb - 1) / mb);
  return launch_on(find_kernel(fmt, bf16, p.M, false), find_kernel(fmt, bf16, p.M, true), loads_only, grid, p,
                   stream, occ);
}

}  // namespace rows
}  // namespace fp8lab
