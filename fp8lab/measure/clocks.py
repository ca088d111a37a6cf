"""GPU clocks: an NVML sampler that runs beside every measurement, and an opt-in
clock lock for users' own machines.

``ClockSampler`` polls NVML on a background thread (SM and memory clock, power,
temperature, clock-event / throttle reasons) and summarises what it saw; the
summary goes into a table's meta sidecar, so a number measured while the card was
power-capped says so.

``locked_clocks`` is for a machine you own. It never runs unless asked twice: a
clock range and ``opt_in=True`` (or FP8LAB_ALLOW_CLOCK_LOCK=1). It tries the lock;
without permission (not root) it records 'not permitted' and the body runs
unlocked. It locks the GPU that CUDA calls ``cuda:device_index``, found in NVML by its
UUID (NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES, and CUDA's own order need not be
NVML's); when it cannot tell which NVML device that is, it locks nothing.

Once locked, the reset is tried three ways inside the process: the ``finally`` of the
context manager, an ``atexit`` hook, and a SIGTERM handler (which resets, then hands over
to the previous handler). None of them runs when the process is killed outright (a
Jupyter kernel whose parent dies leaves with ``os._exit``), so the runner owns the
release: it names a state file in $FP8LAB_CLOCK_STATE, ``locked_clocks`` records each
lock there *before* taking it (and removes it once reset), and whatever ends the
notebook (end, timeout, Ctrl-C, SIGTERM, SIGHUP, the runner's own death) the runner or
its executor calls ``release_recorded``: it kills the holder, then resets every lock
still recorded. Never use it on a shared machine.

``timed`` / ``row_clocks`` give every timed row of every experiment its clock columns
(``CLOCK_COLUMNS``), and ``clock_source`` / ``clock_note`` say where they came from: NVML
samples taken while the row was timed ('sampled'); when the window was shorter than the
sampler's interval, the samples just before and just after it ('bracketing samples'); or why
there are none ('none': no sampler, NVML unavailable).

NVML is imported lazily (``pynvml`` from nvidia-ml-py); both classes take an
``nvml`` object, so tests inject a fake (and the sampler a ``clock``).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import math
import os
import signal
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

__all__ = ["ClockSampler", "ClockLock", "locked_clocks", "decode_reasons", "REASON_BITS",
           "sample_once", "active_lock", "CLOCK_COLUMNS", "CLOCK_SOURCES", "row_clocks", "timed",
           "cuda_uuid", "recorded_locks", "release_recorded", "STATE_ENV"]

#: the runner names a file here; every lock taken in the notebook is recorded in it
STATE_ENV = "FP8LAB_CLOCK_STATE"

#: clock-event (formerly "throttle") reason bits, as nvml.h defines them
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",   # also "user defined clocks" (same bit)
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int) -> list:
    """Names of the reason bits set in an NVML clock-event mask."""
    mask = int(mask)
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(REASON_BITS)
    if unknown:
        names.append(f"other(0x{unknown:x})")
    return names


def _load_nvml(nvml=None):
    if nvml is not None:
        return nvml
    import pynvml  # nvidia-ml-py

    return pynvml


def _reasons(nvml, handle) -> Optional[int]:
    for fname in ("nvmlDeviceGetCurrentClocksEventReasons",
                  "nvmlDeviceGetCurrentClocksThrottleReasons"):
        f = getattr(nvml, fname, None)
        if f is not None:
            try:
                return int(f(handle))
            except Exception:
                return None
    return None


def sample_once(nvml, handle, clock: Callable[[], float] = time.monotonic) -> dict:
    """One reading; fields NVML refuses on this card are None."""
    def get(f, *args, scale=1.0):
        try:
            return getattr(nvml, f)(handle, *args) * scale
        except Exception:
            return None

    return {
        "t": clock(),
        "sm_mhz": get("nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_SM", 1)),
        "mem_mhz": get("nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_MEM", 2)),
        "power_w": get("nvmlDeviceGetPowerUsage", scale=1e-3),
        "temp_c": get("nvmlDeviceGetTemperature", getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
        "reasons": _reasons(nvml, handle),
    }


_ACTIVE_LOCK: dict = {"lock": None}


def active_lock() -> Optional["ClockLock"]:
    """The ClockLock in force in this process, if any (the sampler reports it)."""
    return _ACTIVE_LOCK["lock"]


class ClockSampler:
    """Poll NVML every ``interval_s`` on a daemon thread while a measurement runs.

    Use as a context manager, or ``start()`` / ``stop()``. ``summary()`` (or
    ``summary(t0, t1)`` for a window in ``now()`` seconds) returns a dict fit for a meta
    sidecar. With no NVML (no driver, no pynvml) it records why and ``summary()`` says
    ``available: False``: measuring still works. ``clock`` (default ``time.monotonic``) is
    the time base of ``now()`` and of every sample's ``t``; tests pass a fake one.
    """

    def __init__(self, device_index: int = 0, interval_s: float = 0.05, nvml=None,
                 max_samples: int = 200_000, uuid: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.device_index = int(device_index)
        # NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES; a UUID (torch's
        # get_device_properties(i).uuid) names the same card torch measures
        self.uuid = uuid
        self.interval_s = float(interval_s)
        self.max_samples = int(max_samples)
        self.samples: list = []
        self.error: Optional[str] = None
        self.device_name: Optional[str] = None
        self.max_sm_mhz: Optional[float] = None
        self._clock = clock
        self._nvml_arg = nvml
        self._nvml = None
        self._handle = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = False
        self._t_start = self._t_stop = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> "ClockSampler":
        self._started = True
        try:
            nvml = _load_nvml(self._nvml_arg)
            nvml.nvmlInit()
            if self.uuid:
                u = self.uuid if self.uuid.startswith("GPU-") else "GPU-" + self.uuid
                self._handle = nvml.nvmlDeviceGetHandleByUUID(u)
            else:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(self.device_index)
            self._nvml = nvml
            try:
                name = nvml.nvmlDeviceGetName(self._handle)
                self.device_name = name.decode() if isinstance(name, bytes) else str(name)
            except Exception:
                pass
            try:
                self.max_sm_mhz = nvml.nvmlDeviceGetMaxClockInfo(
                    self._handle, getattr(nvml, "NVML_CLOCK_SM", 1))
            except Exception:
                pass
        except Exception as e:  # no driver / no GPU / no pynvml: measure without clocks
            self.error = f"{type(e).__name__}: {e}"
            self._nvml = None
            return self
        self._t_start = self._clock()
        self._stop.clear()
        self.samples.append(sample_once(self._nvml, self._handle, self._clock))
        self._thread = threading.Thread(target=self._run, name="fp8lab-clock-sampler",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval_s):
            if len(self.samples) >= self.max_samples:
                break
            try:
                self.samples.append(sample_once(self._nvml, self._handle, self._clock))
            except Exception as e:  # keep the measurement alive; say what happened
                self.error = f"{type(e).__name__}: {e}"
                break

    @property
    def running(self) -> bool:
        """Started, NVML answered, not stopped yet."""
        return self._thread is not None and self._nvml is not None

    def sample_now(self) -> Optional[dict]:
        """One extra reading taken on the caller's thread (the end of a timing window
        shorter than the interval); None when not running or NVML refuses."""
        if not self.running:
            return None
        try:
            s = sample_once(self._nvml, self._handle, self._clock)
        except Exception as e:  # noqa: BLE001 - a row without clocks, not a failed measurement
            self.error = f"{type(e).__name__}: {e}"
            return None
        self.samples.append(s)
        return s

    def stop(self) -> "ClockSampler":
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            try:
                self.samples.append(sample_once(self._nvml, self._handle, self._clock))
            except Exception:
                pass
        if self._nvml is not None:
            self._t_stop = self._clock()
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- results ------------------------------------------------------------------------
    def now(self) -> float:
        """A timestamp on the samples' clock, to mark the window of one arm."""
        return self._clock()

    def _why_none(self) -> str:
        if not self._started:
            return "sampler never started"
        if self.error and not self.samples:
            return f"NVML unavailable ({self.error})"
        if self.error:
            return f"NVML stopped answering ({self.error})"
        return "no NVML sample near the window"

    def summary(self, t0: Optional[float] = None, t1: Optional[float] = None) -> dict:
        """Clocks, power, temperature and clock-event reasons over the samples in [t0, t1]
        (everything when both are None).

        A window shorter than the interval may hold no sample (a graph-replayed kernel of a
        few us is timed in ~10 ms; the interval is 20 ms): then, if the sampler is running
        and nothing was read after t1 yet, one reading is taken now, and the summary uses
        the last sample before t0 and the first after t1. ``source`` says which:
        'sampled', 'bracketing samples', 'nearest sample' (one side only) or 'none';
        ``note`` says how far those samples lie from the window, or why there are none."""
        lock = active_lock()
        base = {"available": not self.error or bool(self.samples),
                "device_index": self.device_index, "uuid": self.uuid,
                "device_name": self.device_name,
                "interval_s": self.interval_s, "max_sm_mhz": self.max_sm_mhz,
                "locked": bool(lock and lock.locked),
                "lock_status": lock.status if lock else "not requested"}
        if self.error:
            base["error"] = self.error
        windowed = t0 is not None or t1 is not None

        def inside(s):
            return (t0 is None or s["t"] >= t0) and (t1 is None or s["t"] <= t1)

        # the main thread's end-of-window reading may land in the list after a reading the
        # sampler thread started earlier: order by time, not by arrival
        samples = sorted(self.samples, key=lambda s: s["t"])
        rows = [s for s in samples if inside(s)]
        span = f"the {(t1 - t0) * 1e3:.2f} ms window" if t0 is not None and t1 is not None else "the window"
        forced = None
        if windowed and not rows and self.running and (
                t1 is None or not any(s["t"] > t1 for s in samples)):
            # read now: the closest to the window's end there can be. It was taken after the
            # timed work, so it brackets the window even if the clock has not moved since t1
            forced = self.sample_now()
            if forced is not None:
                samples.append(forced)
                if t1 is None:
                    rows = [forced]
        if rows:
            source = "sampled"
            note = f"{len(rows)} NVML samples in {span}" if windowed else f"{len(rows)} NVML samples"
        elif windowed and samples:
            before = [s for s in samples if t0 is not None and s["t"] < t0]
            after = [s for s in samples if t1 is not None and s["t"] > t1] or ([forced] if forced else [])
            before, after = (before[-1] if before else None), (after[0] if after else None)
            rows = [s for s in (before, after) if s is not None]
            parts = []
            if before is not None:
                parts.append(f"{(t0 - before['t']) * 1e3:.2f} ms before")
            if after is not None:
                parts.append(f"{(after['t'] - t1) * 1e3:.2f} ms after")
            source = "bracketing samples" if before is not None and after is not None else "nearest sample"
            note = (f"no NVML sample inside {span} (interval {self.interval_s * 1e3:.0f} ms); "
                    f"{'the samples' if len(rows) > 1 else 'the sample'} {' and '.join(parts)} it")
            if source == "nearest sample":
                note += "; none on the other side" + (f" ({self.error})" if self.error else "")
        else:
            source, note = "none", self._why_none()
        base.update(source=source, note=note, n_samples=len(rows))
        if not rows:
            base["available"] = False
            return base
        base["duration_s"] = rows[-1]["t"] - rows[0]["t"]
        for key in ("sm_mhz", "mem_mhz", "power_w", "temp_c"):
            vals = [r[key] for r in rows if r[key] is not None]
            if vals:
                base[f"{key}_min"] = min(vals)
                base[f"{key}_median"] = statistics.median(vals)
                base[f"{key}_max"] = max(vals)
        if "sm_mhz_median" not in base:
            base["note"] += "; NVML gave no SM clock"
        counts: dict = {}
        n_reason = 0
        for r in rows:
            if r["reasons"] is None:
                continue
            n_reason += 1
            for name in decode_reasons(r["reasons"]):
                counts[name] = counts.get(name, 0) + 1
        # fraction of samples in which each reason was active: a power cap seen in
        # 2% of samples is a different story from one seen in 90%
        base["reasons_fraction"] = {k: v / n_reason for k, v in sorted(counts.items())} if n_reason else {}
        base["throttled"] = any(k not in ("gpu_idle",) for k in counts)
        return base


