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
# # Weight-only decode: bandwidth, FP vs INT, instructions per element
#
# Seed 003 measured Marlin's weight-only (A16) kernels at decode on an RTX 3090 and claims:
#
# - **C3**: at M = 1 a weight-only GEMM is DRAM-bound: 91-94% of DRAM bandwidth, only 13-33%
#   of issue slots used.
# - **C4**: FP8 and INT8 (and NVFP4 and INT4) run at the same effective bandwidth at M = 1
#   (within 1.5%), although their dequant instructions differ completely.
# - **C5**: dequant costs 1.8-2.9 instructions per weight element (FP8: 1.81).
# - **C8**: issue-slot use = instructions per element x elements per second / (SMs x 4
#   schedulers x clock) predicts Nsight Compute's figure.
#
# The seed measured Marlin; fp8lab's kernels below are *analogues* (the same design, our code).
# Each verdict has an `analogue` row and a `seed` row: the seed row comes from Marlin where it was
# measured as a peer arm (ids starting `peer_marlin`, issue 17), else it says it was not run.
#
# fp8lab's own four kernels (`gemv_w8a16_fp8`, `gemv_w8a16_int8`, `gemv_w4a16_nvfp4`,
# `gemv_w4a16_int4`, in `fp8lab/kernels/gemv_w16.cuh`) dequantise in registers with exactly the
# instruction sequences of the emulators in `fp8lab/emulate/dequant.py` and feed bf16 `mma.sync` (HMMA).
# For every format a second kernel, schedule `"rows"` (`fp8lab/kernels/gemv_rows.cuh`), reads a
# row-major copy of the weight. At M = 1 it works on the CUDA cores with no tensor cores (fp32 FMAs for
# the 8-bit formats; INT4 on fp16 pairs with Marlin's bit trick, 16 products per fp16 sum, then fp32;
# NVFP4 on fp16 pairs too, its e2m1 codes placed into fp16 by byte permutes, 8 products per fp16 sum,
# each block of 16 times its e4m3 scale; the 4-bit formats in CTAs of 8 rows at M = 1, the grid
# column's `cuda8`);
# from M = 2 on, FP8 and INT8 take its tensor-core form (`gemv_rows_mma.cuh`: the same row-major
# weight in CTAs of 16 rows x 8 tokens up to M = 8, 32 rows x 16 tokens from M = 9 on, mma.sync on
# exactly converted operands; the table's grid column names the form, `mma` or `mma32`); where rows is the faster the figures, targets and timing verdicts (C4) take it, as they take the
# fastest schedule everywhere; the Nsight Compute profile, C5 and C8 stay on the tile kernels, the
# seed's tensor-core dequant design. This notebook times them and cuBLAS BF16 on Llama- and Qwen-style decode shapes for
# M = 1..64, reports the effective bandwidth (weight + scale bytes over time) against the copy
# bandwidth measured in the same run, and profiles M = 1 with Nsight Compute (clocks not locked),
# beside a plain streaming kernel (an elementwise copy of the bf16 weight's bytes): the best DRAM
# fraction a kernel reaches under ncu on this card is C3's yardstick, not the seed's 3090 figure.
#
# **The H200 is not a 3090.** The issue-slot model of `fp8lab.facts.roofline` predicts that NVFP4
# decode at full H200 bandwidth with Marlin's 3.66 instructions per element would need ~93% of
# the issue slots: the H200 streams about twice as many bytes per scheduler-clock as a 3090, so
# on it the dequant instruction count matters much more than on the seed's card. We measure how
# much of the issue budget our kernels use.
#
# Without a GPU this notebook redraws what earlier runs measured; the SASS counts below are
# compiled here either way.

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
shape_names = ["llama3-70b:down_proj", "qwen3-8b:gate_up", "llama3-8b:gate_up", "llama3-8b:down_proj",
               "llama3-70b:qkv"]  # fp8lab.facts.shapes names, >= 32 MiB of weights (issue 22's five)
Ms = [1, 4, 16, 64]  # tokens per decode step; the full sweep: [1, 2, 4, 8, 16, 32, 64]
formats = ["fp8", "int8", "nvfp4", "int4"]
act = "bf16"  # activation / mma dtype: "bf16" or "fp16"
rep_ms = 40  # timing budget per (shape, arm, M), milliseconds of graph replays
ncu = True  # profile M = 1 with Nsight Compute (measure mode only)
ncu_shapes = ["qwen3-8b:gate_up", "llama3-70b:down_proj"]  # shapes to profile (each costs ~30-60 s)
splits = None  # split-K factor of the weight-only kernels; None: chosen per shape and M
schedules = ["splitk", "streamk", "rows"]  # weight-only launch schedules timed (also "bulk"); plots use the fastest
pattern = True  # also time each weight-only launch's access pattern alone (its loads on its grid; not for "bulk")
seed = 0
devices = []  # device keys (data/ folders, e.g. ["h200", "l4"]) to overlay; []: every device with data
peers = "all"  # other people's kernels (fp8lab.peers: Marlin, gemlite, vLLM): "all" of this notebook's, a list of ids, or []

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fp8lab.report import claims, plotting, results
from fp8lab.experiments import notebook, overlay
from fp8lab.measure import clocks
from fp8lab.emulate import dequant
from fp8lab.report.excerpts import excerpt
from fp8lab.facts import devices as spec_sheet  # the name 'devices' is the parameter
from fp8lab.facts import roofline as rl
from fp8lab.arms import registry
from fp8lab.experiments import decode as dx, gemv_sass as gs
from fp8lab.kernels import gemv_rows, weight_only as wo
from fp8lab.peers import report as peer_report, sweeps as peer_sweeps
from fp8lab.toolchain.tools import have_tool

NB = "08_decode_bandwidth"
run = notebook.start(NB, params=dict(shape_names=shape_names, Ms=Ms, formats=formats, act=act,
                                     rep_ms=rep_ms, ncu=ncu, ncu_shapes=ncu_shapes, splits=splits,
                                     schedules=list(schedules), seed=seed, peers=peers, pattern=pattern), mode=mode,
                     devices=devices)
