"""One house style for every fp8lab figure.

``save`` writes ``figures/<device>/<notebook>/<name>.svg`` and a 2x PNG, with a footnote
that names the device, the date of the measurement and whether the figure was measured,
computed, or redrawn from committed data.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

if not os.environ.get("MPLBACKEND") and "ipykernel" not in str(matplotlib.get_backend()).lower() \
        and "inline" not in str(matplotlib.get_backend()).lower():
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ..arms import registry  # noqa: E402
from ..paths import output_figures_dir  # noqa: E402
from .results import FigureInfo, Run, atomic_write_bytes, check_name  # noqa: E402

_CYCLE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]

STYLE = {
    "figure.figsize": (7.0, 4.2),
    "figure.dpi": 100,
    "savefig.dpi": 200,            # 2x of figure.dpi: crisp in a blog post
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.15,
    "svg.fonttype": "none",        # text stays text in the SVG
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "legend.fontsize": 9,
    "axes.prop_cycle": matplotlib.cycler(color=_CYCLE),
}


def apply_style() -> None:
    """Apply the house style to matplotlib's global rcParams."""
    matplotlib.rcParams.update(STYLE)


def legend_entries(axes) -> tuple[list, list]:
    """(handles, labels) of every labelled artist on any of ``axes`` (a flat or nested sequence),
    each label once, in first-seen order: a figure-level legend names a line drawn in one panel
    only (a peer that ran on one shape), not just those of the first panel."""
    import numpy as np

    handles, labels = [], []
    for ax in np.ravel(np.asarray(axes, dtype=object)):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def color(id: str) -> str:
    """The colour of an arm (or ceiling, format, variant...) id: :func:`fp8lab.arms.registry.color`,
    which names the id and the registry file when it has no entry. No fallback on purpose: a
    missing entry is fixed in the registry, not papered over in one figure."""
    return registry.color(id)


def _info(target) -> FigureInfo:
    if isinstance(target, FigureInfo):
        return target
    if isinstance(target, Run):
        return target.figure_info()
    raise ValueError("save() needs a Run (measured/computed here) or a FigureInfo "
                     f"(FigureInfo.from_meta for redrawn data), got {type(target).__name__}")


def figure_dir(info: FigureInfo) -> Path:
    """figures/<device>/<notebook>/, or the scratch folder for a redrawn figure and for one
    a host notebook computed by hand (``paths.output_figures_dir``): neither overwrites a
    committed figure."""
    return (output_figures_dir(info.mode == "redrawn", computed=info.mode == "computed")
            / info.device / info.notebook)


def save(fig, target, name: str, *, footnote_extra: str | None = None) -> list[Path]:
    """Add the provenance footnote and save SVG + 2x PNG; returns both paths."""
    check_name("figure name", name)
    info = _info(target)
    note = info.footnote() + (f" · {footnote_extra}" if footnote_extra else "")
    return save_in(fig, figure_dir(info), name, note)


def save_in(fig, folder: Path, name: str, note: str) -> list[Path]:
    """``save`` with the folder and the footnote given: for figures that belong to no one
    device (``fp8lab.experiments.overlay``'s cross-device figures). The note may span several lines."""
    check_name("figure name", name)
    # A figure-level text in figure coordinates, below the axes; bbox='tight' keeps it.
    for t in list(fig.texts):
        if getattr(t, "_fp8lab_footnote", False):
            t.remove()
    # Below everything already drawn (rotated tick labels, two-line x labels), so the
    # tight bounding box grows to hold it instead of the note overlapping the axes.
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)            # inches
    w, h = fig.get_size_inches()
    txt = fig.text(max(box.x0 / w, 0.0), box.y0 / h - 0.01, note, ha="left", va="top",
                   fontsize=7, color="#555555", transform=fig.transFigure)
    txt._fp8lab_footnote = True
    out = Path(folder)
    paths = []
    for ext in ("svg", "png"):
        import io
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, metadata=_metadata(ext))
        path = out / f"{name}.{ext}"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths


def _metadata(ext: str) -> dict:
    # Fixed metadata keeps committed figures stable between identical redraws.
    if ext == "svg":
        return {"Date": None, "Creator": "fp8lab"}
    if ext == "png":
        return {"Software": "fp8lab"}
    return {}
