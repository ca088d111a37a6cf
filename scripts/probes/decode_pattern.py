"""Probe (issue 22, target 1): which grid would the weight-only decode GEMV's access pattern stream
best at? The pattern kernels (fp8lab.kernels.weight_only.pattern_stream: a GEMV's grid, CTAs per SM and
weight and scale loads through its register ring, nothing else) swept over split counts and CTAs per
SM at notebook 08's shapes, beside the GEMV at its own pick. (CTAs per SM above what the pattern kernel's registers allow run at
that limit: the column ctas_per_sm is what ran, asked_ctas_per_sm what was asked.)

    python scripts/probes/decode_pattern.py [--shapes ...] [--fmts fp8,int4] [--ms 1,16]
                                            [--splits 1,2,3,4,6,8,12,16] [--occ 1,2,3] [--orders tile,step]
                                            [--rep-ms 10] [--out DIR]

Notebook 08 times each GEMV beside its pattern at the GEMV's own grid: where the pattern itself
misses a target, the grid and access pattern are the limit. This probe asks what another grid would
give the same loads: more splits (more, shorter CTAs), more CTAs per SM (more warps, so more bytes,
in flight per SM: what a GEMV with fewer registers could run), fewer, and (--orders step) the same
chunks in a step-major packing's order (at each step a CTA's warps read adjacent chunks: a layout
the GEMV does not have, a what-if). For each (shape, format, M):
the GEMV (split-K at choose_splits' pick and stream-K, as notebook 08 launches them), the pattern at
the GEMV's own grid and occupancy, and the pattern at every (order, splits, CTAs per SM) asked for; weights
rotated past 2x L2, CUDA-graph replays, the 2 GiB copy in the same process. Prints per point the
GEMV, its pattern, and the best pattern grid found; writes probe_decode_pattern.csv into --out (or
$OUT). Clocks are observed, never set.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

SHAPES = "llama3-70b:down_proj,qwen3-8b:gate_up,llama3-8b:gate_up,llama3-8b:down_proj,llama3-70b:qkv"


def _ints(text, name):
    try:
        v = [int(x) for x in text.split(",") if x]
    except ValueError:
        v = []
    if not v or min(v) < 1:
        raise SystemExit(f"--{name} takes comma-separated positive integers, got {text!r}")
    return v


def summary(df) -> str:
    """The probe's table: per (shape, fmt, M) the GEMV (split-K and stream-K) and its pattern at its own
    grid, then the best pattern grid of the sweep (fraction of copy, s<splits>/<CTAs per SM>, its
    order) and the best in the GEMV's own (tile) order."""
    lines = [f"{'shape':<22} {'fmt':<5} {'M':>3} {'gemv sK':>8} {'(s/occ)':>8} {'its pat':>8} {'gemv stK':>8} "
             f"{'its pat':>8} {'best pattern grid':>24} {'best, tile order':>18}"]
    for (sh, fmt, M), g in df.groupby(["shape", "fmt", "M"], sort=False):
        k = g.set_index("kind")["fraction_of_copy"]
        sweep = g[g["kind"] == "pattern splitk"]
        def best_of(d, with_order):
            if not len(d):
                return "-"
            b = d.loc[d["fraction_of_copy"].idxmax()]
            return (f"{b['fraction_of_copy']:.3f} s{int(b['splits'])}/{int(b['ctas_per_sm'])}"
                    + (f" {b['order']}" if with_order else ""))
        best = best_of(sweep, True)
        best_tile = best_of(sweep[sweep["order"] == "tile"] if "order" in sweep else sweep, False)
        r0 = g.iloc[0]
        lines.append(f"{sh:<22} {fmt:<5} {M:>3} {k.get('gemv splitk', float('nan')):>8.3f} "
                     f"{f's{int(r0.gemv_splits)}/{int(r0.gemv_ctas_per_sm)}':>8} "
                     f"{k.get('pattern@gemv splitk', float('nan')):>8.3f} {k.get('gemv streamk', float('nan')):>8.3f} "
                     f"{k.get('pattern@gemv streamk', float('nan')):>8.3f} {best:>24} {best_tile:>18}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--fmts", default="fp8,int4")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--splits", default="1,2,3,4,6,8,12,16")
    ap.add_argument("--occ", default="1,2,3")
    ap.add_argument("--orders", default="tile,step")
    ap.add_argument("--rep-ms", type=float, default=10.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    Ms, splits, occs = _ints(args.ms, "ms"), _ints(args.splits, "splits"), _ints(args.occ, "occ")
    try:
        import torch
    except ImportError:
        print("needs torch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import pandas as pd

    from fp8lab.arms import registry
    from fp8lab.experiments import decode as dx
    from fp8lab.kernels import weight_only as wo
    from fp8lab.measure import bench, harness

    orders = args.orders.split(",")
    if not set(orders) <= set(wo.PATTERN_ORDERS) or not orders:
        print(f"--orders takes {','.join(wo.PATTERN_ORDERS)}, got {args.orders!r}", file=sys.stderr)
        return 2
    fmts = args.fmts.split(",")
    for f in fmts:
        if f not in wo.FORMATS:
            print(f"--fmts: {f!r} is not one of {wo.FORMATS}", file=sys.stderr)
            return 2
    try:
        shapes = [dx._shape(s) for s in args.shapes.split(",")]
    except (ValueError, KeyError) as e:
        print(f"--shapes: {e}", file=sys.stderr)
        return 2
    l2 = bench.device_l2_bytes()
    t0 = time.time()
    rows = []

    def timed(fn, sets):
        return bench.bench(bench.rotating(fn, sets), method="graph", rep_ms=args.rep_ms, warmup_ms=5).p50_s

    for sh in shapes:
        for fmt in fmts:
            pw_host, _ = wo.random_weight(fmt, sh.N, sh.K, keep_codes=False)
            first = pw_host.to("cuda")
            stream = registry.count(wo.ARMS[fmt], N=sh.N, K=sh.K).weight_bytes
            sets = harness.rotation_copies(first, stream, l2, wo.PackedWeight.clone)
            wo.workspace(torch.device("cuda"), max(Ms) * sh.N, wo.grid_x(fmt, sh.N, 1) * 64)
            for M in Ms:
                cfg = wo.launch_config(first, M)
                x = torch.randn(M, sh.K, device="cuda").to(torch.bfloat16)
                outs = [torch.empty(M, sh.N, dtype=torch.bfloat16, device="cuda") for _ in sets]
                base = dict(shape=sh.name, N=sh.N, K=sh.K, fmt=fmt, M=M, stream_bytes=stream,
                            gemv_splits=cfg["splits"], gemv_ctas_per_sm=cfg["ctas_per_sm"])
                for sched in ("splitk", "streamk"):
                    t = timed(lambda p_, o_, s=sched: wo.gemv_w16(x, p_, out=o_, schedule=s), list(zip(sets, outs)))
                    rows.append(dict(base, kind=f"gemv {sched}", splits=cfg["splits"] if sched == "splitk" else -1,
                                     ctas_per_sm=cfg["ctas_per_sm"], time_p50_s=t))
                    kw = dict(splits=cfg["splits"]) if sched == "splitk" else dict(ctas=cfg["streamk_ctas"])
                    g = wo.pattern_geometry(fmt, M, sh.N, sh.K, schedule=sched, **kw)
                    sink = wo.pattern_sink(first.w.device, g["threads"])
                    t = timed(lambda p_, s=sched, kw=kw, sink=sink: wo.pattern_stream(
                        p_, M, schedule=s, ctas_per_sm=cfg["ctas_per_sm"], sink=sink, **kw), [(p,) for p in sets])
                    rows.append(dict(base, kind=f"pattern@gemv {sched}",
                                     splits=g["splits"], ctas_per_sm=cfg["ctas_per_sm"], time_p50_s=t))
                for order in orders:
                    for occ in occs:
                        for s in sorted({min(s, sh.K // 128) for s in splits}):
                            g = wo.pattern_geometry(fmt, M, sh.N, sh.K, schedule="splitk", splits=s)
                            sink = wo.pattern_sink(first.w.device, g["threads"])
                            got = {}

                            def call(p_, s=s, occ=occ, sink=sink, got=got, order=order):
                                got[0] = wo.pattern_stream(p_, M, splits=s, ctas_per_sm=occ, sink=sink, order=order)

                            t = timed(call, [(p,) for p in sets])
                            rows.append(dict(base, kind="pattern splitk", order=order, splits=g["splits"],
                                             ctas_per_sm=got.get(0), asked_ctas_per_sm=occ, time_p50_s=t))
                del outs
                print(f"{sh.name} {fmt} M={M}: {sum(r['shape'] == sh.name and r['fmt'] == fmt and r['M'] == M for r in rows)} "
                      f"rows, {time.time() - t0:.0f} s", flush=True)
            del sets, first
            torch.cuda.empty_cache()
    copy = dx.measure_copy()["rate_p50"]
    df = pd.DataFrame(rows)
    df["copy_Bps"] = copy
    df["fraction_of_copy"] = df["stream_bytes"] / df["time_p50_s"] / copy
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "probe_decode_pattern.csv")
    df.to_csv(path, index=False)
    print(f"\ncopy {copy / 1e12:.3f} TB/s; fraction of copy; {time.time() - t0:.0f} s")
    print(summary(df))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
