"""Tidy result tables with provenance.

A notebook starts a run, writes tables, and the tables land in
``data/<device>/<notebook>/<table>.csv`` with a ``<table>.meta.json`` sidecar (device,
compute capability, SMs, clocks, driver, versions, git commit, notebook, parameters,
time, and the CSV's sha256). Writes are atomic: a temp file in the same folder, then a
rename, so a failed run never leaves half a table; the loader checks the sidecar's hash,
so a CSV and a sidecar from different runs are refused rather than silently mixed, and a
sidecar without a hash, or one that is not a JSON object, is an error naming the file.

A CSV and its sidecar are two renames, so the pair is written under an exclusive lock on
its folder (readers take it shared) and the new sidecar goes first to a pending file
``.<table>.pending.json``: a writer killed between the two renames leaves the new CSV with
the pending sidecar that describes it, which the loader uses (and the next run of that
notebook completes). A reader never gets a CSV with another run's sidecar. One run of a
notebook at a time writes a device's folder (``Run`` holds ``.fp8lab-run.lock`` there
while it lives; a second is refused with the first one's pid).

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
import fcntl
import hashlib
import io
import json
import os
import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from . import provenance
from ..paths import data_dir, output_data_dir, repo_root

MODES = ("auto", "measure", "replot")
_WRITE_LOCK = ".fp8lab-write.lock"     # held while a CSV + sidecar pair is written (readers: shared)
_RUN_LOCK = ".fp8lab-run.lock"         # held by the one Run writing this device's notebook folder


class TableError(ValueError):
    """A stored table that cannot be used: no sidecar, a malformed one, one without the
    CSV's sha256, or one whose hash the CSV does not match. The message names the file."""
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
HOST_DEVICE = "cpu"


def check_name(kind: str, value: str) -> str:
    """``value`` when it is a plain file-name part (a device, notebook, table or figure name),
    else ValueError naming ``kind``."""
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


@contextmanager
def _folder_lock(folder: Path, exclusive: bool):
    """flock on the folder's write lock: exclusive to write a pair, shared to read one.
    Only writers create the lock file (a Run creates it when it starts), so reading committed
    data leaves nothing behind; a folder without one has no writer to wait for."""
    path = folder / _WRITE_LOCK
    try:
        fd = os.open(path, (os.O_RDWR | os.O_CREAT) if exclusive else os.O_RDONLY, 0o666 & ~_UMASK)
    except OSError:
        if exclusive:
            raise
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _pending(folder: Path, name: str) -> Path:
    return folder / f".{name}.pending.json"


def write_pair(folder: Path, name: str, csv_bytes: bytes, meta_bytes: bytes) -> Path:
    """Write ``<name>.csv`` and ``<name>.meta.json`` so that no reader gets one without the
    other (see the module's docstring); returns the CSV path."""
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / f"{name}.csv"
    with _folder_lock(folder, exclusive=True):
        pending = _pending(folder, name)
        atomic_write_bytes(pending, meta_bytes)
        atomic_write_bytes(csv_path, csv_bytes)
        atomic_write_bytes(folder / f"{name}.meta.json", meta_bytes)
        pending.unlink()
    return csv_path


def _parse_sidecar(path: Path, text: str, require_hash: bool = True) -> dict:
    """The sidecar as a dict (with the CSV's hash, unless ``require_hash`` is False), or
    TableError naming the file."""
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise TableError(f"{path}: not a valid meta sidecar: not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise TableError(f"{path}: not a valid meta sidecar: it holds a {type(meta).__name__}, "
                         "not a JSON object")
    if not require_hash:
        return meta
    table = meta.get("table")
    want = table.get("sha256") if isinstance(table, dict) else None
    if not isinstance(want, str) or not re.fullmatch(r"[0-9a-f]{64}", want):
        raise TableError(f"{path}: not a valid meta sidecar: no table.sha256 (the CSV's hash), "
                         "so the table cannot be checked: refusing it")
    return meta


