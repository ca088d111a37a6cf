"""Timing on the GPU: CUDA events, CUDA-graph replay, L2 flush or rotated inputs,
p20 / p50 / p80, and a noise check between two arms.

How a kernel is timed (``bench``):

* ``method="events"``: CUDA events around every call, as Triton's ``do_bench`` times
  (a 256 MB buffer zeroed before each call so L2 starts cold, warm-up first), plus a
  spin kernel queued after the flush (``HEAD_START_CYCLES``) so that the GPU's work per
  sample outlasts the host's: the host then stays ahead and the event pair holds the
  call's GPU time only. We take p20 / p50 / p80 of the samples ourselves, with the
  linear interpolation ``do_bench(quantiles=...)`` uses.
* ``method="graph"``: for kernels under ~10 us, where launch gaps dominate an
  event pair, ``inner`` calls are captured in one CUDA graph and each replay is one
  sample of (replay time / inner). There is no flush between captured calls, so a
  memory-bound kernel must rotate its inputs (below) or it measures L2.
* ``method="auto"`` (:func:`choose_method`) times one call two ways, back to back with events
  (host launch path included) and replayed in a graph (GPU alone), and picks graph when the
  GPU time is under ``graph_threshold_s`` or the call is launch-bound (host time over
  ``HOST_BOUND`` x GPU time: events around such a call time the host, and move with its load);
  events otherwise.

Rotation: ``rotating(fn, arg_sets)`` cycles through argument sets so that
consecutive calls touch different memory; ``n_rotation_sets`` sizes the set count
so the sets together exceed L2 (``factor`` x L2 bytes; L2 is read off the device,
falling back to the spec sheet).

Noise: a difference between two arms means something only when it is larger than
the run-to-run spread of each arm. ``noise_check`` takes the per-run medians of
two arms (time each arm several times, interleaved: ``compare``) and flags a
difference smaller than the larger of the two spreads (max - min of run medians).

Only ``quantiles``, ``Timing``, ``noise_check`` and ``n_rotation_sets`` run without
a GPU; everything that times imports torch lazily.
"""

from __future__ import annotations

import gc
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

__all__ = ["QUANTILES", "quantiles", "Timing", "NoiseCheck", "noise_check", "bench",
           "compare", "rotating", "n_rotation_sets", "device_l2_bytes", "rate_quantiles", "estimate_call_s",
           "graph_replay_samples", "gpu_call_s", "Pace", "pace_of", "choose_method", "HOST_BOUND"]

QUANTILES = (0.2, 0.5, 0.8)


