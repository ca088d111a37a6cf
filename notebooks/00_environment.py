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
# # Environment and measured ceilings
#
# Every later notebook compares a kernel with what the card can do. Datasheet numbers are
# leads, not ceilings: this notebook measures five ceilings on the card it runs on and puts
# each beside the spec sheet (`fp8lab.facts.devices`) as a fraction of it.
#
# | ceiling | how | work counted |
# | --- | --- | --- |
# | copy bandwidth | `dst.copy_(src)`, 2 GiB, device to device | bytes read + bytes written |
# | FP32 FMA rate | our own Triton kernel: 32 independent FMA chains per thread | 2 FLOP per FMA |
# | BF16 tensor | cuBLAS `torch.mm`, 8192³ | 2MNK |
# | FP8 tensor, per-tensor scale | cuBLAS `torch._scaled_mm`, 8192³ | 2MNK |
# | FP8 tensor, blockwise scales | cuBLASLt `F.scaled_mm`, 1x128 activations / 128x128 weights | 2MNK |
#
# Each is checked for correctness before it is timed, timed with CUDA events (an event pair per
# call, L2 flushed before every call, as Triton's `do_bench`), reported at p20 / p50 / p80, and measured with an
# NVML sampler running beside it; the clock summary lands in the table's provenance.
#
# No claim is judged here. Seed 001's B5 says cuBLASLt's blockwise FP8 "reaches the FP8 tensor
# rate (2x the BF16 arm)": the ratio is shown below, the verdict belongs to the GEMM notebook.
#
# Without a GPU this notebook redraws what earlier runs measured (`data/<device>/00_environment/`).

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
copy_gib = 2.0  # size of the copied buffer; >= 2 GiB so it dwarfs any L2
gemm_size = 8192  # M = N = K of the GEMM ceilings (a multiple of 512)
rep_ms = 200  # timing repetition time per ceiling, in milliseconds
devices = []  # device keys (data/ folders, e.g. ["h200", "l4"]) to overlay; []: every device with data

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fp8lab.measure import clocks
from fp8lab.experiments import notebook, overlay
from fp8lab.report import plotting, results
from fp8lab.report.excerpts import excerpt
from fp8lab.arms import registry
from fp8lab.experiments import ceilings as ce

run = notebook.start("00_environment",
                        params=dict(copy_gib=copy_gib, gemm_size=gemm_size, rep_ms=rep_ms), mode=mode, devices=devices)

# %% [markdown]
# ## The machine
#
# What this run sees: device, compute capability, SM count, driver and the software versions
# every table of this run records.

# %%
v = run.meta["versions"]
env = {"mode": run.mode, "device": run.device_name}
if run.gpu:
    g = run.gpu
    env.update({"compute capability": g["compute_capability"], "SMs": g["sm_count"],
                "memory (GiB)": g["memory_gib"], "L2 (MiB)": (g.get("l2_bytes") or 0) / 2**20,
                "driver": g.get("driver"),
                "SM clock now / max (MHz)": f"{g['clocks_at_start'].get('sm_clock_mhz')} / "
                                             f"{g['clocks_at_start'].get('sm_clock_max_mhz')}",
                "power limit (W)": g["clocks_at_start"].get("power_limit_w")})
env.update({k: v.get(k) or "not installed" for k in ("python", "torch", "cuda", "triton", "nvcc",
                                                      "numpy")})
display(pd.DataFrame({"value": {k: str(x) for k, x in env.items()}}))

# %% [markdown]
# ## Our own FP32 kernel
#
# Libraries give the tensor-core ceilings; the CUDA-core FP32 rate needs a kernel that does
# nothing but FMAs. Each program holds 8 x 1024 chains `x <- fma(x, b, c)` (32 per thread), the
# trip count is a run-time argument (nothing to fold), and `b < 1` keeps every chain bounded so
# the closed form `f + (x0 - f) b^n` checks every output.

# %%
from fp8lab.kernels import fma_peak

print(excerpt(fma_peak.__file__, "fma_peak_kernel", dedent=True))
print(f"FLOP per launch: 2 x chains x n_iters x UNROLL; at the default grid on 132 SMs: "
      f"{fma_peak.flop(fma_peak.default_config(132)):.3g}")

# %% [markdown]
# ## Measure
#
# Only in measure mode, on a GPU. A ceiling the card cannot run (FP8 before sm_89, blockwise
# scaling without cuBLAS >= 12.9) is recorded as `not-run` with the reason instead of stopping
# the others.

# %%
if run.mode == "measure":
    import torch

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    with clocks.ClockSampler(uuid=uuid, interval_s=0.02) as sampler:
        measured_df = ce.measure_ceilings(copy_gib=copy_gib, gemm_size=gemm_size, rep_ms=rep_ms,
                                          sampler=sampler)
    clock_summary = sampler.summary()
    ok = measured_df[measured_df["status"] == "measured"]
    # the three ceilings every CUDA GPU has must have been measured
    assert {"copy_bandwidth", "fp32_fma", "bf16_tensor"} <= set(ok["ceiling"]), measured_df
    assert (measured_df["status"].eq("measured") | measured_df["status"].str.startswith("not-run")).all()
    assert (ok["rate_p20"] <= ok["rate_p50"]).all() and (ok["rate_p50"] <= ok["rate_p80"]).all()
    # faster than the datasheet means a counting or timing bug, not a fast card
    assert (ok["fraction_of_spec"].fillna(0) < 1.05).all(), ok[["ceiling", "fraction_of_spec"]]
    assert ok["check_value"].lt(1e-2).all(), ok[["ceiling", "check", "check_value"]]
    run.write_table("ceilings", measured_df,
                    meta={"clocks": clock_summary, "spec_key": measured_df.attrs["spec_key"]})
    display(measured_df)
    display(pd.DataFrame({"clocks": {k: v for k, v in clock_summary.items()
                                     if not isinstance(v, dict)}}).astype(str))

