#!/usr/bin/env python3
"""Build a wheelhouse for an offline GPU box: every package fp8lab's notebooks need
beyond torch and triton (which such a box already has), for one Python version and
platform, plus fp8lab itself.

    python scripts/wheelhouse.py --python-version 3.12 --platform manylinux_2_28_x86_64 --dest wheelhouse
    # on the offline box (torch + triton already installed):
    make run WHEELHOUSE=wheelhouse EXTRAS=gpu-tools,test

To keep the wheelhouse small, leave out what the box already has: --skip NAME ... or
--have FILE, where FILE is the box's `python3 -m pip list --format=freeze` (one name per
line also works). Those wheels are dropped after resolution, so their dependencies are
still resolved; pip on the box then uses the box's own copies.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALWAYS_SKIP = {"torch", "triton"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def requirements(extras=("gpu-tools", "test"), skip=()) -> list[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    opt = meta["optional-dependencies"]
    for e in extras:
        if e not in opt:
            raise SystemExit(f"unknown extra {e!r}; pyproject has {sorted(opt)}")
        reqs += [r for r in opt[e] if not r.startswith("fp8lab[")]
    drop = ALWAYS_SKIP | {s.lower().replace("_", "-") for s in skip}
    return [r for r in reqs if _name(r) not in drop]


def platforms(tag: str) -> list[str]:
    """pip matches platform tags exactly: offer every older manylinux tag too."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if not m:
        return [tag]
    major, minor, arch = int(m.group(1)), int(m.group(2)), m.group(3)
    tags = [f"manylinux_{major}_{n}_{arch}" for n in range(minor, 4, -1)]
    return tags + [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python-version", default="3.12")
    ap.add_argument("--platform", default="manylinux_2_28_x86_64")
    ap.add_argument("--dest", default="wheelhouse")
    ap.add_argument("--extras", default="gpu-tools,test")
    ap.add_argument("--skip", nargs="*", default=[], help="packages the box already has")
    ap.add_argument("--have", help="file: the box's `pip list --format=freeze` (or one name per line)")
    ap.add_argument("--no-deps", action="store_true",
                    help="only the named requirements, not what they depend on")
    a = ap.parse_args(argv)
    dest = Path(a.dest)
    dest.mkdir(parents=True, exist_ok=True)
    skip = {_name(s) for s in a.skip}
    pins = []
    if a.have:
        lines = [ln.strip() for ln in Path(a.have).read_text().splitlines()
                 if ln.strip() and not ln.startswith(("#", "-"))]
        skip |= {_name(ln) for ln in lines}
        # The box's versions constrain the resolution: a wheel that needs another version
        # of something the box has (cuda-python pinning cuda-bindings, say) would not
        # install there offline.
        pins = [ln for ln in lines if "==" in ln and "@" not in ln and _name(ln) not in ALWAYS_SKIP]
    reqs = requirements(a.extras.split(",") if a.extras else (), skip)
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest),
           "--python-version", a.python_version, "--implementation", "cp"]
    for p in platforms(a.platform):
        cmd += ["--platform", p]
    if a.no_deps:
        cmd.append("--no-deps")
    if pins:
        constraints = dest / ".box-constraints.txt"
        constraints.write_text("\n".join(pins) + "\n")
        cmd += ["--constraint", str(constraints)]
    print("+", " ".join(cmd + reqs), flush=True)
    subprocess.run(cmd + reqs, check=True)
    # CUTLASS headers: the wheel alone (the Makefile installs it with --no-deps).
    if any(e.startswith("gpu") for e in (a.extras or "").split(",")):
        base = [c for c in cmd if c != "--constraint" and not c.endswith(".box-constraints.txt")]
        subprocess.run(base + ["--no-deps", "nvidia-cutlass>=3.9"], check=True)
    dropped = 0
    for whl in dest.glob("*.whl"):
        if _name(whl.name.split("-")[0]) in skip | ALWAYS_SKIP:
            whl.unlink()
            dropped += 1
    if dropped:
        print(f"dropped {dropped} wheel(s) the box already has")
    # fp8lab itself, as a wheel, so the box needs nothing but this folder.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest),
                    str(ROOT)], check=True)
    print(f"wheelhouse ready: {dest} ({len(list(dest.glob('*.whl')))} wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
