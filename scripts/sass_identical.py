#!/usr/bin/env python3
"""Is every kernel's SASS the same at BASE_REV and in the working tree?

    python scripts/sass_identical.py BASE_REV [--archs sm_90,sm_89] [--jobs 2] [--keep DIR]

Compiles each CUDA translation unit under fp8lab/kernels/ that the shared PTX helpers
(fp8lab/kernels/common/ptx.cuh) touch, once from ``git archive BASE_REV`` and once from the
working tree, with the flags the project's own builds use:

- standalone TUs (gemv_w16.cu, *_check.cu, mma_blockwise.cu, wmma_w8a16.cu) as census.py and
  weight_only._compile do: ``nvcc -cubin -O3 -std=c++17 -arch=A -I <kernels dir>``;
- torch-extension TUs (*_ext.cu, and wmma_w8a16.cu as seed001's extension compiles it) with
  torch's headers and torch's COMMON_NVCC_FLAGS (which change half/bf16 operator overloads, so
  the SASS can differ from the standalone build). Torch's headers come from $TORCH_INCLUDE_ROOT
  (default /tmp/torchcpu/torch/include; a CPU torch is enough: nothing is linked).

Then splits ``cuobjdump -sass`` per kernel function, drops the /*addr*/ column, and compares the
instruction text and encodings, and the registers / stack / shared / local bytes that
``cuobjdump -res-usage`` reports (a difference there is reported as "differs" with both values).
Per function it prints one of:
  identical            same instructions, same encodings (control bits included)
  control bits only    same instruction text, different scheduling/encoding words
  order only           same multiset of instructions, different order
  same opcodes         same count of every opcode; registers, operands or order differ
  differs              instruction counts differ (the opcode deltas follow)
--show SUBSTR prints a unified diff of the instruction text of each function whose name contains
SUBSTR and that is not identical.
A TU that does not build at one side for an arch is reported as such, not compared.
Exit status 0 when every compared function is identical.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KDIR = "fp8lab/kernels"

STANDALONE = ["gemv_w16.cu", "gemv_w16_check.cu", "mma_blockwise.cu", "mma_blockwise_check.cu", "wmma_w8a16.cu"]
TORCH_TUS = ["gemv_w16_ext.cu", "gemv_w16_sk_ext.cu", "gemv_w16_xalu_ext.cu", "mma_blockwise_ext.cu",
             "mma_blockwise_per_slice_ext.cu", "mma_blockwise_per_block_ext.cu",
             "mma_blockwise_per_cta_tile_ext.cu", "mma_blockwise_per_cta_first_col_ext.cu",
             "mma_blockwise_inplace_ext.cu", "wmma_w8a16.cu"]
# torch.utils.cpp_extension.COMMON_NVCC_FLAGS (torch 2.x), copied so no torch import is needed.
TORCH_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                    "--expt-relaxed-constexpr", "-DTORCH_EXTENSION_NAME=x", "-DTORCH_API_INCLUDE_EXTENSION_H"]


def _tool(name: str) -> str:
    sys.path.insert(0, str(ROOT))
    try:
        from fp8lab.toolchain.tools import find_tool
        return str(find_tool(name))
    except Exception:
        return shutil.which(name) or name


def _torch_includes() -> list[str]:
    root = Path(os.environ.get("TORCH_INCLUDE_ROOT", "/tmp/torchcpu/torch/include"))
    py = sysconfig.get_paths()["include"]
    return [f"-I{root}", f"-I{root / 'torch/csrc/api/include'}", f"-I{py}"]


def _tree(rev: str | None, dest: Path) -> Path:
    """fp8lab/kernels of ``rev`` (None: the working tree) under ``dest``."""
    if rev is None:
        shutil.copytree(ROOT / KDIR, dest / KDIR, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        dest.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, KDIR], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest / KDIR


def _compile(nvcc: str, kdir: Path, tu: str, arch: str, torch: bool, out: Path) -> tuple[Path | None, str]:
    cmd = [nvcc, "-cubin", "-O3", "-std=c++17", f"-arch={arch}", "-I", str(kdir)]
    if torch:
        cmd += [*TORCH_NVCC_FLAGS, *_torch_includes()]
    cmd += [str(kdir / tu), "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        err = [ln for ln in p.stderr.splitlines() if "error" in ln.lower()]
        return None, (err[0] if err else f"nvcc exit {p.returncode}")[:200]
    return out, ""


_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")


def sass_by_function(cuobjdump: str, cubin: Path) -> dict[str, list[str]]:
    """{mangled function name: [instruction line without its /*addr*/ column, encoding words kept]}."""
    text = subprocess.run([cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    funcs: dict[str, list[str]] = {}
    cur = None
    for ln in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", ln)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        if cur is None:
            continue
        s = ln.strip()
        if _ADDR.match(s):
            cur.append(" ".join(_ADDR.sub("", s).split()))
        elif s.startswith("/* 0x") and cur:  # second encoding word of the previous instruction
            cur[-1] += " " + s
    return funcs


def resources_by_function(cuobjdump: str, cubin: Path) -> dict[str, str]:
    """{mangled function name: 'REG:n STACK:n SHARED:n LOCAL:n'} from cuobjdump -res-usage."""
    text = subprocess.run([cuobjdump, "-res-usage", str(cubin)], check=True, capture_output=True, text=True).stdout
    out, cur = {}, None
    for ln in text.splitlines():
        m = re.match(r"\s*Function (\S+):", ln)
        if m:
            cur = m.group(1)
        elif cur and "REG:" in ln:
            out[cur] = " ".join(f for f in ln.split() if f.split(":")[0] in ("REG", "STACK", "SHARED", "LOCAL"))
            cur = None
    return out


def _split(line: str) -> tuple[str, str]:
    """(instruction text, encoding words) of one stripped line."""
    i = line.find("/* 0x")
    return (line[:i].strip(), line[i:]) if i >= 0 else (line, "")


def _opcode(instr: str) -> str:
    s = re.sub(r"^@!?U?P\w+\s+", "", instr.rstrip(" ;"))
    return s.split()[0] if s else ""


def compare(a: list[str], b: list[str]) -> tuple[str, str]:
    if a == b:
        return "identical", ""
    ta, tb = [_split(x)[0] for x in a], [_split(x)[0] for x in b]
    if ta == tb:
        return "control bits only", f"{sum(x != y for x, y in zip(a, b))} of {len(a)} instructions"
    if sorted(ta) == sorted(tb):
        moved = sum(x != y for x, y in zip(ta, tb))
        return "order only", f"{len(ta)} instructions, {moved} positions differ"
    ca = collections.Counter(_opcode(x) for x in ta)
    cb = collections.Counter(_opcode(x) for x in tb)
    if ca == cb:
        return "same opcodes", f"{len(ta)} instructions"
    delta = {k: cb[k] - ca[k] for k in sorted(set(ca) | set(cb)) if cb[k] != ca[k]}
    return "differs", f"{len(ta)} -> {len(tb)} instructions; opcode deltas {delta}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base_rev")
    ap.add_argument("--archs", default="sm_90,sm_89")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated TU names to restrict to")
    ap.add_argument("--keep", type=Path, help="keep cubins here (reused when the tree's hash matches)")
    ap.add_argument("--show", default="", help="print the SASS diff of non-identical functions containing this")
    args = ap.parse_args(argv)
    nvcc, cuobjdump = _tool("nvcc"), _tool("cuobjdump")
    work = Path(tempfile.mkdtemp(prefix="sass_identical_"))
    keep = args.keep
    trees = {"base": _tree(args.base_rev, work / "base"), "head": _tree(None, work / "head")}
    jobs = []
    only = set(filter(None, args.only.split(",")))
    for arch in args.archs.split(","):
        for torch in (False, True):
            for tu in (TORCH_TUS if torch else STANDALONE):
                if only and tu not in only:
                    continue
                jobs.append((arch, torch, tu))

    def build(side: str, arch: str, torch: bool, tu: str):
        kdir = trees[side]
        digest = hashlib.sha256()
        for p in sorted(kdir.rglob("*")):
            if p.is_file() and p.suffix in (".cu", ".cuh", ".h", ".cpp"):
                digest.update(str(p.relative_to(kdir)).encode() + p.read_bytes())
        digest.update(f"{tu} {arch} {torch} {nvcc}".encode())
        name = f"{Path(tu).stem}_{'torch' if torch else 'plain'}_{arch}_{digest.hexdigest()[:12]}.cubin"
        out = (keep or work) / name
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            if out.is_file():
                return out, ""
        return _compile(nvcc, kdir, tu, arch, torch, out)

    with cf.ThreadPoolExecutor(args.jobs) as pool:
        futs = {(side, *j): pool.submit(build, side, *j) for j in jobs for side in ("base", "head")}
        results = {k: f.result() for k, f in futs.items()}

    worst = 0
    tally = collections.Counter()
    for arch, torch, tu in jobs:
        label = f"{arch} {tu}{' (torch flags)' if torch else ''}"
        (cb, eb), (ch, eh) = results[("base", arch, torch, tu)], results[("head", arch, torch, tu)]
        if cb is None or ch is None:
            print(f"{label}: not built (base: {eb or 'ok'}; head: {eh or 'ok'})")
            worst = worst or (1 if (cb is None) != (ch is None) else 0)
            continue
        fa, fb = sass_by_function(cuobjdump, cb), sass_by_function(cuobjdump, ch)
        ra, rb = resources_by_function(cuobjdump, cb), resources_by_function(cuobjdump, ch)
        for name in sorted(set(fa) | set(fb)):
            if name not in fa or name not in fb:
                print(f"{label} {name}: only in {'head' if name in fb else 'base'}")
                worst = 1
                continue
            verdict, detail = compare(fa[name], fb[name])
            if ra.get(name) != rb.get(name):
                verdict = "differs" if verdict == "identical" else verdict
                detail = f"{detail}; resources {ra.get(name)} -> {rb.get(name)}".lstrip("; ")
            tally[verdict] += 1
            if verdict != "identical":
                worst = 1
            print(f"{label} {name}: {verdict}{' (' + detail + ')' if detail else ''}")
            if args.show and args.show in name and verdict != "identical":
                sys.stdout.writelines(difflib.unified_diff([_split(x)[0] + "\n" for x in fa[name]],
                                                           [_split(x)[0] + "\n" for x in fb[name]],
                                                           "base", "head", n=2))
    print("summary:", dict(tally))
    shutil.rmtree(work, ignore_errors=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())
