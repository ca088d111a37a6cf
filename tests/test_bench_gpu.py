"""Timing sanity on a real GPU (skipped without one): the clock of the measuring
machinery itself is checked against things whose time we know."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from fp8lab.measure import bench
from fp8lab.facts import devices  # noqa: E402


@pytest.fixture(scope="module")
def spec():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return devices.spec_for(torch.cuda.get_device_name())


def test_large_copy_reaches_half_the_spec_bandwidth(spec):
    if spec is None:
        pytest.skip(f"{torch.cuda.get_device_name()} is not on the spec sheet")
    from fp8lab.experiments.ceilings import measure_ceilings

    df = measure_ceilings(copy_gib=2, ceilings=["copy_bandwidth"], rep_ms=100)
    r = df.iloc[0]
    assert r["status"] == "measured"
    assert r["bytes"] == 2 * 2 * 2**30                     # read + write of 2 GiB
    assert r["rate_p50"] > 0.5 * spec.bandwidth_Bps, r.to_dict()
    assert r["rate_p50"] < 1.05 * spec.bandwidth_Bps       # faster than the datasheet: a bug
    assert r["time_p20_s"] <= r["time_p50_s"] <= r["time_p80_s"]


def test_fma_kernel_is_correct_and_near_the_fp32_rate(spec):
    from fp8lab.kernels import fma_peak

    assert fma_peak.check(fma_peak.small_config()) < 2e-4
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = fma_peak.default_config(sms, n_iters=64)
    x0, out = fma_peak.make_buffers(cfg)
    t = bench.bench(lambda: fma_peak.launch(x0, out, cfg), method="events", rep_ms=50)
    rate = fma_peak.flop(cfg) / t.p50_s
    if spec is not None:
        assert 0.5 * spec.peak_flops("fp32") < rate < 1.05 * spec.peak_flops("fp32")


def test_spin_kernel_time_scales_with_its_length():
    # torch.cuda._sleep spins for a number of cycles: twice the cycles, twice the time
    cycles = 2_000_000
    t1 = bench.bench(lambda: torch.cuda._sleep(cycles), method="events", rep_ms=50)
    t2 = bench.bench(lambda: torch.cuda._sleep(2 * cycles), method="events", rep_ms=50)
    assert t2.p50_s / t1.p50_s == pytest.approx(2.0, rel=0.1)


def test_events_time_the_gpu_when_the_host_path_outlasts_the_flush(monkeypatch):
    # a host that sleeps before it launches a ~5 us kernel. Its default head start covers a host
    # path of ~0.1 ms. A host of 0.4 ms outlasts the flush (~60 us) and the default head start:
    # with none the GPU drains and the event pair holds the host's wait; with a head start
    # far longer than the host path the pair holds the kernel again. The head start is 40M
    # cycles (>= 20 ms at the H200's 1980 MHz): with 4M (~2 ms) the H200 once read 502 us held,
    # right after the prebuild, which fits a 0.4 ms sleep that took ~2.5 ms on a busy host. The
    # host path is timed, so a failure says how long it really took.
    # bench gives calls first estimated at HEAD_START_BELOW_MS (0.5 ms) or more no head start, on
    # purpose; the 0.4 ms host path estimates at ~0.49 ms, and once (065b701, in the whole GPU
    # suite) above it: 492 us held beside a 488 us host path. This test is about the head start,
    # not that rule, so the rule is lifted here.
    monkeypatch.setattr(bench, "HEAD_START_BELOW_MS", float("inf"))
    import statistics
    import time

    host_paths = []

    def host_then_kernel(host_s):
        def call():
            t0 = time.perf_counter()
            time.sleep(host_s)
            host_paths.append(time.perf_counter() - t0)
            torch.cuda._sleep(10_000)
        return call

    gpu = bench.bench(lambda: torch.cuda._sleep(10_000), method="graph").p50_s
    ev = bench.bench(host_then_kernel(100e-6), method="events", rep_ms=20)
    assert ev.p50_s < 3 * gpu + 5e-6, (ev.p50_s, gpu, max(host_paths))
    slow = host_then_kernel(400e-6)
    host_paths.clear()
    bare = statistics.median(bench._events_samples(slow, 0.1, 0.2, head_start_cycles=0)) * 1e-3
    held = statistics.median(bench._events_samples(slow, 0.1, 0.2, head_start_cycles=40_000_000)) * 1e-3
    assert held < 3 * gpu + 5e-6, (held, gpu, max(host_paths))
    assert bare > held + 100e-6, (bare, held, statistics.median(host_paths))


def test_graph_replay_times_tiny_kernels():
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    t = bench.bench(lambda: torch.mul(x, 2.0, out=y), method="graph")
    # a 4 KiB elementwise kernel takes a few microseconds; graph replay removes the
    # host's launch gaps, so the per-call time is the device's
    assert t.method == "graph" and t.inner >= 10 and not t.flushed_l2
    assert t.p50_s < 10e-6
    assert torch.equal(y, x * 2.0)
    auto = bench.bench(lambda: torch.mul(x, 2.0, out=y), method="auto")
    assert auto.method == ("graph" if auto.extra["estimate_s"] < 10e-6 else "events")


def test_rotation_and_l2():
    l2 = bench.device_l2_bytes()
    assert l2 > 1 * 2**20
    per_set = 8 * 2**20
    n = bench.n_rotation_sets(per_set, l2)
    sets = [(torch.randn(per_set // 4, device="cuda"), torch.empty(per_set // 4, device="cuda"))
            for _ in range(n)]
    f = bench.rotating(lambda a, b: b.copy_(a), sets)
    t = bench.bench(f, method="graph")
    assert t.rotation_sets == n and t.p50_s > 0


def test_noise_check_calls_identical_arms_the_same():
    x = torch.randn(64 * 2**20, device="cuda")
    y = torch.empty_like(x)

    def arm():
        torch.mul(x, 2.0, out=y)

    _, _, nc = bench.compare(arm, arm, repeats=5, method="events", rep_ms=30)
    assert not nc.distinguishable, nc.message
