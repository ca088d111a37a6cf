#!/usr/bin/env python3
"""Gather the peers (issue 17) for an offline GPU box, into ignored folders:

    python scripts/peers_offline.py --wheels --sources [--marlin-git DIR]

- ``wheelhouse/peers/``: torchao's and ninja's wheels (for --python-version / --platform) and a
  wheel built from gemlite's sdist (pure Python + Triton, ``pip wheel --no-deps``);
- ``build/peers/src/marlin/``: the original Marlin's source (github.com/IST-DASLab/marlin), from
  a local git directory (``--marlin-git``, e.g. a mirror) with ``git archive``, else a shallow
  clone; stamped with its commit. Never committed (both folders are in .gitignore).

On the box (torch, triton, nvcc there; the two folders carried beside the repository):

    python -m pip install --no-index --no-deps wheelhouse/peers/*.whl
    python -m fp8lab.peers build marlin
    python -m fp8lab.peers status

vLLM, sgl-kernel (~535 MB), FlashInfer and DeepGEMM are not gathered: their wheels or builds are
far over a 64 MiB transfer. Their arms run on a box where ``pip install`` reaches them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# binary wheels; ninja lets torch build Marlin's extension in parallel (without it the build
# falls back to setuptools, one file at a time)
WHEELS = {"torchao": "0.18.0", "ninja": "1.13.2"}
SDISTS = {"gemlite": "0.6.0.post2"}      # built into a wheel here
MARLIN_URL = "https://github.com/IST-DASLab/marlin"
MARLIN_PATHS = ("marlin", "setup.py", "LICENSE", "README.md")
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


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", action="store_true", help="torchao's wheel and gemlite's, into --wheelhouse")
    ap.add_argument("--sources", action="store_true", help="Marlin's source, into --marlin-dest")
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--wheelhouse", default=str(ROOT / "wheelhouse" / "peers"))
    ap.add_argument("--marlin-dest", default=str(ROOT / "build" / "peers" / "src" / "marlin"))
    ap.add_argument("--marlin-git", default=None, help="a local git directory of IST-DASLab/marlin (no network)")
    args = ap.parse_args(argv)
    if not (args.wheels or args.sources):
        ap.error("ask for --wheels and/or --sources")
    if args.wheels:
        for w in wheels(Path(args.wheelhouse), args.python_version):
            print(f"{w.name}: {w.stat().st_size / 2**20:.2f} MiB")
    if args.sources:
        dest = Path(args.marlin_dest)
        commit = marlin_source(dest, args.marlin_git)
        print(f"Marlin {commit[:12]} in {dest}: {_size(dest) / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
