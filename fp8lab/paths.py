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
#: figures/cross-device/: the folder of the figures that draw several devices at once
#: (``fp8lab.experiments.overlay``), beside one folder per device
CROSS_DEVICE = "cross-device"
#: where a host notebook run by hand writes its tables (see ``output_data_dir``).
SCRATCH_DATA = ("runs", "scratch", "data")


def by_runner() -> bool:
    """True in a notebook that ``python -m fp8lab run`` (or a cluster worker) executes: the
    runner gives every notebook FP8LAB_RUN_ID. False in JupyterLab, nbconvert or papermill
    by hand."""
    return bool(os.environ.get("FP8LAB_RUN_ID"))


def output_data_dir(host: bool) -> Path:
    """The folder a run writes its tables under: $FP8LAB_DATA_DIR when set; else data/,
    except for a host notebook run by hand, whose tables go to runs/scratch/data/. A host
    notebook computes the same tables on every machine, so a hand run adds nothing to the
    committed data/cpu/ tables; it would only rewrite their sidecars (time, commit, dirty
    flag), leave the tree dirty and make `fp8lab verify` fail. Those tables come from the
    runner (`make run`, `python -m fp8lab run --only NN`)."""
    if os.environ.get("FP8LAB_DATA_DIR") or not host or by_runner():
        return data_dir()
    return repo_root().joinpath(*SCRATCH_DATA)


def output_figures_dir(redrawn: bool, computed: bool = False) -> Path:
    """The folder a figure is saved under: $FP8LAB_FIGURES_DIR when set (the runner sets it
    to the run folder for every redraw and for a smoke run); else runs/scratch/figures/ for
    one redrawn from committed data, and for one a host notebook computed in a hand run
    (as its tables, ``output_data_dir``); else figures/ (measured here, or computed in a
    runner's run)."""
    if os.environ.get("FP8LAB_FIGURES_DIR"):
        return figures_dir()
    if redrawn or (computed and not by_runner()):
        return repo_root().joinpath(*SCRATCH_FIGURES)
    return figures_dir()


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def cache_dir(*parts: str) -> Path:
    """A cache outside the repo (~/.cache/fp8lab by default; $FP8LAB_CACHE_DIR overrides)."""
    base = os.environ.get("FP8LAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fp8lab")
    p = Path(base, *parts)
    p.mkdir(parents=True, exist_ok=True)
    return p
