"""Cross-device figures: several devices' committed results on one figure.

Every GPU notebook has a ``devices`` parameter (a list of device keys, the folder names
under ``data/``). ``[]`` means every device that holds the notebook's headline table (in
measure mode that includes the device just measured, drawn first). The notebook then calls
:func:`cross_device`, which draws its headline figure(s) once more with one colour and
marker per device, the legend naming each device, and a footnote with one line per device
(its name, the date of the measurement, the fp8lab commit, measured here or redrawn).

Absolute rates differ by hardware, so the cross-device versions plot ratios to each
device's own ceiling measured in the same run (fraction of the copy bandwidth, of the FP32
or BF16 rate, of the streaming floor, of the device's measured roofline) or ratios between
arms on the same device; never one card's TFLOP/s against another's.

A cross-device figure exists only when two or more devices are drawn: with one device the
notebook's own figures say everything, and :func:`cross_device` says so instead of saving.
Figures go to ``figures/cross-device/<notebook>/<name>_devices.{svg,png}``, with a
``<name>_devices.devices.json`` listing the devices drawn (the gallery reads it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..report import plotting, results
from ..arms import registry
from ..facts.shapes import short_name
from ..paths import CROSS_DEVICE, output_figures_dir
from ..report.results import check_name

plt = plotting.plt                  # pyplot with the backend plotting chose (Agg when headless)

# One colour and marker per device key, the same in every cross-device figure (Okabe-Ito;
# keys as fp8lab.facts.devices spells them). Keys not listed take the first unused fallback.
DEVICE_STYLE = {
    "h200": ("#0072B2", "o"), "h100": ("#56B4E9", "s"), "b200": ("#000000", "D"),
    "l4": ("#D55E00", "^"), "l40s": ("#E69F00", "v"), "rtx-4090": ("#CC79A7", "P"),
    "rtx-3090": ("#009E73", "X"), "rtx-5090": ("#999999", "*"), "a100": ("#8C564B", "h"),
}
_FALLBACK = [("#009E73", "X"), ("#CC79A7", "P"), ("#E69F00", "v"), ("#D55E00", "^"),
             ("#56B4E9", "s"), ("#000000", "D"), ("#999999", "*"), ("#8C564B", "h"),
             ("#0072B2", "o")]
SERIES_LS = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3))]

# The table whose presence makes a device eligible, per notebook (the headline figure's
# main table; 07 places results on the rooflines notebook 00 measured).
HEADLINE_TABLE = {
    "00_environment": ("00_environment", "ceilings"),
    "03_per_slice_vs_per_block": ("03_per_slice_vs_per_block", "promotion_sweep"),
    "04_tiles_and_swizzle": ("04_tiles_and_swizzle", "m1_stream"),
    "05_arms_over_m": ("05_arms_over_m", "targets"),
    "06_three_arms": ("06_three_arms", "sweep"),
    "06b_act_quantisers": ("06b_act_quantisers", "quantisers"),
    "07_roofline": ("00_environment", "ceilings"),
    "08_decode_bandwidth": ("08_decode_bandwidth", "decode"),
    "10_clock_sweep": ("10_clock_sweep", "sweep"),
    "11_prefill": ("11_prefill", "prefill"),
}


# ------------------------------------------------------------------ devices and styles
def resolve_devices(notebook: str, table: str, devices=(), run: Optional[results.Run] = None) -> list[str]:
    """The device keys to overlay. ``devices`` empty: every device in data/ with this
    notebook's ``table`` (the run's own device first in measure mode); otherwise exactly the
    keys given, each of which must hold the table."""
    if devices is None:
        devices = []
    if isinstance(devices, str) or not isinstance(devices, (list, tuple)):
        raise ValueError(f"devices must be a list of device keys such as ['h200', 'l4'], got {devices!r}")
    bad = [d for d in devices if not isinstance(d, str)]
    if bad:
        raise ValueError(f"devices must be device keys (strings), got {bad!r}")
    have = results.devices_with(notebook, table)
    if not devices:
        out = list(have)
        if run is not None and run.mode == "measure" and run.device in out:
            out.remove(run.device)
            out.insert(0, run.device)
        return out
    mine = run.device if run is not None and run.mode == "measure" else None
    unknown = [d for d in devices if d not in have and d != mine]
    if unknown:
        raise ValueError(f"unknown device key(s) {unknown} in devices: the known keys with "
                         f"{notebook}'s table {table!r} are {have or 'none'} (data/ holds "
                         f"{results.known_devices() or 'no devices'})")
    return list(dict.fromkeys(devices))


def check_devices(notebook: str, devices=(), run: Optional[results.Run] = None) -> list[str]:
    """Validate a notebook's ``devices`` parameter before anything is measured: each key must
    hold the notebook's headline table, or be the device this run measures. Returns the keys."""
    if notebook not in HEADLINE_TABLE:
        raise ValueError(f"no cross-device figures for notebook {notebook!r}; known: {sorted(HEADLINE_TABLE)}")
    nb, table = HEADLINE_TABLE[notebook]
    measuring = run.device if run is not None and run.mode == "measure" else None
    rest = [d for d in (devices or []) if d != measuring] if isinstance(devices, (list, tuple)) else devices
    resolve_devices(nb, table, rest, None)
    return list(devices or [])


