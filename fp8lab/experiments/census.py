"""Claim C1: which tensor-core instructions a kernel issues, read from its SASS.

C1 (seed 003): no ``mma`` takes bf16 x e4m3, so a weight-only (A16) kernel converts its
weights to bf16/fp16 and issues only 16-bit MMAs (HMMA); FP8 tensor instructions (QMMA,
QGMMA on sm_90) appear only when activations are FP8.

Three pieces, all without a GPU:

- :func:`probe_mma_types` asks ptxas itself which operand-type pairs ``mma.sync``
  (sm_80 / sm_89 / sm_90) and ``wgmma`` (sm_90a) accept, and which SASS instruction each
  accepted form becomes: the PTX type table, measured rather than quoted.
- :func:`census_fp8lab` compiles fp8lab's own kernels (every standalone
  ``fp8lab/kernels/*.cu`` for every arch it compiles for, and the Triton blockwise
  kernel for sm_89 / sm_90) and returns the per-kernel opcode census.
- :func:`census_user_binaries` does the same for user-supplied ``.whl`` / ``.so`` / cubin
  files through :mod:`fp8lab.toolchain.binaries` (function names read first, only matching cubins of
  the asked architectures disassembled, in parallel); their tables go to their own folder
  (:func:`binaries_folder`), never over fp8lab's own census.

:func:`kernel_summary` gives one row per kernel (MMA families, operand bits, activation
class); :func:`post_table` / :func:`post_figure` the post-sized census per kernel family and
arch (the table ``python -m fp8lab census`` prints); :func:`c1_verdict` (subject
``analogue``: fp8lab's kernels and the ptxas probe) and :func:`c1_seed_verdict` (subject
``seed``: Marlin kernels of a supplied binary) the claim's verdict rows.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import io
import itertools
import json
import os
import re
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from fp8lab.toolchain import binaries, procs, sass
from fp8lab.toolchain.cubin import compile_cubin, headers_under
from fp8lab.arms import registry
from fp8lab.measure.progress import progress as track
from fp8lab.toolchain.tools import find_tool, have_tool

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"
DEFAULT_ARCHS = ("sm_80", "sm_89", "sm_90")


@contextmanager
def tool_scope(jobs: int | None = None):
    """(temp folder, tracked tool processes, thread pool) for a census step that runs nvcc /
    ptxas / cuobjdump / Triton's compiler. The temp folder is ``procs.owned_temp_dir``
    (named after this process, so the next census removes one a SIGKILL left) and it is
    every tool's TMPDIR (nvcc's and cuobjdump's tmpxft_* files, Triton's ptxas inputs);
    SIGTERM (the runner stopping the notebook) raises KeyboardInterrupt here, the tool
    processes are killed, the pool drained and the folder removed before the process ends."""
    with binaries.sigterm_as_interrupt(), procs.owned_temp_dir(binaries.TEMP_PREFIX) as tmp_s:
        tmp = Path(tmp_s)
        scratch = tmp / "tooltmp"
        scratch.mkdir()
        children = binaries.Children(scratch)
        pool = cf.ThreadPoolExecutor(max_workers=jobs or binaries.default_workers())
        saved_dir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
        tempfile.tempdir = str(scratch)     # Triton compiles in this process
        os.environ["TMPDIR"] = str(scratch)  # tools started outside ``children`` (sass_census)
        try:
            yield tmp, children, pool
        except BaseException:
            children.stop()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            tempfile.tempdir = saved_dir
            if saved_env is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved_env

# Activation precision of each fp8lab arm (DESIGN.md's kernel arms), from its scheme in the
# registry. Used when the kernel's own name does not spell its scheme
# (``mma_blockwise_kernel<...>`` does not say "a8").
ARM_ACTIVATION = {arm: registry.activation(arm) for arm in (
    "mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "cublaslt_blockwise", "cublas_fp8_tensorwise",
    "scalar_tiled", "wmma_w8a16", "gemv_w8a16_fp8", "gemv_w8a16_int8", "gemv_w4a16_nvfp4", "gemv_w4a16_int4",
    "cublas_bf16", "gemv_w8a8_blockwise", "wgmma_blockwise_sm90")}
# Files in fp8lab/kernels that are not standalone kernel translation units: a torch
# binding (instantiates every config: slow, and duplicates the kernels), host self-checks.
_NOT_CENSUS_SOURCES = re.compile(r"_(ext|check|test|bench|binding)$")
_MMA_BLOCKWISE_VARIANTS = {"0": "per_slice", "1": "per_block", "2": "per_block_inplace"}
_MMA_BLOCKWISE_LOOKUPS = {"0": "", "1": " lookup=per_cta_tile", "2": " lookup=per_cta_first_col"}

# Triton tiles in the census: a decode tile (BLOCK_M = 16 is below wgmma's M = 64, so
# Triton falls back to mma.sync) and a prefill tile (wgmma on sm_90).
TRITON_CENSUS_TILES = (
    dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
)


# --------------------------------------------------------------------------------------
# The PTX type table, probed with ptxas

PROBE_TYPES = ("f16", "bf16", "e4m3", "e5m2", "s8")
_BITS = {"f16": 16, "bf16": 16, "e4m3": 8, "e5m2": 8, "s8": 8}

_MMA_SYNC_PTX = """.version 8.7
.target {arch}
.address_size 64
.visible .entry probe(.param .u64 p)
{{
  .reg .b32 a<4>;
  .reg .b32 b<2>;
  .reg {dt} d<4>;
  .reg .u64 rd<1>;
  ld.param.u64 rd0, [p];
  ld.global.b32 a0, [rd0]; ld.global.b32 a1, [rd0+4]; ld.global.b32 a2, [rd0+8]; ld.global.b32 a3, [rd0+12];
  ld.global.b32 b0, [rd0+16]; ld.global.b32 b1, [rd0+20];
  mov{dt} d0, {zero}; mov{dt} d1, {zero}; mov{dt} d2, {zero}; mov{dt} d3, {zero};
  {instr} {{d0,d1,d2,d3}}, {{a0,a1,a2,a3}}, {{b0,b1}}, {{d0,d1,d2,d3}};
  st.global{dt} [rd0], d0; st.global{dt} [rd0+4], d1; st.global{dt} [rd0+8], d2; st.global{dt} [rd0+12], d3;
  ret;
}}
"""

_WGMMA_PTX = """.version 8.7
.target {arch}
.address_size 64
.visible .entry probe(.param .u64 p)
{{
  .reg {dt} d<4>;
  .reg .b64 da, db;
  .reg .pred q;
  .reg .u64 rd<1>;
  ld.param.u64 rd0, [p];
  ld.global.b64 da, [rd0]; ld.global.b64 db, [rd0+8];
  mov{dt} d0, {zero}; mov{dt} d1, {zero}; mov{dt} d2, {zero}; mov{dt} d3, {zero};
  setp.ne.u64 q, da, 0;
  wgmma.fence.sync.aligned;
  {instr} {{d0,d1,d2,d3}}, da, db, q{tail};
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  st.global{dt} [rd0], d0; st.global{dt} [rd0+4], d1; st.global{dt} [rd0+8], d2; st.global{dt} [rd0+12], d3;
  ret;
}}
"""


def _probe_forms(instruction: str, arch: str, a: str, b: str):
    """Every PTX spelling worth trying for one (instruction, A type, B type): both K
    shapes (16 for 16-bit operands, 32 for 8-bit) and, for wgmma, each operand list
    (16-bit forms take scale and transpose immediates, FP8 only scale, integer none). A
    pair is 'accepted' if any form assembles, so a rejection is not an artefact of one
    spelling."""
    acc = "s32" if "s8" in (a, b) else "f32"
    dt, zero = (".s32", "0") if acc == "s32" else (".f32", "0f00000000")
    if instruction == "mma.sync":
        for k in (16, 32):
            instr = f"mma.sync.aligned.m16n8k{k}.row.col.{acc}.{a}.{b}.{acc}"
            yield instr, _MMA_SYNC_PTX.format(arch=arch, dt=dt, zero=zero, instr=instr)
    else:
        for k, tail in ((16, ", 1, 1, 0, 0"), (32, ", 1, 1"), (32, "")):
            instr = f"wgmma.mma_async.sync.aligned.m64n8k{k}.{acc}.{a}.{b}"
            yield instr, _WGMMA_PTX.format(arch=arch, dt=dt, zero=zero, instr=instr, tail=tail)


def _probe_one(instruction: str, arch: str, a: str, b: str, ptxas: str, tmp: Path,
               children: binaries.Children) -> dict:
    first_error = ""
    for i, (instr, text) in enumerate(_probe_forms(instruction, arch, a, b)):
        stem = tmp / f"{instruction.replace('.', '_')}_{arch}_{a}_{b}_{i}"
        src, cubin = stem.with_suffix(".ptx"), stem.with_suffix(".cubin")
        src.write_text(text)
        rc, out, err = children.run([ptxas, f"--gpu-name={arch}", str(src), "-o", str(cubin)])
        if rc == 0:
            df = sass.sass_census(cubin, demangle_names=False)
            s = sass.mma_summary(df)
            row = s.iloc[0] if len(s) else None
            mma_ops = " + ".join(sorted(set(df.loc[df["family"].map(sass.is_mma), "opcode"])))
            return dict(instruction=instruction, arch=arch, a=a, b=b, accepted=True, ptx=instr,
                        sass_mma=mma_ops or "none",
                        sass_fp8_converts=int(row["fp8_converts"]) if row is not None else 0,
                        error="")
        if not first_error:
            lines = [ln for ln in (err or out).splitlines() if "error" in ln]
            first_error = re.sub(r"^.*?error\s*:\s*", "", lines[0]) if lines else f"exit {rc}"
    return dict(instruction=instruction, arch=arch, a=a, b=b, accepted=False, ptx="",
                sass_mma="", sass_fp8_converts=0, error=first_error)


def probe_mma_types(archs=DEFAULT_ARCHS, types=PROBE_TYPES, *, wgmma: bool = True,
                    jobs: int | None = None) -> pd.DataFrame:
    """Which (A type, B type) pairs ptxas accepts for ``mma.sync`` on each arch (and for
    ``wgmma`` on sm_90a when sm_90 is asked and ``wgmma``), and the SASS MMA each becomes.

    One row per (instruction, arch, a, b): accepted, the PTX that assembled, the SASS MMA
    opcode(s) it compiled to, FP8 conversion instructions in that SASS, and ptxas's first
    error for a rejected pair. Columns a_bits / b_bits / mixed flag 16-bit x 8-bit pairs.
    """
    archs = [sass.normalise_arch(a) for a in archs]
    for t in types:
        if t not in _BITS:
            raise ValueError(f"probe types must be among {tuple(_BITS)}, got {t!r}")
    ptxas = str(find_tool("ptxas"))
    jobs_list = [("mma.sync", arch, a, b) for arch in archs for a, b in itertools.product(types, types)]
    if wgmma and any(a.startswith("sm_90") for a in archs):
        jobs_list += [("wgmma", "sm_90a", a, b) for a, b in itertools.product(types, types)]
    with tool_scope(jobs) as (tmp, children, pool):
        rows = list(track(pool.map(lambda j: _probe_one(*j, ptxas=ptxas, tmp=tmp, children=children),
                                   jobs_list), total=len(jobs_list), desc="ptxas probe", unit="type pairs"))
    df = pd.DataFrame(rows)
    df["a_bits"] = df["a"].map(_BITS)
    df["b_bits"] = df["b"].map(_BITS)
    df["mixed_16x8"] = df["a_bits"] != df["b_bits"]
    return df


def probe_table(probe: pd.DataFrame) -> pd.DataFrame:
    """The probe as a type table: one row per (instruction, arch, A type), one column per
    B type; a cell is the SASS MMA the pair compiled to ('-' = ptxas rejects the pair;
    '+ N cvt' = N FP8 -> F16 conversions ptxas added in front of it)."""
    def cell(r):
        if not r["accepted"]:
            return "-"
        conv = f" + {r['sass_fp8_converts']} cvt" if r["sass_fp8_converts"] else ""
        return f"{r['sass_mma']}{conv}"
    t = probe.assign(cell=probe.apply(cell, axis=1))
    order = list(dict.fromkeys(probe["b"]))
    out = t.pivot_table(index=["instruction", "arch", "a"], columns="b", values="cell", aggfunc="first")
    out = out[order].reindex(pd.MultiIndex.from_frame(probe[["instruction", "arch", "a"]].drop_duplicates()))
    out.columns.name = "B type"
    out.index.names = ["instruction", "arch", "A type"]
    return out


def probe_checks(probe: pd.DataFrame) -> dict:
    """What the probe shows: mixed 16-bit x 8-bit pairs accepted (C1 says none), and
    whether the positive controls assembled (bf16 x bf16 everywhere; e4m3 x e4m3 on
    sm_89+ mma.sync and on wgmma), without which a rejection would prove nothing."""
    mixed = probe[probe["mixed_16x8"]]
    ctrl = probe[((probe["a"] == "bf16") & (probe["b"] == "bf16"))
                 | ((probe["a"] == "e4m3") & (probe["b"] == "e4m3")
                    & ~probe["arch"].isin(["sm_80", "sm_86", "sm_87"]))]
    return dict(
        n_mixed=int(len(mixed)), n_mixed_accepted=int(mixed["accepted"].sum()),
        mixed_accepted=mixed.loc[mixed["accepted"], ["instruction", "arch", "a", "b"]].to_dict("records"),
        n_controls=int(len(ctrl)), controls_ok=bool(len(ctrl)) and bool(ctrl["accepted"].all()),
        archs=sorted(set(probe["arch"]), key=binaries._arch_key),
    )


# --------------------------------------------------------------------------------------
# fp8lab's own kernels

def census_sources(kernels_dir: Path = KERNELS_DIR) -> list[Path]:
    """Standalone kernel translation units: fp8lab/kernels/*.cu except bindings and
    host self-checks (``*_ext.cu``, ``*_check.cu``, ...), which repeat the same kernels."""
    return sorted(p for p in Path(kernels_dir).glob("*.cu") if not _NOT_CENSUS_SOURCES.search(p.stem))


def _nvcc_cubin(src: Path, arch: str, children: binaries.Children) -> tuple[Path | None, str]:
    """(cubin, '') or (None, nvcc's first error without its file path): through the cubin cache,
    keyed on the source and every header beside it; nvcc runs under ``children`` (killed on a stop)."""
    b = compile_cubin(src, arch, include=[src.parent], key_files=headers_under(src.parent),
                      runner=children.run, nvcc=find_tool("nvcc"))
    return (b.cubin, "") if b.ok else (None, b.error()[:300])


def census_fp8lab(archs=DEFAULT_ARCHS, *, triton: bool = True, triton_tiles=TRITON_CENSUS_TILES,
                  kernels_dir: Path = KERNELS_DIR, jobs: int | None = None
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Compile fp8lab's kernels for each arch and census their SASS.

    Returns (census, builds): the tidy opcode table (``sass.COLUMNS`` plus ``arm``), and
    one row per attempted build (arm, source, arch, variant, ok, reason). A source that
    does not compile for an arch (mma_blockwise needs sm_89+ for e4m3 mma) is a build row
    with ok=False and nvcc's first error, not an exception; so is a missing source file.
    """
    archs = [sass.normalise_arch(a) for a in archs]
    frames, builds = [], []
    with tool_scope(jobs) as (tmp, children, pool):
        jobs_list = [(src, arch) for src in census_sources(kernels_dir) for arch in archs]
        if jobs_list and not have_tool("nvcc"):
            builds += [dict(arm=s.stem, source=f"fp8lab/kernels/{s.name}", arch=a, variant="",
                            ok=False, reason="nvcc not found") for s, a in jobs_list]
            jobs_list = []
        # tool_scope drains the pool on the way out (and kills its nvcc on a stop)
        futs = {pool.submit(_nvcc_cubin, src, arch, children): (src, arch)
                for src, arch in jobs_list}
        # The Triton compiles run here while nvcc works in the pool.
        if triton:
            frames_t, builds_t = _triton_census(archs, triton_tiles, tmp)
            frames += frames_t
            builds += builds_t
        for fut in track(cf.as_completed(futs), total=len(futs), desc="nvcc census", unit="builds"):
            src, arch = futs[fut]
            cubin, reason = fut.result()
            label = f"fp8lab/kernels/{src.name}"
            builds.append(dict(arm=src.stem, source=label, arch=arch, variant="",
                               ok=cubin is not None, reason=reason))
            if cubin is not None:
                df = sass.sass_census(cubin, label=label)
                frames.append(df.assign(arm=src.stem))
    census = (pd.concat(frames, ignore_index=True) if frames
              else pd.DataFrame(columns=[*sass.COLUMNS, "arm"]))
    census = census.sort_values(["arm", "binary", "arch", "kernel", "opcode"], kind="stable")
    builds = pd.DataFrame(builds, columns=["arm", "source", "arch", "variant", "ok", "reason"])
    return census.reset_index(drop=True), builds.sort_values(["arm", "variant", "arch"]).reset_index(drop=True)


def _triton_census(archs, tiles, tmp: Path):
    frames, builds = [], []
    try:
        from fp8lab.kernels import triton_blockwise as tb
    except ImportError as e:  # triton not installed
        return [], [dict(arm="triton_blockwise", source="fp8lab/kernels/triton_blockwise.py",
                         arch=a, variant="", ok=False, reason=f"triton not importable: {e}")
                     for a in archs]
    for arch in track(archs, desc="triton census", unit="archs"):
        for variant in track(tb.VARIANTS, desc="variant"):
            for tile in tiles:
                tag = (f"{variant} {tile['BLOCK_M']}x{tile['BLOCK_N']}x{tb.DEFAULT_BLOCK_K[variant]}"
                       f" w{tile['num_warps']} s{tile['num_stages']}")
                label = f"fp8lab/kernels/triton_blockwise.py[{tag}]"
                row = dict(arm="triton_blockwise", source="fp8lab/kernels/triton_blockwise.py",
                           arch=arch, variant=tag, ok=False, reason="")
                try:
                    res = tb.triton_resource_usage(variant, arch, **tile)
                except ValueError as e:  # e.g. sm_80: no e4m3 tl.dot
                    row["reason"] = str(e)
                    builds.append(row)
                    continue
                cubin = tmp / f"triton_{variant}_{tile['BLOCK_M']}x{tile['BLOCK_N']}_{arch}.cubin"
                cubin.write_bytes(res["cubin"])
                df = sass.sass_census(cubin, label=label)
                frames.append(df.assign(arm="triton_blockwise"))
                row["ok"] = True
                builds.append(row)
    return frames, builds


# --------------------------------------------------------------------------------------
# User binaries: through fp8lab.toolchain.binaries (filter first, parallel), into their own folder

def invocation_dir() -> Path:
    """The folder the command was typed in. The runner's kernel works in notebooks/, but it
    inherits the shell's environment, whose $PWD is where ``python -m fp8lab run`` was
    typed; outside the runner (JupyterLab, a script) it is the working folder."""
    from fp8lab.paths import by_runner
    pwd = os.environ.get("PWD")
    if by_runner() and pwd and Path(pwd).is_dir():
        return Path(pwd)
    return Path.cwd()


def resolve_binaries(paths, base: Path | None = None) -> list[Path]:
    """The user's binaries as absolute paths, relative ones from where the command was typed
    (``invocation_dir``); any problem (missing, unreadable, not a CUDA binary) is one
    ``binaries.CensusError`` line, raised before any work."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return binaries.resolve_inputs(list(paths), cwd=base or invocation_dir())


def binary_name(path: Path) -> str:
    """A folder name for one binary: its file name without the extension, in the characters
    a table folder may hold."""
    stem = Path(path).name
    for ext in (".whl", ".cubin", ".fatbin"):
        if stem.endswith(ext):
            stem = stem[:-len(ext)]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem).strip(".") or "binary"


def binaries_folder(data_root: Path, device: str, notebook: str, path: Path,
                    out: str | os.PathLike | None = None) -> Path:
    """Where one binary's census goes: ``<data>/<device>/<notebook>/binaries/<name>/``, or
    ``<out>/<name>/`` (``out`` relative to where the command was typed). Never the folder
    of fp8lab's own census, whose tables decide C1 (``binaries.check_out_dir``)."""
    if out:
        o = Path(os.path.expanduser(str(out)))
        base = o if o.is_absolute() else invocation_dir() / o
    else:
        base = Path(data_root) / device / notebook / "binaries"
    folder = base / binary_name(path)
    binaries.check_out_dir(folder)
    own = (Path(data_root) / device / notebook).resolve()
    f = folder.resolve()
    if (f == own or own in f.parents) and not (own / "binaries" in f.parents):
        raise binaries.CensusError(f"{folder}: that is fp8lab's own census folder; "
                                   f"user binaries go under {own / 'binaries'}")
    return folder


def census_user_binaries(files, archs, kernel_filter: str | None = None, *,
                         workers: int | None = None) -> dict:
    """Filter-first census (``fp8lab.toolchain.binaries.census``) of each resolved binary, kept
    apart: {path: binaries.Census} (each kernel with its opcode Counter ``ops``)."""
    return {f: binaries.census([f], archs=archs or None, kernel_filter=kernel_filter or None,
                               workers=workers, keep_ops=True)
            for f in files}


def tidy_from_kernels(kernels: list[dict], binary_key: str = "library") -> pd.DataFrame:
    """Kernel dicts with ``ops`` (opcode Counters) as ``sass.COLUMNS`` rows."""
    rows = [(k[binary_key], k["arch"], k["kernel"], k["demangled"], op, sass.opcode_family(op), int(n))
            for k in kernels for op, n in sorted(k["ops"].items())]
    return pd.DataFrame(rows, columns=sass.COLUMNS)


def binary_tables(result: binaries.Census) -> dict[str, pd.DataFrame]:
    """One binary's tables: ``census_summary`` (the post's table: one row per library, arch,
    activation dtype, weight type, MMA family; kernel count; conversion opcodes in full),
    ``census_kernels`` (one row per kernel: the same columns plus the activation class its
    name states, which C1 uses, and the MMA counts by operand width) and ``census_notes``
    (libraries with nothing counted, and why)."""
    ks = pd.DataFrame([{c: k[c] for c in binaries.KERNEL_COLUMNS} for k in result.kernels],
                      columns=binaries.KERNEL_COLUMNS)
    ms = sass.mma_summary(tidy_from_kernels(result.kernels)).rename(columns={"binary": "library"})
    extra = ["n_mma", "mma_16bit", "mma_fp8", "mma_int", "mma_fp4", "fp8_converts", "local_mem", "act", "act_rule"]
    ks = ks.merge(ms[["library", "arch", "kernel", *extra]], on=["library", "arch", "kernel"], how="left")
    summary = pd.DataFrame(result.summary(), columns=binaries.SUMMARY_COLUMNS)
    notes = pd.DataFrame(sorted(result.notes), columns=["library", "skipped_because"])
    return dict(census_summary=summary, census_kernels=ks, census_notes=notes)


def write_tables(folder: Path, tables: dict[str, pd.DataFrame], meta: dict) -> list[Path]:
    """Each table as CSV + provenance sidecar (``results.write_pair``, as data/ tables)."""
    from fp8lab.report import results
    written = []
    for name, df in tables.items():
        buf = io.StringIO()
        df.to_csv(buf, index=False, lineterminator="\n")
        csv_bytes = buf.getvalue().encode()
        side = dict(meta, table={"name": name, "rows": int(len(df)), "columns": [str(c) for c in df.columns],
                                 "sha256": hashlib.sha256(csv_bytes).hexdigest()})
        meta_bytes = (json.dumps(side, indent=2, sort_keys=True, default=str) + "\n").encode()
        written.append(results.write_pair(Path(folder), name, csv_bytes, meta_bytes))
    return written


# --------------------------------------------------------------------------------------
# The post-sized census of fp8lab's own kernels: the same table as ``python -m fp8lab census``

def own_kernel_rows(census: pd.DataFrame) -> list[dict]:
    """fp8lab's kernels as ``binaries`` kernel dicts (library = the kernel's arm), so the
    post's table comes from ``binaries.summarise`` for both fp8lab and user binaries."""
    rows = []
    for (arm, binary, arch, kernel), g in census.groupby(["arm", "binary", "arch", "kernel"], sort=True):
        ops = Counter({op: int(n) for op, n in zip(g["opcode"], g["count"])})
        d = dict(library=arm, binary=binary, arch=arch, kernel=kernel, demangled=g["demangled"].iloc[0])
        d.update(binaries.describe_kernel(ops, d["demangled"]))
        rows.append(d)
    return rows


def post_table(kernels: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(binaries.summarise(kernels), columns=binaries.SUMMARY_COLUMNS)


def format_post_table(summary: pd.DataFrame) -> str:
    """The post's table as ``python -m fp8lab census`` prints it."""
    return binaries.format_table(summary.to_dict("records"), binaries.SUMMARY_COLUMNS, {
        "activation": "activation (MMA operands)", "weight": "weight (from name)",
        "mma_family": "MMA", "conversions": "conversion opcodes"})


# activation dtype (MMA operands) -> the registry's format id, whose colour the bar takes
_DTYPE_FORMAT = [("bf16", "bf16"), ("fp16", "fp16"), ("fp8 e4m3", "e4m3"), ("fp8 e5m2", "e5m2"),
                 ("int8", "int8"), ("fp4 e2m1", "e2m1"), ("int4", "int4"), ("tf32", "fp32"), ("fp32", "fp32")]
NO_MMA_GREY = "#BBBBBB"


def segment_color(activation: str) -> str:
    from fp8lab.arms import registry
    fmt = dict(_DTYPE_FORMAT).get(activation)
    return registry.color(fmt) if fmt else NO_MMA_GREY


def post_figure(summary: pd.DataFrame, title: str, *, width: float = 8.0):
    """The post-sized census: one bar per (library, arch), split by activation dtype x MMA
    family, the kernel count written on each piece; warpgroup MMAs (HGMMA/QGMMA) hatched.
    Returns the figure (blog width: ``width`` inches)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    s = summary.copy()
    lib = s["library"].astype(str)
    heads = {x.split("!", 1)[0] for x in lib}
    if len(heads) == 1 and lib.str.contains("!").all():   # one wheel: its members on the bars
        lib = lib.str.split("!", n=1).str[1]
    s["bar"] = lib + "  ·  " + s["arch"]
    s["segment"] = s["activation"] + " · " + s["mma_family"]
    s.loc[s["mma_family"] == "none", "segment"] = "no MMA"
    bars = list(dict.fromkeys(s["bar"]))
    tab = s.pivot_table(index="bar", columns="segment", values="kernels", aggfunc="sum", fill_value=0)
    tab = tab.reindex(bars)
    seg_act = dict(zip(s["segment"], s["activation"]))
    segs = sorted(tab.columns, key=lambda c: (c == "no MMA", c))
    fig, ax = plt.subplots(figsize=(width, 0.34 * len(bars) + 1.9))
    left = [0.0] * len(bars)
    total = tab.sum(axis=1).to_numpy()
    for seg in segs:
        vals = tab[seg].to_numpy()
        color = segment_color(seg_act.get(seg, "no MMA")) if seg != "no MMA" else NO_MMA_GREY
        hatch = "///" if "GMMA" in seg else None
        ax.barh(range(len(bars)), vals, left=left, color=color, hatch=hatch,
                edgecolor="white", linewidth=0.6, label=seg)
        for i, v in enumerate(vals):
            if v:
                dark = color.lstrip("#") and sum(int(color.lstrip("#")[k:k + 2], 16) for k in (0, 2, 4)) < 384
                inside = v >= 0.06 * max(total.max(), 1)
                ax.text(left[i] + v / 2 if inside else left[i] + v + 0.2, i, f"{int(v)}",
                        ha="center" if inside else "left", va="center", fontsize=8,
                        color="white" if inside and dark else "black",
                        bbox=dict(boxstyle="round,pad=0.1", fc=color, ec="none") if hatch and inside else None)
        left = [a + b for a, b in zip(left, vals)]
    # FP8 conversions at each bar's end: what feeds a 16-bit MMA from FP8 data, in full
    conv = s.groupby("bar")["conversions"].agg(lambda c: sorted({op for x in c for op in str(x).split()
                                                                  if re.search(r"E4M3|E5M2", op)}))
    for i, b in enumerate(bars):
        if conv.get(b):
            ax.text(total[i] + 0.012 * max(total.max(), 1) * 3, i, "  ".join(conv[b]), va="center",
                    ha="left", fontsize=7, color="#444444", clip_on=False)
    ax.set_yticks(range(len(bars)), bars)
    ax.invert_yaxis()
    ax.set_xlim(0, max(total.max(), 1) * 1.08)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("kernels (count; each number is one piece of the bar"
                  + ("; grey text: FP8 conversion opcodes)" if any(conv.get(b) for b in bars) else ")"))
    ax.set_title(title)
    ax.grid(axis="y", visible=False)
    handles = [Patch(facecolor=(segment_color(seg_act.get(g, "no MMA")) if g != "no MMA" else NO_MMA_GREY),
                     hatch="///" if "GMMA" in g else None, edgecolor="white", label=g) for g in segs]
    fig.tight_layout()
    # below the axes, as a figure legend: savefig's tight box (plotting's style) keeps it
    title = "activation (MMA operands) · MMA instruction" + (
        " (hatched: warpgroup MMA)" if any("GMMA" in g for g in segs) else "")
    fig.legend(handles=handles, title=title,
               loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(segs)), fontsize=8,
               title_fontsize=8, frameon=False)
    return fig


# --------------------------------------------------------------------------------------
# Per-kernel summary and the verdict

def _label(arm: str, binary: str, demangled: str) -> str:
    if arm == "triton_blockwise":
        m = re.search(r"\[(.*)\]", binary)
        return f"triton_blockwise {m.group(1) if m else ''}".strip()
    m = re.search(r"TileConfig<(\d+), (\d+), (\d+), (\d+), (\d+)>, (\d+), (\d+)>", demangled)
    if arm == "mma_blockwise" and m:
        bm, bn, wm, wn, st, var, look = m.groups()
        return (f"mma_blockwise {_MMA_BLOCKWISE_VARIANTS.get(var, 'variant ' + var)} "
                f"{bm}x{bn}x128 w{wm}x{wn} s{st}{_MMA_BLOCKWISE_LOOKUPS.get(look, '')}")
    short = re.sub(r"^void\s+", "", demangled)
    short = re.sub(r"\(.*\)$", "", short)
    return short if len(short) <= 60 else short[:57] + "..."


def kernel_summary(census: pd.DataFrame) -> pd.DataFrame:
    """:func:`fp8lab.toolchain.sass.mma_summary` plus ``arm``, a readable ``label``, and ``act``
    decided by the kernel's name first (:func:`fp8lab.toolchain.sass.classify_activation`), then by
    its arm (:data:`ARM_ACTIVATION`)."""
    s = sass.mma_summary(census)
    if not len(s):
        return s.assign(arm=pd.Series(dtype=str), label=pd.Series(dtype=str))
    arms = census.drop_duplicates(["binary", "arch", "kernel"]).set_index(["binary", "arch", "kernel"])["arm"] \
        if "arm" in census else None
    s["arm"] = [arms.get((b, a, k), "") if arms is not None else "" for b, a, k in
                zip(s["binary"], s["arch"], s["kernel"])]
    s["arm"] = s["arm"].fillna("")
    for i, r in s.iterrows():
        if r["act"] == "unknown" and r["arm"] in ARM_ACTIVATION:
            s.at[i, "act"] = ARM_ACTIVATION[r["arm"]]
            s.at[i, "act_rule"] = f"fp8lab arm {r['arm']} is {ARM_ACTIVATION[r['arm']]}"
    s["label"] = [_label(a, b, d) for a, b, d in zip(s["arm"], s["binary"], s["demangled"])]
    return s


def c1_checks(summary: pd.DataFrame) -> dict:
    """Counts behind C1 from a kernel summary.

    - a16_violations: A16 kernels that issue any non-16-bit MMA (FP8, FP4 or integer).
    - fp8_mma_not_a8: kernels with an FP8 MMA whose activations are known to be 16-bit.
    - a8_emulated: A8 kernels with no FP8 MMA but 16-bit MMAs fed by FP8 -> F16
      conversions (mma.sync e4m3 on sm_90 is executed this way): not a C1 violation, C1
      says FP8 MMAs need FP8 activations, not that FP8 activations get them.
    """
    a16 = summary[summary["act"] == "A16"]
    a8 = summary[summary["act"] == "A8"]
    non16 = a16["mma_fp8"] + a16["mma_fp4"] + a16["mma_int"]
    a8_fp8 = a8[a8["mma_fp8"] > 0]
    a8_emul = a8[(a8["mma_fp8"] == 0) & (a8["mma_16bit"] > 0) & (a8["fp8_converts"] > 0)]
    fp8_mma = summary[summary["mma_fp8"] > 0]
    return dict(
        n_kernels=int(len(summary)),
        n_a16=int(len(a16)), n_a16_with_mma=int((a16["n_mma"] > 0).sum()),
        n_a16_hmma_only=int(((a16["n_mma"] > 0) & (non16 == 0)).sum()),
        a16_violations=a16.loc[non16 > 0, "label"].tolist(),
        n_a8=int(len(a8)), n_a8_fp8_mma=int(len(a8_fp8)),
        a8_emulated=a8_emul[["label", "arch"]].to_dict("records"),
        n_fp8_mma=int(len(fp8_mma)),
        fp8_mma_not_a8=fp8_mma.loc[fp8_mma["act"] == "A16", "label"].tolist(),
        n_fp8_mma_unknown=int((fp8_mma["act"] == "unknown").sum()),
        n_unknown=int((summary["act"] == "unknown").sum()),
        archs=sorted(set(summary["arch"]), key=binaries._arch_key),
    )


#: Fewest A16 kernels with MMAs that must be seen before the A16 half of C1 counts as observed.
MIN_A16_OBSERVED = 1
#: the seed's subject: Marlin kernels (vLLM, sglang), found by their demangled name
MARLIN = re.compile(r"\bMarlin\b|marlin")
#: the command that produces the seed row (a vLLM wheel; any version with Marlin kernels)
SEED_COMMAND = ("python -m fp8lab run --only 09 -p binaries '[vllm-<version>-cp38-abi3-manylinux1_x86_64.whl]' "
                "-p archs '[sm_80, sm_89, sm_90, sm_120]' -p kernel_filter 'marlin|Marlin'")


def c1_rule(with_probe: bool = True) -> str:
    """The C1 rule, one line, from the constants ``c1_verdict`` decides with."""
    probe = ("ptxas accepts a mixed 16-bit x 8-bit mma/wgmma form, or " if with_probe else "")
    holds = ("the probe rejects every mixed form (its same-type controls assembling) and "
             if with_probe else "")
    return (f"differs if {probe}an A16 kernel issues a non-16-bit MMA, or an FP8 MMA appears in an A16 "
            f"kernel; holds if {holds}>= {MIN_A16_OBSERVED} A16 kernel(s) with MMAs are seen, all 16-bit only"
            + ("; holds-in-kind if only the A8 half (QMMA/QGMMA in A8 kernels) is seen" if with_probe else
               "; not-run with fewer") + " (A16/A8 from the kernel's name or arm, never its SASS)")


def c1_seed_verdict(summary: pd.DataFrame | None, names: list[str] | None = None) -> dict:
    """C1 on the seed's subject: the Marlin kernels (``MARLIN`` on the demangled name) of the
    supplied binaries, as the seed counted them in a vLLM wheel. ``summary`` is a
    ``kernel_summary`` / ``census_kernels``-like table (act, n_mma, mma_* counts, label or
    demangled); None: no binary was given. Returns dict(verdict, our_figure, reason, rule)."""
    rule = (f"Marlin kernels (/{MARLIN.pattern}/ in the demangled name) of the supplied binaries: "
            + c1_rule(with_probe=False))
    if summary is None:
        return dict(verdict="not-run", our_figure="no binary given", rule=rule,
                    reason=f"the seed's subject (Marlin in a vLLM wheel) was not censused; run: {SEED_COMMAND}")
    names = names or []
    m = summary[summary["demangled"].astype(str).str.contains(MARLIN)] if len(summary) else summary
    where = ", ".join(names) or "the supplied binaries"
    if not len(m):
        return dict(verdict="not-run", our_figure=f"no Marlin kernel in {where}", rule=rule,
                    reason=f"the supplied binaries hold no Marlin kernel for the asked archs; run: {SEED_COMMAND}")
    m = m.assign(label=m["label"] if "label" in m else m["demangled"])
    c = c1_checks(m)
    fig = (f"{c['n_a16_hmma_only']}/{c['n_a16_with_mma']} Marlin A16 kernels issue only 16-bit MMA; "
           f"FP8 MMA in {c['n_a8_fp8_mma']}/{c['n_a8']} Marlin A8 kernels ({', '.join(c['archs'])}; {where})")
    problems = []
    if c["a16_violations"]:
        problems.append(f"Marlin A16 kernels with non-16-bit MMA: {c['a16_violations'][:3]}")
    if c["fp8_mma_not_a8"]:
        problems.append(f"FP8 MMA in Marlin A16 kernels: {c['fp8_mma_not_a8'][:3]}")
    if problems:
        return dict(verdict="differs", our_figure=fig, reason="; ".join(problems), rule=rule)
    if c["n_a16_with_mma"] >= MIN_A16_OBSERVED:
        unk = (f"{c['n_unknown']} Marlin kernel(s) whose name states no activation type left out"
               if c["n_unknown"] else "")
        return dict(verdict="holds", our_figure=fig, reason=unk, rule=rule)
    return dict(verdict="not-run", our_figure=fig, rule=rule,
                reason=f"fewer than {MIN_A16_OBSERVED} Marlin A16 kernel with MMAs among {len(m)} Marlin kernels")


def c1_verdict(summary: pd.DataFrame, probe: pd.DataFrame | None, *, source: str = "fp8lab") -> dict:
    """The C1 verdict from what was measured: dict(verdict, our_figure, reason, checks).

    - differs: ptxas accepts a mixed 16-bit x 8-bit MMA, or an A16 kernel issues a non-16-bit
      MMA, or an FP8 MMA shows up in an A16 kernel.
    - holds: the probe rejects every mixed pair (with its positive controls passing) and
      at least one A16 kernel with MMAs was observed issuing only 16-bit MMAs.
    - holds-in-kind: the probe and the A8 side hold but no A16 kernel was there to observe
      (fp8lab has none yet): the A16 half follows from the ISA, it was not seen in SASS.
    - not-run: no probe and no kernels (missing tools).
    """
    pc = probe_checks(probe) if probe is not None and len(probe) else None
    c = c1_checks(summary) if len(summary) else None
    checks = dict(probe=pc, census=c, source=source)
    rule = c1_rule(with_probe=True)
    if pc is None and c is None:
        return dict(verdict="not-run", our_figure="nothing measured",
                    reason="neither the ptxas probe nor a census ran (ptxas/nvcc/cuobjdump missing?)",
                    checks=checks, rule=rule)
    parts, problems = [], []
    if pc is not None:
        parts.append(f"ptxas accepts {pc['n_mixed_accepted']}/{pc['n_mixed']} mixed 16-bit x 8-bit "
                     f"mma/wgmma forms ({', '.join(pc['archs'])})")
        if pc["n_mixed_accepted"]:
            problems.append(f"ptxas accepted mixed forms: {pc['mixed_accepted']}")
        if not pc["controls_ok"]:
            problems.append("probe controls (bf16 x bf16, e4m3 x e4m3) did not all assemble: the probe "
                            "cannot tell a rejection from a broken template")
    if c is not None:
        parts.append(f"{c['n_a16_hmma_only']}/{c['n_a16_with_mma']} A16 kernels with MMAs issue only "
                     f"16-bit MMA; FP8 MMA in {c['n_a8_fp8_mma']}/{c['n_a8']} A8 kernels and in "
                     f"{len(c['fp8_mma_not_a8'])} A16 kernels ({source})")
        if c["a16_violations"]:
            problems.append(f"A16 kernels with non-16-bit MMA: {c['a16_violations'][:5]}")
        if c["fp8_mma_not_a8"]:
            problems.append(f"FP8 MMA in A16 kernels: {c['fp8_mma_not_a8'][:5]}")
    our_figure = "; ".join(parts)
    hard = [p for p in problems if not p.startswith("probe controls")]
    if hard:
        return dict(verdict="differs", our_figure=our_figure, reason="; ".join(problems), checks=checks,
                    rule=rule)
    probe_ok = pc is not None and pc["controls_ok"] and pc["n_mixed_accepted"] == 0
    a16_seen = c is not None and c["n_a16_with_mma"] >= MIN_A16_OBSERVED
    emul = ""
    if c is not None and c["a8_emulated"]:
        emul = (f" Note: {len(c['a8_emulated'])} A8 kernel build(s) issue no FP8 MMA at all "
                "(mma.sync e4m3 on sm_90 runs as F2FP.F16.E4M3 + HMMA.F16): FP8 activations "
                "are necessary for QMMA/QGMMA, not sufficient.")
    if probe_ok and a16_seen:
        return dict(verdict="holds", our_figure=our_figure, reason=emul.strip(), checks=checks, rule=rule)
    if probe_ok and c is not None and c["n_a8_fp8_mma"] > 0:
        return dict(verdict="holds-in-kind", our_figure=our_figure, checks=checks, rule=rule, reason=(
            f"the A16 half was not observed: no weight-only (A16) kernel with MMAs was found in "
            f"{source}; it follows from the ISA probe (no mma.sync/wgmma form takes a 16-bit "
            "and an 8-bit operand, so A16 operands can only feed HMMA/HGMMA). The A8 half was "
            "observed (QMMA/QGMMA only in FP8-activation kernels)." + emul))
    reason = "; ".join(problems) or ("no A16 kernel and no FP8 MMA observed, and the probe did not run"
                                     if not probe_ok else "no kernels with MMAs observed")
    return dict(verdict="not-run", our_figure=our_figure or "nothing measured", reason=reason,
                checks=checks, rule=rule)
