"""Locate the CUDA command-line tools (nvcc, ptxas, cuobjdump, nvdisasm, ncu).

A CPU-only machine needs no system CUDA: NVIDIA publishes the tools as wheels
(``nvidia-cuda-nvcc``, ``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``), which
install under ``site-packages/nvidia/<cuXX>/bin``. Search order:

1. ``FP8LAB_<TOOL>`` environment variable (a full path), e.g. ``FP8LAB_NVCC``;
2. ``PATH``;
3. ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin``;
4. NVIDIA's CUDA wheels in any ``sys.path`` entry (``nvidia/*/bin``, ``nvidia/*/*/bin``).
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

KNOWN_TOOLS = ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "ncu")

_WHEEL_HINT = {
    "nvcc": "pip install 'fp8lab[cuda-toolchain]' (or install the CUDA toolkit)",
    "ptxas": "pip install 'fp8lab[cuda-toolchain]' (or install the CUDA toolkit)",
    "cuobjdump": "pip install nvidia-cuda-cuobjdump (part of 'fp8lab[cpu]')",
    "nvdisasm": "pip install nvidia-cuda-nvdisasm (part of 'fp8lab[cpu]')",
    "ncu": "install Nsight Compute (it is not on PyPI)",
}


class ToolNotFound(RuntimeError):
    """A CUDA tool is not installed where fp8lab looks for it."""


def _candidates(name: str):
    env = os.environ.get(f"FP8LAB_{name.upper()}")
    if env:
        yield Path(env)
    found = shutil.which(name)
    if found:
        yield Path(found)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            yield Path(root) / "bin" / name
    yield Path("/usr/local/cuda/bin") / name
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for pattern in ("nvidia/*/bin", "nvidia/*/*/bin"):
            for d in sorted(glob.glob(os.path.join(entry, pattern))):
                yield Path(d) / name


@functools.lru_cache(maxsize=None)
def find_tool(name: str) -> Path:
    """Absolute path of a CUDA tool; raises ToolNotFound with an install hint."""
    if name not in KNOWN_TOOLS:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(KNOWN_TOOLS)}")
    for cand in _candidates(name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand.resolve()
    raise ToolNotFound(f"{name} not found on PATH, CUDA_HOME or in NVIDIA's CUDA wheels; "
                       f"{_WHEEL_HINT[name]}, or set FP8LAB_{name.upper()}=/path/to/{name}")


def have_tool(name: str) -> bool:
    try:
        find_tool(name)
        return True
    except ToolNotFound:
        return False


@functools.lru_cache(maxsize=None)
def tool_version(name: str) -> str:
    """The tool's release, e.g. '13.0.88' for nvcc ('V13.0.88'); '' if not found."""
    try:
        path = find_tool(name)
    except ToolNotFound:
        return ""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out) or re.search(r"(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else ""


def run_tool(name: str, args, *, timeout: float = 600, cwd=None) -> subprocess.CompletedProcess:
    """Run a tool, raising RuntimeError with its stderr on failure."""
    cmd = [str(find_tool(name)), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc
