// gemv_w16.cuh -- Marlin-style weight-only (A16) GEMM for decode: M = 1..64 per block of rows.
//
//   out[m, n] = out_factor * sum_k act[m, k] * dequant(w[n, k]) * scale(n, k)
//
// Four weight formats, each with fp16 or bf16 activations (the mma's operand type):
//   gemv_w8a16_fp8    e4m3 codes, one 16-bit scale per (row n, 128-wide K group)
//   gemv_w8a16_int8   offset-binary int8 (code c means c - 128), scales per 128
//   gemv_w4a16_nvfp4  e2m1 codes, one e4m3 scale per (row n, 16-wide K group), fp32 global
//   gemv_w4a16_int4   offset-binary int4 (code c means c - 8), scales per 128
//
// The dequant functions below issue exactly the instruction sequences of the emulators in
// fp8lab/emulate/dequant.py (LOP3 / SHF / PRMT / HADD2 / HFMA2 / FADD, one PTX instruction per emulated
// instruction), so the GPU test can compare every code bit for bit with the emulator and the
// SASS check can count the same instructions per element. The exponent-bias factor of the float
// tricks (2^8 / 2^120 for e4m3, 2^14 / 2^126 for e2m1) is never multiplied per element: it sits in
// the group scale (fp8) or in out_factor (nvfp4); see weight_only.py for the folding.
//
// Design (why each choice):
// * The weight is the mma's A operand (16 rows = 16 output features n) and the activations the B
//   operand (8 columns = 8 tokens m): at M = 1 only one B column is real, but the 16-row side is N,
//   so no tensor-core work is wasted on padding rows of M.
// * Weights are streamed once from DRAM straight into registers with 16-byte loads
//   (ld.global.nc.L1::no_allocate: read once, never re-read, so L1 is not polluted). The host
//   repacks them so that each thread's 16-byte load holds exactly its own A fragments: no shared
//   memory and no shuffles for weights, every warp load is 512 contiguous bytes.
// * Weights are kept in flight in a ring of three register buffers of one 128-K step each: a
//   buffer is refilled right after it is consumed, so two steps (4 KB per warp, 64 KB per SM at 16
//   warps) are always in flight, what Little's law asks for at ~4.8 TB/s and ~1 us of DRAM latency
//   over 132 SMs, and the loop (unrolled by three) needs no register copies.
// * Activations (M x 384 K per chunk) are staged in shared memory with cp.async, double-buffered,
//   and read as B fragments with ldmatrix.x4; tokens m >= M read a zero region instead.
// * Group scales (per 128 K) are applied in fp32 once per 128 K (the 8 mmas of a step accumulate
//   into a fresh fp32 fragment, then acc += frag * scale): exact products, fewer instructions than
//   scaling every weight in 16-bit. NVFP4's per-16 scales are applied to the 16-bit weights before
//   the mma (as Marlin does): e2m1 x e4m3 has at most 6 significant bits, so the product is exact.
// * Split-K over blockIdx.y fills the 132 SMs when N is small; partial sums go to an fp32
//   workspace with red.add and the last CTA of a tile (a counter) converts, writes and zeroes it,
//   so one launch does the whole GEMM and the workspace is clean for the next call.
// * Programmatic dependent launch (WoParams::pdl, sm_90+; issue 22): weights do not depend on
//   the kernel before the GEMV, its activations do. So every CTA fills its weight ring (the first
//   kRing K steps, or the bulk ring's first stages) before griddepcontrol.wait and only then
//   loads activations and touches out / ws / counters; right after the wait it lets the next
//   kernel launch (griddepcontrol.launch_dependents). Launched with the attribute, a GEMV's
//   launch and first DRAM round trip overlap the tail of the kernel before it; launched plainly,
//   both instructions are no-ops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "common/pdl.cuh"
#include "common/ptx.cuh"
#include "common/tile.cuh"
#include "gemv_w16_params.h"

