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
# # Weight-only prefill against cuBLAS BF16; W8A8 vs W8A16 vs BF16
#
# Seed 003 (RTX 3090) claims:
#
# - **C7**: at prefill (M = 8192) the weight-only GEMM runs at 95-97% of cuBLAS BF16 at the
#   same clock; cuBLAS reaches ~99% of the spec's TFLOPS per GHz.
# - **C9**: W8A8 doubles the compute ceiling of prefill (FP4 x4); at decode, quantising
#   activations does not help and can be slower.
#
# Five arms on one Llama-style layer across M: cuBLAS BF16 (`torch.mm`), two W8A16 kernels
# (fp8lab's mma.sync decode kernel `gemv_w8a16_fp8`, and `triton_w8a16`, which turns e4m3 codes
# into bf16 inside the K loop and feeds `tl.dot`, wgmma on Hopper), and two W8A8 kernels
# (cuBLASLt's blockwise FP8 and fp8lab's Triton blockwise kernel), the W8A8 ones also with the
# 1x128 activation quantisation added. "At the same clock" is TFLOP/s divided by the SM clock
# NVML sampled during each measurement: under GEMM load the SM clock can differ from kernel to
# kernel (the table's `sm_mhz_median` shows by how much in each run).
#
# Without a GPU this notebook redraws what earlier runs measured.

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
shape_name = "llama3-70b:o_proj"  # fp8lab.facts.shapes name (N = K = 8192)
Ms = [1, 64, 1024, 8192]  # tokens; the full sweep: [1, 4, 16, 64, 256, 1024, 4096, 8192]
arms = ["cublas_bf16", "gemv_w8a16_fp8", "triton_w8a16", "cublaslt_blockwise", "triton_blockwise"]
rep_ms = 100  # timing repetition time per (M, arm), milliseconds
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
from fp8lab.report.excerpts import excerpt
from fp8lab.arms import registry
from fp8lab.experiments import prefill as px
from fp8lab.kernels import triton_w8a16 as tw
from fp8lab.peers import report as peer_report, sweeps as peer_sweeps

NB = "11_prefill"
run = notebook.start(NB, params=dict(shape_name=shape_name, Ms=Ms, arms=arms, rep_ms=rep_ms, seed=seed,
                                     peers=peers), mode=mode, devices=devices)
peer_ids = peer_sweeps.resolve(peers, "11")  # a typo fails here, before any measuring

# %% [markdown]
# ## The key idea: dequantise in the K loop, multiply in 16 bits
#
# No mma takes bf16 x e4m3, so a W8A16 GEMM converts each weight tile to bf16 before its
# `tl.dot`: two masks, two shifts and an or put the e4m3 bits into bf16's fields (the value
# comes out 2^120 too small, and the folded group scale multiplies that back), then one bf16
# multiply applies the scale. On Hopper the dot is a bf16 wgmma (HGMMA): the FP8 tensor cores
# are never used by a weight-only kernel.

# %%
print(excerpt(tw.__file__, "w8a16_main_loop"))

# %% [markdown]
# ## Measure
#
# Only in measure mode, on a GPU. Each arm is checked against float64 (4 rows) before it is
# timed; CUDA events with L2 flushed, p20 / p50 / p80; NVML clocks sampled beside.

# %%
if run.mode == "measure":
    import torch

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    with clocks.ClockSampler(uuid=uuid, interval_s=0.01) as sampler:
        sweep = px.measure_prefill(shape_name, Ms, arms, rep_ms=rep_ms, seed=seed, sampler=sampler)
        # the peers on the same shape and Ms, the same way (a missing one: a not-run row)
        peer_sweep = peer_sweeps.prefill(shape_name, Ms, peer_ids, rep_ms=rep_ms, seed=seed, sampler=sampler)
    clock_summary = sampler.summary()
    assert (sweep["check_relerr"] < 1e-2).all()
    assert (sweep["tflops_p20"] <= sweep["tflops_p50"]).all() and (sweep["tflops_p50"] <= sweep["tflops_p80"]).all()
    # faster than the FP8 datasheet would be a timing or counting bug
    assert (sweep["tflops_p50"] < 2000).all(), sweep[["arm", "M", "tflops_p50"]]
    pm = peer_report.measured(peer_sweep)
    assert (pm["check_relerr"] < 1e-2).all() and (pm["tflops_p50"] < 2000).all(), pm
    run.write_table("prefill", sweep, meta={"clocks": clock_summary, "quantiser": sweep.attrs["quantiser"]})
    if len(peer_sweep):
        run.write_table("peers", peer_sweep, meta={"clocks": clock_summary})
    # fp8lab's W8A16 arms against the best weight-only peer of this run at every M (TFLOP/s)
    versus = peer_report.versus_best_peer(sweep, peer_sweep, list(px.W8A16_ARMS), keys=("M",), metric="tflops_p50")
    if len(versus):
        run.write_table("versus_best_peer", versus, meta={"clocks": clock_summary})
    display(sweep[["M", "arm", "time_p50_s", "tflops_p50", "sm_mhz_median", "tflops_per_ghz", "config"]].round(3))

