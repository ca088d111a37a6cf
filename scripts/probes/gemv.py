"""Probe (issues 7, 22): the launch schedules of the weight-only decode kernels on one GPU: split-K,
stream-K and bulk (split-K with each warp's weights in a shared-memory ring filled by cp.async.bulk),
split-K and stream-K also as programmatic dependent launches (pdl=True, sm_90+: each GEMV fetches
its first weights, then waits for the one before; timed back to back, so each overlaps the tail of
the one before, as in a chain of PDL kernels).

    python scripts/probes/gemv.py [--rep-ms 15] [--out DIR] [--splits 1,2,4 [--splitk-only]]

1. Correctness first (asserts): every format x schedule (split-K auto, stream-K with the
   default CTAs, stream-K with one CTA per SM, bulk auto and with splits = 1) at odd shapes
   against float64, poisoned outputs, the workspace left clean; stream-K with one CTA per tile
   and bulk with splits = 1 bit-identical to splits=1; every PDL launch with at most two partial sums
   per output bit-identical to its plain twin, the others within one bf16 rounding of it. Then how
   often plain and PDL launches reproduce their own output bit for bit at 2, 3 and 8 splits.
2. Timing: qwen3-8b gate_up, qwen3-8b down_proj, llama3-70b down_proj; fp8 / int8 / nvfp4 /
   int4; M = 1 and 16; inputs rotated over > 2x L2, CUDA-graph timed as notebook 08 does. Per
   row: time, effective bandwidth (weight + scale bytes / time), fraction of the 2 GiB copy
   and of a same-size copy (decode.same_size_copy), splits / grid; at the benchmark shapes the
   schedules are also checked against each other.
Prints a table and a per-(shape, fmt, M) winner; writes probe_gemv.csv into --out (or $OUT).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd


def _variants(cfg, splits=(), pdl=False):
    """The schedules timed: split-K as chosen (and the same launch with the activation chunks never
    resident: the A/B of the barrier-free main loop), stream-K at full occupancy and at one CTA per
    SM, bulk as chosen, split-K and stream-K as chosen as programmatic dependent launches (``pdl``:
    sm_90+), and split-K and bulk pinned to each of ``splits`` (those the weight's K allows)."""
    sms, occ = cfg["sms"], cfg["ctas_per_sm"]
    return ([("splitk", dict(schedule="splitk")),
             ("splitk_ring", dict(schedule="splitk", act_resident=False)),
             ("streamk", dict(schedule="streamk", ctas=sms * occ)),
             ("streamk_1pm", dict(schedule="streamk", ctas=sms)),
             ("bulk", dict(schedule="bulk"))]
            + ([("splitk_pdl", dict(schedule="splitk", pdl=True)),
                ("streamk_pdl", dict(schedule="streamk", ctas=sms * occ, pdl=True))] if pdl else [])
            + [(f"splitk_{s}", dict(schedule="splitk", splits=s)) for s in splits]
            + [(f"bulk_{s}", dict(schedule="bulk", splits=s)) for s in splits])


def check_correctness(wo, torch):
    """Asserts; returns the number of checks."""
    n = 0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for fmt in wo.FORMATS:
        for (M, N, K) in [(1, 200, 896), (7, 328, 1664), (16, 1000, 2048), (33, 200, 896)]:
            d = wo.generate(fmt, M, N, K, seed=M + N)
            pw = wo.pack_weights(fmt, d["codes"], d["scales"], global_scale=d["global_scale"]).to("cuda")
            ref = wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"])
            x = torch.from_numpy(d["act"].astype(np.float32)).to(torch.bfloat16).cuda()
            for name, kw in [("splitk", {}), ("splitk_ring", dict(act_resident=False)),
                             ("streamk", dict(schedule="streamk")),
                             ("streamk_1pm", dict(schedule="streamk", ctas=sms)),
                             ("streamk_5", dict(schedule="streamk", ctas=5)),
                             ("bulk", dict(schedule="bulk")), ("bulk_1", dict(schedule="bulk", splits=1)),
                             ("bulk_3", dict(schedule="bulk", splits=3))]:
                for rep in range(2):
                    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
                    wo.gemv_w16(x, pw, out=out, **kw)
                    torch.cuda.synchronize()
                    got = out.double().cpu().numpy()
                    assert np.isfinite(got).all(), (fmt, M, N, K, name, "non-finite")
                    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                    assert err < 6e-3, (fmt, M, N, K, name, err)
                    ws, cnt = wo.workspace(x.device, 1, 1)
                    assert float(ws.abs().sum()) == 0 and int(cnt.abs().sum()) == 0, (fmt, name, "dirty workspace")
                    n += 1
            a = wo.gemv_w16(x, pw, splits=1)
            b = wo.gemv_w16(x, pw, schedule="streamk", ctas=wo.grid_x(fmt, N, M))
            assert torch.equal(a.view(torch.int16), b.view(torch.int16)), (fmt, M, N, K, "whole tiles not bitwise")
            c = wo.gemv_w16(x, pw, schedule="bulk", splits=1)
            assert torch.equal(a.view(torch.int16), c.view(torch.int16)), (fmt, M, N, K, "bulk not bitwise")
            n += 2
            if wo.pdl_supported():
                # <= 2 partial sums per output (the add order cannot change a bit): bitwise; as
                # chosen (3+ partials where K allows, fp32 adds in the order the CTAs finish): within
                # one bf16 rounding of the plain launch
                for kw, exact in ((dict(schedule="splitk", splits=1), True), (dict(schedule="splitk", splits=2), True),
                                  (dict(schedule="bulk", splits=2), True), (dict(schedule="splitk"), False),
                                  (dict(schedule="streamk"), False), (dict(schedule="bulk"), False)):
                    p_ = wo.gemv_w16(x, pw, **kw)
                    q_ = wo.gemv_w16(x, pw, pdl=True, **kw)
                    if exact:
                        assert torch.equal(p_.view(torch.int16), q_.view(torch.int16)), \
                            (fmt, M, N, K, kw, "pdl not bitwise")
                    else:
                        a_, b_ = p_.double(), q_.double()
                        d = (a_ - b_).abs()
                        bound = 2.0 ** -7 * torch.maximum(a_.abs(), b_.abs()) + 2.0 ** -16 * float(a_.abs().max())
                        assert bool((d <= bound).all()), (fmt, M, N, K, kw, "pdl beyond one rounding", float(d.max()))
                    n += 1
    return n


def reorder_census(wo, torch, reps=50):
    """How often the plain launch and the PDL launch each reproduce their own first output bit for bit,
    at splits = 2 (order-independent) and splits = 3 / 8 (three or more fp32 partials per output,
    added in the order the CTAs finish). Printed, not asserted."""
    M, N, K = 16, 1000, 2048
    d = wo.generate("fp8", M, N, K, seed=5)
    pw = wo.pack_weights("fp8", d["codes"], d["scales"], global_scale=d["global_scale"]).to("cuda")
    x = torch.from_numpy(d["act"].astype(np.float32)).to(torch.bfloat16).cuda()
    print(f"run-to-run bit reproducibility, fp8 M={M} N={N} K={K}, {reps} launches each "
          "(launches equal to the first / elements that ever differ / largest difference in bf16 roundings):")
    for splits in (2, 3, 8):
        for pdl in ((False, True) if wo.pdl_supported() else (False,)):
            outs = [wo.gemv_w16(x, pw, splits=splits, pdl=pdl) for _ in range(reps)]
            torch.cuda.synchronize()
            first = outs[0]
            same = sum(torch.equal(o.view(torch.int16), first.view(torch.int16)) for o in outs)
            diff = torch.zeros_like(first, dtype=torch.bool)
            ulps = 0
            for o in outs:
                diff |= o.view(torch.int16) != first.view(torch.int16)
                same_sign = (o.view(torch.int16) < 0) == (first.view(torch.int16) < 0)   # bit patterns count roundings
                step = (o.view(torch.int16).int() - first.view(torch.int16).int()).abs()[same_sign]
                ulps = max(ulps, int(step.max()) if step.numel() else 0)
            print(f"  splits={splits} pdl={pdl!s:5s}: {same}/{reps} equal, {int(diff.sum())} of {first.numel()} "
                  f"elements differ, at most {ulps} roundings", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rep-ms", type=float, default=15)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--shapes", default="qwen3-8b:gate_up,qwen3-8b:down_proj,llama3-70b:down_proj")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--splits", default="", help="split-K factors to pin besides the chosen one, e.g. 1,2,4,8")
    ap.add_argument("--splitk-only", action="store_true",
                    help="time only split-K as chosen and pinned to each of --splits (the split-count sweep)")
    args = ap.parse_args(argv)

    import torch

    from fp8lab.measure import bench, harness
    from fp8lab.facts import shapes
    from fp8lab.arms import registry
    from fp8lab.experiments import decode
    from fp8lab.kernels import weight_only as wo

    t0 = time.time()
    wo.load_extension()
    print(f"extension ready in {time.time() - t0:.0f} s", flush=True)
    t1 = time.time()
    n = check_correctness(wo, torch)
    print(f"correctness: {n} checks passed ({time.time() - t1:.1f} s)", flush=True)
    reorder_census(wo, torch)

    l2 = bench.device_l2_bytes()
    big = decode.measure_copy(copy_gib=2.0)["rate_p50"]
    print(f"2 GiB copy: {big / 1e12:.3f} TB/s", flush=True)
    Ms = [int(m) for m in args.ms.split(",")]
    splits = [int(s) for s in args.splits.split(",") if s]
    rows = []
    same: dict = {}
    for name in args.shapes.split(","):
        sh = shapes.get(name)
        N, K = sh.N, sh.K
        for fmt in wo.FORMATS:
            pw_host, _ = wo.random_weight(fmt, N, K, keep_codes=False)
            pw = pw_host.to("cuda")
            del pw_host
            stream = registry.count(wo.ARMS[fmt], N=N, K=K).weight_bytes
            sets = harness.rotation_copies(pw, stream, l2, wo.PackedWeight.clone)
            wo.workspace(torch.device("cuda"), max(Ms) * N, wo.grid_x(fmt, N, 1) * 2)
            if stream not in same:
                same[stream] = decode.same_size_copy(stream, l2, rep_ms=args.rep_ms)["Bps"]
            for M in Ms:
                x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
                cfg = wo.launch_config(pw, M)
                outs = {}
                variants = _variants(cfg, [s for s in splits if s <= K // 128], pdl=wo.pdl_supported())
                if args.splitk_only:
                    variants = [(v, kw) for v, kw in variants if v == "splitk" or v.startswith("splitk_") and v != "splitk_ring"]
                for vname, kw in variants:
                    o = wo.gemv_w16(x, pw, **kw)
                    outs[vname] = o.float()
                base = outs["splitk"]
                for vname, o in outs.items():      # same GEMM, fp32 sums in another order
                    d = float((o - base).abs().max())
                    assert d <= 2 ** -6 * float(base.abs().max()) + 1e-30, (name, fmt, M, vname, d)
                for vname, kw in variants:
                    oo = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
                    fn = bench.rotating(lambda p_, o_, kw=kw: wo.gemv_w16(x, p_, out=o_, **kw), list(zip(sets, oo)))
                    t = bench.bench(fn, method="graph", rep_ms=args.rep_ms, warmup_ms=5)
                    bw = stream / t.p50_s
                    if vname in ("splitk", "splitk_ring", "splitk_pdl"):
                        launch = f"splits={cfg['splits']} grid={cfg['grid']}"
                    elif vname == "bulk":
                        launch = f"splits={cfg['bulk_splits']} ctas/SM={cfg['bulk_ctas_per_sm']}"
                    elif vname.startswith("splitk_") or vname.startswith("bulk_"):
                        launch = f"splits={kw['splits']} grid={(cfg['grid'][0], kw['splits'], cfg['grid'][2])}"
                    else:
                        plan = wo.streamk_plan(fmt, M, N, K, kw["ctas"])
                        launch = f"ctas={kw['ctas']} grid={plan['grid']} upc={plan['units_per_cta']}"
                    rows.append(dict(shape=name, fmt=fmt, M=M, variant=vname, MB=stream / 2**20,
                                     time_us=t.p50_s * 1e6, TBps=bw / 1e12, frac_big=bw / big,
                                     frac_same=bw / same[stream], same_TBps=same[stream] / 1e12, launch=launch))
                    print(f"{name:22s} {fmt:5s} M={M:<3d} {vname:12s} {t.p50_s * 1e6:8.2f} us "
                          f"{bw / 1e12:5.2f} TB/s  {bw / big:5.2f} of big  {bw / same[stream]:5.2f} of same  {launch}",
                          flush=True)
            del sets
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(df.drop(columns=["launch"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    piv = df.pivot_table(index=["shape", "M", "fmt"], columns="variant", values="frac_big")
    piv["best"] = piv.idxmax(axis=1)
    if not args.splitk_only:
        piv["gain_vs_splitk"] = piv[["streamk", "streamk_1pm"]].max(axis=1) / piv["splitk"]
        piv["bulk_gain"] = piv["bulk"] / piv["splitk"]
        piv["resident_gain"] = piv["splitk"] / piv["splitk_ring"]     # > 1: the barrier-free loop is faster
        if "splitk_pdl" in piv:                                       # > 1: PDL is faster than the plain launch
            piv["pdl_gain_splitk"] = piv["splitk_pdl"] / piv["splitk"]
            piv["pdl_gain_streamk"] = piv["streamk_pdl"] / piv["streamk"]
    print("\nfraction of the 2 GiB copy per schedule:")
    print(piv.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        df.to_csv(os.path.join(args.out, "probe_gemv.csv"), index=False)
    if (df.M == 1).any():
        par = df[df.M == 1].pivot_table(index=["shape", "variant"], columns="fmt", values="TBps")
        par["fp8/int8"] = par["fp8"] / par["int8"]
        par["nvfp4/int4"] = par["nvfp4"] / par["int4"]
        print("\nFP vs INT at M = 1 (TB/s):")
        print(par.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