peer_ids = peer_sweeps.resolve(peers, "08")  # a typo fails here, before any measuring
display(dx.shape_table(shape_names).round(1))

# %% [markdown]
# ## The key idea: the emulator's instructions, issued by the kernel
#
# E4M3 -> bf16 for four values in one 32-bit register, Marlin's and/shift/or trick: the sign
# stays, exponent and mantissa slide right by 4 bits into bf16's fields with e4m3's bias, and
# the missing factor 2^120 is folded into the group scale. The CUDA source and the emulator's
# trace are the same seven instructions:

# %%
print(excerpt(wo.HEADER, "e4m3_dequant"))
trace = dequant.dequant("e4m3", "bf16", np.zeros(1, np.uint32)).trace
print("\n".join(str(t) for t in trace))

# %% [markdown]
# ## SASS: the dequant sequences as ptxas compiled them
#
# Compiled here for sm_90 (no GPU needed). Each format's dequant probe minus its pass-through
# twin must issue the emulator's opcodes, count for count (ptxas moves a left shift to the FMA
# pipe as `IMAD.SHL`, and may re-create a second 32-bit constant with a move: those are shown as
# 'extra'). Then the main loop of each GEMV kernel: static instructions per weight element, the
# dequant class beside the rest, and the MMA opcodes of the whole kernel.

# %%
static = None
if have_tool("nvcc") and have_tool("cuobjdump"):
    probe = gs.dequant_sass_counts("sm_90")
    emu = probe[probe["kind"] == "emulated"]
    assert (emu["sass"] == emu["emulator"]).all(), emu[emu["sass"] != emu["emulator"]]
    assert set(probe.loc[probe["kind"] == "extra", "opcode"]) <= set(gs.PROBE_EXTRA_OK)
    tot = probe[probe["kind"] == "total"].assign(
        per_element=lambda d: d["emulator"] / d["elements_per_word"])
    display(tot[["arm", "act", "emulator", "sass", "elements_per_word", "per_element"]]
            .rename(columns={"emulator": "emulator instr./word", "sass": "SASS instr./word (incl. extra)"}))
    static = gs.gemv_sass_counts("sm_90", nt=1)
    assert (static["fp8_converts"] == 0).all() and set(static["mma_ops"]) <= {"HMMA.16816.F32",
                                                                             "HMMA.16816.F32.BF16"}
    per = static[static["act"] == act].groupby(["arm", "dequant_class"])["per_element"].sum().unstack()
    per.columns = ["other" if not c else "dequant class" for c in per.columns]
    per["total"] = per.sum(axis=1)
    per["MMA in the kernel"] = static[static["act"] == act].groupby("arm")["mma_ops"].first()
    display(per.round(2))
else:
    display(Markdown("*nvcc / cuobjdump not found: the SASS counts are skipped.*"))

# %% [markdown]
# ## Measure
#
# Only in measure mode, on a GPU: the copy ceiling, then every (shape, format, M) under each
# launch schedule in `schedules` (split-K: a grid of N tiles x K splits; stream-K: one persistent
# CTA per slot walking a contiguous run of (N tile, K step) units; `"bulk"`, not timed by default:
# the split-K grid with each warp's weights and scales in a five-stage shared-memory ring filled by
# cp.async.bulk, twice the register ring's bytes in flight; `"rows"`, every format: the weight
# packed row-major for `fp8lab.kernels.gemv_rows`, CTAs of 4 warps splitting 4 rows' K with no tensor
# cores and no split-K at M = 1, its tensor-core form from M = 2 on for fp8 and int8) and cuBLAS BF16,
# each checked against float64 (4 rows; rows at every M timed) before it is timed, inputs rotated over more than 2x the L2, timed as
# back-to-back CUDA-graph replays, with an NVML sampler beside; beside each, a copy of the same
# bytes (the ceiling at this size) and, with `pattern`, the kernel's access pattern alone: the same
# grid, the same CTAs per SM and every warp's same weight and scale loads through the same register
# ring, with nothing else done (`wo.pattern_stream`; the ceiling of that launch; for rows, its own
# loads-only twin `gemv_rows.loads`). Then Nsight Compute on M = 1 (the fastest tile schedule per
# format: C5 and C8 judge the tile kernels, the seed's tensor-core dequant design).

