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
# # Per-slice vs per-block scale promotion on the GPU
#
# Seed 000 ("Blockwise FP8 on Ada GPUs, part 2") found its first blockwise kernel correct and
# slow: it scaled the fp32 product of every 32-wide K slice, so two or three fp32 fragments were
# live at once (spills) and the CUDA cores did 4x the scaling work. Promoting once per 128-wide
# scale block fixed it. Notebook 02 checked the register side without a GPU (A1, A2); this one
# runs the kernel family on the GPU:
#
# | claim | what is measured here |
# | --- | --- |
# | **A3** | time of `per_slice` vs `per_block` / `per_block_inplace` per shape and M, with the activation quantiser inside the timed call as in the seed's vLLM microbenchmark; the verdict is the same-tile effect at the seed's tile and o_proj M=4096 (seed: 6536 -> 1374 us on an L4, 4.8x, one kernel before and after the fix), the tile effect beside it, and "the spilling kernel was ~4x slower than Triton" |
# | **A4** | all 48 variants (16 tiles x 3 main loops) against a float64 reference on fresh random inputs, NaN-poisoned outputs, odd shapes (M = 1, 7, 83, 4097; N = 264, not a multiple of any tile) |
# | **A5** | one weight scale per thread block is right only when the N tile is 128; the per-warp lookup is right for every tile |
#
# **Hardware caveat.** On Hopper (sm_90) an e4m3 `mma.sync` is not an FP8 tensor-core
# instruction: ptxas turns it into F2FP conversions plus fp16 HMMA (notebook 09's census shows
# it). So on an H200 `mma_blockwise` cannot reach FP8 rates; A3's mechanism (register pressure and
# 4x the scaling work) is still measurable as a per_slice / per_block time ratio, while the
# comparison with Triton (whose `tl.dot` is an FP8 wgmma there) mixes in the hardware gap.
#
# Without a GPU this notebook redraws what earlier runs measured (`data/<device>/03_per_slice_vs_per_block/`).

# %% tags=["parameters"]
mode = "auto"  # "measure" on a GPU, "replot" without one (the runner sets it)
shapes = ["qwen3-8b:o_proj", "qwen3-8b:down_proj", "deepseek-v3:dense_down"]  # 'model:site' (fp8lab.facts.shapes)
Ms = [1, 16, 128, 1024, 4096]  # tokens; A3's headline needs o_proj at M = 4096
mma_configs = 2  # tiles per M picked by the rule in blockwise.mma_candidates (plus the seed's) (0: all 16)
include_triton = True  # time triton_blockwise too (A3's "~4x slower than Triton")
triton_autotune = "limited"  # "limited" (a few configs per problem) or "full"
a4_Ms = [1, 7, 83, 4097]  # A4's odd M values (N = 264, K = 384)
warmup_ms = 10.0  # per timed candidate
rep_ms = 50.0
devices = []  # device keys (data/ folders, e.g. ["h200", "l4"]) to overlay; []: every device with data

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from fp8lab.report import claims, plotting, results
from fp8lab.experiments import notebook, overlay
from fp8lab.facts.shapes import short_name
from fp8lab.measure import clocks
from fp8lab.report.excerpts import excerpt
from fp8lab.experiments import blockwise as bw
from fp8lab.kernels import mma_blockwise as mb

NB = "03_per_slice_vs_per_block"
run = notebook.start(NB, params=dict(shapes=shapes, Ms=Ms, mma_configs=mma_configs, include_triton=include_triton,
                                     triton_autotune=triton_autotune, a4_Ms=a4_Ms, warmup_ms=warmup_ms,
                                     rep_ms=rep_ms), mode=mode, devices=devices)

# %% [markdown]
# ## The two main loops
#
# Straight from `fp8lab/kernels/mma_blockwise.cuh`: `per_slice` MMAs every 32-wide slice into a
# fresh fragment `part`, scales it and adds it; `per_block` lets the four slices of a 128-wide
# block accumulate in the MMA's own C operand (`blk`) and promotes once. `per_block_inplace`
# (third variant) keeps one fragment, held in the current block's scale domain.

# %%
print(excerpt(mb.HEADER, "per_slice"))
print(excerpt(mb.HEADER, "per_block"))

# %% [markdown]
# ## A4: every variant against float64
#
# Fresh inputs (`mb.generate_inputs`: per-token activation magnitudes, outlier channels,
# per-block weight magnitudes), output filled with NaN before each call, float64 reference of
# every row. Passing means relative error (Frobenius) <= 5e-3, the scale-free
# `1 - 2Σxy/Σ(x²+y²)` <= 5e-5 and no NaN left. Then: what each arm does with K not a multiple of
# 128, and the weight-scale lookups of A5.

