"""Probe (issue 22, target 1): does a row-major, CUDA-core FP8 decode GEMV of gemlite's shape (CTAs
of a few warps that split one row block's K among all their threads, every load of a row block
issued before any arithmetic, many CTAs per SM, no tensor cores, no split-K) stream closer to the
copy rate at M = 1 than fp8lab's tensor-core GEMV (gemv_w16: 16-row warps, a three-step register
ring, two CTAs per SM)?

    python scripts/probes/decode_rows.py [--shapes ...] [--configs 4x4x2,...] [--ms 1,2,4]
                                         [--rep-ms 8] [--out DIR]        # on a GPU
    python scripts/probes/decode_rows.py --ptxas                         # CPU: registers, spills
    python scripts/probes/decode_rows.py --fmt int4 [...]                # INT4, two dequants (below)

Why: at a7a362c gemlite's FP8 GEMV (4 warps, 1-8 rows per CTA, BLOCK_K 1024-4096, no split-K)
streamed 0.94 / 0.96 of copy at qwen3-8b / llama3-8b gate_up where gemv_w16 reached 0.73 / 0.85.
decode_ablate's w4 / w2 (smaller CTAs of the same tensor-core kernel) and lb3 / cpa3x3 (3 CTAs per
SM) did not close the gap, so this probe changes the whole work division instead.

The kernel here (`rows_gemv<WARPS, ROWS, V, M, MODE>`, written for this probe): weights row-major
(N, K) e4m3 codes, one bf16 scale per (row, 128 K), activations (M, K) bf16, output (M, N) bf16.
A CTA of WARPS warps owns ROWS consecutive rows; per K block of WARPS x 32 x V x 16 bytes each thread
loads V 16-byte words of every row (ld.global.nc.L1::no_allocate; each instruction is one contiguous
512 bytes per warp), then its activations (L1-cached) and the rows' scales, then converts with
cvt.rn.f16x2.e4m3x2 and accumulates in fp32 (each 16-element partial sum times its group scale). A
warp-shuffle tree and shared memory sum the CTA's threads; thread (m, r) stores out[m, n0 + r].
MODE 1 is the same loads with an XOR instead of the arithmetic (the launch's own access-pattern
ceiling). Checked against float64 (relative Frobenius error < 1e-2) before it is timed.

--fmt int4: two codes per byte (value = code - 8, the even k in the low nibble), 32 per 16-byte word,
dequantised on the CUDA cores two ways (MODE 2 `magic`: the nibble in 2^23's low mantissa, minus
2^23 + 8; MODE 3 `unit`: the nibble in 1.0's top mantissa bits, the offset applied once per word
from the activations' sum; MODE 5 `h2`: Marlin's trick on packed halves, two nibbles per LOP3 into
fp16 1024 + code, HSUB2 / HFMA2 to code - 8, HFMA2 with fp16 activations into an fp16 sum per 32
elements; MODE 6 `h2s`: h2 with each thread's 32 activations scaled by a power of two into [1, 2)
before fp16 and the dot scaled back, so any bf16 activation fits), beside the package's INT4 gemv_w16. Expected: magic and unit ALU-bound (~5 SASS
instructions per element at 4x4x1, sm_90 --ptxas build, where the copy rate allows ~3.9), h2 not
(~1.8 per element).

Timed in one process, weights rotated past 2x L2, CUDA-graph replays (fp8lab.measure.bench), beside
the package's FP8 gemv_w16 (split-K at its pick, and stream-K), cuBLAS BF16 on the same shape, and
the 2 GiB copy. Prints the fraction of copy per (shape, M, config); writes probe_decode_rows.csv to
--out (or $OUT). Clocks are observed, never set. Not an arm: notebooks never import it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

SHAPES = "llama3-70b:down_proj,qwen3-8b:gate_up,llama3-8b:gate_up,llama3-8b:down_proj,llama3-70b:qkv"
# WARPSxROWSxV: warps per CTA, rows per CTA, 16-byte words per row per thread per K block
CONFIGS = "4x1x2,4x2x2,4x4x1,4x4x2,4x8x1,4x8x2,2x4x2,2x8x2,8x4x1,8x2x2,4x2x4,4x4x4"
STREAM_CONFIGS = ("4x4x2", "4x8x1", "4x8x2")   # also timed in MODE 1 (loads alone)

KERNEL = r"""
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace rows {

__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// 16 e4m3 codes (4 words, byte 0 = lowest k) dotted with 16 fp32 activations
__device__ __forceinline__ float dot16(const uint4& w, const float (&x)[16]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ws[i] & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(ws[i] >> 16), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    s0 = fmaf(a.x, x[4 * i + 0], s0);
    s1 = fmaf(a.y, x[4 * i + 1], s1);
    s0 = fmaf(b.x, x[4 * i + 2], s0);
    s1 = fmaf(b.y, x[4 * i + 3], s1);
  }
  return s0 + s1;
}

