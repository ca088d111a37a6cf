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
# # SASS census: which tensor-core instruction each kernel issues
#
# A GPU only does FP8 tensor-core math when the compiled kernel contains an FP8 tensor-core
# instruction. The instruction names are in the binary: `cuobjdump -sass` prints every
# instruction of every kernel, so "does this kernel use the FP8 tensor cores?" can be
# answered by counting, with no GPU at all.
#
# Claim tested (see `CLAIMS.md`):
#
# - **C1** (seed 003): no `mma` takes bf16 x e4m3. A weight-only (A16) kernel must convert
#   its weights to bf16/fp16 and issues only HMMA (sm_80 ... sm_120); FP8 tensor instructions
#   (QMMA, or QGMMA on sm_90) appear only when the activations are FP8.
#
# The notebook (1) asks ptxas which operand-type pairs the `mma.sync` and `wgmma`
# instructions accept and what SASS each becomes, (2) compiles fp8lab's own kernels for each
# architecture and counts their instructions, (3) optionally does the same for binaries you
# give it (a vLLM wheel, a PyTorch extension: the seed's own subject, Marlin), and (4)
# records C1's verdicts: an `analogue` row from fp8lab's kernels, a `seed` row from Marlin
# kernels when you give a binary that holds them.
#
# Host-only: needs nvcc/ptxas and cuobjdump (pip: `nvidia-cuda-cuobjdump`), no GPU.

# %% tags=["parameters"]
mode = "auto"  # ignored: a host-only notebook always computes
binaries = []  # .whl / .so / .cubin paths (relative: from where you typed the command), e.g. ["vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl"]
archs = ["sm_80", "sm_89", "sm_90"]  # architectures to compile for / to read from the binaries
kernel_filter = ""  # regex on mangled kernel names in binaries, applied before disassembly; e.g. Marlin|marlin
binaries_out = ""  # folder for the binaries' tables and figure (default data/cpu/09_sass_census/binaries/<name>/)

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fp8lab.toolchain import binaries as fp8bin
from fp8lab.report import claims, plotting, results
from fp8lab.experiments import census
from fp8lab.toolchain.tools import tool_version

NB = "09_sass_census"
t_start = time.perf_counter()
# The user's binaries are checked before any work: a missing file, a file that is not a CUDA
# binary, or an output folder that is fp8lab's own census is one line here, not a failure
# minutes later. Relative paths count from where the command was typed.
user_files = census.resolve_binaries(binaries) if binaries else []
run = results.start_run(NB, params=dict(mode=mode, binaries=[str(f) for f in user_files], archs=list(archs),
                                        kernel_filter=kernel_filter, binaries_out=binaries_out), device="cpu")
user_dirs = {f: census.binaries_folder(run.data_root, run.device, NB, f, binaries_out) for f in user_files}
plotting.apply_style()
pd.set_option("display.max_colwidth", 80)
print(run.summary())
print({t: tool_version(t) for t in ("nvcc", "ptxas", "cuobjdump", "nvdisasm")})
for f, d in user_dirs.items():
    print(f"binary {f} -> {d}")

# %% [markdown]
# ## 1. The PTX type table, asked of ptxas
#
# The PTX ISA lists the operand types each `mma` shape accepts: `.f16.f16` and `.bf16.bf16`
# at m16n8k16, `.e4m3/.e5m2` x `.e4m3/.e5m2` at m16n8k32 (sm_89+), `.s8.s8`, and so on. The
# two operands of one instruction are always from the same family. Rather than quote the
# table, we give ptxas one tiny kernel per (A type, B type) pair and see which assemble, then
# disassemble those that do. For each pair every plausible spelling is tried (both K shapes;
# for `wgmma` each operand list), so a rejection is not one bad spelling. The same-type pairs
# are the controls: if they did not assemble, a rejection would prove nothing.

# %%
probe = census.probe_mma_types(archs)
run.write_table("mma_probe", probe)
display(census.probe_table(probe))

