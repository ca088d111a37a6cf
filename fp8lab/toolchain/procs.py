"""Small process helpers (Linux /proc) for the runner, the executor and the clock guard.

A pid alone is not a process: once a process has died its pid can be handed to another.
Whoever records a pid to kill later records its start time too (``start_time``), and
``kill_group`` kills only when the pid still has that start time. Where /proc cannot be
read the start time is None and nothing recorded that way is ever killed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; the name in field 2 may hold spaces and ')'."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            raw = f.read()
    except (OSError, ValueError):
        return None
    return raw.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, field 22), None when unknown."""
    f = _stat_fields(pid)
    return int(f[19]) if f and len(f) > 19 else None


def alive(pid: int, start: int | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not); with ``start``, whether it is still the
    process that had that start time."""
    f = _stat_fields(pid)
    if f is None or f[0] in ("Z", "X"):
        return False
    return start is None or (len(f) > 19 and int(f[19]) == start)


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (a scan of /proc)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for d in names:
        if d.isdigit():
            f = _stat_fields(int(d))
            if f and len(f) > 1 and int(f[1]) == pid:
                out.append(int(d))
    return out


def kill_group(pid: int, start: int | None, *, grace_s: float = 2.0, wait_s: float = 5.0) -> bool:
    """SIGTERM to the process group that ``pid`` leads (or belongs to), SIGKILL after
    ``grace_s``; True once ``pid`` is gone. Does nothing when ``pid`` is no longer the process
    that started at ``start`` (or ``start`` is None: its identity cannot be checked)."""
    if start is None or not alive(pid, start):
        return not alive(pid, start) if start is not None else False
    try:
        pgid = os.getpgid(pid)
    except OSError:
        return True
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, wait_s)):
        try:
            if pgid == os.getpgid(0):        # never our own group
                os.kill(pid, sig)
            else:
                os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        t_end = time.monotonic() + wait
        while time.monotonic() < t_end:
            if not alive(pid, start):
                return True
            time.sleep(0.05)
    return not alive(pid, start)


# -------------------------------------------------------------- temp folders a kill leaves
_SWEPT: set = set()
_SWEPT_LOCK = threading.Lock()


def sweep_stale_temp(prefix: str, base=None) -> list:
    """Remove this user's ``owned_temp_dir(prefix)`` folders whose owner process is gone
    (a SIGKILL runs no cleanup); returns what was removed. A folder whose owner cannot be
    told (no start time recorded) is left alone."""
    base = Path(base or tempfile.gettempdir())
    pat = re.compile(re.escape(prefix) + r"(\d+)-(\d+)-")
    removed = []
    for d in base.glob(prefix + "*"):
        m = pat.match(d.name)
        try:
            if not m or not d.is_dir() or d.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        pid, start = int(m.group(1)), int(m.group(2))
        if start and not alive(pid, start):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


@contextmanager
def owned_temp_dir(prefix: str, base=None):
    """A temporary folder (removed on exit, as ``tempfile.TemporaryDirectory``) whose name
    records its owner's pid and start time, so that the first such call of a later process
    removes the ones a killed process left (``sweep_stale_temp``). ``base``: the folder to make
    it in (default the system temp; a cache puts it beside its entries so they can be renamed
    into place)."""
    with _SWEPT_LOCK:
        if (prefix, str(base)) not in _SWEPT:
            _SWEPT.add((prefix, str(base)))
            sweep_stale_temp(prefix, base)
    me = os.getpid()
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{me}-{start_time(me) or 0}-", dir=base) as tmp:
        yield tmp