def styles(devs) -> dict[str, dict]:
    """device -> dict(color=, marker=), distinct within ``devs``."""
    out, used = {}, set()
    for d in devs:
        if d in DEVICE_STYLE and DEVICE_STYLE[d] not in used:
            out[d] = DEVICE_STYLE[d]
            used.add(DEVICE_STYLE[d])
    for d in devs:
        if d not in out:
            st = next((s for s in _FALLBACK if s not in used), _FALLBACK[len(out) % len(_FALLBACK)])
            out[d] = st
            used.add(st)
    return {d: dict(color=out[d][0], marker=out[d][1]) for d in devs}


def label(dev: str, meta: dict) -> str:
    name = meta.get("device_name", dev)
    return name if name == dev else f"{name} ({dev})"


def provenance_line(dev: str, meta: dict, run: Optional[results.Run] = None) -> str:
    info = results.FigureInfo.from_meta(meta, redrawn=True)
    commit = f", fp8lab {info.commit[:8]}" if info.commit else ""
    if run is not None and run.mode == "measure" and dev == run.device:
        how = "measured in this run"
    elif info.mode == "computed":
        how = "computed"
    else:
        how = f"redrawn from data/{dev}"
    return f"{label(dev, meta)}: measured {info.date}{commit}, {how}"


def commits(metas: dict) -> dict[str, str]:
    """device -> the fp8lab commit its table was measured at (devices without one left out)."""
    out = {}
    for d, m in metas.items():
        c = (m.get("git") or {}).get("commit")
        if c:
            out[d] = str(c)
    return out


def mixed_commits(metas: dict) -> Optional[str]:
    """A warning when the devices drawn were measured at different fp8lab commits (their
    kernels may differ, so a gap between devices need not be the hardware's); None when
    every recorded commit is the same."""
    cs = commits(metas)
    if len(set(cs.values())) < 2:
        return None
    each = ", ".join(f"{d} {c[:8]}" for d, c in cs.items())
    return (f"measured at different fp8lab commits ({each}): the kernels may differ, "
            "so a gap between devices is not only the hardware's")


def footnote(notebook: str, metas: dict, run: Optional[results.Run] = None,
             extra: Optional[str] = None) -> str:
    lines = [provenance_line(d, m, run) for d, m in metas.items()]
    warn = mixed_commits(metas)
    if warn:
        lines.append("NB: " + warn)
    tail = f"{len(metas)} devices · notebook {notebook}" + (f" · {extra}" if extra else "")
    return "\n".join(lines + [tail])


def figure_folder(notebook: str, redrawn: bool = False) -> Path:
    """figures/cross-device/<notebook>/ when this run measured one of the devices drawn; a
    figure made only of committed data goes where redraws go (``paths.output_figures_dir``)."""
    return output_figures_dir(redrawn) / CROSS_DEVICE / notebook


def save(fig, notebook: str, name: str, metas: dict, run: Optional[results.Run] = None,
         extra: Optional[str] = None) -> list[Path]:
    """Save a cross-device figure with its per-device footnote and a devices sidecar."""
    check_name("notebook", notebook)
    check_name("figure name", name)
    if len(metas) < 2:
        raise ValueError(f"a cross-device figure needs two or more devices, got {list(metas)}: "
                         "with one device the notebook's own figure is the figure")
    measured_here = run is not None and run.writes and run.device in metas
    folder = figure_folder(notebook, redrawn=not measured_here)
    paths = plotting.save_in(fig, folder, name, footnote(notebook, metas, run, extra))
    side = {"notebook": notebook, "figure": name, "devices": [
        {"device": d, "device_name": m.get("device_name", d), "date": str(m.get("time", ""))[:10],
         "commit": (m.get("git") or {}).get("commit")} for d, m in metas.items()],
        "same_commit": mixed_commits(metas) is None}
    results.atomic_write_bytes(folder / f"{name}.devices.json",
                               (json.dumps(side, indent=2, sort_keys=True) + "\n").encode())
    return paths