__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float* f) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

// 32 int4 codes (4 words; nibble j of word i = k 8 i + j, low nibble first), value = code - 8, dotted
// with 32 fp32 activations. MAGIC (MODE 2): each nibble into the low mantissa of 2^23 (exact), minus
// 2^23 + 8, one FMA: shift, and/or, add, FMA per element. UNIT (MODE 3): each nibble into the top
// mantissa bits of 1.0, so f = 1 + code / 16 (exact), one FMA, and the offset applied once per word:
// sum (f - 1.5) x = sum f x - 1.5 sum x, times 16 (sx = sum x, shared by the CTA's rows): shift,
// and/or, FMA per element.
template <int MODE>
__device__ __forceinline__ float dot32(const uint4& w, const float (&x)[32], float sx) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float v;
      if constexpr (MODE == 2) {
        v = __uint_as_float(0x4B000000u | ((ws[i] >> (4 * j)) & 0xFu)) - 8388616.0f;
      } else {
        const uint32_t b = 4 * j <= 19 ? (ws[i] << (19 - 4 * j)) : (ws[i] >> (4 * j - 19));
        v = __uint_as_float(0x3F800000u | (b & 0x00780000u));
      }
      if (j & 1) {
        s1 = fmaf(v, x[8 * i + j], s1);
      } else {
        s0 = fmaf(v, x[8 * i + j], s0);
      }
    }
  }
  if constexpr (MODE == 2) {
    return s0 + s1;
  } else {
    return 16.f * ((s0 + s1) - 1.5f * sx);
  }
}

