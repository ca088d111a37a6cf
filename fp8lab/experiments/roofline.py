"""Notebook 07: rooflines from the spec sheet and from measured ceilings, every
kernel result in data/ placed on them, seed 001's derived floors (B4) and seed
003's issue-slot model (C8).

Placing a result on a roofline (the column convention)
------------------------------------------------------
Any table in ``data/<device>/<notebook>/<table>.csv`` is placed when it has the
columns

* ``arm``    - the kernel arm id (the same id in file, table row and legend),
* ``flop``   - FLOP of one call, counted (2 M N K for a GEMM), > 0,
* ``bytes``  - the fewest device-memory bytes one call must move (each input read
  once, each output written once), > 0,
* ``time_p50_s`` (or ``time_s``) - seconds per call; ``time_p20_s`` and
  ``time_p80_s`` give error bars when present.

Its intensity is flop / bytes and its achieved rate flop / time. Rows with a
non-positive or missing value are skipped (a copy has no FLOP).

Tables written before this convention settled are read with two explicit fallbacks:
``bytes`` from ``min_bytes`` or ``stream_bytes`` (the same quantity under the names the
GEMM sweeps use), and ``flop`` as 2 M N K when a table has ``M``, ``N``, ``K`` and no
``flop`` (every such table in fp8lab is a GEMM). A ``status`` column, when present, must
read ``measured``: failed checks are never placed.
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np
import pandas as pd

from ..report import claims, results
from ..facts import devices, roofline as rl
from .ceilings import ceilings_for_roofline

__all__ = ["PLACE_COLUMNS", "MAX_LEGEND", "PANEL_ROOFS", "arm_panels", "measured_ceilings", "placeable_points", "roofs", "b4_table",
           "b4_verdict", "b4_rederived", "B4_TOL", "C8_TOL", "c8_table", "c8_verdict", "CEILINGS_NOTEBOOK", "CEILINGS_TABLE"]

CEILINGS_NOTEBOOK, CEILINGS_TABLE = "00_environment", "ceilings"
PLACE_COLUMNS = ("arm", "flop", "bytes")
TIME_COLUMNS = ("time_p50_s", "time_s")
BYTE_COLUMNS = ("bytes", "min_bytes", "stream_bytes")


def measured_ceilings(device: str) -> Optional[dict]:
    """p50 ceilings notebook 00 measured on ``device`` (None if it has none), with the
    table's meta under key 'meta'."""
    if device not in results.devices_with(CEILINGS_NOTEBOOK, CEILINGS_TABLE):
        return None
    df = results.load_table(device, CEILINGS_NOTEBOOK, CEILINGS_TABLE)
    out = ceilings_for_roofline(df)
    out["meta"] = df.attrs["meta"]
    return out


def _tables(data_root) -> Iterable[tuple]:
    for csv in sorted(data_root.glob("*/*/*.csv")):
        yield csv.parent.parent.name, csv.parent.name, csv.stem