def _handles(devs, metas, st):
    from matplotlib.lines import Line2D
    return [Line2D([], [], color=st[d]["color"], marker=st[d]["marker"], ls="-", label=label(d, metas[d]))
            for d in devs]


def _series_handles(series: dict):
    from matplotlib.lines import Line2D
    return [Line2D([], [], color="#555555", ls=ls, label=s) for s, ls in series.items()]


def _bar_handles(devs, metas, st):
    from matplotlib.patches import Patch
    return [Patch(color=st[d]["color"], label=label(d, metas[d])) for d in devs]


def _fig_legends(fig, device_handles, series_handles=None, series_title=None):
    """Devices (and series) in legends below everything drawn (rotated tick labels too), so
    no data hides under them."""
    w, h = fig.get_size_inches()
    for handles, title in ((device_handles, "device"), (series_handles, series_title)):
        if not handles:
            continue
        # stacked, each under what is already there (a side-by-side pair collides on narrow figures)
        box = fig.get_tightbbox(fig.canvas.get_renderer())       # inches
        fig.legend(handles=handles, title=title, loc="upper left", bbox_to_anchor=(max(box.x0 / w, 0), box.y0 / h - 0.01),
                   ncol=min(len(handles), 4), fontsize=8, title_fontsize=8, alignment="left")


def _plain_log(ax, axis="y", suffix=""):
    """Log axis with plain tick numbers (0.3, 1, 3) instead of 3 x 10^-1."""
    from matplotlib.ticker import FuncFormatter
    fmt = FuncFormatter(lambda v, _: f"{v:g}{suffix}")
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_formatter(fmt)
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()

    def minor(v, _):
        # only 2x and 5x between the decades, and only on axes spanning under two decades
        lead = round(v / 10 ** np.floor(np.log10(v)), 6) if v > 0 else 0
        return f"{v:g}{suffix}" if hi / max(lo, 1e-30) < 100 and lead in (2, 5) else ""
    a.set_minor_formatter(FuncFormatter(minor))


def _wrap(text: str, width: int = 14) -> str:
    """Break a long tick label at spaces or after underscores so neighbours do not collide."""
    import re as _re
    out = []
    for part in text.split("\n"):
        line = ""
        for tok in _re.findall(r"[^ _]+_?|\s+", part):
            if line and len((line + tok).strip()) > width:
                out.append(line.strip())
                line = tok.lstrip()
            else:
                line += tok
        out.append(line.strip())
    return "\n".join(x for x in out if x)


def _grouped_bars(ax, cats, devs, st, value_of, *, fmt="{:.0%}", width=0.8):
    """One group per category, one bar per device; value_of(dev, cat) -> float or nan."""
    w = width / len(devs)
    x = np.arange(len(cats))
    for i, d in enumerate(devs):
        vals = np.array([value_of(d, c) for c in cats], float)
        xs = x + (i - (len(devs) - 1) / 2) * w
        ax.bar(xs, vals, w, color=st[d]["color"], edgecolor="white", lw=0.5)
        for xi, v in zip(xs, vals):
            if np.isfinite(v):
                ax.text(xi, v, fmt.format(v), ha="center", va="bottom", fontsize=6, rotation=90 if len(devs) > 2 else 0)
    return x


def _meta(df) -> dict:
    return df.attrs["meta"]


def _tables(nb, table, devs) -> tuple[dict, dict, dict]:
    """(tables by device, their provenance by device, each device's style) of one notebook's table."""
    tabs = _load(nb, table, devs)
    return tabs, {d: _meta(t) for d, t in tabs.items()}, styles(devs)


def _load(nb, table, devs) -> dict:
    return {d: results.load_table(d, nb, table) for d in devs}


# ------------------------------------------------------------------------- drawers
# Each drawer takes the device keys and returns (fig, metas of the devices drawn, notes);
# a device that lacks an auxiliary table (a ceiling, a copy) is left out with a note.

