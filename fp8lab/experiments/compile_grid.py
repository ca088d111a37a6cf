"""The compile grid: every tile configuration x main-loop variant x arch of the blockwise FP8 mma
kernel, compiled with no GPU, one kernel per nvcc call, with registers and spills per kernel.

Per kernel: ``nvcc -cubin -arch=sm_XX -O3 -Xptxas -v -D...`` on ``mma_blockwise.cu`` (one
explicit instantiation selected by -D macros, no host code), ptxas -v parsed for registers, stack
frame, spill stores / loads and static shared memory; ``cuobjdump -res-usage`` of the cubin
cross-checks registers and stack; ``cuobjdump -sass`` counts the MMA and local-memory
instructions. Results are cached by the sha256 of (sources, flags, configuration, arch, tool
versions) in ``~/.cache/fp8lab/compile`` (``$FP8LAB_CACHE_DIR`` moves the root), written
atomically, so an unchanged grid rebuilds in seconds.

Every job is validated before any nvcc runs: a bad configuration raises ValueError naming the
constraint and nothing is compiled.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pandas as pd

from ..toolchain import procs, resources, tools
from ..report.results import atomic_write_bytes
from ..kernels import mma_blockwise as mb
from ..measure.progress import progress as track

ARCHS = ("sm_89", "sm_90")
# -cubin: device code only (no host compile, no fatbin); -O3 only, no -G / -lineinfo.
NVCC_FLAGS = ("-cubin", "-O3", "-std=c++17", "-Xptxas", "-v")
CACHE_FORMAT = 3  # bump when the cached row's fields change

_MMA_OPS = ("QMMA", "HMMA", "IMMA", "QGMMA", "HGMMA")
# "/*0a30*/   @!P0 LDL.LU R4, [R1+0x8] ;" -> address, opcode (predicate dropped), operands
_SASS_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")
_BRA_TARGET = re.compile(r"0x([0-9a-f]+)")


@dataclasses.dataclass(frozen=True)
class Job:
    """One kernel for one arch."""

    config: mb.MMAConfig
    variant: str
    arch: str
    scale_lookup: str = "per_warp"

    def validate(self) -> "Job":
        if not isinstance(self.config, mb.MMAConfig):
            raise ValueError(f"config must be an MMAConfig, got {type(self.config).__name__}")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.variant not in mb.VARIANTS:
            raise ValueError(f"variant must be one of {mb.VARIANTS}, got {self.variant!r}")
        if self.scale_lookup not in mb.SCALE_LOOKUPS:
            raise ValueError(f"scale_lookup must be one of {mb.SCALE_LOOKUPS}, got {self.scale_lookup!r}")
        self.config.validate(self.arch)
        return self

    def defines(self) -> list[str]:
        c = self.config
        return [f"-DFP8LAB_BM={c.bm}", f"-DFP8LAB_BN={c.bn}", f"-DFP8LAB_WM={c.wm}", f"-DFP8LAB_WN={c.wn}",
                f"-DFP8LAB_STAGES={c.stages}", f"-DFP8LAB_VARIANT={mb.VARIANTS.index(self.variant)}",
                f"-DFP8LAB_SCALE_LOOKUP={mb.SCALE_LOOKUPS.index(self.scale_lookup)}"]

    def nvcc_args(self, cubin: Path) -> list[str]:
        return [*NVCC_FLAGS, f"-arch={self.arch}", f"-I{mb.KERNEL_DIR}", *self.defines(),
                str(mb.STANDALONE_SOURCE), "-o", str(cubin)]


def default_cache_dir() -> Path:
    from ..paths import cache_dir
    return cache_dir("compile")


def _sources_digest() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in mb.SOURCES}


def cache_key(job: Job, *, sources: dict[str, str] | None = None, nvcc_version: str | None = None,
              cuobjdump_version: str | None = None) -> str:
    """sha256 of everything the compiled kernel and its parsed row depend on."""
    payload = {
        "format": CACHE_FORMAT,
        "sources": sources if sources is not None else _sources_digest(),
        "flags": list(NVCC_FLAGS),
        "config": dataclasses.asdict(job.config),
        "variant": job.variant, "arch": job.arch, "scale_lookup": job.scale_lookup,
        "nvcc": nvcc_version if nvcc_version is not None else tools.tool_version("nvcc"),
        "cuobjdump": cuobjdump_version if cuobjdump_version is not None else tools.tool_version("cuobjdump"),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


_atomic_write = atomic_write_bytes


def _run_nvcc(args: list[str]) -> subprocess.CompletedProcess:
    """The one place nvcc runs (tests monkeypatch it to prove the cache / validation)."""
    return tools.run_tool("nvcc", args, timeout=900)


def sass_counts(sass: str) -> dict:
    """MMA and local-memory instruction counts from ``cuobjdump -sass`` text.

    ``sass_loop_stl`` / ``sass_loop_ldl`` count the local-memory (spill) instructions inside the
    main loop: the innermost backward branch whose body holds every MMA instruction. Spills there
    are paid on every 128-wide K block; spills outside it (prologue, epilogue) almost never.
    """
    ins = [(int(a, 16), op, rest) for a, op, rest in _SASS_INS.findall(sass)]
    base = [op.split(".")[0] for _, op, _ in ins]
    mma_idx = [i for i, b in enumerate(base) if b in _MMA_OPS]
    loop = []
    if mma_idx:
        lo, hi = ins[mma_idx[0]][0], ins[mma_idx[-1]][0]
        spans = []
        for addr, op, rest in ins:
            m = _BRA_TARGET.search(rest)
            if op.startswith("BRA") and m and int(m.group(1), 16) <= lo and addr >= hi:
                spans.append((int(m.group(1), 16), addr))
        if spans:
            start, end = min(spans, key=lambda s: s[1] - s[0])
            loop = [b for (a, _, _), b in zip(ins, base) if start <= a <= end]
    return {
        "sass_mma_opcodes": " ".join(sorted({ins[i][1] for i in mma_idx})),
        "sass_qmma": base.count("QMMA"),
        "sass_hmma": base.count("HMMA"),
        "sass_stl": base.count("STL"),
        "sass_ldl": base.count("LDL"),
        "sass_loop_stl": loop.count("STL"),
        "sass_loop_ldl": loop.count("LDL"),
        "sass_loop_instructions": len(loop),
        "sass_instructions": len(ins),
    }


def _compile_fresh(job: Job, key: str, cache_dir: Path) -> dict:
    # owned: a notebook killed mid-grid leaves its folder; the next grid removes it
    with procs.owned_temp_dir("fp8lab_grid_") as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        t0 = time.perf_counter()
        proc = _run_nvcc(job.nvcc_args(cubin))
        compile_s = time.perf_counter() - t0
        log = proc.stdout + proc.stderr
        ptx = resources.parse_ptxas_v(log)
        res = resources.parse_res_usage(tools.run_tool("cuobjdump", ["-res-usage", cubin], timeout=300).stdout)
        sass = tools.run_tool("cuobjdump", ["-sass", cubin], timeout=300).stdout
        cubin_bytes = cubin.read_bytes()
        build_s = time.perf_counter() - t0
    if len(ptx) != 1 or len(res) != 1:
        raise RuntimeError(f"{job}: expected exactly one kernel, ptxas reported {list(ptx)}, "
                           f"cuobjdump {list(res)}")
    (kernel, p), = ptx.items()
    r = res.get(kernel)
    if r is None:
        raise RuntimeError(f"{job}: cuobjdump names {list(res)}, ptxas names {kernel}")
    if p["arch"] != job.arch:
        raise RuntimeError(f"{job}: ptxas compiled for {p['arch']}, asked for {job.arch}")
    # Cross-check: both tools must agree on the numbers that come from both.
    if r["REG"] != p["registers"] or r["STACK"] != p["stack_bytes"]:
        raise RuntimeError(f"{job}: ptxas says {p['registers']} registers / {p['stack_bytes']} B stack, "
                           f"cuobjdump says REG {r['REG']} / STACK {r['STACK']}")
    row = {
        "kernel": kernel,
        "registers": p["registers"],
        "stack_bytes": p["stack_bytes"],
        "spill_store_bytes": p["spill_store_bytes"],
        "spill_load_bytes": p["spill_load_bytes"],
        "static_smem_bytes": p["static_smem_bytes"],
        "cmem0_bytes": r.get("CONSTANT[0]", p["cmem0_bytes"]),
        "res_reg": r["REG"], "res_stack": r["STACK"], "res_shared": r.get("SHARED", 0),
        "res_local": r.get("LOCAL", 0),
        **sass_counts(sass),
        "compile_s": round(compile_s, 3),   # nvcc alone
        "build_s": round(build_s, 3),       # nvcc + the two cuobjdump runs: one job of a cold grid
        "ptxas_log": log.strip(),
    }
    _atomic_write(cache_dir / key[:2] / f"{key}.cubin", cubin_bytes)
    # The json goes last: its presence means the entry is complete.
    _atomic_write(cache_dir / key[:2] / f"{key}.json", json.dumps(row, indent=1).encode())
    return row


def compile_job(job: Job, *, cache_dir: Path | None = None, force: bool = False, key: str | None = None) -> dict:
    """Compile one validated job (or read it from the cache) and return its table row."""
    job.validate()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = key or cache_key(job)
    path = cache_dir / key[:2] / f"{key}.json"
    cached = False
    row = None
    if not force and path.is_file():
        try:
            row = json.loads(path.read_text())
            cached = True
        except (OSError, json.JSONDecodeError):
            row = None  # a damaged entry is rebuilt
    if row is None:
        row = _compile_fresh(job, key, cache_dir)
    c = job.config
    return {
        "config": c.name, "bm": c.bm, "bn": c.bn, "bk": c.bk, "wm": c.wm, "wn": c.wn, "stages": c.stages,
        "warps": c.warps, "threads": c.threads, "acc_floats": c.acc_floats,
        "variant": job.variant, "scale_lookup": job.scale_lookup, "arch": job.arch,
        **{k: v for k, v in row.items() if k != "ptxas_log"},
        "dynamic_smem_bytes": c.smem_bytes,
        "smem_bytes": c.smem_bytes + row["static_smem_bytes"],
        "spills": bool(row["spill_store_bytes"] or row["spill_load_bytes"]),
        "cached": cached, "key": key,
    }


def grid_jobs(configs="all", variants=mb.VARIANTS, archs=ARCHS, scale_lookup: str = "per_warp") -> list[Job]:
    """The jobs of a grid; every one validated (ValueError before anything compiles)."""
    if isinstance(configs, str):
        if configs != "all":
            raise ValueError(f"configs must be 'all' or a list of configs, got {configs!r}")
        cfgs = mb.configs()
    else:
        cfgs = [c if isinstance(c, mb.MMAConfig) else mb.get_config(c) for c in configs]
    if isinstance(variants, str):
        variants = [variants]
    if isinstance(archs, str):
        archs = [archs]
    jobs = [Job(c, v, a, scale_lookup) for c in cfgs for v in variants for a in archs]
    if not jobs:
        raise ValueError("the grid is empty: give at least one config, variant and arch")
    for j in jobs:
        j.validate()
    return jobs


def build_grid(configs="all", variants=mb.VARIANTS, archs=ARCHS, *, scale_lookup: str = "per_warp",
               max_workers: int | None = None, cache_dir: Path | None = None, force: bool = False,
               progress: bool = True) -> pd.DataFrame:
    """Compile (or read from the cache) every config x variant x arch; one row per kernel.

    The frame's ``attrs`` carry wall_s, n_kernels, n_compiled (fresh nvcc runs) and n_cached.
    """
    jobs = grid_jobs(configs, variants, archs, scale_lookup)   # validates all first
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sources = _sources_digest()
    versions = dict(nvcc_version=tools.tool_version("nvcc"), cuobjdump_version=tools.tool_version("cuobjdump"))
    if not versions["nvcc_version"]:
        raise tools.ToolNotFound("nvcc not found: the compile grid needs nvcc and ptxas")
    keys = [cache_key(j, sources=sources, **versions) for j in jobs]
    workers = max_workers or os.cpu_count() or 1
    t0 = time.perf_counter()
    rows: list[dict | None] = [None] * len(jobs)
    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futs = {pool.submit(compile_job, j, cache_dir=cache_dir, force=force, key=k): i
                for i, (j, k) in enumerate(zip(jobs, keys))}
        for fut in track(cf.as_completed(futs), total=len(futs), desc="compile grid", unit="kernels",
                         enabled=progress):
            rows[futs[fut]] = fut.result()
    wall = time.perf_counter() - t0
    df = pd.DataFrame(rows)
    df["nvcc_version"] = versions["nvcc_version"]
    df.attrs.update(wall_s=round(wall, 2), n_kernels=len(df), n_cached=int(df["cached"].sum()),
                    n_compiled=int((~df["cached"]).sum()), workers=workers,
                    nvcc_version=versions["nvcc_version"], cuobjdump_version=versions["cuobjdump_version"],
                    flags=" ".join(NVCC_FLAGS))
    return df