namespace fp8lab {
namespace wo {

// kFp8A8: the W8A8 blockwise kernel (gemv_w8a8_blockwise below): e4m3 weights with one fp32 scale
// per 128 x 128 block, e4m3 activations with one fp32 scale per (token, 128 K). Not in by_format:
// its own extension launches it (gemv_w8a8_ext.cu).
enum Format : int { kFp8 = 0, kInt8 = 1, kNvfp4 = 2, kInt4 = 3, kFp8A8 = 4 };

constexpr int kStepK = 128;                   // K per pipeline step == one group-scale block
constexpr int kWarps = 8;                     // warps per CTA; each owns 16 * TM rows of N
constexpr int kThreads = kWarps * 32;
constexpr int kRing = 3;                      // steps per loop iteration = register buffers
constexpr int kChunkK = kRing * kStepK;       // K per activation chunk in shared memory
constexpr int kActStride = kChunkK + 8;       // +8 elements (16 B): ldmatrix rows hit 8 distinct
                                              // 16-byte bank groups (row stride 784 B = 49 x 16 B)
constexpr int kZeroBytes = (kChunkK + 32) * 2;  // zero 'row' read for tokens m >= M, as wide as a
                                                // chunk so the same immediate offsets stay inside
constexpr int kMBlock = 64;                   // rows of M per CTA (blockIdx.z walks the rest)

// Host dispatch on the runtime (fmt, bf16) pair (fmt: 0 fp8, 1 int8, 2 nvfp4, 3 int4): returns
// f(std::integral_constant<int, F>, std::bool_constant<BF16>), or `unknown` for a format id out of
// range. The launchers of the bindings go through this one switch.
template <class R, class Fn>
R by_format(int fmt, bool bf16, R unknown, Fn&& f) {
  using Fp8 = std::integral_constant<int, kFp8>;
  using Int8 = std::integral_constant<int, kInt8>;
  using Nvfp4 = std::integral_constant<int, kNvfp4>;
  using Int4 = std::integral_constant<int, kInt4>;
  switch (fmt * 2 + (bf16 ? 1 : 0)) {
    case 0: return f(Fp8{}, std::false_type{});
    case 1: return f(Fp8{}, std::true_type{});
    case 2: return f(Int8{}, std::false_type{});
    case 3: return f(Int8{}, std::true_type{});
    case 4: return f(Nvfp4{}, std::false_type{});
    case 5: return f(Nvfp4{}, std::true_type{});
    case 6: return f(Int4{}, std::false_type{});
    case 7: return f(Int4{}, std::true_type{});
    default: return unknown;
  }
}

// Host dispatch on the n8-tile count: f(std::integral_constant<int, NT>) for nt in 1, 2, 4, 8,
// else `unknown`. nt_for_rows(M) is the count a launch uses for M rows (the NT = 1 tile holds 8).
template <class R, class Fn>
R by_nt(int nt, R unknown, Fn&& f) {
  switch (nt) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return unknown;
  }
}

inline int nt_for_rows(int M) {
  const int mb = M < kMBlock ? M : kMBlock;
  return mb <= 8 ? 1 : mb <= 16 ? 2 : mb <= 32 ? 4 : 8;
}

// Host dispatch of one launch of M rows: launch(F, BF16, NT) as integral constants for the
// runtime (fmt, bf16) and the tile count nt_for_rows(M); cudaErrorInvalidValue for an unknown
// format. The split-K and stream-K launchers of the bindings both go through it.
template <class Launch>
cudaError_t launch_for_rows(int fmt, bool bf16, int M, Launch&& launch) {
  return by_format(fmt, bf16, cudaErrorInvalidValue, [&](auto f, auto b) {
    return by_nt(nt_for_rows(M), cudaErrorInvalidValue, [&](auto nt) { return launch(f, b, nt); });
  });
}

template <int F>
struct FormatTraits;
template <>
struct FormatTraits<kFp8> { static constexpr int kBits = 8; static constexpr bool kGroupScale = true; };
template <>
struct FormatTraits<kInt8> { static constexpr int kBits = 8; static constexpr bool kGroupScale = true; };
template <>
struct FormatTraits<kNvfp4> { static constexpr int kBits = 4; static constexpr bool kGroupScale = false; };
template <>
struct FormatTraits<kInt4> { static constexpr int kBits = 4; static constexpr bool kGroupScale = true; };
template <>
struct FormatTraits<kFp8A8> { static constexpr int kBits = 8; static constexpr bool kGroupScale = true; };

// Bytes per activation element in global and shared memory: e4m3 for the W8A8 kernel, else 16-bit.
template <int F>
constexpr int kActBytes = F == kFp8A8 ? 1 : 2;

// ------------------------------------------------------------------------------------------------
// One PTX instruction each: the emulator's LOP3.LUT / SHF / PRMT / HADD2 / HFMA2 / FADD.
// Constants go in as registers so ptxas sees them (and folds them into immediates).
// ------------------------------------------------------------------------------------------------
constexpr uint32_t kLutAnd = 0xC0;     // (a & b), c = 0
constexpr uint32_t kLutAndOr = 0xEA;   // (a & b) | c

template <uint32_t LUT>
__device__ __forceinline__ uint32_t lop3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));
  return d;
}
template <int N>
__device__ __forceinline__ uint32_t shr(uint32_t a) {   // SHF.R.U32.HI
  uint32_t d;
  asm("shr.b32 %0, %1, %2;" : "=r"(d) : "r"(a), "n"(N));
  return d;
}
template <int N>
__device__ __forceinline__ uint32_t shl(uint32_t a) {   // SHF.L.U32 (ptxas may pick IMAD.SHL.U32)
  uint32_t d;
  asm("shl.b32 %0, %1, %2;" : "=r"(d) : "r"(a), "n"(N));
  return d;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint32_t hsub2(uint32_t a, uint32_t b) {   // HADD2 d, a, -b
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {   // HMUL2
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {   // HFMA2
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t hfma2_bf16(uint32_t a, uint32_t b, uint32_t c) {   // HFMA2.BF16_V2
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t fadd_bits(uint32_t a, uint32_t b) {   // FADD (no FTZ, no contraction)
  uint32_t d;
  asm("add.rn.f32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// ------------------------------------------------------------------------------------------------
// Dequant: one packed word in, half2 / bfloat162 bit patterns out, in logical element order
// (out[k] holds elements 2k, 2k+1). Line by line the emulators of fp8lab/emulate/dequant.py.
// ------------------------------------------------------------------------------------------------

// (q & 0x80008000) | ((q & mask) >> shift): the sign stays, exponent and mantissa slide into the
// target's fields with the source bias (hence the folded power of two). 3 instructions.
template <uint32_t MASK, int SHIFT>  // fp8lab:excerpt e4m3_dequant
__device__ __forceinline__ uint32_t sign_shift(uint32_t q) {
  uint32_t t = lop3<kLutAnd>(q, MASK, 0u);
  t = shr<SHIFT>(t);
  return lop3<kLutAndOr>(q, 0x80008000u, t);
}

// e4m3 -> fp16 (shift 1, factor 2^8) / bf16 (shift 4, factor 2^120): 7 per 4 values.
template <bool BF16>
__device__ __forceinline__ void dequant_e4m3(uint32_t q, uint32_t (&h)[2]) {
  constexpr int kShift = BF16 ? 4 : 1;
  const uint32_t hi = sign_shift<0x7F007F00u, kShift>(q);   // bytes 1, 3: elements (2, 3)
  const uint32_t q8 = shl<8>(q);
  const uint32_t lo = sign_shift<0x7F007F00u, kShift>(q8);  // bytes 0, 2: elements (0, 1)
  h[0] = lo;
  h[1] = hi;
}  // fp8lab:excerpt-end e4m3_dequant

// e2m1 -> fp16 (shift 3, factor 2^14) / bf16 (shift 6, factor 2^126): 15 per 8 values.
template <bool BF16>
__device__ __forceinline__ void dequant_e2m1(uint32_t q, uint32_t (&h)[4]) {
  constexpr int kShift = BF16 ? 6 : 3;
  const uint32_t q8 = shl<8>(q);
  {
    const uint32_t top = sign_shift<0x70007000u, kShift>(q8);
    const uint32_t s4 = shl<4>(q8);
    const uint32_t nxt = sign_shift<0x70007000u, kShift>(s4);
    h[0] = nxt;
    h[1] = top;
  }
  {
    const uint32_t top = sign_shift<0x70007000u, kShift>(q);
    const uint32_t s4 = shl<4>(q);
    const uint32_t nxt = sign_shift<0x70007000u, kShift>(s4);
    h[2] = nxt;
    h[3] = top;
  }
}

// int4 (code - 8) -> fp16 with the 0x6400 magic: 9 per 8 values.
__device__ __forceinline__ void dequant_int4_fp16(uint32_t q, uint32_t (&h)[4]) {
  {
    uint32_t lo = lop3<kLutAndOr>(q, 0x000F000Fu, 0x64006400u);
    uint32_t hi = lop3<kLutAndOr>(q, 0x00F000F0u, 0x64006400u);
    lo = hsub2(lo, 0x64086408u);                 // - (1024 + 8)
    hi = hfma2(hi, 0x2C002C00u, 0xD480D480u);    // * 1/16 - 72
    h[0] = lo;
    h[1] = hi;
  }
  {
    const uint32_t q8 = shr<8>(q);
    uint32_t lo = lop3<kLutAndOr>(q8, 0x000F000Fu, 0x64006400u);
    uint32_t hi = lop3<kLutAndOr>(q8, 0x00F000F0u, 0x64006400u);
    lo = hsub2(lo, 0x64086408u);
    hi = hfma2(hi, 0x2C002C00u, 0xD480D480u);
    h[2] = lo;
    h[3] = hi;
  }
}

// int4 (code - 8) -> bf16 with the 0x4300 magic (128.0): 11 per 8 values.
__device__ __forceinline__ void dequant_int4_bf16(uint32_t q, uint32_t (&h)[4]) {
  const uint32_t q4 = shr<4>(q);
  const uint32_t q8 = shr<8>(q);
  const uint32_t q12 = shr<12>(q);
  const uint32_t src[4] = {q, q4, q8, q12};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = lop3<kLutAndOr>(src[i], 0x000F000Fu, 0x43004300u);
    h[i] = hfma2_bf16(v, 0x3F803F80u, 0xC308C308u);   // * 1 - 136
  }
}

// int8 (code - 128) -> fp16: PRMT under the 0x64 magic byte, HADD2 removes 1024 + 128. 4 per 4.
__device__ __forceinline__ void dequant_int8_fp16(uint32_t q, uint32_t (&h)[2]) {
  uint32_t lo = prmt(q, 0x64646464u, 0x5250u);
  uint32_t hi = prmt(q, 0x64646464u, 0x5351u);
  lo = hsub2(lo, 0x64806480u);
  hi = hsub2(hi, 0x64806480u);
  h[0] = lo;
  h[1] = hi;
}

// int8 (code - 128) -> bf16 through the fp32 magic 2^23: 10 per 4 values.
__device__ __forceinline__ void dequant_int8_bf16(uint32_t q, uint32_t (&h)[2]) {
  // elements 0..3 live in bytes 0, 2, 1, 3 (BYTE_ORDER)
  uint32_t f0 = prmt(q, 0x4B000000u, 0x7650u);
  uint32_t f1 = prmt(q, 0x4B000000u, 0x7652u);
  uint32_t f2 = prmt(q, 0x4B000000u, 0x7651u);
  uint32_t f3 = prmt(q, 0x4B000000u, 0x7653u);
  f0 = fadd_bits(f0, 0xCB000080u);   // - (2^23 + 128)
  f1 = fadd_bits(f1, 0xCB000080u);
  f2 = fadd_bits(f2, 0xCB000080u);
  f3 = fadd_bits(f3, 0xCB000080u);
  h[0] = prmt(f0, f1, 0x7632u);
  h[1] = prmt(f2, f3, 0x7632u);
}

// The A fragment of one 16x16 weight tile: 8-bit formats read two words, 4-bit formats one.
template <int F, bool BF16>
__device__ __forceinline__ void dequant_a(const uint32_t* words, uint32_t (&a)[4]) {
  if constexpr (F == kFp8 || F == kInt8) {
    uint32_t h0[2], h1[2];
    if constexpr (F == kFp8) {
      dequant_e4m3<BF16>(words[0], h0);
      dequant_e4m3<BF16>(words[1], h1);
    } else if constexpr (BF16) {
      dequant_int8_bf16(words[0], h0);
      dequant_int8_bf16(words[1], h1);
    } else {
      dequant_int8_fp16(words[0], h0);
      dequant_int8_fp16(words[1], h1);
    }
    a[0] = h0[0];
    a[1] = h0[1];
    a[2] = h1[0];
    a[3] = h1[1];
  } else if constexpr (F == kNvfp4) {
    dequant_e2m1<BF16>(words[0], a);
  } else if constexpr (BF16) {
    dequant_int4_bf16(words[0], a);
  } else {
    dequant_int4_fp16(words[0], a);
  }
}

// NVFP4 block scales: one word holds e4m3 scales (s(g, j), s(g+8, j), s(g, j+1), s(g+8, j+1))
// (pack_bytes order). The e4m3 trick gives s * 2^-8 (fp16) / s * 2^-120 (bf16); the multiplies
// bring it to s * 2^7 (fp16) / s * 2^119 (bf16), so that dequant(w) * scale = w * s * 2^-7 in
// both types: normal, exact (<= 6 significant bits), never overflowing (|w s| <= 6 * 448).
template <bool BF16>
__device__ __forceinline__ void decode_nvfp4_scales(uint32_t q, uint32_t (&s)[2]) {
  dequant_e4m3<BF16>(q, s);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if constexpr (BF16) {
      s[i] = hfma2_bf16(s[i], 0x7F007F00u, 0x80008000u);   // * 2^127 (- 0 keeps the sign of 0)
      s[i] = hfma2_bf16(s[i], 0x77807780u, 0x80008000u);   // * 2^112
    } else {
      s[i] = hmul2(s[i], 0x78007800u);                     // * 2^15
    }
  }
}

// a *= broadcast of one lane of a scale pair: lane 0 for rows g, lane 1 for rows g + 8.
template <bool BF16, bool HIGH>
__device__ __forceinline__ uint32_t scale_by_lane(uint32_t a, uint32_t s) {
  if constexpr (BF16) {
    const __nv_bfloat162 sv = *reinterpret_cast<const __nv_bfloat162*>(&s);
    const __nv_bfloat162 b = HIGH ? __high2bfloat162(sv) : __low2bfloat162(sv);
    const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), b);
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 sv = *reinterpret_cast<const __half2*>(&s);
    const __half2 b = HIGH ? __high2half2(sv) : __low2half2(sv);
    const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), b);
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// ------------------------------------------------------------------------------------------------
// Memory and tensor-core helpers
// ------------------------------------------------------------------------------------------------
// The weight stream: read once, so no L1 allocation. No .L2::256B prefetch hint: with it the
// decode kernels streamed 0.9-2.6 points of copy less at M = 1 on the H200 (issue 22's ablation,
// scripts/probes/decode_ablate.py variant `hint` keeps the old load for A/B).
__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ldg_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ldg_u64(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
// cp.async and ldmatrix: common/ptx.cuh.

// mma16816 (mma.sync m16n8k16, fp32 accumulators): common/ptx.cuh.
using ptx::mma16816;

template <bool BF16>
__device__ __forceinline__ float scale_to_float(uint32_t bits16) {
  if constexpr (BF16) {
    return __uint_as_float(bits16 << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  }
}

template <bool BF16>
__device__ __forceinline__ void store16(void* base, size_t idx, float v) {
  if constexpr (BF16) {
    reinterpret_cast<__nv_bfloat16*>(base)[idx] = __float2bfloat16_rn(v);
  } else {
    reinterpret_cast<__half*>(base)[idx] = __float2half_rn(v);
  }
}

// ------------------------------------------------------------------------------------------------
// EXTRA_ALU (notebook 10): N dependent integer instructions on a weight word before its dequant,
// alternating XOR (LOP3) and IADD with a runtime salt the host passes as 0. The salt is a kernel
// argument, so neither the front end nor ptxas can prove the chain is the identity; alternating
// the two ops keeps ptxas from fusing neighbours (two XORs would fold into one LOP3, two adds into
// one IADD3); every link feeds the next and the last feeds the dequant, so none is dead. With
// salt = 0 the word, and so the output, is bit-exact. It costs issue slots per weight element
// while the bytes read stay the same: a lower SM clock, emulated.
// ------------------------------------------------------------------------------------------------
template <int N>  // fp8lab:excerpt alu_chain
__device__ __forceinline__ uint32_t alu_chain(uint32_t x, uint32_t salt) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i % 2 == 0) {
      asm volatile("xor.b32 %0, %0, %1;" : "+r"(x) : "r"(salt));
    } else {
      asm volatile("add.u32 %0, %0, %1;" : "+r"(x) : "r"(salt));
    }
  }
  return x;
}  // fp8lab:excerpt-end alu_chain

// ------------------------------------------------------------------------------------------------
// The kernel
// ------------------------------------------------------------------------------------------------
template <int F, int NT>
struct Tiling {
  static constexpr int kBits = FormatTraits<F>::kBits;
  // 16-row tiles per warp: at M <= 8 the 4-bit formats take two (32 rows), so one warp's step is
  // 4 x 16-byte loads per thread (2 KB per warp) as for the 8-bit formats, and the B fragments and
  // the loop overhead are shared by twice the weights. From NT = 2 on that spills under the
  // 128-register cap of two CTAs per SM, so one tile.
  static constexpr int kTM = (kBits == 4 && NT == 1) ? 2 : 1;
  static constexpr int kTilesPerSuper = kBits == 8 ? 1 : 2;   // 16-row tiles per packed super-tile
  static constexpr int kWordsPerTile = kBits == 8 ? 16 : 8;   // 32-bit words per thread per tile-step
  static constexpr int kWords = kTM * kWordsPerTile;
  static constexpr int kLoads = kWords / 4;                    // uint4 per thread per step
  static constexpr bool kGroup = FormatTraits<F>::kGroupScale;
  static constexpr int kScaleWords = kTM;                      // per thread per step
  static constexpr int kRowsPerCta = kWarps * 16 * kTM;
};

template <int F, int NT>
struct Frag {
  uint32_t w[Tiling<F, NT>::kWords];
  uint32_t s[Tiling<F, NT>::kScaleWords];
};

// Strides of one 128-K step in the packed arrays: weights 4 x 32 uint4 per (super-)tile; scales in
// 32-bit words: 8 (8-bit: one pair per g), 16 (int4: [g][2 tiles]), 64 (nvfp4: [g][4 q][2 tiles]).
template <int F>
struct Strides {
  static constexpr int kW = 4 * 32;
  // kFp8A8: one fp32 word per (16-row tile, step), the scale of the 128 x 128 block it lies in.
  static constexpr int kS = F == kFp8A8 ? 1 : (F == kNvfp4 ? 64 : (FormatTraits<F>::kBits == 8 ? 8 : 16));
};

// wp: this lane's first uint4 and sp: this thread's first scale word at step `step` of the warp
// whose first 16-row tile is tile16 (see the pack layout in weight_only.py; w, scales: the packed
// arrays, steps: K steps per super-tile, g = lane / 4). A 4-bit warp with TM = 1 owns half of a
// 32-row super-tile: loads q = 2 sub, +1. Used by the split-K body once and by the stream-K body at
// each tile its load cursor enters. (g comes from the caller: recomputed here, ptxas allocated the
// stream-K body's registers differently.)
template <int F, int NT>
__device__ __forceinline__ void seek_frag(const uint4* w, const uint32_t* scales, int steps, int tile16, int step,
                                          int lane, int g, const uint4*& wp, const uint32_t*& sp) {
  using T = Tiling<F, NT>;
  using S = Strides<F>;
  constexpr int TM = T::kTM;
  const int super = tile16 / T::kTilesPerSuper;
  const int sub = tile16 % T::kTilesPerSuper;
  const size_t sstep = static_cast<size_t>(super) * steps + step;
  wp = w + sstep * S::kW + ((T::kBits == 4 && TM == 1) ? 2 * sub : 0) * 32 + lane;
  sp = scales + sstep * S::kS;
  if constexpr (F == kFp8A8) {
    // one word per step, the same for every lane
  } else if constexpr (T::kBits == 8) {
    sp += g;                                                 // [g]
  } else if constexpr (T::kGroup) {
    sp += 2 * g + (TM == 1 ? sub : 0);                       // [g][tile]
  } else {
    sp += 2 * (4 * g + (lane & 3)) + (TM == 1 ? sub : 0);    // [g][q][tile]
  }
}

// wp: this lane's first uint4 of the step; sp: this thread's first scale word of the step.
template <int F, int NT>
__device__ __forceinline__ void load_frag(Frag<F, NT>& f, const uint4* wp, const uint32_t* sp) {
  using T = Tiling<F, NT>;
#pragma unroll
  for (int i = 0; i < T::kLoads; ++i) {
    const uint4 v = ldg_stream(wp + i * 32);
    f.w[4 * i + 0] = v.x;
    f.w[4 * i + 1] = v.y;
    f.w[4 * i + 2] = v.z;
    f.w[4 * i + 3] = v.w;
  }
  if constexpr (T::kTM == 2) {
    const uint2 v = ldg_u64(reinterpret_cast<const uint2*>(sp));
    f.s[0] = v.x;
    f.s[1] = v.y;
  } else {
    f.s[0] = ldg_u32(sp);
  }
}

// One 128-K step of one warp: 8 k16 sub-steps x TM tiles x NT n8 tiles of mma.
template <int F, bool BF16, int NT, int XA = 0>
__device__ __forceinline__ void compute_step(const Frag<F, NT>& f, float (&acc)[Tiling<F, NT>::kTM][NT][4],
                                             const uint32_t (&rows)[NT], int u, int lane, uint32_t salt = 0u) {
  using T = Tiling<F, NT>;
  constexpr int TM = T::kTM;
  // NVFP4: the four threads of a quad (same g) need the same 8 k16 block scales of rows g, g+8;
  // thread q decodes only k16 groups 2q, 2q+1 and the quad exchanges them with shuffles
  // (11 + 8 instructions per tile and step instead of 4 x 11).
  uint32_t bs[TM][8];
  if constexpr (!T::kGroup) {
#pragma unroll
    for (int t = 0; t < TM; ++t) {
      uint32_t d[2];
      decode_nvfp4_scales<BF16>(f.s[t], d);
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) bs[t][kk] = __shfl_sync(0xFFFFFFFFu, d[kk & 1], (lane & ~3) | (kk >> 1));
    }
  }
  float gacc[TM][NT][4];
  if constexpr (T::kGroup) {
    zero_fill(gacc);
  }
  // rows[j]: this lane's ldmatrix row address for n8 tile j at K offset 0 of the chunk (see
  // gemv_body); the K offset of step u, k16 pair kp is an immediate.
#pragma unroll
  for (int kp = 0; kp < 4; ++kp) {
    uint32_t b[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) ptx::ldmatrix_x4(b[j], rows[j] + (u * kStepK + 32 * kp) * 2);
#pragma unroll
    for (int sub = 0; sub < 2; ++sub) {
      const int kk = 2 * kp + sub;
#pragma unroll
      for (int t = 0; t < TM; ++t) {
        uint32_t a[4];
        if constexpr (XA > 0) {
          static_assert(T::kBits == 8, "EXTRA_ALU is instantiated for the 8-bit formats only");
          // 4 elements per word, so 4 XA chain links per word = XA per weight element.
          const uint32_t wx[2] = {alu_chain<4 * XA>(f.w[t * 16 + 2 * kk], salt),
                                  alu_chain<4 * XA>(f.w[t * 16 + 2 * kk + 1], salt)};
          dequant_a<F, BF16>(wx, a);
        } else if constexpr (T::kBits == 8) {
          dequant_a<F, BF16>(&f.w[t * 16 + 2 * kk], a);
        } else {
          dequant_a<F, BF16>(&f.w[t * 8 + kk], a);
        }
        if constexpr (!T::kGroup) {
          a[0] = scale_by_lane<BF16, false>(a[0], bs[t][kk]);
          a[1] = scale_by_lane<BF16, true>(a[1], bs[t][kk]);
          a[2] = scale_by_lane<BF16, false>(a[2], bs[t][kk]);
          a[3] = scale_by_lane<BF16, true>(a[3], bs[t][kk]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if constexpr (T::kGroup) {
            mma16816<BF16>(gacc[t][j], a, b[j][2 * sub], b[j][2 * sub + 1]);
          } else {
            mma16816<BF16>(acc[t][j], a, b[j][2 * sub], b[j][2 * sub + 1]);
          }
        }
      }
    }
  }
  if constexpr (T::kGroup) {
    // Promote once per 128-K group: rows g (c0, c1) take the low scale, rows g + 8 the high one.
#pragma unroll
    for (int t = 0; t < TM; ++t) {
      const float s_lo = scale_to_float<BF16>(f.s[t] & 0xFFFFu);
      const float s_hi = scale_to_float<BF16>(f.s[t] >> 16);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        acc[t][j][0] = fmaf(gacc[t][j][0], s_lo, acc[t][j][0]);
        acc[t][j][1] = fmaf(gacc[t][j][1], s_lo, acc[t][j][1]);
        acc[t][j][2] = fmaf(gacc[t][j][2], s_hi, acc[t][j][2]);
        acc[t][j][3] = fmaf(gacc[t][j][3], s_hi, acc[t][j][3]);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// W8A8 blockwise (kFp8A8; issue 22 target 3: blockwise W8A8 at M <= 16 at the copy rate). Hopper has
// no e4m3 mma.sync (ptxas lowers mma.m16n8k32.e4m3 to conversions and two HMMAs), so the kernel
// does the same in the open: cvt.rn.f16x2.e4m3x2 (F2FP, two codes per instruction, exact: every
// e4m3 value is an fp16) on both operands, then mma.m16n8k16 on fp16 into fp32. Per 128-K step a
// thread converts its 64 weight codes in 32 instructions (the A16 fp8 path's bit trick: 112).
//
// K is permuted inside each k16 sub-step, identically for both operands (a dot product does not
// care): the activations stay e4m3 in shared memory ([token][K], one byte each), and ldmatrix
// hands thread (g, tq) the four codes at physical K 4tq .. 4tq + 3 of token g; their low pair is
// b0 (the mma's K 2tq, 2tq + 1), their high pair b1 (the mma's K 2tq + 8, 2tq + 9). The weight
// packing (gemv_w8a8.py) puts the same physical K under the same mma K: word (kk, h) of thread
// (g, tq) holds row g's codes at 16 kk + 4 tq + 2 h + {0, 1}, then row g + 8's (a0 / a1 for h = 0,
// a2 / a3 for h = 1).
//
// Promotion once per 128 K in fp32: acc += step_sum x (a_scale[token, kb] x b_scale[block, kb]).
// ------------------------------------------------------------------------------------------------
// e4m3x4_to_f16x2 (four e4m3 codes -> two f16x2, exact): common/ptx.cuh.
using ptx::e4m3x4_to_f16x2;

// One 128-K step of one warp: 8 k16 sub-steps x NT n8 tiles. sab[j][c]: a_scale x b_scale of
// this thread's token 8 j + 2 tq + c at this step (0 for tokens past M).
template <int NT>  // fp8lab:excerpt w8a8_step
__device__ __forceinline__ void compute_step_a8(const Frag<kFp8A8, NT>& f, float (&acc)[1][NT][4],
                                                const uint32_t (&rows)[NT], int u, const float (&sab)[NT][2]) {
  float gacc[1][NT][4];
  zero_fill(gacc);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // matrix mi of the x4 (rows[j] holds + 16 mi): this step's bytes 64 h + 16 mi .. + 15, i.e.
    // k16 sub-step kk = 4 h + mi
    uint32_t b[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) ptx::ldmatrix_x4(b[j], rows[j] + u * kStepK + 64 * h);
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      const int kk = 4 * h + mi;
      uint32_t a[4];
      e4m3x4_to_f16x2(f.w[2 * kk], a[0], a[1]);
      e4m3x4_to_f16x2(f.w[2 * kk + 1], a[2], a[3]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t b0, b1;
        e4m3x4_to_f16x2(b[j][mi], b0, b1);
        mma16816<false>(gacc[0][j], a, b0, b1);
      }
    }
  }
  // c0 (row g, token 2tq), c1 (g, 2tq + 1), c2 (g + 8, 2tq), c3 (g + 8, 2tq + 1)
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    acc[0][j][0] = fmaf(gacc[0][j][0], sab[j][0], acc[0][j][0]);
    acc[0][j][1] = fmaf(gacc[0][j][1], sab[j][1], acc[0][j][1]);
    acc[0][j][2] = fmaf(gacc[0][j][2], sab[j][0], acc[0][j][2]);
    acc[0][j][3] = fmaf(gacc[0][j][3], sab[j][1], acc[0][j][3]);
  }
}  // fp8lab:excerpt-end w8a8_step

// One step of the register ring, shared by the split-K and stream-K main loops: compute the
// step (number `cur`) held in f, then, if cur + kRing < limit, load the step kRing ahead into
// the same registers and advance the cursor. Keeping the refill in the same basic block as the compute lets ptxas issue each
// 16-byte load as soon as its registers' last dequant has read them, between the step's mmas.
template <int F, bool BF16, int NT, int XA = 0>
__device__ __forceinline__ void ring_step(Frag<F, NT>& f, float (&acc)[Tiling<F, NT>::kTM][NT][4],
                                          const uint32_t (&rows)[NT], int u, int lane, int cur, int limit,
                                          const uint4*& wnext, const uint32_t*& snext, uint32_t salt = 0u) {
  compute_step<F, BF16, NT, XA>(f, acc, rows, u, lane, salt);
  if (cur + kRing < limit) {
    load_frag<F, NT>(f, wnext, snext);
    wnext += Strides<F>::kW;
    snext += Strides<F>::kS;
  }
}

// The epilogue's two halves, shared by the split-K and stream-K kernels. Thread (g, q) holds, per
// tile t and n8 tile j: c0 (n = g, m = 2q), c1 (g, 2q + 1), c2 (g + 8, 2q), c3 (g + 8, 2q + 1).
// emit_tile: the CTA's sums for its warp's rows, scaled by out_factor, either stored (direct: the
// CTA did the tile's whole K) or added to the fp32 workspace with red.add (a partial sum).
// for_each_output: f(acc element (t, j, e), its output index (m0 + m) N + n) for each of the
// thread's elements inside the output (active warp, n < N, m < mb); for_each_output_of: the same
// for one (t, j), its four elements e.
template <class F>
__device__ __forceinline__ void for_each_output_of(const WoParams& p, int t, int j, int tile16, int g, int q,
                                                   bool active, int m0, int mb, F&& f) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int n = (tile16 + t) * 16 + g + 8 * (e >> 1);
    const int m = 8 * j + 2 * q + (e & 1);
    if (active && n < p.N && m < mb) f(t, j, e, static_cast<size_t>(m0 + m) * p.N + n);
  }
}
template <int NT, int TM, class F>
__device__ __forceinline__ void for_each_output(const WoParams& p, int tile16, int g, int q, bool active, int m0,
                                                int mb, F&& f) {
#pragma unroll
  for (int t = 0; t < TM; ++t) {
#pragma unroll
    for (int j = 0; j < NT; ++j) for_each_output_of(p, t, j, tile16, g, q, active, m0, mb, f);
  }
}