def draw_ceilings(devs):
    from . import ceilings as ce
    tabs, metas, st = _tables("00_environment", "ceilings", devs)
    cats = [c for c in ce.CEILINGS if any(((t["ceiling"] == c) & (t["status"] == "measured")).any()
                                             for t in tabs.values())]
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(cats) * max(2, len(devs)) / 2 + 1.2))
    h = 0.8 / len(devs)
    for i, d in enumerate(devs):
        t = tabs[d].set_index("ceiling")
        for j, c in enumerate(cats):
            y = len(cats) - 1 - j + ((len(devs) - 1) / 2 - i) * h
            if c not in t.index or t.loc[c, "status"] != "measured" or not (t.loc[c, "spec"] > 0):
                ax.text(0.01, y, "not measured", fontsize=6, va="center", color="#777777")
                continue
            r = t.loc[c]
            f20, f50, f80 = r["rate_p20"] / r["spec"], r["rate_p50"] / r["spec"], r["rate_p80"] / r["spec"]
            ax.barh(y, f50, h, color=st[d]["color"])
            ax.errorbar(f50, y, xerr=[[f50 - f20], [f80 - f50]], color="black", capsize=2, lw=0.8)
            ax.text(f80 + 0.01, y, f"{f50:.0%}", va="center", fontsize=7)
    ax.set_yticks(np.arange(len(cats)), [registry.label(c) for c in reversed(cats)])
    ax.axvline(1.0, color="#555555", lw=0.8, ls="--")
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("measured p50 / that device's datasheet peak (error bar: p20-p80)")
    ax.set_title("Measured ceilings against each device's own spec sheet")
    _fig_legends(fig, _bar_handles(devs, metas, st))
    return fig, metas, []


def draw_promotion_ratio(devs):
    from . import blockwise as bw
    tabs, metas, st = _tables("03_per_slice_vs_per_block", "promotion_sweep", devs)
    prs = {d: bw.promotion_ratios(t) for d, t in tabs.items()}
    shapes = list(dict.fromkeys(s for p in prs.values() for s in p["shape"]))
    fig, axes = plt.subplots(2, len(shapes), figsize=(4.0 * len(shapes), 6.4), squeeze=False, sharex=True)
    rows = [("same_tile", "same tile: per_slice / per_block"),
            ("seed_to_best", "seed kernel / best per-block kernel")]
    for j, shape in enumerate(shapes):
        for i, (col, what) in enumerate(rows):
            ax = axes[i, j]
            for d in devs:
                g = prs[d][prs[d]["shape"] == shape].sort_values("M")
                if len(g):
                    ax.plot(g["M"], g[col], color=st[d]["color"], marker=st[d]["marker"], ms=5)
            ax.axhline(1.0, color="#999999", lw=0.8)
            if col == "seed_to_best":
                ax.axhline(bw.SEED_A3_FIX, color="#555555", ls="--", lw=0.9)
                ax.text(0.02, bw.SEED_A3_FIX, f"seed, L4: {bw.SEED_A3_FIX:.1f}x", fontsize=7, va="bottom",
                        transform=ax.get_yaxis_transform())
            ax.set_xscale("log", base=2)
            ax.set_title(f"{short_name(shape)}: {what}", fontsize=9)
            if j == 0:
                ax.set_ylabel("time ratio (x, > 1: per-block faster)")
            if i == 1:
                ax.set_xlabel("M (tokens)")
    fig.suptitle("A3: per-block promotion against per-slice, each device against itself", fontsize=10)
    fig.tight_layout()
    _fig_legends(fig, _handles(devs, metas, st))
    return fig, metas, []


