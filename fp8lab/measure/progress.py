"""Progress of a long sweep, where the person waiting for it looks.

    from fp8lab.measure.progress import progress
    for shape in progress(shapes, desc="blockwise sweep", unit="shapes"):
        for M in progress(Ms, desc="M"):
            ...

Where the lines go depends on who runs the notebook (``mode()``):

- ``runner``: the notebook runs under ``python -m fp8lab run``, which names its log for this
  notebook in $FP8LAB_PROGRESS_LOG. Plain lines are appended to that log as the sweep runs
  (at the start, at each 10 %, and between those at the first step 10 s or more after the
  last line), so ``tail -f runs/<run>/NN.log`` shows how far it got. The notebook's own output gets one line, at the end: an executed
  copy carries no bar noise.
- ``jupyter``: a kernel that is not the runner's (JupyterLab): a tqdm widget bar in the cell's
  output (ipywidgets; without it tqdm's text bar on stderr).
- ``plain``: a script or a test: the same throttled lines as ``runner``, on stderr.
- ``off``: $FP8LAB_PROGRESS=off (or 0/no/false): nothing.

Nested loops report as one: the outermost loop running in this thread owns the bar or the
lines, and every loop inside it moves that one bar by its share of the outer step (shape 2
of 5 with M 3 of 8 done is (2 + 3/8) / 5 = 48 %), so a nested sweep is one bar, not one per
outer step, and a one-item outer loop still shows movement.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time

LOG_ENV = "FP8LAB_PROGRESS_LOG"     # set by the runner: the notebook's log file
SWITCH_ENV = "FP8LAB_PROGRESS"      # off / 0 / no / false: no progress at all
INTERVAL_S = 10.0                   # a line at least this often while a sweep runs ...
STEP = 0.10                         # ... and one each time it passes another 10 %
WIDGET_REFRESH_S = 0.2              # the widget redraws no more often (each is a comm message)

_local = threading.local()          # the loops running in this thread, outermost first


def _now() -> float:
    return time.monotonic()           # one clock for the throttle and the elapsed time (tests fake it)


def mode() -> str:
    """off | runner | jupyter | plain (see the module docstring)."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "no", "false"):
        return "off"
    if os.environ.get(LOG_ENV):
        return "runner"
    if _in_kernel():
        return "jupyter"
    return "plain"


def _in_kernel() -> bool:
    # tqdm.autonotebook's test: an IPython shell run by a Jupyter kernel (not a terminal IPython)
    ip = sys.modules.get("IPython")
    try:
        shell = ip.get_ipython() if ip is not None else None
    except Exception:  # noqa: BLE001 - any doubt: not a kernel
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _fmt_s(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


class _Loop:
    def __init__(self, total, desc: str, unit: str):
        self.total, self.desc, self.unit = total, desc, unit
        self.done = 0


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def fraction(loops) -> float | None:
    """The share of the outermost loop done, counting the loops inside it: each level adds
    its done / total of one step of the level above. None when the outermost loop's total
    is unknown; a level of unknown total ends the refinement there."""
    f, scale = 0.0, 1.0
    for i, lp in enumerate(loops):
        if not lp.total:
            return None if i == 0 else min(f, 1.0)
        f += scale * min(lp.done, lp.total) / lp.total
        scale /= lp.total
    return min(f, 1.0)


def describe(loops, elapsed: float, f: float | None = None) -> str:
    """One progress line: ``blockwise sweep: 48%, 2/5 shapes, M 3/8, 12 s, ~13 s left``
    (``f``: the share done, when the caller holds it; else ``fraction(loops)``)."""
    root = loops[0]
    f = fraction(loops) if f is None else f
    parts = [] if f is None else [f"{f:.0%}"]
    parts += counts(loops)
    parts.append(_fmt_s(elapsed))
    if f is not None and 0 < f < 1 and elapsed >= 1:       # no guess from the first instant
        parts.append(f"~{_fmt_s(elapsed * (1 - f) / f)} left")
    return f"{root.desc or 'progress'}: " + ", ".join(parts)


def counts(loops) -> list[str]:
    """``2/5 shapes``, ``M 3/8``: the outermost loop by its unit, the inner ones by name."""
    out = []
    for i, lp in enumerate(loops):
        count = f"{lp.done}/{lp.total}" if lp.total else f"{lp.done}"
        words = (count, lp.unit) if i == 0 else (lp.desc, count, lp.unit)
        out.append(" ".join(x for x in words if x))
    return out


class _Monotone:
    # Two inner loops in one outer step (decode: the formats' Ms, then cuBLAS's Ms) would
    # move the bar back when the second starts: the share shown never goes down.
    best = 0.0

    def share(self, loops) -> float | None:
        f = fraction(loops)
        if f is not None:
            self.best = f = max(f, self.best)
        return f


class _Lines(_Monotone):
    """Throttled plain lines: ``write`` for each, ``final`` for the end line (runner: the
    notebook's output; plain: nothing more)."""

    def __init__(self, write, final):
        self.write, self.final = write, final
        self.last_t = None
        self.next_step = 0.0

    def update(self, loops, elapsed: float) -> None:
        now, f = _now(), self.share(loops)
        due = (self.last_t is None or now - self.last_t >= INTERVAL_S
               or (f is not None and f >= self.next_step - 1e-9))
        if not due:
            return
        self.last_t = now
        if f is not None:
            self.next_step = (math.floor(f / STEP + 1e-9) + 1) * STEP
        self.write(describe(loops, elapsed, f))

    def close(self, loops, elapsed: float, ok: bool) -> None:
        root = loops[0]
        if ok:
            what = f"{root.done} {root.unit or 'steps'}"
            line = f"{root.desc or 'progress'}: {what} in {_fmt_s(elapsed)}"
            self.write(line)
            self.final(line)
        else:
            self.write(f"{describe(loops, elapsed, self.share(loops))} (stopped)")


class _Widget(_Monotone):
    """A tqdm bar in the kernel's output: a widget with ipywidgets, else tqdm's text bar
    on stderr. Its position is the outermost loop's count plus the inner loops' share."""

    def __init__(self, loops):
        root = loops[0]
        self.last = None
        kw = dict(total=root.total or None, desc=root.desc or None, unit=root.unit or "it")
        if root.total:
            # n is fractional (the inner loops' share): the percentage and the loops'
            # counts instead of tqdm's n/total
            kw["bar_format"] = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]"
        self.bar = _make_bar(**kw)

    def update(self, loops, elapsed: float) -> None:
        now = _now()
        if self.last is not None and now - self.last < WIDGET_REFRESH_S:
            return
        self.last = now
        self._set(loops)
        self.bar.refresh()

    def _set(self, loops) -> None:
        f = self.share(loops)
        self.bar.n = f * loops[0].total if f is not None else loops[0].done
        self.bar.set_postfix_str(", ".join(counts(loops)), refresh=False)

    def close(self, loops, elapsed: float, ok: bool) -> None:
        self._set(loops)
        if ok and loops[0].total:
            self.bar.n = loops[0].total      # not 4.9999: tqdm would draw a finished bar red
        self.bar.close()