# %%
pc = census.probe_checks(probe)
assert pc["controls_ok"], "the same-type control pairs must assemble, or the probe proves nothing"
assert pc["n_mixed"] > 0
rejected = probe.loc[probe["mixed_16x8"] & ~probe["accepted"], "error"].value_counts()
display(rejected.rename("ptxas error for the mixed 16-bit x 8-bit pairs").to_frame())

# %% [markdown]
# Every 16-bit x 8-bit pair is rejected ("Unexpected instruction types"). An A16 kernel
# therefore has exactly one option: turn its FP8/FP4 weights into bf16/fp16 and issue the
# 16-bit MMA. There is a second lesson in the sm_90 rows: `mma.sync` with e4m3 operands
# assembles for sm_90, but ptxas emits FP8 -> F16 conversions (`F2FP.F16.E4M3.UNPACK_B`)
# and an **fp16 HMMA**: Hopper's FP8 tensor-core path is `wgmma` (QGMMA) only. FP8
# activations are necessary for an FP8 tensor instruction, not sufficient.

# %% [markdown]
# ## 2. fp8lab's own kernels
#
# Every standalone kernel source in `fp8lab/kernels/*.cu` is compiled for each architecture
# it supports (the e4m3 `mma_blockwise` kernel needs sm_89+; a failed build is a row in the
# `builds` table with the compiler's reason), and the Triton blockwise kernel is compiled
# for sm_89 / sm_90 without a GPU, with a decode tile (BLOCK_M = 16) and a prefill tile
# (128 x 128). Each kernel's activation precision comes from its arm (`mma_blockwise`,
# `triton_blockwise` are W8A8) or from its name, never from its SASS.

# %%
cen, builds = census.census_fp8lab(archs)
kern = census.kernel_summary(cen)
post = census.post_table(census.own_kernel_rows(cen))
run.write_table("census", cen)       # per kernel and opcode: the detail behind every figure
run.write_table("kernels", kern)
run.write_table("builds", builds)
run.write_table("census_summary", post)   # the post's table (the same as `python -m fp8lab census`)
display(builds)
display(kern[["label", "arch", "act", "mma_types", "n_mma", "fp8_converts", "local_mem", "instructions"]])

# %%
# Integrity of the census itself (not the claim): every kernel parsed into instructions, and
# the positive control, sm_89 e4m3 kernels, shows QMMA, so a missing QMMA elsewhere is real.
assert builds["ok"].any(), f"nothing compiled:\n{builds}"
assert (kern["instructions"] > 0).all()
a8_89 = kern[(kern["act"] == "A8") & (kern["arch"] == "sm_89")]
if len(a8_89):
    assert (a8_89["mma_fp8"] > 0).all(), a8_89[["label", "mma_types"]]

# %% [markdown]
# ## 3. The post's table: per library and architecture
#
# One row per (kernel family, architecture, activation dtype, weight type, MMA instruction):
# how many kernels, and every conversion opcode any of them contains, in full. The
# activation dtype is read from the MMA instruction's operands (`HMMA.16816.F32.BF16` is
# bf16, `QMMA.16832.F32.E4M3.E4M3` fp8 e4m3), the weight type from the kernel's name when
# it states one (`?` otherwise). `python -m fp8lab census <binary>` prints the same table for
# any binary, without Jupyter.

# %%
print(census.format_post_table(post))

# %% [markdown]
# ## 4. Binaries you supply
#
# Each binary in `binaries` (a `.whl` is read member by member) goes through
# `fp8lab.toolchain.binaries`: each cubin's function names are read first, and only cubins of the
# asked architectures with a function matching `kernel_filter` are disassembled, in
# parallel. Its tables and figure go to its own folder (`binaries/<name>/`, never the
# tables above, which decide C1 for fp8lab's kernels). For C1, a kernel's activation class
# comes from its name only:
#
# - **Marlin** (vLLM, sglang): the first template argument of `Marlin<...>` is the activation
#   type: a C++ 16-bit type in older Marlin (`__nv_bfloat16`, `half`), or a vLLM `ScalarType`
#   id in newer Marlin (`a_type_id`), whose bit width (exponent + mantissa + sign bits) is
#   packed in the id's low 17 bits.
# - Otherwise names that spell the scheme: `w8a16`, `wna16`, `a16` -> A16; `w8a8`, `fp8_fp8`,
#   `blockwise_fp8` -> A8; `w4a4` -> A4. Anything else is `unknown` and left out of the verdict.