// H2 (MODE 5, Marlin's bit trick on packed halves): one LOP3 puts two nibbles (k and k + 4 of a word)
// into the low mantissas of two fp16 1024s, one more the next two (bits 4-7, as 1024 + 16 code); HSUB2
// / HFMA2 make them code - 8 (exact), HFMA2 dots them with fp16 activations (permuted to match) into an
// fp16 accumulator per 32 elements, then fp32: ~1.8 instructions per element. Activations beyond fp16's
// range would overflow (a probe, not a kernel for any input).
__device__ __forceinline__ float dot32_h2(const uint4& w, const __half2 (&xh)[16]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const __half2 off = __halves2half2(__ushort_as_half(0x6408u), __ushort_as_half(0x6408u));     // 1032
  const __half2 s16 = __halves2half2(__ushort_as_half(0x2C00u), __ushort_as_half(0x2C00u));     // 1/16
  const __half2 m72 = __halves2half2(__ushort_as_half(0xD480u), __ushort_as_half(0xD480u));     // -72
  __half2 a0 = __float2half2_rn(0.f), a1 = a0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t q = ws[i];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t lo, hi;  // (q & mask) | 1024s in one LOP3 each (C++ gives two: one immediate per LOP3)
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

// MODE 0: the FP8 GEMV; MODE 1: the same weight, scale and activation loads, XORed, stored only where
// the XOR equals `key` (never, for random data), so nothing is optimised away. MODE 2 / 3: the INT4
// GEMV (two codes per byte, dot32 above); MODE 4: its loads alone.
template <int WARPS, int ROWS, int V, int M, int MODE>
__global__ void __launch_bounds__(WARPS * 32) rows_gemv(const uint8_t* __restrict__ w,
                                                        const __nv_bfloat16* __restrict__ s,
                                                        const __nv_bfloat16* __restrict__ x,
                                                        __nv_bfloat16* __restrict__ out, uint32_t* __restrict__ sink,
                                                        int N, int K, uint32_t key) {
  constexpr int T = WARPS * 32;
  constexpr bool I4 = MODE >= 2;
  constexpr bool LOADS = MODE == 1 || MODE == 4;
  constexpr int E = I4 ? 32 : 16;             // K elements per 16-byte word
  constexpr int KB = T * V * E;
  const int kbytes = I4 ? K / 2 : K;
  const int tid = threadIdx.x;
  const int n0 = blockIdx.x * ROWS;
  const int groups = K >> 7;
  float acc[M][ROWS];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[m][r] = 0.f;
  uint32_t hx = 0u;

  for (int kb = 0; kb < K; kb += KB) {
    uint4 wv[ROWS][V];
    float sc[ROWS][V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int k0 = kb + (v * T + tid) * E;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const bool ok = k0 < K && n0 + r < N;
        wv[r][v] = ok ? ldg_stream(w + static_cast<size_t>(n0 + r) * kbytes + (I4 ? k0 / 2 : k0))
                      : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int k0 = kb + (v * T + tid) * E;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const bool ok = k0 < K && n0 + r < N;
        sc[r][v] = ok ? __bfloat162float(s[static_cast<size_t>(n0 + r) * groups + (k0 >> 7)]) : 0.f;
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int k0 = kb + (v * T + tid) * E;
      if (k0 >= K) continue;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4* xp = reinterpret_cast<const uint4*>(x + static_cast<size_t>(m) * K + k0);
        const uint4 xa = __ldg(xp), xb = __ldg(xp + 1);
        uint4 xc = make_uint4(0u, 0u, 0u, 0u), xd = xc;
        if constexpr (I4) {
          xc = __ldg(xp + 2);
          xd = __ldg(xp + 3);
        }
        if constexpr (LOADS) {
          hx ^= xa.x ^ xb.w ^ xc.x ^ xd.w;
#pragma unroll
          for (int r = 0; r < ROWS; ++r) hx ^= wv[r][v].x ^ wv[r][v].y ^ wv[r][v].z ^ wv[r][v].w ^ __float_as_uint(sc[r][v]);
        } else if constexpr (I4) {
          float xf[32];
          bf16x8_to_f32(xa, xf);
          bf16x8_to_f32(xb, xf + 8);
          bf16x8_to_f32(xc, xf + 16);
          bf16x8_to_f32(xd, xf + 24);
          float sx = 0.f;
          if constexpr (MODE == 5 || MODE == 6) {
            // MODE 6 scales the thread's 32 activations by a power of two that puts their largest
            // magnitude in [1, 2) (so any bf16 input fits fp16's range) and the dot back by its inverse
            float inv = 1.f, back = 1.f;
            if constexpr (MODE == 6) {
              float amax = 0.f;
#pragma unroll
              for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(xf[i]));
              const uint32_t e = min(max((__float_as_uint(amax) >> 23) & 0xFFu, 1u), 253u);
              inv = __uint_as_float((254u - e) << 23);
              back = __uint_as_float(e << 23);
            }
            // xh[4 i + j] = (x[8 i + j], x[8 i + j + 4]) for the nibble pairs dot32_h2 forms
            __half2 xh[16];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int j = 0; j < 4; ++j) xh[4 * i + j] = __floats2half2_rn(xf[8 * i + j] * inv, xf[8 * i + j + 4] * inv);
#pragma unroll
            for (int r = 0; r < ROWS; ++r) acc[m][r] = fmaf(dot32_h2(wv[r][v], xh), sc[r][v] * back, acc[m][r]);
            continue;
          }
          if constexpr (MODE == 3) {
#pragma unroll
            for (int i = 0; i < 32; ++i) sx += xf[i];
          }
#pragma unroll
          for (int r = 0; r < ROWS; ++r) acc[m][r] = fmaf(dot32<MODE>(wv[r][v], xf, sx), sc[r][v], acc[m][r]);
        } else {
          float xf[16];
          bf16x8_to_f32(xa, xf);
          bf16x8_to_f32(xb, xf + 8);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) acc[m][r] = fmaf(dot16(wv[r][v], xf), sc[r][v], acc[m][r]);
        }
      }
    }
  }

  if constexpr (LOADS) {
    if (hx == key) sink[blockIdx.x * T + tid] = hx;
    return;
  } else {
    __shared__ float red[WARPS][M * ROWS];
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float v = acc[m][r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[warp][m * ROWS + r] = v;
      }
    __syncthreads();
    if (tid < M * ROWS) {
      float v = 0.f;
#pragma unroll
      for (int i = 0; i < WARPS; ++i) v += red[i][tid];
      const int m = tid / ROWS, r = tid % ROWS;
      if (n0 + r < N) out[static_cast<size_t>(m) * N + n0 + r] = __float2bfloat16_rn(v);
    }
  }
}

}  // namespace rows
"""

BIND = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include "rows_gemv.cuh"

using Fn = void (*)(const uint8_t*, const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, uint32_t*, int, int, uint32_t);
struct Entry { int warps, rows, v, m, mode; const void* fn; };
static const Entry kTable[] = {
%TABLE%
};

static const Entry& find(int warps, int rows, int v, int m, int mode) {
  for (const auto& e : kTable)
    if (e.warps == warps && e.rows == rows && e.v == v && e.m == m && e.mode == mode) return e;
  TORCH_CHECK(false, "rows_gemv: no instance ", warps, "x", rows, "x", v, " M=", m, " mode ", mode);
}

void run(torch::Tensor w, torch::Tensor s, torch::Tensor x, torch::Tensor out, torch::Tensor sink,
         int64_t warps, int64_t rows, int64_t v, int64_t mode) {
  const int N = w.size(0), K = x.size(1), M = x.size(0);
  TORCH_CHECK(K % 128 == 0 && w.size(1) == (mode >= 2 ? K / 2 : K) && out.size(0) == M && out.size(1) == N,
              "rows_gemv: shapes");
  const Entry& e = find(warps, rows, v, M, mode);
  auto fn = reinterpret_cast<Fn>(e.fn);
  dim3 grid((N + rows - 1) / rows), block(warps * 32);
  void* args_fn = (void*)fn;
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const __nv_bfloat16* sp = reinterpret_cast<const __nv_bfloat16*>(s.data_ptr<at::BFloat16>());
  const __nv_bfloat16* xp = reinterpret_cast<const __nv_bfloat16*>(x.data_ptr<at::BFloat16>());
  __nv_bfloat16* op = reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>());
  uint32_t* kp = reinterpret_cast<uint32_t*>(sink.data_ptr<int32_t>());
  uint32_t key = 0x9e3779b9u;
  int Ni = N, Ki = K;
  void* args[] = {&wp, &sp, &xp, &op, &kp, &Ni, &Ki, &key};
  C10_CUDA_CHECK(cudaLaunchKernel(args_fn, grid, block, args, 0, at::cuda::getCurrentCUDAStream()));
}

std::vector<int64_t> info(int64_t warps, int64_t rows, int64_t v, int64_t m, int64_t mode) {
  const Entry& e = find(warps, rows, v, m, mode);
  cudaFuncAttributes a;
  C10_CUDA_CHECK(cudaFuncGetAttributes(&a, e.fn));
  int occ = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, e.fn, warps * 32, 0));
  return {a.numRegs, static_cast<int64_t>(a.localSizeBytes), occ};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  mod.def("run", &run);
  mod.def("info", &info);
}
"""