# %%
if run.mode == "measure":
    import torch

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    with clocks.ClockSampler(uuid=uuid, interval_s=0.02) as sampler:
        copy = dx.measure_copy(sampler=sampler)
        sweep = pd.concat([dx.measure_decode(shape_names, Ms, formats, act=act, rep_ms=rep_ms, seed=seed,
                                             copy=copy, sampler=sampler, splits=splits, schedule=sch,
                                             cublas=(i == 0), pattern=pattern)
                           for i, sch in enumerate(schedules)], ignore_index=True)
        # the peers after fp8lab's arms, under the same sampler and copy ceiling; a missing
        # peer is a not-run row with its install line
        peer_sweep = peer_sweeps.decode(shape_names, Ms, peer_ids, copy=copy, rep_ms=rep_ms, seed=seed,
                                        sampler=sampler)
    clock_summary = sampler.summary()
    runs = sum(len([f for f in formats if sch != "rows" or f in gemv_rows.FORMATS]) for sch in schedules)
    assert len(sweep) == len(shape_names) * len(Ms) * (runs + 1)
    assert (sweep["check_relerr"] < 1e-2).all()
    assert (sweep["bw_p20"] <= sweep["bw_p50"]).all() and (sweep["bw_p50"] <= sweep["bw_p80"]).all()
    # more than ~1.2x the copy rate (which counts read + write) would be a counting bug
    assert (sweep["fraction_of_copy"] < 1.25).all(), sweep[["arm", "M", "fraction_of_copy"]]
    assert (sweep["fraction_of_spec"] < 1.0).all()
    if pattern:   # every split-K / stream-K / rows row has its pattern, run at the kernel's own occupancy
        pr = sweep[sweep["arm"].isin(list(wo.FORMAT_OF_ARM))
                   & sweep["schedule"].isin(wo.PATTERN_SCHEDULES + ("rows",))]
        assert pr["pattern_Bps"].notna().all() and (pr["pattern_ctas_per_sm"] == pr["ctas_per_sm"]).all(), pr
        assert (pr["pattern_fraction_of_copy"] < 1.25).all(), pr[["arm", "M", "pattern_fraction_of_copy"]]
    pm = peer_report.measured(peer_sweep)
    assert (pm["check_relerr"] < 1e-2).all() and (pm["fraction_of_copy"] < 1.25).all(), pm
    if ncu and have_tool("ncu"):
        from fp8lab.toolchain import profile
        from fp8lab.paths import cache_dir

        summaries, opcodes = [], []
        # the seed's subject under ncu too (C3's and C5's seed rows): each profilable peer that
        # passed its check and was timed at M = 1 on every profiled shape
        ok_m1 = pm[pm["M"] == 1]
        ncu_peers = [p for p in dx.PEER_KERNELS
                     if set(ncu_shapes) <= set(ok_m1.loc[ok_m1["arm"] == p, "shape"])]
        for sn in ncu_shapes:
            launch = dx.launch_of_best(sweep, sn)   # the faster tile schedule (C5 / C8 judge the tile kernels)
            rep = dx.profile_decode(sn, cache_dir("ncu") / f"decode_{sn.replace(':', '_')}",
                                    formats=formats, act=act, seed=seed, launch=launch, peers=ncu_peers)
            # C8's corrections (issued instructions, active cycles) ride along in the same report
            kern = profile.read_report(rep).merge(dx.read_c8_metrics(rep), on=["range", "action"], how="left")
            s, o = dx.ncu_tables(kern, profile.read_opcodes(rep), sn)
            s["launch"] = ["" if a in dx.PEER_KERNELS else ", ".join(f"{k}={v}" for k, v in launch.get(f, {}).items())
                           for a, f in zip(s["arm"], s["fmt"])]
            assert set(s["arm"]) >= {wo.ARMS[f] for f in formats} | {dx.STREAM_ARM} | set(ncu_peers), s["arm"].tolist()
            summaries.append(s)
            opcodes.append(o)
        ncu_summary = dx.c8_model(pd.concat(summaries, ignore_index=True), run.gpu["sm_count"])
        assert (ncu_summary["dram_pct"].between(0, 100)).all()
        # issued >= executed, and a kernel is active for at most its elapsed cycles (duration x the
        # average clock estimates those: a little slack)
        wk = ncu_summary[ncu_summary["arm"].isin(list(wo.FORMAT_OF_ARM))]
        assert (wk["issue_factor"] >= 1 - 1e-6).all() and (wk["active_fraction"] <= 1.1).all(), wk
    # issue 22's targets and each format against the fastest peer of its format, from this run's
    # rows (the faster schedule per point, as the figures)
    best = dx.best_schedule(sweep)
    target_rows = dx.targets(best, peer_sweep)
    versus = dx.versus_peers(best, peer_sweep)
    # every check passed (sweep and ncu): only now does anything reach data/
    run.write_table("decode", sweep, meta={"clocks": clock_summary, "copy": copy})
    run.write_table("targets", target_rows, meta={"clocks": clock_summary, "copy": copy})
    if len(peer_sweep):
        run.write_table("peers", peer_sweep, meta={"clocks": clock_summary, "copy": copy})
    if len(versus):
        run.write_table("versus_best_peer", versus, meta={"clocks": clock_summary, "copy": copy})
    if static is not None:
        run.write_table("sass_static", static)
    if ncu and have_tool("ncu"):
        run.write_table("ncu_summary", ncu_summary, meta={"clock_control": "none"})
        run.write_table("ncu_opcodes", pd.concat(opcodes, ignore_index=True))
    display(sweep[["shape", "arm", "schedule", "M", "time_p50_s", "bw_p50", "fraction_of_copy",
                   "fraction_of_same_copy", "pattern_fraction_of_copy", "splits", "sm_mhz_median"]].round(3))

# %% [markdown]
# ## Effective bandwidth against the copy ceiling
#
# Weight + scale bytes per second (p50, bars p20-p80) for each arm and M, one panel per
# shape; the dashed line is the device-to-device copy bandwidth measured in the same run
# (read + write bytes), the dotted one 92% of it (issue 22's 8-bit target on shapes of >= 100 MB). cuBLAS BF16 reads 2 bytes per weight, so at
# the same bandwidth it takes 2-4x longer: the bandwidth is what compares.
#
# Why a kernel falls short of the copy, measured: beside every weight-only launch the run times its
# access pattern alone (`wo.pattern_stream`, gemv_pattern.cuh): the same grid, the same CTAs per SM,
# every warp's same weight and scale loads in the same order through the same three-step register
# ring, each word XORed into one register and nothing else (for the rows kernel, its loads-only twin
# `gemv_rows.loads`: the same grid and loads). Where that pattern stays below the copy,
# the grid and the access pattern cost the difference; where the kernel stays below its pattern, its
# per-step work does (activations, dequant, mma, barriers, split-K sums). The figure
# `decode_pattern` draws both at M = 1 and 16; the targets table names, for each miss, which of the
# two the goal lies beyond.

# %%
# legends name each arm by registry.label (its id and format), ticks by registry.short_label
def tick(arm):
    return registry.short_label(arm).replace(" ", "\n", 1)


