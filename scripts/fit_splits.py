"""Fit choose_splits' four constants to measured split sweeps (CPU only).

    python scripts/fit_splits.py [CSV ...] [--top 8]

CSV: tables written by ``scripts/probes/gemv.py --splitk-only --splits ...`` (default: the two H200
sweeps in scripts/probes/data, gemv_splits_h200.json). For every (shape, fmt, M) with at least two
pinned split counts (variants ``splitk_<s>``), the score of a parameter set is the time of the
fastest pinned split over the time of the split choose_splits picks with those parameters. Prints
the score of the constants in fp8lab.kernels.weight_only and of the best sets of a grid over

    SPLIT_KNEE_CTAS_PER_SM x SPLIT_GENERATION_BYTES x REDUCE_BYTE_COST x REDUCE_M_EXPONENT

ranked by the geometric mean, then the points within 2% of the fastest, then the worst point.
A pick that was not timed (a split count the sweep did not pin) counts as a miss and is listed.
Occupancy as in the sweeps: 2 CTAs per SM at M <= 16, 1 above (the occupancy query's answer on
the H200 for the 8-warp kernels); 132 SMs. The model's time is linear in the first three
constants at a fixed exponent, so each candidate split's time is precomputed as four terms.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fp8lab.facts import shapes  # noqa: E402
from fp8lab.kernels import weight_only as wo  # noqa: E402

DATA = ROOT / "scripts" / "probes" / "data"
DEFAULT_CSVS = (DATA / "gemv_splits_h200.csv", DATA / "gemv_splits_h200_m1-128.csv")
SMS = 132
GRID = {"knee": (0.5, 0.6, 0.7, 0.85, 1.0, 1.2),
        "gen": (2e6, 4e6, 6e6, 8e6, 10e6, 12e6),
        "red": (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0),
        "exp": (1.0, 1.25, 1.5, 1.75, 2.0)}
_NAMES = ("SPLIT_KNEE_CTAS_PER_SM", "SPLIT_GENERATION_BYTES", "REDUCE_BYTE_COST", "REDUCE_M_EXPONENT")


def ctas_per_sm(M: int) -> int:
    return 2 if M <= 16 else 1


def _model(fmt, M, N, K, s, knee, gen, red, exp):
    saved = [getattr(wo, n) for n in _NAMES]
    try:
        for n, v in zip(_NAMES, (knee, gen, red, exp)):
            setattr(wo, n, v)
        return wo.split_time_model(fmt, M, N, K, s, sms=SMS, ctas_per_sm=ctas_per_sm(M))
    finally:
        for n, v in zip(_NAMES, saved):
            setattr(wo, n, v)


def points(csvs, exps=GRID["exp"]):
    """[(label, {split: time_us}, candidates)] where candidates is [(s_eff, terms per exponent)]."""
    import pandas as pd

    out = []
    for path in csvs:
        df = pd.read_csv(path)
        df = df[df.variant.str.match(r"splitk_\d+$")]
        for (shape, fmt, M), g in df.groupby(["shape", "fmt", "M"]):
            if len(g) < 2:
                continue
            sh = shapes.get(shape)
            times = dict(zip(g.variant.str.slice(7).astype(int), g.time_us))
            steps = sh.K // wo.STEP_K
            cands, seen = [], set()
            for s in range(1, min(steps, 64) + 1):
                base, s_eff = _model(fmt, int(M), sh.N, sh.K, s, 0.0, 0.0, 0.0, 1.0)
                if s_eff in seen:
                    continue
                seen.add(s_eff)
                knee = _model(fmt, int(M), sh.N, sh.K, s, 1.0, 0.0, 0.0, 1.0)[0] - base
                gen = _model(fmt, int(M), sh.N, sh.K, s, 0.0, 1.0, 0.0, 1.0)[0] - base
                red = {e: _model(fmt, int(M), sh.N, sh.K, s, 0.0, 0.0, 1.0, e)[0] - base for e in exps}
                cands.append((s_eff, base, knee, gen, red))
            out.append((f"{os.path.basename(str(path))} {shape} {fmt} M={int(M)}", times, cands))
    return out


def score(pts, knee, gen, red, exp, *, misses=None):
    """(geometric mean of fastest / picked, points within 2%, worst, points) over pts."""
    ratios = []
    for label, times, cands in pts:
        t = [b + knee * k + gen * g + red * r[exp] for _, b, k, g, r in cands]
        best, best_t = None, math.inf
        for (s_eff, *_), x in zip(cands, t):
            if x < best_t * (1 - 1e-9):
                best, best_t = s_eff, x
        if best not in times:
            if misses is not None:
                misses.append((label, best))
            ratios.append(min(times.values()) / max(times.values()))    # counted as the slowest timed
            continue
        ratios.append(min(times.values()) / times[best])
    r = np.asarray(ratios)
    return float(np.exp(np.mean(np.log(r)))), int((r >= 0.98).sum()), float(r.min()), len(r)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="*", help="split sweeps written by scripts/probes/gemv.py (default: the stored two)")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    csvs = [Path(c) for c in args.csv] or list(DEFAULT_CSVS)
    for c in csvs:
        if not c.is_file():
            print(f"fit_splits: no such table: {c}", file=sys.stderr)
            return 2
    now = (wo.SPLIT_KNEE_CTAS_PER_SM, wo.SPLIT_GENERATION_BYTES, wo.REDUCE_BYTE_COST, wo.REDUCE_M_EXPONENT)
    grid = dict(GRID, exp=tuple(sorted(set(GRID["exp"]) | {now[3]})))
    pts = points(csvs, grid["exp"])
    if not pts:
        print("fit_splits: no (shape, fmt, M) with two or more splitk_<s> rows in those tables", file=sys.stderr)
        return 2
    misses: list = []
    g, n2, worst, n = score(pts, *now, misses=misses)
    print(f"{n} points from {', '.join(c.name for c in csvs)}")
    print(f"package constants knee={now[0]} gen={now[1] / 1e6:g}MB red={now[2]} exp={now[3]}: "
          f"geomean {g:.4f}, {n2}/{n} within 2%, worst {worst:.3f}"
          + (f"; untimed picks: {misses}" if misses else ""))
    results = []
    for knee, gen, red, exp in itertools.product(*grid.values()):
        results.append((score(pts, knee, gen, red, exp), (knee, gen, red, exp)))
    results.sort(key=lambda r: (-r[0][0], -r[0][1], -r[0][2]))
    print(f"\nbest {args.top} of {len(results)} (knee, generation bytes, reduce cost, M exponent):")
    for (g, n2, worst, _), (knee, gen, red, exp) in results[:args.top]:
        print(f"  knee={knee:<5} gen={gen / 1e6:<4g}MB red={red:<6} exp={exp:<5} geomean {g:.4f}  {n2}/{n} within 2%  worst {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