# %%
user_kernels = []
for f, folder in user_dirs.items():
    res = census.census_user_binaries([f], archs, kernel_filter)[f]
    tabs = census.binary_tables(res)
    name = census.binary_name(f)
    tabs["census_summary"].insert(0, "binary", name)     # its summary rows, named after it
    census.write_tables(folder, tabs, dict(run.meta, binary=str(f), archs=list(archs),
                                           kernel_filter=kernel_filter))
    print(fp8bin.render(res))
    if len(tabs["census_summary"]):
        fig = census.post_figure(tabs["census_summary"], f"{name}: MMA instruction per kernel")
        plotting.save_in(fig, folder, "census", run.figure_info().footnote() + f" · {f.name}")
        plt.show()
    print(f"tables and figure of {f.name}: {folder}")
    user_kernels.append(tabs["census_kernels"].assign(binary=name))
ukern = pd.concat(user_kernels, ignore_index=True) if user_kernels else None
if not user_files:
    print("no binaries given: the seed row of C1 (Marlin in a vLLM wheel) is not-run")

# %% [markdown]
# ## 5. Figures, drawn from the tables in `data/`
#
# The per-kernel, per-opcode counts behind both figures are the `census` table in
# `data/cpu/09_sass_census/` (every kernel, every instruction family).

# %%
kern_d = results.load_table("cpu", NB, "kernels")
cen_d = results.load_table("cpu", NB, "census")
post_d = results.load_table("cpu", NB, "census_summary")
fig = census.post_figure(post_d, "fp8lab's kernels: which MMA instruction each one issues")
plotting.save(fig, run, "census")
plt.show()

# %%
MMA_COLS = ["HMMA", "HGMMA", "QMMA", "QGMMA", "IMMA", "IGMMA", "F2FP.FP8", "F2FP.BF16", "F2FP.F16"]
fams = cen_d.pivot_table(index=["binary", "arch", "kernel"], columns="family", values="count",
                         aggfunc="sum", fill_value=0)
mma_cols = [c for c in MMA_COLS if c in fams.columns and (fams[c] > 0).any()]

# One row per kernel family (arm), activation class and architecture; a cell says how many of
# the family's kernels contain that instruction at all ("k/n"), coloured by k/n.
kern_d["group"] = kern_d["arm"] + "  [" + kern_d["act"] + "]  ·  " + kern_d["arch"]
keys = ["binary", "arch", "kernel"]
per_kernel = fams.reindex(columns=mma_cols, fill_value=0)
per_kernel = per_kernel.reindex(pd.MultiIndex.from_frame(kern_d[keys]), fill_value=0)   # kernels with none too
present = (per_kernel > 0).groupby(kern_d["group"].to_numpy()).sum()
n_kern = kern_d.groupby("group").size()
g_order = kern_d.sort_values(["arm", "act", "arch"])["group"].drop_duplicates().tolist()
present = present.reindex(index=g_order, fill_value=0)
frac = present.div(n_kern.reindex(g_order), axis=0)
fig, ax = plt.subplots(figsize=(6.5 + 0.8 * present.shape[1], 0.34 * len(g_order) + 2.2))
cmap = plt.get_cmap("viridis").copy()
cmap.set_bad("#eeeeee")
im = ax.imshow(np.ma.masked_equal(frac.to_numpy(dtype=float), 0), aspect="auto", cmap=cmap, vmin=0, vmax=1)
for (i, j), k in np.ndenumerate(present.to_numpy()):
    if k:
        ax.text(j, i, f"{int(k)}/{int(n_kern[g_order[i]])}", ha="center", va="center", fontsize=7,
                color="white" if frac.iat[i, j] < 0.55 else "black")