template <bool BF16, int NT, int TM>
__device__ __forceinline__ void emit_tile(const WoParams& p, const float (&acc)[TM][NT][4], int tile16, int g,
                                          int q, bool active, int m0, int mb, bool direct) {
  for_each_output<NT, TM>(p, tile16, g, q, active, m0, mb, [&](int t, int j, int e, size_t idx) {
    const float v = acc[t][j][e] * p.out_factor;
    if (direct) {
      store16<BF16>(p.out, idx, v);
    } else {
      atomicAdd(p.ws + idx, v);
    }
  });
}

// finalize_tile: run by the CTA whose contribution completed the tile (after the fences):
// convert the workspace sums, write them, and zero the workspace for the next call.
// LOADS_FIRST (split-K): per (t, j), its four loads first, then their stores. In one pass a load
// may not be issued before the stores ahead of it (they could alias), so each of a thread's
// TM x NT x 4 values costs one L2 round trip in sequence (8 at M = 16); in this order TM x NT
// (2 at M = 16), for 4 registers. On the H200 at M = 16, all eight loads first streamed 0.09-0.15
// of copy more on the split-K shapes (scripts/probes/decode_ablate.py, variant fin_batch). The
// stream-K kernels flush with their weight ring live and sit at the 128-register cap: there the
// 4 registers spill (int8 and int4 at NT = 2), so they keep the one pass.
template <bool BF16, int NT, int TM, bool LOADS_FIRST>
__device__ __forceinline__ void finalize_tile(const WoParams& p, int tile16, int g, int q, bool active, int m0,
                                              int mb) {
  if constexpr (LOADS_FIRST) {
#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float v[4];
        for_each_output_of(p, t, j, tile16, g, q, active, m0, mb,
                           [&](int, int, int e, size_t idx) { v[e] = __ldcg(p.ws + idx); });
        for_each_output_of(p, t, j, tile16, g, q, active, m0, mb, [&](int, int, int e, size_t idx) {
          __stcg(p.ws + idx, 0.f);
          store16<BF16>(p.out, idx, v[e]);
        });
      }
    }
  } else {
    for_each_output<NT, TM>(p, tile16, g, q, active, m0, mb, [&](int, int, int, size_t idx) {
      const float v = __ldcg(p.ws + idx);
      __stcg(p.ws + idx, 0.f);
      store16<BF16>(p.out, idx, v);
    });
  }
}