def read_sidecar(path: Path, require_hash: bool = True) -> dict:
    """One sidecar file, checked as the loader checks it (a JSON object with the CSV's
    sha256; only an object with ``require_hash=False``); TableError naming the file otherwise."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TableError(f"{path}: cannot read the sidecar: {exc}") from None
    return _parse_sidecar(path, text, require_hash)


def _read_pair(csv_path: Path) -> tuple[bytes, dict]:
    """(CSV bytes, checked sidecar) of one stored table."""
    name = csv_path.name[:-len(".csv")]
    meta_path = csv_path.with_name(f"{name}.meta.json")
    pending = _pending(csv_path.parent, name)
    with _folder_lock(csv_path.parent, exclusive=False):
        try:
            raw = csv_path.read_bytes()
            meta_text = meta_path.read_text() if meta_path.is_file() else None
            pending_text = pending.read_text() if pending.is_file() else None
        except OSError as exc:
            raise TableError(f"{csv_path}: cannot read the table: {exc}") from None
    have = hashlib.sha256(raw).hexdigest()
    if pending_text is not None:
        # A write killed between its renames: the pending sidecar describes the new CSV.
        try:
            meta = _parse_sidecar(pending, pending_text)
        except TableError:
            meta = None
        if meta is not None and meta["table"]["sha256"] == have:
            return raw, meta
    if meta_text is None:
        raise TableError(f"{csv_path} has no provenance sidecar {meta_path.name}: refusing a "
                         "result without provenance")
    meta = _parse_sidecar(meta_path, meta_text)
    if meta["table"]["sha256"] != have:
        raise TableError(f"{csv_path} does not match its sidecar {meta_path.name} (sha256 "
                         "differs): the table and its provenance come from different runs")
    return raw, meta


def _complete_interrupted(folder: Path) -> None:
    """Finish the pair writes a killed writer left in ``folder`` (its pending sidecars):
    the CSV was renamed -> put the sidecar beside it; it was not -> the old pair stands."""
    if not folder.is_dir():
        return
    with _folder_lock(folder, exclusive=True):
        for pending in folder.glob(".*.pending.json"):
            name = pending.name[1:-len(".pending.json")]
            csv_path = folder / f"{name}.csv"
            try:
                data = pending.read_bytes()
                want = _parse_sidecar(pending, data.decode())["table"]["sha256"]
                if csv_path.is_file() and hashlib.sha256(csv_path.read_bytes()).hexdigest() == want:
                    atomic_write_bytes(folder / f"{name}.meta.json", data)
            except (OSError, ValueError):
                pass                  # unreadable: the loader refuses that table by name
            pending.unlink(missing_ok=True)


_HELD_RUN_LOCKS: dict = {}


def _hold_run_lock(folder: Path) -> None:
    """One Run at a time writes ``folder``: take its run lock for the life of this process
    (a second process gets a RuntimeError naming the first one's pid)."""
    key = str(folder.resolve())
    if key in _HELD_RUN_LOCKS:
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _RUN_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            who = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        finally:
            os.close(fd)
        raise RuntimeError(f"{folder} is being written by another run ({who}); two runs of one "
                           "notebook on one device would mix their tables: wait for it to end "
                           "or stop it") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} since {provenance.utc_now()}\n".encode(), 0)
    _HELD_RUN_LOCKS[key] = fd             # released when this process ends
    _complete_interrupted(folder)


#: Set by the runner in a measure run on one GPU: a lock file the GPU notebooks take in turn.
#: A GPU notebook takes it in start_run (before it touches the GPU) and holds it until its
#: process ends, so the runner can start the next notebook (kernel, imports) while this one
#: measures; the next one measures only after this one has ended (runner.GPU_TURN_LANES).
GPU_TURN_ENV = "FP8LAB_GPU_TURN"
_GPU_TURN: dict = {}


