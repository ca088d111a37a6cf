"""The NVML sampler and the opt-in clock lock, against a fake NVML: the lock's reset
path is never exercised on a real (shared) GPU."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from fp8lab.measure import clocks


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNVML:
    """The slice of pynvml that fp8lab.measure.clocks uses, recording every call."""
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION = 3, 4

    def __init__(self, refuse_sm=None, refuse_mem=None, fail_init=False, n_devices=1,
                 fail_reset=False):
        self.calls = []
        self.refuse_sm, self.refuse_mem, self.fail_init = refuse_sm, refuse_mem, fail_init
        self.fail_reset = fail_reset
        self.n_devices = n_devices
        self.sm_locked = self.mem_locked = False
        self.locked_on = []          # the UUIDs SM locks were set on
        self.on_lock = None          # called at each lock call (to look at the world then)
        self.n_reads = 0

    def nvmlInit(self):
        self.calls.append("init")
        if self.fail_init:
            raise FakeNVMLError(9)  # driver not loaded

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.n_devices

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < self.n_devices:
            raise FakeNVMLError(2)
        return ("handle", i)

    def nvmlDeviceGetHandleByUUID(self, u):
        self.calls.append(("uuid", u))
        return ("handle", u)

    def nvmlDeviceGetUUID(self, h):
        return h[1] if isinstance(h[1], str) else f"GPU-fake-{h[1]}"

    def nvmlDeviceGetName(self, h):
        return b"Fake GPU"

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return 1980

    def nvmlDeviceGetClockInfo(self, h, which):
        if which != self.NVML_CLOCK_SM:
            return 3201
        self.n_reads += 1                    # SM reads alternate 1950 / 1980 MHz
        return 1980 - (self.n_reads % 2) * 30

    def nvmlDeviceGetPowerUsage(self, h):
        return 650_000  # mW

    def nvmlDeviceGetTemperature(self, h, which):
        return 55

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 if self.n_reads % 2 else 0x0     # sw power cap every other sample

    def nvmlDeviceSetGpuLockedClocks(self, h, lo, hi):
        self.calls.append(("lock_sm", lo, hi))
        if self.on_lock is not None:
            self.on_lock()
        if self.refuse_sm is not None:
            raise FakeNVMLError(self.refuse_sm)
        self.sm_locked = True
        self.locked_on.append(self.nvmlDeviceGetUUID(h))

    def nvmlDeviceSetMemoryLockedClocks(self, h, lo, hi):
        self.calls.append(("lock_mem", lo, hi))
        if self.refuse_mem is not None:
            raise FakeNVMLError(self.refuse_mem)
        self.mem_locked = True

    def nvmlDeviceResetGpuLockedClocks(self, h):
        self.calls.append("reset_sm")
        if self.fail_reset:
            raise FakeNVMLError(999)
        self.sm_locked = False
        self.calls.append(("reset_sm_on", self.nvmlDeviceGetUUID(h)))

    def nvmlDeviceResetMemoryLockedClocks(self, h):
        self.calls.append("reset_mem")
        self.mem_locked = False


@pytest.fixture(autouse=True)
def plain_env(monkeypatch):
    """No GPU pinning or runner state from the calling shell; no torch to ask for a UUID."""
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", clocks.STATE_ENV):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(clocks, "cuda_uuid", lambda i=0: None)


@pytest.fixture
def exit_hooks(monkeypatch):
    """Record atexit registrations instead of touching the interpreter's list (ask for
    tmp_path before this fixture: pytest registers its own atexit hook for it)."""
    reg = {"registered": [], "unregistered": []}
    monkeypatch.setattr(clocks.atexit, "register", lambda f: reg["registered"].append(f) or f)
    monkeypatch.setattr(clocks.atexit, "unregister", lambda f: reg["unregistered"].append(f))
    return reg


@pytest.fixture
def keep_sigterm():
    before = signal.getsignal(signal.SIGTERM)
    yield before
    signal.signal(signal.SIGTERM, before)


# ------------------------------------------------------------------ lock
def test_lock_resets_on_normal_exit(exit_hooks, keep_sigterm):
    nv = FakeNVML()
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert lock.locked and lock.status == "locked" and nv.sm_locked
        assert clocks.active_lock() is lock
        # both emergency paths are armed while locked
        assert len(exit_hooks["registered"]) == 1
        assert signal.getsignal(signal.SIGTERM) is not keep_sigterm
    assert not nv.sm_locked and nv.calls.count("reset_sm") == 1
    assert ("lock_sm", 1200, 1200) in nv.calls
    assert lock.reset_calls == 1 and not lock.locked
    # and disarmed afterwards
    assert exit_hooks["unregistered"] == exit_hooks["registered"]
    assert signal.getsignal(signal.SIGTERM) == keep_sigterm
    assert clocks.active_lock() is None


def test_lock_resets_when_the_body_raises(exit_hooks, keep_sigterm):
    nv = FakeNVML()
    with pytest.raises(ZeroDivisionError):
        with clocks.locked_clocks((900, 1200), mem_mhz=3201, opt_in=True, nvml=nv):
            assert nv.sm_locked and nv.mem_locked
            1 / 0
    assert not nv.sm_locked and not nv.mem_locked
    assert nv.calls.count("reset_sm") == 1 and nv.calls.count("reset_mem") == 1
    assert signal.getsignal(signal.SIGTERM) == keep_sigterm


def test_atexit_hook_resets(exit_hooks, keep_sigterm):
    nv = FakeNVML()
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        hook = exit_hooks["registered"][0]
        hook()                               # what the interpreter would do at exit
        assert not nv.sm_locked and lock.reset_calls == 1
        assert "reset (atexit)" in lock.events
    # the context's own reset finds nothing left to undo
    assert nv.calls.count("reset_sm") == 1 and lock.reset_calls == 1


def test_sigterm_handler_resets_then_chains(exit_hooks, keep_sigterm):
    seen = []
    signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    nv = FakeNVML()
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        handler = signal.getsignal(signal.SIGTERM)
        handler(signal.SIGTERM, None)        # as if the process got SIGTERM
        assert not nv.sm_locked and "reset (SIGTERM)" in lock.events
        assert seen == [signal.SIGTERM]      # the previous handler still runs
    assert nv.calls.count("reset_sm") == 1


def test_sigterm_with_default_handler_exits(exit_hooks, keep_sigterm):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    nv = FakeNVML()
    with pytest.raises(SystemExit) as ei:
        with clocks.locked_clocks(1200, opt_in=True, nvml=nv):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    assert ei.value.code == 128 + signal.SIGTERM
    assert not nv.sm_locked and nv.calls.count("reset_sm") == 1


def test_no_permission_runs_unlocked(exit_hooks, keep_sigterm):
    nv = FakeNVML(refuse_sm=FakeNVML.NVML_ERROR_NO_PERMISSION)
    ran = []
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        ran.append(True)
        assert not lock.locked and lock.status == "not permitted"
        assert signal.getsignal(signal.SIGTERM) == keep_sigterm   # nothing to guard
    assert ran == [True]
    assert "reset_sm" not in nv.calls and exit_hooks["registered"] == []


def test_not_supported_is_recorded(exit_hooks, keep_sigterm):
    nv = FakeNVML(refuse_sm=FakeNVML.NVML_ERROR_NOT_SUPPORTED)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert lock.status == "not supported"


def test_half_applied_lock_is_undone_at_once(exit_hooks, keep_sigterm):
    nv = FakeNVML(refuse_mem=FakeNVML.NVML_ERROR_NO_PERMISSION)
    with clocks.locked_clocks(1200, mem_mhz=3201, opt_in=True, nvml=nv) as lock:
        assert lock.status == "not permitted" and not lock.locked
        assert not nv.sm_locked                  # the SM lock that did succeed is gone
    assert nv.calls.count("reset_sm") == 1


def test_nothing_happens_without_opt_in(monkeypatch, exit_hooks):
    monkeypatch.delenv("FP8LAB_ALLOW_CLOCK_LOCK", raising=False)
    nv = FakeNVML()
    with clocks.locked_clocks(1200, nvml=nv) as lock:
        assert lock.status == "not opted in" and not lock.locked
    assert nv.calls == []                        # NVML never touched


def test_environment_opt_in(monkeypatch, exit_hooks, keep_sigterm):
    monkeypatch.setenv("FP8LAB_ALLOW_CLOCK_LOCK", "1")
    nv = FakeNVML()
    with clocks.locked_clocks(1200, nvml=nv) as lock:
        assert lock.locked
    assert not nv.sm_locked


def test_no_nvml_runs_unlocked(exit_hooks):
    with clocks.locked_clocks(1200, opt_in=True, nvml=FakeNVML(fail_init=True)) as lock:
        assert lock.status.startswith("error: NVML unavailable") and not lock.locked


@pytest.mark.parametrize("bad", [0, -5, (1200, 900), (0, 100)])
def test_bad_clock_ranges(bad):
    with pytest.raises(ValueError, match="positive MHz"):
        with clocks.locked_clocks(bad, opt_in=True, nvml=FakeNVML()):
            pass


# ------------------------------------------------------------------ which GPU
def test_locks_the_gpu_cuda_sees_by_uuid(exit_hooks, keep_sigterm, monkeypatch):
    # Pinned with CUDA_VISIBLE_DEVICES=2, torch's cuda:0 is NVML's device 2, never index 0.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    monkeypatch.setattr(clocks, "cuda_uuid", lambda i=0: "GPU-fake-2")
    nv = FakeNVML(n_devices=4)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert lock.locked and lock.uuid == "GPU-fake-2"
    assert nv.locked_on == ["GPU-fake-2"] and ("reset_sm_on", "GPU-fake-2") in nv.calls


def test_explicit_uuid(exit_hooks, keep_sigterm):
    nv = FakeNVML(n_devices=4)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv, uuid="GPU-fake-3"):
        pass
    assert nv.locked_on == ["GPU-fake-3"]


def test_cuda_visible_devices_uuid_without_torch(exit_hooks, keep_sigterm, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-1,GPU-fake-0")
    nv = FakeNVML(n_devices=2)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv):
        pass
    assert nv.locked_on == ["GPU-fake-1"]


def test_a_cuda_index_is_nvmls_only_in_pci_order(exit_hooks, keep_sigterm, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    nv = FakeNVML(n_devices=2)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        # CUDA's default order is fastest first: device 1 may not be NVML's 1, so no lock
        assert not lock.locked and lock.status.startswith("error: which GPU to lock")
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in lock.status
    assert nv.locked_on == []
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert lock.locked and lock.uuid == "GPU-fake-1"


def test_one_gpu_needs_no_order(exit_hooks, keep_sigterm):
    nv = FakeNVML(n_devices=1)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert lock.locked and lock.uuid == "GPU-fake-0"


# ------------------------------------------------------------------ the runner's record
def test_lock_is_recorded_before_it_is_taken_and_cleared_after(tmp_path, exit_hooks, keep_sigterm,
                                                               monkeypatch):
    state = tmp_path / "clocks.json"
    monkeypatch.setenv(clocks.STATE_ENV, str(state))
    nv = FakeNVML()
    seen = []
    nv.on_lock = lambda: seen.append(clocks.recorded_locks(state))
    with clocks.locked_clocks(1200, mem_mhz=3201, opt_in=True, nvml=nv):
        recs = clocks.recorded_locks(state)
        assert len(recs) == 1
        r = recs[0]
        assert r["pid"] == os.getpid() and r["uuid"] == "GPU-fake-0" and r["sm"] and r["mem"]
        assert r["start"] is not None                # /proc: the holder can be told from a reused pid
    # the record was there when NVML was asked to lock (a kill right after leaves it)
    assert seen and len(seen[0]) == 1
    assert not state.exists() and clocks.recorded_locks(state) == []


def test_a_refused_lock_leaves_no_record(tmp_path, exit_hooks, keep_sigterm, monkeypatch):
    state = tmp_path / "clocks.json"
    monkeypatch.setenv(clocks.STATE_ENV, str(state))
    nv = FakeNVML(refuse_sm=FakeNVML.NVML_ERROR_NO_PERMISSION)
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert lock.status == "not permitted"
        assert clocks.recorded_locks(state) == []


def test_no_record_no_lock(tmp_path, exit_hooks, keep_sigterm, monkeypatch):
    # The runner asked for a record it cannot get: locking would leave nothing to reset a
    # killed kernel's lock, so the body runs unlocked.
    monkeypatch.setenv(clocks.STATE_ENV, str(tmp_path / "no" / "such" / "dir" / "clocks.json"))
    nv = FakeNVML()
    with clocks.locked_clocks(1200, opt_in=True, nvml=nv) as lock:
        assert not lock.locked and lock.status.startswith("error: cannot record the lock")
    assert nv.locked_on == []


def _write_record(path, pid, start, uuid="GPU-fake-0", sm=True, mem=False):
    key = f"{pid}:{uuid}"
    path.write_text(json.dumps({key: {"key": key, "pid": pid, "start": start, "uuid": uuid,
                                      "sm": sm, "mem": mem}}))


def test_release_kills_the_holder_then_resets(tmp_path):
    from fp8lab.toolchain import procs
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    try:
        state = tmp_path / "clocks.json"
        _write_record(state, holder.pid, procs.start_time(holder.pid), uuid="GPU-fake-1", mem=True)
        nv = FakeNVML(n_devices=2)
        lines = clocks.release_recorded(state, nvml=nv)
        assert holder.wait(timeout=10) is not None           # killed before the reset
        assert ("reset_sm_on", "GPU-fake-1") in nv.calls and "reset_mem" in nv.calls
        assert lines == [f"reset the clock lock that pid {holder.pid} left on GPU-fake-1"]
        assert not state.exists()
    finally:
        holder.kill()
        holder.wait()


def test_release_spares_a_reused_pid(tmp_path):
    # The recorded start time is not this process's: the pid was reused; kill nothing.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    try:
        state = tmp_path / "clocks.json"
        _write_record(state, other.pid, 1)
        nv = FakeNVML()
        clocks.release_recorded(state, nvml=nv)
        assert other.poll() is None and "reset_sm" in nv.calls
    finally:
        other.kill()
        other.wait()


def test_release_that_fails_says_how_to_reset_by_hand(tmp_path):
    state = tmp_path / "clocks.json"
    _write_record(state, 999_999_999, None)
    lines = clocks.release_recorded(state, nvml=FakeNVML(fail_reset=True))
    assert len(lines) == 1 and "nvidia-smi -rgc -rmc -i GPU-fake-0" in lines[0]
    assert len(clocks.recorded_locks(state)) == 1           # still recorded


# ------------------------------------------------------------------ sampler
def test_sampler_summarises_clocks_power_and_reasons():
    nv = FakeNVML()
    with clocks.ClockSampler(interval_s=0.005, nvml=nv) as s:
        t0 = s.now()
        time.sleep(0.08)
        t1 = s.now()
    summ = s.summary()
    assert summ["available"] and summ["n_samples"] >= 5
    assert summ["device_name"] == "Fake GPU" and summ["max_sm_mhz"] == 1980
    assert summ["sm_mhz_min"] == 1950 and summ["sm_mhz_max"] == 1980
    assert summ["mem_mhz_median"] == 3201 and summ["power_w_max"] == pytest.approx(650)
    assert 0 < summ["reasons_fraction"]["sw_power_cap"] < 1
    assert summ["throttled"] and summ["locked"] is False
    window = s.summary(t0, t1)
    assert 0 < window["n_samples"] <= summ["n_samples"]
    assert nv.calls[-1] == "shutdown"


def test_sampler_by_uuid():
    nv = FakeNVML()
    s = clocks.ClockSampler(uuid="abc-123", nvml=nv).start()
    s.stop()
    assert ("uuid", "GPU-abc-123") in nv.calls


def test_sampler_without_nvml_does_not_raise():
    s = clocks.ClockSampler(nvml=FakeNVML(fail_init=True)).start()
    s.stop()
    summ = s.summary()
    assert summ["available"] is False and "FakeNVMLError" in summ["error"]


def test_decode_reasons():
    assert clocks.decode_reasons(0) == []
    assert clocks.decode_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert clocks.decode_reasons(0x1000) == ["other(0x1000)"]


def test_reason_bits_match_pynvml():
    pynvml = pytest.importorskip("pynvml")
    assert pynvml.nvmlClocksEventReasonSwPowerCap == 0x4
    assert pynvml.nvmlClocksEventReasonHwThermalSlowdown == 0x40
    assert pynvml.nvmlClocksEventReasonGpuIdle == 0x1


# ------------------------------------------------------------------ the clocks of one timed row
class FakeClock:
    """The sampler's time base, moved by hand: no sample lands anywhere by accident."""

    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t

    def advance(self, dt):
        self.t += dt