def placeable_points(device: Optional[str] = None) -> pd.DataFrame:
    """Every row of every table in data/ that follows the column convention above,
    with intensity (FLOP/byte) and achieved FLOP/s; optionally one device only."""
    from ..paths import data_dir

    frames = []
    for dev, nb, name in _tables(data_dir()):
        if device is not None and dev != device:
            continue
        # read the header only, then load through results (provenance check)
        try:
            cols = pd.read_csv(data_dir() / dev / nb / f"{name}.csv", nrows=0).columns
        except Exception:
            continue
        tcol = next((c for c in TIME_COLUMNS if c in cols), None)
        bcol = next((c for c in BYTE_COLUMNS if c in cols), None)
        gemm = {"M", "N", "K"} <= set(cols)
        if "arm" not in cols or tcol is None or bcol is None or not ("flop" in cols or gemm):
            continue
        df = results.load_table(dev, nb, name)
        if "status" in df.columns:
            df = df[df["status"] == "measured"]
        keep = [c for c in ("arm", "flop", bcol, tcol, "time_p20_s", "time_p80_s", "size", "M",
                            "N", "K") if c in df.columns]
        d = df[keep].copy()
        d = d.rename(columns={tcol: "time_s", bcol: "bytes"})
        if "flop" not in d.columns:
            d["flop"] = 2.0 * d["M"] * d["N"] * d["K"]
        for c in ("flop", "bytes", "time_s"):
            d[c] = pd.to_numeric(d[c], errors="coerce")
        d = d[(d["flop"] > 0) & (d["bytes"] > 0) & (d["time_s"] > 0)]
        d = d[np.isfinite(d[["flop", "bytes", "time_s"]]).all(axis=1)]
        if d.empty:
            continue
        d.insert(0, "device", dev)
        d.insert(1, "notebook", nb)
        d.insert(2, "table", name)
        d["intensity"] = d["flop"] / d["bytes"]
        d["achieved_flops"] = d["flop"] / d["time_s"]
        frames.append(d)
    if not frames:
        return pd.DataFrame(columns=["device", "notebook", "table", "arm", "flop", "bytes",
                                     "time_s", "intensity", "achieved_flops"])
    return pd.concat(frames, ignore_index=True)


#: legend entries per roofline panel: more and a reader cannot match points to names
MAX_LEGEND = 8
#: the roofs a panel draws: those bounding its arms (FP8 tensor rates for W8A8; BF16 tensor and
#: FP32 for 16-bit activations, the BF16 GEMM and the peak kernels)
PANEL_ROOFS = {"W8A8": ("fp8", "fp8_blockwise"), "other": ("bf16", "fp32")}


def arm_panels(arms: Iterable[str], max_legend: int = MAX_LEGEND) -> list:
    """Arms split into roofline panels by the registry's weight x activation scheme (FP8
    activations; 16-bit activations with 8- or 4-bit weights; the rest: the BF16 GEMM and the peak
    kernels), at most ``max_legend`` arms per panel (a larger group is cut into several panels).
    Returns (title, roof precisions, arms) per non-empty panel; every arm lands in exactly one."""
    from ..arms import registry

    arms = list(dict.fromkeys(arms))
    groups = [("FP8 activations (W8A8)", PANEL_ROOFS["W8A8"], [a for a in arms if registry.scheme(a) == "W8A8"]),
              ("16-bit activations, 8/4-bit weights", PANEL_ROOFS["other"],
               [a for a in arms if registry.scheme(a) in ("W8A16", "W4A16")])]
    done = {a for _, _, g in groups for a in g}
    groups.append(("BF16 GEMM and peak kernels", PANEL_ROOFS["other"], [a for a in arms if a not in done]))
    out = []
    for title, roofs_of, g in groups:
        parts = [g[k:k + max_legend] for k in range(0, len(g), max_legend)]
        for i, part in enumerate(parts):       # a group cut into panels: each panel says which part
            out.append((f"{title} ({i + 1} of {len(parts)})" if len(parts) > 1 else title, roofs_of, part))
    return [p for p in out if p[2]]


def roofs(spec: Optional[devices.DeviceSpec], measured: Optional[dict] = None) -> pd.DataFrame:
    """One row per (source, precision) roof: peak FLOP/s, bandwidth, ridge point.
    source is 'spec' (datasheet) or 'measured' (notebook 00)."""
    rows = []
    if spec is not None:
        for prec in ("fp32", "bf16", "fp8", "fp4"):
            p = spec.peak_flops(prec)
            if p:
                rows.append({"source": "spec", "precision": prec, "peak_flops": p,
                             "bandwidth_Bps": spec.bandwidth_Bps,
                             "ridge": rl.ridge_point(p, spec.bandwidth_Bps)})
    if measured and measured.get("hbm"):
        for prec in ("fp32", "bf16", "fp8", "fp8_blockwise"):
            p = measured.get(prec)
            if p:
                rows.append({"source": "measured", "precision": prec, "peak_flops": p,
                             "bandwidth_Bps": measured["hbm"],
                             "ridge": rl.ridge_point(p, measured["hbm"])})
    return pd.DataFrame(rows, columns=["source", "precision", "peak_flops", "bandwidth_Bps", "ridge"])


