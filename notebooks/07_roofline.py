# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Rooflines, derived floors and the issue-slot model
#
# A kernel's time has two floors: its FLOP over the rate of the unit that does them, and its
# bytes over memory bandwidth. The roofline draws both against arithmetic intensity
# (FLOP per byte). This notebook draws one per spec-sheet device, redraws it with the ceilings
# notebook 00 measured, places every kernel result in `data/` on it, and checks two claims that
# are arithmetic on datasheet numbers:
#
# - **B4** (seed 001): the B=256 decode step of its model (2.170 TFLOP over 4.238 GB of FP8
#   weights) has floors, at H200 datasheet rates, of FP32 32.4 ms, BF16 tensor 2.19 ms, FP8
#   tensor 1.10 ms and HBM 0.88 ms, and its scalar kernel (524 ms in its own engine) at 6.8% of
#   the FP32 bound. Row subject `arithmetic`: every figure recomputed from the seed's own inputs,
#   and its rates against our H200 spec row; it holds if all land within 2%. Floors at the
#   ceilings we measured are shown beside them, not judged (notebook 06 measures the step).
# - **C8** (seed 003): issue-slot use = instructions per element x elements per second /
#   (SMs x 4 schedulers x clock) predicts ncu's figure (32% predicted vs 32.5% measured on a
#   3090; ~22% on a 5090). Row subject `arithmetic`: the predictions recomputed from the seed's
#   inputs (within half a point). The model against ncu on fp8lab's kernels is notebook 08's row.
#
# Everything here is arithmetic on the spec sheet and on tables in `data/`, so it runs the same
# with or without a GPU.

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
b4_device = "h200"  # whose measured ceilings go beside seed 001's H200 floors
devices = []  # device keys (data/ folders, e.g. ["h200", "l4"]) to overlay; []: every device with data

# %%
import dataclasses
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fp8lab.report import claims, plotting, provenance, results
from fp8lab.experiments import notebook, overlay
from fp8lab.facts import devices as spec_sheet  # the name 'devices' is the parameter
from fp8lab.facts import roofline as rl
from fp8lab.arms import registry
from fp8lab.experiments import roofline as ex

run = notebook.start("07_roofline", params=dict(b4_device=b4_device), mode=mode, devices=devices)

# figures computed from the spec sheet alone say so in their footnote
SPEC_INFO = results.FigureInfo(notebook="07_roofline", device="spec-sheet",
                               device_name="the spec sheet (fp8lab.facts.devices)",
                               date=provenance.utc_now()[:10], mode="computed",
                               commit=run.meta["git"].get("commit"))

# %% [markdown]
# ## The spec sheet
#
# Dense tensor rates with FP32 accumulate, bandwidth in GB/s; each row names its source
# (`fp8lab/facts/devices.py`). The ridge point is where a precision's compute roof meets the memory
# roof: below it a kernel is memory-bound.

# %%
sheet = spec_sheet.spec_table()
show = sheet[["key", "name", "sms", "boost_clock_mhz", "mem_bw_gbs", "l2_mib", "fp32_tflops",
              "bf16_tflops", "fp8_tflops", "fp4_tflops", "ridge_bf16_flop_per_byte",
              "ridge_fp8_flop_per_byte"]]
display(show.round(1))
# each row is self-consistent: the FP32 rate follows from SMs x lanes x 2 x clock
assert np.allclose(sheet["fp32_tflops_from_clock"], sheet["fp32_tflops"], rtol=0.015)

# %% [markdown]
# ## The roofline in one line
#
# `attainable(I) = min(peak, I x bandwidth)`: the whole model. For the H200 in BF16:

# %%
h200 = spec_sheet.get("h200")
for intensity in (1, 64, h200.ridge_point("bf16"), 1024):
    a = rl.attainable(intensity, h200.peak_flops("bf16"), h200.bandwidth_Bps)
    print(f"I = {intensity:7.1f} FLOP/B -> {a / 1e12:6.1f} TFLOP/s"
          f"{'  (ridge)' if math.isclose(intensity, h200.ridge_point('bf16')) else ''}")