def _quiet_sampler(nv=None, clock=None):
    # a one-hour interval: the background thread takes no sample during a test, so the only
    # readings are the one at start() and those the window logic asks for
    clock = clock or FakeClock()
    return clocks.ClockSampler(interval_s=3600, nvml=nv or FakeNVML(), clock=clock), clock


def _at(s, clock, dt):
    """The sampler's time after the fake clock moves on by ``dt`` seconds."""
    clock.advance(dt)
    return s.now()


def test_short_window_gets_the_bracketing_samples():
    s, clock = _quiet_sampler()
    with s:
        t0 = _at(s, clock, 0.015)            # 15 ms after the start sample
        t1 = _at(s, clock, 0.008)            # an 8 ms graph-replay window: no sample inside
        clock.advance(0.0001)
        c = clocks.row_clocks(s, t0, t1)
    assert c["clock_source"] == "bracketing samples"
    # the start reading (1950 MHz) and the one taken at the window's end (1980 MHz)
    assert c["sm_mhz_median"] == pytest.approx(1965) and c["sm_mhz_min"] == 1950 and c["sm_mhz_max"] == 1980
    assert c["power_w_max"] == pytest.approx(650) and c["mem_mhz_median"] == 3201
    assert "sw_power_cap:0.50" in c["clock_reasons"]
    assert "no NVML sample inside the 8.00 ms window" in c["clock_note"]
    assert "15.00 ms before" in c["clock_note"] and "0.10 ms after" in c["clock_note"]
    assert set(c) == set(clocks.CLOCK_COLUMNS)


