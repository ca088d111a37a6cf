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
# # One tile does not fit all M; threadblock swizzle
#
# Seed 000, after its per-block fix, tuned the tile by M and the launch order:
#
# | claim | seed (L4) | measured here |
# | --- | --- | --- |
# | **A6** | decode (M = 1..64) wants short, narrow tiles so enough thread blocks exist; prefill wants big tiles | `mma_blockwise` (per_block) over several tiles at every (shape, M); the tile-by-M selection is *derived from the sweep* (no threshold typed in) |
# | **A7** | the swizzle (launch order for L2 reuse) took down_proj (N=4096, K=12288) at M=4096 from 7144 to 5614 us (-21%) | swizzle group 1 (off), 2, 4, 8, 16 at that point, each timed several times, interleaved |
# | **A8** | at M=1 the 16 MB of o_proj weights should stream in a fraction of the 175 us the first kernel took; Marlin (weight-only) beats the W8A8 kernel there. The seed timed the W8A8 kernels *with* activation quantisation ("Marlin doesn't need that step") | the W8A8 arms at M=1 with the activation quantiser inside the timed call, fp8lab's weight-only kernel, vLLM's FP8 Marlin (the seed's MarlinFP8, `peer_vllm_marlin_fp8`) when it ran, the original INT4 Marlin beside it, and the seed's kernel (per_slice, seed tile) against the weight-streaming floor (weight bytes / copy bandwidth, measured in this run) |
#
# A9 (down_proj at large M behind Triton) is judged in notebook 05, whose sweep has the CUTLASS arm.
#
# **Hardware caveat.** On Hopper an e4m3 `mma.sync` runs as F2FP conversions plus fp16 HMMA
# (no FP8 tensor cores; notebook 09), so `mma_blockwise` is conversion-bound on an H200 and far
# from FP8 rates; tile and launch-order effects are still real, and A9 compares it with a Triton
# kernel that does use FP8 wgmma there.
#
# Without a GPU this notebook redraws what earlier runs measured (`data/<device>/04_tiles_and_swizzle/`).

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
shapes = ["qwen3-8b:o_proj", "qwen3-8b:down_proj", "deepseek-v3:dense_down"]  # 'model:site' (fp8lab.facts.shapes)
Ms = [1, 16, 128, 1024, 4096]  # tokens
mma_configs = 3  # tiles per M picked by the rule in blockwise.mma_candidates (0: all 16)
# tiles timed at every M besides the rule's picks: a decode tile, the seed's, two prefill tiles
mma_always = ["16x64x128_w16x32_s4", "64x128x128_w64x64_s3", "128x128x128_w64x32_s3", "256x128x128_w64x64_s2"]
include_triton = True  # time triton_blockwise too (A9)
triton_autotune = "limited"  # "limited" or "full"
swizzle_shape = "qwen3-8b:down_proj"  # A7's point
swizzle_M = 4096
swizzles = [1, 2, 4, 8, 16]  # launch-order group sizes (1 = off)
swizzle_repeats = 3  # interleaved runs per swizzle, for the run-to-run spread
stream_shape = "qwen3-8b:o_proj"  # A8's M=1 point
copy_gib = 2.0  # the copy that measures the bandwidth ceiling, GiB
warmup_ms = 10.0
rep_ms = 50.0
devices = []  # device keys (data/ folders, e.g. ["h200", "l4"]) to overlay; []: every device with data
marlin = True  # A8's Marlin half on the seed's own kernel: the original Marlin (fp8lab.peers) at the M=1 point

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fp8lab.report import claims, plotting, results
from fp8lab.experiments import notebook, overlay
from fp8lab.facts.shapes import short_name
from fp8lab.measure import clocks
from fp8lab.arms import registry
from fp8lab.experiments import blockwise as bw
from fp8lab.kernels import mma_blockwise as mb
from fp8lab.peers import sweeps as peer_sweeps

NB = "04_tiles_and_swizzle"
run = notebook.start(NB, params=dict(shapes=shapes, Ms=Ms, mma_configs=mma_configs, mma_always=mma_always,
                                     include_triton=include_triton,
                                     triton_autotune=triton_autotune, swizzle_shape=swizzle_shape,
                                     swizzle_M=swizzle_M, swizzles=swizzles, swizzle_repeats=swizzle_repeats,
                                     stream_shape=stream_shape, copy_gib=copy_gib, warmup_ms=warmup_ms,
                                     rep_ms=rep_ms, marlin=marlin), mode=mode, devices=devices)

