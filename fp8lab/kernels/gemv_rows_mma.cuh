// gemv_rows_mma.cuh -- the rows GEMV's tensor-core form (issue 22, target 1: at M = 16, >= 0.85 of
// the M = 1 rate), for FP8, INT8 and INT4 weights in the rows layout (gemv_rows.cuh, gemv_rows.py).
//
//   out[m, n] = out_factor * sum_k x[m, k] * value(w[n, k]) * s[n, k / 128]
//
// Why: the CUDA-core rows kernel does its products on the CUDA cores, work per weight byte x M, so
// from M = 2 on it falls behind (notebook 08, H200, 648d9df: 0.34-0.43 of copy at M = 4, 0.09-0.12 at
// M = 16), and gemv_w16's tiles (split-K / stream-K) stream 0.60-0.83 at M = 16. This form keeps the
// rows launch shape (small CTAs owning whole rows, weight as stored, no split-K, no workspace) and
// does the products with mma.sync.m16n8k16 (fp32 accumulators).
//
// * A CTA of W warps owns kRowsMma = 16 consecutive rows and 8 NT tokens (NT = 1 for M <= 8, else 2:
//   blocks of 16 tokens). The grid is 1-D, the token block fastest, so the CTAs that read the same
//   rows for other tokens run side by side and find them in L2.
// * W = 4, 8 or 16 (warps_for): 16 rows per CTA give few CTAs where N is small (llama3-8b down_proj,
//   N = 4096: 256 CTAs for 132 SMs), so W grows until the grid holds kTargetWarps warps (~ 132 SMs x
//   32 resident warps) or each warp would have fewer than two K steps; at NT = 2 W <= 8.
// * Warp w takes the 128-K steps w, w + W, ... (one scale group each). Per step thread (g, tq)
//   (g = lane / 4, tq = lane % 4) loads 16 bytes of rows g and g + 8 at K 16 tq and 64 + 16 tq
//   (ld.global.nc.L1::no_allocate: 8 rows x 64 contiguous bytes per warp load, 2 KB per warp per
//   step), the same 32 K of token g's activations (L1-cached, every row block reads them), and the
//   two rows' group scales; only then arithmetic.
// * K is permuted inside each mma, the same way for both operands (a dot product does not care):
//   the 4 bytes at K k .. k + 3 of a thread's word are its A operand at the mma's K 2 tq, 2 tq + 1
//   (a0 / a1: rows g / g + 8) and 2 tq + 8, 2 tq + 9 (a2 / a3); token g's activations at the same
//   K are its B operand (b0, b1). No shared memory, ldmatrix or shuffle in the K loop.
// * INT4 (two codes per byte, the even K in the low nibble): a row's 128 K are 64 bytes, so a thread
//   loads one 16-byte word per row and step (K 32 tq .. 32 tq + 31) and token g's 32 activations at
//   the same K; each 4-byte word (8 codes) feeds two mmas. Codes to the mma's type by byte permutes
//   under the 128 / 1024 magic number and one subtraction per pair (codes8_int4: exact).
// * Exact conversions: e4m3 by cvt.rn.f16x2.e4m3x2 (NaN codes stay NaN, as in the CUDA-core form),
//   for bf16 activations on to bf16 through fp32 (every e4m3 value is a bf16); int8 (offset binary)
//   by the fp16 1024 magic number (fp16) or the fp32 2^23 one then bf16 (values -128..127 are exact
//   in both). Activations go to the mma as they are (bf16 mma for bf16, fp16 for fp16).
// * Per step a fresh fp32 fragment (the step's 128 K = one group), promoted by the row's scale into
//   the running fp32 sum: the group scale multiplies an fp32 partial sum, as in the CUDA-core form.
// * Rows past N and tokens past M are clamped to the last one (an mma output depends on its own row
//   and column only; clamped outputs are never stored): no predicate in the K loop.
// * TM = 2 (form "mma32", opt-in): 32 rows per CTA, two 16-row tiles per warp step sharing one load
//   of the activations (TM = 1 loads 2 activation bytes per weight byte at 16 tokens; L2 serves them
//   where 16 tokens x K do not fit in L1). 20 (NT = 1) / 16 (NT = 2) warps per SM, W = 4 or 8.
// * The four warps' sums meet in shared memory; 16 consecutive threads store 16 consecutive n.
// * The loads-only twin issues the same loads on the same grid and XORs them (notebook 08's pattern
//   column for this form). Alone it needs fewer registers than its GEMV (52 / 72 against 64 / 80), so
//   an SM would hold more of its CTAs at W = 4; padding its shared memory to match (launch_on) asks
//   for a max-shared carveout, which left the activations little L1 (H100, b4cb22c: twin 0.54-0.75 of
//   copy where its GEMV streamed 0.78-0.93). So the twin keeps kTwinKeep(NT) dummy words live across
//   the K loop, which puts it in its GEMV's register allocation (CTAs per SM equal at every W; a CPU
//   test checks it from cuobjdump -res-usage) and launch_on has nothing to pad.
#pragma once