# %%
if run.mode == "measure":
    import torch

    from fp8lab.kernels import triton_blockwise as tb

    tb.set_autotune(triton_autotune)
    a4 = bw.check_mma_family(shapes=tuple((m, 264, 384) for m in a4_Ms))
    a5 = bw.a5_lookups()
    ktail = bw.k_tail_behaviour()
    assert len(a4) == len(mb.configs()) * len(mb.VARIANTS) * len(a4_Ms)
    assert a4["nan_left"].eq(0).all(), a4[a4["nan_left"] > 0]
    assert a5[a5["lookup"] == "per_warp"]["correct"].all(), a5
    assert set(ktail["outcome"]) <= {"computed", "refused"}, ktail
    run.write_table("a4_correctness", a4)
    run.write_table("a5_lookups", a5)
    run.write_table("k_tail", ktail)
    display(ktail)

# %% [markdown]
# ## A3: timing the main loops over shapes and M
#
# At every (shape, M): the seed's tile plus `mma_configs` tiles picked by the rule in
# `blockwise.mma_candidates`, each in all three main loops (launch-order swizzle 8), and
# triton_blockwise (each path in every tile its autotune policy would try, pinned and timed here
# like the others, rather than Triton's own pick). Every candidate is checked against float64
# before it is timed (CUDA events with L2 flushed, or CUDA-graph replay with operands rotated past
# L2 for kernels under 20 us). Every mma candidate and Triton's fastest tile are then timed again
# with the 1x128 activation quantiser inside the call (`quant` column): the seed's timings include
# quantising the activations, so A3 is judged on those.

# %%
if run.mode == "measure":
    arms = ("mma_blockwise", "triton_blockwise") if include_triton else ("mma_blockwise",)
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    with clocks.ClockSampler(uuid=uuid, interval_s=0.02) as sampler:
        sweep_df = bw.sweep(shapes=shapes, Ms=Ms, arms=arms, mma_variants=mb.VARIANTS, mma_configs=mma_configs or "all",
                            mma_seed_config=True, with_quant=True, quant_each=("mma_blockwise",),
                            warmup_ms=warmup_ms, rep_ms=rep_ms,
                            sampler=sampler, log=print)
    ok = sweep_df[sweep_df["status"] == "measured"]
    assert not sweep_df["status"].str.startswith("failed-check").any(), \
        sweep_df[sweep_df["status"].str.startswith("failed-check")]
    assert (ok["time_p20_s"] <= ok["time_p50_s"]).all() and (ok["time_p50_s"] <= ok["time_p80_s"]).all()
    assert (ok["relerr"] < bw.CHECK_RELERR).all()
    assert len(ok[(ok["arm"] == "mma_blockwise") & (ok["variant"] == "per_slice")]) > 0
    # A3 is judged on quant-included timings of both main loops at the seed tile
    assert len(ok[(ok["arm"] == "mma_blockwise") & (ok["variant"] == "per_slice") & (ok["quant"] != "none")]) > 0
    run.write_table("promotion_sweep", sweep_df, meta={"clocks": sampler.summary(), **sweep_df.attrs})

# %% [markdown]
# ## Results
#
# Drawn from `data/`, for every device that has this notebook's tables.

# %%
def quant_of(df):
    """The timings A3 is read from: with the quantiser when the table has them (the seed's way)."""
    return bw.QUANT_INCLUDED if (bw.measured(df)["quant"] != "none").any() else "none"


def quant_note(q):
    return "activation quantisation in the call" if q != "none" else "pre-quantised activations (no quantiser)"


def draw_ratios(df, dev):
    q = quant_of(df)
    pr = bw.promotion_ratios(df, quant=q)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharey=False, layout="constrained")
    fig.get_layout_engine().set(rect=(0, 0.035, 1, 0.965))  # room below for plotting.save's footnote
    for shape, g in pr.groupby("shape"):
        g = g.sort_values("M")
        axes[0].plot(g["M"], g["same_tile_promo"], marker="o", label=short_name(shape))
        axes[1].plot(g["M"], g["seed_to_best"], marker="o", label=short_name(shape))
    axes[1].axhline(bw.SEED_A3_FIX, color="#555555", ls="--", lw=0.9)
    axes[1].text(1, bw.SEED_A3_FIX * 0.97, f"seed (L4, o_proj M=4096): {bw.SEED_A3_FIX:.1f}x", fontsize=8, va="top")
    axes[1].set_ylim(top=max(bw.SEED_A3_FIX * 1.1, float(pr["seed_to_best"].max()) * 1.1))
    axes[0].set_title("A3 verdict: same tile (seed 64x128x128)\nper_slice / faster per-block loop", fontsize=9)
    axes[1].set_title("Beside it: tile + promotion\nseed kernel / best per-block kernel (any tile)", fontsize=9)
    fig.suptitle(f"Timed with {quant_note(q)}", fontsize=9)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="#999999", lw=0.8)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("time ratio (x, > 1: per-block faster)")
        ax.legend()
    plotting.save(fig, run.info_for(dev, df), "promotion_ratio")
    plt.show()


