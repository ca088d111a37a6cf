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
# # Compute headroom of weight-only decode: SM clock, locked or emulated
#
# Seed 003 (section 4.3) locked the SM clock of an RTX 3090 and measured M = 1 bandwidth:
#
# - **C6**: at >= 1200 MHz the weight-only kernels' bandwidth does not change; at 900 MHz the
#   4-bit formats lose 15-16%, while cuBLAS BF16 (no dequant) loses 16% at 1200 MHz and 36% at
#   900 MHz.
#
# Locking clocks needs root and changes a shared card for everyone, so here it is **opt-in**
# (`lock_clocks`, a list of SM MHz, used only on a machine you own: `fp8lab.measure.clocks.locked_clocks`
# resets the clocks on exit, error, interrupt and SIGTERM). **By default nothing is locked**:
# the notebook *emulates* a lower clock. The EXTRA_ALU variants of the fp8 decode kernel
# (`gemv_w8a16_fp8_xalu<k>`) issue k extra dependent integer instructions per weight element
# while reading the same bytes; by seed 003's issue-slot model a kernel needing I_k instructions
# per element at clock f is as short of issue slots as the plain kernel (I_0) at
# f_eq = f I_0 / I_k, measured as f (u_0/B_0) / (u_k/B_k) from ncu's issue-active % u and the
# bandwidth B. Where the bandwidth leaves its plateau (the knee: 2% below k = 0, the seed's
# "unchanged"), the compute headroom ends.
# The emulation is *in kind*: a real lower clock also slows address math, L2 and the mma.

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
lock_clocks = []  # SM MHz to lock, e.g. [1980, 1500, 1200, 900]: ONLY on a machine you own (needs root)
extra_alu = [0, 1, 2, 4, 8, 16]  # extra dependent integer instructions per weight element (built: 0, 1, 2, 4, 8, 16)
shape = "llama3-70b:down_proj"  # fp8lab.facts.shapes name (one large decode GEMM)
ncu = True  # Nsight Compute issue-active % per k (measure mode only)
rep_ms = 40  # timing budget per arm, milliseconds of graph replays
seed = 0
peers = "all"  # weight-only peers (fp8lab.peers; Marlin is seed 003's own subject) timed in the locked-clock sweep only: "all", a list of ids, or []
devices = []  # device keys (data/ folders, e.g. ["h200", "l4"]) to overlay; []: every device with data

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from fp8lab.report import claims, plotting, results
from fp8lab.experiments import notebook, overlay
from fp8lab.measure import clocks
from fp8lab.report.excerpts import excerpt
from fp8lab.arms import registry
from fp8lab.experiments import gemv_sass as gs, headroom as hr
from fp8lab.kernels import weight_only as wo
from fp8lab.toolchain.tools import have_tool
from fp8lab.peers import sweeps as peer_sweeps

NB = "10_clock_sweep"
run = notebook.start(NB, params=dict(lock_clocks=list(lock_clocks), extra_alu=list(extra_alu), shape=shape,
                                     ncu=ncu, rep_ms=rep_ms, seed=seed, peers=peers), mode=mode, devices=devices)
peer_ids = peer_sweeps.resolve(peers, "10")  # a typo fails here, before any measuring

# %% [markdown]
# ## The knob: a chain the compiler must keep
#
# Each weight word (4 fp8 elements) passes through 4k alternating XOR / IADD instructions with a
# runtime `salt` that the host sets to 0: the word, and so the output, is unchanged bit for bit,
# but neither the front end nor ptxas can prove it, and alternating the two ops keeps ptxas
# from fusing neighbours into one LOP3 / IADD3.

# %%
print(excerpt(wo.HEADER, "alu_chain"))

# %% [markdown]
# Compiled here for sm_90: the main loop's instructions per weight element. k = 0 must be the
# regular kernel instruction for instruction; each k must add about k integer instructions
# per element.

# %%
static = None
if have_tool("nvcc") and have_tool("cuobjdump"):
    static = gs.xalu_sass_counts("sm_90")
    sw = static[static["extra_alu"].notna()].sort_values("extra_alu")
    assert bool(sw.iloc[0]["same_as_base"]), "EXTRA_ALU k=0 is not the regular kernel's SASS"
    extra_int = sw["int_per_element"] - sw.iloc[0]["int_per_element"]
    assert (extra_int[sw["extra_alu"] > 0] >= 0.9 * sw.loc[sw["extra_alu"] > 0, "extra_alu"]).all()
    display(static.drop(columns=["kernel", "arch"]).round(2))