#include "common/ptx.cuh"
#include "gemv_rows.cuh"

namespace fp8lab {
namespace rows {

constexpr int kRowsMma = 16;                 // rows of N per CTA (the mma's M)
constexpr int kStepK = 128;                  // K per warp step: one group scale

// Tokens per CTA in blocks of 8 (the mma's N): 1 block up to M = 8, else 2.
__host__ __device__ constexpr int nt_for(int M) { return M <= 8 ? 1 : 2; }

// Warps in the grid W grows towards (132 SMs x 32 resident warps, rounded down).
constexpr long long kTargetWarps = 4096;

// Warps per CTA for (N, M, K) at TM 16-row tiles per CTA: the smallest of 4, 8, 16 (8 at NT = 2 or
// TM = 2) that puts kTargetWarps warps in the grid, no larger than leaves each warp two K steps.
__host__ __device__ inline int warps_for(int N, int M, int K, int tm = 1) {
  const int tok = 8 * nt_for(M), rows = 16 * tm;
  const long long ctas = static_cast<long long>((N + rows - 1) / rows) * ((M + tok - 1) / tok);
  const int top = nt_for(M) == 1 && tm == 1 ? 16 : 8;
  int w = 4;
  while (w < top && ctas * w < kTargetWarps && K / 128 >= 4 * w) w *= 2;
  return w;
}
// CTAs per SM the launch bounds ask for: 32 (NT = 1) or 24 (NT = 2) warps per SM whatever W. NT = 1:
// 64 registers, no local memory in the K loop (the FP8 fp16 kernel spills one word outside it).
// NT = 2: 80 registers, one word stored and reloaded per step (12 bytes spilled, L1-resident); at
// 20 warps per SM (94 registers) nothing spills, but an SM keeps a sixth fewer weight bytes in flight.
__host__ __device__ constexpr int min_ctas_mma(int NT, int TM, int W) { return (TM == 2 ? (NT == 1 ? 20 : 16) : NT == 1 ? 32 : 24) / W; }

// Dummy words the loads-only twin keeps live across its K loop (see the header): it then takes 62
// registers at NT = 1 (allocated as 64, the GEMV's) and 80 at NT = 2 (the GEMV's; sm_90, nvcc 13).
__host__ __device__ constexpr int kTwinKeep(int F, int NT, int TM) {
  return (TM == 2 ? (NT == 1 ? 16 : 24) : NT == 1 ? 8 : 6) + (F == kInt4 ? (TM == 2 ? (NT == 1 ? 32 : 16) : NT == 1 ? 8 : 6) : 0);
}

// Two fp16 (bits) -> two bf16 (bits), through fp32: exact for every value an e4m3 code decodes to.
__device__ __forceinline__ uint32_t f16x2_to_bf16x2(uint32_t h) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Four weight codes (bytes 0..3 = K k .. k + 3) -> the mma's 16-bit type: lo = (k, k + 1),
// hi = (k + 2, k + 3), the lower K in the lower half.
template <int F, bool BF16>
__device__ __forceinline__ void codes4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if constexpr (F == kFp8) {
    ptx::e4m3x4_to_f16x2(w, lo, hi);
    if constexpr (BF16) {
      lo = f16x2_to_bf16x2(lo);
      hi = f16x2_to_bf16x2(hi);
    }
  } else if constexpr (!BF16) {
    // byte into the low mantissa of fp16 1024 (1024 + code, exact), minus 1152 = value code - 128
    const uint32_t a = __byte_perm(w, 0x64646464u, 0x4140u), b = __byte_perm(w, 0x64646464u, 0x4342u);
    const __half2 off = __halves2half2(__ushort_as_half(0x6480u), __ushort_as_half(0x6480u));
    const __half2 l = __hsub2(*reinterpret_cast<const __half2*>(&a), off);
    const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&b), off);
    lo = *reinterpret_cast<const uint32_t*>(&l);
    hi = *reinterpret_cast<const uint32_t*>(&h);
  } else {
    // byte j into the low mantissa of fp32 2^23 (2^23 + code), minus 2^23 + 128; then bf16 (exact)
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u + j)) - 8388736.0f;
    const __nv_bfloat162 l = __floats2bfloat162_rn(v[0], v[1]), h = __floats2bfloat162_rn(v[2], v[3]);
    lo = *reinterpret_cast<const uint32_t*>(&l);
    hi = *reinterpret_cast<const uint32_t*>(&h);
  }
}