def draw_m1_stream(devs):
    from . import blockwise as bw
    from ..kernels import mma_blockwise as mb
    have_copy = set(results.devices_with("04_tiles_and_swizzle", "copy"))
    notes = [f"{d}: no copy table (no streaming floor), left out" for d in devs if d not in have_copy]
    devs = [d for d in devs if d in have_copy]
    tabs, metas, st = _tables("04_tiles_and_swizzle", "m1_stream", devs)
    frac, shape, qtxt = {}, None, {}
    for d, t in tabs.items():
        copy = float(results.load_table(d, "04_tiles_and_swizzle", "copy")["copy_Bps_p50"].iloc[0])
        m = bw.measured(t)
        if m.empty:
            continue
        # W8A8 arms with their activation quantiser where the table has those timings (as the
        # seed timed them; notebook 04's own figure does the same and says which)
        w8 = m["arm"].isin(bw.W8A8)
        with_q = bool((m.loc[w8, "quant"] != "none").any())
        m = m[~w8 | ((m["quant"] != "none") if with_q else (m["quant"] == "none"))]
        qtxt[d] = with_q
        r0 = m.iloc[0]
        shape = r0["shape"]
        floor = bw.weight_bytes("mma_blockwise", int(r0["N"]), int(r0["K"])) / copy
        f = {}
        seed = m[(m["arm"] == "mma_blockwise") & (m["variant"] == "per_slice") & (m["config"] == mb.SEED_CONFIG.name)]
        if len(seed):
            f["mma_blockwise\nper_slice, seed tile"] = floor / seed["time_p50_s"].min()
        for arm, g in bw.best_rows(m).groupby("arm"):
            f[registry.label(arm).replace(" (", "\n(")] = floor / g["time_p50_s"].min()
        frac[d] = f
    cats = list(dict.fromkeys(c for f in frac.values() for c in f))
    fig, ax = plt.subplots(figsize=(max(7.5, 1.1 * len(cats) * max(1, len(devs) / 2)), 4.0))
    x = _grouped_bars(ax, cats, devs, st, lambda d, c: frac.get(d, {}).get(c, np.nan))
    ax.axhline(1.0, color="#555555", ls="--", lw=0.9)
    ax.set_xticks(x, [_wrap(c) for c in cats], fontsize=7)
    ax.set_ylabel("streaming floor / time\n(fraction of that device's copy bandwidth)")
    ax.set_ylim(0, 1.25)
    q = set(qtxt.values())
    ax.set_title(f"A8: {short_name(shape) if shape else ''} at M = 1, each device against its own copy bandwidth\n"
                 + ("W8A8 arms include quantising the activations" if q == {True} else
                    "W8A8 arms: pre-quantised activations" if q == {False} else
                    "W8A8 arms: with the quantiser on " + ", ".join(d for d, v in qtxt.items() if v)
                    + ", pre-quantised elsewhere"), fontsize=10)
    _fig_legends(fig, _bar_handles(devs, metas, st))
    return fig, metas, notes


def draw_targets(devs):
    tabs, metas, st = _tables("05_arms_over_m", "targets", devs)
    kinds = [k for k in ("speedup vs cuBLASLt", "weight bandwidth / copy")
             if any((t["target"] == k).any() for t in tabs.values())]
    cats = {k: list(dict.fromkeys((r.shape, int(r.M)) for t in tabs.values()
                                  for r in t[t["target"] == k].itertuples())) for k in kinds}
    width = [max(4.5, 0.7 * len(cats[k]) * max(1, len(devs) / 2)) for k in kinds]
    fig, axes = plt.subplots(1, len(kinds), figsize=(sum(width) + 1, 4.2), squeeze=False,
                             gridspec_kw=dict(width_ratios=width))
    for ax, kind in zip(axes[0], kinds):
        val = {d: {(r.shape, int(r.M)): r.value for r in t[t["target"] == kind].itertuples()} for d, t in tabs.items()}
        x = _grouped_bars(ax, cats[kind], devs, st, lambda d, c: val[d].get(c, np.nan), fmt="{:.2f}")
        goal = next(float(t.loc[t["target"] == kind, "goal"].iloc[0]) for t in tabs.values() if (t["target"] == kind).any())
        ax.axhline(goal, color="#555555", ls="--", lw=1)
        ax.text(-0.45, goal * 1.02, f"target {goal:.2f}", fontsize=8)
        if kind.startswith("speedup"):
            ax.axhline(1.0, color="#999999", lw=0.8)
        ax.set_xticks(x, [f"{short_name(s)}\nM={m}" for s, m in cats[kind]], fontsize=7, rotation=30)
        top = max([goal] + [v for d in val for v in val[d].values() if np.isfinite(v)])
        ax.set_ylim(0, top * 1.3)
        ax.set_ylabel("cuBLASLt time / best fp8lab time (same device)" if kind.startswith("speedup") else
                      "weight bytes per s / that device's copy bandwidth")
        ax.set_title(f"best fp8lab arm: {kind}")
    _fig_legends(fig, _bar_handles(devs, metas, st))
    return fig, metas, []


