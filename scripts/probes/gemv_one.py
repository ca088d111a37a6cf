"""Probe (issue 7): one weight-only decode kernel launched a few times, for a profiler to attach to.

    python scripts/probes/gemv_one.py --shape llama3-70b:down_proj --fmt nvfp4 --M 1 \
        [--schedule splitk|streamk] [--iters 6]

Run it under ncu with --launch-skip 3 --launch-count 1 so the profiled launch is a warm one, e.g.
    ncu --clock-control none --kernel-name regex:gemv --launch-skip 3 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --print-details all python scripts/probes/gemv_one.py ...
The output is checked against the same call with splits = 1 (same GEMM, another fp32 order).
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama3-70b:down_proj")
    ap.add_argument("--fmt", default="fp8")
    ap.add_argument("--M", type=int, default=1)
    ap.add_argument("--schedule", default="splitk", choices=("splitk", "streamk", "bulk"))
    ap.add_argument("--iters", type=int, default=6)
    args = ap.parse_args(argv)

    import torch

    from fp8lab.facts import shapes
    from fp8lab.kernels import weight_only as wo

    sh = shapes.get(args.shape)
    pw_host, _ = wo.random_weight(args.fmt, sh.N, sh.K, keep_codes=False)
    pw = pw_host.to("cuda")
    x = torch.randn(args.M, sh.K, device="cuda").to(torch.bfloat16)
    kw = dict(schedule=args.schedule)
    out = None
    for _ in range(args.iters):
        out = wo.gemv_w16(x, pw, **kw)
    ref = wo.gemv_w16(x, pw, splits=1).float()
    torch.cuda.synchronize()
    err = float((out.float() - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)
    print(f"{args.shape} {args.fmt} M={args.M} {kw}: max rel diff vs splits=1 {err:.2e}")
    if not err < 2 ** -6:
        raise SystemExit(f"mismatch vs splits=1: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