# --------------------------------------------------------------------------------- B4
def b4_table(measured: Optional[dict] = None) -> pd.DataFrame:
    """Seed 001's floors beside ours from the H200 spec row and, if given, from
    ceilings measured on a card (dict with hbm, fp32, bf16, fp8)."""
    meas = None
    if measured and all(measured.get(k) for k in ("hbm", "fp32", "bf16", "fp8")):
        meas = {k: measured[k] for k in ("hbm", "fp32", "bf16", "fp8")}
    return rl.b4_compare(devices.get("h200"), meas)


#: B4 (arithmetic): a printed figure re-derives when our arithmetic lands within this relative
#: distance of it (the seed prints 2-3 significant digits: 0.88 for 0.883 is 0.3%).
B4_TOL = 0.02


def b4_rederived() -> pd.DataFrame:
    """Every number seed 001 derives for B4, recomputed from its own inputs (4.238 G params,
    B = 256, one byte per weight, its rates 67 / 989.5 / 1979 TFLOP/s and 4.8 TB/s, its 524 ms):
    one row per figure with the printed value, ours, and the relative difference."""
    s = rl.SEED001_B4
    flop = 2.0 * s["batch"] * s["params"]
    nbytes = s["params"] * s["bytes_per_param"]
    rows = [("FLOP (TFLOP)", s["flop_printed"] / 1e12, flop / 1e12),
            ("bytes (GB)", s["bytes_printed"] / 1e9, nbytes / 1e9)]
    for b in ("fp32", "bf16", "fp8"):
        rows.append((f"{b.upper()} floor (ms)", s["times_ms_printed"][b], flop / s["rates"][b] * 1e3))
    rows.append(("HBM floor (ms)", s["times_ms_printed"]["hbm"], nbytes / s["rates"]["hbm"] * 1e3))
    rows.append((f"scalar at FP32 floor / {s['scalar_measured_ms']:g} ms (%)", s["scalar_fraction_of_fp32_printed"] * 100,
                 s["times_ms_printed"]["fp32"] / s["scalar_measured_ms"] * 100))
    df = pd.DataFrame(rows, columns=["figure", "printed", "rederived"])
    df["rel_diff"] = df["rederived"] / df["printed"] - 1.0
    df["within_tol"] = df["rel_diff"].abs() <= B4_TOL
    return df