def test_window_with_a_sample_inside_is_sampled():
    s, clock = _quiet_sampler()
    with s:
        t0 = _at(s, clock, 0.01)
        clock.advance(0.01)
        s.sample_now()                       # what the sampler thread does every interval
        clock.advance(0.01)
        c = clocks.row_clocks(s, t0, s.now())
    assert c["clock_source"] == "sampled" and c["sm_mhz_median"] == 1980
    assert c["clock_note"] == "1 NVML samples in the 20.00 ms window"
    assert len(s.samples) == 3               # start, inside, stop: no extra end-of-window reading


def test_a_later_summary_uses_the_samples_already_taken():
    s, clock = _quiet_sampler()
    with s:
        t0 = _at(s, clock, 0.005)
        t1 = _at(s, clock, 0.002)
        clock.advance(0.003)
    n = len(s.samples)                       # start and stop readings
    c = clocks.row_clocks(s, t0, t1)         # after stop: the stop reading is the one after
    assert c["clock_source"] == "bracketing samples" and len(s.samples) == n
    assert "5.00 ms before and 3.00 ms after" in c["clock_note"]


def test_window_after_the_sampler_stopped_has_the_nearest_sample_only():
    s, clock = _quiet_sampler()
    with s:
        pass
    clock.advance(1.0)
    t0 = s.now()
    clock.advance(0.001)
    c = clocks.row_clocks(s, t0, s.now())
    assert c["clock_source"] == "nearest sample" and c["sm_mhz_median"] > 0
    assert "1000.00 ms before" in c["clock_note"] and "none on the other side" in c["clock_note"]