def draw_fractions(devs):
    from . import three_arms as ta
    tabs = _load("06_three_arms", "sweep", devs)
    have_ceil = set(results.devices_with("06_three_arms", "ceilings"))
    notes = [f"{d}: no ceilings table, left out" for d in devs if d not in have_ceil]
    devs = [d for d in devs if d in have_ceil]
    tabs = {d: tabs[d] for d in devs}
    metas = {d: _meta(t) for d, t in tabs.items()}
    st = styles(devs)
    sites = list(dict.fromkeys(s for t in tabs.values() for s in t["site"]))
    series = {s: SERIES_LS[i % len(SERIES_LS)] for i, s in enumerate(sites)}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.0))
    for d, t in tabs.items():
        ceil = results.load_table(d, "06_three_arms", "ceilings")
        fp32, bf16 = ta.ceiling_rate(ceil, "fp32_fma"), ta.ceiling_rate(ceil, "bf16_tensor")
        for site in sites:
            for ax, arm, c in ((a1, "scalar_tiled", fp32), (a2, "wmma_w8a16", bf16)):
                s = ta.gemm_rows(t, arm, site)
                if c and len(s):
                    ax.plot(s["M"], s["tflops_p50"] * 1e12 / c, ls=series[site], color=st[d]["color"],
                            marker=st[d]["marker"], ms=4)
            if not fp32:
                notes.append(f"{d}: no FP32 ceiling measured")
            if not bf16:
                notes.append(f"{d}: no BF16 ceiling measured")
    ta.mark_seed_fractions(a1, a2, "fraction of the ceiling measured in the same run")  # grey: device colours are taken
    a1.set_title("B1: scalar_tiled / that device's FP32 FMA rate")
    a2.set_title("B3: wmma_w8a16 / that device's cuBLAS BF16 rate")
    fig.tight_layout()
    _fig_legends(fig, _handles(devs, metas, st), _series_handles(series), "site")
    return fig, metas, list(dict.fromkeys(notes))


def draw_quantisers(devs, K: int = 7168):
    tabs = _load("06b_act_quantisers", "quantisers", devs)
    notes = [f"{d}: no K={K} rows, left out" for d, t in tabs.items() if not (t["K"] == K).any()]
    devs = [d for d in devs if (tabs[d]["K"] == K).any()]
    metas = {d: _meta(tabs[d]) for d in devs}
    st = styles(devs)
    arms = [a for a in ("quant_act_naive", "quant_act_warp", "quant_act_16t", "quant_act_warp_ilp")
            if any((tabs[d]["arm"] == a).any() for d in devs)]
    series = {a: SERIES_LS[i] for i, a in enumerate(arms)}
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for d in devs:
        t = tabs[d]
        t = t[(t["K"] == K) & (t["status"] == "measured")]
        for arm in arms:
            g = t[t["arm"] == arm].sort_values("M")
            if len(g):
                ax.plot(g["M"], g["fraction_of_copy"], ls=series[arm], color=st[d]["color"],
                        marker=st[d]["marker"], ms=4)
    from . import quantisers as qx
    for (lo, hi), goal in qx.TARGET_BANDS:       # each target over its own M range
        ax.plot([lo, hi], [goal, goal], color="#555555", ls="--", lw=0.9)
        ax.text(lo, goal, f"target {goal:.0%} (M {lo}..{hi})", fontsize=7, va="bottom")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("bandwidth / same-traffic copy\non the same device")
    ax.set_title(f"1x128 activation quantisers, K={K}: fraction of each device's copy rate")
    _fig_legends(fig, _handles(devs, metas, st), _series_handles(series), "kernel")
    return fig, metas, notes


def draw_decode_m1(devs):
    from . import decode as dx
    tabs = _load("08_decode_bandwidth", "decode", devs)
    metas = {d: _meta(t) for d, t in tabs.items()}
    tabs = {d: dx.best_schedule(t) for d, t in tabs.items()}   # one row per (shape, arm, M)
    st = styles(devs)
    shapes = list(dict.fromkeys(s for t in tabs.values() for s in t.loc[t["M"] == 1, "shape"]))
    arms = [a for a in dx.ARMS if any((t["arm"] == a).any() for t in tabs.values())]
    fig, axes = plt.subplots(1, len(shapes), figsize=(max(5.0, 0.9 * len(arms) * max(1, len(devs) / 2)) * len(shapes),
                                                      4.0), squeeze=False, sharey=True)
    for ax, sn in zip(axes[0], shapes):
        v = {d: t[(t["M"] == 1) & (t["shape"] == sn)].set_index("arm")["fraction_of_copy"] for d, t in tabs.items()}
        x = _grouped_bars(ax, arms, devs, st, lambda d, a: float(v[d].get(a, np.nan)))
        ax.axhline(dx.TARGET_BIG_FRACTION, color="#555555", ls=":", lw=1)
        ax.set_xticks(x, [registry.short_label(a).replace(" ", "\n", 1) for a in arms], fontsize=8)
        ax.set_ylim(0, 1.25)
        ax.set_title(f"{sn}, M = 1", fontsize=9)
    axes[0][0].set_ylabel("effective bandwidth /\nthat device's copy bandwidth")
    fig.suptitle("C4: weight-only decode at M = 1, each device against its own copy rate "
                 f"(dotted: {dx.TARGET_BIG_FRACTION:.0%}, the 8-bit target on >= 100 MB)", fontsize=10)
    fig.tight_layout()
    _fig_legends(fig, _bar_handles(devs, metas, st))
    return fig, metas, []