def b4_verdict(table: pd.DataFrame, measured_on: Optional[str] = None,
               rederived: Optional[pd.DataFrame] = None) -> claims.Verdict:
    """B4 (subject arithmetic): every figure the seed derives (FLOP, bytes, four floors, the
    scalar kernel's 6.8%) recomputed from the seed's own inputs, and the seed's rates against our
    H200 spec row (``table``, from :func:`b4_table`): all within B4_TOL holds, else differs with
    the figures that do not follow. Floors at ceilings measured on a card are shown, not judged."""
    rule = (f"holds if the FLOP, bytes and 4 floors the seed derives, recomputed from its own inputs, and its "
            f"4 rates vs our H200 spec row, are within {B4_TOL:.0%}; else differs (the scalar % printed beside "
            f"the FP32 floor is B1's figure: re-derived and shown, not judged here)")
    rd = b4_rederived() if rederived is None else rederived
    t = table.set_index("bound")
    ours = " / ".join(f"{b.upper()} {t.loc[b, 'spec_ms']:.3g}" for b in ("fp32", "bf16", "fp8", "hbm"))
    v = rd.set_index("figure")["rederived"].tolist()
    fig = (f"from the seed's own inputs: {v[0]:.3f} TFLOP, {v[1]:.3f} GB; floors FP32 {v[2]:.3g} / BF16 {v[3]:.3g} / "
           f"FP8 {v[4]:.3g} / HBM {v[5]:.3g} ms; its {rl.SEED001_B4['scalar_measured_ms']:g} ms scalar step is "
           f"{v[6]:.2f}% of the FP32 floor (printed {rd['printed'].iloc[6]:g}%); from our H200 spec row: {ours} ms")
    if t["measured_ms"].notna().all():
        meas = " / ".join(f"{b.upper()} {t.loc[b, 'measured_ms']:.3g}" for b in ("fp32", "bf16", "fp8", "hbm"))
        fig += f"; from ceilings measured on {measured_on or 'this card'}: {meas} ms (shown, not judged)"
    off = [(str(r["figure"]), f"{r['figure']}: printed {r['printed']:g}, its own inputs give {r['rederived']:.3g} "
                              f"({r['rel_diff']:+.1%})")
           for _, r in rd[~rd["within_tol"].astype(bool)].iterrows()]
    bad = [txt for name, txt in off if not name.startswith("scalar")]
    notes = [txt for name, txt in off if name.startswith("scalar")]
    bad += [f"the seed's {b.upper()} rate is {t.loc[b, 'spec_vs_seed']:+.1%} from our H200 spec row"
            for b in ("fp32", "bf16", "fp8", "hbm") if not abs(t.loc[b, "spec_vs_seed"]) <= B4_TOL]
    if bad:
        return claims.Verdict(claim="B4", verdict="differs", our_figure=fig, reason="; ".join(bad + notes),
                              subject="arithmetic", rule=rule)
    return claims.Verdict(claim="B4", verdict="holds", our_figure=fig, reason="; ".join(notes),
                          subject="arithmetic", rule=rule)


# --------------------------------------------------------------------------------- C8
def c8_table() -> pd.DataFrame:
    """The model's predictions for every spec-sheet device (NVFP4 at 3.66 thread
    instructions per element, datasheet bandwidth fully used, boost clock)."""
    return rl.c8_predictions(devices.SPECS.values())


#: C8 (arithmetic): the seed prints whole percents, so a prediction re-derives when ours is
#: within half a point of the printed one.
C8_TOL = 0.005


def c8_verdict(repro: Optional[dict] = None) -> claims.Verdict:
    """C8 (subject arithmetic): the model's arithmetic on the seed's inputs against the seed's
    printed 32% (3090: our range over its 91-94% DRAM use must come within C8_TOL of it) and
    ~22% (5090, within C8_TOL): holds, else differs. The model against ncu is a measurement:
    notebook 08's row, not this one."""
    s = rl.SEED003_C8
    p3, p5 = s["rtx3090_issue_predicted"], s["rtx5090_issue_predicted"]
    rule = (f"holds if the model on the seed's inputs gives a 3090 range reaching {p3:.0%} +- {C8_TOL * 100:.1f} "
            f"points and a 5090 value within {C8_TOL * 100:.1f} points of {p5:.0%}; else differs")
    r = repro or rl.c8_seed_reproduction(devices.get("rtx-3090"), devices.get("rtx-5090"))
    lo, hi = r["rtx3090_low"], r["rtx3090_high"]
    ok3090 = lo < p3 + C8_TOL and hi >= p3 - C8_TOL
    ok5090 = abs(r["rtx5090_spec"] - p5) <= C8_TOL
    fig = (f"model on the seed's inputs: 3090 {lo:.1%}-{hi:.1%} (DRAM 91-94%, 1.69 GHz; printed {p3:.0%}), "
           f"5090 {r['rtx5090_spec']:.1%} (printed ~{p5:.0%})")
    if ok3090 and ok5090:
        return claims.Verdict(claim="C8", verdict="holds", our_figure=fig, subject="arithmetic", rule=rule)
    why = ([f"3090 range {lo:.1%}-{hi:.1%} misses {p3:.0%}"] if not ok3090 else []) + \
          ([f"5090 {r['rtx5090_spec']:.1%} is not {p5:.0%}"] if not ok5090 else [])
    return claims.Verdict(claim="C8", verdict="differs", our_figure=fig, reason="; ".join(why),
                          subject="arithmetic", rule=rule)