# ---------------------------------------------------------------------------------
# the clock columns of one timed row (every experiment goes through these)
# ---------------------------------------------------------------------------------
#: what ``row_clocks`` returns; an experiment's table keeps those in its COLUMNS
CLOCK_COLUMNS = ("sm_mhz_median", "sm_mhz_min", "sm_mhz_max", "mem_mhz_median", "power_w_max",
                 "clock_reasons", "clock_source", "clock_note")
#: the values of ``clock_source`` on a timed row
CLOCK_SOURCES = ("sampled", "bracketing samples", "nearest sample", "none")

_NUMERIC = ("sm_mhz_median", "sm_mhz_min", "sm_mhz_max", "mem_mhz_median", "power_w_max")


def row_clocks(sampler: Optional[ClockSampler], t0: Optional[float], t1: Optional[float]) -> dict:
    """The ``CLOCK_COLUMNS`` of a row timed between ``t0`` and ``t1`` (``sampler.now()``
    stamps). Never silent: without a sampler the numbers are NaN and ``clock_source`` is
    'none' with ``clock_note`` saying so."""
    cols = {c: math.nan for c in _NUMERIC}
    cols["clock_reasons"] = ""
    if sampler is None:
        cols.update(clock_source="none", clock_note="no sampler: timed without NVML sampling")
        return cols
    s = sampler.summary(t0, t1)
    for c in _NUMERIC:
        v = s.get(c)
        cols[c] = float(v) if v is not None else math.nan
    cols["clock_reasons"] = ";".join(f"{k}:{v:.2f}" for k, v in s.get("reasons_fraction", {}).items())
    cols.update(clock_source=s["source"], clock_note=s["note"])
    return cols


