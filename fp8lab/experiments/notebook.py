"""What every GPU notebook does first and around its per-device loops: start the run (mode
resolved, figure style, the run's summary printed, the ``devices`` parameter checked before
anything is measured), say so when there is nothing to draw, and walk the devices' tables with
each device's metadata and name."""

from __future__ import annotations

from IPython.display import Markdown, display

from ..report import plotting, results
from . import overlay


def start(notebook: str, params: dict, *, mode: str, devices=()) -> results.Run:
    """A GPU notebook's run: measure on a GPU, replot without one (``mode='auto'``). A wrong
    ``devices`` key (no table of this notebook for it) fails here, not after measuring."""
    run = results.start_run(notebook, params=params, device="gpu", mode=mode)
    plotting.apply_style()
    print(run.summary())
    overlay.check_devices(notebook, devices, run)
    return run


def say_if_no_data(devs, todo: str = "") -> None:
    """One Markdown line when ``data/`` holds no measured table of the notebook: how to get one."""
    if not devs:
        display(Markdown("**No measured data for this notebook in `data/` yet.** Run it on a GPU (mode "
                         f"`measure`){' ' + todo if todo else ''}; nothing is recorded in this run."))


def each_device(tables: dict, headline: str | None = None):
    """(device key, its tables, the headline table's metadata, the device's name) per device;
    ``headline``: which of a device's tables carries the metadata (None: the value is that table)."""
    for dev, t in tables.items():
        meta = (t if headline is None else t[headline]).attrs["meta"]
        yield dev, t, meta, meta.get("device_name", dev)
