"""Probe (issue 22, target 3): fp8lab's W8A8 blockwise decode GEMV (fp8lab.kernels.gemv_w8a8: the
weight-only decode kernel's register ring, split-K and batched finalise, with e4m3 activations)
against notebook 05's small-M arms at its shapes, M = 1 .. 64.

    python scripts/probes/gemv_w8a8.py [--ms 1,2,4,8,16,32,64] [--shapes ...] [--splits 1,2,4,8,16] [--out DIR]

Every point goes through notebook 05's own path (fp8lab.experiments.blockwise.run_point): operands
from make_operands (per-token and per-block magnitudes), every candidate's first call checked
against float64 rows into a NaN-poisoned output, then timed by CUDA-graph replay over operand sets
rotated past 2x L2. Candidates: gemv_w8a8_blockwise at the split model's pick ('split-K auto'; plain
and as a programmatic dependent launch, variant 'pdl': in the replayed graph each call's first weight
loads overlap the previous call's tail) and pinned to each of --splits, every tile of triton_blockwise's small-M policy (05's best arm there),
cuBLASLt blockwise. Beside them, the weight-only FP8 decode kernel (gemv_w8a16_fp8, bf16 activations,
plain and PDL) on the same shapes, graph-timed as scripts/probes/gemv.py times it: the same machinery
with 16-bit activations and the bit-trick dequant. At the points of target 3 (M <= 16, >= 32 MB), the
W8A8 kernel's access pattern alone (notebook 05's bw.pattern_points: its grid, CTAs per SM and weight
and scale loads, nothing else). Then the 2 GiB device copy, in the same process.

Prints, per (shape, M): weight bytes / time / copy for the auto pick, the best pinned split, the
best triton tile and cuBLASLt (target 3: >= 0.88 at M <= 16 on >= 32 MB of weights), and the
auto pick's time over the best pinned split's. Writes probe_gemv_w8a8.csv into --out (or $OUT).
Clocks are observed, never set.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

SHAPES = "qwen3-8b:o_proj,qwen3-8b:down_proj,deepseek-v3:dense_down"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="1,2,4,8,16,32,64")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--splits", default="1,2,4,8,16")
    ap.add_argument("--rep-ms", type=float, default=20.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    try:
        Ms = [int(x) for x in args.ms.split(",")]
        pinned = [int(x) for x in args.splits.split(",")]
    except ValueError:
        print(f"--ms and --splits take comma-separated integers, got {args.ms!r} / {args.splits!r}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("needs torch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import pandas as pd

    from fp8lab.experiments import blockwise as bw
    from fp8lab.kernels import gemv_w8a8 as g8

    try:
        shapes = bw.resolve_shapes(args.shapes.split(","))
    except (ValueError, KeyError) as e:
        print(f"--shapes: {e}", file=sys.stderr)
        return 2

    def pinned_candidate(s_pin):
        def gemm(s, a, sa, out):
            if s.gemv_w8a8 is None:
                s.gemv_w8a8 = g8.pack(s.b, s.b_scale)
            return g8.gemv_w8a8(a, sa, s.gemv_w8a8, out=out, splits=min(s_pin, s.gemv_w8a8.steps))
        return bw.Candidate("gemv_w8a8_blockwise", gemm, path="mma.sync f16 (e4m3 cvt)", config=f"splits {s_pin}",
                            takes_out=True)

    from fp8lab.arms import registry
    from fp8lab.kernels import weight_only as wo
    from fp8lab.measure import bench, harness

    l2 = bench.device_l2_bytes()

    def w8a16_fp8(shape, Ms):
        """The weight-only FP8 decode kernel (bf16 activations) on the same shape: {(M, pdl): p50 s},
        graph-timed over weight copies rotated past 2x L2, as scripts/probes/gemv.py times it."""
        pw_host, _ = wo.random_weight("fp8", shape.N, shape.K, keep_codes=False)
        pw = pw_host.to("cuda")
        stream = registry.count(wo.ARMS["fp8"], N=shape.N, K=shape.K).weight_bytes
        sets = harness.rotation_copies(pw, stream, l2, wo.PackedWeight.clone)
        wo.workspace(torch.device("cuda"), max(Ms) * shape.N, wo.grid_x("fp8", shape.N, 1) * 2)
        out = {}
        for M in Ms:
            x = torch.randn(M, shape.K, device="cuda").to(torch.bfloat16)
            for pdl in (False, True):
                oo = [torch.empty(M, shape.N, dtype=torch.bfloat16, device="cuda") for _ in sets]
                fn = bench.rotating(lambda p_, o_, pdl=pdl: wo.gemv_w16(x, p_, out=o_, pdl=pdl), list(zip(sets, oo)))
                out[(M, pdl)] = bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5).p50_s
        return out, stream

    t0 = time.time()
    rows = []
    w16 = {}
    for shape in shapes:
        w16[shape.name] = w8a16_fp8(shape, Ms)
        for M in Ms:
            cands, _ = bw.build_candidates(M, ["gemv_w8a8_blockwise", "triton_blockwise", "cublaslt_blockwise"],
                                           N=shape.N, K=shape.K)
            cands += [pinned_candidate(s) for s in pinned]
            plan = g8.launch_config(g8.PackedW8A8(shape.N, shape.K, None, None), M)
            print(f"{shape.name} M={M}: {len(cands)} candidates; auto splits = {plan['splits']}", flush=True)
            for r in bw.run_point(shape, M, cands, rep_ms=args.rep_ms, warmup_ms=5):
                r["auto_splits"] = plan["splits"]
                rows.append(r)
    pat = bw.pattern_points(shapes, Ms, 1.0, rep_ms=args.rep_ms, warmup_ms=5)   # pattern_value: bytes / s here
    copy = bw.measure_copy_bandwidth()
    pat["copy_Bps"] = copy["copy_Bps_p50"]
    pat["pattern_value"] = pat["pattern_value"] / copy["copy_Bps_p50"]
    pat.to_csv(os.path.join(args.out, "probe_gemv_w8a8_pattern.csv"), index=False)
    pv = {(r.shape, int(r.M)): float(r.pattern_value) for r in pat.itertuples() if r.status == "measured"}
    df = pd.DataFrame(rows)
    df["copy_Bps_p50"] = copy["copy_Bps_p50"]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "probe_gemv_w8a8.csv")
    df.to_csv(path, index=False)

    bad = df[df["status"] != "measured"]
    for _, r in bad.iterrows():
        print(f"NOT MEASURED {r['shape']} M={r['M']} {r['arm']} {r['config']}: {r['status']}")
    m = df[df["status"] == "measured"].copy()
    wb = {s.name: bw.weight_bytes("triton_blockwise", s.N, s.K) for s in shapes}
    m["frac"] = [wb[s] / t / copy["copy_Bps_p50"] for s, t in zip(m["shape"], m["time_p50_s"])]

    def w16_frac(shape, M, pdl):
        times, stream = w16[shape]
        return stream / times[(M, pdl)] / copy["copy_Bps_p50"]
    w16_rows = pd.DataFrame([dict(shape=sh, M=M, arm=wo.ARMS["fp8"], variant="pdl" if pdl else "", time_p50_s=t,
                                  weight_bytes=st) for sh, (times, st) in w16.items() for (M, pdl), t in times.items()])
    w16_rows.to_csv(os.path.join(args.out, "probe_gemv_w8a16_fp8.csv"), index=False)
    print(f"\ncopy {copy['copy_Bps_p50'] / 1e12:.3f} TB/s; weight bytes / time / copy (target 3: >= 0.88 at M <= 16 "
          f"on >= 32 MB); {time.time() - t0:.0f} s")
    print(f"{'shape':<24} {'M':>3} {'w8a8 auto':>10} {'(splits)':>8} {'best pin':>9} {'(s)':>4} {'auto/pin':>8} "
          f"{'auto+PDL':>8} {'triton':>7} {'cuBLASLt':>8} {'W8A16 fp8':>9} {'+PDL':>6} {'pattern':>7}")
    for (shape, M), g in m.groupby(["shape", "M"], sort=False):
        w = g[g["arm"] == "gemv_w8a8_blockwise"]
        auto = w[(w["config"] == "split-K auto") & (w["variant"].fillna("") == "")]
        auto_pdl = w[(w["config"] == "split-K auto") & (w["variant"] == "pdl")]
        pins = w[w["config"] != "split-K auto"]
        tri = g[g["arm"] == "triton_blockwise"]
        lt = g[g["arm"] == "cublaslt_blockwise"]
        best_pin = pins.loc[pins["time_p50_s"].idxmin()] if len(pins) else None

        def f(x):
            return f"{x:.3f}" if x == x else "  -  "
        a_frac = float(auto["frac"].iloc[0]) if len(auto) else float("nan")
        a_t = float(auto["time_p50_s"].iloc[0]) if len(auto) else float("nan")
        print(f"{shape:<24} {M:>3} {f(a_frac):>10} {int(g['auto_splits'].iloc[0]):>8} "
              f"{f(best_pin['frac'] if best_pin is not None else float('nan')):>9} "
              f"{best_pin['config'].split()[-1] if best_pin is not None else '-':>4} "
              f"{f(a_t / best_pin['time_p50_s'] if best_pin is not None else float('nan')):>8} "
              f"{f(float(auto_pdl['frac'].iloc[0]) if len(auto_pdl) else float('nan')):>8} "
              f"{f(tri['frac'].max() if len(tri) else float('nan')):>7} {f(lt['frac'].max() if len(lt) else float('nan')):>8} "
              f"{f(w16_frac(shape, M, False)):>9} {f(w16_frac(shape, M, True)):>6} "
              f"{f(pv.get((shape, int(M)), float('nan'))):>7}")
    print("pattern: the W8A8 kernel's access pattern alone at its auto splits (M <= 16, >= 32 MB only)")
    print(f"wrote {path}; {len(bad)} rows not measured")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