def timed(sampler: Optional[ClockSampler], fn: Callable[[], object]) -> tuple:
    """``(fn(), row_clocks(...))`` for the window around one call of ``fn`` (a bench call):
    the one way a timed row gets its clocks."""
    t0 = sampler.now() if sampler is not None else None
    out = fn()
    t1 = sampler.now() if sampler is not None else None
    return out, row_clocks(sampler, t0, t1)


# ---------------------------------------------------------------------------------
# opt-in clock lock
# ---------------------------------------------------------------------------------
@dataclass
class ClockLock:
    requested_sm_mhz: Optional[tuple]
    requested_mem_mhz: Optional[tuple]
    status: str = "not requested"   # locked | not permitted | not supported | not opted in | error: ...
    locked: bool = False
    reset_calls: int = 0
    events: list = field(default_factory=list)
    uuid: Optional[str] = None      # the NVML device locked (or tried)

    def as_dict(self) -> dict:
        return {"requested_sm_mhz": self.requested_sm_mhz,
                "requested_mem_mhz": self.requested_mem_mhz, "status": self.status,
                "locked": self.locked, "reset_calls": self.reset_calls, "events": list(self.events),
                "uuid": self.uuid}


def _range(v, what: str) -> Optional[tuple]:
    if v is None:
        return None
    lo, hi = (v, v) if isinstance(v, (int, float)) else tuple(v)
    lo, hi = int(lo), int(hi)
    if lo <= 0 or hi < lo:
        raise ValueError(f"{what} must be a positive MHz value or (min, max) with min <= max, got {v!r}")
    return lo, hi