def _make_bar(**kw):
    """tqdm's notebook widget where ipywidgets is importable, else its text bar on stderr
    (tqdm.notebook without ipywidgets only warns and prints a stub)."""
    try:
        import ipywidgets  # noqa: F401
        from tqdm.notebook import tqdm as bar
        return bar(**kw)
    except ImportError:
        from tqdm.std import tqdm as bar
        return bar(file=sys.stderr, **kw)


def _append_to(path: str):
    def write(line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        try:
            # one open/append per line (a line every few seconds at most): O_APPEND keeps it
            # whole beside the executor's own writes to the same log
            with open(path, "a") as f:
                f.write(f"[progress {stamp}] {line}\n")
        except OSError:
            pass          # a progress line must never stop a sweep
    return write


def _stderr(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _stdout(line: str) -> None:
    print(line, flush=True)


def _sink(loops, how: str):
    if how == "runner":
        return _Lines(_append_to(os.environ[LOG_ENV]), _stdout)
    if how == "jupyter":
        try:
            return _Widget(loops)
        except Exception as exc:  # noqa: BLE001 - a bar that cannot be drawn must not stop a sweep
            _stderr(f"fp8lab.measure.progress: no progress bar ({type(exc).__name__}: {exc}); plain lines instead")
    return _Lines(_stderr, lambda line: None)


def progress(iterable, total: int | None = None, desc: str = "", unit: str = "", *,
             enabled: bool = True):
    """Iterate over ``iterable`` and report how far it got (see the module docstring).

    ``total``: the number of items (default ``len(iterable)`` where it has one; unknown
    otherwise: counts and elapsed time, no percentage). ``desc``: what the outermost loop is
    ("blockwise sweep"), or, for a loop inside another, what it walks ("M"). ``unit``: what
    one item is ("shapes", "points"). ``enabled=False``: the items alone."""
    how = mode() if enabled else "off"
    if how == "off":
        return iter(iterable)
    if total is None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    return _walk(iterable, _Loop(total, desc, unit), how)


def _walk(iterable, loop: _Loop, how: str):
    stack = _stack()
    root = stack[0] if stack else None
    stack.append(loop)
    if root is None:
        loop.t0 = _now()
        loop.sink = _sink(stack, how)
    sink, t0 = (root or loop).sink, (root or loop).t0
    ok = False
    try:
        for item in iterable:
            sink.update(list(stack), _now() - t0)
            yield item
            loop.done += 1
        ok = True
        if root is not None:
            sink.update(list(stack), _now() - t0)
    finally:
        if root is None:
            sink.close(list(stack), _now() - t0, ok)
        if loop in stack:
            # this loop and any left above it (an inner loop abandoned without being closed)
            del stack[stack.index(loop):]