// Eight int4 codes (nibble j of w = K k + j, the low nibble first; value = code - 8) -> four pairs of
// the mma's 16-bit type, (k, k + 1), (k + 2, k + 3), (k + 4, k + 5), (k + 6, k + 7), the lower K in the
// lower half: the codes' bytes are interleaved (k, k + 1, ...) by one byte permute, a second one puts
// each code under the high byte of 128 (bf16 0x43XX = 128 + code) or 1024 (fp16 0x64XX), and one
// subtraction of 136 / 1032 per pair leaves code - 8 (exact in both types).
template <bool BF16>
__device__ __forceinline__ void codes8_int4(uint32_t w, uint32_t (&p)[4]) {
  const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;    // codes k, k+2, ... / k+1, k+3, ...
  const uint32_t t0 = __byte_perm(lo, hi, 0x5140), t1 = __byte_perm(lo, hi, 0x7362);   // k .. k+3 / k+4 .. k+7
  constexpr uint32_t kMagic = BF16 ? 0x43434343u : 0x64646464u;
  p[0] = __byte_perm(t0, kMagic, 0x4140);
  p[1] = __byte_perm(t0, kMagic, 0x4342);
  p[2] = __byte_perm(t1, kMagic, 0x4140);
  p[3] = __byte_perm(t1, kMagic, 0x4342);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (BF16) {
      const __nv_bfloat162 off = __halves2bfloat162(__ushort_as_bfloat16(0x4308u), __ushort_as_bfloat16(0x4308u));
      const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&p[i]), off);
      p[i] = *reinterpret_cast<const uint32_t*>(&v);
    } else {
      const __half2 off = __halves2half2(__ushort_as_half(0x6408u), __ushort_as_half(0x6408u));
      const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&p[i]), off);
      p[i] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
}

// word i (0 .. 15) of four 16-byte words
__device__ __forceinline__ uint32_t word_of(const uint4 (&v)[4], int i) {
  const uint4& u = v[i >> 2];
  return (i & 3) == 0 ? u.x : (i & 3) == 1 ? u.y : (i & 3) == 2 ? u.z : u.w;
}

