#!/usr/bin/env python3
"""Gather the peers (issue 17) for an offline GPU box, into ignored folders:

    python scripts/peers_offline.py --wheels --sources [--marlin-git DIR] [--deepgemm-git DIR] [--fmt-git DIR]
                                    [--kernels-community-git DIR] [--vllm-sdist FILE]

- ``wheelhouse/peers/``: torchao's and ninja's wheels (for --python-version / --platform) and a
  wheel built from gemlite's sdist (pure Python + Triton, ``pip wheel --no-deps``);
- ``build/peers/src/marlin/``: the original Marlin's source (github.com/IST-DASLab/marlin), from
  a local git directory (``--marlin-git``, e.g. a mirror) with ``git archive``, else a shallow
  clone; stamped with its commit;
- ``build/peers/src/deepgemm/``: DeepGEMM's source (github.com/deepseek-ai/DeepGEMM), only what
  its extension build and its run-time JIT read (``csrc/``, the ``deep_gemm/`` package with its
  kernel headers, LICENSE; not its tests, scripts or figures), from ``--deepgemm-git`` (a local
  git directory, e.g. a mirror) with ``git archive``, else a shallow clone; plus the ``{fmt}``
  headers at the commit DeepGEMM pins as its submodule (``third-party/fmt``: include/fmt and
  LICENSE, from ``--fmt-git`` or a shallow fetch of that commit). Its CUTLASS submodule is not
  gathered: the build uses the nvidia-cutlass wheel's headers (fp8lab.peers.build says why).
  Stamped with the commits (DeepGEMM's, fmt's, and the CUTLASS commit it pins).
- ``build/peers/src/vllm-marlin/``: vLLM's Marlin GEMMs' sources and Python utilities, from
  kernels-community's ``vllm-quantization`` at the commit fp8lab.peers.vllm_marlin pins (KC_PATHS
  only, 0.31 MiB), from ``--kernels-community-git`` (a local git directory, e.g. a mirror) with
  ``git archive``, else a fetch of that commit.
- ``build/peers/src/vllm/``: the files of vLLM's released sdist (``vllm-<version>.tar.gz`` on PyPI,
  its sha256 checked; fp8lab.peers.vllm_quant pins both) that its CUDA per-token-group FP8 quantiser
  and its CUTLASS blockwise FP8 GEMM for Hopper compile from, the file of its Triton block-FP8 GEMM
  with the configs it ships for NVIDIA GPUs, and vLLM's licence (0.45 MiB), from ``--vllm-sdist`` (a
  local copy) or a download of that sdist (50 MB, kept nowhere).
- ``build/peers/src/sglang/``: SGLang's per-token-group FP8 quantiser's header and the sglang headers
  it includes, from sglang's wheel on PyPI (its JIT kernels ship as source in it), with the tvm-ffi
  headers and library its launcher is written against (fp8lab.peers.sglang_quant pins both wheels
  and their sha256; 3.1 MiB), from ``--sglang-wheel`` / ``--tvm-ffi-wheel`` (local copies) or
  downloads of them (39 MB and 2.7 MB, kept nowhere).
Never committed (both folders are in .gitignore).

On the box (torch, triton, nvcc there; the two folders carried beside the repository):

    python -m pip install --no-index --no-deps wheelhouse/peers/*.whl
    python -m fp8lab.peers build marlin
    python -m fp8lab.peers build deepgemm
    python -m fp8lab.peers build vllm-marlin
    python -m fp8lab.peers build vllm-cutlass
    python -m fp8lab.peers build vllm-quant
    python -m fp8lab.peers build sglang-quant
    python -m fp8lab.peers status

vLLM, sgl-kernel (~535 MB, no sdist) and FlashInfer are not gathered: their wheels are far over a 64 MiB
transfer. Their arms run on a box where ``pip install`` reaches them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# binary wheels; ninja lets torch build Marlin's extension in parallel (without it the build
# falls back to setuptools, one file at a time)
WHEELS = {"torchao": "0.18.0", "ninja": "1.13.2"}
SDISTS = {"gemlite": "0.6.0.post2"}      # built into a wheel here
MARLIN_URL = "https://github.com/IST-DASLab/marlin"
MARLIN_PATHS = ("marlin", "setup.py", "LICENSE", "README.md")
DEEPGEMM_URL = "https://github.com/deepseek-ai/DeepGEMM"
#: what DeepGEMM's extension build (csrc/python_api.cpp and its headers) and its JIT (the
#: deep_gemm package's include/deep_gemm, read by nvcc at run time) need, and its licence
DEEPGEMM_PATHS = ("csrc", "deep_gemm", "LICENSE")
FMT_URL = "https://github.com/fmtlib/fmt"
FMT_PATHS = ("include/fmt", "LICENSE")       # DeepGEMM uses {fmt} header-only (FMT_HEADER_ONLY)
#: the peers --sources can gather
SOURCE_PEERS = ("marlin", "deepgemm", "vllm-marlin", "vllm", "sglang")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def _run(cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def wheels(dest: Path, python_version: str) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    for name, ver in WHEELS.items():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               python_version, "--implementation", "cp"]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        _run(cmd + ["-d", str(dest), f"{name}=={ver}"])
    with tempfile.TemporaryDirectory() as d:
        for name, ver in SDISTS.items():
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "-d", d, f"{name}=={ver}"])
            sdist = next(Path(d).glob(f"{name}-{ver}.tar.gz"))
            _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dest), str(sdist)])
    return sorted(dest.glob("*.whl"))


def marlin_source(dest: Path, git_dir: str | None) -> str:
    """Unpack Marlin's HEAD into dest; returns its commit."""
    with tempfile.TemporaryDirectory() as d:
        if git_dir is None:
            _run(["git", "clone", "--depth", "1", MARLIN_URL, str(Path(d) / "marlin")])
            git_dir = str(Path(d) / "marlin" / ".git")
        commit = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        tar = Path(d) / "marlin.tar"
        # the package, its build script and licence; not its images, GPTQ scripts or benchmarks
        _run(["git", f"--git-dir={git_dir}", "archive", "-o", str(tar), "HEAD", *MARLIN_PATHS])
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tar) as t:
            t.extractall(dest, filter="data")
    (dest / ".fp8lab-source.json").write_text(json.dumps({"url": MARLIN_URL, "commit": commit}))
    return commit


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _unpack(git_dir: str, rev: str, paths, dest: Path) -> None:
    """``git archive`` of ``paths`` at ``rev``, extracted into dest."""
    with tempfile.TemporaryDirectory() as d:
        tar = Path(d) / "src.tar"
        _run(["git", f"--git-dir={git_dir}", "archive", "-o", str(tar), rev, *paths])
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tar) as t:
            t.extractall(dest, filter="data")


