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
- :func:`census_binaries` does the same for user-supplied ``.so`` / ``.whl`` files (a vLLM
  wheel, a PyTorch extension), restricted to the asked architectures.

:func:`kernel_summary` gives one row per kernel (MMA families, operand bits, activation
class) and :func:`c1_verdict` turns the probe and the summary into the claim's verdict.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pandas as pd

from fp8lab import sass
from fp8lab.arms import registry
from fp8lab.progress import progress as track
from fp8lab.tools import find_tool, have_tool

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"
DEFAULT_ARCHS = ("sm_80", "sm_89", "sm_90")

# Activation precision of each fp8lab arm (DESIGN.md's kernel arms), from its scheme in the
# registry. Used when the kernel's own name does not spell its scheme
# (``mma_blockwise_kernel<...>`` does not say "a8").
ARM_ACTIVATION = {arm: registry.activation(arm) for arm in (
    "mma_blockwise", "triton_blockwise", "cutlass_blockwise_sm90", "cublaslt_blockwise", "cublas_fp8_tensorwise",
    "scalar_tiled", "wmma_w8a16", "gemv_w8a16_fp8", "gemv_w8a16_int8", "gemv_w4a16_nvfp4", "gemv_w4a16_int4",
    "cublas_bf16")}
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


def _probe_one(instruction: str, arch: str, a: str, b: str, ptxas: str, tmp: Path) -> dict:
    first_error = ""
    for i, (instr, text) in enumerate(_probe_forms(instruction, arch, a, b)):
        stem = tmp / f"{instruction.replace('.', '_')}_{arch}_{a}_{b}_{i}"
        src, cubin = stem.with_suffix(".ptx"), stem.with_suffix(".cubin")
        src.write_text(text)
        proc = subprocess.run([ptxas, f"--gpu-name={arch}", str(src), "-o", str(cubin)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            df = sass.sass_census(cubin, demangle_names=False)
            s = sass.mma_summary(df)
            row = s.iloc[0] if len(s) else None
            mma_ops = " + ".join(sorted(set(df.loc[df["family"].map(sass.is_mma), "opcode"])))
            return dict(instruction=instruction, arch=arch, a=a, b=b, accepted=True, ptx=instr,
                        sass_mma=mma_ops or "none",
                        sass_fp8_converts=int(row["fp8_converts"]) if row is not None else 0,
                        error="")
        if not first_error:
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "error" in ln]
            first_error = re.sub(r"^.*?error\s*:\s*", "", lines[0]) if lines else f"exit {proc.returncode}"
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
    with tempfile.TemporaryDirectory(prefix="fp8lab-probe-") as tmp, \
            cf.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        rows = list(track(pool.map(lambda j: _probe_one(*j, ptxas=ptxas, tmp=Path(tmp)), jobs_list),
                          total=len(jobs_list), desc="ptxas probe", unit="type pairs"))
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
        archs=sorted(set(probe["arch"])),
    )


# --------------------------------------------------------------------------------------
# fp8lab's own kernels

def census_sources(kernels_dir: Path = KERNELS_DIR) -> list[Path]:
    """Standalone kernel translation units: fp8lab/kernels/*.cu except bindings and
    host self-checks (``*_ext.cu``, ``*_check.cu``, ...), which repeat the same kernels."""
    return sorted(p for p in Path(kernels_dir).glob("*.cu") if not _NOT_CENSUS_SOURCES.search(p.stem))