def draw_bandwidth(df, info, peer=None):
    shp = list(dict.fromkeys(df["shape"]))
    ncol = min(3, len(shp))
    nrow = -(-len(shp) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 4.0 * nrow), squeeze=False, sharey=True,
                             gridspec_kw=dict(hspace=0.35))
    for ax in axes.flat[len(shp):]:
        ax.set_visible(False)
    for ax, sn in zip(axes.flat, shp):
        d = df[df["shape"] == sn]
        for arm in dx.ARMS:
            a = d[d["arm"] == arm].sort_values("M")
            if a.empty:
                continue
            ax.errorbar(a["M"], a["bw_p50"] / 1e12, yerr=[(a["bw_p50"] - a["bw_p20"]) / 1e12,
                                                          (a["bw_p80"] - a["bw_p50"]) / 1e12],
                        marker="o", ms=4, capsize=2, label=registry.label(arm), color=plotting.color(arm))
        # other people's kernels (fp8lab.peers), dash-dotted with open diamonds
        peer_report.draw(ax, peer, "M", "bw_p50", scale=1e12, lo="bw_p20", hi="bw_p80", where={"shape": sn})
        cp = d["copy_Bps"].iloc[0] / 1e12
        ax.axhline(cp, ls="--", color="#555555", lw=1, label=f"copy {cp:.2f} TB/s")
        ax.axhline(dx.TARGET_BIG_FRACTION * cp, ls=":", color="#555555", lw=1,
                   label=f"{dx.TARGET_BIG_FRACTION:.0%} of copy (8-bit target, >= 100 MB)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(d["M"].unique()), [str(m) for m in sorted(d["M"].unique())])
        ax.set_xlabel("M (tokens)")
        ax.set_title(f"{sn} (N={d['N'].iloc[0]}, K={d['K'].iloc[0]})")
    for row in axes:
        row[0].set_ylabel("effective bandwidth (TB/s, weights + scales)")
    # beside the panels, never over the lines
    h, lab = plotting.legend_entries(axes)
    spare = axes.flat[len(shp)] if len(shp) < axes.size else None
    if spare is not None:                    # an empty cell: the legend goes there
        spare.set_visible(True)
        spare.axis("off")
        spare.legend(h, lab, fontsize=8, loc="center", frameon=False)
    else:
        fig.legend(h, lab, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    plotting.save(fig, info, "decode_bandwidth",
                  footnote_extra=peer_report.COMPARABLE_NOTE if len(peer_report.measured(peer)) else None)
    plt.show()


def draw_m1(df, info):
    d = df[df["M"] == 1]
    shp = list(dict.fromkeys(d["shape"]))
    fig, ax = plt.subplots(figsize=(max(7.5, 1.7 * len(shp)), 3.6))
    width = 0.8 / len(dx.ARMS)
    for i, arm in enumerate(dx.ARMS):
        a = d[d["arm"] == arm].set_index("shape").reindex(shp)
        x = np.arange(len(shp)) + (i - len(dx.ARMS) / 2 + 0.5) * width
        ax.bar(x, a["fraction_of_copy"], width, color=plotting.color(arm), label=registry.label(arm))
        for xi, v in zip(x, a["fraction_of_copy"]):
            if np.isfinite(v):
                ax.text(xi, v + 0.01, f"{v:.0%}", ha="center", fontsize=7)
    ax.axhline(dx.TARGET_BIG_FRACTION, ls=":", color="#555555", lw=1,
               label=f"{dx.TARGET_BIG_FRACTION:.0%} (8-bit target on >= 100 MB)")
    ax.set_xticks(np.arange(len(shp)), [s.replace(":", "\n") for s in shp], fontsize=8)
    ax.set_ylabel("M=1 effective bandwidth / copy bandwidth")
    ax.set_ylim(0, 1.25)
    ax.legend(fontsize=8, ncol=3, loc="upper center")
    ax.set_title("Decode at M = 1: FP vs INT at the same width (C4)")
    plotting.save(fig, info, "decode_m1_parity")
    plt.show()


SCHEDULE_SHORT = {"splitk": "split-K", "streamk": "stream-K", "rows": "rows", "bulk": "bulk"}


def draw_pattern(df, info, Ms=(1, 16)):
    """Where each weight-only kernel's bandwidth goes, per shape and format at M = 1 and 16: the
    copy (1.0), the kernel's access pattern alone on its grid (outline; what its loads allow) and
    the kernel (filled). The outline's gap to 1 is the cost of the grid and access pattern, the
    fill's gap to the outline the cost of the kernel's per-step work (activations, dequant, mma,
    barriers, split-K sums)."""
    d = df[df["arm"].isin(list(wo.FORMAT_OF_ARM)) & df["M"].isin(Ms) & df["pattern_fraction_of_copy"].notna()]
    Ms = [m for m in Ms if m in set(d["M"])]
    if d.empty or not Ms:
        return
    shp = list(dict.fromkeys(d["shape"]))
    arms = [a for a in dx.ARMS if a in set(d["arm"])]
    fig, axes = plt.subplots(len(Ms), 1, figsize=(max(10, 2.3 * len(shp)), 3.6 * len(Ms)), squeeze=False,
                             gridspec_kw=dict(hspace=0.55))
    w = 0.8 / len(arms)
    for ax, M in zip(axes[:, 0], Ms):
        dm = d[d["M"] == M]
        for i, arm in enumerate(arms):
            a = dm[dm["arm"] == arm].set_index("shape").reindex(shp)
            x = np.arange(len(shp)) + (i - len(arms) / 2 + 0.5) * w
            c = plotting.color(arm)
            ax.bar(x, a["pattern_fraction_of_copy"], w * 0.92, facecolor="white", edgecolor=c, lw=1.2)
            ax.bar(x, a["fraction_of_copy"], w * 0.92, color=c, label=registry.label(arm))
            sch = a["schedule"] if "schedule" in a else pd.Series("", index=a.index)
            for xi, v, pv, sc in zip(x, a["fraction_of_copy"], a["pattern_fraction_of_copy"], sch):
                if np.isfinite(v) and np.isfinite(pv):
                    ax.text(xi, max(v, pv) + 0.01, f"{v:.2f}\n{pv:.2f}", ha="center", va="bottom", fontsize=6.5)
                    if isinstance(sc, str) and sc:   # the launch schedule that was fastest here
                        ax.text(xi, 0.03, SCHEDULE_SHORT.get(sc, sc), rotation=90, ha="center", va="bottom",
                                fontsize=6.5, color="white")
        ax.axhline(1.0, ls="--", color="#555555", lw=1)
        ax.set_xticks(np.arange(len(shp)), [s.replace(":", "\n") for s in shp], fontsize=8)
        ax.set_ylim(0, 1.3)
        ax.set_ylabel("fraction of copy")
        ax.set_title(f"M = {M}: kernel (filled, upper number) and its access pattern alone (outline, lower number)",
                     fontsize=9)
    h, lab = axes[0, 0].get_legend_handles_labels()
    h.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="#444444"))
    lab.append("access pattern alone: same grid, CTAs per SM and loads, nothing else (white text: the schedule)")
    fig.legend(h, lab, fontsize=8, ncol=3, loc="lower center", bbox_to_anchor=(0.5, -0.06), frameon=False)
    fig.suptitle("Decode: what the loads allow (outline) and what the kernel streams (filled), "
                 "the fastest schedule per point", fontsize=10)
    plotting.save(fig, info, "decode_pattern")
    plt.show()


