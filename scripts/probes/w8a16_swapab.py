"""Probe (issue 22, target 1 at M > 1): does triton_w8a16's swapab path (out^T = W x^T with split-K:
the weight rows fill the MMA's 64 / 128-row side, the tokens its N) stream FP8 weights closer to the
copy rate than the decode GEMV (gemv_w8a16_fp8) once there are several tokens?

    python scripts/probes/w8a16_swapab.py [--rep-ms 15] [--ms 1,4,16,64] [--shapes a,b] [--out DIR]

1. Correctness first (asserts): every swapab candidate at odd shapes against float64, poisoned
   outputs, two launches each (the split-K counters re-armed).
2. Timing at notebook 08's shapes, inputs rotated over > 2x L2, CUDA-graph timed as 08 does:
   gemv_w8a16_fp8 as it launches by default, each of triton_w8a16.swapab_candidates, cuBLAS BF16
   (torch.matmul on bf16 weights). Per row: time, bytes streamed (FP8 codes + bf16 scales; bf16
   weights for cuBLAS), fraction of a same-size copy (decode.same_size_copy), and the
   M = 1 fraction the target compares against. Prints the table and, per (shape, M), the best
   swapab config over the GEMV; writes probe_w8a16_swapab.csv into --out (or $OUT).

Measured (H200, afbd834, 2026-12-04; offline_box step w8a16-swapab): 50 correctness checks passed; the
best swapab config streamed 0.39-0.45 of a same-size copy at M = 1 and 0.41-0.52 at M = 16 on the five
shapes, against the GEMV's 0.82-0.96 and 0.54-0.77 (the GEMV 1.84-2.25x faster at M = 1, 1.33-1.70x
at M = 16); at M = 64 swapab was 0.73-0.86x the GEMV's time on the two down_proj shapes and 1.01-1.03x
on the other three (both 0.23-0.37 of copy) while cuBLAS BF16 streamed 0.84-0.98. The best 'cvt' and
'trick' configs differ by up to 0.10 of copy, neither near the GEMV. So Triton's swapab is not the route
to target 1 below M = 64, as the static SASS predicted (its dequant is ~7 integer instructions per weight).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

SHAPES = "llama3-70b:down_proj,llama3-70b:qkv,llama3-8b:down_proj,llama3-8b:gate_up,qwen3-8b:gate_up"


def check_correctness(torch, tw, wo):
    from fp8lab.emulate.compare import relerr
    n = 0
    for M, N, K in [(1, 200, 896), (7, 328, 1664), (16, 1000, 2048), (33, 200, 896), (64, 136, 4096)]:
        d = wo.generate("fp8", M, N, K, act="bf16", seed=M + N)
        x = torch.from_numpy(d["act"].astype(np.float32)).to(torch.bfloat16).cuda()
        q = torch.from_numpy(d["codes"]).cuda()
        s = tw.fold_scales(torch.from_numpy(d["scales"]).to(torch.bfloat16).cuda())
        ref = tw.reference(d["act"], d["codes"], d["scales"])
        for cfg in tw.swapab_candidates(M, N, K, sms=torch.cuda.get_device_properties(0).multi_processor_count):
            for _ in range(2):
                out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                tw.triton_w8a16(x, q, s, out=out, path="swapab", config=cfg)
                got = out.double().cpu().numpy()
                assert np.isfinite(got).all() and relerr(got, ref) < 8e-3, (M, N, K, cfg, relerr(got, ref))
                n += 1
    return n


def cfg_text(c: dict) -> str:
    return f"W{c['BLOCK_W']} T{c['BLOCK_T']} split{c['SPLIT_K']} s{c['num_stages']} {c['DEQ']}"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep-ms", type=float, default=15)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--ms", default="1,4,16,64")
    args = ap.parse_args(argv)

    import torch

    from fp8lab.arms import registry
    from fp8lab.experiments import decode
    from fp8lab.facts import shapes
    from fp8lab.kernels import triton_w8a16 as tw
    from fp8lab.kernels import weight_only as wo
    from fp8lab.measure import bench, harness

    t0 = time.time()
    wo.load_extension()
    n = check_correctness(torch, tw, wo)
    print(f"correctness: {n} checks passed ({time.time() - t0:.0f} s)", flush=True)

    l2 = bench.device_l2_bytes()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    Ms = [int(m) for m in args.ms.split(",")]
    rows, same = [], {}

    def copy_rate(nbytes):
        if nbytes not in same:
            same[nbytes] = decode.same_size_copy(nbytes, l2, rep_ms=args.rep_ms)["Bps"]
        return same[nbytes]

    def timed(fn_for, sets, M, N):
        outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
        fn = bench.rotating(fn_for, list(zip(sets, outs)))
        return bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5).p50_s

    for name in args.shapes.split(","):
        sh = shapes.get(name)
        N, K = sh.N, sh.K
        # the decode GEMV's packed FP8 weight
        pw = wo.random_weight("fp8", N, K, keep_codes=False)[0].to("cuda")
        g_bytes = registry.count(wo.ARMS["fp8"], N=N, K=K).weight_bytes
        g_sets = harness.rotation_copies(pw, g_bytes, l2, wo.PackedWeight.clone)
        # triton_w8a16's codes (no NaN code) and folded power-of-two scales
        q = torch.randint(0, 256, (N, K), dtype=torch.uint8, device="cuda")
        q[(q & 0x7F) == 0x7F] = 0x38
        s = tw.fold_scales(torch.exp2(torch.randint(-8, 0, (N, K // 128), device="cuda").double()).to(torch.bfloat16))
        t_bytes = N * K + N * (K // 128) * 2
        n_t = max(1, int(np.ceil(2 * l2 / t_bytes)) + 1)
        t_sets = [(q, s)] + [(q.clone(), s.clone()) for _ in range(n_t - 1)]
        # cuBLAS BF16
        w16 = torch.randn(N, K, device="cuda").to(torch.bfloat16)
        b_bytes = 2 * N * K
        n_b = max(1, int(np.ceil(2 * l2 / b_bytes)) + 1)
        b_sets = [w16] + [w16.clone() for _ in range(n_b - 1)]
        wo.workspace(torch.device("cuda"), max(Ms) * N, wo.grid_x("fp8", N, 1) * 2)
        for M in Ms:
            x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
            t = timed(lambda p_, o_: wo.gemv_w16(x, p_, out=o_), g_sets, M, N)
            rows.append(dict(shape=name, M=M, arm="gemv_w8a16_fp8", config="default", time_us=t * 1e6,
                             MB=g_bytes / 2**20, frac_same=g_bytes / t / copy_rate(g_bytes)))
            for cfg in tw.swapab_candidates(M, N, K, sms=sms):
                t = timed(lambda qs_, o_, cfg=cfg: tw.triton_w8a16(x, qs_[0], qs_[1], out=o_, path="swapab", config=cfg),
                          t_sets, M, N)
                rows.append(dict(shape=name, M=M, arm="triton_w8a16_swapab", config=cfg_text(cfg), time_us=t * 1e6,
                                 MB=t_bytes / 2**20, frac_same=t_bytes / t / copy_rate(t_bytes)))
            t = timed(lambda w_, o_: torch.matmul(x, w_.t(), out=o_), b_sets, M, N)
            rows.append(dict(shape=name, M=M, arm="cublas_bf16", config="", time_us=t * 1e6,
                             MB=b_bytes / 2**20, frac_same=b_bytes / t / copy_rate(b_bytes)))
            print(f"{name} M={M} timed ({time.time() - t0:.0f} s)", flush=True)
        del g_sets, t_sets, b_sets, pw, q, s, w16
        torch.cuda.empty_cache()

    df = pd.DataFrame(rows)
    pd.set_option("display.width", 220)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    best = df[df.arm == "triton_w8a16_swapab"].sort_values("time_us").groupby(["shape", "M"]).head(1)
    g = df[df.arm == "gemv_w8a16_fp8"].set_index(["shape", "M"])
    c = df[df.arm == "cublas_bf16"].set_index(["shape", "M"])
    best = best.set_index(["shape", "M"])
    summary = pd.DataFrame({"gemv_frac": g["frac_same"], "swapab_frac": best["frac_same"],
                            "swapab_config": best["config"], "cublas_bf16_frac": c["frac_same"],
                            "swapab_over_gemv_time": best["time_us"] / g["time_us"]})
    m1 = summary.xs(min(Ms), level="M")[["gemv_frac", "swapab_frac"]].max(axis=1)
    summary["best_fp8_over_its_M1"] = (summary[["gemv_frac", "swapab_frac"]].max(axis=1)
                                       / m1.reindex(summary.index.get_level_values(0)).to_numpy())
    print("\nfraction of a same-size copy; the best swapab config against the GEMV "
          "(target 1: at M = 16 >= 0.85 of the M = 1 rate)")
    print(summary.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_w8a16_swapab.csv"), index=False)
    print(f"total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