def draw_headline(df, dev, shape="qwen3-8b:o_proj", M=4096):
    q = quant_of(df)
    m = bw._quant_rows(bw.measured(df), q)
    m = m[(m["shape"] == shape) & (m["M"] == M)]
    if m.empty:
        return
    bars = []
    seed = m[(m["arm"] == "mma_blockwise") & (m["config"] == mb.SEED_CONFIG.name)]
    for v in mb.VARIANTS:
        s = seed[seed["variant"] == v]
        if not s.empty:
            bars.append((f"mma\n{v.replace('per_block_', '')}\nseed tile", s["time_p50_s"].min(), plotting.color(v)))
    best = m[(m["arm"] == "mma_blockwise") & m["variant"].isin(["per_block", "per_block_inplace"])]
    if not best.empty:
        b = best.loc[best["time_p50_s"].idxmin()]
        bars.append((f"mma (best)\n{b['variant'].replace('per_block_', '')}\n{b['config'].split('_')[0]}",
                     b["time_p50_s"], plotting.color(b["variant"])))
    tri = m[m["arm"] == "triton_blockwise"]
    if not tri.empty:
        t = tri.loc[tri["time_p50_s"].idxmin()]
        bars.append((f"triton\n{t['path']}\n{t['variant'].replace('per_block_', '')}", t["time_p50_s"],
                     plotting.color("triton_blockwise")))
    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    x = np.arange(len(bars))
    ax.bar(x, [b[1] * 1e6 for b in bars], color=[b[2] for b in bars])
    for i, b in enumerate(bars):
        ax.text(i, b[1] * 1e6, f"{b[1] * 1e6:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("time per call (us, p50)")
    ax.set_title(f"{shape} (N=K=4096), M={M}, {quant_note(q)}: seed 6536 -> 1374 us on an L4", fontsize=9)
    plotting.save(fig, run.info_for(dev, df), "a3_headline")
    plt.show()


def draw_a4(a4, dev):
    fig, ax = plt.subplots(figsize=(9, 3.6))
    labels = []
    for i, (v, g) in enumerate(a4.groupby("variant", sort=False)):
        for j, (M, h) in enumerate(g.groupby("M")):
            x = i * (len(a4["M"].unique()) + 1) + j
            ax.scatter(np.full(len(h), x), h["relerr"], s=12, color=plotting.color(v), alpha=0.8,
                       label=v if j == 0 else None)
            labels.append((x, f"M={M}"))
    ax.axhline(2e-3, color="#555555", ls="--", lw=0.9)
    ax.text(0, 2.1e-3, "seed: ~2e-3", fontsize=8)
    ax.axhline(bw.CHECK_RELERR, color="#D55E00", ls=":", lw=0.9)
    ax.text(0, bw.CHECK_RELERR * 1.02, "pass threshold", fontsize=8, color="#D55E00")
    ax.set_xticks([p for p, _ in labels], [t for _, t in labels], fontsize=7, rotation=45)
    ax.set_ylabel("relative error vs float64 (Frobenius)")
    ax.set_title(f"A4: {a4.groupby(['config', 'variant']).ngroups} variants, N={a4['N'].iloc[0]}, K={a4['K'].iloc[0]}")
    ax.set_ylim(0, max(bw.CHECK_RELERR * 1.2, a4["relerr"].max() * 1.1))
    ax.legend(loc="upper right")
    plotting.save(fig, run.info_for(dev, a4), "a4_errors")
    plt.show()


def draw_a5(a5, dev):
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    look = list(mb.SCALE_LOOKUPS)
    cfgs = list(dict.fromkeys(a5["config"]))
    w = 0.8 / len(look)
    for i, lk in enumerate(look):
        g = a5[a5["lookup"] == lk].set_index("config").reindex(cfgs)
        ax.bar(np.arange(len(cfgs)) + i * w, g["relerr"], width=w, label=lk,
               color=["#0072B2", "#D55E00", "#E69F00"][i])
    ax.axhline(bw.CHECK_RELERR, color="#555555", ls="--", lw=0.9, label="pass threshold")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 2)
    ax.set_xticks(np.arange(len(cfgs)) + w, [f"{c.split('_')[0]}\nBN={c.split('x')[1]}" for c in cfgs], fontsize=8)
    ax.set_ylabel("relative error vs float64")
    ax.set_title("A5: weight-scale lookup per warp vs per thread block")
    ax.legend()
    plotting.save(fig, run.info_for(dev, a5), "a5_lookups")
    plt.show()