def draw_targets(tg, info):
    """Issue 22's decode targets: one panel per target, the measured value per (shape, arm) as a
    bar in the arm's colour (hatched where it misses), its goal as a black tick over the bar."""
    from matplotlib.gridspec import GridSpec
    from matplotlib.patches import Patch

    kinds = list(dict.fromkeys(tg["target"]))
    nbars = [max(3, int((tg["target"] == k).sum())) for k in kinds]
    # the three M = 1 targets side by side (a bar or two per shape), each denser target on a row of its own
    rows = [kinds[:3]] + [[k] for k in kinds[3:]]
    fig = plt.figure(figsize=(16, 4.2 * len(rows)))
    gs = GridSpec(len(rows), 1, figure=fig, hspace=0.6)
    arms_seen = []
    for ri, row in enumerate(rows):
        sub = gs[ri].subgridspec(1, len(row), width_ratios=[nbars[kinds.index(k)] for k in row], wspace=0.25)
        for ci, kind in enumerate(row):
            ax = fig.add_subplot(sub[ci])
            g = tg[tg["target"] == kind].reset_index(drop=True)
            g["_sh"] = [r.shape.replace(":", "\n") + (f"\nM={r.M}" if kind.startswith("faster") else "")
                        for r in g.itertuples()]
            groups = list(dict.fromkeys(g["_sh"]))
            arms = list(dict.fromkeys(g["arm"]))
            w = 0.8 / len(arms)
            dense = len(g) > 12                      # many bars: labels upright, smaller
            for i, arm in enumerate(arms):
                a = g[g["arm"] == arm]
                x = np.array([groups.index(v) for v in a["_sh"]]) + (i - len(arms) / 2 + 0.5) * w
                for xi, (_, r) in zip(x, a.iterrows()):
                    ax.bar(xi, r["value"], w, color=plotting.color(arm) if r["met"] else "white",
                           edgecolor=plotting.color(arm), hatch=None if r["met"] else "///")
                    ax.plot([xi - w / 2, xi + w / 2], [r["goal"]] * 2, color="black", lw=1.5)
                    if np.isfinite(r.get("pattern_value", np.nan)):
                        ax.plot(xi, r["pattern_value"], marker="D", ms=3.5, color="#555555", ls="none")
                    # above the bar and its goal tick; above the pattern diamond too where the
                    # diamond would sit on the label (it hid the number), else the label stays by its bar
                    top = max(r["value"], r["goal"]) + 0.015
                    pv = r.get("pattern_value", np.nan)
                    if np.isfinite(pv) and top - 0.03 <= pv <= top + (0.14 if dense else 0.07):
                        top = pv + 0.03
                    ax.text(xi, top, f"{r['value']:.2f}", ha="center",
                            va="bottom", fontsize=5.5 if dense else 6, rotation=90 if dense else 0)
                if arm not in arms_seen:
                    arms_seen.append(arm)
            ax.set_xticks(np.arange(len(groups)), groups, fontsize=6.5)
            tops = np.r_[g["value"], g["goal"], g["pattern_value"] if "pattern_value" in g else []]
            ax.set_ylim(0, max(1.15, float(np.nanmax(tops)) * (1.25 if dense else 1.15)))
            met = int(g["met"].sum())
            ax.set_title(f"{kind}\n(met at {met} of {len(g)})", fontsize=9)
            if ci == 0:
                ax.set_ylabel("measured value (title's unit)")
    handles = [Patch(color=plotting.color(a), label=registry.label(a)) for a in arms_seen]
    handles += [Patch(facecolor="white", edgecolor="#444444", hatch="///", label="missed (hatched)"),
                plt.Line2D([], [], color="black", lw=1.5, label="goal of that bar")]
    if "pattern_value" in tg and tg["pattern_value"].notna().any():
        handles.append(plt.Line2D([], [], marker="D", ms=3.5, color="#555555", ls="none",
                                  label="the same, from the kernel's access pattern alone"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle("Issue 22's decode targets, measured in one run (value per bar; black tick: its goal)", fontsize=10)
    plotting.save(fig, info, "decode_targets")
    plt.show()


devs = results.devices_with(NB, "decode")
tables = {}
recorded = {}
peer_tables = results.by_device(NB, "peers")
for dev in devs:
    full = results.load_table(dev, NB, "decode")
    # the launch schedules where several were timed; everything below uses the fastest per point
    st = dx.schedule_table(full)
    if not st.empty:
        display(Markdown(f"**{dev}**, M = 1: the launch schedules (fraction of the copy bandwidth; "
                         "the figures and verdicts take the fastest per point)"))
        display(st.round(3))
    df = dx.best_schedule(full)
    tables[dev] = df
    info = run.info_for(dev, df)
    draw_bandwidth(df, info, peer_tables.get(dev))
    draw_m1(df, info)
    if "pattern_fraction_of_copy" in df and df["pattern_fraction_of_copy"].notna().any():
        draw_pattern(df, info)
        pt = df[df["arm"].isin(list(wo.FORMAT_OF_ARM)) & df["pattern_fraction_of_copy"].notna()]
        display(Markdown("The kernels' access patterns alone (fraction of copy), and each kernel's rate over its "
                         "own pattern's (`fraction_of_pattern`: below 1, its per-step work costs the rest):"))
        display(pt.pivot_table(index=["shape", "M"], columns="fmt",
                               values=["pattern_fraction_of_copy", "fraction_of_pattern"]).round(3))
    else:
        display(Markdown("*This device's data predates the access-pattern timing: re-measure to see it.*"))
    peer_report.show_status(dev, peer_tables, peer_ids)
    rec = recorded[dev] = {n: results.load_table(dev, NB, n) for n in ("targets", "versus_best_peer")
                           if dev in results.devices_with(NB, n)}
    if "versus_best_peer" in rec:
        display(Markdown("Each fp8lab format against the fastest peer of the same weight format in the same run "
                         "(time; `own_over_peer` > 1: fp8lab faster; the peer's scales may differ):"))
        display(rec["versus_best_peer"].round(3))
    if "targets" in rec and len(rec["targets"]):
        display(Markdown("Issue 22's decode targets, recorded by the run that measured them. `pattern_value`: the "
                         "same target computed from the kernels' access patterns alone; `limited_by`, for a miss: "
                         f"`{dx.LIMIT_PATTERN}` where the pattern misses the goal too, `{dx.LIMIT_WORK}` where "
                         "it meets it (tables measured before the pattern leave both empty):"))
        display(rec["targets"].round(3))
        draw_targets(rec["targets"], run.info_for(dev, rec["targets"]))
    else:
        display(Markdown("*This device's data predates the recorded targets table: re-measure to judge them.*"))
    display(dx.parity(df).round(4))

if not devs:
    display(Markdown("**No measured decode data in `data/` yet.** Run this notebook on a GPU "
                     "(mode `measure`) to measure it; nothing is recorded in this run."))

# %% [markdown]
# ## Across devices
#
# C4 at M = 1 on every device: effective bandwidth over that device's copy bandwidth. Drawn when
# `data/` holds this notebook's results for two or more devices (`devices` picks them; `[]`: all,
# the one measured in this run first), one colour and marker per device, each against its own
# ceiling so cards of different size compare; saved under `figures/cross-device/`. With one
# device the figures above are the whole story.

# %%
overlay.show_cross_device(NB, devices, run)

# %% [markdown]
# ## Nsight Compute at M = 1: DRAM, issue slots, instructions per element
#
# From the per-opcode counts (thread level, the seed's unit) divided by the K x N weight
# elements; the dequant class is LOP3 / SHF / PRMT / HADD2 / HFMA2 / HMUL2 / FADD / IMAD.SHL /
# SHFL. The black ticks are the static SASS count of the same class in the main loop (one
# iteration, compiled here): executed and static agree when the loop dominates.


# %%
def ncu_tick(arm):
    return registry.short_label(arm).replace(" ", "\n")


def draw_ncu(s, static_df, info, act_of):
    ref = dx.stream_reference(s)
    s = s[s["arm"].isin([*dx.ARMS, *dx.PEER_KERNELS])]     # fp8lab's kernels, cuBLAS, and Marlin where profiled
    # one word per tick line, and room for each kernel (both Marlins add four)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(11, 1.5 * len(s)), 4.2))
    x = np.arange(len(s))
    a1.bar(x - 0.2, s["dram_pct"], 0.4, color="#0072B2", label="DRAM throughput (% of peak)")
    a1.bar(x + 0.2, s["issue_active_pct"], 0.4, color="#E69F00", label="issue slots active (%)")
    if ref is not None:   # C3's yardstick: the best DRAM % a streaming kernel reaches here
        a1.axhline(ref["dram_pct"], color="#0072B2", ls="--", lw=1,
                   label=f"{registry.short_label(ref['arm'])}: {ref['dram_pct']:.0f}% DRAM")
        a1.axhline(dx.C3_OF_STREAM * ref["dram_pct"], color="#0072B2", ls=":", lw=1,
                   label=f"C3 bar: {dx.C3_OF_STREAM:.0%} of it")
    a1.set_xticks(x, [ncu_tick(a) for a in s["arm"]], fontsize=8)
    a1.set_ylabel("percent")
    a1.set_ylim(0, 135)
    a1.legend(fontsize=7, loc="upper left", ncol=2)
    a1.set_title(f"ncu, M = 1, {s['shape'].iloc[0]}")
    deq = s["dequant_inst_per_element"]
    a2.bar(x, deq, color="#D55E00", label="dequant class")
    a2.bar(x, s["inst_per_element"] - deq, bottom=deq, color="#999999", label="everything else")
    if static_df is not None:
        st = static_df[static_df["act"] == act_of]
        sd = st[st["dequant_class"]].groupby("arm")["per_element"].sum()
        for xi, arm in zip(x, s["arm"]):
            if arm in sd:
                a2.plot([xi - 0.35, xi + 0.35], [sd[arm]] * 2, color="black", lw=2)
    a2.set_xticks(x, [ncu_tick(a) for a in s["arm"]], fontsize=8)
    a2.set_ylabel("thread instructions per weight element")
    a2.legend(fontsize=8)
    a2.set_title("executed instr. per element (black: static SASS)")
    plotting.save(fig, info, "decode_ncu_" + s["shape"].iloc[0].replace(":", "_").replace("-", "_").replace(".", "_"))
    plt.show()


ncu_by_dev = {}
for dev in results.devices_with(NB, "ncu_summary"):
    s = results.load_table(dev, NB, "ncu_summary")
    if "warp_factor" not in s:     # recorded before C8's corrections: the model again, what it can show
        sp = spec_sheet.spec_for(s.attrs["meta"].get("device_name", dev)) or spec_sheet.spec_for(dev)
        if sp is not None:
            meta = s.attrs
            s = dx.c8_model(s, sp.sms)
            s.attrs = meta
    st = (results.load_table(dev, NB, "sass_static") if dev in results.devices_with(NB, "sass_static")
          else static)
    ncu_by_dev[dev] = s
    d = tables.get(dev)
    act_of = d.loc[d["arm"] != dx.CUBLAS, "act"].iloc[0] if d is not None else act
    for sn, g in s.groupby("shape"):
        draw_ncu(g.reset_index(drop=True), st, run.info_for(dev, s), act_of)
    display(s[["shape", "arm", "dram_pct", "issue_active_pct", "inst_per_element", "dequant_inst_per_element",
               "issue_predicted_pct", "issue_corrected_pct", "warp_factor", "issue_factor", "active_fraction",
               "sm_clock_hz"] + (["launch"] if "launch" in s else [])].round(3))

# %% [markdown]
# ### Where the warps wait
#
# ncu's warp stall reasons for the same launches: warps waiting for each reason per issued
# instruction, as a share of all warp cycles (their sum is ncu's "warp cycles per issued
# instruction", printed at the right of each bar). `long_scoreboard` is a wait for a global
# load (here the weight stream), `barrier` the CTA barrier of the activation chunk,
# `selected` the cycle of the issue itself, `math_pipe_throttle` a busy tensor / ALU pipe. A
# kernel limited by memory latency shows mostly long_scoreboard with few eligible warps; one
# limited by instruction issue shows selected / not_selected / math_pipe_throttle.

# %%
STALL_COLOURS = {"long_scoreboard": "#0072B2", "barrier": "#E69F00", "wait": "#009E73", "selected": "#CC79A7",
                 "not_selected": "#F0E442", "math_pipe_throttle": "#D55E00", "short_scoreboard": "#56B4E9"}


def draw_stalls(st, info, shape):
    share_cols = [c for c in st.columns if c.startswith("share_")]
    named = [c for c in share_cols if c[len("share_"):] in STALL_COLOURS]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(st) + 1.6))
    y = np.arange(len(st))
    left = np.zeros(len(st))
    for c in named:
        v = st[c].fillna(0).to_numpy()
        ax.barh(y, v, left=left, color=STALL_COLOURS[c[len("share_"):]], label=c[len("share_"):])
        left += v
    ax.barh(y, 1 - left, left=left, color="#BBBBBB", label="other reasons")
    for yi, tot in zip(y, st["cycles_per_issue"]):
        ax.text(1.01, yi, f"{tot:.1f} cyc/issue", va="center", fontsize=8)
    ax.set_yticks(y, [registry.short_label(a) for a in st["arm"]], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.18)
    ax.set_xlabel("share of warp cycles (ncu stall reasons, M = 1)")
    ax.set_title(f"Where the warps wait: {shape}")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    plotting.save(fig, info, "decode_stalls_" + shape.replace(":", "_").replace("-", "_").replace(".", "_"))
    plt.show()