def draw_headroom(devs):
    from . import headroom as hr
    tabs, metas, st = _tables("10_clock_sweep", "sweep", devs)
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for d, t in tabs.items():
        sw = t[(t["arm"] == hr.ARM) & (t["lock_status"] == "not requested")]
        if "repeat" in sw.columns:      # the k = 0 repeat after the sweep measures noise, not a level
            sw = sw[sw["repeat"].fillna(0) == 0]
        sw = sw.sort_values("extra_alu")
        base = float(sw.loc[sw["extra_alu"] == 0, "bw_p50"].iloc[0])
        ax.plot(sw["extra_alu"], sw["bw_p50"] / base, color=st[d]["color"], marker=st[d]["marker"])
    ax.axhspan(1 - hr.KNEE_DROP, 1 + hr.KNEE_DROP, color="#dddddd", alpha=0.5, lw=0)
    ax.axhline(1.0, color="#999999", lw=0.8)
    ax.set_xlabel("k: extra dependent integer instructions per weight element")
    ax.set_ylabel("M=1 bandwidth / bandwidth at k = 0\n(same device)")
    ax.set_title(f"C6: compute headroom of FP8 decode (grey: within {hr.KNEE_DROP:.0%})")
    _fig_legends(fig, _handles(devs, metas, st))
    return fig, metas, []


def draw_prefill(devs):
    from . import prefill as px
    tabs, metas, st = _tables("11_prefill", "prefill", devs)
    arms = [a for a in px.ARMS if a != "cublas_bf16" and any((t["arm"] == a).any() for t in tabs.values())]
    series = {a: SERIES_LS[i % len(SERIES_LS)] for i, a in enumerate(arms)}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw=dict(wspace=0.3))
    top_m = {}
    for d, t in tabs.items():
        t = t[~t["with_quant"].astype(bool)]
        cb = t[t["arm"] == "cublas_bf16"].set_index("M")["time_p50_s"]
        for arm in arms:
            g = t[t["arm"] == arm].set_index("M")["time_p50_s"]
            r = (cb / g).dropna().sort_index()
            if len(r):
                a1.plot(r.index, r.values, ls=series[arm], color=st[d]["color"], marker=st[d]["marker"], ms=4)
        top_m[d] = int(t["M"].max())
    a1.axhline(1.0, color="#999999", lw=0.8)
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    _plain_log(a1, suffix="x")
    a1.set_xlabel("M (tokens)")
    a1.set_ylabel("cuBLAS BF16 time / arm time (same device)")
    a1.set_title("speed against cuBLAS BF16 (> 1: faster)")
    cats = ["cublas_bf16"] + arms

    def per_ghz(d, a):
        t = tabs[d]
        r = t[(t["M"] == top_m[d]) & (t["arm"] == a) & ~t["with_quant"].astype(bool)]
        return float(r["tflops_per_ghz"].iloc[0] / r["spec_tflops_per_ghz"].iloc[0]) if len(r) else np.nan
    x = _grouped_bars(a2, cats, devs, st, per_ghz)
    a2.axhline(1.0, color="#555555", ls="--", lw=0.9)
    a2.set_xticks(x, [a.replace("_", "\n", 1) for a in cats], fontsize=7)
    a2.set_ylabel("TFLOP/s per GHz / that device's\nspec BF16 TFLOP/s per GHz")
    ms = sorted(set(top_m.values()))
    a2.set_title(f"C7: at the same clock, M = {', '.join(map(str, ms))}")
    _fig_legends(fig, _handles(devs, metas, st), _series_handles(series), "arm (left panel)")
    return fig, metas, []