def _error_kind(nvml, exc) -> str:
    """'not permitted' / 'not supported' / 'error: ...' from an NVML exception."""
    value = getattr(exc, "value", None)
    if value == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4) or type(exc).__name__ == "NVMLError_NoPermission":
        return "not permitted"
    if value == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3) or type(exc).__name__ == "NVMLError_NotSupported":
        return "not supported"
    return f"error: {type(exc).__name__}: {exc}"


def cuda_uuid(device_index: int = 0) -> Optional[str]:
    """The UUID of the GPU that CUDA (torch) calls ``cuda:device_index``, or None when torch
    or CUDA is not there to say."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        u = str(torch.cuda.get_device_properties(device_index).uuid)
    except Exception:  # noqa: BLE001 - no torch, no CUDA, no such device: unknown
        return None
    return u if u.startswith(("GPU-", "MIG-")) else "GPU-" + u


def _nvml_str(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _resolve_device(nv, device_index: int, uuid: Optional[str]):
    """(NVML handle, its UUID) of the GPU CUDA calls ``cuda:device_index``; LookupError when
    that cannot be told for sure (then nothing is locked: a lock on the wrong GPU changes
    another user's card and labels this run's numbers with a clock it never ran at)."""
    if uuid is None:
        uuid = cuda_uuid(device_index)
    if uuid is None:
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = [e.strip() for e in vis.split(",")] if vis is not None else None
        if entries is not None:
            if device_index >= len(entries) or not entries[device_index]:
                raise LookupError(f"CUDA_VISIBLE_DEVICES={vis!r} shows no cuda:{device_index}")
            entry = entries[device_index]
        else:
            entry = str(device_index)
        if entry.startswith(("GPU-", "MIG-")):
            uuid = entry
        elif entry.isdigit():
            # A CUDA index is NVML's only in PCI bus order (CUDA's default is fastest
            # first) or when there is just one GPU to choose from.
            if os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and int(nv.nvmlDeviceGetCount()) != 1:
                raise LookupError(f"cannot tell which NVML device is cuda:{device_index} "
                                  f"(CUDA device {entry}) without torch or "
                                  "CUDA_DEVICE_ORDER=PCI_BUS_ID")
            handle = nv.nvmlDeviceGetHandleByIndex(int(entry))
            return handle, _nvml_str(nv.nvmlDeviceGetUUID(handle))
        else:
            raise LookupError(f"CUDA_VISIBLE_DEVICES entry {entry!r} is neither an index nor a UUID")
    handle = nv.nvmlDeviceGetHandleByUUID(uuid)
    return handle, uuid


# -- the record the runner reads back ------------------------------------------------
def _update_state(path: str, fn) -> dict:
    """Read-modify-write the state file under an flock (several processes may share it);
    written by rename, so a reader never sees half a file."""
    p = Path(path)
    with open(p.with_name(p.name + ".lock"), "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            state = json.loads(p.read_text()) if p.is_file() else {}
        except ValueError:
            state = {}
        fn(state)
        if state:
            tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(state, indent=1) + "\n")
            os.replace(tmp, p)
        else:
            p.unlink(missing_ok=True)
        return state


def recorded_locks(path) -> list:
    """The locks recorded in a state file and not yet reset (each: holder pid, its start
    time, the device's UUID and NVML index, which clocks)."""
    p = Path(path)
    if not p.is_file():
        return []
    try:
        return list(json.loads(p.read_text()).values())
    except ValueError:
        return []


def release_recorded(path, nvml=None, *, kill: bool = True) -> list:
    """Release every lock recorded in the state file ``path``: kill its holder first (its
    process group, only if it is still the recorded process), so nothing can lock again
    after the reset, then reset the clocks by the recorded UUID. Returns one line per lock
    saying what was done; a lock that could not be reset stays recorded and its line says
    how to reset it by hand."""
    from ..toolchain import procs

    recs = recorded_locks(path)
    if not recs:
        return []
    lines = []
    if kill:
        for r in recs:
            if r.get("pid") != os.getpid():
                procs.kill_group(int(r["pid"]), r.get("start"))
    try:
        nv = _load_nvml(nvml)
        nv.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return [f"could not reset the clock lock on {r.get('uuid') or r.get('index')}: NVML "
                f"unavailable ({type(e).__name__}: {e}); reset it by hand: nvidia-smi -rgc -rmc "
                f"-i {r.get('uuid') or r.get('index')}" for r in recs]
    try:
        for r in recs:
            dev = r.get("uuid") or r.get("index")
            try:
                h = (nv.nvmlDeviceGetHandleByUUID(r["uuid"]) if r.get("uuid")
                     else nv.nvmlDeviceGetHandleByIndex(int(r["index"])))
                if r.get("sm"):
                    nv.nvmlDeviceResetGpuLockedClocks(h)
                if r.get("mem"):
                    nv.nvmlDeviceResetMemoryLockedClocks(h)
            except Exception as e:  # noqa: BLE001
                lines.append(f"could not reset the clock lock on {dev}: {type(e).__name__}: {e}; "
                             f"reset it by hand: nvidia-smi -rgc -rmc -i {dev}")
                continue
            _update_state(path, lambda st, k=r["key"]: st.pop(k, None))
            lines.append(f"reset the clock lock that pid {r['pid']} left on {dev}")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return lines


@contextmanager
def locked_clocks(sm_mhz=None, mem_mhz=None, *, opt_in: bool = False, device_index: int = 0,
                  uuid: Optional[str] = None, nvml=None):
    """Lock SM (and optionally memory) clocks for the body; always reset after.

    ``sm_mhz`` / ``mem_mhz``: MHz or (min, max). ``opt_in`` must be True (or the
    environment must set FP8LAB_ALLOW_CLOCK_LOCK=1), otherwise nothing is touched
    and the status reads 'not opted in'. The GPU is ``cuda:device_index`` as CUDA numbers
    it (found in NVML by UUID), or the one ``uuid`` names. Yields a ``ClockLock`` whose
    ``status`` says what happened; the body always runs, locked or not.
    """
    sm = _range(sm_mhz, "sm_mhz")
    mem = _range(mem_mhz, "mem_mhz")
    state = ClockLock(requested_sm_mhz=sm, requested_mem_mhz=mem)
    if sm is None and mem is None:
        state.status = "not requested"
        yield state
        return
    if not (opt_in or os.environ.get("FP8LAB_ALLOW_CLOCK_LOCK") == "1"):
        state.status = "not opted in"
        yield state
        return
    if _ACTIVE_LOCK["lock"] is not None:
        raise RuntimeError("locked_clocks is already active in this process; nest nothing")

    try:
        nv = _load_nvml(nvml)
        nv.nvmlInit()
    except Exception as e:
        state.status = f"error: NVML unavailable ({type(e).__name__}: {e})"
        yield state
        return
    try:
        handle, state.uuid = _resolve_device(nv, int(device_index), uuid)
    except Exception as e:  # noqa: BLE001 - LookupError, or NVML does not know the UUID
        state.status = f"error: which GPU to lock: {type(e).__name__}: {e}"
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
        yield state
        return

    done = {"sm": False, "mem": False, "recorded": False}
    state_file = os.environ.get(STATE_ENV) or None
    key = f"{os.getpid()}:{state.uuid}"

    def record(sm: bool, mem: bool):
        """Tell the runner (when it asked) which clocks may be locked, before locking them."""
        if state_file is None:
            return
        from ..toolchain import procs

        def put(st):
            if sm or mem:
                st[key] = {"key": key, "pid": os.getpid(), "start": procs.start_time(os.getpid()),
                           "uuid": state.uuid, "sm": sm, "mem": mem}
            else:
                st.pop(key, None)
        _update_state(state_file, put)
        done["recorded"] = bool(sm or mem)

    def reset(reason: str, clear_record: bool = True):
        # idempotent: finally, atexit and SIGTERM may all get here
        if done["sm"] or done["mem"]:
            state.reset_calls += 1
            state.events.append(f"reset ({reason})")
        for which, unlock in (("sm", "nvmlDeviceResetGpuLockedClocks"), ("mem", "nvmlDeviceResetMemoryLockedClocks")):
            if done[which]:
                try:
                    getattr(nv, unlock)(handle)
                except Exception as e:
                    state.events.append(f"reset {which} failed: {e}")
                done[which] = False
        state.locked = False
        # A signal handler leaves the record alone (the main thread may hold its file lock):
        # a second reset by the runner is harmless.
        if clear_record and done["recorded"]:
            try:
                record(False, False)
            except Exception as e:  # noqa: BLE001
                state.events.append(f"could not clear the lock record: {e}")

    def at_exit():
        reset("atexit")

    prev_handler = None
    installed_signal = False

    def on_sigterm(signum, frame):
        reset("SIGTERM", clear_record=False)
        # hand over to whoever handled SIGTERM before us
        if callable(prev_handler):
            return prev_handler(signum, frame)
        if prev_handler == signal.SIG_IGN:
            return None
        raise SystemExit(128 + signum)

    try:
        try:
            # Recorded first: a kill right after the lock call must still leave a record.
            record(sm is not None, mem is not None)
        except Exception as e:  # noqa: BLE001 - without the record no one resets after a kill
            state.status = f"error: cannot record the lock for the runner ({type(e).__name__}: {e})"
            state.events.append("lock not taken: " + state.status)
        else:
            try:
                if sm is not None:
                    nv.nvmlDeviceSetGpuLockedClocks(handle, sm[0], sm[1])
                    done["sm"] = True
                if mem is not None:
                    nv.nvmlDeviceSetMemoryLockedClocks(handle, mem[0], mem[1])
                    done["mem"] = True
            except Exception as e:
                state.status = _error_kind(nv, e)
                state.events.append(f"lock refused: {state.status}")
                # a half-applied lock (SM locked, memory refused) is undone right away
                reset("partial lock")
            else:
                state.status = "locked"
                state.locked = True
                state.events.append("locked")
        if state.locked:
            atexit.register(at_exit)
            if threading.current_thread() is threading.main_thread():
                prev_handler = signal.getsignal(signal.SIGTERM)
                signal.signal(signal.SIGTERM, on_sigterm)
                installed_signal = True
            _ACTIVE_LOCK["lock"] = state
        yield state
    finally:
        reset("exit")
        if installed_signal:
            signal.signal(signal.SIGTERM, prev_handler if prev_handler is not None else signal.SIG_DFL)
        atexit.unregister(at_exit)
        if _ACTIVE_LOCK["lock"] is state:
            _ACTIVE_LOCK["lock"] = None
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