// One CTA of W warps: rows n0 .. n0 + 16 TM - 1, tokens m0 .. m0 + 8 NT - 1 (clamped to N - 1 / M - 1).
template <int F, bool BF16, int NT, int TM, int W, bool LOADS_ONLY>
__device__ __forceinline__ void rows_mma_body(const RowsParams& p) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  constexpr int kTok = 8 * NT, kR = 2 * TM;   // tokens per CTA; rows per thread (g + 8 r)
  // per row and step: int8 / fp8 two 16-byte loads (K 16 tq and 64 + 16 tq), int4 one (K 32 tq)
  constexpr int kH = F == kInt4 ? 1 : 2;
  constexpr int kStepBytes = F == kInt4 ? kStepK / 2 : kStepK;   // a row's bytes per step
  const int tblocks = (p.M + kTok - 1) / kTok;
  const int n0 = static_cast<int>(blockIdx.x / tblocks) * (kRowsMma * TM);
  const int m0 = static_cast<int>(blockIdx.x % tblocks) * kTok;
  const int groups = p.K / kGroupK;
  // one pointer per operand, advanced per step, and 32-bit offsets to the other rows / token blocks
  // (separate 64-bit pointers per row and token block spilled at NT = 2)
  const int ra = min(n0 + g, p.N - 1);
  const int tok0 = min(m0 + g, p.M - 1);
  const int row_bytes = F == kInt4 ? p.K / 2 : p.K;
  const uint8_t* wp = p.w + static_cast<size_t>(ra) * row_bytes + 16 * tq + warp * kStepBytes;
  const uint16_t* xp = static_cast<const uint16_t*>(p.x) + static_cast<size_t>(tok0) * p.K + (F == kInt4 ? 32 : 16) * tq +
                       warp * kStepK;
  const uint16_t* sp = p.s + static_cast<size_t>(ra) * groups + warp;
  int dw[kR], ds[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int d = min(n0 + g + 8 * r, p.N - 1) - ra;
    dw[r] = d * row_bytes;
    ds[r] = d * groups;
  }
  int dx[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) dx[j] = (min(m0 + g + 8 * j, p.M - 1) - tok0) * p.K;

  float acc[TM][NT][4];
#pragma unroll
  for (int t = 0; t < TM; ++t) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[t][j][c] = 0.f;
    }
  }
  uint32_t hx = 0u;
  uint32_t keep[LOADS_ONLY && kTwinKeep(F, NT, TM) > 0 ? kTwinKeep(F, NT, TM) : 1];
#pragma unroll
  for (int i = 0; i < (LOADS_ONLY ? kTwinKeep(F, NT, TM) : 1); ++i) keep[i] = p.key + static_cast<uint32_t>(tid * (2 * i + 1));

  // not unrolled: one step's loads per warp in flight, in the GEMV and its twin alike (ptxas unrolled
  // some by two and spilled)
#pragma unroll 1
  for (int st = warp; st < groups; st += W) {
    uint4 w[kR][kH];               // [row g + 8 r][K 16 tq, 64 + 16 tq (int4: K 32 tq)]
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int h = 0; h < kH; ++h) w[r][h] = ldg_stream(wp + dw[r] + 64 * h);
    }
    uint4 x[NT][4];                // [token block][8 activations each: K 16 tq, + 8, 64 + 16 tq, + 8 (int4: 32 tq + 8 i)]
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int off = F == kInt4 ? 8 * i : 64 * (i >> 1) + 8 * (i & 1);
        x[j][i] = __ldg(reinterpret_cast<const uint4*>(xp + dx[j] + off));
      }
    }
    uint16_t sc[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) sc[r] = __ldg(sp + ds[r]);
    wp += W * kStepBytes;
    xp += W * kStepK;
    sp += W;
    if constexpr (LOADS_ONLY) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int h = 0; h < kH; ++h) hx ^= w[r][h].x ^ w[r][h].y ^ w[r][h].z ^ w[r][h].w;
        hx ^= static_cast<uint32_t>(sc[r]) << (16 * (r & 1));
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) hx ^= x[j][i].x ^ x[j][i].y ^ x[j][i].z ^ x[j][i].w;
      }