devs = results.devices_with(NB, "promotion_sweep")
tables = {}
for dev in devs:
    df = results.load_table(dev, NB, "promotion_sweep")
    tables[dev] = dict(sweep=df)
    for name in ("a4_correctness", "a5_lookups", "k_tail"):
        if dev in results.devices_with(NB, name):
            tables[dev][name] = results.load_table(dev, NB, name)
    draw_ratios(df, dev)
    draw_headline(df, dev)
    if "a4_correctness" in tables[dev]:
        draw_a4(tables[dev]["a4_correctness"], dev)
    if "a5_lookups" in tables[dev]:
        draw_a5(tables[dev]["a5_lookups"], dev)
    display(bw.promotion_ratios(df, quant=quant_of(df)).round(3))

notebook.say_if_no_data(devs)

# %% [markdown]
# ## Across devices
#
# A3's time ratios (per_slice over the per-block loops) of every device, each device against
# itself. Drawn when `data/` holds this notebook's results for two or more devices (`devices`
# picks them; `[]`: all, the one measured in this run first), one colour and marker per device,
# each against its own ceiling so cards of different size compare; saved under `figures/cross-
# device/`. With one device the figures above are the whole story.

# %%
overlay.show_cross_device(NB, devices, run)

# %% [markdown]
# ## Verdicts and what the numbers say
#
# Computed from the tables above by the rules in `fp8lab.experiments.blockwise` (`verdict_a3`,
# `verdict_a4`, `verdict_a5`); recorded only by the run that measured them.

# %%
for dev, t, meta, name in notebook.each_device(tables, "sweep"):
    verdicts = [bw.verdict_a3(t["sweep"])]
    if "a4_correctness" in t:
        verdicts.append(bw.verdict_a4(t["a4_correctness"]))
    if "a5_lookups" in t:
        verdicts.append(bw.verdict_a5(t["a5_lookups"]))
    display(claims.table(claims.record_if_measured(run, dev, verdicts)))
    q = quant_of(t["sweep"])
    pr = bw.promotion_ratios(t["sweep"], quant=q)
    head = pr[(pr["shape"] == "qwen3-8b:o_proj") & (pr["M"] == 4096)]
    text = [f"**{name}** ({str(meta.get('time', ''))[:10]}; timings with {quant_note(q)})."]
    if not head.empty:
        h = head.iloc[0]
        text.append(f"At o_proj M=4096 the seed's per_slice kernel takes {h['t_slice_seed'] * 1e6:.0f} us; the same "
                    f"tile with the faster per-block loop {min(h['t_block_seed'], h['t_inplace_seed']) * 1e6:.0f} us "
                    f"({h['same_tile_promo']:.2f}x: the promotion alone); the best per-block tile "
                    f"{h['t_block_best'] * 1e6:.0f} us ({h['seed_to_best']:.2f}x with the tile change; the seed saw "
                    f"{bw.SEED_A3_FIX:.1f}x on an L4).")
        if np.isfinite(h["slice_vs_triton"]):
            text.append(f"The per_slice kernel is {h['slice_vs_triton']:.1f}x slower than the best Triton kernel "
                        f"({h['t_triton_best'] * 1e6:.0f} us; the seed: ~4x). On sm_90 Triton's dot is an FP8 wgmma "
                        "while the mma.sync kernel runs conversions plus fp16 HMMA (notebook 09's census).")
    if len(pr):
        text.append(f"Over all {len(pr)} (shape, M) points the same-tile ratio spans "
                    f"{pr['same_tile_promo'].min():.2f}x to {pr['same_tile_promo'].max():.2f}x.")
    if "a4_correctness" in t:
        a4 = t["a4_correctness"]
        text.append(f"A4: {int(a4['passed'].sum())} of {len(a4)} checks pass; median relative error "
                    f"{a4['relerr'].median():.2e}.")
    if "k_tail" in t:
        kt = t["k_tail"]
        text.append("K not a multiple of 128: " + "; ".join(f"{r.arm} {r.outcome}" for r in kt.itertuples()) + ".")
    display(Markdown(" ".join(text)))