for dev, s in ncu_by_dev.items():
    stalls = dx.stall_table(s)
    if stalls.empty:
        print(f"{dev}: this profile has no stall metrics (collected before notebook 08 asked for them)")
        continue
    for sn, g in stalls.groupby("shape", sort=False):
        draw_stalls(g.reset_index(drop=True), run.info_for(dev, s), sn)
        for _, r in g.iterrows():
            print(f"{dev} {sn} {registry.label(r['arm'])}: {r['cycles_per_issue']:.1f} warp cycles per issued "
                  f"instruction; {r['top']}")

# %% [markdown]
# ## C8: the issue-slot model against ncu, and what it predicts at full bandwidth
#
# Left: the model's issue use (instructions per element x elements per second / (SMs x 4 x
# clock), with ncu's duration and clock) against ncu's issue-active % (filled), and the model
# times the two corrections its definition leaves out, as ncu measured them (hollow, where
# profiled): issued over executed instructions, and elapsed over active cycles (ncu's
# issue-active % is per active cycle, the model per elapsed one). Partial warps (executed warp
# instructions over thread instructions / 32) are what is left; applied as well, the product
# would be ncu's own figure by definition, so they are reported, not applied. Right: the model at the
# copy bandwidth measured here and the card's boost clock, with our measured instructions per
# element and with the seed's 3.66 for NVFP4: the share of issue slots full-speed decode needs.

