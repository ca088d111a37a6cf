"""Probe for issue #5's blockwise W8A8 targets (H200): every new kernel configuration checked first, then timed.

1. Correctness: every cutlass_blockwise_sm90 config and every swap-AB Triton config the probe times is
   run at odd shapes (M = 1, 7, 83; N = 384 and a 128-multiple + 8 tail) against the float64 reference
   with NaN-poisoned outputs; the script stops (AssertionError) before timing anything if one fails.
2. Large M: TFLOP/s of every CUTLASS config vs cuBLASLt blockwise (torch scaled_mm 1x128 / 128x128) and
   per-tensor FP8 cuBLAS (torch._scaled_mm, scalar scales: the ceiling without block scaling) at
   Qwen3-8B gate_up / down_proj, M = 1024, 4096, 8192, with the NVML SM clock median per row.
3. Decode: at M = 1, 16 on shapes with >= 32 MB of e4m3 weights, the swap-AB configs' weight bytes per
   second / the device-to-device copy bandwidth measured in the same run (target: >= 0.85), against
   cuBLASLt blockwise.

Run on the H200 from the repository root:
    MAX_JOBS=16 python scripts/probes/blockwise.py            # add --quick for one shape per part
The first run builds the CUTLASS extension (5 kernel TUs in parallel: ~2-3 min on 16 cores).
GPU time excluding compiles: ~60-90 s. Prints tables; with --csv DIR also writes them as CSV.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fp8lab.measure import bench, clocks
from fp8lab.experiments import blockwise as bw
from fp8lab.kernels import cutlass_blockwise_sm90 as cb, triton_blockwise as tb

LARGE_SHAPES = ("qwen3-8b:gate_up", "qwen3-8b:down_proj")
LARGE_MS = (1024, 4096, 8192)
DECODE_SHAPES = ("qwen3-8b:gate_up", "deepseek-v3:q_b", "deepseek-v3:o_proj", "deepseek-v3:dense_gate_up")
DECODE_MS = (1, 16)
CHECK_SHAPES = ((1, 384, 512), (7, 392, 1152), (83, 2120, 1152))


def log(msg):
    print(msg, flush=True)


def swapab_configs(M: int, N: int, K: int, sms: int) -> list[dict]:
    """Every limited-autotune candidate (the old rule's picks, KSTEP 2, 4 programs per SM, 64-row tiles)."""
    return tb.limited_configs("per_block", "swapab", M, N, K, sms=sms, limit=8)


def _cfg_name(c: dict) -> str:
    return (f"W{c['BLOCK_W']}xT{c['BLOCK_T']} split{c['SPLIT_K']} ks{c.get('KSTEP', 1)} "
            f"st{c['num_stages']} w{c['num_warps']}")


def _triton_pinned(cfg: dict) -> bw.Candidate:
    def gemm(s, a, sa, out):
        return tb.blockwise_fp8_gemm(a, s.b, sa, s.b_scale, path="swapab", config=cfg, out=out, check_scales=False)
    return bw.Candidate("triton_blockwise", gemm, variant="per_block", path="swapab", config=_cfg_name(cfg),
                        takes_out=True)


# --------------------------------------------------------------------------------------------- 1. correctness
def check_all(sms: int) -> pd.DataFrame:
    import torch

    rows = []
    for M, N, K in CHECK_SHAPES:
        s = bw.make_operands(M, N, K, seed=M + N)
        r = np.arange(M)
        ref = bw.reference_rows(s.a, s.a_scale, s.b, s.b_scale, r)
        cands = [(f"cutlass {c}", lambda out, c=c: cb.CutlassBlockwise(s.a, s.a_scale, s.b, s.b_scale, out=out,
                                                                        config=c)())
                 for c in cb.CONFIGS]
        tcfgs = {_cfg_name(c): c for sh in DECODE_SHAPES for m in DECODE_MS
                 for c in swapab_configs(m, bw.resolve_shapes([sh])[0].N, bw.resolve_shapes([sh])[0].K, sms)}
        cands += [(f"swapab {n}", lambda out, c=c: tb.blockwise_fp8_gemm(s.a, s.b, s.a_scale, s.b_scale,
                                                                          path="swapab", config=c, out=out))
                  for n, c in tcfgs.items()]
        for name, fn in cands:
            out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            res = fn(out)
            torch.cuda.synchronize()
            chk = bw.compare(res, ref, r)
            rows.append(dict(M=M, N=N, K=K, what=name, **chk))
            assert chk["nan_left"] == 0 and chk["relerr"] < 4e-3 and chk["calc_diff"] < 2e-5, (name, M, N, K, chk)
    df = pd.DataFrame(rows)
    log(f"correctness: {len(df)} (config, shape) checks passed; worst relerr {df['relerr'].max():.2e}")
    return df


# --------------------------------------------------------------------------------------------- 2. large M
def large_m(sampler, shapes, Ms) -> pd.DataFrame:
    rows = []
    for shape in bw.resolve_shapes(shapes):
        for M in Ms:
            # the per-tensor arm is checked against the unscaled codes product (bw.reference_for) and
            # timed, clocks included, like the others; a torch without _scaled_mm gives an error row
            cands = ([bw._cutlass_candidate(c) for c in cb.CONFIGS] + [bw._cublaslt_candidate()]
                     + [bw._per_tensor_candidate()])
            for r in bw.run_point(shape, M, cands, seed=M, warmup_ms=10, rep_ms=50, sampler=sampler, log=None):
                rows.append(dict(shape=r["shape"], M=M, arm=r["arm"], config=r["config"], status=r["status"],
                                 time_p50_s=r["time_p50_s"], tflops=r.get("tflops_p50", math.nan),
                                 relerr=r["relerr"], sm_mhz_median=r.get("sm_mhz_median", math.nan),
                                 clock_source=r.get("clock_source", "")))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------- 3. decode
def decode(sampler, shapes, Ms, copy_Bps: float, sms: int) -> pd.DataFrame:
    rows = []
    for shape in bw.resolve_shapes(shapes):
        for M in Ms:
            cfgs = swapab_configs(M, shape.N, shape.K, sms)
            cands = [_triton_pinned(c) for c in cfgs] + [bw._triton_candidate("swapab", "per_block"),
                                                          bw._cublaslt_candidate()]
            cands[-2].config = "autotuned"
            for r in bw.run_point(shape, M, cands, seed=M, warmup_ms=10, rep_ms=50, sampler=sampler, log=None):
                wbps = r["weight_bytes"] / r["time_p50_s"] if r["status"] == "measured" else math.nan
                rows.append(dict(shape=r["shape"], M=M, arm=r["arm"], config=r["config"], status=r["status"],
                                 time_p50_s=r["time_p50_s"], weight_TBps=wbps / 1e12, frac_copy=wbps / copy_Bps,
                                 relerr=r["relerr"], sm_mhz_median=r.get("sm_mhz_median", math.nan),
                                 clock_source=r.get("clock_source", "")))
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one shape per part (a smoke test)")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--csv", type=Path, default=None, help="directory to write the tables to")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        log("no CUDA device: nothing to probe")
        return 2
    ok, why = cb.available()
    if not ok:
        log(f"cutlass_blockwise_sm90 not available: {why}")
        return 2
    t0 = time.perf_counter()
    cb.load_extension()
    log(f"CUTLASS extension: {cb.LAST_BUILD_S:.0f} s to build/load; kernels {cb.load_extension().kernels()}")
    for c in cb.CONFIGS:
        i = cb.kernel_info(c)
        log(f"  {c:28s} tile {i['tile_mnk']} cluster {i['cluster_mnk']} {i['scheduler']:10s} raster {i['raster']:9s} "
            f"swizzle {i['swizzle']} stages {i['stages']} smem {i['shared_memory_bytes'] // 1024} KiB")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    large_shapes = LARGE_SHAPES[:1] if args.quick else LARGE_SHAPES
    decode_shapes = DECODE_SHAPES[:1] if args.quick else DECODE_SHAPES
    pd.set_option("display.width", 200, "display.max_rows", 500, "display.max_colwidth", 40)

    t_chk = time.perf_counter()
    chk = check_all(sms)
    log(f"checks (incl. Triton JIT): {time.perf_counter() - t_chk:.0f} s")
    sampler = clocks.ClockSampler(uuid=getattr(torch.cuda.get_device_properties(0), "uuid", None)).start()
    try:
        t_gpu = time.perf_counter()
        out = {"checks": chk}
        if not args.skip_large:
            big = large_m(sampler, large_shapes, LARGE_MS)
            lt = big[big["arm"] == "cublaslt_blockwise"].set_index(["shape", "M"])["time_p50_s"]
            pt = big[big["arm"] == bw.PER_TENSOR].set_index(["shape", "M"])["time_p50_s"]
            big["vs_cublaslt"] = [lt.get((s, m), math.nan) / t for s, m, t in
                                  zip(big["shape"], big["M"], big["time_p50_s"])]
            big["vs_per_tensor"] = [pt.get((s, m), math.nan) / t for s, m, t in
                                    zip(big["shape"], big["M"], big["time_p50_s"])]
            log("\n== large M: TFLOP/s (p50), ratio to cuBLASLt blockwise (target >= 1.10 for the best fp8lab arm)")
            log(big[["shape", "M", "arm", "config", "status", "tflops", "vs_cublaslt", "vs_per_tensor",
                     "sm_mhz_median", "clock_source"]].round(3).to_string(index=False))
            ours = big[big["arm"] == "cutlass_blockwise_sm90"].dropna(subset=["time_p50_s"])
            if not ours.empty:
                best = ours.loc[ours.groupby(["shape", "M"])["time_p50_s"].idxmin()]
                log("\n== best CUTLASS config per (shape, M)")
                log(best[["shape", "M", "config", "tflops", "vs_cublaslt", "vs_per_tensor"]].round(3)
                    .to_string(index=False))
            out["large_m"] = big
        if not args.skip_decode:
            copy = bw.measure_copy_bandwidth(copy_gib=2.0, sampler=sampler)
            log(f"\ncopy bandwidth (p50): {copy['copy_Bps_p50'] / 1e12:.2f} TB/s")
            dec = decode(sampler, decode_shapes, DECODE_MS, copy["copy_Bps_p50"], sms)
            log("\n== decode: weight bytes streamed per second / copy (target >= 0.85)")
            log(dec[["shape", "M", "arm", "config", "status", "time_p50_s", "weight_TBps", "frac_copy",
                     "sm_mhz_median", "clock_source"]].round(3).to_string(index=False))
            out["decode"] = dec
        log(f"\nGPU phase: {time.perf_counter() - t_gpu:.0f} s; total {time.perf_counter() - t0:.0f} s")
    finally:
        sampler.stop()
    if args.csv:
        args.csv.mkdir(parents=True, exist_ok=True)
        for k, df in out.items():
            df.to_csv(args.csv / f"{k}.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