def test_no_sampler_says_so():
    c = clocks.row_clocks(None, None, None)
    assert c["clock_source"] == "none" and c["clock_note"].startswith("no sampler")
    assert math.isnan(c["sm_mhz_median"]) and c["clock_reasons"] == ""
    assert set(c) == set(clocks.CLOCK_COLUMNS)


def test_nvml_unavailable_says_why():
    s, clock = _quiet_sampler(FakeNVML(fail_init=True))
    s.start()
    t0 = s.now()
    clock.advance(0.01)
    c = clocks.row_clocks(s, t0, s.now())
    s.stop()
    assert c["clock_source"] == "none" and math.isnan(c["sm_mhz_median"])
    assert c["clock_note"].startswith("NVML unavailable") and "FakeNVMLError" in c["clock_note"]
    never, _ = _quiet_sampler()
    assert clocks.row_clocks(never, 0.0, 1.0)["clock_note"] == "sampler never started"


def test_timed_brackets_one_call():
    s, clock = _quiet_sampler()
    with s:
        clock.advance(0.02)
        out, c = clocks.timed(s, lambda: clock.advance(0.004) or "timing")
    assert out == "timing" and c["clock_source"] == "bracketing samples"
    assert "4.00 ms window" in c["clock_note"]
    out, c = clocks.timed(None, lambda: 7)
    assert out == 7 and c["clock_source"] == "none"


