"""Notebook 02: registers and spills of the blockwise FP8 kernel family, no GPU needed.

``run_spills`` compiles the 16 tile configurations x 3 main-loop variants of ``mma_blockwise``
for sm_89 and sm_90 (``fp8lab.experiments.compile_grid``) and returns one tidy row per kernel;
``triton_spills`` adds the Triton blockwise kernel's side of the same question;
``verdict_a1`` / ``verdict_a2`` turn the table into claim verdicts (so the rule is testable).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from . import compile_grid
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


#: "comparable size" for the stack frame: within this factor of the seed's 600 B either way.
STACK_BAND = 2.0


def _stack_ok(stack_bytes, seed) -> bool:
    return seed["stack_bytes"] / STACK_BAND <= stack_bytes <= seed["stack_bytes"] * STACK_BAND


def _stack_words(seed) -> str:
    return (f"STACK {seed['stack_bytes'] / STACK_BAND:.0f}-{seed['stack_bytes'] * STACK_BAND:.0f} B "
            f"(seed {seed['stack_bytes']} B within {STACK_BAND:g}x)")


def verdict_a1(df: pd.DataFrame, seed=SEED_A1):
    """A1, analogue row (fp8lab's mma_blockwise). holds: at the seed's tile on sm_89, per_slice
    spills with >= NEAR_CAP registers and a stack within STACK_BAND of the seed's 600 B, and
    per_block does not spill; holds-in-kind: that, with a stack outside the band; differs otherwise."""
    from ..report import claims

    cfg = mb.SEED_CONFIG.name
    arch = seed["arch"]
    rule = (f"{arch}, {cfg}: holds if per_slice spills with >= {NEAR_CAP} registers and {_stack_words(seed)} and "
            f"per_block does not spill; holds-in-kind if only the stack is outside that; else differs")
    ps, pb = _row(df, cfg, "per_slice", arch), _row(df, cfg, "per_block", arch)
    third = _row(df, cfg, "per_block_inplace", arch)
    ps_spills = _spills(ps) and ps["registers"] >= NEAR_CAP
    pb_clean = not _spills(pb)
    figure = (f"{arch}, {cfg}: per_slice {_fig(ps)}; per_block {_fig(pb)}; "
              f"per_block_inplace {_fig(third)}")
    two_frag = 2 * mb.SEED_CONFIG.acc_floats

    def v(verdict, reason=""):
        return claims.Verdict("A1", verdict, figure, reason=reason, subject="analogue", rule=rule)
    if ps_spills and pb_clean:
        if _stack_ok(ps["stack_bytes"], seed):
            return v("holds")
        return v("holds-in-kind", f"per_slice spills and per_block does not, but the stack is "
                                  f"{int(ps['stack_bytes'])} B vs the seed's {seed['stack_bytes']} B")
    parts = []
    if not ps_spills:
        parts.append(f"per_slice does not spill at the cap here ({_fig(ps)}, nvcc {ps['nvcc_version']})")
    if not pb_clean:
        parts.append(f"per_block spills too ({_fig(pb)}): the accumulator plus the block fragment are "
                     f"2 x {mb.SEED_CONFIG.acc_floats} = {two_frag} fp32 registers per thread at a "
                     f"{mb.SEED_CONFIG.wm}x{mb.SEED_CONFIG.wn} warp tile, over the 255 cap before any operand")
    if not _spills(third):
        parts.append(f"the one-fragment per_block_inplace variant is the one that compiles clean ({_fig(third)})")
    return v("differs", "; ".join(parts))


# ------------------------------------------------------------------------------------------
# A1's seed row: CUTLASS's own Ada FP8 blockwise example (example 94), which seed 000's kernel
# adapts. Its main loop MMAs every warp-level K group into a fresh fragment, scales it and adds it
# (the per-slice loop). It needs a CUTLASS source checkout: the nvidia-cutlass wheel has no examples.
# ------------------------------------------------------------------------------------------
CUTLASS_ENV = "FP8LAB_CUTLASS_SRC"
CUTLASS_EXAMPLE = "examples/94_ada_fp8_blockwise/ada_fp8_blockwise.cu"
CUTLASS_INCLUDES = ("include", "tools/util/include", "examples/common")
CUTLASS_HOWTO = (f"no CUTLASS source checkout: set {CUTLASS_ENV}=/path/to/cutlass (a clone of "
                 f"github.com/NVIDIA/cutlass with {CUTLASS_EXAMPLE}; the nvidia-cutlass wheel has no examples) "
                 "or pass cutlass_src to notebook 02")
EXAMPLE_COLUMNS = ["source", "commit", "example", "arch", "bm", "bn", "bk", "wm", "wn", "stages", "kernel",
                   "registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes", "res_reg", "res_stack",
                   "nvcc_version", "compile_s", "status"]
_GEMM_SHAPE = re.compile(r"GemmShape<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*>")
_STAGES = re.compile(r"\bStages\s*=\s*(\d+)\s*;")


def cutlass_src(path=None) -> Path | None:
    """The CUTLASS checkout to use: ``path``, else $FP8LAB_CUTLASS_SRC, else None. A path
    that is not a checkout with example 94 raises ValueError (one line saying what is missing)."""
    p = path or os.environ.get(CUTLASS_ENV) or None
    if p is None:
        return None
    p = Path(p).expanduser()
    missing = [x for x in (CUTLASS_EXAMPLE, *CUTLASS_INCLUDES) if not (p / x).exists()]
    if missing:
        raise ValueError(f"{p} is not a CUTLASS source checkout: missing {', '.join(missing)}")
    return p


def example_tile(source: str) -> dict:
    """The threadblock / warp tile and stage count example 94 instantiates, read from its source
    (the GemmShape<...> in the order threadblock, warp, instruction; ``Stages = N;``)."""
    shapes = _GEMM_SHAPE.findall(source)
    st = _STAGES.search(source)
    if len(shapes) < 2 or st is None:
        raise ValueError("example 94's source has no GemmShape<> threadblock / warp tile or 'Stages = N;'")
    (bm, bn, bk), (wm, wn, _) = shapes[0], shapes[1]
    return dict(bm=int(bm), bn=int(bn), bk=int(bk), wm=int(wm), wn=int(wn), stages=int(st.group(1)))


def _seed_tile() -> dict:
    c = mb.SEED_CONFIG
    return dict(bm=c.bm, bn=c.bn, bk=c.bk, wm=c.wm, wn=c.wn, stages=c.stages)


def compile_cutlass_example(src: Path, arch: str = "sm_89", *, runner=None) -> dict:
    """Compile example 94 (device code only, ``nvcc -cubin``) for ``arch`` and read its GEMM
    kernel's registers, stack and spills from ``ptxas -v``, cross-checked by ``cuobjdump
    -res-usage``. One row in EXAMPLE_COLUMNS; status 'measured' or 'error: ...'. The build goes
    through the cubin cache (key: the example's bytes, the checkout's commit, flags, arch, nvcc):
    ``compile_s`` is the time of the compile that made the entry. ``runner``: compile_cubin's."""
    import subprocess

    from ..toolchain import resources, tools
    from ..toolchain.cubin import compile_cubin

    src = Path(src)
    text = (src / CUTLASS_EXAMPLE).read_text()
    commit = ""
    head = src / "COMMIT"
    if head.is_file():
        commit = head.read_text().strip()
    else:
        try:
            commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            commit = ""
    row = dict(source=str(src), commit=commit, example=CUTLASS_EXAMPLE, arch=arch, **example_tile(text),
               nvcc_version=tools.tool_version("nvcc"), status="measured")
    try:
        # the example's own headers are the checkout's: its commit stands for them in the key
        b = compile_cubin(src / CUTLASS_EXAMPLE, arch, flags=("-std=c++17", "-O3", "-Xptxas", "-v"),
                          include=[src / inc for inc in CUTLASS_INCLUDES], extra_key=f"cutlass {commit}",
                          runner=runner, timeout=1800, refresh=not commit)   # no commit: nothing to key on
        if not b.ok:
            raise RuntimeError(f"nvcc failed (exit {b.rc}): {b.error()}")
        row["compile_s"] = round(b.compile_s, 1)
        ptx = resources.parse_ptxas_v(b.log)
        res = resources.parse_res_usage(tools.run_tool("cuobjdump", ["-res-usage", b.cubin], timeout=300).stdout)
    except Exception as e:  # noqa: BLE001 - a failed build is a row saying why, not a traceback
        row["status"] = f"error: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e) else ''}"
        return {c: row.get(c) for c in EXAMPLE_COLUMNS}
    gemm = [k for k in ptx if "GemmUniversalBlockwise" in k or "Blockwise" in k]
    if len(gemm) != 1:
        row["status"] = f"error: expected one blockwise GEMM kernel in the cubin, ptxas names {len(gemm)}"
        return {c: row.get(c) for c in EXAMPLE_COLUMNS}
    k = gemm[0]
    p, r = ptx[k], res.get(k, {})
    row.update(kernel=k, registers=p["registers"], stack_bytes=p["stack_bytes"],
               spill_store_bytes=p["spill_store_bytes"], spill_load_bytes=p["spill_load_bytes"],
               res_reg=r.get("REG"), res_stack=r.get("STACK"))
    return {c: row.get(c) for c in EXAMPLE_COLUMNS}


def verdict_a1_seed(example: dict | None, seed=SEED_A1, not_run_reason: str = CUTLASS_HOWTO):
    """A1, seed row: CUTLASS's example 94 itself at the seed's tile on sm_89. holds: it spills
    with >= NEAR_CAP registers and a stack within STACK_BAND of the seed's 600 B; holds-in-kind:
    it spills at the cap with a stack outside the band; differs: no spill at the cap. not-run:
    no checkout (``example`` None), a failed build, or a tile in the source other than the seed's.
    A holds row says that the per-block fix is the seed author's change, judged on the analogue row."""
    from ..report import claims

    arch = seed["arch"]
    tile = _seed_tile()
    tile_txt = f"{tile['bm']}x{tile['bn']}x{tile['bk']} / warp {tile['wm']}x{tile['wn']} / {tile['stages']} stages"
    rule = (f"CUTLASS example 94 (per-slice main loop) for {arch} at {tile_txt}: holds if it spills with "
            f">= {NEAR_CAP} registers and {_stack_words(seed)}; holds-in-kind if only the stack is outside that; "
            f"else differs")

    def v(verdict, fig, reason=""):
        return claims.Verdict("A1", verdict, fig, reason=reason, subject="seed", rule=rule)
    if example is None:
        return v("not-run", "example 94 not compiled", not_run_reason)
    if example.get("status") != "measured":
        return v("not-run", "example 94 did not compile", str(example.get("status")))
    got = {k: int(example[k]) for k in tile}
    if got != tile or example.get("arch") != arch:
        return v("not-run", f"example 94 instantiates {got} for {example.get('arch')}",
                 f"its source no longer builds the seed's tile ({tile_txt}) for {arch}")
    commit = str(example.get("commit") or "")[:10]
    fig = (f"example 94{' @' + commit if commit else ''}, {arch}, nvcc {example.get('nvcc_version')}: "
           f"{_fig(example)}; cuobjdump REG {example.get('res_reg')} / STACK {example.get('res_stack')}")
    spills_at_cap = _spills(example) and example["registers"] >= NEAR_CAP
    if spills_at_cap and _stack_ok(example["stack_bytes"], seed):
        return v("holds", fig, "the per-block fix is the seed author's change, not in example 94 "
                 "(judged on the analogue row)")
    if spills_at_cap:
        return v("holds-in-kind", fig, f"spills at the cap, stack {int(example['stack_bytes'])} B vs the seed's "
                 f"{seed['stack_bytes']} B")
    return v("differs", fig, f"example 94 does not spill at the register cap here ({_fig(example)})")


def verdict_a2(df: pd.DataFrame, grid_attrs: dict | None = None, *, expected_kernels: int | None = None):
    """A2 (analogue: fp8lab's own grid) from the table: holds when every config x variant x arch
    kernel compiled with no GPU, every resource column is filled and ptxas and cuobjdump agree on
    registers and stack for every kernel; the figure carries the count and the wall time.

    grid_attrs: ``run_spills(...).attrs`` (wall_s, n_compiled, n_cached, workers); defaults to df.attrs.
    """
    from ..report import claims

    mma = df[df["arm"] == ARM]
    n_cfg, n_var, n_arch = mma["config"].nunique(), mma["variant"].nunique(), mma["arch"].nunique()
    expected = expected_kernels if expected_kernels is not None else \
        len(mb.configs()) * len(mb.VARIANTS) * len(compile_grid.ARCHS)
    rule = (f"holds if all {expected} kernels (configs x variants x archs) compiled with no GPU, every resource "
            f"column is filled and ptxas == cuobjdump on registers and stack for each; else differs")
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
        return claims.Verdict("A2", "holds", figure, subject="analogue", rule=rule)
    return claims.Verdict("A2", "differs", figure, subject="analogue", rule=rule,
                          reason="the table is incomplete" if not complete else "ptxas and cuobjdump disagree")