def parse_configs(text: str) -> list[tuple[int, int, int]]:
    out = []
    for c in text.split(","):
        try:
            w, r, v = (int(t) for t in c.split("x"))
        except ValueError:
            raise SystemExit(f"--configs: {c!r} is not WARPSxROWSxV (e.g. 4x4x2)") from None
        if w not in (1, 2, 4, 8, 16) or not 1 <= r <= 16 or v not in (1, 2, 4, 8):
            raise SystemExit(f"--configs: {c!r} out of range (warps 1/2/4/8/16, rows 1-16, V 1/2/4/8)")
        out.append((w, r, v))
    return out


#: kernel modes per --fmt: the GEMVs, then the loads-only mode (rows_gemv's MODE)
FMT_MODES = {"fp8": ((0,), 1), "int4": ((2, 3, 5, 6), 4)}
MODE_NAMES = {0: "", 2: "magic", 3: "unit", 5: "h2", 6: "h2s"}


def instances(configs, ms, fmt: str = "fp8") -> list[tuple[int, int, int, int, int]]:
    """(warps, rows, V, M, mode) for every config at every M and each of the format's GEMV modes,
    and its loads-only mode at M = 1 for the STREAM_CONFIGS among them."""
    gemvs, loads = FMT_MODES[fmt]
    inst = [(w, r, v, m, mo) for (w, r, v) in configs for m in ms for mo in gemvs]
    inst += [(w, r, v, 1, loads) for (w, r, v) in configs if f"{w}x{r}x{v}" in STREAM_CONFIGS]
    return inst