# %% [markdown]
# ## Spec-sheet rooflines
#
# One panel per device, every tensor precision it has. The x positions where the roofs bend
# (ridge points) move left as bandwidth grows faster than compute: the H200 runs out of
# bandwidth at a lower intensity than the H100 with the same SMs.

# %%
MARKERS = "osD^vP*Xh"
X_LO, X_HI = 0.25, 8192


def draw_roofs(ax, roof_df, source, ls):
    for _, r in roof_df[roof_df["source"] == source].iterrows():
        x, y = rl.roofline_curve(r["peak_flops"], r["bandwidth_Bps"], X_LO, X_HI)
        # a precision's roof takes the colour of the arm whose ceiling draws it (fp8lab.arms.registry)
        p = r["precision"]
        ax.plot(x, y / 1e12, color=plotting.color(p), ls=ls, lw=1.4,
                label=f"{registry.label(p)} ({'datasheet' if source == 'spec' else 'measured'})")


specs = list(spec_sheet.SPECS.values())
fig, axes = plt.subplots(3, 3, figsize=(11, 9), sharex=True, sharey=True)
for ax, s in zip(axes.flat, specs):
    draw_roofs(ax, ex.roofs(s), "spec", "-")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(s.name.replace("NVIDIA ", "").replace("GeForce ", ""), fontsize=10)
    ax.text(0.03, 0.93, f"{s.mem_bw_gbs / 1000:.2f} TB/s", transform=ax.transAxes, fontsize=8)
for ax in axes[-1]:
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
for ax in axes[:, 0]:
    ax.set_ylabel("attainable TFLOP/s")
handles = {}
for ax in axes.flat:
    for h, l in zip(*ax.get_legend_handles_labels()):
        handles.setdefault(l, h)
fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.03))
fig.suptitle("Datasheet rooflines (dense, FP32 accumulate)", fontweight="bold")
fig.tight_layout(rect=(0, 0.03, 1, 0.97))
plotting.save(fig, SPEC_INFO, "spec_rooflines")
plt.show()

# %% [markdown]
# ## Measured rooflines and every kernel result in `data/`
#
# For each device with ceilings from notebook 00: the datasheet roofs dashed, the measured ones
# solid, and every row of every table that follows the placement convention (columns `arm`,
# `flop`, `bytes`, `time_p50_s` or `time_s`; see `fp8lab/experiments/roofline.py`) as a point
# at (flop / bytes, flop / time). One panel per kind of kernel (the registry's weight x activation
# scheme: FP8 activations; 16-bit activations with 8/4-bit weights; the BF16 GEMM and the peak
# kernels), each with the roofs that bound it, in grey and named on the plot; one colour and marker
# per arm (the registry's), at most `ex.MAX_LEGEND` arms per legend, the notebooks behind each arm
# in its legend entry.

# %%
ROOF_GREY = {"spec": "#888888", "measured": "#444444"}
LABEL_BOX = dict(facecolor="white", alpha=0.75, lw=0, pad=0.6)   # roof names stay legible over points


def draw_roofs_grey(ax, roof_df, precisions, x_hi):
    """The panel's roofs in grey (dashed: datasheet, solid: measured), named on the plot, not in
    the legend: the legend's colours are the arms' alone. Datasheet names sit at the ridge, measured
    ones at the right end; a measured name within 1.3x of the one above it goes under its line."""
    d = roof_df[roof_df["precision"].isin(precisions)]
    prev = None
    for _, r in d.sort_values(["source", "peak_flops"], ascending=[True, False]).iterrows():
        x, y = rl.roofline_curve(r["peak_flops"], r["bandwidth_Bps"], X_LO, x_hi)
        src = r["source"]
        ax.plot(x, y / 1e12, color=ROOF_GREY[src], ls="-" if src == "measured" else "--", lw=1.0, zorder=1)
        peak = r["peak_flops"] / 1e12
        if src == "measured":
            below = prev is not None and prev / peak < 1.3
            ax.text(x_hi, peak * (0.95 if below else 1.05), f"{registry.label(r['precision'])} measured {peak:.0f}",
                    fontsize=7, color=ROOF_GREY[src], ha="right", va="top" if below else "bottom", zorder=5,
                    bbox=LABEL_BOX)
            prev = peak
        else:
            ax.text(r["ridge"] * 1.1, peak * 1.05, f"{registry.label(r['precision'])} datasheet {peak:.0f}",
                    fontsize=7, color=ROOF_GREY[src], ha="left", va="bottom", zorder=5, bbox=LABEL_BOX)