else:
    display(Markdown("*nvcc / cuobjdump not found: the SASS check is skipped.*"))

# %% [markdown]
# ## Measure
#
# Only in measure mode, on a GPU. Every k is checked bit for bit against k = 0, and k = 0
# against float64 and against the regular kernel; M = 1, weights rotated over more than the L2,
# CUDA-graph replays, an NVML sampler beside (the clocks the card really ran), then ncu over
# the k levels. With `lock_clocks` (your machine only), seed 003's experiment itself runs as
# well: the four weight-only kernels and cuBLAS BF16 at M = 1, the W8A16 prefill arms and cuBLAS
# BF16 at M = 8192, and the weight-only peers in `peers` (Marlin, the seed's subject, among
# them) at both points, unlocked and at each clock; a clock that could not be locked is logged
# and not measured, and a peer that is missing or fails its check has no row.

# %%
if run.mode == "measure":
    import torch

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    lock_log, locked = [], None
    with clocks.ClockSampler(uuid=uuid, interval_s=0.02) as sampler:
        parts = [hr.measure_headroom(shape, extra_alu, rep_ms=rep_ms, seed=seed, sampler=sampler)]
        if lock_clocks:
            # seed 003's own experiment, on a machine you own: the four weight-only kernels and
            # cuBLAS BF16 at M = 1 and at prefill, per locked clock (reset on exit / error / signal)
            locked, lock_log = hr.locked_sweep(lock_clocks, decode_shape=shape, rep_ms=rep_ms, seed=seed,
                                               sampler=sampler, peers=peer_ids)
    sweep = pd.concat(parts, ignore_index=True)
    assert (sweep["check_relerr"] < 1e-2).all()
    assert (sweep["bw_p20"] <= sweep["bw_p50"]).all() and (sweep["bw_p50"] <= sweep["bw_p80"]).all()
    if ncu and have_tool("ncu"):
        from fp8lab.paths import cache_dir

        nc = hr.profile_headroom(shape, cache_dir("ncu") / f"headroom_{shape.replace(':', '_')}",
                                 extra_alu=extra_alu, seed=seed)
        assert nc["issue_active_pct"].between(0, 100).all()
        sweep = sweep.merge(nc, on="extra_alu", how="left")
    sweep = hr.add_equivalent_clock(sweep, static=static)
    has_locked = locked is not None and (locked["lock_status"] == "locked").any()
    if has_locked:
        assert (locked["check_relerr"] < 1e-2).all()
    # every check passed: only now does anything reach data/
    run.write_table("sweep", sweep, meta={"clocks": sampler.summary(), "locks": lock_log,
                                          "ncu": bool(ncu and have_tool("ncu"))})
    if has_locked:
        run.write_table("locked", locked, meta={"clocks": sampler.summary(), "locks": lock_log})
    if static is not None:
        run.write_table("sass_xalu", static)

# %% [markdown]
# ## Bandwidth against k, against the equivalent clock, and against real locked clocks
#
# Left: M = 1 effective bandwidth (weights + scales over time) per k, cuBLAS BF16 as a dashed
# reference. Middle: the same points as a change relative to k = 0 against the *equivalent* SM
# clock (emulated: extra issue work, the card ran at its own clock), with the interpolated knee
# where the change first crosses the 2% bar (grey band). Right, on a separate axis: *real*
# locked SM clocks: seed 003's table (RTX 3090) and ours where clocks were locked (opt-in; never
# on a shared card).

# %%
# the seed's rows in the colours of our kernels of the same kind (registry colours, no new ones)
SEED_STYLE = {"4-bit (nvfp4, int4)": dict(color=plotting.color(wo.ARMS["nvfp4"]), marker="s"),
              hr.CUBLAS: dict(color=plotting.color(hr.CUBLAS), marker="D")}
SEED_LABEL = {hr.CUBLAS: registry.label(hr.CUBLAS)}