// Shared memory of both bodies: first the zero region that rows m >= M read, then the activation
// chunks in p.act_smem bytes: two alternating [8 NT rows][kActStride] bf16 buffers, or (split-K,
// resident) every chunk of the CTA's K slice packed at mb rows. zero_act_pad zeroes the zero
// region (the caller's first barrier publishes it) and returns its shared-window address; the
// chunks start kZeroBytes after it.
template <int NT>
__host__ __device__ constexpr int act_buf_bytes() {
  return 8 * NT * kActStride * 2;
}
template <int NT>
__device__ __forceinline__ uint32_t zero_act_pad(unsigned char* smem) {
  uint32_t* const zero = reinterpret_cast<uint32_t*>(smem);
  for (int i = threadIdx.x; i < kZeroBytes / 4; i += kThreads) zero[i] = 0u;
  return ptx::smem_u32(smem);
}

// rows[j]: this lane's ldmatrix.x4 row address in the chunk at buf for n8 tile j: matrix mi =
// lane / 8 (k16 sub-step 2 kp + mi / 2, k half mi % 2), row r8 = lane % 8 (token m = 8 j + r8);
// tokens past mb read the zero region. row_bytes: the buffer's row stride (a chunk buffer's by
// default; the stream-K body's resident activations hold whole rows of K).
template <int NT>
__device__ __forceinline__ void act_rows(uint32_t (&rows)[NT], uint32_t buf, uint32_t zero_smem, int mb, int mi,
                                         int r8, int row_bytes = kActStride * 2) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int m = 8 * j + r8;
    rows[j] = (m < mb ? buf + static_cast<uint32_t>(m * row_bytes) : zero_smem) + 16 * mi;
  }
}

// ------------------------------------------------------------------------------------------------
// Bulk schedule (issue 22: decode at the copy rate). The register ring keeps two 128-K steps of
// weights in flight per warp: 16 warps x 4 KB = 64 KB per SM, bounded by the register file (the
// kernels already use ~127 registers at two CTAs per SM). The bulk variant of gemv_body moves
// each warp's weights and scales into a ring of kBulkStages shared-memory stages with
// cp.async.bulk (the TMA unit's one-dimensional copy, no registers and no thread per 16 bytes),
// one mbarrier per stage counting the bytes, so kBulkStages - 1 steps (8 KB per warp, 128 KB per
// SM) stay in flight while a step is computed. Per step: every lane waits on the stage's
// barrier, reads its fragments with ld.shared.v4 (the same words the register ring loads from
// global), computes, and lane 0 refills the stage with the step kBulkStages ahead. Each warp
// runs its own ring and barriers: no warp ever waits for another (the activation chunks keep
// gemv_body's barriers). The weight bytes are streamed with an L2 evict-first policy.
// ------------------------------------------------------------------------------------------------
constexpr int kBulkStages = 5;

template <int F, int NT>
struct BulkStage {
  static constexpr int kWBytes = Tiling<F, NT>::kLoads * 32 * 16;   // this warp's weights of one step
  static constexpr int kSBytes = Strides<F>::kS * 4;                // the step's scale block (its super-tile's)
  static constexpr int kBytes = kWBytes + kSBytes;                  // multiples of 16 (bulk copy sizes)
  static constexpr int kRingBytes = kWarps * kBulkStages * kBytes;  // every warp's ring
  static constexpr int kBarBytes = kWarps * kBulkStages * 8;        // one 8-byte mbarrier per stage
};

// Resident activations (see gemv_body) take at most this much shared memory in the bulk kernels,
// so two CTAs with their rings still fit an SM at NT <= 2.
constexpr int kBulkResidentCap = 16 * 1024;

// The bulk kernels' shared memory: zero region, activation bytes, rings, barriers.
template <int F, int NT>
__host__ __device__ constexpr int bulk_smem_bytes(int act_smem) {
  return kZeroBytes + act_smem + BulkStage<F, NT>::kRingBytes + BulkStage<F, NT>::kBarBytes;
}

