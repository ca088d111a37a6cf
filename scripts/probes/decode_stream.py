"""Probe (issue 22): what caps weight-only decode at M = 1 -- the access pattern and grid, or the
per-step work? A pure stream of the decode kernels' exact weight access pattern, timed beside them.

    python scripts/probes/decode_stream.py [--rep-ms 8] [--out DIR]

The stream kernel (compiled here with torch's load_inline, never part of the package) launches the
FP8 decode kernel's split-K grid (grid.x = ceil(N / 128) CTA tiles of 8 warps x 16 rows, grid.y =
the K splits gemv_w16 picks, 256 threads) and makes every warp read exactly the 16-byte words
gemv_w16 reads (packed layout [N/16][K/128][4][32] uint4) with gemv_w16's load instruction
(ld.global.nc.L1::no_allocate.L2::256B) and a ring of `ring` steps in flight, but instead of
dequant + mma it folds each word into one XOR kept live by a data-dependent store. No
activations, no barrier, no reduction.

Per shape (the five of notebook 08) it times, with weights rotated past 2x L2 and CUDA-graph
replays as notebook 08 does: gemv_w16 FP8 at M = 1 at its chosen splits, at splits = 1 and with
the stream-K schedule, and the stream kernel at the same two split-K grids with rings of 3
(gemv_w16's) and 6. Prints each as a fraction of the 2 GiB copy; writes probe_decode_stream.csv
into --out (or $OUT).

Occupancy (`occ` column): the stream kernel needs few registers, so by default an SM holds up to 8
of its CTAs (64 warps) where gemv_w16 holds 2 (16 warps, 127 registers). occ = 2 pads the stream
kernel's dynamic shared memory to 100 KiB so an SM holds 2 of its CTAs too: same grid, same
warps in flight per SM as gemv_w16. A persistent variant (`stream_persistent`, occ 2) walks the
(CTA tile along N, K step) units in stream-K's order with gemv_w16's persistent CTA count: one
pipeline ramp per CTA, no waves.

Reading: compare gemv_w16 with the stream kernel at the same grid and the same occupancy; the
occ = free rows say what more warps in flight would give.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pandas as pd

CUDA = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <unordered_set>
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// GAP > 0 stands in for the decode kernel's per-step work: GAP dependent integer instructions on
// the running XOR (a runtime salt of 0 keeps them from folding) per 16-byte word group, i.e. 4 GAP
// per step. SPREAD: each of the step's 4 refill loads is issued right after its own word's work
// (as ptxas schedules gemv_w16: a load between two mmas); else all 4 after the step's work.
template <int N>
__device__ __forceinline__ uint32_t chain(uint32_t x, uint32_t salt) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i % 2 == 0) asm volatile("xor.b32 %0, %0, %1;" : "+r"(x) : "r"(salt));
    else asm volatile("add.u32 %0, %0, %1;" : "+r"(x) : "r"(salt));
  }
  return x;
}

template <int RING, int GAP = 0, bool SPREAD = false>
__global__ void __launch_bounds__(256, 2) stream_pattern(const uint4* __restrict__ w, uint32_t* out, int n_tiles16,
                                                         int steps, int steps_per_split, uint32_t key,
                                                         uint32_t salt = 0u) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile16 = blockIdx.x * 8 + warp;
  if (tile16 >= n_tiles16) return;
  const int st0 = blockIdx.y * steps_per_split;
  const int nsteps = min(steps, st0 + steps_per_split) - st0;
  const uint4* wp = w + (static_cast<size_t>(tile16) * steps + st0) * 128 + lane;
  uint4 r[RING][4];
#pragma unroll
  for (int u = 0; u < RING; ++u)
    if (u < nsteps)
#pragma unroll
      for (int i = 0; i < 4; ++i) r[u][i] = ldg_stream(wp + u * 128 + i * 32);
  uint32_t acc = 0;
  for (int st = 0; st < nsteps; st += RING) {
#pragma unroll
    for (int u = 0; u < RING; ++u) {
      if (st + u < nsteps) {
        const bool refill = st + u + RING < nsteps;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc ^= r[u][i].x ^ r[u][i].y ^ r[u][i].z ^ r[u][i].w;
          if (GAP > 0) acc = chain<GAP>(acc, salt);
          if (SPREAD && refill) r[u][i] = ldg_stream(wp + (st + u + RING) * 128 + i * 32);
        }
        if (!SPREAD && refill)
#pragma unroll
          for (int i = 0; i < 4; ++i) r[u][i] = ldg_stream(wp + (st + u + RING) * 128 + i * 32);
      }
    }
  }
  if (acc == key) out[blockIdx.y * gridDim.x * 8 + tile16] = acc;   // never true in practice; keeps the loads
}

// Persistent: CTA c walks units [c upc, (c + 1) upc) of the (CTA tile along N, K step) space in
// tile-major order (stream-K's order), RING units in flight per warp, across tile boundaries.
template <int RING>
__global__ void __launch_bounds__(256, 2) stream_persistent(const uint4* __restrict__ w, uint32_t* out, int n_tiles16,
                                                            int steps, int units, int upc, uint32_t key) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int u0 = blockIdx.x * upc;
  const int n = min(units, u0 + upc) - u0;
  if (n <= 0) return;
  int lx = u0 / steps, ls = u0 - lx * steps;
  uint4 r[RING][4];
  auto load = [&](uint4 (&d)[4]) {
    const int t = lx * 8 + warp;
    if (t < n_tiles16) {
      const uint4* p = w + (static_cast<size_t>(t) * steps + ls) * 128 + lane;
#pragma unroll
      for (int i = 0; i < 4; ++i) d[i] = ldg_stream(p + i * 32);
    }
    if (++ls == steps) { ls = 0; ++lx; }
  };
#pragma unroll
  for (int u = 0; u < RING; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) r[u][i] = make_uint4(0, 0, 0, 0);
    if (u < n) load(r[u]);
  }
  uint32_t acc = 0;
  for (int st = 0; st < n; st += RING) {
#pragma unroll
    for (int u = 0; u < RING; ++u) {
      if (st + u < n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc ^= r[u][i].x ^ r[u][i].y ^ r[u][i].z ^ r[u][i].w;
        if (st + u + RING < n) load(r[u]);
      }
    }
  }
  if (acc == key) out[blockIdx.x * 256 + threadIdx.x] = acc;
}

constexpr int kPad = 100 * 1024;   // dynamic shared memory that leaves room for 2 CTAs per SM

// Every stream_pattern instantiation has the same function type, so a function-local flag would be
// shared by all of them and only the first kernel launched would get the opt-in: remember each kernel.
template <class K>
int pad_for(K kernel, int64_t occ) {
  if (occ == 0) return 0;
  static std::unordered_set<const void*> opted;
  if (opted.insert(reinterpret_cast<const void*>(kernel)).second) {
    TORCH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kPad) == cudaSuccess,
                "cudaFuncSetAttribute failed");
  }
  return kPad;
}

void stream(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t splits, int64_t ring,
            int64_t occ, int64_t gap, bool spread) {
  const int sps = static_cast<int>((steps + splits - 1) / splits);
  dim3 grid(static_cast<unsigned>((n_tiles16 + 7) / 8), static_cast<unsigned>((steps + sps - 1) / sps));
  auto s = c10::cuda::getCurrentCUDAStream();
  const uint4* wp = reinterpret_cast<const uint4*>(w.data_ptr());
  uint32_t* op = reinterpret_cast<uint32_t*>(out.data_ptr());
  const uint32_t key = 0x9e3779b9u;
  if (gap == 16 && spread) stream_pattern<3, 16, true><<<grid, 256, pad_for(stream_pattern<3, 16, true>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  else if (gap == 16) stream_pattern<3, 16, false><<<grid, 256, pad_for(stream_pattern<3, 16, false>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  else if (gap == 48 && spread) stream_pattern<3, 48, true><<<grid, 256, pad_for(stream_pattern<3, 48, true>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  else if (gap == 48 && ring == 6) stream_pattern<6, 48, false><<<grid, 256, pad_for(stream_pattern<6, 48, false>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  else if (gap == 48) stream_pattern<3, 48, false><<<grid, 256, pad_for(stream_pattern<3, 48, false>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  else if (ring == 3) stream_pattern<3><<<grid, 256, pad_for(stream_pattern<3>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  else stream_pattern<6><<<grid, 256, pad_for(stream_pattern<6>, occ), s>>>(wp, op, n_tiles16, steps, sps, key);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "stream_pattern launch failed");
}

// Staged through shared memory instead of registers: each lane cp.async-es its own 4 x 16 bytes of
// a step into a per-thread slot of an S-stage ring (one commit group per step) and reads them
// back with ld.shared just before the step's work, so S - 1 steps stay in flight during the work
// at no register cost; a lane only ever reads what it wrote itself, so cp.async.wait_group is
// the only synchronisation (no barrier, no mbarrier). The GAP stand-in as above.
__device__ __forceinline__ void cp_async_cg16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
template <int S, int GAP>
__global__ void __launch_bounds__(256, 2) stream_cpasync(const uint4* __restrict__ w, uint32_t* out, int n_tiles16,
                                                         int steps, int steps_per_split, uint32_t key, uint32_t salt) {
  extern __shared__ __align__(16) unsigned char ring[];   // [S][8 warps][4][32] x 16 bytes
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile16 = blockIdx.x * 8 + warp;
  if (tile16 >= n_tiles16) return;
  const int st0 = blockIdx.y * steps_per_split;
  const int nsteps = min(steps, st0 + steps_per_split) - st0;
  const uint4* wp = w + (static_cast<size_t>(tile16) * steps + st0) * 128 + lane;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + (warp * 128 + lane) * 16;
  constexpr uint32_t kStage = 8 * 128 * 16;
  auto issue = [&](int st, int stage) {
#pragma unroll
    for (int i = 0; i < 4; ++i) cp_async_cg16(base + stage * kStage + i * 512, wp + st * 128 + i * 32);
  };
#pragma unroll
  for (int u = 0; u < S - 1; ++u) {
    if (u < nsteps) issue(u, u);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  uint32_t acc = 0;
  int rd = 0, wr = S - 1;                            // stages of step st and of step st + S - 1
  for (int st = 0; st < nsteps; ++st) {
    if (st + S - 1 < nsteps) issue(st + S - 1, wr);  // its stage was read (by this thread) last step
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(base + rd * kStage + i * 512));
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
      if (GAP > 0) acc = chain<GAP>(acc, salt);
    }
    rd = rd + 1 == S ? 0 : rd + 1;
    wr = wr + 1 == S ? 0 : wr + 1;
  }
  if (acc == key) out[blockIdx.y * gridDim.x * 8 + tile16] = acc;
}

template <int S, int GAP>
void launch_cpa(const uint4* wp, uint32_t* op, dim3 grid, int64_t n_tiles16, int64_t steps, int sps, cudaStream_t s) {
  const int smem = S * 8 * 128 * 16 > kPad ? S * 8 * 128 * 16 : kPad;   // 2 CTAs per SM either way
  static bool done = false;
  if (!done) {
    TORCH_CHECK(cudaFuncSetAttribute(stream_cpasync<S, GAP>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) ==
                cudaSuccess, "cudaFuncSetAttribute failed");
    done = true;
  }
  stream_cpasync<S, GAP><<<grid, 256, smem, s>>>(wp, op, static_cast<int>(n_tiles16), static_cast<int>(steps), sps,
                                                 0x9e3779b9u, 0u);
}

void stream_cpa(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t splits, int64_t stages,
                int64_t gap) {
  const int sps = static_cast<int>((steps + splits - 1) / splits);
  dim3 grid(static_cast<unsigned>((n_tiles16 + 7) / 8), static_cast<unsigned>((steps + sps - 1) / sps));
  auto s = c10::cuda::getCurrentCUDAStream();
  const uint4* wp = reinterpret_cast<const uint4*>(w.data_ptr());
  uint32_t* op = reinterpret_cast<uint32_t*>(out.data_ptr());
  if (stages == 4 && gap == 48) launch_cpa<4, 48>(wp, op, grid, n_tiles16, steps, sps, s);
  else if (stages == 6 && gap == 48) launch_cpa<6, 48>(wp, op, grid, n_tiles16, steps, sps, s);
  else if (stages == 6 && gap == 0) launch_cpa<6, 0>(wp, op, grid, n_tiles16, steps, sps, s);
  else TORCH_CHECK(false, "stream_cpa: stages / gap not built");
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "stream_cpasync launch failed");
}

void stream_persist(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t ctas) {
  const int tiles_x = static_cast<int>((n_tiles16 + 7) / 8);
  const int units = tiles_x * static_cast<int>(steps);
  const int upc = static_cast<int>((units + ctas - 1) / ctas);
  auto s = c10::cuda::getCurrentCUDAStream();
  stream_persistent<3><<<(units + upc - 1) / upc, 256, pad_for(stream_persistent<3>, 2), s>>>(
      reinterpret_cast<const uint4*>(w.data_ptr()), reinterpret_cast<uint32_t*>(out.data_ptr()),
      static_cast<int>(n_tiles16), static_cast<int>(steps), units, upc, 0x9e3779b9u);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "stream_persistent launch failed");
}
"""
CPP = ("void stream(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t splits, int64_t ring,"
       " int64_t occ, int64_t gap, bool spread);\n"
       "void stream_persist(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t ctas);\n"
       "void stream_cpa(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t splits,"
       " int64_t stages, int64_t gap);")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep-ms", type=float, default=8)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--shapes", default="llama3-70b:down_proj,qwen3-8b:gate_up,llama3-8b:gate_up,"
                                        "llama3-8b:down_proj,llama3-70b:qkv")
    args = ap.parse_args(argv)

    import torch
    from torch.utils.cpp_extension import load_inline

    from fp8lab.experiments import decode
    from fp8lab.facts import shapes
    from fp8lab.kernels import weight_only as wo
    from fp8lab.measure import bench, harness

    t0 = time.time()
    ext = load_inline("fp8lab_probe_decode_stream", CPP, cuda_sources=CUDA, functions=["stream", "stream_persist", "stream_cpa"],
                      extra_cuda_cflags=["-O3", "-std=c++17"], verbose=False)
    wo.load_extension()
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    l2 = bench.device_l2_bytes()
    big = decode.measure_copy(copy_gib=2.0)["rate_p50"]
    print(f"2 GiB copy: {big / 1e12:.3f} TB/s", flush=True)
    rows = []
    for name in args.shapes.split(","):
        sh = shapes.get(name)
        N, K = sh.N, sh.K
        pw = wo.random_weight("fp8", N, K, keep_codes=False)[0].to("cuda")
        cfg = wo.launch_config(pw, 1)
        n16 = pw.n_tiles16
        x = torch.randn(1, K, device="cuda").to(torch.bfloat16)
        wbytes = N * K                                   # the stream kernel reads the codes only
        gbytes = decode.stream_split(wo.ARMS["fp8"], N, K)["stream_bytes"]
        sets = harness.rotation_copies(pw, gbytes, l2, wo.PackedWeight.clone)
        raws = [s.w for s in sets]                       # the same packed words, read by the stream
        ctas = cfg["streamk_ctas"]
        out = torch.zeros(max(n16 * max(cfg["splits"], 1) * 2, ctas * 256), dtype=torch.int32, device="cuda")
        oo = [torch.empty(1, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
        first = len(rows)

        def timed(fn, arg_sets):
            return bench.bench(bench.rotating(fn, arg_sets), method="graph", rep_ms=args.rep_ms, warmup_ms=5).p50_s

        for sched, kw in (("streamk", dict(schedule="streamk")), ("streamk-chunked", dict(schedule="streamk",
                                                                                           act_resident=False))):
            t = timed(lambda p_, o_, kw=kw: wo.gemv_w16(x, p_, out=o_, **kw), list(zip(sets, oo)))
            rows.append(dict(shape=name, kernel=f"gemv_w8a16_fp8 {sched}", splits=0, ctas=ctas, ring=3, occ="2",
                             time_us=t * 1e6, frac=gbytes / t / big))
        t = timed(lambda w_: ext.stream_persist(w_, out, n16, K // 128, ctas), [(w_,) for w_ in raws])
        rows.append(dict(shape=name, kernel="stream_persistent", splits=0, ctas=ctas, ring=3, occ="2",
                         time_us=t * 1e6, frac=wbytes / t / big))
        for splits in sorted({cfg["splits"], 1}):
            t = timed(lambda p_, o_, s=splits: wo.gemv_w16(x, p_, out=o_, splits=s), list(zip(sets, oo)))
            rows.append(dict(shape=name, kernel="gemv_w8a16_fp8 split-K", splits=splits, ctas=0, ring=3, occ="2",
                             time_us=t * 1e6, frac=gbytes / t / big))
            for ring, occ, gap, spread in ((3, 0, 0, False), (6, 0, 0, False), (3, 2, 0, False), (3, 2, 16, False),
                                           (3, 2, 16, True), (3, 2, 48, False), (3, 2, 48, True), (6, 2, 48, False)):
                if gap and splits != cfg["splits"]:
                    continue
                t = timed(lambda w_, s=splits, r=ring, o=occ, g=gap, sp=spread: ext.stream(w_, out, n16, K // 128, s,
                                                                                           r, o, g, sp),
                          [(w_,) for w_ in raws])
                kern = "stream_pattern" + (f" gap{gap}{' spread' if spread else ''}" if gap else "")
                rows.append(dict(shape=name, kernel=kern, splits=splits, ctas=0, ring=ring,
                                 occ=str(occ) if occ else "free", time_us=t * 1e6, frac=wbytes / t / big))
            if splits == cfg["splits"]:
                for stages, gap in ((6, 0), (4, 48), (6, 48)):
                    t = timed(lambda w_, s=splits, st=stages, g=gap: ext.stream_cpa(w_, out, n16, K // 128, s, st, g),
                              [(w_,) for w_ in raws])
                    rows.append(dict(shape=name, kernel="stream_cpasync" + (f" gap{gap}" if gap else ""),
                                     splits=splits, ctas=0, ring=stages, occ="2", time_us=t * 1e6,
                                     frac=wbytes / t / big))
        for r in rows[first:]:
            print(f"{name:22s} {r['kernel']:32s} splits={r['splits']:<3d} ctas={r['ctas']:<4d} ring={r['ring']} "
                  f"occ={r['occ']:4s} {r['time_us']:8.2f} us {r['frac']:.3f} of copy", flush=True)
        del sets, raws, pw
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    piv = df.pivot_table(index=["shape", "splits"], columns=["kernel", "ring", "occ"], values="frac")
    pd.set_option("display.width", 200)
    print("\nfraction of the 2 GiB copy (gemv: weight + scale bytes; stream: weight bytes):")
    print(piv.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_decode_stream.csv"), index=False)
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