def draw(df, info, lk=None):
    rep = df["repeat"].fillna(0) > 0 if "repeat" in df else pd.Series(False, index=df.index)
    sw = df[(df["arm"] == hr.ARM) & (df["lock_status"] == "not requested") & ~rep].sort_values("extra_alu")
    cb = df[(df["arm"] == hr.CUBLAS) & (df["lock_status"] == "not requested")]
    fig, (a0, a1, a2) = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw=dict(wspace=0.32, width_ratios=[1, 1.1, 0.9]))
    a0.errorbar(sw["extra_alu"], sw["bw_p50"] / 1e12, yerr=[(sw["bw_p50"] - sw["bw_p20"]) / 1e12,
                                                          (sw["bw_p80"] - sw["bw_p50"]) / 1e12],
                marker="o", capsize=2, color=plotting.color(wo.ARMS["fp8"]), label="W8A16 FP8 + k extra ALU")
    if len(cb):
        a0.axhline(cb["bw_p50"].iloc[0] / 1e12, ls="--", color=plotting.color(hr.CUBLAS), label="cuBLAS BF16 (k n/a)")
    if "issue_active_pct" in sw and sw["issue_active_pct"].notna().any():
        for _, r in sw.iterrows():
            a0.annotate(f"{r['issue_active_pct']:.0f}% issue", (r["extra_alu"], r["bw_p50"] / 1e12),
                        textcoords="offset points", xytext=(4, 6), fontsize=7)
    a0.set_xlabel("k: extra dependent integer instructions per weight element")
    a0.set_ylabel("M=1 effective bandwidth (TB/s)")
    a0.set_ylim(0, None)
    a0.legend(fontsize=8, loc="lower left")
    a0.set_title(f"{sw['shape'].iloc[0]}, M = 1")

    bar = hr.FLAT_BAR
    base = float(sw.loc[sw["extra_alu"] == 0, "bw_p50"].iloc[0])
    for ax in (a1, a2):
        ax.axhspan(-bar, bar, color="#dddddd", alpha=0.6, lw=0, label=f"within {bar:.0%} ('unchanged')")
        ax.axvline(hr.SEED_C6_HEADROOM_MHZ, ls="--", color="#888888", lw=1)
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.0%}"))
    if sw["eq_clock_mhz"].notna().all():
        a1.plot(sw["eq_clock_mhz"], sw["bw_p50"] / base - 1, marker="o", color=plotting.color(wo.ARMS["fp8"]),
                label=f"fp8 + k extra ALU ({sw['eq_source'].iloc[0]})")
        for _, r in sw.iterrows():
            a1.annotate(f"k={int(r['extra_alu'])}", (r["eq_clock_mhz"], r["bw_p50"] / base - 1),
                        textcoords="offset points", xytext=(4, 4), fontsize=7)
        knee = hr.find_knee(df)
        if knee["knee_clock_interp_mhz"] is not None:
            a1.plot([knee["knee_clock_interp_mhz"]], [-bar], marker="x", ms=9, mew=2, color="#D55E00", ls="none",
                    label=f"first -{bar:.0%}: {knee['knee_clock_interp_mhz']:.0f} MHz-eq")
    a1.text(hr.SEED_C6_HEADROOM_MHZ, 0.02, f" {hr.SEED_C6_HEADROOM_MHZ:.0f}: seed's\n flat limit", fontsize=7,
            color="#555555", transform=a1.get_xaxis_transform())
    a1.set_xlabel("EMULATED SM clock (MHz-equivalent; card at its own clock)")
    a1.set_ylabel("bandwidth change vs k = 0")
    a1.invert_xaxis()
    a1.legend(fontsize=7, loc="lower left")
    a1.set_title("C6 emulated: extra issue work per byte")

    for arm, g in hr.SEED_C6_TABLE.groupby("arm"):
        a2.plot(g["sm_mhz"], g["change"], ls=":", label=f"seed 003, RTX 3090: {SEED_LABEL.get(arm, arm)}",
                **SEED_STYLE.get(arm, {}))
    if lk is not None:
        d1 = lk[(lk["lock_status"] == "locked") & (lk["phase"] == "decode")]
        for arm, g in d1.groupby("arm"):
            g = g.sort_values("lock_mhz")
            style = dict(registry.PEER_STYLE) if registry.is_peer(arm) else dict(marker="^", ls="-")
            a2.plot(g["lock_mhz"], g["change_vs_unlocked"], color=plotting.color(arm), **style,
                    label=f"{'peer' if registry.is_peer(arm) else 'ours'}, locked: {registry.short_label(arm)}")
    else:
        a2.text(0.5, 0.5, "no SM clock locked here\n(opt-in, own machine only)", transform=a2.transAxes,
                ha="center", va="center", fontsize=8, color="#555555")
    a2.set_xlabel("REAL locked SM clock (MHz)")
    a2.set_ylabel("bandwidth change vs unlocked")
    a2.invert_xaxis()
    if lk is not None and len(a2.get_legend_handles_labels()[1]) > 5:
        # a locked sweep draws a line per kernel (peers too): the legend goes beside the panel
        a2.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), borderaxespad=0)
    else:
        a2.legend(fontsize=7, loc="lower left")
    a2.set_title("C6 locked: real clocks")
    plotting.save(fig, info, "headroom")
    plt.show()