// The per-warp bulk ring of gemv_body<..., BULK = true>: stage addresses, barriers, sources.
template <int F, int NT>
struct BulkRing {
  using B = BulkStage<F, NT>;
  uint32_t ring;              // this warp's first stage (shared window)
  uint32_t bars;              // this warp's first mbarrier
  const uint4* wsrc;          // the warp's first weight uint4 of its first step
  const uint32_t* ssrc;       // the scale block of its first step
  uint32_t soff;              // this thread's first scale word inside a scale block, in bytes
  uint64_t policy;            // L2 evict-first, for the weights

  // lane 0: step st (relative to the warp's first) into stage st % kBulkStages
  __device__ __forceinline__ void issue(int st) const {
    const int stage = st % kBulkStages;
    const uint32_t dst = ring + stage * B::kBytes;
    const uint32_t bar = bars + 8 * stage;
    ptx::mbar_arrive_expect_tx(bar, B::kBytes);
    ptx::bulk_g2s(dst, wsrc + static_cast<size_t>(st) * Strides<F>::kW, B::kWBytes, bar, policy);
    ptx::bulk_g2s_plain(dst + B::kWBytes, ssrc + static_cast<size_t>(st) * Strides<F>::kS, B::kSBytes, bar);
  }

  // every lane: wait for step st and read this thread's fragments of it
  __device__ __forceinline__ void read(Frag<F, NT>& f, int st, int lane) const {
    using T = Tiling<F, NT>;
    const int stage = st % kBulkStages;
    ptx::mbar_wait(bars + 8 * stage, static_cast<uint32_t>((st / kBulkStages) & 1));
    const uint32_t src = ring + stage * B::kBytes;
#pragma unroll
    for (int i = 0; i < T::kLoads; ++i) {
      const uint4 v = ptx::lds_128(src + static_cast<uint32_t>((i * 32 + lane) * 16));
      f.w[4 * i + 0] = v.x;
      f.w[4 * i + 1] = v.y;
      f.w[4 * i + 2] = v.z;
      f.w[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int t = 0; t < T::kScaleWords; ++t) f.s[t] = ptx::lds_32(src + B::kWBytes + soff + 4 * t);
  }
};

// grid (ceil(tiles16 / (8 TM)), splits, ceil(M / 64)), block 256, dynamic smem kZeroBytes + p.act_smem
// (BULK: bulk_smem_bytes<F, NT>(p.act_smem)).
template <int F, bool BF16, int NT, int XA = 0, bool BULK = false>
__device__ __forceinline__ void gemv_body(const WoParams& p, uint32_t salt = 0u) {
  using T = Tiling<F, NT>;
  using S = Strides<F>;
  constexpr int TM = T::kTM;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int tid = threadIdx.x;

  const int m0 = blockIdx.z * kMBlock;
  const int mb = min(kMBlock, p.M - m0);                  // rows of M in this block (1..64)
  const int st0 = blockIdx.y * p.steps_per_split;
  const int nsteps = min(p.steps, st0 + p.steps_per_split) - st0;
  const int tile16 = (blockIdx.x * kWarps + warp) * TM;   // first 16-row tile of this warp
  const bool active = tile16 < p.n_tiles16;                // warp-uniform

  constexpr int kBufBytes = act_buf_bytes<NT>();
  const uint32_t zero_smem = zero_act_pad<NT>(smem);
  const uint32_t smem_base = zero_smem + kZeroBytes;      // the activation chunks

  static_assert(F != kFp8A8 || (!BULK && XA == 0), "the W8A8 kernel is built with the register ring only");
  constexpr int kEB = kActBytes<F>;                       // bytes per activation element
  const unsigned char* act = reinterpret_cast<const unsigned char*>(p.act) + static_cast<size_t>(m0) * p.K * 2;
  const int kend = (st0 + nsteps) * kStepK;
  const int iters = (nsteps + kRing - 1) / kRing;
  // Resident activations (CTA-uniform): when every chunk of this CTA's K slice, packed at mb rows
  // each, fits the p.act_smem bytes the launcher gave (decode: M = 1), all of them are loaded once
  // and the main loop runs without barriers, so no warp waits at each chunk for the slowest one;
  // else two chunk buffers alternate (a barrier before and after each chunk).
  const bool resident = p.act_resident != 0 && iters * mb * kActStride * 2 <= p.act_smem;
  auto buf_of = [&](int it) -> uint32_t {
    return resident ? smem_base + static_cast<uint32_t>(it * mb * kActStride * 2) : smem_base + (it & 1) * kBufBytes;
  };
  auto load_chunk = [&](int it) {
    if constexpr (kEB == 1) {                              // e4m3: 16 elements per segment, same row stride
      const int kc = (st0 + kRing * it) * kStepK;
      const uint32_t buf = buf_of(it);
      constexpr int kSegs = kChunkK / 16;
      for (int idx = tid; idx < mb * kSegs; idx += kThreads) {
        const int m = idx / kSegs;
        const int seg = idx - m * kSegs;
        const int k = kc + 16 * seg;
        if (k < kend)
          ptx::cp_async_16(buf + m * kActStride * 2 + 16 * seg,
                           reinterpret_cast<const unsigned char*>(p.act) + static_cast<size_t>(m0 + m) * p.K + k);
      }
      return;
    }
    const int kc = (st0 + kRing * it) * kStepK;            // first K of the chunk
    const uint32_t buf = buf_of(it);
    constexpr int kSegs = kChunkK / 8;                     // 16-byte segments per row
    for (int idx = tid; idx < mb * kSegs; idx += kThreads) {
      const int m = idx / kSegs;
      const int seg = idx - m * kSegs;
      const int k = kc + 8 * seg;
      if (k < kend) ptx::cp_async_16(buf + (m * kActStride + 8 * seg) * 2, act + (static_cast<size_t>(m) * p.K + k) * 2);
    }
  };

  const int g = lane >> 2;
  const uint4* wnext;
  const uint32_t* snext;
  seek_frag<F, NT>(static_cast<const uint4*>(p.w), reinterpret_cast<const uint32_t*>(p.scales), p.steps, tile16, st0,
                   lane, g, wnext, snext);

  float acc[TM][NT][4];
  zero_fill(acc);

  // Register ring: buffer u holds step kRing * it + u; it is refilled with step + kRing right after
  // it is consumed, so the two other steps stay in flight meanwhile. (BULK: one buffer, refilled
  // from the warp's shared-memory ring, whose first kBulkStages steps are requested here.)
  Frag<F, NT> f[BULK ? 1 : kRing];
  BulkRing<F, NT> br;
  if constexpr (BULK) {
    using B = BulkStage<F, NT>;
    const uint32_t rings = smem_base + static_cast<uint32_t>(p.act_smem);
    br.ring = rings + warp * (kBulkStages * B::kBytes);
    br.bars = rings + B::kRingBytes + warp * (kBulkStages * 8);
    br.wsrc = wnext - lane;
    const int super = tile16 / T::kTilesPerSuper;
    br.ssrc = reinterpret_cast<const uint32_t*>(p.scales) + (static_cast<size_t>(super) * p.steps + st0) * S::kS;
    br.soff = static_cast<uint32_t>(snext - br.ssrc) * 4;
    if (active && lane == 0) {
      for (int u = 0; u < kBulkStages; ++u) ptx::mbar_init(br.bars + 8 * u, 1);
      ptx::mbar_init_fence();
      br.policy = ptx::l2_evict_first_policy();
      for (int u = 0; u < kBulkStages && u < nsteps; ++u) br.issue(u);
    }
    __syncwarp();
  } else if (active) {
#pragma unroll
    for (int u = 0; u < kRing; ++u) {
      if (u < nsteps) {
        load_frag<F, NT>(f[u], wnext, snext);
        wnext += S::kW;
        snext += S::kS;
      }
    }
  }
  pdl_wait_then_release();     // weights in flight; activations, out, ws and counters only after this
  if (resident) {
    for (int it = 0; it < iters; ++it) load_chunk(it);
  } else {
    load_chunk(0);
  }
  ptx::cp_async_commit();
  const int mi = lane >> 3;   // ldmatrix.x4: matrix mi = (k16 sub-step 2 kp + mi / 2, k half mi % 2)
  const int r8 = lane & 7;    // its row: token m = 8 j + lane % 8
  for (int it = 0; it < iters; ++it) {
    if (!resident) {
      if (it + 1 < iters) load_chunk(it + 1);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();
    } else if (it == 0) {
      ptx::cp_async_wait<0>();                             // every chunk, committed as one group
    }
    if (!resident || it == 0) __syncthreads();             // resident: once, for all chunks
    if (active) {
      const uint32_t buf = buf_of(it);
      uint32_t rows[NT];
      act_rows<NT>(rows, buf, zero_smem, mb, mi, r8);
#pragma unroll
      for (int u = 0; u < kRing; ++u) {
        const int st = kRing * it + u;
        if constexpr (BULK) {
          if (st < nsteps) {
            br.read(f[0], st, lane);
            compute_step<F, BF16, NT, XA>(f[0], acc, rows, u, lane, salt);
            // every lane has consumed the stage: lane 0 orders those reads before the copy
            // engine's next write to it and requests the step kBulkStages ahead
            __syncwarp();
            if (lane == 0 && st + kBulkStages < nsteps) {
              ptx::fence_proxy_async_smem();
              br.issue(st + kBulkStages);
            }
          }
        } else if constexpr (F == kFp8A8) {
          if (st < nsteps) {
            // a_scale x b_scale of this thread's tokens 8 j + 2 q + c at K block st0 + st
            const float sb = __uint_as_float(f[u].s[0]);
            const int kb = st0 + st;
            float sab[NT][2];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const int m = 8 * j + 2 * (lane & 3) + c;
                sab[j][c] = m < mb ? __ldg(p.act_scales + static_cast<size_t>(m0 + m) * p.sa_sm +
                                           static_cast<size_t>(kb) * p.sa_sk) * sb
                                   : 0.f;
              }
            }
            compute_step_a8<NT>(f[u], acc, rows, u, sab);
            if (st + kRing < nsteps) {   // ring_step's refill
              load_frag<F, NT>(f[u], wnext, snext);
              wnext += S::kW;
              snext += S::kS;
            }
          }
        } else {
          if (st < nsteps) ring_step<F, BF16, NT, XA>(f[u], acc, rows, u, lane, st, nsteps, wnext, snext, salt);
        }
      }
    }
    if (!resident) __syncthreads();                        // the buffer is refilled next chunk
  }

  // Epilogue (emit_tile / finalize_tile above).
  const int q = lane & 3;
  const bool split = gridDim.y > 1;
  emit_tile<BF16>(p, acc, tile16, g, q, active, m0, mb, !split);
  if (!split) return;

  // Split-K: the last CTA of this (x, z) tile converts the sums, writes them and zeroes the
  // workspace and its counter (threadFenceReduction pattern).
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const int prev = atomicAdd(p.counters + blockIdx.z * gridDim.x + blockIdx.x, 1);
    s_last = (prev == static_cast<int>(gridDim.y) - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  finalize_tile<BF16, NT, TM, true>(p, tile16, g, q, active, m0, mb);
  if (tid == 0) p.counters[blockIdx.z * gridDim.x + blockIdx.x] = 0;
}