# %%
def draw_c8(s, copy_Bps, spec, info):
    s = s[s["arm"].isin(list(wo.FORMAT_OF_ARM))]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11.5, 3.8), gridspec_kw=dict(wspace=0.55))
    seen = set()
    for _, r in s.iterrows():
        c = plotting.color(r["arm"])
        a1.scatter(r["issue_active_pct"], r["issue_predicted_pct"], color=c, s=40,
                   label=None if r["arm"] in seen else registry.label(r["arm"]))
        seen.add(r["arm"])
        if np.isfinite(r.get("issue_corrected_pct", np.nan)):
            a1.scatter(r["issue_active_pct"], r["issue_corrected_pct"], facecolors="none", edgecolors=c, s=40)
            a1.plot([r["issue_active_pct"]] * 2, [r["issue_predicted_pct"], r["issue_corrected_pct"]], color=c, lw=0.6)
    if "issue_corrected_pct" in s and s["issue_corrected_pct"].notna().any():
        a1.scatter([], [], facecolors="none", edgecolors="#555555", label="model x measured corrections")
    hi = [s["issue_active_pct"].max(), s["issue_predicted_pct"].max()]
    if "issue_corrected_pct" in s and s["issue_corrected_pct"].notna().any():
        hi.append(s["issue_corrected_pct"].max())
    lim = max(hi) * 1.15
    a1.plot([0, lim], [0, lim], color="#555555", lw=0.8, ls="--")
    a1.fill_between([0, lim], [0, lim * (1 - dx.C8_AGREE)], [0, lim * (1 + dx.C8_AGREE)], color="#dddddd", lw=0,
                    label=f"within {dx.C8_AGREE:.0%} (C8 bar)")
    a1.set_xlim(0, lim)
    a1.set_ylim(0, lim)
    a1.set_xlabel("ncu issue slots active (%)")
    a1.set_ylabel("model prediction (%)")
    a1.legend(fontsize=8)
    a1.set_title("C8: model vs ncu, M = 1")
    rows = []
    for _, r in s.iterrows():
        eps = copy_Bps / wo.bytes_per_element(r["fmt"])
        need = rl.issue_slot_utilisation(r["inst_per_element"], eps, spec.sms, spec.clock_hz)
        rows.append((f"{registry.short_label(r['arm'])} ({r['shape'].split(':')[0]})", 100 * need, r["arm"]))
    eps = copy_Bps / rl.NVFP4_BYTES_PER_ELEMENT
    rows.append(("NVFP4 at the seed's 3.66", 100 * rl.issue_slot_utilisation(
        rl.SEED003_C8["nvfp4_instr_per_element"], eps, spec.sms, spec.clock_hz), "seed"))
    y = np.arange(len(rows))
    a2.barh(y, [r[1] for r in rows], color=["#777777" if r[2] == "seed" else plotting.color(r[2]) for r in rows])
    for yi, r in zip(y, rows):
        a2.text(r[1] + 1, yi, f"{r[1]:.0f}%", va="center", fontsize=8)
    a2.set_yticks(y, [r[0] for r in rows], fontsize=8)
    a2.axvline(100, color="#555555", lw=0.8, ls="--")
    a2.set_xlabel(f"issue slots needed at {copy_Bps / 1e12:.2f} TB/s, {spec.boost_clock_mhz:.0f} MHz (%)")
    a2.set_title(f"the model on {spec.name}")
    plotting.save(fig, info, "decode_c8")
    plt.show()
    return pd.DataFrame(rows, columns=["arm", "issue_needed_pct", "key"])


