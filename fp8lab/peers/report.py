"""Peers in the notebooks: drawn beside fp8lab's arms in their one style, a status table that
shows every peer (measured, or why not and how to install it), fp8lab's arms against the best
peer of the same run, and the ledger's ``seed`` rows from Marlin (the seed's subject). CPU only.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pandas as pd

from ..arms import registry
from . import catalog

__all__ = ["measured", "draw", "status_table", "versus_best_peer", "COMPARABLE_NOTE", "marlin_c7",
           "SEED_SUBJECT", "MARLIN"]

MARLIN = "peer_marlin_int4"
SEED_SUBJECT = "seed"
#: the figure note wherever peers of other formats are drawn together
COMPARABLE_NOTE = ("dash-dot, open diamonds: other libraries' kernels (peers); each one's bandwidth counts "
                   "its own format's weight + scale bytes")


def measured(df: Optional[pd.DataFrame]) -> pd.DataFrame:
    if df is None or df.empty or "status" not in df:
        return pd.DataFrame(columns=[] if df is None else df.columns)
    return df[df["status"] == "measured"]


def draw(ax, df: Optional[pd.DataFrame], x: str, y: str, *, scale: float = 1.0, lo: Optional[str] = None,
         hi: Optional[str] = None, where: Optional[dict] = None) -> list:
    """Draw every measured peer of ``df`` on ``ax`` (y / scale against x) in the registry's colour
    and the peer style (dash-dot, open diamonds); ``lo`` / ``hi``: p20 / p80 columns for error
    bars. Returns the peer ids drawn."""
    m = measured(df)
    if m.empty:                        # no peers table (older data, peers=[]) or none measured
        return []
    for k, v in (where or {}).items():
        m = m[m[k] == v]
    drawn = []
    for arm, d in m.groupby("arm", sort=False):
        d = d.sort_values(x)
        yerr = None
        if lo and hi:
            yerr = [(d[y] - d[lo]) / scale, (d[hi] - d[y]) / scale]
        st = registry.style(arm)
        ax.errorbar(d[x], d[y] / scale, yerr=yerr, ls=st["ls"], marker=st["marker"], mfc=st["mfc"], ms=4,
                    capsize=2, color=registry.color(arm), label=registry.label(arm, with_scheme=True))
        drawn.append(arm)
    return drawn


def status_table(df: Optional[pd.DataFrame], peers: Sequence[str] = ()) -> pd.DataFrame:
    """One row per peer: measured points out of all, the first reason it did not run (with its
    install line), version, licence, format. ``peers``: ids to list even with no row."""
    rows = []
    ids = list(dict.fromkeys([*(df["arm"] if df is not None and not df.empty else []), *peers]))
    for pid in ids:
        p = catalog.get(pid)
        d = df[df["arm"] == pid] if df is not None and not df.empty else pd.DataFrame()
        n_ok = int((d["status"] == "measured").sum()) if not d.empty else 0
        other = d[d["status"] != "measured"]["status"] if not d.empty else pd.Series(dtype=str)
        ver = d["version"].dropna().astype(str)
        ver = ver[ver != ""]
        rows.append(dict(peer=pid, library=p.library, measured=f"{n_ok}/{len(d)}",
                         status=other.iloc[0] if len(other) else ("measured" if n_ok else "no rows"),
                         version=ver.iloc[0] if len(ver) else "", licence=p.licence, weight=p.weight,
                         scales=p.scales, act=p.act))
    return pd.DataFrame(rows, columns=["peer", "library", "measured", "status", "version", "licence", "weight",
                                       "scales", "act"])


def versus_best_peer(host: pd.DataFrame, peer_df: Optional[pd.DataFrame], own_arms: Sequence[str], *,
                     keys: Sequence[str] = ("shape", "M"), metric: str = "bw_p50", higher: bool = True) -> pd.DataFrame:
    """fp8lab's best arm against the best peer measured in the same run, per ``keys``: both
    values of ``metric`` and own / best peer (> 1: fp8lab's arm is ahead, whichever way
    ``higher`` says the metric improves). Empty when no peer was measured."""
    m = measured(peer_df)
    own = host[host["arm"].isin(own_arms)]
    if "status" in own:
        own = own[own["status"] == "measured"]
    own = own.dropna(subset=[metric])
    if m.empty or own.empty:
        return pd.DataFrame(columns=[*keys, "own_arm", "own", "best_peer", "peer", "own_over_peer"])
    pick = (lambda g: g.loc[g[metric].idxmax()]) if higher else (lambda g: g.loc[g[metric].idxmin()])
    rows = []
    for k, g in own.groupby(list(keys), sort=True):
        k = k if isinstance(k, tuple) else (k,)
        sel = m
        for c, v in zip(keys, k):
            sel = sel[sel[c] == v]
        sel = sel.dropna(subset=[metric])
        if sel.empty:
            continue
        o, p = pick(g), pick(sel)
        ratio = o[metric] / p[metric] if higher else p[metric] / o[metric]
        rows.append(dict(zip(keys, k), own_arm=o["arm"], own=o[metric], best_peer=p["arm"], peer=p[metric],
                         own_over_peer=ratio))
    return pd.DataFrame(rows, columns=[*keys, "own_arm", "own", "best_peer", "peer", "own_over_peer"])


# ------------------------------------------------------------------------------------------
# the ledger's seed rows: Marlin, the system seed 003 measured
# ------------------------------------------------------------------------------------------
C7_HOLDS, C7_KIND = 0.93, 0.80   # Marlin / cuBLAS BF16 TFLOP/s per GHz at the largest M (notebook 11's bars)


def _v(claim, verdict, fig, rule, reason=""):
    from .. import claims

    return claims.Verdict(claim=claim, verdict=verdict, our_figure=fig, reason=reason, subject=SEED_SUBJECT,
                          rule=rule, variant="original Marlin")


def _marlin_status(df) -> str:
    if df is None or df.empty or MARLIN not in set(df["arm"]):
        return "Marlin was not in this run's peers"
    st = df[df["arm"] == MARLIN]["status"]
    bad = st[st != "measured"]
    return bad.iloc[0] if len(bad) else ""


def marlin_c7(peers_df: Optional[pd.DataFrame], prefill_df: pd.DataFrame):
    """C7 on the seed's own kernel: at the largest M both ran, Marlin's TFLOP/s per GHz (its
    NVML clock) over cuBLAS BF16's from notebook 11's table of the same run."""
    rule = (f"Marlin / cuBLAS BF16 TFLOP/s per GHz at the largest M: holds >= {C7_HOLDS:.2f}, "
            f"holds-in-kind >= {C7_KIND:.2f}, differs below")
    m = measured(peers_df)
    m = m[m["arm"] == MARLIN] if not m.empty else m
    cb = prefill_df[(prefill_df["arm"] == "cublas_bf16") & (~prefill_df["with_quant"].astype(bool))]
    common = sorted(set(m["M"]) & set(cb["M"])) if not m.empty else []
    if not common:
        return _v("C7", "not-run", "no Marlin and cuBLAS BF16 rows at one M", rule,
                  _marlin_status(peers_df) or "no common M")
    M = common[-1]
    r, c = m[m["M"] == M].iloc[0], cb[cb["M"] == M].iloc[0]
    ratio = r["tflops_per_ghz"] / c["tflops_per_ghz"]
    if not math.isfinite(ratio):
        return _v("C7", "not-run", f"M={M}: no SM clock samples", rule, "NVML clocks were not readable")
    fig = (f"M={M}: Marlin INT4 {r['tflops_per_ghz']:.0f} vs cuBLAS BF16 {c['tflops_per_ghz']:.0f} TFLOP/s per GHz "
           f"= {ratio:.0%} ({r['tflops_p50'] / c['tflops_p50']:.0%} unnormalised; clocks {r['sm_mhz_median']:.0f} / "
           f"{c['sm_mhz_median']:.0f} MHz)")
    if ratio >= C7_HOLDS:
        return _v("C7", "holds", fig, rule)
    return _v("C7", "holds-in-kind" if ratio >= C7_KIND else "differs", fig, rule,
              f"Marlin at {ratio:.0%} of cuBLAS BF16 per GHz (seed: 95-97%)")