def test_samples_out_of_arrival_order_are_ordered_by_time():
    # the end-of-window reading (main thread) may be appended before a reading the sampler
    # thread began earlier
    s, clock = _quiet_sampler()
    with s:
        t0 = _at(s, clock, 0.01)
        clock.advance(0.01)
        late = s.sample_now()
        early = dict(late, t=t0 + 0.005, sm_mhz=1500)
        s.samples.append(early)
        clock.advance(0.01)
        summ = s.summary(t0, s.now())
    assert summ["source"] == "sampled" and summ["n_samples"] == 2
    assert summ["duration_s"] == pytest.approx(0.005)


# ------------------------------------------------------------------ every experiment goes through row_clocks
def test_blockwise_rows_from_a_short_window_get_clocks(monkeypatch):
    """The rows that decide A8 were graph-replayed for ~10 ms under a 20 ms sampler: NaN clocks
    before; now the bracketing samples, and a note where there is no sampler."""
    from fp8lab.measure import bench, harness
    from fp8lab.experiments import blockwise as bw

    s, clock = _quiet_sampler()

    def fake_bench(fn, **kw):
        clock.advance(0.009)
        return "timing"
    monkeypatch.setattr(bench, "bench", fake_bench)
    with s:
        clock.advance(0.02)
        tm, clk = harness.timed(lambda: None, sampler=s, method="graph", warmup_ms=1, rep_ms=1, graph_threshold_s=0)
    assert tm == "timing" and clk["clock_source"] == "bracketing samples" and clk["sm_mhz_median"] > 0
    _, clk = harness.timed(lambda: None, sampler=None, method="auto", warmup_ms=1, rep_ms=1, graph_threshold_s=0)
    assert clk["clock_source"] == "none" and clk["clock_note"].startswith("no sampler")
    row = bw._row(bw.resolve_shapes(["qwen3-8b:o_proj"])[0], 1, bw.Candidate("mma_blockwise", None), "none",
                  "measured", **clk)
    assert row["clock_source"] == "none" and {"clock_source", "clock_note"} <= set(bw.COLUMNS)