# %% [markdown]
# ## The launch order
#
# A "swizzle" is only a different mapping from the program id to the output tile. With group
# size G, G tile-rows are launched column by column, so consecutive thread blocks read the
# same weight tile while it is still in L2. The same index math as `mma_blockwise.cuh`:

# %%
def tile_of(pid, tiles_m, tiles_n, group):
    per_group = group * tiles_n
    first_m = (pid // per_group) * group
    group_m = min(tiles_m - first_m, group)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


for g in (1, 4):
    order = [tile_of(p, 8, 8, g) for p in range(16)]
    print(f"group {g}: first 16 programs -> (tile_m, tile_n) {order}")

# %% [markdown]
# ## Measure
#
# Only in measure mode. Three measurements: (1) the tile sweep (every candidate checked against
# float64 before timing), (2) the M=1 point with the seed's kernel and the other W8A8 arms plus
# the copy bandwidth, (3) the swizzle sweep at the best tile the sweep found for A7's point.

# %%
if run.mode == "measure":
    import torch

    from fp8lab.kernels import triton_blockwise as tb

    tb.set_autotune(triton_autotune)
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    arms = ("mma_blockwise", "triton_blockwise") if include_triton else ("mma_blockwise",)
    with clocks.ClockSampler(uuid=uuid, interval_s=0.02) as sampler:
        tiles_df = bw.sweep(shapes=shapes, Ms=Ms, arms=arms, mma_variants=("per_block",),
                            mma_configs=mma_configs or "all", mma_always=mma_always, mma_swizzle=(8,),
                            with_quant=False,
                            warmup_ms=warmup_ms, rep_ms=rep_ms, sampler=sampler, log=print)
        copy = bw.measure_copy_bandwidth(copy_gib, sampler=sampler)
        # W8A8 arms with the activation quantiser in the call (the seed's timing), every candidate,
        # so the seed's first kernel (per_slice at the seed tile) has its quant-included time too
        stream_df = bw.sweep(shapes=[stream_shape], Ms=[1],
                             arms=("mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "cublaslt_blockwise"),
                             mma_variants=("per_slice", "per_block"), mma_configs=2, mma_seed_config=True,
                             with_quant=True, quant_each=True, warmup_ms=warmup_ms, rep_ms=rep_ms, sampler=sampler,
                             log=print)
        # A8's other half: a Marlin-style weight-only kernel at the same point (notebook 08's arm)
        wo_row = bw.weight_only_point(stream_shape, 1, warmup_ms=warmup_ms, rep_ms=rep_ms, sampler=sampler)
        print("weight-only:", wo_row["status"], wo_row["time_p50_s"])
        stream_df = pd.concat([stream_df, pd.DataFrame([wo_row], columns=bw.COLUMNS)], ignore_index=True)
        # ... and the seed's own subject, the original Marlin, the same way as notebook 08's peers
        # (a not-run row with its build line when it is not built here)
        marlin_df = (peer_sweeps.decode([stream_shape], [1], ["peer_marlin_int4", bw.PEER_MARLIN], rep_ms=rep_ms, sampler=sampler,
                                        copy={"rate_p50": copy["copy_Bps_p50"]}, same_copy=False)
                     if marlin else None)
        sel = bw.tile_selection(tiles_df)["per_point"]
        pick = sel[(sel["shape"] == bw.resolve_shapes([swizzle_shape])[0].name) & (sel["M"] == swizzle_M)]
        swz_cfg = pick.iloc[0]["config"] if len(pick) else None
        swz_df = bw.swizzle_sweep(swizzle_shape, swizzle_M, swz_cfg, swizzles, repeats=swizzle_repeats,
                                  warmup_ms=warmup_ms, rep_ms=rep_ms, sampler=sampler)
    for d in (tiles_df, stream_df):
        bad = d["status"].str.startswith("failed-check") & d["arm"].isin(bw.ARMS)   # our arms must pass
        assert not bad.any(), d[bad]
        ok = d[d["status"] == "measured"]
        assert (ok["time_p20_s"] <= ok["time_p50_s"]).all() and (ok["time_p50_s"] <= ok["time_p80_s"]).all()
    assert 0 < copy["copy_Bps_p50"] <= 1.05 * copy["spec_Bps"], copy
    assert set(swz_df["swizzle"]) == set(swizzles)
    meta = {"clocks": sampler.summary(), **tiles_df.attrs}
    run.write_table("tile_sweep", tiles_df, meta=meta)
    run.write_table("m1_stream", stream_df, meta=meta)
    run.write_table("swizzle", swz_df, meta=meta)
    run.write_table("copy", pd.DataFrame([copy]), meta=meta)
    if marlin_df is not None:
        print(marlin_df[["arm", "status", "time_p50_s"]].to_string(index=False))
        run.write_table("peers", marlin_df, meta=meta)

# %% [markdown]
# ## Results
#
# Drawn from `data/` for every device that has this notebook's tables.

# %%
def cfg_label(c):
    bm, bn = c.split("x")[:2]
    w = c.split("_w")[1].split("_")[0]
    return f"{bm}x{bn} (w{w}, {c.split('_s')[-1]} st.)"


def draw_tiles(df, dev):
    """Slowdown of every timed tile against the best tile at that (shape, M)."""
    m = bw.measured(df)
    m = m[(m["arm"] == "mma_blockwise") & (m["variant"] == "per_block")]
    t = m.groupby(["shape", "M", "config"])["time_p50_s"].min().reset_index()
    t["slowdown"] = t["time_p50_s"] / t.groupby(["shape", "M"])["time_p50_s"].transform("min")
    shapes_ = list(dict.fromkeys(t["shape"]))
    fig, axes = plt.subplots(1, len(shapes_), figsize=(4.2 * len(shapes_), 4.2), squeeze=False, sharey=True)
    cfg_order = sorted(t["config"].unique(), key=lambda c: (int(c.split("x")[0]), int(c.split("x")[1]), c))
    for ax, shape in zip(axes[0], shapes_):
        g = t[t["shape"] == shape].pivot_table(index="config", columns="M", values="slowdown").reindex(cfg_order)
        im = ax.imshow(np.log2(g.values), aspect="auto", cmap="viridis_r", vmin=0, vmax=2)
        ax.grid(False)
        for (i, j), v in np.ndenumerate(g.values):
            if np.isfinite(v):
                ax.text(j, i, "best" if v == 1 else f"{v:.2f}", ha="center", va="center", fontsize=6.5,
                        color="white" if v > 2 else "black")
        ax.set_xticks(range(len(g.columns)), [str(c) for c in g.columns])
        ax.set_yticks(range(len(g.index)), [cfg_label(c) for c in g.index], fontsize=7)
        ax.set_xlabel("M (tokens)")
        ax.set_title(short_name(shape))
    fig.colorbar(im, ax=axes[0].tolist(), label="log2(time / best time at that M)")
    fig.suptitle("A6: mma_blockwise (per_block) tiles: slowdown vs the best tile per M (blank: not timed)",
                 fontsize=10)
    plotting.save(fig, run.info_for(dev, df), "tile_slowdown")
    plt.show()


def draw_best_tile(df, dev):
    pp = bw.tile_selection(df)["per_point"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (shape, g), mk, size in zip(pp.groupby("shape"), "os^vD", (9, 7, 5, 4, 3)):
        g = g.sort_values("M")
        area = [int(c.split("x")[0]) * int(c.split("x")[1]) for c in g["config"]]
        ax.plot(g["M"], area, marker=mk, ms=size, label=short_name(shape))
        for m_, a_, c_ in zip(g["M"], area, g["config"]):
            ax.annotate("x".join(c_.split("x")[:2]), (m_, a_), textcoords="offset points", xytext=(4, -10),
                        fontsize=6.5, color="#444444")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("best tile BM x BN (elements)")
    ax.set_title("A6: the tile the sweep picks grows with M")
    ax.legend()
    plotting.save(fig, run.info_for(dev, df), "best_tile_by_m")
    plt.show()


def draw_swizzle(swz, dev):
    s = bw.swizzle_summary(swz)
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    x = np.arange(len(s))
    ax.bar(x, s["time_p50_s"] * 1e6, color=plotting.color("mma_blockwise"))
    ax.errorbar(x, s["time_p50_s"] * 1e6, yerr=s["spread_s"] * 1e6 / 2, fmt="none", color="black", capsize=3)
    ax.set_xticks(x, ["off (1)" if v == 1 else str(v) for v in s["swizzle"]])
    ax.set_xlabel("swizzle group (tile rows launched together)")
    ax.set_ylabel("time per call (us, median of runs)")
    r0 = swz.iloc[0]
    ax.set_title(f"A7: {short_name(r0['shape'])} M={int(r0['M'])}, {cfg_label(r0['config'])}")
    plotting.save(fig, run.info_for(dev, swz), "swizzle")
    plt.show()


def draw_stream(stream, copy_Bps, dev, peers=None):
    """A8's M = 1 point as horizontal bars (long labels stay readable): weight-only kernels, the
    W8A8 arms (with their activation quantiser when the table has those timings, and the figure
    says which) and the seed's first kernel, against the weight-streaming floor."""
    m = bw.measured(stream)
    if m.empty:
        return
    r0 = m.iloc[0]
    wb = bw.weight_bytes("mma_blockwise", int(r0["N"]), int(r0["K"]))
    floor = wb / copy_Bps
    w8 = m[m["arm"].isin(bw.W8A8)]
    with_q = bool((w8["quant"] != "none").any())
    w8 = w8[w8["quant"] != "none"] if with_q else w8[w8["quant"] == "none"]
    qtxt = " + act. quant." if with_q else " (pre-quantised)"
    bars = []                               # (label, time, colour), top to bottom
    for arm, g in m[~m["arm"].isin(bw.W8A8)].groupby("arm"):
        r = g.loc[g["time_p50_s"].idxmin()]
        bars.append((f"{registry.label(arm)}\nweight-only, bf16 activations", r["time_p50_s"], plotting.color(arm)))
    # the Marlins timed at the same point (peers; vLLM's FP8 Marlin is the seed's MarlinFP8)
    pm = peers[(peers["status"] == "measured") & (peers["M"] == 1) & (peers["shape"] == r0["shape"])] \
        if peers is not None and len(peers) else []
    for _, r in (pm.iterrows() if len(pm) else []):
        bars.append((f"{registry.label(r['arm'])}\nweight-only {r['fmt'].upper()}, {r['act']} activations",
                     r["time_p50_s"], plotting.color(r["arm"]), r["stream_bytes"] / copy_Bps))
    is_seed = (w8["arm"] == "mma_blockwise") & (w8["variant"] == "per_slice") & (w8["config"] == mb.SEED_CONFIG.name)
    for arm, g in bw.best_rows(w8[~is_seed]).groupby("arm"):
        r = g.iloc[0]
        bars.append((f"{registry.short_label(arm)}{qtxt}\n{r['path']} {r['variant']}".strip(), r["time_p50_s"],
                     plotting.color(arm)))
    if is_seed.any():
        bars.append((f"{registry.short_label('mma_blockwise')}{qtxt}\nper_slice at the seed tile (first kernel)",
                     w8[is_seed]["time_p50_s"].min(), "#999999"))
    fig, ax = plt.subplots(figsize=(8.5, 0.62 * len(bars) + 1.6))
    y = np.arange(len(bars))[::-1]
    t_us = np.array([b[1] * 1e6 for b in bars])
    ax.barh(y, t_us, color=[b[2] for b in bars], height=0.7)
    for yi, t, b in zip(y, t_us, bars):
        # a peer of another format streams its own bytes: its rate is of those (INT4: half the FP8 bytes)
        own = f" (its {b[3] * copy_Bps / 1e6:.1f} MB)" if len(b) > 3 else ""
        ax.text(t, yi, f" {t:.1f} us, {(b[3] if len(b) > 3 else floor) * 1e6 / t:.0%} of copy rate{own}",
                va="center", fontsize=8)
    ax.axvline(floor * 1e6, color="#555555", ls="--", lw=1,
               label=f"streaming floor {floor * 1e6:.1f} us (weight bytes / copy bandwidth of this run)")
    ax.set_yticks(y, [b[0] for b in bars], fontsize=8)
    ax.set_xlim(0, t_us.max() * 1.35)
    ax.set_xlabel("time per call (us, p50)")
    ax.legend(loc="upper right", fontsize=8)   # the top bars are the short ones
    ax.set_title(f"A8: {short_name(r0['shape'])} at M=1, {wb / 1e6:.1f} MB of FP8 weights\n"
                 + ("W8A8 bars include quantising the activations (as the seed timed them)" if with_q else
                    "W8A8 bars: pre-quantised activations, the quantiser is not in these timings"), fontsize=10)
    plotting.save(fig, run.info_for(dev, stream), "m1_stream")
    plt.show()


devs = results.devices_with(NB, "tile_sweep")
tables = {}
for dev in devs:
    t = {name: results.load_table(dev, NB, name) for name in ("tile_sweep", "m1_stream", "swizzle", "copy", "peers")
         if dev in results.devices_with(NB, name)}
    tables[dev] = t
    draw_tiles(t["tile_sweep"], dev)
    draw_best_tile(t["tile_sweep"], dev)
    sel = bw.tile_selection(t["tile_sweep"])
    display(Markdown("**Tile by M, derived from the sweep** (for each M the tile with the lowest "
                     "geometric-mean slowdown over the shapes; consecutive Ms with the same pick merged):"))
    display(sel["by_m"].round(3))
    display(sel["ranges"])
    display(bw.single_tile_penalty(t["tile_sweep"]).head(6).round(3))
    if "swizzle" in t:
        draw_swizzle(t["swizzle"], dev)
    if "m1_stream" in t and "copy" in t:
        draw_stream(t["m1_stream"], float(t["copy"]["copy_Bps_p50"].iloc[0]), dev, t.get("peers"))

notebook.say_if_no_data(devs)

# %% [markdown]
# ## Across devices
#
# A8's M = 1 point on every device: the weight-streaming floor over each arm's time, each device
# against its own copy bandwidth. Drawn when `data/` holds this notebook's results for two or
# more devices (`devices` picks them; `[]`: all, the one measured in this run first), one colour
# and marker per device, each against its own ceiling so cards of different size compare; saved
# under `figures/cross-device/`. With one device the figures above are the whole story.

# %%
overlay.show_cross_device(NB, devices, run)

# %% [markdown]
# ## Verdicts and what the numbers say
#
# Computed from the tables by `verdict_a6` .. `verdict_a8` in `fp8lab.experiments.blockwise`
# (each row names its subject and the rule that decided it); recorded only by the run that
# measured them.

# %%
for dev, t, meta, name in notebook.each_device(tables, "tile_sweep"):
    copy_Bps = float(t["copy"]["copy_Bps_p50"].iloc[0]) if "copy" in t else None
    verdicts = [bw.verdict_a6(t["tile_sweep"])]
    verdicts.append(bw.verdict_a7(t.get("swizzle", pd.DataFrame())))
    # A8's seed half: Marlin (the seed's MarlinFP8) from the peers table of the same run
    stream_and_peers = pd.concat([t.get("m1_stream", pd.DataFrame(columns=bw.COLUMNS))]
                                 + ([t["peers"][[c for c in t["peers"].columns if c in bw.COLUMNS]]]
                                    if "peers" in t else []), ignore_index=True)
    verdicts += bw.verdict_a8(stream_and_peers, copy_Bps)
    display(claims.table(claims.record_if_measured(run, dev, verdicts)))
    sel = bw.tile_selection(t["tile_sweep"])
    text = [f"**{name}** ({str(meta.get('time', ''))[:10]})."]
    if not sel["ranges"].empty:
        text.append("The sweep's tile by M: " + "; ".join(
            f"M {r.M_from}-{r.M_to}: {cfg_label(r.config)}" for r in sel["ranges"].itertuples()) + ".")
    pen = bw.single_tile_penalty(t["tile_sweep"])
    full = pen[pen["covers_all"]]
    if not full.empty:
        text.append(f"The best single tile for every M ({cfg_label(full.iloc[0]['config'])}) is up to "
                    f"{full.iloc[0]['worst_slowdown']:.2f}x slower than the per-M pick ({full.iloc[0]['worst_at']}).")
    if "swizzle" in t:
        s = bw.swizzle_summary(t["swizzle"]).set_index("swizzle")
        if 1 in s.index and len(s) > 1:
            best = s.drop(index=1)["time_p50_s"].idxmin()
            text.append(f"Swizzle at {short_name(t['swizzle'].iloc[0]['shape'])} M={int(t['swizzle'].iloc[0]['M'])}: off "
                        f"{s.loc[1, 'time_p50_s'] * 1e6:.0f} us, group {best} {s.loc[best, 'time_p50_s'] * 1e6:.0f} us "
                        f"({s.loc[1, 'time_p50_s'] / s.loc[best, 'time_p50_s']:.2f}x; the seed: 7144 -> 5614 us).")
    if copy_Bps:
        text.append(f"Copy bandwidth in this run: {copy_Bps / 1e12:.2f} TB/s.")
    display(Markdown(" ".join(text)))