def submodule_commit(git_dir: str, rev: str, path: str) -> str:
    """The commit a submodule (a gitlink at ``path``) is pinned to in ``rev``'s tree."""
    line = _git(git_dir, "ls-tree", rev, path)
    parts = line.split()
    if len(parts) < 3 or parts[1] != "commit":
        raise ValueError(f"{path} is not a submodule in {rev} of {git_dir}: {line!r}")
    return parts[2]


def _fetch_commit(url: str, commit: str, where: Path) -> str:
    """A bare git directory holding ``commit`` of ``url`` (a shallow fetch); returns its path."""
    _run(["git", "init", "-q", "--bare", str(where)])
    _run(["git", f"--git-dir={where}", "fetch", "-q", "--depth", "1", url, commit])
    return str(where)


def deepgemm_source(dest: Path, git_dir: str | None, fmt_git: str | None = None) -> str:
    """Unpack DeepGEMM's HEAD (DEEPGEMM_PATHS) into dest and the {fmt} headers it pins into
    dest/third-party/fmt; stamp dest/.fp8lab-source.json; returns DeepGEMM's commit."""
    with tempfile.TemporaryDirectory() as d:
        if git_dir is None:
            _run(["git", "clone", "-q", "--depth", "1", DEEPGEMM_URL, str(Path(d) / "deepgemm")])
            git_dir = str(Path(d) / "deepgemm" / ".git")
        commit = _git(git_dir, "rev-parse", "HEAD")
        fmt_commit = submodule_commit(git_dir, "HEAD", "third-party/fmt")
        cutlass_commit = submodule_commit(git_dir, "HEAD", "third-party/cutlass")
        if dest.exists() and any(dest.iterdir()):
            if not (dest / ".fp8lab-source.json").exists():
                raise FileExistsError(f"{dest} holds files this script did not unpack: not replacing them")
            shutil.rmtree(dest)           # no files of another commit left behind
        _unpack(git_dir, "HEAD", DEEPGEMM_PATHS, dest)
        fmt_git = fmt_git or _fetch_commit(FMT_URL, fmt_commit, Path(d) / "fmt.git")
        _unpack(fmt_git, fmt_commit, FMT_PATHS, dest / "third-party" / "fmt")
    (dest / ".fp8lab-source.json").write_text(json.dumps({
        "url": DEEPGEMM_URL, "commit": commit, "fmt": {"url": FMT_URL, "commit": fmt_commit},
        "cutlass_pinned": {"commit": cutlass_commit, "carried": False,
                           "note": "built against the nvidia-cutlass wheel's headers instead"}}, indent=1))
    return commit


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", action="store_true", help="torchao's wheel and gemlite's, into --wheelhouse")
    ap.add_argument("--sources", action="store_true",
                    help="Marlin's and DeepGEMM's sources (--source-peers), into --marlin-dest / --deepgemm-dest")
    ap.add_argument("--source-peers", default=",".join(SOURCE_PEERS), help="which sources --sources gathers")
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--wheelhouse", default=str(ROOT / "wheelhouse" / "peers"))
    ap.add_argument("--marlin-dest", default=str(ROOT / "build" / "peers" / "src" / "marlin"))
    ap.add_argument("--marlin-git", default=None, help="a local git directory of IST-DASLab/marlin (no network)")
    ap.add_argument("--deepgemm-dest", default=str(ROOT / "build" / "peers" / "src" / "deepgemm"))
    ap.add_argument("--deepgemm-git", default=None,
                    help="a local git directory of deepseek-ai/DeepGEMM, e.g. a mirror (no network)")
    ap.add_argument("--fmt-git", default=None,
                    help="a local git directory of fmtlib/fmt holding the commit DeepGEMM pins (no network)")
    ap.add_argument("--vllm-marlin-dest", default=str(ROOT / "build" / "peers" / "src" / "vllm-marlin"))
    ap.add_argument("--kernels-community-git", default=None,
                    help="a local git directory of huggingface/kernels-community holding the pinned commit (no network)")
    ap.add_argument("--vllm-dest", default=str(ROOT / "build" / "peers" / "src" / "vllm"))
    ap.add_argument("--vllm-sdist", default=None,
                    help="a local vllm-<version>.tar.gz (the one fp8lab.peers.vllm_quant pins; no network)")
    ap.add_argument("--sglang-dest", default=str(ROOT / "build" / "peers" / "src" / "sglang"))
    ap.add_argument("--sglang-wheel", default=None,
                    help="a local sglang wheel (the one fp8lab.peers.sglang_quant pins; no network)")
    ap.add_argument("--tvm-ffi-wheel", default=None,
                    help="a local apache-tvm-ffi wheel (the one fp8lab.peers.sglang_quant pins; no network)")
    args = ap.parse_args(argv)
    if not (args.wheels or args.sources):
        ap.error("ask for --wheels and/or --sources")
    if args.wheels:
        for w in wheels(Path(args.wheelhouse), args.python_version):
            print(f"{w.name}: {w.stat().st_size / 2**20:.2f} MiB")
    chosen = {s.strip() for s in args.source_peers.split(",") if s.strip()}
    if args.sources and not chosen <= set(SOURCE_PEERS):
        ap.error(f"--source-peers: any of {', '.join(SOURCE_PEERS)}, got {sorted(chosen)}")
    if args.sources and "marlin" in chosen:
        dest = Path(args.marlin_dest)
        commit = marlin_source(dest, args.marlin_git)
        print(f"Marlin {commit[:12]} in {dest}: {_size(dest) / 2**20:.2f} MiB")
    if args.sources and "deepgemm" in chosen:
        dest = Path(args.deepgemm_dest)
        commit = deepgemm_source(dest, args.deepgemm_git, args.fmt_git)
        print(f"DeepGEMM {commit[:12]} (with fmt headers) in {dest}: {_size(dest)} bytes "
              f"({_size(dest) / 2**20:.2f} MiB)")
    if args.sources and "vllm-marlin" in chosen:
        sys.path.insert(0, str(ROOT))
        from fp8lab.peers import vllm_marlin

        dest = Path(args.vllm_marlin_dest)
        with tempfile.TemporaryDirectory() as d:
            git_dir = args.kernels_community_git or _fetch_commit(vllm_marlin.KC_URL, vllm_marlin.KC_COMMIT,
                                                                  Path(d) / "kc.git")
            try:
                commit = vllm_marlin.gather(dest, git_dir)
            except (ValueError, FileExistsError) as e:
                print(f"vLLM Marlin not gathered: {e}", file=sys.stderr)
                return 2
        print(f"vLLM Marlin (kernels-community {vllm_marlin.KC_DIR}) {commit[:12]} in {dest}: "
              f"{_size(dest) / 2**20:.2f} MiB")
    if args.sources and "vllm" in chosen:
        sys.path.insert(0, str(ROOT))
        from fp8lab.peers import vllm_quant

        dest = Path(args.vllm_dest)
        with tempfile.TemporaryDirectory() as d:
            sdist = args.vllm_sdist
            if sdist is None:
                import urllib.request

                sdist = str(Path(d) / vllm_quant.SDIST)
                print(f"+ download {vllm_quant.SDIST_URL}", flush=True)
                urllib.request.urlretrieve(vllm_quant.SDIST_URL, sdist)
            try:
                version = vllm_quant.gather(dest, Path(sdist))
            except (OSError, ValueError) as e:
                print(f"vLLM's quantiser source not gathered: {e}", file=sys.stderr)
                return 2
        print(f"vLLM {version}'s quantiser source in {dest}: {_size(dest) / 2**20:.2f} MiB")
    if args.sources and "sglang" in chosen:
        sys.path.insert(0, str(ROOT))
        from fp8lab.peers import sglang_quant as sq

        dest = Path(args.sglang_dest)
        with tempfile.TemporaryDirectory() as d:
            got = []
            for local, name, url in ((args.sglang_wheel, sq.WHEEL, sq.WHEEL_URL),
                                     (args.tvm_ffi_wheel, sq.TVM_WHEEL, sq.TVM_WHEEL_URL)):
                if local is None:
                    import urllib.request

                    local = str(Path(d) / name)
                    print(f"+ download {url}", flush=True)
                    urllib.request.urlretrieve(url, local)
                got.append(Path(local))
            try:
                version = sq.gather(dest, *got)
            except (OSError, ValueError, zipfile.BadZipFile) as e:
                print(f"SGLang's quantiser source not gathered: {e}", file=sys.stderr)
                return 2
        print(f"sglang {version}'s quantiser source (with tvm-ffi {sq.TVM_FFI_VERSION}) in {dest}: "
              f"{_size(dest) / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
