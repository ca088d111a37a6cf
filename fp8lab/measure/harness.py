"""Check, then time: the steps every sweep takes for every arm, fp8lab's and the peers'.

1. **Poison**: the output the checked call writes starts as NaN (:func:`poisoned`), or, for an
   arm that allocates its own output, a NaN block of that size is freed just before the call so
   the caching allocator most likely hands it back (:func:`poison_allocator`). An output the
   kernel never wrote then shows.
2. **Check** against float64 (:func:`fp8lab.emulate.compare.relerr`): :func:`check` returns the
   relative error and the NaNs left; :func:`require` turns a failure into one
   :class:`CheckFailed` line naming the arm and the shape (a sweep stops there: an arm that is
   wrong is never timed).
3. **Rotate** copies of the operands over more than the L2 (:func:`copies`,
   ``bench.n_rotation_sets``) so every timed call streams from DRAM.
4. **Time** with ``bench.bench`` inside ``clocks.timed`` (:func:`timed`; :func:`time_rotated`
   falls back from CUDA-graph replay to events for a call a graph cannot capture and says so).
5. **Row**: :func:`timing_columns` gives the time quantiles, how they were taken and the clock
   columns every table carries under the same names.

What stays with each experiment: how its operands are generated, its reference, its count (the
arm registry's) and its own table columns. torch is imported only inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..emulate.compare import relerr
from . import bench, clocks

__all__ = ["CHECK_RELERR", "Check", "CheckFailed", "relerr", "poisoned", "poison_allocator", "check", "require",
           "copies", "rotation_copies", "made_rotation", "timed", "time_rotated", "timing_columns", "error_text"]

#: bf16 / fp16 output rounding alone is ~2e-3 (Frobenius); a wrong group scale or a transposed
#: layout is >= 1e-1. fp8lab's weight-only, prefill and ceiling arms and every peer are held to it.
CHECK_RELERR = 1e-2


class CheckFailed(AssertionError):
    """An arm's output is not its float64 reference (the message is one line). An AssertionError,
    not a RuntimeError: sweeps that record a library's refusal (a RuntimeError) as a not-run row
    must still stop on a wrong result."""


@dataclass(frozen=True)
class Check:
    """One checked call: the relative error on the compared rows and the NaNs left anywhere."""
    relerr: float
    nan_left: int
    bound: float = CHECK_RELERR

    @property
    def ok(self) -> bool:
        return self.nan_left == 0 and self.relerr < self.bound

    def why(self) -> str:
        """What failed, in words ('' when it passed)."""
        if self.ok:
            return ""
        if self.nan_left:
            return f"{self.nan_left} NaNs left in the output (relative error {self.relerr:.3g})"
        return f"relative error {self.relerr:.3g} vs float64 (bound {self.bound:g})"


def error_text(e: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def poisoned(shape: Sequence[int], dtype=None, device="cuda"):
    """A NaN-filled tensor (bf16 unless ``dtype``): the output a checked call writes into."""
    import torch

    return torch.full(tuple(shape), float("nan"), dtype=dtype or torch.bfloat16, device=device)


def poison_allocator(shape: Sequence[int], dtype=None, device="cuda") -> None:
    """For an arm that allocates its own output: a NaN block of the output's size, freed at once,
    so the caching allocator most likely hands it to the checked call."""
    t = poisoned(shape, dtype, device)
    del t


def check(got, ref, *, rows: Optional[int] = None, bound: float = CHECK_RELERR) -> Check:
    """``got`` against the float64 ``ref``: NaNs anywhere in ``got``; the relative error on its
    first ``rows`` rows (default: as many as ``ref`` has)."""
    if type(got).__module__.startswith("torch"):
        import torch

        nan_left = int(torch.isnan(got).sum().item())
    else:
        nan_left = int(np.isnan(np.asarray(got, np.float64)).sum())
    r = ref.shape[0] if rows is None else rows
    return Check(relerr(got[:r], ref[:r]), nan_left, bound)


def require(what: str, got, ref, *, rows: Optional[int] = None, bound: float = CHECK_RELERR) -> float:
    """:func:`check`, and its relative error; a failure raises :class:`CheckFailed` ('what: why')."""
    c = check(got, ref, rows=rows, bound=bound)
    if not c.ok:
        raise CheckFailed(f"{what}: {c.why()}")
    return c.relerr


def copies(first, n: int, clone: Callable = lambda t: t.clone()) -> list:
    """``first`` and ``n - 1`` clones of it (at least ``first``): the sets a timing rotates over."""
    return [first] + [clone(first) for _ in range(max(1, int(n)) - 1)]


def rotation_copies(first, stream_bytes: int, l2: int, clone: Callable = lambda t: t.clone()) -> list:
    """:func:`copies` of ``first`` (``stream_bytes`` read per call), enough to exceed 2x the L2."""
    return copies(first, bench.n_rotation_sets(stream_bytes, l2), clone)


def holding(fn: Callable, n: int) -> Callable:
    """``fn`` that keeps its last ``n`` results alive (a ring). For a call that allocates its output
    (a peer's ``q, s = quantise(x)``) timed over ``n`` rotated input sets: without the ring each
    result is freed at once and the caching allocator (also inside a CUDA-graph capture) hands the
    same block to the next call, so every call writes the same, L2-hot output lines, while an arm
    given ``n`` preallocated outputs writes ``n`` different ones. Held for one rotation cycle, the
    outputs rotate as the inputs do."""
    from collections import deque

    ring = deque(maxlen=max(1, int(n)))

    def call(*args):
        out = fn(*args)
        ring.append(out)
        return out

    call.holds = ring.maxlen
    return call


def made_rotation(make: Callable[[int], Callable], n_sets: int, first: Optional[Callable] = None):
    """One callable cycling over ``make(0)() .. make(n_sets - 1)()`` (``make(0)`` itself when
    ``n_sets`` is 1): for arms whose per-set calls are built by a factory. ``first``: ``make(0)``
    where the caller already built it."""
    fns = [first if first is not None else make(0)] + [make(i) for i in range(1, max(1, n_sets))]
    if len(fns) == 1:
        return fns[0]
    return bench.rotating(lambda f: f(), [(f,) for f in fns])


def timed(fn: Callable, sets: Optional[Sequence[tuple]] = None, *, sampler=None, **bench_kw):
    """(Timing, clock columns): ``fn()`` (or ``fn(*set)`` rotated over ``sets``) timed by
    ``bench.bench(**bench_kw)`` inside ``clocks.timed`` (the NVML window of this measurement)."""
    call = bench.rotating(fn, sets) if sets is not None else fn
    return clocks.timed(sampler, lambda: bench.bench(call, **bench_kw))


def time_rotated(fn, sets, *, method: str, rep_ms: float, warmup_ms: float = 10, sampler=None):
    """(Timing, clock columns, note): ``fn(*set)`` rotated over ``sets``, one call per set first
    (per-set state built outside any capture), then :func:`timed`. A graph capture the call does
    not survive falls back to events (L2 flushed) and the note says so."""
    rot = bench.rotating(fn, sets)
    for _ in range(len(sets)):
        rot()
    try:
        tm, clk = timed(rot, sampler=sampler, method=method, warmup_ms=warmup_ms, rep_ms=rep_ms)
        return tm, clk, ""
    except Exception as e:  # noqa: BLE001 - graph capture refused by the call's launch path
        if method != "graph":
            raise
        import torch

        torch.cuda.synchronize()
        note = f"graph capture failed ({error_text(e)[:120]}): timed with events"
        tm, clk = timed(rot, sampler=sampler, method="events", warmup_ms=warmup_ms, rep_ms=rep_ms)
        return tm, clk, note


def timing_columns(tm, clk: Optional[dict] = None) -> dict:
    """The columns every timed row carries: time_p20_s / _p50_s / _p80_s, timing_method,
    rotation_sets, n_samples, and the clock columns of ``clocks.timed``."""
    return dict(time_p20_s=tm.p20_s, time_p50_s=tm.p50_s, time_p80_s=tm.p80_s, timing_method=tm.method,
                rotation_sets=tm.rotation_sets, n_samples=tm.n, **(clk or {}))