# %% [markdown]
# ## TFLOP/s across M, and per GHz at prefill
#
# Left: TFLOP/s (p50, bars p20-p80) against M for every arm; dashed: the W8A8 arms with the
# activation quantisation added. Right: at the largest M, TFLOP/s per GHz of SM clock (the
# sampled median during each arm's measurement), beside the spec's BF16 TFLOP/s per GHz: SMs x
# dense BF16 FLOP per clock, i.e. the datasheet's figure over the clock it assumes (on an H200
# 989.5 TFLOP/s / (132 x 4096 FLOP/clk) = 1.83 GHz, not the 1.98 GHz boost). The peers measured
# at that M are the open hatched bars: the original Marlin among them is C7's seed subject.

# %%
def draw(df, info, peer=None):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 4.6), gridspec_kw=dict(wspace=0.75, width_ratios=[1, 1]))
    for arm in px.ARMS:
        for wq in (False, True):
            d = df[(df["arm"] == arm + ("+quant" if wq else "")) & (df["with_quant"] == wq)].sort_values("M")
            if d.empty:
                continue
            c = plotting.color(arm)
            a1.errorbar(d["M"], d["tflops_p50"], yerr=[d["tflops_p50"] - d["tflops_p20"],
                                                       d["tflops_p80"] - d["tflops_p50"]],
                        marker="o", ms=4, capsize=2, color=c, ls="--" if wq else "-",
                        label=registry.label(arm + ("+quant" if wq else ""), with_scheme=True))
    # other people's kernels (fp8lab.peers), dash-dotted with open diamonds
    peer_report.draw(a1, peer, "M", "tflops_p50", lo="tflops_p20", hi="tflops_p80")
    a1.set_xscale("log", base=2)
    ms = sorted(df["M"].unique())
    a1.set_xticks(ms, [str(m) for m in ms])
    a1.set_yscale("log")
    a1.set_xlabel("M (tokens)")
    a1.set_ylabel("TFLOP/s (p50)")
    a1.set_title(f"{df['shape'].iloc[0]} (N={df['N'].iloc[0]}, K={df['K'].iloc[0]})")
    # below the axes, not over the lines (they fill the panel from corner to corner)
    a1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    M = df["M"].max()
    d = df[(df["M"] == M) & (~df["with_quant"])].set_index("arm").reindex([a for a in px.ARMS if a in set(df["arm"])])
    # the peers measured at this M (Marlin is C7's seed subject), open hatched bars below fp8lab's
    pm = peer_report.measured(peer)
    pm = pm[pm["M"] == M].set_index("arm") if len(pm) else pm
    n_own = len(d)
    d = pd.concat([d, pm[[c for c in d.columns if c in pm.columns]]]) if len(pm) else d
    y = np.arange(len(d))
    own = y < n_own
    a2.barh(y[own], d["tflops_per_ghz"][own], color=[plotting.color(a) for a in d.index[own]])
    if (~own).any():
        a2.barh(y[~own], d["tflops_per_ghz"][~own], color="white", hatch="///",
                edgecolor=[plotting.color(a) for a in d.index[~own]])
    for yi, (a, r) in zip(y, d.iterrows()):
        a2.text(r["tflops_per_ghz"] + 5, yi, f"{r['tflops_per_ghz']:.0f} ({r['tflops_p50']:.0f} TFLOP/s at "
                f"{r['sm_mhz_median']:.0f} MHz)", va="center", fontsize=7)
    spec, spec_clk = px.table_spec_per_ghz(df)
    if np.isfinite(spec):
        a2.axvline(spec, color="#555555", ls="--", lw=1,
                   label=f"spec BF16: {spec:.0f} TFLOP/s per GHz" + (f" (datasheet at {spec_clk:.2f} GHz)"
                                                                     if np.isfinite(spec_clk) else ""))
    a2.set_yticks(y, [registry.label(a, with_scheme=True) for a in d.index], fontsize=8)
    a2.set_xlabel(f"TFLOP/s per GHz of SM clock at M = {M}")
    a2.set_xlim(0, np.nanmax([d["tflops_per_ghz"].max(), spec]) * 1.6)
    a2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    a2.set_title("C7: at the same clock")
    plotting.save(fig, info, "prefill_tflops",
                  footnote_extra=peer_report.COMPARABLE_NOTE if len(peer_report.measured(peer)) else None)
    plt.show()