ax.set_xticks(range(present.shape[1]), present.columns, rotation=45, ha="right")
ax.set_yticks(range(len(g_order)), g_order)
ax.grid(False)
ax.set_title("Which kernels contain tensor-core MMAs and FP8 conversions")
fig.colorbar(im, ax=ax, pad=0.01).set_label("share of the family's kernels (k/n in the cell)")
ax.set_xlabel("SASS family: HMMA/HGMMA 16-bit operands, QMMA/QGMMA FP8,\n"
              "F2FP.FP8 FP8 conversion, F2FP.BF16 fp32 -> bf16 output pack; blank: none")
fig.tight_layout()
plotting.save(fig, run, "mma_census")
plt.show()

# %% [markdown]
# ## 6. Verdicts
#
# Two rows for C1: `analogue`, fp8lab's own kernels of the same designs (with the ptxas
# probe); `seed`, the Marlin kernels of a supplied binary (a vLLM wheel), as the seed counted
# them, or `not-run` with the command that produces it.

# %%
v = census.c1_verdict(kern, probe, source="fp8lab's own kernels")
vs = census.c1_seed_verdict(ukern, [f.name for f in user_files])
rows = claims.record(run, [
    claims.Verdict(claim="C1", verdict=v["verdict"], our_figure=v["our_figure"], reason=v["reason"],
                   subject="analogue", rule=v["rule"]),
    claims.Verdict(claim="C1", verdict=vs["verdict"], our_figure=vs["our_figure"], reason=vs["reason"],
                   subject="seed", rule=vs["rule"]),
])
for r in rows.itertuples():
    print(f"C1 [{r.subject}] {r.verdict}: {r.our_figure}" + (f" -- {r.reason}" if r.reason else ""))
display(rows[["claim", "subject", "verdict", "seed_figure", "our_figure", "reason", "rule"]])

# %%
chk = v["checks"]["census"]
own = census.c1_checks(kern)
emul = pd.DataFrame(own["a8_emulated"])
emul_txt = (", ".join(f"{r.label} ({r.arch})" for r in emul.itertuples()) if len(emul) else "none")
FAMILY = {"f16": "f16", "bf16": "bf16", "e4m3": "fp8", "e5m2": "fp8", "s8": "int8"}
cross = probe[(probe["a"].map(FAMILY) != probe["b"].map(FAMILY)) & ~probe["mixed_16x8"]]
display(Markdown(f"""
**Takeaways** (numbers from this run's tables)

- ptxas accepted **{pc['n_mixed_accepted']} of {pc['n_mixed']}** mixed 16-bit x 8-bit operand pairs
  for `mma.sync` / `wgmma` on {', '.join(pc['archs'])}, and {int(cross['accepted'].sum())} of {len(cross)}
  same-width pairs across families (f16 x bf16, fp8 x s8): an MMA's two operands are always one family.
  There is no bf16 x e4m3 MMA.
- fp8lab's kernels: {own['n_a8_fp8_mma']} of {own['n_a8']} W8A8 kernel builds issue QMMA/QGMMA;
  {len(emul)} issue **no FP8 MMA** and instead run FP8 data through F2FP conversions into
  fp16 HMMA: {emul_txt}. On sm_90 only `wgmma` (Triton with BLOCK_M >= 64) reaches the FP8
  tensor cores; `mma.sync` e4m3 (the CUDA `mma_blockwise` kernel, Triton's small-M fallback)
  runs at the fp16 rate.
- A16 kernels censused (fp8lab's own): {chk['n_a16']} ({chk['n_a16_hmma_only']} of
  {chk['n_a16_with_mma']} with MMAs issue only 16-bit MMAs).
- **C1 (analogue, fp8lab's kernels): {v['verdict']}**. {v['reason']}
- **C1 (seed, Marlin): {vs['verdict']}**: {vs['our_figure']}. {vs['reason']}

Census run time on this machine: {time.perf_counter() - t_start:.0f} s.
"""))