template <int NT>
constexpr int smem_bytes() {
  return 2 * act_buf_bytes<NT>() + kZeroBytes;
}

// Resident activations may take up to this many bytes of shared memory per CTA: with the zero
// region, two such CTAs still fit an SM (the NT <= 2 kernels run 2 CTAs per SM, register-bound),
// so the occupancy the host plans with (smem_bytes) holds. NT >= 4 buffers are larger already.
constexpr int kResidentCap = 96 * 1024;
template <int NT>
constexpr int max_smem_bytes() {
  return kZeroBytes + (2 * act_buf_bytes<NT>() > kResidentCap ? 2 * act_buf_bytes<NT>() : kResidentCap);
}

// The split-K launch's activation bytes: every chunk of a CTA's K slice at min(M, 64) rows when the
// caller allows resident activations and they fit kResidentCap, else the two alternating buffers.
template <int NT>
int act_smem_for(const WoParams& p) {
  const int two = 2 * act_buf_bytes<NT>();
  const long long iters = (p.steps_per_split + kRing - 1) / kRing;
  const long long need = iters * (p.M < kMBlock ? p.M : kMBlock) * kActStride * 2;
  return (p.act_resident && need > two && need <= kResidentCap) ? static_cast<int>(need) : two;
}

// One __global__ per format, named after the arm (gemv_w8a16_fp8 ...), so the SASS census and
// ncu name the scheme; __launch_bounds__ asks for 2 CTAs (16 warps) per SM where the
// accumulators allow it.
#define FP8LAB_WO_KERNEL(NAME, FMT)                                                          \
  template <bool BF16, int NT>                                                               \
  __global__ void __launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME(const WoParams p) {   \
    gemv_body<FMT, BF16, NT>(p);                                                             \
  }
FP8LAB_WO_KERNEL(gemv_w8a16_fp8, kFp8)
FP8LAB_WO_KERNEL(gemv_w8a16_int8, kInt8)
FP8LAB_WO_KERNEL(gemv_w4a16_nvfp4, kNvfp4)
FP8LAB_WO_KERNEL(gemv_w4a16_int4, kInt4)
#undef FP8LAB_WO_KERNEL

// The W8A8 blockwise kernel: e4m3 activations (p.act) and weights, bf16 out (see compute_step_a8).
template <int NT>
__global__ void __launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) gemv_w8a8_blockwise(const WoParams p) {
  gemv_body<kFp8A8, true, NT>(p);
}

// The fp8 kernel with EXTRA_ALU = XA (see alu_chain), decode tile only (NT = 1). salt: must be 0
// (the wrapper passes 0); XA = 0 compiles to the same SASS as gemv_w8a16_fp8<BF16, 1>.
template <bool BF16, int NT, int XA>
__global__ void __launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) gemv_w8a16_fp8_xalu(const WoParams p, uint32_t salt) {
  static_assert(NT == 1, "the EXTRA_ALU kernels are built for the decode tile (NT = 1) only");
  gemv_body<kFp8, BF16, NT, XA>(p, salt);
}

// Launch one of the kernels above on (grid, kThreads, smem): with p.pdl as a programmatic dependent
// launch (it may start while the kernel before it in the stream runs; common/pdl.cuh).
inline cudaError_t launch_wo(void (*kernel)(const WoParams), dim3 grid, int smem, cudaStream_t stream,
                             const WoParams& p) {
  if (!p.pdl) {
    kernel<<<grid, kThreads, smem, stream>>>(p);
    return cudaGetLastError();
  }
  return launch_with_pdl(kernel, grid, dim3(kThreads), static_cast<size_t>(smem), stream, p);
}

// grid as launch_gemv; NT = 1 needs no shared-memory opt-in.
// The EXTRA_ALU kernels keep the two buffers' shared memory (resident only within them).
template <bool BF16, int XA>
cudaError_t launch_gemv_xalu(const WoParams& p0, int splits, uint32_t salt, cudaStream_t stream) {
  using T = Tiling<kFp8, 1>;
  WoParams p = p0;
  p.act_smem = 2 * act_buf_bytes<1>();
  const int tiles_per_cta = kWarps * T::kTM;
  dim3 grid((p.n_tiles16 + tiles_per_cta - 1) / tiles_per_cta, splits, (p.M + kMBlock - 1) / kMBlock);
  gemv_w8a16_fp8_xalu<BF16, 1, XA><<<grid, kThreads, smem_bytes<1>(), stream>>>(p, salt);
  return cudaGetLastError();
}

template <int F, bool BF16, int NT>
struct KernelFor;
#define FP8LAB_WO_KFOR(NAME, FMT)                                                 \
  template <bool BF16, int NT>                                                    \
  struct KernelFor<FMT, BF16, NT> {                                               \
    static constexpr void (*fn)(const WoParams) = &NAME<BF16, NT>;                \
  };
FP8LAB_WO_KFOR(gemv_w8a16_fp8, kFp8)
FP8LAB_WO_KFOR(gemv_w8a16_int8, kInt8)
FP8LAB_WO_KFOR(gemv_w4a16_nvfp4, kNvfp4)
FP8LAB_WO_KFOR(gemv_w4a16_int4, kInt4)
#undef FP8LAB_WO_KFOR
template <int NT>
struct KernelFor<kFp8A8, true, NT> {
  static constexpr void (*fn)(const WoParams) = &gemv_w8a8_blockwise<NT>;
};

// Opt in to more than 48 KB of dynamic shared memory (resident activations, NT = 4, 8) once per
// instantiation; the occupancy query needs it too, or it reports that no CTA fits.
template <int F, bool BF16, int NT>
cudaError_t ensure_smem_attr() {
  constexpr int smem = max_smem_bytes<NT>();
  if (smem <= 48 * 1024) return cudaSuccess;
  static bool done = false;
  if (done) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(KernelFor<F, BF16, NT>::fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  done = e == cudaSuccess;
  return e;
}

// grid.x is the number of CTAs along N, grid.y the K splits, grid.z the M blocks.
template <int F, bool BF16, int NT>
cudaError_t launch_gemv(const WoParams& p0, int splits, cudaStream_t stream) {
  using T = Tiling<F, NT>;
  const cudaError_t e = ensure_smem_attr<F, BF16, NT>();
  if (e != cudaSuccess) return e;
  WoParams p = p0;
  p.act_smem = act_smem_for<NT>(p);
  const int tiles_per_cta = kWarps * T::kTM;
  dim3 grid((p.n_tiles16 + tiles_per_cta - 1) / tiles_per_cta, splits, (p.M + kMBlock - 1) / kMBlock);
  return launch_wo(KernelFor<F, BF16, NT>::fn, grid, kZeroBytes + p.act_smem, stream, p);
}

template <int F, bool BF16, int NT>
int occupancy_gemv() {
  if (ensure_smem_attr<F, BF16, NT>() != cudaSuccess) return -1;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, KernelFor<F, BF16, NT>::fn, kThreads,
                                                    smem_bytes<NT>()) != cudaSuccess)
    return -1;
  return blocks;
}

// ------------------------------------------------------------------------------------------------
// Stream-K schedule (issue 7: wave quantisation and the per-CTA pipeline ramp at decode).
//
// The split-K grid above launches x * splits CTAs of ceil(steps / splits) steps: at qwen3-8b
// gate_up that is 768 CTAs of 8 steps (4-bit: 4 steps) on 264 slots, 2.9 waves, and every CTA
// pays the ring's prologue (the first loads' DRAM latency with nothing else in flight) and an
// epilogue. Here the grid is persistent (about one CTA per slot) and CTA c walks a contiguous
// range of the (CTA tile along N, K step) units in tile-major order. The register ring and the
// activation chunks are indexed by unit, not by K, so the loads of the next tile's first steps
// are already in flight while the current tile is flushed: one ramp per CTA instead of per tile.
// At a tile boundary the CTA either owns the whole tile's K (plain store, same fp32 order as
// splits = 1, so bit-identical) or adds its partial sums to the fp32 workspace with red.add and
// adds the number of K steps it contributed to the tile's counter; the CTA whose addition
// completes the tile's steps converts, writes and zeroes the workspace and the counter. No CTA
// ever waits for another, so residency does not matter for correctness.
// grid (ceil(tiles_x * steps / units_per_cta), 1, ceil(M / 64)), block 256, dynamic smem kZeroBytes + p.act_smem
// (act_smem_for_sk: resident activations at small M x K, else two chunk buffers).
// ------------------------------------------------------------------------------------------------
template <int F, bool BF16, int NT>
__device__ __forceinline__ void store_or_reduce_tile(const WoParams& p, float (&acc)[Tiling<F, NT>::kTM][NT][4],
                                                     int cx, int done, bool whole, int m0, int mb, int* s_last) {
  using T = Tiling<F, NT>;
  constexpr int TM = T::kTM;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int q = lane & 3;
  const int tile16 = (cx * kWarps + warp) * TM;
  const bool active = tile16 < p.n_tiles16;
  emit_tile<BF16>(p, acc, tile16, g, q, active, m0, mb, whole);
  if (whole) return;   // CTA-uniform
  int* counter = p.counters + blockIdx.z * p.tiles_x + cx;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int prev = atomicAdd(counter, done);
    *s_last = (prev + done == p.steps);
  }
  __syncthreads();
  if (!*s_last) return;
  __threadfence();
  finalize_tile<BF16, NT, TM, false>(p, tile16, g, q, active, m0, mb);
  if (threadIdx.x == 0) *counter = 0;
}

