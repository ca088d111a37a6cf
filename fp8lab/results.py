"""Tidy result tables with provenance.

A notebook starts a run, writes tables, and the tables land in
``data/<device>/<notebook>/<table>.csv`` with a ``<table>.meta.json`` sidecar (device,
compute capability, SMs, clocks, driver, versions, git commit, notebook, parameters,
time, and the CSV's sha256). Writes are atomic: a temp file in the same folder, then a
rename, so a failed run never leaves half a table; the loader checks the sidecar's hash,
so a CSV and a sidecar from different runs are refused rather than silently mixed.

Modes:
- ``host``: a host-only notebook (compile-time, emulators, SASS): runs for real anywhere,
  data under ``data/cpu/``.
- ``measure``: a GPU is present; data under ``data/<gpu key>/``.
- ``replot``: no GPU (or asked for): nothing is written; figures are redrawn from
  committed data and say so.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path

import pandas as pd

from . import provenance
from .paths import data_dir

MODES = ("auto", "measure", "replot")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
HOST_DEVICE = "cpu"


def _check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value) or ".." in value:
        raise ValueError(f"{kind} must be a plain name of letters, digits, '_', '.', '-' "
                         f"(no folders), got {value!r}")
    return value


def resolve_mode(mode: str = "auto") -> str:
    """'auto' -> 'measure' when a GPU is present, else 'replot'. $FP8LAB_MODE overrides
    'auto' (the runner sets it)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        env = os.environ.get("FP8LAB_MODE", "auto")
        if env not in MODES:
            raise ValueError(f"FP8LAB_MODE must be one of {MODES}, got {env!r}")
        mode = env
    if mode == "auto":
        mode = "measure" if provenance.gpu_present() else "replot"
    if mode == "measure" and not provenance.gpu_present():
        raise RuntimeError("mode 'measure' needs an NVIDIA GPU and none is visible; "
                           "use mode 'replot' to redraw from committed data")
    return mode


_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file whole or not at all: a temp file in the same folder, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)   # mkstemp makes 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


_atomic_write_bytes = atomic_write_bytes


def _json_default(o):
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    if isinstance(o, (Path, _dt.date)):
        return str(o)
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    raise TypeError(f"not JSON-serialisable for a meta sidecar: {type(o).__name__}")


def write_table(device: str, notebook: str, name: str, df: pd.DataFrame, meta: dict) -> Path:
    """Atomically write one table and its sidecar; returns the CSV path."""
    _check_name("device", device)
    _check_name("notebook", notebook)
    _check_name("table name", name)
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"a result table must be a pandas DataFrame, got {type(df).__name__}")
    if df.columns.duplicated().any():
        raise ValueError(f"table {name!r} has duplicate columns: "
                         f"{list(df.columns[df.columns.duplicated()])}")
    folder = data_dir() / device / notebook
    buf = io.StringIO()
    df.to_csv(buf, index=False, lineterminator="\n")
    csv_bytes = buf.getvalue().encode()
    side = dict(meta)
    side["table"] = {"name": name, "rows": int(len(df)), "columns": [str(c) for c in df.columns],
                     "sha256": hashlib.sha256(csv_bytes).hexdigest()}
    meta_bytes = (json.dumps(side, indent=2, sort_keys=True, default=_json_default) + "\n").encode()
    csv_path = folder / f"{name}.csv"
    # Both are serialised before either is written, so a bad meta never leaves a new CSV
    # beside an old sidecar; the hash catches the (tiny) window between the two renames.
    _atomic_write_bytes(csv_path, csv_bytes)
    _atomic_write_bytes(folder / f"{name}.meta.json", meta_bytes)
    return csv_path


def known_devices() -> list[str]:
    d = data_dir()
    return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def load_meta(device: str, notebook: str, name: str) -> dict:
    path = _table_path(device, notebook, name).with_suffix("").with_suffix(".meta.json")
    return json.loads(path.read_text())


def _table_path(device: str, notebook: str, name: str) -> Path:
    _check_name("device", device)
    _check_name("notebook", notebook)
    _check_name("table name", name)
    devs = known_devices()
    if device not in devs:
        raise ValueError(f"unknown device {device!r}: data/ holds {devs or 'no devices'}")
    path = data_dir() / device / notebook / f"{name}.csv"
    if not path.is_file():
        raise ValueError(f"no table {name!r} for notebook {notebook!r} on device {device!r} "
                         f"(looked for {path})")
    return path


def load_table(device: str, notebook: str, name: str) -> pd.DataFrame:
    """Load a table; ``df.attrs['meta']`` is its provenance sidecar."""
    path = _table_path(device, notebook, name)
    meta_path = path.with_name(f"{name}.meta.json")
    if not meta_path.is_file():
        raise ValueError(f"{path} has no provenance sidecar {meta_path.name}: refusing a "
                         "result without provenance")
    raw = path.read_bytes()
    meta = json.loads(meta_path.read_text())
    want = meta.get("table", {}).get("sha256")
    if want and hashlib.sha256(raw).hexdigest() != want:
        raise ValueError(f"{path} does not match its sidecar (sha256 differs): the table and "
                         "its provenance come from different runs")
    # Only an empty field is missing: words like "nan" or "NA" in text columns (a code's
    # class, say) stay text. pandas writes missing numbers as empty fields.
    df = pd.read_csv(io.BytesIO(raw), keep_default_na=False, na_values=[""])
    df.attrs["meta"] = meta
    return df