tables = results.by_device(NB, "sweep")
locked_tables = results.by_device(NB, "locked")
for dev, df in tables.items():
    draw(df, run.info_for(dev, df), locked_tables.get(dev))
notebook.say_if_no_data(tables, "to sweep the EXTRA_ALU kernels")

# %% [markdown]
# ## Across devices
#
# The EXTRA_ALU sweep on every device: M = 1 bandwidth relative to k = 0 on the same device.
# Drawn when `data/` holds this notebook's results for two or more devices (`devices` picks them;
# `[]`: all, the one measured in this run first), one colour and marker per device, each against
# its own ceiling so cards of different size compare; saved under `figures/cross-device/`. With
# one device the figures above are the whole story.

# %%
overlay.show_cross_device(NB, devices, run)

# %% [markdown]
# ## Verdict (C6)
#
# From measured data only, three rows: two about fp8lab's kernels (`analogue`), one about Marlin,
# the seed's subject (`seed`, locked clocks only: no extra work can be put into another library's
# kernel, so it has no emulated row). The emulated
# sweep: holds-in-kind when the bandwidth stays within 2% of k = 0 (the seed's "unchanged") at
# every equivalent clock down to the seed's 1200 MHz, the knee interpolated where it crosses
# -2%; differs when it crosses above 1200 MHz; not judged when the run's own spread (p20-p80 and a
# repeat of k = 0 at the end) cannot resolve 2%. The locked-clock row comes from a real locked
# sweep (your machine, `lock_clocks`), else it is not-run and says why; so does the Marlin row, by
# the same rule over the Marlin kernels measured (vLLM's FP8 vs INT8 Marlin as its FP vs INT pair).

# %%
for dev, df in tables.items():
    meta = df.attrs.get("meta", {})
    locks = meta.get("locks") or []
    ok = [x for x in locks if x.get("status") == "locked"]
    if not locks:
        locked = hr.LOCK_NOT_RUN
    elif not ok:
        locked = ("locked-clock sweep not run (locking requested but "
                  + ", ".join(sorted({x["status"] for x in locks})) + ")")
    else:
        locked = "locked-clock sweep ran at " + ", ".join(f"{x['sm_mhz']:.0f}" for x in ok) + " MHz (see figure)"
    lk = locked_tables.get(dev)
    if lk is not None:
        display(hr.locked_table(lk).style.format("{:+.1%}"))
    verdicts = hr.c6_verdicts(df, lk, locked=locked)
    for v in claims.record_if_measured(run, dev, verdicts):
        display(Markdown(claims.markdown(v, dev)))
    rep = df["repeat"].fillna(0) > 0 if "repeat" in df else pd.Series(False, index=df.index)
    sw = df[(df["arm"] == hr.ARM) & (df["lock_status"] == "not requested") & ~rep]
    knee = hr.find_knee(df)
    noise = hr.sweep_noise(df)
    text = (f"**{dev}**: at k = 0 the fp8 kernel reads {knee['base_bw'] / 1e12:.2f} TB/s; "
            + (f"the bandwidth first drops more than {hr.FLAT_BAR:.0%} at k = {knee['knee_extra_alu']}"
               + (f", crossing -{hr.FLAT_BAR:.0%} at {knee['knee_clock_interp_mhz']:.0f} MHz-equivalent (interpolated)"
                  if knee["knee_clock_interp_mhz"] else "")
               if knee["knee_extra_alu"] is not None else
               f"it stays within {hr.FLAT_BAR:.0%} up to k = {int(sw['extra_alu'].max())}")
            + f"; run-to-run spread {noise['noise']:.2%}.")
    # the clocks NVML saw while each point was timed (the run-wide summary includes idle gaps)
    if sw["sm_mhz_median"].notna().any():
        text += (f" NVML while timing: SM clock median {sw['sm_mhz_median'].median():.0f} MHz "
                 f"(lowest point median {sw['sm_mhz_median'].min():.0f}, lowest sample {sw['sm_mhz_min'].min():.0f}), "
                 f"memory {sw['mem_mhz_median'].median():.0f} MHz, power up to {sw['power_w_max'].max():.0f} W.")
    display(Markdown(text))