// Stream-K activation chunk `it` (CTA-relative units 3 it .. 3 it + 2; a chunk may straddle a
// tile boundary, where K restarts at 0): slot u holds the 128 K columns of its unit's own step.
// cstep: the step of the chunk's first unit; the caller advances it by kRing (mod steps), so no
// division per chunk. valid: slots holding a unit of this CTA (1..3).
template <int NT>
__device__ __forceinline__ void load_chunk_sk(const WoParams& p, const unsigned char* act, uint32_t buf, int mb,
                                              int cstep, int valid) {
  const int steps = p.steps;
  const int s1 = cstep + 1 == steps ? 0 : cstep + 1;
  const int s2 = s1 + 1 == steps ? 0 : s1 + 1;
  constexpr int kSegs = kChunkK / 8;               // 16-byte segments per row
  constexpr int kSegsPerStep = kStepK / 8;
  for (int idx = threadIdx.x; idx < mb * kSegs; idx += kThreads) {
    const int m = idx / kSegs;
    const int seg = idx - m * kSegs;
    const int slot = seg / kSegsPerStep;
    const int sk = slot == 0 ? cstep : (slot == 1 ? s1 : s2);
    const int k = sk * kStepK + 8 * (seg - slot * kSegsPerStep);
    if (slot < valid) ptx::cp_async_16(buf + (m * kActStride + 8 * seg) * 2, act + (static_cast<size_t>(m) * p.K + k) * 2);
  }
}

// Stream-K resident activations: K steps first .. first + n - 1 (mod p.steps) of the M block's mb
// rows, row m at buf + m * row_bytes (whole rows of K, (K + 8) elements apart), column k at + 2 k.
__device__ __forceinline__ void load_resident_sk(const WoParams& p, const unsigned char* act, uint32_t buf, int mb,
                                                 int row_bytes, int first, int n) {
  constexpr int kSegsPerStep = kStepK / 8;         // 16-byte segments per row and step
  const int per_row = n * kSegsPerStep;
  for (int idx = threadIdx.x; idx < mb * per_row; idx += kThreads) {
    const int m = idx / per_row;
    const int r = idx - m * per_row;
    const int su = r / kSegsPerStep;
    const int s = first + su < p.steps ? first + su : first + su - p.steps;
    const int k = s * kStepK + 8 * (r - su * kSegsPerStep);
    ptx::cp_async_16(buf + m * row_bytes + k * 2, act + (static_cast<size_t>(m) * p.K + k) * 2);
  }
}

// The stream-K body. The CTA's units [0, nunits) (relative to u0 = blockIdx.x * units_per_cta)
// are cut, once per CTA, into pieces at two kinds of stops: the end of each tile (flush the
// accumulators) and three units before it (the load cursor, which runs kRing units ahead of
// the compute, enters the next tile: re-seek the weight / scale pointers). Between two stops
// sk_range runs the split-K main loop (ring_step: compute_step + the refill kRing units ahead,
// the same code as gemv_body's), so the hot loop has no per-step tile bookkeeping; and because
// the refills before a flush already load the next tile's first steps, the pipeline never
// drains at a tile boundary. A warp whose 16-row tiles lie past N in the last tile along N
// stops loading there (wlimit) but keeps computing on stale registers, never stored: a
// warp-divergent branch around compute_step would split the refill loads off the compute
// (ptxas then issues them after the step's last HMMA instead of between its mmas).
template <int F, bool BF16, int NT>
__device__ __forceinline__ void gemv_body_sk(const WoParams& p) {
  using T = Tiling<F, NT>;
  using S = Strides<F>;
  constexpr int TM = T::kTM;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_last;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;

  const int m0 = blockIdx.z * kMBlock;
  const int mb = min(kMBlock, p.M - m0);
  const int steps = p.steps;
  const int u0 = blockIdx.x * p.units_per_cta;
  const int nunits = min(p.tiles_x * steps, u0 + p.units_per_cta) - u0;
  if (nunits <= 0) return;   // CTA-uniform (the host launches none such)

  constexpr int kBufBytes = act_buf_bytes<NT>();
  const uint32_t zero_smem = zero_act_pad<NT>(smem);
  const uint32_t smem_base = zero_smem + kZeroBytes;      // the activation chunks
  const unsigned char* act = reinterpret_cast<const unsigned char*>(p.act) + static_cast<size_t>(m0) * p.K * 2;
  // Resident activations (CTA-uniform): when the M block's rows of the whole K, (K + 8) elements
  // apart, fit the p.act_smem bytes the launcher gave (decode: M = 1), the K steps of this CTA's
  // units are loaded once and the main loop runs without a barrier (issue 22: at qwen3-8b gate_up
  // the chunks' barriers held 21% of FP8's warp cycles); else two chunk buffers alternate, with
  // two barriers per chunk. Row stride (K + 8) x 2 bytes: 16 modulo 128, so the 8 rows of an
  // ldmatrix hit 8 distinct 16-byte bank groups.
  // Built for the register-bound tiles (NT <= 2: M <= 16) only; at NT >= 4 the branch is dead code
  // and the kernels are those of the chunked body alone (no extra registers near the 255 cap).
  const int row_bytes = (steps * kStepK + 8) * 2;
  const bool resident = NT <= 2 && p.act_resident != 0 && mb * row_bytes <= p.act_smem;

  // The only divisions: where the CTA starts (tile cx0, step cs0).
  const int cx0 = u0 / steps;
  const int cs0 = u0 - cx0 * steps;
  // Loads stop (per warp) at the first unit of the last tile along N if this warp's rows lie
  // past N there (only that tile can be partial: tiles_x = ceil(n_tiles16 / (8 TM))).
  int wlimit = nunits;
  if (((p.tiles_x - 1) * kWarps + warp) * TM >= p.n_tiles16)
    wlimit = max(0, min(nunits, (p.tiles_x - 1) * steps - u0));

  // Load cursor: tile lx, step ls, and this lane's / thread's pointers there.
  const uint4* w0 = static_cast<const uint4*>(p.w);
  const uint32_t* s0p = reinterpret_cast<const uint32_t*>(p.scales);
  int lx = cx0;
  int ls = cs0;
  const uint4* wnext;
  const uint32_t* snext;
  auto seek = [&]() { seek_frag<F, NT>(w0, s0p, steps, (lx * kWarps + warp) * TM, ls, lane, g, wnext, snext); };
  seek();

  float acc[TM][NT][4];
  zero_fill(acc);

  // Prologue: units 0..2, which may already cross tile boundaries (steps < 3 or a CTA starting
  // at a tile's last steps). The ring starts zeroed: a warp that never loads computes on zeros.
  Frag<F, NT> f[kRing];
#pragma unroll
  for (int u = 0; u < kRing; ++u) {
#pragma unroll
    for (int w = 0; w < T::kWords; ++w) f[u].w[w] = 0u;
#pragma unroll
    for (int w = 0; w < T::kScaleWords; ++w) f[u].s[w] = 0u;
  }
#pragma unroll
  for (int u = 0; u < kRing; ++u) {
    if (u < nunits) {
      if (u < wlimit) load_frag<F, NT>(f[u], wnext, snext);
      if (++ls == steps) {
        ls = 0;
        ++lx;
        seek();
      } else {
        wnext += S::kW;
        snext += S::kS;
      }
    }
  }
  pdl_wait_then_release();                   // as gemv_body: weights in flight, activations after this
  int cstep = cs0;                           // step of the next chunk's first unit
  auto chunk = [&](int it) {
    load_chunk_sk<NT>(p, act, smem_base + (it & 1) * kBufBytes, mb, cstep, min(kRing, nunits - kRing * it));
#pragma unroll
    for (int u = 0; u < kRing; ++u) cstep = cstep + 1 == steps ? 0 : cstep + 1;
  };
  if (resident) {
    load_resident_sk(p, act, smem_base, mb, row_bytes, cs0, min(nunits, steps));
  } else {
    chunk(0);
  }
  ptx::cp_async_commit();
  if (resident) {
    ptx::cp_async_wait<0>();
    __syncthreads();                         // the only barrier before the first flush
  }
  const int nchunks = (nunits + kRing - 1) / kRing;
  const int mi = lane >> 3;
  const int r8 = lane & 7;

  // Units [a, b) of the CTA: split-K's main loop, entered and left at any unit. The chunk
  // handshake belongs to a chunk's first unit (u = 0), so a chunk split between two pieces
  // does it once. Its leading barrier is split-K's trailing one (buffer (it + 1) & 1 was read
  // during chunk it - 1).
  auto sk_range = [&](int a, int b) {
    for (int it = a / kRing; kRing * it < b; ++it) {
      const uint32_t buf = smem_base + (it & 1) * kBufBytes;
      uint32_t rows[NT];
      act_rows<NT>(rows, buf, zero_smem, mb, mi, r8);
#pragma unroll
      for (int u = 0; u < kRing; ++u) {
        const int i = kRing * it + u;
        if (i >= a && i < b) {   // CTA-uniform
          if (u == 0) {
            __syncthreads();
            if (it + 1 < nchunks) chunk(it + 1);
            ptx::cp_async_commit();
            ptx::cp_async_wait<1>();
            __syncthreads();
          }
          ring_step<F, BF16, NT>(f[u], acc, rows, u, lane, i, wlimit, wnext, snext);
        }
      }
    }
  };
  // The same with resident activations: no handshake; each unit's rows point at its own K step
  // (csr, the compute cursor's step, wraps to 0 at a tile boundary) and its K offset is 0.
  int csr = cs0;
  auto sk_range_resident = [&](int a, int b) {
    for (int it = a / kRing; kRing * it < b; ++it) {
#pragma unroll
      for (int u = 0; u < kRing; ++u) {
        const int i = kRing * it + u;
        if (i >= a && i < b) {   // CTA-uniform
          uint32_t rows[NT];
          act_rows<NT>(rows, smem_base + static_cast<uint32_t>(csr * kStepK * 2), zero_smem, mb, mi, r8, row_bytes);
          ring_step<F, BF16, NT>(f[u], acc, rows, 0, lane, i, wlimit, wnext, snext);
          csr = csr + 1 == steps ? 0 : csr + 1;
        }
      }
    }
  };

  // Stops (CTA-relative): ce = end of the compute cursor's tile (or nunits), le = end of the
  // load cursor's tile (the first one past the prologue's units).
  int cx = cx0;
  int cbeg = cs0;                            // first step of tile cx in this CTA
  int seg0 = 0;                              // first unit of tile cx in this CTA
  int ce = min(nunits, steps - cs0);
  int le = steps - cs0;
  while (le <= kRing) le += steps;
  for (int a = 0; a < nunits;) {             // CTA-uniform
    const int b = min(ce, le < nunits ? le - kRing : nunits);
    if (resident) {
      sk_range_resident(a, b);
    } else {
      sk_range(a, b);
    }
    a = b;
    if (le < nunits && a == le - kRing) {   // the next refill is the first step of tile lx + 1
      ++lx;
      ls = 0;
      seek();
      le += steps;
    }
    if (a == ce) {
      const int done = ce - seg0;
      store_or_reduce_tile<F, BF16, NT>(p, acc, cx, done, cbeg == 0 && done == steps, m0, mb, &s_last);
      zero_fill(acc);
      ++cx;
      cbeg = 0;
      seg0 = ce;
      ce = min(nunits, ce + steps);
    }
  }
}