def devices_with(notebook: str, name: str) -> list[str]:
    """Device keys in data/ that hold this notebook's table."""
    _check_name("notebook", notebook)
    _check_name("table name", name)
    return [d for d in known_devices() if (data_dir() / d / notebook / f"{name}.csv").is_file()]


def load_all(notebook: str, name: str, devices=None) -> pd.DataFrame:
    """One table across devices, with a ``device`` column (and ``device_name``)."""
    devs = devices_with(notebook, name) if devices in (None, "all", []) else list(devices)
    frames = []
    for d in devs:
        df = load_table(d, notebook, name)
        meta = df.attrs["meta"]
        df = df.assign(device=d, device_name=meta.get("device_name", d))
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out.attrs["metas"] = {d: load_meta(d, notebook, name) for d in devs}
    return out


@dataclasses.dataclass(frozen=True)
class FigureInfo:
    """What a figure's footnote says and where it is saved."""
    notebook: str
    device: str
    device_name: str
    date: str            # YYYY-MM-DD of the measurement
    mode: str            # "measured" | "redrawn" | "computed"
    commit: str | None = None

    @classmethod
    def from_meta(cls, meta: dict, redrawn: bool = True) -> "FigureInfo":
        mode = meta.get("mode")
        label = "computed" if mode == "host" else ("redrawn" if redrawn else "measured")
        return cls(notebook=meta["notebook"], device=meta["device"],
                   device_name=meta.get("device_name", meta["device"]),
                   date=str(meta.get("time", ""))[:10],
                   mode=label, commit=(meta.get("git") or {}).get("commit"))

    def footnote(self) -> str:
        commit = f" · fp8lab {self.commit[:8]}" if self.commit else ""
        if self.mode == "redrawn":
            what = f"measured on {self.device_name} {self.date}, redrawn from data/{self.device}"
        elif self.mode == "computed":
            what = f"computed on {self.device_name} {self.date} (no GPU needed)"
        else:
            what = f"measured on {self.device_name} {self.date}"
        return f"{what}{commit} · notebook {self.notebook}"


class Run:
    """One execution of one notebook: provenance gathered once, tables written under it."""

    def __init__(self, notebook: str, params: dict | None = None, device: str = "cpu",
                 mode: str = "auto"):
        _check_name("notebook", notebook)
        self.notebook = notebook
        self.params = dict(params or {})
        if device == HOST_DEVICE:
            self.mode = "host"
            self.gpu = None
            self.device = HOST_DEVICE
        elif device == "gpu":
            self.mode = resolve_mode(mode)
            self.gpu = provenance.gpu_info() if self.mode == "measure" else None
            self.device = self.gpu["device"] if self.gpu else None
        else:
            raise ValueError(f"device must be 'cpu' (host-only notebook) or 'gpu', got {device!r}")
        self.meta = provenance.collect(notebook=notebook, params=self.params,
                                       device=self.device or "none", mode=self.mode, gpu=self.gpu)
        self.device_name = self.meta["device_name"]
        self.written: list[Path] = []

    @property
    def writes(self) -> bool:
        return self.mode in ("host", "measure")

    def write_table(self, name: str, df: pd.DataFrame, meta: dict | None = None) -> Path:
        if not self.writes:
            raise RuntimeError(f"run of {self.notebook} is in {self.mode!r} mode: it redraws "
                               "committed data and must not write tables")
        side = dict(self.meta)
        if meta:
            side["extra"] = meta
        path = write_table(self.device, self.notebook, name, df, side)
        self.written.append(path)
        return path

    def figure_info(self) -> FigureInfo:
        if not self.writes:
            raise RuntimeError("a replot run has no measurement of its own; use "
                               "FigureInfo.from_meta(table.attrs['meta']) for each device")
        return FigureInfo.from_meta(self.meta, redrawn=False)

    def summary(self) -> str:
        g = self.gpu
        where = (f"{g['device_name']} (cc {g['compute_capability']}, {g['sm_count']} SMs, "
                 f"driver {g.get('driver')})") if g else self.device_name
        commit = self.meta["git"].get("commit")
        dirty = " +dirty" if self.meta["git"].get("dirty") else ""
        return (f"{self.notebook}: mode {self.mode} on {where}; "
                f"commit {commit[:10] if commit else 'none'}{dirty}; {self.meta['time']}")

    def __repr__(self) -> str:
        return f"<Run {self.summary()}>"


def start_run(notebook: str, params: dict | None = None, device: str = "cpu",
              mode: str = "auto") -> Run:
    """Begin a notebook's run: ``device='cpu'`` for host-only notebooks, ``'gpu'`` for the
    current CUDA device (mode resolved: measure with a GPU, replot without)."""
    return Run(notebook, params, device=device, mode=mode)