def _nvcc_cubin(src: Path, arch: str, out: Path) -> tuple[Path | None, str]:
    cmd = [str(find_tool("nvcc")), "-cubin", "-O3", "-std=c++17", f"-arch={arch}",
           "-I", str(src.parent), str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode == 0:
        return out, ""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if "error" in ln.lower()]
    if not lines:
        return None, f"nvcc exit {proc.returncode}"
    # Drop the temp-file path and line number: the message is what tells why.
    tool = "ptxas" if lines[0].startswith("ptxas") else "nvcc"
    msg = re.sub(r"^.*?error\s*:?\s*", "", lines[0], flags=re.I)
    return None, f"{tool}: {msg}"[:300]


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
    with tempfile.TemporaryDirectory(prefix="fp8lab-census-") as tmp:
        tmp = Path(tmp)
        jobs_list = [(src, arch) for src in census_sources(kernels_dir) for arch in archs]
        if jobs_list and not have_tool("nvcc"):
            builds += [dict(arm=s.stem, source=f"fp8lab/kernels/{s.name}", arch=a, variant="",
                            ok=False, reason="nvcc not found") for s, a in jobs_list]
            jobs_list = []
        with cf.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
            futs = {pool.submit(_nvcc_cubin, src, arch, tmp / f"{src.stem}_{arch}.cubin"): (src, arch)
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
# User binaries

def census_binaries(paths, archs=DEFAULT_ARCHS, *, kernel_filter: str | None = None) -> pd.DataFrame:
    """Census of user .so / .whl / .cubin files, one cuobjdump pass per arch (so a binary
    built for many archs is only disassembled for the asked ones). ``kernel_filter`` is a
    regex on the mangled name (``marlin|Marlin`` keeps vLLM's Marlin kernels)."""
    paths = [Path(p).expanduser() for p in paths]
    archs = [sass.normalise_arch(a) for a in archs]
    frames = []
    for p in track(paths, desc="binary census", unit="files"):
        try:
            got = sass.sass_census(p, arch=archs, kernel_filter=kernel_filter)
        except sass.NoDeviceCode:
            got = pd.DataFrame(columns=sass.COLUMNS)
        if not len(got):
            raise ValueError(f"{p} holds no SASS for {', '.join(archs)}"
                             + (f" matching /{kernel_filter}/" if kernel_filter else ""))
        frames.append(got)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=sass.COLUMNS)
    return df.assign(arm="")


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
    """:func:`fp8lab.sass.mma_summary` plus ``arm``, a readable ``label``, and ``act``
    decided by the kernel's name first (:func:`fp8lab.sass.classify_activation`), then by
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
        archs=sorted(set(summary["arch"])),
    )


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
    if pc is None and c is None:
        return dict(verdict="not-run", our_figure="nothing measured",
                    reason="neither the ptxas probe nor a census ran (ptxas/nvcc/cuobjdump missing?)",
                    checks=checks)
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
        return dict(verdict="differs", our_figure=our_figure, reason="; ".join(problems), checks=checks)
    probe_ok = pc is not None and pc["controls_ok"] and pc["n_mixed_accepted"] == 0
    a16_seen = c is not None and c["n_a16_with_mma"] > 0
    emul = ""
    if c is not None and c["a8_emulated"]:
        emul = (f" Note: {len(c['a8_emulated'])} A8 kernel build(s) issue no FP8 MMA at all "
                "(mma.sync e4m3 on sm_90 runs as F2FP.F16.E4M3 + HMMA.F16): FP8 activations "
                "are necessary for QMMA/QGMMA, not sufficient.")
    if probe_ok and a16_seen:
        return dict(verdict="holds", our_figure=our_figure, reason=emul.strip(), checks=checks)
    if probe_ok and c is not None and c["n_a8_fp8_mma"] > 0:
        return dict(verdict="holds-in-kind", our_figure=our_figure, checks=checks, reason=(
            f"the A16 half was not observed: no weight-only (A16) kernel with MMAs was found in "
            f"{source}; it follows from the ISA probe (no mma.sync/wgmma form takes a 16-bit "
            "and an 8-bit operand, so A16 operands can only feed HMMA/HGMMA). The A8 half was "
            "observed (QMMA/QGMMA only in FP8-activation kernels). Re-run with binaries=[a vLLM "
            "wheel] or after fp8lab's W8A16 kernels exist to observe it." + emul))
    reason = "; ".join(problems) or ("no A16 kernel and no FP8 MMA observed, and the probe did not run"
                                     if not probe_ok else "no kernels with MMAs observed")
    return dict(verdict="not-run", our_figure=our_figure or "nothing measured", reason=reason,
                checks=checks)