def _experiment_modules():
    import importlib
    import pathlib

    root = pathlib.Path(clocks.__file__).parents[1] / "experiments"
    return {p.stem: (p, importlib.import_module(f"fp8lab.experiments.{p.stem}"))
            for p in sorted(root.glob("*.py")) if p.stem != "__init__"}


def test_no_experiment_summarises_a_window_itself():
    import re

    for name, (path, mod) in _experiment_modules().items():
        src = path.read_text()
        # a windowed sampler.summary(t0, t1) outside fp8lab.measure.clocks is a private copy of row_clocks
        assert not re.search(r"\.summary\(\s*[^)\s]", src), f"{name}: use clocks.timed / clocks.row_clocks"
        if "bench.bench(" in src:
            assert "clocks.timed(" in src or "harness.timed(" in src or re.search(r"\btimed\(sampler", src), \
                f"{name} times rows without clocks.timed"


def test_every_table_with_clocks_says_where_they_came_from():
    seen = 0
    for name, (_, mod) in _experiment_modules().items():
        for attr in ("COLUMNS", "LOCKED_COLUMNS"):
            cols = getattr(mod, attr, None)
            if cols and "sm_mhz_median" in cols:
                seen += 1
                assert {"clock_source", "clock_note"} <= set(cols), f"{name}.{attr}"
    assert seen >= 8