def take_gpu_turn(notebook: str) -> float | None:
    """Wait for the GPU turn ($FP8LAB_GPU_TURN) and hold it for the rest of this process.
    Returns the seconds waited (also written beside the lock, ``<lock>.<notebook>.wait``, for
    run.json), None when no turn is kept (no runner, or not a measure run)."""
    path = os.environ.get(GPU_TURN_ENV)
    if not path:
        return None
    if "fd" in _GPU_TURN:
        return 0.0
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    t0 = time.monotonic()
    fcntl.flock(fd, fcntl.LOCK_EX)        # blocks while the notebook before this one runs
    waited = time.monotonic() - t0
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{notebook} pid {os.getpid()} since {provenance.utc_now()}\n".encode(), 0)
    _GPU_TURN["fd"] = fd                  # released when this process ends
    atomic_write_bytes(Path(f"{path}.{notebook}.wait"), f"{waited:.3f}\n".encode())
    if waited >= 1:
        print(f"[gpu turn] {notebook} started while the notebook before it measured, and waited "
              f"{waited:.0f} s for the GPU")
    return waited


#: (device, notebook) -> the folder outside data/ this process wrote that notebook's tables
#: to (a host notebook run by hand: runs/scratch/data/, ``paths.output_data_dir``). The
#: notebook reads back what it just wrote; every other reader (claims, verify, another
#: notebook, a later process) sees only data/, never an older hand run's scratch copy.
_OWN_TABLES: dict[tuple[str, str], Path] = {}


def write_table(device: str, notebook: str, name: str, df: pd.DataFrame, meta: dict,
                root: Path | None = None) -> Path:
    """Atomically write one table and its sidecar under ``root`` (data/ unless given);
    returns the CSV path."""
    check_name("device", device)
    check_name("notebook", notebook)
    check_name("table name", name)
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"a result table must be a pandas DataFrame, got {type(df).__name__}")
    if df.columns.duplicated().any():
        raise ValueError(f"table {name!r} has duplicate columns: "
                         f"{list(df.columns[df.columns.duplicated()])}")
    base = data_dir() if root is None else Path(root)
    folder = base / device / notebook
    if base != data_dir():
        _OWN_TABLES[(device, notebook)] = folder
    buf = io.StringIO()
    df.to_csv(buf, index=False, lineterminator="\n")
    csv_bytes = buf.getvalue().encode()
    side = dict(meta)
    side["table"] = {"name": name, "rows": int(len(df)), "columns": [str(c) for c in df.columns],
                     "sha256": hashlib.sha256(csv_bytes).hexdigest()}
    meta_bytes = (json.dumps(side, indent=2, sort_keys=True, default=_json_default) + "\n").encode()
    # Both are serialised before either is written, so a bad meta never leaves a new CSV
    # beside an old sidecar.
    return write_pair(folder, name, csv_bytes, meta_bytes)


def known_devices() -> list[str]:
    d = data_dir()
    return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def load_meta(device: str, notebook: str, name: str) -> dict:
    """A table's checked sidecar (TableError as ``load_table``)."""
    return _read_pair(_table_path(device, notebook, name))[1]


def _table_path(device: str, notebook: str, name: str) -> Path:
    check_name("device", device)
    check_name("notebook", notebook)
    check_name("table name", name)
    own = _OWN_TABLES.get((device, notebook))
    # only while this process still writes there (not after FP8LAB_DATA_DIR was set since)
    if (own is not None and own.is_relative_to(output_data_dir(host=True))
            and (own / f"{name}.csv").is_file()):
        return own / f"{name}.csv"
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
    raw, meta = _read_pair(_table_path(device, notebook, name))
    # Only an empty field is missing: words like "nan" or "NA" in text columns (a code's
    # class, say) stay text. pandas writes missing numbers as empty fields.
    df = pd.read_csv(io.BytesIO(raw), keep_default_na=False, na_values=[""])
    df.attrs["meta"] = meta
    return df


