"""The check-then-time harness (fp8lab.measure.harness) and the one relative-error rule
(fp8lab.emulate.compare.relerr) every sweep uses, on the CPU: numpy stands in for device tensors
where the rule is the same, and a fake bench stands in for the GPU."""

import math
import re
from pathlib import Path

import numpy as np
import pytest

from fp8lab.emulate.compare import relerr
from fp8lab.measure import bench, harness

ROOT = Path(__file__).resolve().parents[1]


def test_relerr_is_frobenius_in_float64():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 8))
    got = ref + 1e-3 * rng.standard_normal((4, 8))
    assert relerr(got, ref) == pytest.approx(np.linalg.norm(got - ref) / np.linalg.norm(ref), rel=1e-12)
    assert relerr(ref, ref) == 0.0
    # float32 input is compared in float64, not rounded to its own precision first
    assert relerr(ref.astype(np.float32), ref) < 1e-7


def test_relerr_a_nan_or_inf_is_infinitely_wrong():
    ref = np.ones((2, 3))
    for bad in (np.nan, np.inf, -np.inf):
        got = ref.copy()
        got[1, 2] = bad
        assert relerr(got, ref) == math.inf
    # a zero reference is matched only by a zero output
    assert relerr(np.zeros(3), np.zeros(3)) == 0.0
    assert relerr(np.full(3, 1e-30), np.zeros(3)) == math.inf


def test_check_rule_and_its_words():
    ok = harness.Check(relerr=1e-3, nan_left=0)
    assert ok.ok and ok.why() == ""
    wrong = harness.Check(relerr=0.35, nan_left=0)
    assert not wrong.ok and "0.35" in wrong.why() and "bound 0.01" in wrong.why()
    unwritten = harness.Check(relerr=1e-3, nan_left=7)
    assert not unwritten.ok and unwritten.why().startswith("7 NaNs")
    # the bound is strict: an error at the bound fails
    assert not harness.Check(relerr=harness.CHECK_RELERR, nan_left=0).ok


def test_require_compares_the_reference_rows_and_raises_one_line():
    ref = np.arange(1.0, 13.0).reshape(3, 4)
    got = np.vstack([ref[:2], np.full((1, 4), 99.0)])       # wrong only in the last row
    assert harness.require("arm 3x4", got, ref[:2]) == 0.0    # ref has 2 rows: only those compared
    with pytest.raises(harness.CheckFailed) as e:
        harness.require("arm 3x4", got, ref)
    assert str(e.value).startswith("arm 3x4: relative error") and "\n" not in str(e.value)
    # a failed check stops a sweep that records library refusals (RuntimeError) as not-run rows
    assert issubclass(harness.CheckFailed, AssertionError) and not issubclass(harness.CheckFailed, RuntimeError)


def test_copies_and_made_rotation():
    made = []

    def make(i):
        made.append(i)
        return lambda: i

    f0 = make(0)
    made.clear()
    rot = harness.made_rotation(make, 3, first=f0)
    assert made == [1, 2] and rot.n_sets == 3
    assert [rot() for _ in range(4)] == [0, 1, 2, 0]
    assert harness.made_rotation(make, 1)() == 0
    c = harness.copies([1], 3, clone=list)
    assert len(c) == 3 and c[0] is not c[1] and c[1] == [1]
    assert len(harness.copies([1], 0, clone=list)) == 1


def test_holding_keeps_one_rotation_cycle_of_outputs_alive():
    """A call that allocates its output, timed over n sets, must not get its previous output's
    memory back at once (harness.holding): the last n results stay referenced, older ones go."""
    import gc
    import weakref

    class Out:                                   # stands in for a freshly allocated output tensor
        pass

    refs = []

    def alloc(x):
        o = Out()
        refs.append(weakref.ref(o))
        return o

    held = harness.holding(alloc, 3)
    assert held.holds == 3
    for i in range(5):
        held(i)
    gc.collect()
    assert [r() is not None for r in refs] == [False, False, True, True, True]
    plain = [alloc(i) for i in range(2)]        # without the ring nothing is held beyond the caller
    del plain
    gc.collect()
    assert refs[-1]() is None and refs[-2]() is None
    assert harness.holding(alloc, 0).holds == 1


def test_timed_rotates_and_stamps_the_clock_columns(monkeypatch):
    seen = {}

    def fake_bench(fn, **kw):
        seen.update(kw, n_sets=getattr(fn, "n_sets", 1), calls=[fn() for _ in range(3)])
        return bench.Timing([2e-6, 3e-6, 4e-6], method=kw["method"], rotation_sets=getattr(fn, "n_sets", 1))
    monkeypatch.setattr(bench, "bench", fake_bench)
    tm, clk = harness.timed(lambda a: a * 10, [(1,), (2,)], sampler=None, method="graph", rep_ms=5)
    assert seen["method"] == "graph" and seen["rep_ms"] == 5 and seen["n_sets"] == 2
    assert seen["calls"] == [10, 20, 10]
    cols = harness.timing_columns(tm, clk)
    assert cols["time_p50_s"] == pytest.approx(3e-6) and cols["rotation_sets"] == 2
    assert cols["timing_method"] == "graph" and cols["n_samples"] == 3
    assert cols["clock_source"] == "none"


def test_time_rotated_falls_back_to_events_and_says_so(monkeypatch):
    def fake_bench(fn, **kw):
        if kw["method"] == "graph":
            raise RuntimeError("operation not permitted when stream is capturing")
        return bench.Timing([1e-3], method="events")
    monkeypatch.setattr(bench, "bench", fake_bench)
    import sys
    import types

    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    warmed = []
    tm, _, note = harness.time_rotated(lambda s: warmed.append(s), [(0,), (1,)], method="graph", rep_ms=1)
    assert warmed[:2] == [0, 1] and tm.method == "events"
    assert note.startswith("graph capture failed (RuntimeError: operation not permitted") and note.endswith("events")


def test_one_relative_error_rule_in_the_package():
    """No module of fp8lab defines its own relative error: every check goes through relerr."""
    own = []
    for p in (ROOT / "fp8lab").rglob("*.py"):
        if p.name == "compare.py":
            continue
        if re.search(r"^\s*def _?rel_?err\w*\(", p.read_text(), re.M):
            own.append(str(p.relative_to(ROOT)))
    assert not own, f"modules with their own relative error (use fp8lab.emulate.compare.relerr): {own}"