# %% [markdown]
# ## Ceilings against the spec sheet
#
# One figure per device with data: the p50 of each ceiling as a fraction of the datasheet
# number for the same unit, with the p20-p80 spread as an error bar, the absolute value printed
# beside it. Drawn from `data/`, so the same cell redraws any device's committed results.

# %%
def fmt_rate(value, unit):
    return f"{value / 1e12:.2f} TB/s" if unit == "B/s" else f"{value / 1e12:.0f} TFLOP/s"


def draw(df, meta, info):
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    d = df.iloc[::-1].reset_index(drop=True)
    y = np.arange(len(d))
    for i, r in d.iterrows():
        if r["status"] != "measured":
            ax.text(0.01, i, f"not run: {str(r['status'])[9:70]}", va="center", fontsize=8,
                    color="#777777")
            continue
        if not (r["spec"] > 0):
            ax.text(0.01, i, f"{fmt_rate(r['rate_p50'], r['unit'])} (not on the spec sheet)",
                    va="center", fontsize=8)
            continue
        f50, f20, f80 = (r["rate_p50"] / r["spec"], r["rate_p20"] / r["spec"],
                         r["rate_p80"] / r["spec"])
        ax.barh(i, f50, color=plotting.color(r["ceiling"]), height=0.6)
        ax.errorbar(f50, i, xerr=[[f50 - f20], [f80 - f50]], color="black", capsize=3, lw=1)
        # the SM clock under load explains most of a gap to the datasheet (power cap)
        clock = f" at {r['sm_mhz_median']:.0f} MHz" if r.get("sm_mhz_median") == r.get("sm_mhz_median") else ""
        capped = "power_cap" in str(r.get("clock_reasons", ""))
        ax.text(f80 + 0.02, i, f"{fmt_rate(r['rate_p50'], r['unit'])} of "
                               f"{fmt_rate(r['spec'], r['unit'])} ({f50:.0%}){clock}"
                               f"{', power-capped' if capped else ''}",
                va="center", fontsize=8)
    # labels and colours from fp8lab.arms.registry: a ceiling without an entry fails here
    # (and in tests/test_registry.py), not as a bare id on the axis
    ax.set_yticks(y, [registry.label(c) for c in d["ceiling"]])
    ax.axvline(1.0, color="#555555", lw=0.8, ls="--")
    ax.set_xlim(0, 1.6)
    ax.set_xlabel("measured p50 / datasheet peak (error bar: p20-p80; median SM clock during "
                  "each measurement)")
    ax.set_title(f"Measured ceilings: {meta.get('device_name', '')}")
    plotting.save(fig, info, "ceilings")
    plt.show()


devs = results.devices_with("00_environment", "ceilings")
tables = {}
for dev in devs:
    df = results.load_table(dev, "00_environment", "ceilings")
    meta = df.attrs["meta"]
    tables[dev] = df
    info = run.info_for(dev, meta)
    draw(df, meta, info)

if not devs:
    display(Markdown("**No measured ceilings in `data/` yet.** Run this notebook on a GPU "
                     "(mode `measure`) to measure them; nothing is recorded in this run."))

# %% [markdown]
# ## Across devices
#
# The ceilings of every device with data, each as a fraction of its own spec sheet. Drawn when
# `data/` holds this notebook's results for two or more devices (`devices` picks them; `[]`: all,
# the one measured in this run first), one colour and marker per device, each against its own
# ceiling so cards of different size compare; saved under `figures/cross-device/`. With one
# device the figures above are the whole story.

# %%
overlay.show_cross_device("00_environment", devices, run)

# %% [markdown]
# ## What the numbers say

# %%
for dev, df in tables.items():
    meta = df.attrs["meta"]
    ok = df[df["status"] == "measured"].set_index("ceiling")
    parts = []
    for c in ce.CEILINGS:
        if c in ok.index:
            r = ok.loc[c]
            frac = f" ({r['fraction_of_spec']:.0%} of the datasheet)" if r["spec"] > 0 else ""
            parts.append(f"{registry.label(c)} {fmt_rate(r['rate_p50'], r['unit'])}{frac}")
    text = f"**{meta.get('device_name', dev)}** ({str(meta.get('time', ''))[:10]}): " + "; ".join(parts) + "."
    if {"fp8_tensor_blockwise", "bf16_tensor"} <= set(ok.index):
        ratio = ok.loc["fp8_tensor_blockwise", "rate_p50"] / ok.loc["bf16_tensor", "rate_p50"]
        text += (f" Blockwise FP8 runs at {ratio:.2f}x the BF16 GEMM here (seed 001's B5 expects "
                 "2x; judged in the GEMM notebook).")
    clk = (meta.get("extra") or {}).get("clocks") or {}
    if clk.get("sm_mhz_median"):
        reasons = ", ".join(f"{k} {v:.0%}" for k, v in clk.get("reasons_fraction", {}).items()) or "none"
        text += (f" SM clock during the run: median {clk['sm_mhz_median']:.0f} MHz "
                 f"(min {clk['sm_mhz_min']:.0f}, max {clk.get('max_sm_mhz')}); "
                 f"clock-event reasons seen: {reasons}; clocks locked: {clk.get('locked')}.")
    display(Markdown(text))
