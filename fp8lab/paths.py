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


#: where a figure redrawn from committed data goes when nobody named a figures folder
#: (a notebook opened in JupyterLab or run with nbconvert / papermill by hand): the
#: committed figures under figures/ are the measured ones and change only in a measure run.
SCRATCH_FIGURES = ("runs", "scratch", "figures")


def output_figures_dir(redrawn: bool) -> Path:
    """The folder a figure is saved under: $FP8LAB_FIGURES_DIR when set (the runner sets it
    to the run folder for every redraw and for a smoke run); else figures/ for a figure
    measured or computed in this run, and runs/scratch/figures/ for one redrawn from
    committed data."""
    if os.environ.get("FP8LAB_FIGURES_DIR") or not redrawn:
        return figures_dir()
    return repo_root().joinpath(*SCRATCH_FIGURES)


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def cache_dir(*parts: str) -> Path:
    """A cache outside the repo (~/.cache/fp8lab by default; $FP8LAB_CACHE_DIR overrides)."""
    base = os.environ.get("FP8LAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fp8lab")
    p = Path(base, *parts)
    p.mkdir(parents=True, exist_ok=True)
    return p
