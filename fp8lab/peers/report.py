"""Peers in the notebooks: drawn beside fp8lab's arms in their one style, a status table that
shows every peer (measured, or why not and how to install it), fp8lab's arms against the best
peer of the same run. CPU only. (The ledger's ``seed`` rows from Marlin are the notebooks' own rules
applied to the Marlin rows: experiments.decode and experiments.prefill.)
"""

from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd

from ..arms import peer_catalog, registry

__all__ = ["measured", "draw", "draw_fastest", "without_own_quantiser", "status_table", "versus_best_peer", "COMPARABLE_NOTE", "SEED_SUBJECT",
           "MARLIN", "QUANT_OWN"]

MARLIN = "peer_marlin_int4"
#: the ``quant`` value of a peer row timed with its own activation quantiser in the call (rows of
#: the GEMM alone say "none"); here, not in sweeps, so experiments can name it without importing
#: sweeps (which imports experiments)
QUANT_OWN = "own quantiser"
SEED_SUBJECT = "seed"
#: the figure note wherever peers of other formats are drawn together
COMPARABLE_NOTE = ("dash-dot, open diamonds: other libraries' kernels (peers); each one's bandwidth counts "
                   "its own format's weight + scale bytes")


def measured(df: Optional[pd.DataFrame]) -> pd.DataFrame:
    if df is None or df.empty or "status" not in df:
        return pd.DataFrame(columns=[] if df is None else df.columns)
    return df[df["status"] == "measured"]


def draw(ax, df: Optional[pd.DataFrame], x: str, y: str, *, scale: float = 1.0, lo: Optional[str] = None,
         hi: Optional[str] = None, where: Optional[dict] = None, only: Optional[Sequence[str]] = None,
         suffix: str = "") -> list:
    """Draw every measured peer of ``df`` on ``ax`` (y / scale against x) in the registry's colour
    and the peer style (dash-dot, open diamonds); ``lo`` / ``hi``: p20 / p80 columns for error
    bars; ``only``: these peer ids alone; ``suffix`` ends each label. Returns the peer ids drawn."""
    m = measured(df)
    if m.empty:                        # no peers table (older data, peers=[]) or none measured
        return []
    for k, v in (where or {}).items():
        m = m[m[k] == v]
    if only is not None:
        m = m[m["arm"].isin(list(only))]
    drawn = []
    for arm, d in m.groupby("arm", sort=False):
        d = d.sort_values(x)
        yerr = None
        if lo and hi:
            yerr = [(d[y] - d[lo]) / scale, (d[hi] - d[y]) / scale]
        st = registry.style(arm)
        ax.errorbar(d[x], d[y] / scale, yerr=yerr, ls=st["ls"], marker=st["marker"], mfc=st["mfc"], ms=4,
                    capsize=2, color=registry.color(arm), label=registry.label(arm, with_scheme=True) + suffix)
        drawn.append(arm)
    return drawn


def without_own_quantiser(df: Optional[pd.DataFrame]) -> list:
    """The measured peers with GEMM-alone rows (``quant`` "none") but no row timed with an activation
    quantiser of their own (QUANT_OWN): a figure of with-quantiser lines must draw those GEMM-alone,
    or they would be seen nowhere but as the fastest GEMM (e.g. vLLM's CUTLASS blockwise GEMM, whose
    quantiser is not in the source it is built from)."""
    m = measured(df)
    if m.empty or "quant" not in m:
        return []
    own = set(m.loc[m["quant"] == QUANT_OWN, "arm"])
    return [a for a in dict.fromkeys(m.loc[m["quant"] == "none", "arm"]) if a not in own]


def draw_fastest(ax, df: Optional[pd.DataFrame], x: str, y: str, *, scale: float = 1.0,
                 where: Optional[dict] = None, lower: bool = True, what: str = "GEMM only") -> list:
    """One dotted line, open diamonds, through the fastest measured peer at each ``x`` (the
    smallest ``y`` when ``lower``): what the best other library does there, e.g. the GEMM alone
    beside fp8lab's GEMM-alone line. Drawn in the colour of the peer that is fastest at most
    points; the label names every peer that is fastest somewhere. Returns those peer ids."""
    m = measured(df)
    for k, v in (where or {}).items():
        m = m[m[k] == v] if not m.empty else m
    m = m.dropna(subset=[y]) if not m.empty else m
    if m.empty:
        return []
    best = m.loc[(m.groupby(x)[y].idxmin() if lower else m.groupby(x)[y].idxmax()).values].sort_values(x)
    winners = best["arm"].value_counts()
    ids = list(winners.index)
    st = registry.style(ids[0])
    names = ", ".join(registry.label(a).removesuffix(" (peer)") for a in ids)
    ax.plot(best[x], best[y] / scale, ":", marker=st["marker"], mfc="none", ms=4, color=registry.color(ids[0]),
            label=f"fastest peer, {what}: {names}")
    return ids


def status_table(df: Optional[pd.DataFrame], peers: Sequence[str] = ()) -> pd.DataFrame:
    """One row per peer: measured points out of all, the first reason it did not run (with its
    install line), version, licence, format. ``peers``: ids to list even with no row."""
    rows = []
    ids = list(dict.fromkeys([*(df["arm"] if df is not None and not df.empty else []), *peers]))
    for pid in ids:
        p = peer_catalog.get(pid)
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


def show_status(dev: str, peer_tables: dict, peers: Sequence[str] = (), *, what: str = "kernels") -> bool:
    """In a notebook: device ``dev``'s peers table as :func:`status_table` under a one-line
    header; False (nothing shown) when that device has no peers table."""
    if dev not in peer_tables:
        return False
    from IPython.display import Markdown, display

    display(Markdown(f"**{dev}**: peers (other people's {what}, checked and timed the same way)"))
    display(status_table(peer_tables[dev], peers))
    return True


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
