"""Probe (issue 22): what caps weight-only decode at M = 1 -- the access pattern and grid, or the
per-step work? A pure stream of the decode kernels' exact weight access pattern, timed beside them.

    python scripts/probes/decode_stream.py [--rep-ms 8] [--out DIR]

The stream kernel (compiled here with torch's load_inline, never part of the package) launches the
FP8 decode kernel's split-K grid (grid.x = ceil(N / 128) CTA tiles of 8 warps x 16 rows, grid.y =
the K splits gemv_w16 picks, 256 threads) and makes every warp read exactly the 16-byte words
gemv_w16 reads (packed layout [N/16][K/128][4][32] uint4, ld.global.nc.L1::no_allocate, a ring of
`ring` steps in flight), but instead of dequant + mma it folds each word into one XOR kept live by a
data-dependent store. No activations, no barrier, no reduction.

Per shape (the five of notebook 08) it times, with weights rotated past 2x L2 and CUDA-graph
replays as notebook 08 does: gemv_w16 FP8 at M = 1 at its chosen splits and at splits = 1, and the
stream kernel at the same two grids with rings of 3 (gemv_w16's) and 6. Prints each as a fraction
of the 2 GiB copy; writes probe_decode_stream.csv into --out (or $OUT).

Reading: if the stream kernel at gemv_w16's grid and ring also stays near gemv_w16's fraction, the
pattern and grid cap the rate; if it reaches the copy rate, the per-step work does.
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
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <int RING>
__global__ void __launch_bounds__(256, 2) stream_pattern(const uint4* __restrict__ w, uint32_t* out, int n_tiles16,
                                                         int steps, int steps_per_split, uint32_t key) {
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
#pragma unroll
        for (int i = 0; i < 4; ++i) acc ^= r[u][i].x ^ r[u][i].y ^ r[u][i].z ^ r[u][i].w;
        if (st + u + RING < nsteps)
#pragma unroll
          for (int i = 0; i < 4; ++i) r[u][i] = ldg_stream(wp + (st + u + RING) * 128 + i * 32);
      }
    }
  }
  if (acc == key) out[blockIdx.y * gridDim.x * 8 + tile16] = acc;   // never true in practice; keeps the loads
}

void stream(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t splits, int64_t ring) {
  const int sps = static_cast<int>((steps + splits - 1) / splits);
  dim3 grid(static_cast<unsigned>((n_tiles16 + 7) / 8), static_cast<unsigned>((steps + sps - 1) / sps));
  auto s = c10::cuda::getCurrentCUDAStream();
  const uint4* wp = reinterpret_cast<const uint4*>(w.data_ptr());
  uint32_t* op = reinterpret_cast<uint32_t*>(out.data_ptr());
  if (ring == 3) stream_pattern<3><<<grid, 256, 0, s>>>(wp, op, n_tiles16, steps, sps, 0x9e3779b9u);
  else stream_pattern<6><<<grid, 256, 0, s>>>(wp, op, n_tiles16, steps, sps, 0x9e3779b9u);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "stream_pattern launch failed");
}
"""
CPP = "void stream(torch::Tensor w, torch::Tensor out, int64_t n_tiles16, int64_t steps, int64_t splits, int64_t ring);"


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
    ext = load_inline("fp8lab_probe_decode_stream", CPP, cuda_sources=CUDA, functions=["stream"],
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
        out = torch.zeros(n16 * max(cfg["splits"], 1) * 2, dtype=torch.int32, device="cuda")
        for splits in sorted({cfg["splits"], 1}):
            oo = [torch.empty(1, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
            fn = bench.rotating(lambda p_, o_, s=splits: wo.gemv_w16(x, p_, out=o_, splits=s), list(zip(sets, oo)))
            t = bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5)
            rows.append(dict(shape=name, kernel="gemv_w8a16_fp8", splits=splits, ring=3, time_us=t.p50_s * 1e6,
                             frac=gbytes / t.p50_s / big))
            for ring in (3, 6):
                fn = bench.rotating(lambda w_, s=splits, r=ring: ext.stream(w_, out, n16, K // 128, s, r),
                                    [(w_,) for w_ in raws])
                t = bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5)
                rows.append(dict(shape=name, kernel="stream_pattern", splits=splits, ring=ring, time_us=t.p50_s * 1e6,
                                 frac=wbytes / t.p50_s / big))
            for r in rows[-3:]:
                print(f"{name:22s} splits={splits:<3d} {r['kernel']:16s} ring={r['ring']} {r['time_us']:8.2f} us "
                      f"{r['frac']:.3f} of copy", flush=True)
        del sets, raws, pw
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    piv = df.pivot_table(index=["shape", "splits"], columns=["kernel", "ring"], values="frac")
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