#pragma unroll
      for (int i = 0; i < kTwinKeep(F, NT, TM); ++i) asm volatile("" : "+r"(keep[i]));   // live across the loop
    } else {
#pragma unroll
      for (int t = 0; t < TM; ++t) {
        float c[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) c[j][e] = 0.f;
        }
#pragma unroll
        for (int h = 0; h < kH; ++h) {
          const uint4& wa = w[2 * t][h];
          const uint4& wb = w[2 * t + 1][h];
          const uint32_t ua[4] = {wa.x, wa.y, wa.z, wa.w};
          const uint32_t ub[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if constexpr (F == kInt4) {   // K 32 tq + 8 q .. + 7: two mmas, activation words 4 q .. 4 q + 3
              uint32_t pa[4], pb[4];
              codes8_int4<BF16>(ua[q], pa);
              codes8_int4<BF16>(ub[q], pb);
#pragma unroll
              for (int u = 0; u < 2; ++u) {
                const uint32_t a[4] = {pa[2 * u], pb[2 * u], pa[2 * u + 1], pb[2 * u + 1]};
#pragma unroll
                for (int j = 0; j < NT; ++j)
                  ptx::mma16816<BF16>(c[j], a, word_of(x[j], 4 * q + 2 * u), word_of(x[j], 4 * q + 2 * u + 1));
              }
            } else {                      // K 64 h + 16 tq + 4 q .. + 3: activation words 8 h + 2 q, + 1
              uint32_t a[4];
              codes4<F, BF16>(ua[q], a[0], a[2]);
              codes4<F, BF16>(ub[q], a[1], a[3]);
#pragma unroll
              for (int j = 0; j < NT; ++j)
                ptx::mma16816<BF16>(c[j], a, word_of(x[j], 8 * h + 2 * q), word_of(x[j], 8 * h + 2 * q + 1));
            }
          }
        }
        const float fa = scalar16<BF16>(sc[2 * t]), fb = scalar16<BF16>(sc[2 * t + 1]);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          acc[t][j][0] = fmaf(c[j][0], fa, acc[t][j][0]);
          acc[t][j][1] = fmaf(c[j][1], fa, acc[t][j][1]);
          acc[t][j][2] = fmaf(c[j][2], fb, acc[t][j][2]);
          acc[t][j][3] = fmaf(c[j][3], fb, acc[t][j][3]);
        }
      }
    }
  }

  if constexpr (LOADS_ONLY) {
#pragma unroll
    for (int i = 0; i < kTwinKeep(F, NT, TM); ++i) hx ^= keep[i];
    if (hx == p.key) p.sink[static_cast<size_t>(blockIdx.x) * (W * 32) + tid] = hx;
  } else {
    constexpr int kRowsCta = kRowsMma * TM;
    __shared__ float red[W][kTok][kRowsCta];   // [warp][token][row]
#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) red[warp][8 * j + 2 * tq + (e & 1)][16 * t + g + 8 * (e >> 1)] = acc[t][j][e];
      }
    }
    __syncthreads();
    for (int e = tid; e < kTok * kRowsCta; e += W * 32) {
      const int t = e / kRowsCta, r = e % kRowsCta;
      if (m0 + t < p.M && n0 + r < p.N) {
        float v = 0.f;
#pragma unroll
        for (int i = 0; i < W; ++i) v += red[i][t][r];
        store_out<BF16>(p.out, static_cast<size_t>(m0 + t) * p.N + n0 + r, v * p.out_factor);
      }
    }
  }
}

template <bool BF16, int NT, int TM, int W>
__global__ void __launch_bounds__(W * 32, min_ctas_mma(NT, TM, W)) gemv_w8a16_fp8_rows_mma(const RowsParams p) {
  rows_mma_body<kFp8, BF16, NT, TM, W, false>(p);
}
template <bool BF16, int NT, int TM, int W>
__global__ void __launch_bounds__(W * 32, min_ctas_mma(NT, TM, W)) gemv_w8a16_int8_rows_mma(const RowsParams p) {
  rows_mma_body<kInt8, BF16, NT, TM, W, false>(p);
}
template <bool BF16, int NT, int TM, int W>
__global__ void __launch_bounds__(W * 32, min_ctas_mma(NT, TM, W)) gemv_w4a16_int4_rows_mma(const RowsParams p) {
  rows_mma_body<kInt4, BF16, NT, TM, W, false>(p);
}
template <int F, bool BF16, int NT, int TM, int W>
__global__ void __launch_bounds__(W * 32, min_ctas_mma(NT, TM, W)) gemv_rows_mma_loads(const RowsParams p) {
  rows_mma_body<F, BF16, NT, TM, W, true>(p);
}

template <int F, bool BF16, int NT, int TM, int W, bool LOADS_ONLY>
inline const void* mma_kernel_of() {
  if constexpr (LOADS_ONLY) {
    return reinterpret_cast<const void*>(&gemv_rows_mma_loads<F, BF16, NT, TM, W>);
  } else if constexpr (F == kFp8) {
    return reinterpret_cast<const void*>(&gemv_w8a16_fp8_rows_mma<BF16, NT, TM, W>);
  } else if constexpr (F == kInt4) {
    return reinterpret_cast<const void*>(&gemv_w4a16_int4_rows_mma<BF16, NT, TM, W>);
  } else {
    return reinterpret_cast<const void*>(&gemv_w8a16_int8_rows_mma<BF16, NT, TM, W>);
  }
}