def write_sources(d: str, inst) -> tuple[str, str]:
    k = os.path.join(d, "rows_gemv.cuh")
    with open(k, "w") as fh:
        fh.write(KERNEL)
    table = ",\n".join(f"  {{{w}, {r}, {v}, {m}, {mo}, (const void*)&rows::rows_gemv<{w}, {r}, {v}, {m}, {mo}>}}"
                       for (w, r, v, m, mo) in inst)
    b = os.path.join(d, "rows_bind.cu")
    with open(b, "w") as fh:
        fh.write(BIND.replace("%TABLE%", table))
    return k, b


def ptxas(d: str, inst) -> int:
    """Build every instance for sm_90a with ptxas -v; print registers and spill bytes."""
    cu = os.path.join(d, "ptxas.cu")
    with open(cu, "w") as fh:
        fh.write('#include "rows_gemv.cuh"\n')
        for (w, r, v, m, mo) in inst:
            fh.write(f"template __global__ void rows::rows_gemv<{w}, {r}, {v}, {m}, {mo}>(const uint8_t*, "
                     "const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, uint32_t*, int, int, uint32_t);\n")
    r = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "-o",
                        os.path.join(d, "x.cubin"), cu], capture_output=True, text=True)
    if r.returncode:
        print(r.stderr[-3000:], file=sys.stderr)
        return 1
    import re
    fn = None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            fn = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            t = re.search(r"rows_gemv(?:ILi|I)(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", fn)
            spill = re.search(r"(\d+) bytes spill stores", r.stderr[r.stderr.find(fn):])
            name = "x".join(t.groups()[:3]) + f" M={t.group(4)} mode={t.group(5)}" if t else fn
            print(f"{name:24s} {m.group(1):>4s} registers  {spill.group(1) if spill else '?'} bytes spill stores")
            fn = None
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--configs", default=CONFIGS)
    ap.add_argument("--ms", default="1")
    ap.add_argument("--fmt", default="fp8", choices=sorted(FMT_MODES),
                    help="fp8 (e4m3, one per byte) or int4 (two per byte, value = code - 8; modes magic / unit / h2 / h2s)")
    ap.add_argument("--rep-ms", type=float, default=8.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--ptxas", action="store_true", help="CPU only: build every instance, print registers")
    args = ap.parse_args(argv)
    configs = parse_configs(args.configs)
    try:
        ms = sorted({int(m) for m in args.ms.split(",") if m})
    except ValueError:
        raise SystemExit(f"--ms takes comma-separated integers 1..8, got {args.ms!r}") from None
    if not ms or min(ms) < 1 or max(ms) > 8:
        raise SystemExit(f"--ms takes comma-separated integers 1..8, got {args.ms!r}")
    inst = instances(configs, ms, args.fmt)
    i4 = args.fmt == "int4"
    loads_mode = FMT_MODES[args.fmt][1]
    src = tempfile.mkdtemp(prefix="fp8lab_rows_")
    _, bind = write_sources(src, inst)
    if args.ptxas:
        return ptxas(src, inst)

    try:
        import torch
    except ImportError:
        print("needs torch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import pandas as pd
    from torch.utils.cpp_extension import load

    from fp8lab.experiments import decode as dx
    from fp8lab.facts import shapes
    from fp8lab.kernels import weight_only as wo
    from fp8lab.measure import bench, harness

    try:
        shape_list = [shapes.get(s) for s in args.shapes.split(",")]
    except (ValueError, KeyError) as e:
        raise SystemExit(f"--shapes: {e}") from None
    t0 = time.time()
    ext = load("fp8lab_probe_decode_rows", [bind], extra_include_paths=[src],
               extra_cuda_cflags=["-O3", "-std=c++17"], verbose=False)
    wo.load_extension()
    info = {i: ext.info(*i) for i in inst}
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    for i, (regs, local, occ) in info.items():
        print(f"  {i[0]}x{i[1]}x{i[2]} M={i[3]} mode={i[4]}: {regs} registers, {local} B local, {occ} CTAs/SM")
    l2 = bench.device_l2_bytes()
    copy = dx.measure_copy()["rate_p50"]
    print(f"2 GiB copy: {copy / 1e12:.3f} TB/s", flush=True)

    def timed(fn, sets):
        return bench.bench(bench.rotating(fn, sets), method="graph", rep_ms=args.rep_ms, warmup_ms=5).p50_s

    rows = []
    dev = torch.device("cuda")
    g = torch.Generator(device=dev)
    for sh in shape_list:
        N, K = sh.N, sh.K
        g.manual_seed(0)
        sc = torch.exp2(torch.empty(N, K // 128, device=dev).uniform_(-10, -6, generator=g)).to(torch.bfloat16)
        if i4:
            nib = torch.randint(0, 16, (N, K), dtype=torch.uint8, device=dev, generator=g)
            codes = nib[:, 0::2] | (nib[:, 1::2] << 4)          # two per byte, the even k in the low nibble
            wvals = nib.double() - 8
            del nib
        else:
            codes = torch.randint(0, 256, (N, K), dtype=torch.uint8, device=dev, generator=g)
            codes[(codes & 0x7F) == 0x7F] = 0x7E                   # no e4m3 NaN codes
            wvals = codes.view(torch.float8_e4m3fn).double()
        stream = codes.numel() + N * (K // 128) * 2
        sets = harness.rotation_copies((codes, sc), stream, l2, lambda t: tuple(a.clone() for a in t))
        sink = torch.zeros(N * 512, dtype=torch.int32, device=dev)
        wref = wvals * sc.double().repeat_interleave(128, dim=1)
        wb = wref[: min(N, 4096)].to(torch.bfloat16)
        del wvals
        # the package's GEMV of the same format on its own packed weight of the same size (random words)
        pfmt = args.fmt
        pw = wo.random_weight(pfmt, N, K, keep_codes=False)[0].to("cuda")
        psets = harness.rotation_copies(pw, wo.weight_stream_bytes(pfmt, N, K), l2, wo.PackedWeight.clone)
        wo.workspace(dev, max(ms) * N, wo.grid_x(pfmt, N, 1) * 64)
        for M in ms:
            x = torch.randn(M, K, device=dev, generator=g).to(torch.bfloat16)
            ref = x.double() @ wref.T
            base = dict(shape=sh.name, N=N, K=K, M=M, stream_bytes=stream)
            outs = [torch.empty(M, N, dtype=torch.bfloat16, device=dev) for _ in sets]
            for (w_, r_, v_, m_, mo) in inst:
                if m_ != M:
                    continue
                name = f"{w_}x{r_}x{v_}" + (f" {MODE_NAMES[mo]}" if MODE_NAMES.get(mo) else "")
                regs, local, occ = info[(w_, r_, v_, m_, mo)]
                err = float("nan")
                if mo != loads_mode:
                    o = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=dev)
                    ext.run(codes, sc, x, o, sink, w_, r_, v_, mo)
                    torch.cuda.synchronize()
                    err = float(torch.linalg.norm(o.double() - ref) / torch.linalg.norm(ref))
                    if mo in (5, 6):   # activations past fp16's range (x 2^18): h2 overflows, h2s should not
                        xw = x * 2.0 ** 18
                        ext.run(codes, sc, xw, o, sink, w_, r_, v_, mo)
                        torch.cuda.synchronize()
                        errw = float(torch.linalg.norm(o.double() - ref * 2.0 ** 18) / torch.linalg.norm(ref * 2.0 ** 18))
                        print(f"  {sh.name} M={M} {name}: relative error {err:.2g}, at x 2^18 {errw:.2g}", flush=True)
                    if not err < 1e-2:
                        print(f"CHECK FAILED {sh.name} M={M} {name}: relative error {err:.3g}", flush=True)
                        rows.append(dict(base, kind="rows", config=name, mode=mo, regs=regs, local_bytes=local,
                                         ctas_per_sm=occ, relerr=err, time_p50_s=float("nan")))
                        continue
                t = timed(lambda c_, s_, o_, a=(w_, r_, v_, mo): ext.run(c_, s_, x, o_, sink, *a),
                          [(c, s, o) for (c, s), o in zip(sets, outs)])
                rows.append(dict(base, kind="rows" if mo != loads_mode else "rows loads only", config=name, mode=mo,
                                 regs=regs, local_bytes=local, ctas_per_sm=occ, relerr=err, time_p50_s=t))
            cfg = wo.launch_config(pw, M)
            pouts = [torch.empty(M, N, dtype=torch.bfloat16, device=dev) for _ in psets]
            for sched in ("splitk", "streamk"):
                t = timed(lambda p_, o_, s=sched: wo.gemv_w16(x, p_, out=o_, schedule=s), list(zip(psets, pouts)))
                rows.append(dict(base, stream_bytes=wo.weight_stream_bytes(pfmt, N, K), kind=f"gemv_w16 {sched}",
                                 config=f"s{cfg['splits']}" if sched == "splitk" else f"{cfg['streamk_ctas']} CTAs",
                                 ctas_per_sm=cfg["ctas_per_sm"], time_p50_s=t))
            # cuBLAS BF16: the same N x K in bf16 (target 1's per-shape goal), rotated too
            bsets = harness.rotation_copies(torch.empty(N, K, dtype=torch.bfloat16, device=dev).copy_(
                wb.repeat((N + wb.shape[0] - 1) // wb.shape[0], 1)[:N]), N * K * 2, l2)
            t = timed(lambda b_: torch.matmul(x, b_.T), [(b,) for b in bsets])
            rows.append(dict(base, stream_bytes=N * K * 2, kind="cublas_bf16", config="", time_p50_s=t))
            del bsets, outs, pouts
            print(f"{sh.name} M={M}: {time.time() - t0:.0f} s", flush=True)
        del sets, psets, wref, pw
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    df["copy_Bps"] = copy
    df["fraction_of_copy"] = df["stream_bytes"] / df["time_p50_s"] / copy
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "probe_decode_rows.csv")
    df.to_csv(path, index=False)
    pd.set_option("display.width", 200)
    df["point"] = df["kind"] + " " + df["config"].astype(str)
    print(f"\nfraction of the 2 GiB copy ({copy / 1e12:.3f} TB/s); rows: CTAs/SM in brackets")
    for (sh, M), gdf in df.groupby(["shape", "M"], sort=False):
        best = gdf[gdf["kind"] == "rows"].sort_values("fraction_of_copy", ascending=False)
        line = "  ".join(f"{r.config}({r.ctas_per_sm}) {r.fraction_of_copy:.3f}" for r in best.head(4).itertuples())
        other = "  ".join(f"{r.kind} {r.fraction_of_copy:.3f}" for r in gdf[gdf["kind"] != "rows"].itertuples())
        print(f"{sh:22s} M={M}: best rows {line}\n{'':28s}{other}")
    print(f"wrote {path}; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