c8_full = {}
for dev, s in ncu_by_dev.items():
    df = tables.get(dev)
    spec = spec_sheet.spec_for(s.attrs["meta"].get("device_name", dev)) or spec_sheet.spec_for(dev)
    if df is None or spec is None:
        continue
    c8_full[dev] = draw_c8(s, float(df["copy_Bps"].iloc[0]), spec, run.info_for(dev, s))

# %% [markdown]
# ## Verdicts and what the numbers say
#
# Computed from the measured tables (never typed); each row names its subject (`analogue`:
# fp8lab's kernels; `seed`: Marlin) and the rule that decided it. C3 needs the ncu profile: its
# DRAM half is judged against the streaming kernel profiled beside the GEMVs.

# %%
for dev, df in tables.items():
    s = ncu_by_dev.get(dev)
    st = results.load_table(dev, NB, "sass_static") if dev in results.devices_with(NB, "sass_static") else static
    model = s if s is not None and "issue_predicted_pct" in s else None
    act_of = df.loc[df["arm"] != dx.CUBLAS, "act"].iloc[0]   # the dtype that run measured
    pmeas = peer_report.measured(peer_tables.get(dev))
    marlin_rows = pmeas[pmeas["arm"].astype(str).isin(dx.MARLIN_ARMS)] if len(pmeas) else df.iloc[:0]
    with_marlin = pd.concat([df, marlin_rows], ignore_index=True)
    # C3, C4 and C5 judge Marlin's rows (timed, and profiled with ncu beside fp8lab's kernels)
    # by the same rules as fp8lab's kernels
    verdicts = (dx.c3_verdicts(with_marlin, s) + dx.c4_verdicts(with_marlin) + dx.c5_verdicts(s, st, act_of)
                + [dx.c8_verdict(model)])
    for v in claims.record_if_measured(run, dev, verdicts):
        display(Markdown(claims.markdown(v, dev)))
    meta = df.attrs["meta"]
    m1 = df[(df["M"] == 1) & (df["arm"] != dx.CUBLAS)]
    cb = df[(df["M"] == 1) & (df["arm"] == dx.CUBLAS)]
    tg = recorded.get(dev, {}).get("targets")
    clk = (meta.get("extra") or {}).get("clocks") or {}
    text = (f"**{meta.get('device_name', dev)}** ({str(meta.get('time', ''))[:10]}): copy bandwidth "
            f"{df['copy_Bps'].iloc[0] / 1e12:.2f} TB/s. At M = 1 the weight-only kernels stream "
            f"{m1['bw_p50'].min() / 1e12:.2f}-{m1['bw_p50'].max() / 1e12:.2f} TB/s "
            f"({m1['fraction_of_copy'].min():.0%}-{m1['fraction_of_copy'].max():.0%} of copy); cuBLAS BF16 "
            f"{cb['bw_p50'].min() / 1e12:.2f}-{cb['bw_p50'].max() / 1e12:.2f} TB/s.")
    if tg is not None and len(tg):
        by = tg.groupby("target", sort=False)["met"].agg(["sum", "size"])
        text += " Issue 22's targets met: " + "; ".join(f"{k} {int(r['sum'])} of {int(r['size'])}"
                                                          for k, r in by.iterrows()) + "."
    if s is not None:
        nv = s[s["fmt"] == "nvfp4"]
        if len(nv):
            text += (f" NVFP4 executes {nv['inst_per_element'].iloc[0]:.2f} instructions per element "
                     f"({nv['dequant_inst_per_element'].iloc[0]:.2f} of them dequant) and keeps "
                     f"{nv['issue_active_pct'].iloc[0]:.0f}% of the issue slots busy at M = 1.")
        stl = dx.stall_table(s)
        if not stl.empty and {"share_long_scoreboard", "share_barrier"} <= set(stl.columns):
            w, c = stl[stl["arm"] != dx.CUBLAS], stl[stl["arm"] == dx.CUBLAS]
            text += (f" Where their warps wait (ncu): {w['share_long_scoreboard'].min():.0%}-"
                     f"{w['share_long_scoreboard'].max():.0%} of warp cycles on a load (long_scoreboard), "
                     f"{w['share_barrier'].min():.0%}-{w['share_barrier'].max():.0%} at the activation "
                     f"barrier, {w['cycles_per_issue'].min():.1f}-{w['cycles_per_issue'].max():.1f} warp cycles "
                     "per issued instruction")
            if len(c):
                text += (f"; cuBLAS BF16 {c['share_long_scoreboard'].min():.0%}-{c['share_long_scoreboard'].max():.0%} "
                         f"on loads at {c['cycles_per_issue'].min():.0f}-{c['cycles_per_issue'].max():.0f} cycles per "
                         "instruction (few instructions, many bytes in flight each)")
            text += "."
    if clk.get("sm_mhz_median"):
        text += f" SM clock median {clk['sm_mhz_median']:.0f} MHz during the sweep."
    display(Markdown(text))
