"""Where things live: the repository root, data/, figures/, notebooks/, caches."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _is_root(p: Path) -> bool:
    return (p / "pyproject.toml").is_file() and (p / "fp8lab").is_dir() and (p / "notebooks").is_dir()


def repo_root() -> Path:
    """The fp8lab checkout: $FP8LAB_ROOT, else the checkout fp8lab was imported from,
    else the first parent of the working directory that is one."""
    env = os.environ.get("FP8LAB_ROOT")
    if env:
        return Path(env).resolve()
    if _is_root(_PKG.parent):
        return _PKG.parent
    here = Path.cwd().resolve()
    for p in (here, *here.parents):
        if _is_root(p):
            return p
    raise RuntimeError("cannot find the fp8lab checkout (data/, figures/, notebooks/); "
                       "set FP8LAB_ROOT to its path")


def data_dir() -> Path:
    return Path(os.environ.get("FP8LAB_DATA_DIR") or repo_root() / "data")


def figures_dir() -> Path:
    return Path(os.environ.get("FP8LAB_FIGURES_DIR") or repo_root() / "figures")


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def cache_dir(*parts: str) -> Path:
    """A cache outside the repo (~/.cache/fp8lab by default; $FP8LAB_CACHE_DIR overrides)."""
    base = os.environ.get("FP8LAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fp8lab")
    p = Path(base, *parts)
    p.mkdir(parents=True, exist_ok=True)
    return p
