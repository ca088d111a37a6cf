"""Notebook 02: registers and spills of the blockwise FP8 kernel family, no GPU needed.

``run_spills`` compiles the 16 tile configurations x 3 main-loop variants of ``mma_blockwise``
for sm_89 and sm_90 (``fp8lab.compile_grid``) and returns one tidy row per kernel;
``triton_spills`` adds the Triton blockwise kernel's side of the same question;
``verdict_a1`` / ``verdict_a2`` turn the table into claim verdicts (so the rule is testable).
"""

from __future__ import annotations

import os

import pandas as pd

from .. import compile_grid
from ..kernels import mma_blockwise as mb

ARM = "mma_blockwise"
# What notebook 02's table keeps (compile_grid rows have more: kernel name, cache key, ...).
COLUMNS = ["arm", "config", "bm", "bn", "bk", "wm", "wn", "stages", "warps", "threads", "acc_floats",
           "variant", "arch", "registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes", "spills",
           "static_smem_bytes", "dynamic_smem_bytes", "smem_bytes", "res_reg", "res_stack", "res_shared",
           "sass_mma_opcodes", "sass_qmma", "sass_hmma", "sass_stl", "sass_ldl", "sass_loop_stl",
           "sass_loop_ldl", "compile_s", "build_s", "cached", "nvcc_version", "kernel"]

# The seed's figures for claim A1 (seed 000: CUTLASS on an older nvcc, sm_89).
SEED_A1 = {"registers": 255, "stack_bytes": 600, "arch": "sm_89"}
# "At or near the cap": ptxas reports 255 when it ran out; allow a little slack.
NEAR_CAP = 240


def run_spills(configs="all", variants=mb.VARIANTS, archs=compile_grid.ARCHS, *, cache_dir=None,
               max_workers: int | None = None, force: bool = False, progress: bool = True) -> pd.DataFrame:
    """Compile (or read from the cache) the grid; one row per (config, variant, arch).

    ``attrs``: wall_s of this call, n_compiled / n_cached, workers, tool versions.
    """
    df = compile_grid.build_grid(configs, variants, archs, cache_dir=cache_dir, max_workers=max_workers,
                                 force=force, progress=progress)
    attrs = dict(df.attrs)
    df = df.assign(arm=ARM)[COLUMNS]
    df.attrs.update(attrs)
    return df


# Triton's names for the same two main loops (fp8lab.kernels.triton_blockwise).
TRITON_VARIANT = {"per_step": "per_slice", "per_block": "per_block"}
# The seed's tile in Triton terms (2 warps like the seed) and the 4-warp version Triton prefers.
TRITON_TILES = ({"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 2, "num_stages": 3},
                {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3})


def triton_spills(archs=compile_grid.ARCHS, tiles=TRITON_TILES) -> pd.DataFrame:
    """The Triton blockwise kernel's registers / spills for the same question (no GPU).

    Triton's per_step (a fresh tl.dot per 32-wide K step, scaled and added) is the per_slice
    main loop; per_block promotes once per 128-wide block. Returns rows in ``COLUMNS`` form
    (arm = "triton_blockwise"); raises ImportError when triton is not installed.
    """
    from ..kernels import triton_blockwise as tb

    rows = []
    for tile in tiles:
        for tv, variant in TRITON_VARIANT.items():
            for arch in archs:
                r = tb.triton_resource_usage(tv, arch, **tile)
                warps = r["num_warps"]
                rows.append({
                    "arm": "triton_blockwise",
                    "config": f"{r['BLOCK_M']}x{r['BLOCK_N']}x{r['BLOCK_K']}_{warps}warps_s{r['num_stages']}",
                    "bm": r["BLOCK_M"], "bn": r["BLOCK_N"], "bk": r["BLOCK_K"], "wm": None, "wn": None,
                    "stages": r["num_stages"], "warps": warps, "threads": r["threads"],
                    "acc_floats": r["BLOCK_M"] * r["BLOCK_N"] // r["threads"],
                    "variant": variant, "arch": r["arch"], "registers": r["registers"],
                    "stack_bytes": r["stack_bytes"], "spill_store_bytes": r["spill_stores"],
                    "spill_load_bytes": r["spill_loads"],
                    "spills": bool(r["stack_bytes"] or r["spill_stores"] or r["spill_loads"]),
                    "static_smem_bytes": r["static_shared"], "dynamic_smem_bytes": r["shared_mem"],
                    "smem_bytes": r["shared_mem"], "res_reg": r["registers"], "res_stack": r["stack_bytes"],
                    "res_shared": r["static_shared"], "kernel": r["name"],
                    "nvcc_version": f"triton {r['triton_version']}",
                })
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def _row(df: pd.DataFrame, config: str, variant: str, arch: str) -> pd.Series:
    sel = df[(df["arm"] == ARM) & (df["config"] == config) & (df["variant"] == variant) & (df["arch"] == arch)]
    if len(sel) != 1:
        raise ValueError(f"expected one row for {config} / {variant} / {arch}, found {len(sel)}")
    return sel.iloc[0]


def _spills(r) -> bool:
    return bool(r["stack_bytes"] > 0 or r["spill_store_bytes"] > 0 or r["spill_load_bytes"] > 0)


def _fig(r) -> str:
    return (f"REG {int(r['registers'])} / STACK {int(r['stack_bytes'])} B "
            f"(spill st {int(r['spill_store_bytes'])} / ld {int(r['spill_load_bytes'])} B)")


def verdict_a1(df: pd.DataFrame, seed=SEED_A1):
    """A1 from the table. holds: at the seed's tile on sm_89, per_slice spills at (or near) the
    255-register cap with a stack within 2x of the seed's 600 B, and per_block does not spill;
    holds-in-kind: that mechanism, but the stack size differs more than 2x; differs otherwise."""
    from .. import claims

    cfg = mb.SEED_CONFIG.name
    arch = seed["arch"]
    ps, pb = _row(df, cfg, "per_slice", arch), _row(df, cfg, "per_block", arch)
    third = _row(df, cfg, "per_block_inplace", arch)
    ps_spills = _spills(ps) and ps["registers"] >= NEAR_CAP
    pb_clean = not _spills(pb)
    ratio = ps["stack_bytes"] / seed["stack_bytes"]
    figure = (f"{arch}, {cfg}: per_slice {_fig(ps)}; per_block {_fig(pb)}; "
              f"per_block_inplace {_fig(third)}")
    two_frag = 2 * mb.SEED_CONFIG.acc_floats
    if ps_spills and pb_clean:
        if 0.5 <= ratio <= 2:
            return claims.Verdict("A1", "holds", figure)
        return claims.Verdict("A1", "holds-in-kind", figure,
                              reason=f"per_slice spills and per_block does not, but the stack is "
                                     f"{int(ps['stack_bytes'])} B vs the seed's {seed['stack_bytes']} B "
                                     f"(nvcc {ps['nvcc_version']} vs the seed's CUTLASS build)")
    parts = []
    if not ps_spills:
        parts.append(f"per_slice does not spill here ({_fig(ps)}): nvcc {ps['nvcc_version']} consumes each "
                     "fresh slice fragment right after its MMA")
    if not pb_clean:
        parts.append(f"per_block spills too ({_fig(pb)}): the accumulator plus the block fragment are "
                     f"2 x {mb.SEED_CONFIG.acc_floats} = {two_frag} fp32 registers per thread at a "
                     f"{mb.SEED_CONFIG.wm}x{mb.SEED_CONFIG.wn} warp tile, over the 255 cap before any operand")
    if not _spills(third):
        parts.append(f"the one-fragment per_block_inplace variant is the one that compiles clean ({_fig(third)})")
    return claims.Verdict("A1", "differs", figure, reason="; ".join(parts))


def verdict_a2(df: pd.DataFrame, grid_attrs: dict | None = None, *, expected_kernels: int | None = None):
    """A2 from the table: holds when every config x variant x arch kernel compiled with no GPU and
    every resource column is filled; the figure carries the count and the wall time.

    grid_attrs: ``run_spills(...).attrs`` (wall_s, n_compiled, n_cached, workers); defaults to df.attrs.
    """
    from .. import claims

    mma = df[df["arm"] == ARM]
    n_cfg, n_var, n_arch = mma["config"].nunique(), mma["variant"].nunique(), mma["arch"].nunique()
    expected = expected_kernels if expected_kernels is not None else \
        len(mb.configs()) * len(mb.VARIANTS) * len(compile_grid.ARCHS)
    needed = ["registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes", "smem_bytes"]
    complete = len(mma) == expected and not mma[needed].isna().any().any() and (mma["registers"] > 0).all()
    crosscheck = bool((mma["res_reg"] == mma["registers"]).all() and (mma["res_stack"] == mma["stack_bytes"]).all())
    attrs = grid_attrs if grid_attrs is not None else df.attrs
    if "wall_s" not in attrs:
        raise ValueError("verdict_a2 needs the grid's attrs (wall_s, n_compiled, n_cached, workers)")
    workers = attrs.get("workers") or os.cpu_count() or 1
    # build_s is each kernel's own build time (nvcc + cuobjdump), kept in the cache: the cold cost
    # is known even on a warm run
    build_s = float(mma["build_s"].sum())
    timing = (f"this run {attrs['wall_s']:.1f} s wall ({attrs.get('n_compiled', '?')} compiled, "
              f"{attrs.get('n_cached', '?')} from cache); cold: {build_s:.0f} s of per-kernel build time, "
              f"~{build_s / workers:.0f} s wall on {workers} cores")
    n_spill = int(mma["spills"].sum())
    figure = (f"{len(mma)}/{expected} kernels ({n_cfg} configs x {n_var} variants x {n_arch} archs) compiled "
              f"and parsed with no GPU, ptxas and cuobjdump agree: {crosscheck}; {n_spill} spill; {timing}")
    if complete and crosscheck:
        return claims.Verdict("A2", "holds", figure)
    return claims.Verdict("A2", "differs", figure,
                          reason="the table is incomplete" if not complete else "ptxas and cuobjdump disagree")