# ---------------------------------------------------------------------------------
# statistics (CPU)
# ---------------------------------------------------------------------------------
def quantiles(samples: Sequence[float], qs: Sequence[float] = QUANTILES) -> np.ndarray:
    """Quantiles with linear interpolation between order statistics (numpy's
    default, torch.quantile's and Triton's ``_quantile``)."""
    a = np.asarray(samples, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D sequence, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("samples must be finite (a NaN/inf timing means a failed run)")
    q = np.asarray(qs, dtype=float)
    if np.any((q < 0) | (q > 1)):
        raise ValueError(f"quantiles must lie in [0, 1], got {list(qs)}")
    a = np.sort(a)
    pos = q * (a.size - 1)
    lo = np.floor(pos).astype(int)
    hi = np.ceil(pos).astype(int)
    t = pos - lo
    return (1 - t) * a[lo] + t * a[hi]


@dataclass
class Timing:
    """Per-call times of one measurement, in seconds."""
    samples_s: np.ndarray
    method: str = "events"          # "events" (event pair per call, L2 flushed) | "graph" (replay)
    flushed_l2: bool = True
    rotation_sets: int = 1          # 1 = no rotation
    inner: int = 1                  # calls per sample (graph mode)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.samples_s = np.asarray(self.samples_s, dtype=float)
        if self.samples_s.ndim != 1 or self.samples_s.size == 0:
            raise ValueError("Timing needs at least one sample")
        if np.any(~(self.samples_s > 0)):
            raise ValueError("every timing sample must be > 0 s")

    @property
    def n(self) -> int:
        return int(self.samples_s.size)

    @property
    def p20_s(self) -> float:
        return float(quantiles(self.samples_s, (0.2,))[0])

    @property
    def p50_s(self) -> float:
        return float(quantiles(self.samples_s, (0.5,))[0])

    @property
    def p80_s(self) -> float:
        return float(quantiles(self.samples_s, (0.8,))[0])

    @property
    def spread_s(self) -> float:
        """p80 - p20: the within-run spread."""
        return self.p80_s - self.p20_s

    def rate(self, work: float) -> dict:
        """``work`` (FLOP or bytes) per second at p20 / p50 / p80 of the *rate*:
        the p20 rate comes from the p80 time (the slower runs)."""
        return rate_quantiles(work, self)

    def row(self, prefix: str = "time") -> dict:
        """Columns for a tidy table: <prefix>_p20_s, _p50_s, _p80_s, n, method ..."""
        q = quantiles(self.samples_s)
        return {f"{prefix}_p20_s": float(q[0]), f"{prefix}_p50_s": float(q[1]),
                f"{prefix}_p80_s": float(q[2]), "n_samples": self.n, "timing_method": self.method,
                "l2_flushed": self.flushed_l2, "rotation_sets": self.rotation_sets,
                "graph_inner": self.inner}


def rate_quantiles(work: float, timing: Timing) -> dict:
    if not (work > 0):
        raise ValueError(f"work must be > 0, got {work!r}")
    return {"p20": work / timing.p80_s, "p50": work / timing.p50_s, "p80": work / timing.p20_s}


@dataclass
class NoiseCheck:
    median_a_s: float
    median_b_s: float
    diff_s: float           # median_b - median_a
    rel_diff: float         # diff / median_a
    spread_a_s: float       # max - min of arm A's run medians
    spread_b_s: float
    distinguishable: bool   # |diff| > max(spread_a, spread_b, EVENT_RESOLUTION_S)
    n_runs: tuple

    @property
    def message(self) -> str:
        verdict = ("different" if self.distinguishable else
                   "not distinguishable: the difference is within run-to-run noise")
        return (f"B - A = {self.diff_s * 1e6:+.2f} us ({self.rel_diff:+.2%}); run-to-run spread "
                f"A {self.spread_a_s * 1e6:.2f} us, B {self.spread_b_s * 1e6:.2f} us: {verdict}")

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["n_runs"] = list(self.n_runs)
        d["message"] = self.message
        return d


#: the resolution CUDA documents for cudaEventElapsedTime ("around 0.5 microseconds"): two arms
#: whose medians differ by less are not called different however steady their runs are (on
#: 2026-12-02 an H200 timed one 131 us arm against itself 0.10 us apart, runs within 0.08 us)
EVENT_RESOLUTION_S = 0.5e-6


def _run_medians(runs) -> list:
    out = []
    for r in runs:
        out.append(r.p50_s if isinstance(r, Timing) else float(r))
    return out


def noise_check(runs_a, runs_b) -> NoiseCheck:
    """Is arm B's time different from arm A's beyond run-to-run noise?

    ``runs_a`` / ``runs_b``: the medians of separate runs of each arm (floats in
    seconds, or ``Timing`` objects whose p50 is used), at least 2 per arm. The spread
    of an arm is max - min of its run medians; the difference is between the medians
    of the run medians. A difference no larger than the larger spread, or than the event timer's
    resolution (``EVENT_RESOLUTION_S``), is noise.
    """
    a, b = _run_medians(runs_a), _run_medians(runs_b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("noise_check needs at least 2 runs per arm (a spread needs two runs)")
    for v in (*a, *b):
        if not (v > 0) or math.isinf(v):
            raise ValueError(f"run medians must be positive finite seconds, got {v!r}")
    ma, mb = statistics.median(a), statistics.median(b)
    sa, sb = max(a) - min(a), max(b) - min(b)
    diff = mb - ma
    return NoiseCheck(median_a_s=ma, median_b_s=mb, diff_s=diff, rel_diff=diff / ma,
                      spread_a_s=sa, spread_b_s=sb,
                      distinguishable=abs(diff) > max(sa, sb, EVENT_RESOLUTION_S), n_runs=(len(a), len(b)))


def n_rotation_sets(bytes_per_set: int, l2_bytes: int, factor: float = 2.0,
                    max_sets: int = 1024) -> int:
    """How many input sets to cycle through so that the sets together exceed
    ``factor`` x L2: then every call finds its inputs evicted."""
    if bytes_per_set <= 0:
        raise ValueError(f"bytes_per_set must be > 0, got {bytes_per_set}")
    if l2_bytes <= 0:
        raise ValueError(f"l2_bytes must be > 0, got {l2_bytes}")
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (rotate over more than L2), got {factor}")
    n = math.floor(factor * l2_bytes / bytes_per_set) + 1
    if n > max_sets:
        raise ValueError(f"{n} sets of {bytes_per_set} B needed to exceed {factor} x L2; "
                         f"more than max_sets={max_sets}: use a larger problem or CUDA graphs")
    return max(n, 1)


def rotating(fn: Callable, arg_sets: Sequence[tuple]) -> Callable[[], object]:
    """A no-argument callable that calls ``fn(*arg_sets[i % n])`` with i counting up,
    so consecutive calls read different buffers (also inside a CUDA-graph capture:
    each captured call is bound to the next set)."""
    if len(arg_sets) == 0:
        raise ValueError("rotating needs at least one argument set")
    sets = [tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in arg_sets]
    state = {"i": 0}

    def call():
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*args)

    call.n_sets = len(sets)
    return call


# ---------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------
def device_l2_bytes(device=None) -> int:
    """L2 size of the current CUDA device (torch's property), else the spec sheet."""
    import torch

    dev = torch.cuda.current_device() if device is None else device
    props = torch.cuda.get_device_properties(dev)
    size = int(getattr(props, "L2_cache_size", 0) or 0)
    if size > 0:
        return size
    from ..facts import devices

    spec = devices.spec_for(props.name)
    if spec is None:
        raise RuntimeError(f"cannot tell the L2 size of {props.name!r}: torch does not report "
                           "it and it is not on the spec sheet; pass l2_bytes")
    return spec.l2_bytes


def estimate_call_s(fn, n: int = 5) -> float:
    """Seconds per call of ``fn`` from ``n`` calls after one warm call (CUDA events): a first
    estimate, for sizing a timing loop."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(end) / n * 1e-3, 1e-9)


#: host-inclusive time per call (back to back, :func:`estimate_call_s`) over GPU time per call
#: (graph replay, :func:`gpu_call_s`) above which a call is launch-bound: CUDA events around one
#: call then time the host's launch path (a Triton launch is ~30-90 us of Python, longer on a busy
#: host), not the kernel.
HOST_BOUND = 1.25


def gpu_call_s(fn, inner: int = 20, n: int = 3) -> Optional[float]:
    """GPU seconds per call with no host gaps: ``inner`` calls replayed in one CUDA graph
    (median of ``n`` replays); None when ``fn`` cannot be captured in a graph."""
    try:
        return statistics.median(graph_replay_samples(fn, inner, n)) * 1e-3
    except Exception:  # noqa: BLE001 - a call a graph cannot capture: the caller falls back
        import torch

        torch.cuda.synchronize()
        return None


@dataclass(frozen=True)
class Pace:
    """How long one call takes, two ways, and the timing method that follows from them."""
    host_s: float                   # back to back with events: launch path included
    gpu_s: Optional[float]          # graph replay: the GPU's time alone (None: not capturable)
    method: str                     # "graph" | "events"
    why: str                        # "short" | "launch-bound" | "gpu-bound" | "not capturable"


def pace_of(host_s: float, gpu_s: Optional[float], graph_below_s: float) -> Pace:
    """The method rule (no GPU needed): graph replay for calls under ``graph_below_s`` of GPU time
    and for launch-bound calls (host_s > HOST_BOUND x gpu_s), whose event timing would measure the
    host; events (L2 flushed before each call) for GPU-bound calls; a call no graph captures is
    judged by ``host_s`` and timed with events unless short."""
    if gpu_s is None:
        return Pace(host_s, None, "graph" if host_s < graph_below_s else "events", "not capturable")
    if gpu_s < graph_below_s:
        return Pace(host_s, gpu_s, "graph", "short")
    if host_s > HOST_BOUND * gpu_s:
        return Pace(host_s, gpu_s, "graph", "launch-bound")
    return Pace(host_s, gpu_s, "events", "gpu-bound")


def choose_method(fn, graph_below_s: float) -> Pace:
    """:func:`pace_of` for ``fn``, measured: :func:`estimate_call_s` and :func:`gpu_call_s`."""
    return pace_of(estimate_call_s(fn), gpu_call_s(fn), graph_below_s)


#: GPU cycles of the spin kernel queued before every event-timed call, after the L2 flush (~0.2 ms
#: at 2 GHz). Without it the GPU's work per sample is the flush (~60 us on an H200) plus the call:
#: a host that needs longer than that to enqueue one sample (a Python wrapper's checks, a Triton
#: launch, a busy host) lets the GPU drain, and the wait lands between the events. Notebook 03 on
#: 2026-12-02 (host notebooks running beside it): two mma_blockwise rows at qwen3-8b o_proj M=128
#: read 171 and 180 us with events where the same tiles took 112 and 94 us with the quantiser
#: added, replayed in a graph.
HEAD_START_CYCLES = 400_000
#: calls of at least this many ms get no head start: the GPU's work per sample already outlasts any
#: host path, and idle gaps would only lower the power a capped card runs a long GEMM at
HEAD_START_BELOW_MS = 0.5
#: the most samples one events timing takes (the GPU spends ~0.3 ms per sample beside the call)
EVENTS_MAX_SAMPLES = 1000


def _events_samples(fn, warmup_ms: float, rep_ms: float, head_start_cycles: int = HEAD_START_CYCLES) -> list:
    """Per-call ms: for each sample a 256 MB buffer is zeroed (L2 starts cold), a spin kernel of
    ``head_start_cycles`` is queued (calls estimated under HEAD_START_BELOW_MS only), then an event
    pair around one call. Samples: rep_ms over a first estimate of the call, 10 ..
    EVENTS_MAX_SAMPLES."""
    import torch

    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    est_ms = estimate_call_s(fn) * 1e3
    for _ in range(max(1, int(warmup_ms / est_ms))):
        fn()
    n = int(min(EVENTS_MAX_SAMPLES, max(10, rep_ms / est_ms)))
    if est_ms >= HEAD_START_BELOW_MS:
        head_start_cycles = 0
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    torch.cuda.synchronize()
    for i in range(n):
        cache.zero_()
        if head_start_cycles:
            torch.cuda._sleep(int(head_start_cycles))
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def graph_replay_samples(fn, inner: int, n_samples: int) -> list:
    """Per-call ms from replays of a graph holding ``inner`` calls of fn."""
    import torch

    # warm up on a side stream: cuBLAS handles, workspaces and Triton modules must
    # exist before capture, and capture must not see first-call allocations
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    # a collected Triton kernel object unloads its module, which is illegal mid-capture
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(g):
            for _ in range(inner):
                fn()
    finally:
        if was_enabled:
            gc.enable()
    torch.cuda.synchronize()
    g.replay()  # first replay uploads the graph
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_samples)]
    for i in range(n_samples):
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    return [s_.elapsed_time(e) / inner for s_, e in zip(starts, ends)]


def bench(fn: Callable[[], object], *, method: str = "auto", warmup_ms: float = 25,
          rep_ms: float = 100, graph_threshold_s: float = 10e-6,
          graph_inner: Optional[int] = None, graph_samples: Optional[int] = None,
          rotation_sets: Optional[int] = None) -> Timing:
    """Time ``fn`` (no arguments; wrap inputs with ``rotating`` to cycle buffers).

    Returns per-call seconds as a ``Timing``. ``rotation_sets`` is recorded only (pass
    ``fn.n_sets`` of a ``rotating`` callable; it is picked up automatically).
    """
    if method not in ("auto", "events", "graph"):
        raise ValueError(f"method must be 'auto', 'events' or 'graph', got {method!r}")
    if warmup_ms <= 0 or rep_ms <= 0:
        raise ValueError("warmup_ms and rep_ms must be > 0 (they are milliseconds, as in do_bench)")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("bench needs a CUDA device (torch.cuda.is_available() is False)")
    sets = rotation_sets or getattr(fn, "n_sets", 1)
    extra = {}
    if method == "auto":
        pace = choose_method(fn, graph_threshold_s)
        method, est = pace.method, pace.host_s
        extra = {"gpu_estimate_s": pace.gpu_s, "method_why": pace.why}
        if pace.gpu_s is not None and method == "graph":
            est = pace.gpu_s                  # what a replay repeats: size the graph by it
    else:
        est = estimate_call_s(fn)
    extra["estimate_s"] = est
    if method == "events":
        ms = _events_samples(fn, warmup_ms, rep_ms)
        return Timing(np.asarray(ms) * 1e-3, method="events", flushed_l2=True,
                      rotation_sets=sets, inner=1, extra=extra)
    # one replay of ~1 ms keeps the event resolution (~0.5 us) far below a sample
    inner = graph_inner or int(min(10_000, max(10, math.ceil(1e-3 / est))))
    n = graph_samples or int(min(200, max(20, rep_ms * 1e-3 / (inner * est))))
    ms = graph_replay_samples(fn, inner, n)
    return Timing(np.asarray(ms) * 1e-3, method="graph", flushed_l2=False, rotation_sets=sets,
                  inner=inner, extra=extra)


def compare(fn_a: Callable, fn_b: Callable, *, repeats: int = 5, **bench_kwargs):
    """Time two arms ``repeats`` times each, interleaved (A B A B ...) so that drift
    in clocks or temperature lands on both, and run ``noise_check`` on the run
    medians. Returns (timings_a, timings_b, NoiseCheck)."""
    if repeats < 2:
        raise ValueError("compare needs repeats >= 2 to measure run-to-run spread")
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(bench(fn_a, **bench_kwargs))
        tb.append(bench(fn_b, **bench_kwargs))
    return ta, tb, noise_check(ta, tb)