def devices_with(notebook: str, name: str) -> list[str]:
    """Device keys in data/ that hold this notebook's table."""
    check_name("notebook", notebook)
    check_name("table name", name)
    return [d for d in known_devices() if (data_dir() / d / notebook / f"{name}.csv").is_file()]


def by_device(notebook: str, name: str) -> dict:
    """This notebook's table ``name`` of every device in data/ that holds it: {device: table}."""
    return {d: load_table(d, notebook, name) for d in devices_with(notebook, name)}


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
        check_name("notebook", notebook)
        self.notebook = notebook
        self.params = dict(params or {})
        if device == HOST_DEVICE:
            self.mode = "host"
            self.gpu = None
            self.device = HOST_DEVICE
        elif device == "gpu":
            self.mode = resolve_mode(mode)
            if self.mode == "measure":
                take_gpu_turn(notebook)   # in a runner's measure run: after the notebook before it
            self.gpu = provenance.gpu_info() if self.mode == "measure" else None
            self.device = self.gpu["device"] if self.gpu else None
        else:
            raise ValueError(f"device must be 'cpu' (host-only notebook) or 'gpu', got {device!r}")
        self.meta = provenance.collect(notebook=notebook, params=self.params,
                                       device=self.device or "none", mode=self.mode, gpu=self.gpu)
        self.device_name = self.meta["device_name"]
        self.written: list[Path] = []
        # data/, or runs/scratch/data/ for a host notebook run by hand (paths.output_data_dir)
        self.data_root = output_data_dir(host=self.mode == "host")
        if self.writes:
            _hold_run_lock(self.data_root / self.device / notebook)

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
        path = write_table(self.device, self.notebook, name, df, side, root=self.data_root)
        self.written.append(path)
        return path

    def figure_info(self) -> FigureInfo:
        if not self.writes:
            raise RuntimeError("a replot run has no measurement of its own; use "
                               "FigureInfo.from_meta(table.attrs['meta']) for each device")
        return FigureInfo.from_meta(self.meta, redrawn=False)

    def info_for(self, dev: str, table) -> FigureInfo:
        """Provenance of a figure drawn from device ``dev``'s ``table`` (a DataFrame with its
        sidecar metadata in ``attrs['meta']``, or that metadata dict): this run's own when this run
        measured ``dev``; otherwise the table's, marked redrawn."""
        if self.mode == "measure" and dev == self.device:
            return self.figure_info()
        meta = table if isinstance(table, dict) else table.attrs["meta"]
        return FigureInfo.from_meta(meta, redrawn=True)

    def summary(self) -> str:
        g = self.gpu
        where = (f"{g['device_name']} (cc {g['compute_capability']}, {g['sm_count']} SMs, "
                 f"driver {g.get('driver')})") if g else self.device_name
        commit = self.meta["git"].get("commit")
        dirty = " +dirty" if self.meta["git"].get("dirty") else ""
        line = (f"{self.notebook}: mode {self.mode} on {where}; "
                f"commit {commit[:10] if commit else 'none'}{dirty}; {self.meta['time']}")
        if self.writes and self.data_root != data_dir():
            # say where this hand run's tables go, so nobody looks for them in data/
            try:
                where = self.data_root.parent.relative_to(repo_root())
            except ValueError:
                where = self.data_root.parent
            line += (f"\nrun by hand: tables and figures go to {where}/ (the committed "
                     "data/cpu/ and figures/cpu/ come from `python -m fp8lab run`)")
        return line

    def __repr__(self) -> str:
        return f"<Run {self.summary()}>"


def start_run(notebook: str, params: dict | None = None, device: str = "cpu",
              mode: str = "auto") -> Run:
    """Begin a notebook's run: ``device='cpu'`` for host-only notebooks, ``'gpu'`` for the
    current CUDA device (mode resolved: measure with a GPU, replot without)."""
    return Run(notebook, params, device=device, mode=mode)