tables = results.by_device(NB, "prefill")
notebook.say_if_no_data(tables, "to time the prefill arms")
peer_tables = results.by_device(NB, "peers")
for dev, df in tables.items():
    draw(df, run.info_for(dev, df), peer_tables.get(dev))
    if peer_report.show_status(dev, peer_tables, peer_ids) and dev in results.devices_with(NB, "versus_best_peer"):
        # fp8lab's W8A16 arms against the best weight-only peer of the same run (TFLOP/s, > 1: ahead),
        # as that run recorded it
        display(Markdown("fp8lab's best W8A16 arm against the best weight-only peer of the same run "
                         "(TFLOP/s; `own_over_peer` > 1: fp8lab ahead):"))
        display(results.load_table(dev, NB, "versus_best_peer").round(3))
    display(px.best_by_scheme(df, with_quant=True)[["M", "scheme", "arm", "time_p50_s", "tflops_p50"]].round(3))

# %% [markdown]
# ## Across devices
#
# Each arm against cuBLAS BF16 on the same device over M, and TFLOP/s per GHz against that
# device's spec sheet at the largest M. Drawn when `data/` holds this notebook's results for two
# or more devices (`devices` picks them; `[]`: all, the one measured in this run first), one
# colour and marker per device, each against its own ceiling so cards of different size compare;
# saved under `figures/cross-device/`. With one device the figures above are the whole story.

# %%
overlay.show_cross_device(NB, devices, run)

# %% [markdown]
# ## Verdicts and what the numbers say

# %%
for dev, df in tables.items():
    # C7's seed row: the original Marlin's rows of the peers table (timed beside cuBLAS in this
    # run), judged by the rule of fp8lab's own W8A16 arms
    pmeas = peer_report.measured(peer_tables.get(dev))
    marlin = pmeas[pmeas["arm"].astype(str).str.startswith(px.MARLIN_PREFIX)] if len(pmeas) else df.iloc[:0]
    with_marlin = pd.concat([df, marlin], ignore_index=True) if len(marlin) else df
    with_marlin.attrs = df.attrs
    verdicts = px.c7_verdicts(with_marlin) + [px.c9_verdict(df)]
    for v in claims.record_if_measured(run, dev, verdicts):
        display(Markdown(claims.markdown(v, dev)))
    t = px.c7_table(df)
    b = px.best_by_scheme(df, with_quant=True)
    lo, hi = b["M"].min(), b["M"].max()
    fast = b[b["M"] == lo].sort_values("time_p50_s").iloc[0]
    top = b[b["M"] == hi].sort_values("time_p50_s").iloc[0]
    meta = df.attrs["meta"]
    text = (f"**{meta.get('device_name', dev)}** ({str(meta.get('time', ''))[:10]}): at M = {lo} the fastest "
            f"scheme is {fast['scheme']} ({fast['arm']}, {fast['time_p50_s'] * 1e6:.1f} us); at M = {hi} it is "
            f"{top['scheme']} ({top['arm']}, {top['tflops_p50']:.0f} TFLOP/s).")
    if t:
        text += (f" The best W8A16 kernel ({t['best_w8a16']}) runs at {t['ratio']:.0%} of cuBLAS BF16 per GHz "
                 f"({t['ratio_raw']:.0%} in plain TFLOP/s), and cuBLAS at {t['cublas_of_spec']:.0%} of the spec "
                 f"sheet's BF16 TFLOP/s per GHz ({t['spec_per_ghz']:.0f}).")
    display(Markdown(text))