// The stream-K kernels: same names with an _sk suffix (the SASS census and the split-K
// kernels' static counts pick their kernels by the exact arm name, so these stay apart).
#define FP8LAB_WO_SK_KERNEL(NAME, FMT)                                                        \
  template <bool BF16, int NT>                                                                \
  __global__ void __launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME##_sk(const WoParams p) { \
    gemv_body_sk<FMT, BF16, NT>(p);                                                           \
  }
FP8LAB_WO_SK_KERNEL(gemv_w8a16_fp8, kFp8)
FP8LAB_WO_SK_KERNEL(gemv_w8a16_int8, kInt8)
FP8LAB_WO_SK_KERNEL(gemv_w4a16_nvfp4, kNvfp4)
FP8LAB_WO_SK_KERNEL(gemv_w4a16_int4, kInt4)
#undef FP8LAB_WO_SK_KERNEL

template <int F, bool BF16, int NT>
struct KernelForSk;
#define FP8LAB_WO_SK_KFOR(NAME, FMT)                                 \
  template <bool BF16, int NT>                                       \
  struct KernelForSk<FMT, BF16, NT> {                                \
    static constexpr void (*fn)(const WoParams) = &NAME##_sk<BF16, NT>; \
  };
FP8LAB_WO_SK_KFOR(gemv_w8a16_fp8, kFp8)
FP8LAB_WO_SK_KFOR(gemv_w8a16_int8, kInt8)
FP8LAB_WO_SK_KFOR(gemv_w4a16_nvfp4, kNvfp4)
FP8LAB_WO_SK_KFOR(gemv_w4a16_int4, kInt4)
#undef FP8LAB_WO_SK_KFOR

// The stream-K launch's activation bytes: the M block's rows of the whole K when the caller allows
// resident activations and they fit kResidentCap, else the two alternating chunk buffers.
template <int NT>
int act_smem_for_sk(const WoParams& p) {
  const long long need = static_cast<long long>(p.M < kMBlock ? p.M : kMBlock) * (static_cast<long long>(p.steps) * kStepK + 8) * 2;
  return (NT <= 2 && p.act_resident && need <= kResidentCap) ? static_cast<int>(need) : 2 * act_buf_bytes<NT>();
}

// ctas: persistent CTAs per M block (the host passes sms x CTAs per SM, or fewer); p.tiles_x,
// p.units_per_cta and p.act_smem are set here from it.
template <int F, bool BF16, int NT>
cudaError_t launch_gemv_sk(WoParams p, int ctas, cudaStream_t stream) {
  using T = Tiling<F, NT>;
  constexpr int smem_max = max_smem_bytes<NT>();
  if (smem_max > 48 * 1024) {
    static bool done = false;
    if (!done) {
      const cudaError_t e =
          cudaFuncSetAttribute(KernelForSk<F, BF16, NT>::fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max);
      if (e != cudaSuccess) return e;
      done = true;
    }
  }
  if (ctas < 1) return cudaErrorInvalidValue;
  const int tiles_per_cta = kWarps * T::kTM;
  p.tiles_x = (p.n_tiles16 + tiles_per_cta - 1) / tiles_per_cta;
  const long long units = static_cast<long long>(p.tiles_x) * p.steps;
  const long long upc = (units + ctas - 1) / ctas;
  p.units_per_cta = static_cast<int>(upc);
  p.act_smem = act_smem_for_sk<NT>(p);
  dim3 grid(static_cast<unsigned>((units + upc - 1) / upc), 1, (p.M + kMBlock - 1) / kMBlock);
  return launch_wo(KernelForSk<F, BF16, NT>::fn, grid, kZeroBytes + p.act_smem, stream, p);
}

// ------------------------------------------------------------------------------------------------
// The bulk schedule's kernels (gemv_body with BULK = true; see BulkStage above): the split-K grid,
// named after the arm with a _bulk suffix. Activations: resident up to kBulkResidentCap, else the
// two alternating chunk buffers.
// ------------------------------------------------------------------------------------------------
#define FP8LAB_WO_BULK_KERNEL(NAME, FMT)                                                          \
  template <bool BF16, int NT>                                                                    \
  __global__ void __launch_bounds__(kThreads, (NT <= 2 ? 2 : 1)) NAME##_bulk(const WoParams p) { \
    gemv_body<FMT, BF16, NT, 0, true>(p);                                                         \
  }
FP8LAB_WO_BULK_KERNEL(gemv_w8a16_fp8, kFp8)
FP8LAB_WO_BULK_KERNEL(gemv_w8a16_int8, kInt8)
FP8LAB_WO_BULK_KERNEL(gemv_w4a16_nvfp4, kNvfp4)
FP8LAB_WO_BULK_KERNEL(gemv_w4a16_int4, kInt4)
#undef FP8LAB_WO_BULK_KERNEL

template <int F, bool BF16, int NT>
struct KernelForBulk;
#define FP8LAB_WO_BULK_KFOR(NAME, FMT)                              \
  template <bool BF16, int NT>                                      \
  struct KernelForBulk<FMT, BF16, NT> {                             \
    static constexpr void (*fn)(const WoParams) = &NAME##_bulk<BF16, NT>; \
  };
FP8LAB_WO_BULK_KFOR(gemv_w8a16_fp8, kFp8)
FP8LAB_WO_BULK_KFOR(gemv_w8a16_int8, kInt8)
FP8LAB_WO_BULK_KFOR(gemv_w4a16_nvfp4, kNvfp4)
FP8LAB_WO_BULK_KFOR(gemv_w4a16_int4, kInt4)
#undef FP8LAB_WO_BULK_KFOR

// The bulk launch's activation bytes: resident chunks when allowed and within kBulkResidentCap.
template <int NT>
int bulk_act_smem_for(const WoParams& p) {
  const int two = 2 * act_buf_bytes<NT>();
  const long long iters = (p.steps_per_split + kRing - 1) / kRing;
  const long long need = iters * (p.M < kMBlock ? p.M : kMBlock) * kActStride * 2;
  return (p.act_resident && need > two && need <= kBulkResidentCap) ? static_cast<int>(need) : two;
}

template <int F, int NT>
constexpr int bulk_max_smem() {
  return bulk_smem_bytes<F, NT>(2 * act_buf_bytes<NT>() > kBulkResidentCap ? 2 * act_buf_bytes<NT>()
                                                                           : kBulkResidentCap);
}

template <int F, bool BF16, int NT>
cudaError_t ensure_bulk_smem_attr() {
  constexpr int smem = bulk_max_smem<F, NT>();
  if (smem <= 48 * 1024) return cudaSuccess;
  static bool done = false;
  if (done) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(KernelForBulk<F, BF16, NT>::fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  done = e == cudaSuccess;
  return e;
}

// As launch_gemv. The packed scales must be 16-byte aligned (bulk copies; the host checks).
template <int F, bool BF16, int NT>
cudaError_t launch_gemv_bulk(const WoParams& p0, int splits, cudaStream_t stream) {
  using T = Tiling<F, NT>;
  const cudaError_t e = ensure_bulk_smem_attr<F, BF16, NT>();
  if (e != cudaSuccess) return e;
  WoParams p = p0;
  p.act_smem = bulk_act_smem_for<NT>(p);
  const int tiles_per_cta = kWarps * T::kTM;
  dim3 grid((p.n_tiles16 + tiles_per_cta - 1) / tiles_per_cta, splits, (p.M + kMBlock - 1) / kMBlock);
  return launch_wo(KernelForBulk<F, BF16, NT>::fn, grid, bulk_smem_bytes<F, NT>(p.act_smem), stream, p);
}

// CTAs per SM at the largest shared memory a bulk launch takes.
template <int F, bool BF16, int NT>
int occupancy_gemv_bulk() {
  if (ensure_bulk_smem_attr<F, BF16, NT>() != cudaSuccess) return -1;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, KernelForBulk<F, BF16, NT>::fn, kThreads,
                                                    bulk_max_smem<F, NT>()) != cudaSuccess)
    return -1;
  return blocks;
}

// ------------------------------------------------------------------------------------------------
// Dequant probe: words in, the dequant's 16-bit pairs out, nothing else. The GPU test runs every
// code through it and compares with the emulator bit for bit; the SASS check compiles it against
// a pass-through twin (DEQUANT = false) and counts the difference in the loop body, where the
// constants are hoisted as they are in the GEMV's main loop.
// ------------------------------------------------------------------------------------------------
// words: [n] uint32; out: [n * H] uint32 with H = 2 (8-bit) or 4 (4-bit) half2 per word.
template <int F, bool BF16, bool DEQUANT>
__global__ void dequant_probe(const uint32_t* __restrict__ words, uint32_t* __restrict__ out, int n) {
  constexpr int H = FormatTraits<F>::kBits == 8 ? 2 : 4;
#pragma unroll 1
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint32_t q = words[i];
    uint32_t h[H];
    if constexpr (!DEQUANT) {
#pragma unroll
      for (int k = 0; k < H; ++k) h[k] = q;
    } else if constexpr (F == kFp8) {
      dequant_e4m3<BF16>(q, h);
    } else if constexpr (F == kInt8) {
      if constexpr (BF16) dequant_int8_bf16(q, h); else dequant_int8_fp16(q, h);
    } else if constexpr (F == kNvfp4) {
      dequant_e2m1<BF16>(q, h);
    } else {
      if constexpr (BF16) dequant_int4_bf16(q, h); else dequant_int4_fp16(q, h);
    }
#pragma unroll
    for (int k = 0; k < H; ++k) out[static_cast<size_t>(i) * H + k] = h[k];
  }
}

}  // namespace wo
}  // namespace fp8lab