// The tensor-core kernel for (fmt, bf16, M, W, loads_only), or nullptr for a format / W without one.
inline const void* find_mma_kernel(int fmt, bool bf16, int M, int w, bool loads_only, int tm = 1) {
  const int nt = nt_for(M);
  return by_format<false>(fmt, bf16, loads_only, [&](auto f, auto b, auto lo) -> const void* {
    constexpr int F = decltype(f)::value;
    constexpr bool B = decltype(b)::value;
    constexpr bool L = decltype(lo)::value;
    if (nt == 1 && tm == 2) return w == 4 ? mma_kernel_of<F, B, 1, 2, 4, L>() : w == 8 ? mma_kernel_of<F, B, 1, 2, 8, L>() : nullptr;
    if (nt == 1) {
      return w == 4 ? mma_kernel_of<F, B, 1, 1, 4, L>() : w == 8 ? mma_kernel_of<F, B, 1, 1, 8, L>()
             : w == 16 ? mma_kernel_of<F, B, 1, 1, 16, L>() : nullptr;
    }
    if (tm == 2) return w == 4 ? mma_kernel_of<F, B, 2, 2, 4, L>() : w == 8 ? mma_kernel_of<F, B, 2, 2, 8, L>() : nullptr;
    return w == 4 ? mma_kernel_of<F, B, 2, 1, 4, L>() : w == 8 ? mma_kernel_of<F, B, 2, 1, 8, L>() : nullptr;
  });
}

// form: 0 the CUDA-core kernels (gemv_rows.cuh), 1 the tensor-core ones (this file, 16 rows per CTA),
// 2 the tensor-core ones at 32 rows per CTA (TM = 2), 3 the 4-bit formats' CUDA-core 8-row form (gemv_rows.cuh)
enum Form : int { kFormCuda = 0, kFormMma = 1, kFormMma32 = 2, kFormCuda8 = 3 };
inline int tm_of(int form) { return form == kFormMma32 ? 2 : 1; }

// CTAs per SM of the kernel a launch of (form, fmt, bf16, N, M, K) runs (the tensor-core form's W
// depends on the shape).
inline cudaError_t occupancy_form(int form, int fmt, bool bf16, int N, int M, int K, bool loads_only,
                                  int* ctas_per_sm) {
  if (form == kFormCuda || form == kFormCuda8) return occupancy(fmt, bf16, M, loads_only, ctas_per_sm, form == kFormCuda8);
  if (form != kFormMma && form != kFormMma32) return cudaErrorInvalidValue;
  const int tm = tm_of(form), w = warps_for(N, M, K, tm);
  const void* k = find_mma_kernel(fmt, bf16, M, w, loads_only, tm);
  if (k == nullptr) return cudaErrorInvalidValue;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, k, w * 32, 0);
}

// The tensor-core form's grid: ceil(N / 16) row blocks x ceil(M / (8 NT)) token blocks, 1-D, the token
// block fastest; W = warps_for(N, M, K) warps per CTA.
inline cudaError_t launch_form(int form, int fmt, bool bf16, bool loads_only, const RowsParams& p,
                               cudaStream_t stream, int* occ = nullptr) {
  if (form == kFormCuda || form == kFormCuda8) return launch(fmt, bf16, loads_only, p, stream, occ, form == kFormCuda8);
  if ((form != kFormMma && form != kFormMma32) || p.N < 1 || p.M < 1 || p.K < kGroupK || p.K % kGroupK)
    return cudaErrorInvalidValue;
  const int tok = 8 * nt_for(p.M), tm = tm_of(form), rows = kRowsMma * tm;
  const long long ctas = static_cast<long long>((p.N + rows - 1) / rows) * ((p.M + tok - 1) / tok);
  if (ctas > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int w = warps_for(p.N, p.M, p.K, tm);
  return launch_on(find_mma_kernel(fmt, bf16, p.M, w, false, tm), find_mma_kernel(fmt, bf16, p.M, w, true, tm), loads_only,
                   dim3(static_cast<unsigned>(ctas)), p, stream, occ, w * 32);
}

}  // namespace rows
}  // namespace fp8lab