measured_devs = results.devices_with(ex.CEILINGS_NOTEBOOK, ex.CEILINGS_TABLE)
all_points = ex.placeable_points()
measured = {}
for dev in measured_devs:
    m = ex.measured_ceilings(dev)
    measured[dev] = m
    spec = spec_sheet.spec_for(dev)
    roof_df = ex.roofs(spec, m)
    pts = all_points[all_points["device"] == dev]
    x_hi = max(X_HI, 2.0 ** math.ceil(math.log2(pts["intensity"].max()))) if len(pts) else X_HI
    panels = ex.arm_panels(sorted(pts["arm"].unique()))   # <= ex.MAX_LEGEND arms per panel
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(5.2 * max(len(panels), 1), 5.6), sharey=True,
                             squeeze=False)
    for ax, (title, roofs_of, arms) in zip(axes[0], panels or [("no results", (), [])]):
        draw_roofs_grey(ax, roof_df, roofs_of, x_hi)
        for k, arm in enumerate(arms):
            g = pts[pts["arm"] == arm]
            yerr = None
            if {"time_p20_s", "time_p80_s"} <= set(g.columns) and g["time_p20_s"].notna().all():
                lo = g["flop"] / g["time_p80_s"] / 1e12
                hi = g["flop"] / g["time_p20_s"] / 1e12
                yerr = [g["achieved_flops"] / 1e12 - lo, hi - g["achieved_flops"] / 1e12]
            nbs = sorted(g["notebook"].str[:2].unique())
            ax.errorbar(g["intensity"], g["achieved_flops"] / 1e12, yerr=yerr, fmt=MARKERS[k % len(MARKERS)], ms=4,
                        alpha=0.8, color=plotting.color(arm), zorder=3,
                        label=f"{registry.label(arm)} (nb {', '.join(nbs)})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    axes[0][0].set_ylabel("TFLOP/s")
    fig.suptitle(f"Roofline: {m['meta'].get('device_name', dev)}, every result in data/ "
                 f"(grey: roofs, dashed datasheet, solid measured)", fontweight="bold")
    fig.tight_layout()
    # dated by the ceilings' measurement, filed under this notebook
    info = dataclasses.replace(run.info_for(dev, m["meta"]), notebook="07_roofline")
    plotting.save(fig, info, "roofline")
    plt.show()
    # a point above the datasheet roof at its own intensity means bytes were undercounted or
    # the timing saw a warm cache: the best precision's roof is the most generous bound
    if spec is not None and len(pts):
        best = max(v for v in (spec.peak_flops(p) for p in ("fp32", "bf16", "fp8", "fp4")) if v)
        roof_at = np.minimum(best, pts["intensity"] * spec.bandwidth_Bps)
        over = pts[pts["achieved_flops"] > 1.05 * roof_at]
        assert over.empty, f"points above the datasheet roof on {dev}:\n{over}"

if not measured_devs:
    display(Markdown("**No measured ceilings in `data/` yet** (notebook 00 on a GPU writes them): "
                     "only the datasheet rooflines are drawn."))
display(Markdown(f"{len(all_points)} kernel result(s) in `data/` follow the placement convention"
                 + (f", across {all_points['device'].nunique()} device(s)." if len(all_points) else ".")))

# %% [markdown]
# ## Across devices
#
# Every placeable result in `data/` as a fraction of its own device's measured roofline (the
# highest measured compute ceiling, or intensity x measured copy bandwidth). Drawn when `data/`
# holds this notebook's results for two or more devices (`devices` picks them; `[]`: all, the one
# measured in this run first), one colour and marker per device, each against its own ceiling so
# cards of different size compare; saved under `figures/cross-device/`. With one device the
# figures above are the whole story.

# %%
overlay.show_cross_device("07_roofline", devices, run)

# %% [markdown]
# ## B4: seed 001's decode-step floors
#
# FLOP = 2 x 256 tokens x 4.238 G weights = 2.170 TFLOP; bytes = 4.238 GB (one byte per FP8
# weight). Each floor is that work over one rate. The seed used the H200 datasheet (67, 989.5,
# 1979 TFLOP/s, 4.8 TB/s); we use our spec row for the H200, and beside it the ceilings notebook
# 00 measured on `b4_device` when `data/` has them.

# %%
b4_meas = measured.get(b4_device)          # None when notebook 00 has not run there
b4 = ex.b4_table(b4_meas)
display(b4.round(4))
display(ex.b4_rederived().round(4))   # every figure the seed derives, from its own inputs
assert b4.attrs["flop"] == rl.b4_floors(67e12, 989.5e12, 1979e12, 4.8e12)["flop"]
has_b4_meas = bool(b4["measured_ms"].notna().all())
b4_name = b4_meas["meta"].get("device_name", b4_device) if has_b4_meas else None
b4_v = ex.b4_verdict(b4, measured_on=b4_name)

fig, ax = plt.subplots(figsize=(7, 3.8))
bounds = list(b4["bound"])
x = np.arange(len(bounds))
series = [("seed 001 (printed)", b4["seed_ms"], "#999999"),
          ("our spec sheet", b4["spec_ms"], "#0072B2")]
if has_b4_meas:
    series.append((f"measured ceilings ({b4_name})", b4["measured_ms"].astype(float), "#D55E00"))
w = 0.8 / len(series)
for i, (label, vals, color) in enumerate(series):
    ax.bar(x + (i - (len(series) - 1) / 2) * w, vals, w, label=label, color=color)
    for xi, v in zip(x, vals):
        ax.text(xi + (i - (len(series) - 1) / 2) * w, v * 1.08, f"{v:.3g}", ha="center", fontsize=7)
ax.set_yscale("log")
ax.set_xticks(x, ["FP32 (CUDA cores)", "BF16 tensor", "FP8 tensor", "HBM (4.238 GB)"])
ax.set_ylabel("floor of one decode step (ms)")
ax.set_title("B4: floors of the B=256 decode step")
ax.legend(fontsize=8)
extra = (f"measured: data/{b4_device} ({str(b4_meas['meta'].get('time', ''))[:10]})"
         if has_b4_meas else None)
plotting.save(fig, SPEC_INFO, "b4_floors", footnote_extra=extra)
plt.show()
display(Markdown(f"**B4: {b4_v.verdict}.** {b4_v.our_figure}. {b4_v.reason}."))

# %% [markdown]
# ## C8: the issue-slot model
#
# A scheduler issues one warp instruction per clock, so an SM issues 4 per clock and a GPU
# `SMs x 4 x clock` warp instructions per second, or 32 times that in thread instructions.
# A DRAM-bound weight-only kernel streams `bandwidth x fraction / bytes per element` elements per
# second; at `i` thread instructions per element it fills
#
# `utilisation = i x elements/s / (SMs x 4 x 32 x clock)`
#
# of the issue slots. The inputs, and where each comes from:

# %%
S = rl.SEED003_C8
r3090, r5090 = spec_sheet.get("rtx-3090"), spec_sheet.get("rtx-5090")
inputs = pd.DataFrame([
    ("thread instructions per NVFP4 element", S["nvfp4_instr_per_element"], "seed 003, section 4.3 (ncu)"),
    ("bytes per NVFP4 element", rl.NVFP4_BYTES_PER_ELEMENT, "format: 4-bit code + e4m3 scale per 16 (ours)"),
    ("3090 DRAM use at M=1", "0.91-0.94", "seed 003, section 4.3 (all Marlin formats)"),
    ("3090 SM clock under ncu (Hz)", S["rtx3090_ncu_clock_hz"], "seed 003, section 4.4"),
    ("3090 SMs / bandwidth (GB/s)", f"{r3090.sms} / {r3090.mem_bw_gbs:.0f}", "spec sheet"),
    ("5090 SMs / clock (MHz) / bandwidth (GB/s)",
     f"{r5090.sms} / {r5090.boost_clock_mhz:.0f} / {r5090.mem_bw_gbs:.0f}", "spec sheet (seed: 170 / 2410 / 1792)"),
    ("5090 DRAM use", S["rtx5090_dram_fraction"], "seed 003, section 6.8 ('bandwidth used up')"),
], columns=["input", "value", "source"])
display(inputs)
repro = rl.c8_seed_reproduction(r3090, r5090)
display(pd.DataFrame({
    "model": [f"{repro['rtx3090_low']:.1%} - {repro['rtx3090_high']:.1%}", f"{repro['rtx5090_spec']:.1%}"],
    "seed predicted": [f"{S['rtx3090_issue_predicted']:.0%}", f"~{S['rtx5090_issue_predicted']:.0%}"],
    "seed measured (ncu)": [f"{S['rtx3090_issue_measured']:.1%}", "not measured"],
}, index=["RTX 3090", "RTX 5090"]))
# the model against ncu on our weight-only kernels is notebook 08's C8 row (a measurement); this
# row re-derives the seed's arithmetic only
c8_v = ex.c8_verdict(repro)

# %% [markdown]
# The same model for every spec-sheet device, NVFP4 at 3.66 instructions per element with the
# datasheet bandwidth fully used: how much of the issue budget the weight-only kernel's
# instruction stream takes, and the instruction count per element at which issue, not DRAM,
# would set the time.

# %%
c8 = ex.c8_table()
display(c8[["device", "sms", "clock_mhz", "bandwidth_gbs", "issue_utilisation",
            "instr_per_element_at_full_issue"]].round(3))
fig, ax = plt.subplots(figsize=(7.5, 3.8))
order = c8.sort_values("issue_utilisation")
colors = ["#D55E00" if u > 1 else "#0072B2" for u in order["issue_utilisation"]]
ax.barh(order["device"], order["issue_utilisation"] * 100, color=colors)
ax.axvline(100, color="#555555", ls="--", lw=0.8)
for yi, (u, cap) in enumerate(zip(order["issue_utilisation"], order["instr_per_element_at_full_issue"])):
    ax.text(u * 100 + 2, yi, f"{u:.0%} (issue-bound above {cap:.1f} instr./element)", va="center", fontsize=7)
ax.set_xlabel("predicted issue-slot use at full DRAM bandwidth (%)")
ax.set_xlim(0, max(160, order["issue_utilisation"].max() * 100 + 60))
ax.set_title("C8: NVFP4 weight-only decode, 3.66 thread instr./element")
plotting.save(fig, SPEC_INFO, "c8_issue_slots")
plt.show()
over = c8[c8["issue_utilisation"] > 1]["device"].tolist()
display(Markdown(
    f"**C8: {c8_v.verdict}.** {c8_v.our_figure}. {c8_v.reason}. "
    + (f"At the same 3.66 instructions per element the model puts {', '.join(over)} above 100%: "
       "there Marlin's NVFP4 instruction stream, not DRAM, would set the decode time."
       if over else "")))

# %% [markdown]
# ## Verdicts
#
# Computed above from the spec sheet and `data/`; recorded for this device in measure mode
# (in replot mode nothing is written: the recorded verdicts come from the run that measured).

# %%
verdicts = claims.record(run, [b4_v, c8_v])
display(verdicts[["claim", "subject", "verdict", "seed_figure", "our_figure", "reason", "rule"]])
if run.writes:
    run.write_table("b4_floors", b4)
    run.write_table("c8_predictions", c8)
