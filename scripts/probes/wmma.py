"""Probe (issue 6, item 2): every wmma_w8a16 configuration, original, pipelined and interleaved, on one GPU.

    python scripts/probes/wmma.py [--rep-ms 25] [--out DIR]

1. Correctness first (asserts): every configuration except the forced +1 pad at odd shapes
   (M = 1, 7, 83; N not a multiple of 128) against float64, poisoned (NaN) outputs, bf16 and fp32
   outputs, whole K and split K; every pipelined and interleaved configuration bit-identical (fp32
   output) to the original kernel with the same warp tile (same MMAs, same order, same promotion).
2. Timing (CUDA events, fp8lab.measure.bench): the prefill configurations and medium at deepseek-v3
   dense_gate_up (N 36864, K 7168), M = 4096 and M = 512, next to cuBLAS BF16 on the dequantised
   weights in the same run. Prints TFLOP/s and the fraction of 641 TFLOP/s (the mma.sync BF16 peak
   measured with hmma_peak on the H200) and of cuBLAS, and next to each configuration the cycles per
   HMMA.16816 per SM (at the SM clock NVML reports) against the shared-memory model
   (seed001.kblock_budget: LDSM + W stores + cp.async cycles at 128 B/clock, bank conflicts included);
   writes probe_wmma.csv into --out (or $OUT).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pandas as pd

MMA_SYNC_PEAK = 641e12     # HMMA.16816 BF16, register-only kernel (fp8lab/kernels/hmma_peak.cu), H200
CHECK_SHAPES = [(1, 200, 128), (7, 576, 384), (83, 136, 1152), (83, 264, 1152)]
TIME_MS = (4096, 512)
TIME_ROLES = ("large", "large_n64", "large_s3", "large_s2", "large_n64_s2", "medium", "large_il", "large_il_w32")


def log(msg):
    print(msg, flush=True)


def check_all(s1, torch) -> int:
    n = 0
    cfgs = [(i, c) for i, c in enumerate(s1.wmma_configs()) if not c.force_pad]
    for M, N, K in CHECK_SHAPES:
        d = s1.generate_inputs(M, N, K, seed=M + N)
        ref = s1.reference_w8a16(d["a"], d["w"], d["w_scale"])
        for cid, cfg in cfgs:
            for kbs in sorted({K // 128, 1}):
                for dtype, tol in ((torch.bfloat16, 5e-3), (torch.float32, 1e-5)):
                    out = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
                    s1.wmma_w8a16(d["a"], d["w"], d["w_scale"], config=cid, kb_per_split=kbs, out=out)
                    torch.cuda.synchronize()
                    assert torch.isfinite(out).all(), (cfg.name, M, N, K, kbs, dtype, "unwritten outputs")
                    err = float((out.double() - ref).norm() / ref.norm())
                    assert err < tol, (cfg.name, M, N, K, kbs, dtype, err)
                    n += 1
        for cid, cfg in cfgs:
            if not cfg.stages:
                continue
            # the original kernel with the same warp tile (same CTA tile when there is one)
            twins = [(i, c) for i, c in cfgs if c.stages == 0 and (c.wm, c.wn, c.pad) == (cfg.wm, cfg.wn, cfg.pad)]
            twin = min(twins, key=lambda ic: (ic[1].bm, ic[1].bn) != (cfg.bm, cfg.bn))[0]
            o = [torch.full((M, N), float("nan"), dtype=torch.float32, device="cuda") for _ in range(2)]
            s1.wmma_w8a16(d["a"], d["w"], d["w_scale"], config=cid, out=o[0])
            s1.wmma_w8a16(d["a"], d["w"], d["w_scale"], config=twin, out=o[1])
            assert torch.equal(o[0], o[1]), (cfg.name, "differs from the original kernel", M, N, K)
            n += 1
    return n


def _sms(torch) -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _sm_mhz() -> float:
    """Current SM clock from NVML (0 when NVML is unavailable)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - the clock column is informative only
        return 0.0


def time_all(s1, torch, bench, rep_ms: float) -> pd.DataFrame:
    from fp8lab.facts import shapes as shp
    from fp8lab.kernels import baselines

    shape = shp.shapes("deepseek-v3", ["dense_gate_up"])[0]
    N, K = shape.N, shape.K
    rows = []
    for M in TIME_MS:
        d = s1.generate_inputs(M, N, K, seed=1)
        flops = 2.0 * M * N * K
        wd = baselines.dequantize_weight(d["w"], d["w_scale"], torch.bfloat16)
        out = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
        tm = bench.bench(lambda: torch.matmul(d["a"], wd.t(), out=out), method="events", warmup_ms=10, rep_ms=rep_ms)
        cublas = flops / tm.p50_s
        rows.append(dict(M=M, N=N, K=K, config="cublas_bf16 (dequantised W)", splits=1, p50_us=tm.p50_s * 1e6,
                         tflops=cublas / 1e12, frac_mma_sync=cublas / MMA_SYNC_PEAK, frac_cublas=1.0))
        del wd
        for role in TIME_ROLES:
            cid, cfg = s1.wmma_config(role)
            plan = s1.wmma_plan(M, N, K, config=cid)
            ws = torch.empty(plan["splits"] * M * N if plan["splits"] > 1 else 0, dtype=torch.float32, device="cuda")
            fn = lambda cid=cid, ws=ws, plan=plan: s1.wmma_w8a16(d["a"], d["w"], d["w_scale"], config=cid, out=out,
                                                                 workspace=ws if plan["splits"] > 1 else None)
            fn()
            torch.cuda.synchronize()
            tm = bench.bench(fn, method="events", warmup_ms=10, rep_ms=rep_ms)
            r = flops / tm.p50_s
            mhz = _sm_mhz()
            b = s1.kblock_budget(cfg)
            # HMMA.16816 = 4096 FLOP; cycles per HMMA per SM at the clock NVML reports right after
            cyc = mhz * 1e6 / (r / 4096 / _sms(torch)) if mhz else float("nan")
            rows.append(dict(M=M, N=N, K=K, config=f"{role} {cfg.name}", splits=plan["splits"], p50_us=tm.p50_s * 1e6,
                             tflops=r / 1e12, frac_mma_sync=r / MMA_SYNC_PEAK, frac_cublas=r / cublas, sm_mhz=mhz,
                             cyc_per_hmma=cyc, model_smem_cyc=b["smem_cycles_per_hmma"],
                             model_serial_cyc=b["smem_cycles_per_hmma"] + b["hmma_cycles"] / b["hmma_per_cta"]))
        del d
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rep-ms", type=float, default=25.0)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    args = ap.parse_args(argv)
    import torch

    from fp8lab.measure import bench
    from fp8lab.kernels import seed001 as s1

    t0 = time.time()
    s1.load_extension()
    log(f"[wmma] extension ready in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}")
    t1 = time.time()
    n = check_all(s1, torch)
    log(f"[wmma] correctness: {n} checks passed in {time.time() - t1:.1f} s")
    t1 = time.time()
    df = time_all(s1, torch, bench, args.rep_ms)
    log(f"[wmma] timing in {time.time() - t1:.1f} s")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        log(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for M, g in df[~df["config"].str.startswith("cublas")].groupby("M"):
        b = g.loc[g["tflops"].idxmax()]
        log(f"[wmma] best at M={M}: {b['config']} {b['tflops']:.0f} TFLOP/s = {b['frac_mma_sync']:.1%} of mma.sync, "
            f"{b['frac_cublas']:.1%} of cuBLAS")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_wmma.csv"), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
