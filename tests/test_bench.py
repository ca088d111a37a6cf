"""Timing statistics and the noise check, with synthetic samples (no GPU)."""

import numpy as np
import pytest

from fp8lab.measure import bench


def test_quantiles_by_hand():
    # linear interpolation between order statistics: position q * (n - 1)
    assert list(bench.quantiles([5, 1, 4, 2, 3])) == pytest.approx([1.8, 3.0, 4.2])
    assert list(bench.quantiles([7.0])) == [7.0, 7.0, 7.0]


def test_quantiles_match_numpy_and_triton():
    rng = np.random.default_rng(0)
    x = rng.lognormal(size=101)
    assert bench.quantiles(x, (0.1, 0.2, 0.5, 0.8, 0.95)) == pytest.approx(
        np.quantile(x, [0.1, 0.2, 0.5, 0.8, 0.95]))
    triton_testing = pytest.importorskip("triton.testing")
    assert list(bench.quantiles(x)) == pytest.approx(triton_testing._quantile(list(x), [0.2, 0.5, 0.8]))


def test_quantiles_reject_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        bench.quantiles([])
    with pytest.raises(ValueError, match="finite"):
        bench.quantiles([1.0, float("nan")])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bench.quantiles([1.0], (1.5,))


def test_timing_and_rates():
    t = bench.Timing(np.array([1.0, 2.0, 3.0, 4.0, 5.0]) * 1e-3)
    assert (t.p20_s, t.p50_s, t.p80_s) == pytest.approx((1.8e-3, 3e-3, 4.2e-3))
    assert t.spread_s == pytest.approx(2.4e-3)
    r = t.rate(1e9)
    # the low rate quantile comes from the slow (p80) time
    assert r["p20"] == pytest.approx(1e9 / 4.2e-3) and r["p80"] == pytest.approx(1e9 / 1.8e-3)
    assert r["p20"] < r["p50"] < r["p80"]
    row = t.row()
    assert row["time_p50_s"] == pytest.approx(3e-3) and row["n_samples"] == 5
    with pytest.raises(ValueError, match="> 0 s"):
        bench.Timing([1e-3, 0.0])
    with pytest.raises(ValueError, match="work must be > 0"):
        t.rate(0)


def test_noise_check_identical_arms_are_not_different():
    rng = np.random.default_rng(1)
    base = 100e-6
    a = base * (1 + 0.01 * rng.standard_normal(7))
    b = base * (1 + 0.01 * rng.standard_normal(7))
    nc = bench.noise_check(a, b)
    assert not nc.distinguishable
    assert "not distinguishable" in nc.message
    assert nc.n_runs == (7, 7)


def test_noise_check_flags_a_real_difference():
    a = [100e-6, 101e-6, 99e-6, 100.5e-6]
    b = [90e-6, 91e-6, 89.5e-6, 90.2e-6]          # 10% faster, spread ~2%
    nc = bench.noise_check(a, b)
    assert nc.distinguishable
    assert nc.diff_s == pytest.approx(np.median(b) - np.median(a))
    assert nc.rel_diff == pytest.approx((90.1 - 100.25) / 100.25)   # medians of 4 runs


def test_noise_check_small_difference_within_spread():
    # a 1% difference between arms whose runs wander by 3% is noise
    a = [100e-6, 103e-6, 100.5e-6]
    b = [101e-6, 104e-6, 101.5e-6]
    nc = bench.noise_check(a, b)
    assert not nc.distinguishable
    assert nc.spread_a_s == pytest.approx(3e-6)


def test_noise_check_needs_more_than_the_event_resolution():
    # runs that agree to 0.08 us cannot split two arms 0.10 us apart: below the event timer's
    # 0.5 us resolution; 0.6 us apart they can
    a = [130.70e-6, 130.72e-6, 130.76e-6]
    assert not bench.noise_check(a, [v - 0.10e-6 for v in a]).distinguishable
    assert bench.noise_check(a, [v - 0.60e-6 for v in a]).distinguishable


def test_noise_check_takes_timings_and_needs_two_runs():
    ta = [bench.Timing(np.full(5, 1e-3)), bench.Timing(np.full(5, 1.01e-3))]
    tb = [bench.Timing(np.full(5, 2e-3)), bench.Timing(np.full(5, 2.02e-3))]
    assert bench.noise_check(ta, tb).distinguishable
    with pytest.raises(ValueError, match="at least 2 runs"):
        bench.noise_check([1e-3], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="positive finite"):
        bench.noise_check([1e-3, -1.0], [1e-3, 2e-3])


def test_rotation_sets_exceed_l2():
    l2 = 60 * 2**20
    n = bench.n_rotation_sets(16 * 2**20, l2)
    assert n == 8 and n * 16 * 2**20 > 2 * l2
    assert bench.n_rotation_sets(1 * 2**30, l2) == 1      # one set already dwarfs L2
    with pytest.raises(ValueError, match="more than max_sets"):
        bench.n_rotation_sets(64, l2)
    with pytest.raises(ValueError, match="factor must be >= 1"):
        bench.n_rotation_sets(1024, l2, factor=0.5)


def test_rotating_cycles_argument_sets():
    seen = []
    f = bench.rotating(lambda x, y: seen.append((x, y)), [(1, "a"), (2, "b"), (3, "c")])
    for _ in range(7):
        f()
    assert seen == [(1, "a"), (2, "b"), (3, "c"), (1, "a"), (2, "b"), (3, "c"), (1, "a")]
    assert f.n_sets == 3
    with pytest.raises(ValueError, match="at least one"):
        bench.rotating(print, [])


def test_bench_rejects_bad_method_before_touching_a_gpu():
    with pytest.raises(ValueError, match="method must be"):
        bench.bench(lambda: None, method="wall")


# ------------------------------------------------------------------ the auto method (no GPU)
def test_auto_times_launch_bound_calls_in_graphs():
    """A 30 us kernel behind an 85 us Triton launch: events around one call would time the launch
    (and swing with the host's load: notebook 06's q_a rows moved 103 -> 32 us between two runs),
    so it is replayed in a graph; a GPU-bound call of the same length is timed with events."""
    from fp8lab.measure import bench

    short = bench.pace_of(host_s=85e-6, gpu_s=8e-6, graph_below_s=30e-6)
    assert (short.method, short.why) == ("graph", "short")
    launch = bench.pace_of(host_s=85e-6, gpu_s=40e-6, graph_below_s=30e-6)
    assert (launch.method, launch.why) == ("graph", "launch-bound")
    gpu = bench.pace_of(host_s=41e-6, gpu_s=40e-6, graph_below_s=30e-6)
    assert (gpu.method, gpu.why) == ("events", "gpu-bound")
    edge = bench.pace_of(host_s=bench.HOST_BOUND * 40e-6, gpu_s=40e-6, graph_below_s=30e-6)
    assert edge.method == "events"                       # the bound itself is not launch-bound
    # a call no graph captures: judged by its host time alone
    assert bench.pace_of(85e-6, None, 30e-6).method == "events"
    assert bench.pace_of(10e-6, None, 30e-6).why == "not capturable"


def test_choose_method_measures_both_paces(monkeypatch):
    from fp8lab.measure import bench

    monkeypatch.setattr(bench, "estimate_call_s", lambda fn, n=5: 90e-6)
    monkeypatch.setattr(bench, "gpu_call_s", lambda fn, inner=20, n=3: 35e-6)
    p = bench.choose_method(lambda: None, 30e-6)
    assert (p.host_s, p.gpu_s, p.method) == (90e-6, 35e-6, "graph")