def draw_roofline(devs):
    from . import roofline as ex
    st = styles(devs)
    metas, notes, pts = {}, [], {}
    for d in devs:
        m = ex.measured_ceilings(d)
        peaks = [m.get(p) for p in ("fp32", "bf16", "fp8", "fp8_blockwise")] if m else []
        peaks = [p for p in peaks if p]
        if not m or not m.get("hbm") or not peaks:
            notes.append(f"{d}: no measured bandwidth and compute ceilings, left out")
            continue
        p = ex.placeable_points(d)
        if p.empty:
            notes.append(f"{d}: no placeable results, left out")
            continue
        roof = np.minimum(max(peaks), p["intensity"] * m["hbm"])
        pts[d] = p.assign(fraction=p["achieved_flops"] / roof)
        metas[d] = m["meta"]
    devs = list(metas)
    st = styles(devs)
    fig, ax = plt.subplots(figsize=(8, 4.4))
    for d in devs:
        p = pts[d]
        ax.scatter(p["intensity"], p["fraction"], s=14, alpha=0.6, color=st[d]["color"], marker=st[d]["marker"],
                   lw=0)
    ax.axhline(1.0, color="#555555", ls="--", lw=0.9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved / that device's measured roof\n(min(highest measured peak, I x copy bandwidth))")
    ax.set_title("Every result in data/ against its own device's measured roofline")
    _fig_legends(fig, _handles(devs, metas, st))
    return fig, metas, notes


DRAWERS: dict[str, list[tuple[str, Callable]]] = {
    "00_environment": [("ceilings_devices", draw_ceilings)],
    "03_per_slice_vs_per_block": [("promotion_ratio_devices", draw_promotion_ratio)],
    "04_tiles_and_swizzle": [("m1_stream_devices", draw_m1_stream)],
    "05_arms_over_m": [("targets_devices", draw_targets)],
    "06_three_arms": [("fractions_devices", draw_fractions)],
    "06b_act_quantisers": [("bandwidth_k7168_devices", draw_quantisers)],
    "07_roofline": [("roofline_devices", draw_roofline)],
    "08_decode_bandwidth": [("decode_m1_parity_devices", draw_decode_m1)],
    "10_clock_sweep": [("headroom_devices", draw_headroom)],
    "11_prefill": [("prefill_tflops_devices", draw_prefill)],
}


# --------------------------------------------------------------------------- driver
@dataclasses.dataclass
class Overlay:
    notebook: str
    name: str
    devices: list
    fig: object = None            # None: not drawn (fewer than two devices)
    paths: list = dataclasses.field(default_factory=list)
    message: str = ""

    def show(self) -> None:
        """Display the figure once in a notebook and close it (no second inline copy)."""
        if self.fig is None:
            return
        try:
            from IPython.display import display
            display(self.fig)
        finally:
            plt.close(self.fig)


def cross_device(notebook: str, devices=(), run: Optional[results.Run] = None) -> list[Overlay]:
    """Draw and save the notebook's cross-device figure(s) for ``devices`` (see
    :func:`resolve_devices`); with fewer than two devices nothing is saved and each
    Overlay's message says why."""
    if notebook not in DRAWERS:
        raise ValueError(f"no cross-device figures for notebook {notebook!r}; known: {sorted(DRAWERS)}")
    nb, table = HEADLINE_TABLE[notebook]
    devs = resolve_devices(nb, table, devices, run)
    out = []
    for name, drawer in DRAWERS[notebook]:
        if len(devs) < 2:
            out.append(Overlay(notebook, name, devs, message=_one_device(notebook, name, nb, table, devs, bool(devices))))
            continue
        fig, metas, notes = drawer(devs)
        drawn = list(metas)
        note = (" " + "; ".join(notes) + ".") if notes else ""
        if len(drawn) < 2:
            plt.close(fig)
            out.append(Overlay(notebook, name, drawn, message=_one_device(notebook, name, nb, table, drawn, bool(devices)) + note))
            continue
        paths = save(fig, notebook, name, metas, run)
        names = ", ".join(label(d, metas[d]) for d in drawn)
        out.append(Overlay(notebook, name, drawn, fig, paths,
                           message=f"**Across devices** (`{name}`): {names}; saved to "
                                   f"`{CROSS_DEVICE}/{notebook}/{name}.png`.{note}"
                                   + (f" **Note:** {mixed_commits(metas)}." if mixed_commits(metas) else "")))
    return out


def show_cross_device(notebook: str, devices=(), run: Optional[results.Run] = None) -> None:
    """A notebook's "Across devices" cell: :func:`cross_device`, each figure shown under its
    message (or the message alone, saying why there is no figure)."""
    from IPython.display import Markdown, display

    for xd in cross_device(notebook, devices, run):
        display(Markdown(xd.message))
        xd.show()


def _one_device(notebook, name, nb, table, devs, chosen=False) -> str:
    if chosen:
        why = f"`devices` names {len(devs)} device(s) ({', '.join(devs) or 'none'})"
    elif devs:
        why = f"only {devs[0]} has {nb}'s `{table}` table in data/"
    else:
        why = f"no device has {nb}'s `{table}` table in data/ yet"
    return (f"*Cross-device figure `{name}` not drawn: {why}. With one device the figures above are the "
            "whole story; measure another GPU into data/ (or name two or more in `devices`) to overlay them.*")
