"""Notebook 10 (C6): the EXTRA_ALU knob in SASS, and the headroom sweep's pure functions."""

import numpy as np
import pandas as pd
import pytest

from fp8lab.experiments import gemv_sass as gs, headroom as hr
from fp8lab.kernels import weight_only as wo
from fp8lab.toolchain.tools import have_tool

needs_nvcc = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")),
                                reason="needs nvcc and cuobjdump")


@needs_nvcc
def test_extra_alu_sass_grows_by_k_per_element():
    df = gs.xalu_sass_counts("sm_90")
    base = df[df["extra_alu"].isna()].iloc[0]
    k0 = df[df["extra_alu"] == 0].iloc[0]
    # k = 0 is the regular kernel, instruction for instruction
    assert bool(k0["same_as_base"])
    assert k0["kernel_instructions"] == base["kernel_instructions"]
    sweep = df[df["extra_alu"].notna()].sort_values("extra_alu")
    ks = sweep["extra_alu"].to_numpy(float)
    ints = sweep["int_per_element"].to_numpy(float)
    assert list(ks) == [float(k) for k in wo.EXTRA_ALU_LEVELS]
    assert np.all(np.diff(ints) > 0)
    extra_int = ints - float(k0["int_per_element"])
    # ptxas kept the chain: about k more integer instructions per element, none folded away
    assert np.all(extra_int[1:] >= 0.9 * ks[1:])
    assert np.all(extra_int[1:] <= 1.1 * ks[1:] + 0.1)
    assert not sweep[sweep["extra_alu"] > 0]["same_as_base"].any()


def _pw(fmt="fp8", act="bf16"):
    return wo.PackedWeight(fmt, act, 16, 128, np.zeros(1, np.int32), np.zeros(1, np.int32), 1.0)


def test_check_extra_alu():
    assert wo._check_extra_alu(4, _pw(), 1) == 4
    assert wo._check_extra_alu(np.int64(16), _pw(), 8) == 16
    for bad in (3, -1, 32, True, 2.0, "4"):
        with pytest.raises(ValueError, match="extra_alu must be one of"):
            wo._check_extra_alu(bad, _pw(), 1)
    with pytest.raises(ValueError, match="fp8 weights with bf16"):
        wo._check_extra_alu(2, _pw("int8"), 1)
    with pytest.raises(ValueError, match="fp8 weights with bf16"):
        wo._check_extra_alu(2, _pw("fp8", "fp16"), 1)
    with pytest.raises(ValueError, match="M <= 8"):
        wo._check_extra_alu(2, _pw(), 9)


def test_equivalent_clock():
    # flat bandwidth: twice the issue slots = half the clock
    assert hr.equivalent_clock_mhz(0.6, 0.3, 1980.0) == pytest.approx(990.0)
    assert hr.equivalent_clock_mhz(30.0, 30.0, 1980.0) == pytest.approx(1980.0)
    # the bandwidth fell by half with the same utilisation: demand per byte doubled
    assert hr.equivalent_clock_mhz(0.5, 0.5, 1800.0, bw=1.0, base_bw=2.0) == pytest.approx(900.0)
    arr = hr.equivalent_clock_mhz(np.array([0.3, 0.6, 0.9]), 0.3, 1500.0)
    assert np.allclose(arr, [1500.0, 750.0, 500.0])
    assert hr.equivalent_clock_from_instr(4.0, 2.0, 1980.0) == pytest.approx(990.0)
    with pytest.raises(ValueError, match="base_clock_mhz"):
        hr.equivalent_clock_mhz(0.3, 0.3, 0.0)
    with pytest.raises(ValueError, match="issue_util"):
        hr.equivalent_clock_mhz(0.0, 0.3, 1980.0)
    with pytest.raises(ValueError, match="both bw and base_bw"):
        hr.equivalent_clock_mhz(0.3, 0.3, 1980.0, bw=1.0)


def _sweep(bw, util=None, clock=1980.0):
    ks = [0, 2, 4, 8, 16][: len(bw)]   # synthetic sweeps on these k (a subset of the built levels)
    df = pd.DataFrame(dict(arm=hr.ARM, extra_alu=ks, bw_p50=bw, sm_mhz_median=clock,
                           lock_status="not requested"))
    if util is not None:
        df["issue_active_pct"] = util
    cub = dict(arm=hr.CUBLAS, extra_alu=np.nan, bw_p50=3.0e12, sm_mhz_median=clock, lock_status="not requested")
    return pd.concat([df, pd.DataFrame([cub])], ignore_index=True)


def test_find_knee():
    df = _sweep([3.8e12, 3.79e12, 3.75e12, 3.3e12, 2.0e12], util=[30, 55, 80, 90, 92])
    df = hr.add_equivalent_clock(df)
    knee = hr.find_knee(df)
    assert knee["knee_extra_alu"] == 8
    assert knee["last_flat_extra_alu"] == 4
    assert knee["flat_until_knee"]
    # k = 8: u 90% at bw 3.3 vs u0 30% at 3.8 -> f * (30/3.8) / (90/3.3)
    assert knee["knee_clock_mhz"] == pytest.approx(1980.0 * (30 / 3.8) / (90 / 3.3))
    flat = hr.find_knee(_sweep([3.8e12, 3.78e12, 3.77e12]))
    assert flat["knee_extra_alu"] is None and flat["knee_clock_mhz"] is None
    with pytest.raises(ValueError, match="k = 0"):
        hr.find_knee(_sweep([3.8e12]).query("extra_alu != 0"))
    with pytest.raises(ValueError, match="drop"):
        hr.find_knee(df, drop=0.0)


def test_equivalent_clock_from_static_sass():
    static = pd.DataFrame(dict(extra_alu=[np.nan, 0, 2, 4], per_element=[2.4, 2.4, 4.4, 6.4]))
    df = hr.add_equivalent_clock(_sweep([3.8e12, 3.8e12, 3.7e12]), static=static)
    d = df[df["arm"] == hr.ARM]
    assert np.allclose(d["eq_clock_mhz"], 1980.0 * 2.4 / np.array([2.4, 4.4, 6.4]))
    assert (d["eq_source"] == "static SASS instr./element").all()
    assert df.loc[df["arm"] == hr.CUBLAS, "eq_clock_mhz"].isna().all()


def test_c6_bar_is_the_seeds_unchanged():
    bar = hr.FLAT_BAR
    assert bar <= 0.02 and hr.KNEE_DROP == bar
    # utilisations chosen so k = 2 sits at 1980 * 25 / 40 = 1237.5 MHz-eq (>= 1200)
    util = [25, 40, 55, 85]
    just_in = hr.add_equivalent_clock(_sweep([3.8e12, 3.8e12 * (1 - 0.99 * bar), 3.78e12, 3.2e12], util=util))
    v = hr.c6_verdict(just_in)
    assert (v.subject, v.variant) == ("analogue", hr.EMULATED)
    assert v.verdict == "holds-in-kind" and "emulated" in v.our_figure and "not locked" in v.our_figure
    assert str(round(100 * bar)) + "%" in v.rule
    # 1% more than the bar at 1237 MHz-eq: the -7% that KNEE_DROP = 0.05 let through, and less, differs
    for drop in (1.01 * bar, 0.07):
        v = hr.c6_verdict(hr.add_equivalent_clock(_sweep([3.8e12, 3.8e12 * (1 - drop), 3.7e12, 3.2e12], util=util)))
        assert v.verdict == "differs", (drop, v)


def test_c6_knee_is_interpolated():
    # k=2 at 990 MHz-eq loses 4% (from 0% at 1980): -2% is crossed halfway, at 1485 MHz -> differs
    df = hr.add_equivalent_clock(_sweep([4.0e12, 4.0e12 * 0.96, 3.0e12], util=[30, 60 * 0.96, 90]))
    knee = hr.find_knee(df)
    assert knee["knee_extra_alu"] == 2 and knee["knee_clock_mhz"] == pytest.approx(990.0)
    assert knee["knee_clock_interp_mhz"] == pytest.approx(1485.0)
    v = hr.c6_verdict(df)
    assert v.verdict == "differs" and "1485 MHz-equivalent" in v.reason
    # the same drop landing at k=2 = 1100 MHz-eq from a flat 1300 MHz-eq point: crosses -2% below 1200
    df2 = hr.add_equivalent_clock(_sweep([4.0e12, 4.0e12, 4.0e12 * 0.96], util=[30, 30 * 1980 / 1300, 30 * 1980 / 1100 * 0.96]))
    k2 = hr.find_knee(df2)
    assert k2["knee_clock_interp_mhz"] == pytest.approx(1200.0)
    assert hr.c6_verdict(df2).verdict == "differs"          # at 1200 exactly: not below the seed's 1200
    df3 = hr.add_equivalent_clock(_sweep([4.0e12, 4.0e12, 4.0e12 * 0.96], util=[30, 30 * 1980 / 1290, 30 * 1980 / 1090 * 0.96]))
    assert hr.c6_verdict(df3).verdict == "holds-in-kind"


def test_c6_noise_and_reach():
    bar = hr.FLAT_BAR
    flat = _sweep([3.8e12, 3.79e12, 3.8e12], util=[20, 40, 60])
    v = hr.c6_verdict(hr.add_equivalent_clock(flat))
    assert v.verdict == "holds-in-kind" and "660 MHz" in v.reason
    # a repeat of k = 0 that moved by more than NOISE_OF_BAR x bar: the sweep cannot resolve the bar
    rep = pd.DataFrame([dict(arm=hr.ARM, extra_alu=0, bw_p50=3.8e12 * (1 - hr.NOISE_OF_BAR * bar * 1.1),
                             sm_mhz_median=1980.0, lock_status="not requested", repeat=1)])
    noisy = hr.add_equivalent_clock(pd.concat([flat.assign(repeat=0), rep], ignore_index=True))
    assert hr.sweep_noise(noisy)["repeat"] == pytest.approx(hr.NOISE_OF_BAR * bar * 1.1)
    v = hr.c6_verdict(noisy)
    assert v.verdict == "not-run" and "cannot resolve" in v.reason
    quiet = rep.assign(bw_p50=3.8e12 * (1 - hr.NOISE_OF_BAR * bar * 0.9))
    ok = hr.add_equivalent_clock(pd.concat([flat.assign(repeat=0), quiet], ignore_index=True))
    assert hr.c6_verdict(ok).verdict == "holds-in-kind"
    assert hr.find_knee(ok)["base_bw"] == 3.8e12            # the repeat is not a sweep point
    # p20-p80 spread counts too
    wide = flat.assign(bw_p20=flat["bw_p50"] * 0.98, bw_p80=flat["bw_p50"] * 1.02)
    assert hr.c6_verdict(hr.add_equivalent_clock(wide)).verdict == "not-run"
    # flat, but the sweep never got below 1200 MHz-eq: not-run (unjudged), not holds
    short = hr.add_equivalent_clock(_sweep([3.8e12, 3.8e12], util=[30, 40]))
    v = hr.c6_verdict(short)
    assert v.verdict == "not-run" and "only reached" in v.reason
    # no clock information -> not-run
    assert hr.c6_verdict(_sweep([3.8e12, 3.7e12])).verdict == "not-run"
    assert hr.c6_verdict(pd.DataFrame(dict(extra_alu=[], bw_p50=[]))).verdict == "not-run"


def test_c6_rows_locked_half_not_run_on_a_shared_gpu():
    df = hr.add_equivalent_clock(_sweep([3.8e12, 3.8e12, 3.78e12, 3.2e12], util=[25, 40, 55, 85]))
    rows = hr.c6_verdicts(df)
    assert [(r.subject, r.variant) for r in rows] == [("analogue", hr.EMULATED), ("analogue", hr.LOCKED),
                                                       ("seed", hr.LOCKED_MARLIN)]
    for lk in rows[1:]:
        assert lk.verdict == "not-run" and "opt-in" in lk.reason and "locked-clock sweep not run" in lk.reason
        assert lk.rule and "\n" not in lk.rule
    assert "Marlin" in rows[2].rule


def test_change_at_clock():
    df = hr.add_equivalent_clock(_sweep([4.0e12, 4.0e12, 3.0e12], util=[30, 60, 90]))
    # eq clocks: 1980, 990, 1980 * (30/4) / (90/3) = 495
    assert hr.change_at_clock(df, 990.0) == pytest.approx(0.0)
    assert hr.change_at_clock(df, 742.5) == pytest.approx(-0.125)
    assert hr.change_at_clock(df, 3000.0) is None


def test_ncu_rows_maps_mangled_names():
    kernels = pd.DataFrame(dict(
        kernel=["gemv_w8a16_fp8_xalu", "gemv_w8a16_fp8_xalu", "other"],
        kernel_mangled=["_ZN6fp8lab2wo19gemv_w8a16_fp8_xaluILb1ELi1ELi16EEEvNS0_8WoParamsEj",
                        "_ZN6fp8lab2wo19gemv_w8a16_fp8_xaluILb1ELi1ELi0EEEvNS0_8WoParamsEj", "x"],
        issue_active_pct=[90.0, 30.0, 1.0], dram_pct=[50.0, 60.0, 1.0], sm_clock_hz=[1.9e9, 1.98e9, 1e9],
        duration_s=[1e-4, 6e-5, 1e-6]))
    r = hr.ncu_rows(kernels, [0, 16])
    assert r["extra_alu"].tolist() == [16, 0]
    assert r["ncu_sm_clock_mhz"].tolist() == pytest.approx([1900.0, 1980.0])
    with pytest.raises(RuntimeError, match="expected 3"):
        hr.ncu_rows(kernels, [0, 2, 4])


# ---- the locked-clock sweep: orchestration with fake measurements and fake locks (no GPU) ----
class _FakeLock:
    """Stands in for clocks.locked_clocks: records the calls, yields a fixed status."""

    def __init__(self, status, state=None):
        self.status, self.calls, self.state = status, [], state if state is not None else {}

    def __call__(self, sm_mhz):
        import contextlib

        self.calls.append(sm_mhz)

        @contextlib.contextmanager
        def cm():
            # a lock that took effect changes the (fake) clock while the body runs
            self.state["mhz"] = sm_mhz if self.status == "locked" else None
            try:
                yield type("S", (), {"status": self.status})()
            finally:
                self.state["mhz"] = None
        return cm()


def _fake_measures(monkeypatch, slow_at=None):
    """measure_decode / measure_prefill returning synthetic rows whose rate depends on the
    'current clock' the fake lock sets (slow_at: {mhz: factor per arm})."""
    from fp8lab.experiments import decode, prefill

    state = {"mhz": None, "calls": 0}

    def factor(arm):
        return (slow_at or {}).get(state["mhz"], {}).get(arm, 1.0)

    def fake_decode(shapes_, Ms, formats, **kw):
        state["calls"] += 1
        rows = []
        for f in list(formats) + ["bf16"]:
            arm = wo.ARMS[f] if f != "bf16" else hr.CUBLAS
            bw = 4e12 * factor(arm)
            rows.append(dict(shape=shapes_[0], N=8192, K=28672, M=1, arm=arm, fmt=f, bw_p20=0.99 * bw, bw_p50=bw,
                             bw_p80=1.01 * bw, time_p50_s=1e-4, sm_mhz_median=1980.0, sm_mhz_min=1900.0,
                             check_relerr=1e-3))
        return pd.DataFrame(rows)

    def fake_prefill(shape, Ms, arms, **kw):
        rows = []
        for a in arms:
            t = 600.0 * factor(a)
            rows.append(dict(shape=shape, N=8192, K=8192, M=Ms[0], arm=a, with_quant=False, tflops_p20=t,
                             tflops_p50=t, tflops_p80=t, time_p50_s=1e-3, sm_mhz_median=1980.0,
                             sm_mhz_min=1900.0, check_relerr=1e-3))
        return pd.DataFrame(rows)

    monkeypatch.setattr(decode, "measure_copy", lambda sampler=None: {"rate_p50": 4.2e12})
    monkeypatch.setattr(decode, "measure_decode", fake_decode)
    monkeypatch.setattr(prefill, "measure_prefill", fake_prefill)
    return state


def test_locked_sweep_skips_clocks_that_did_not_lock(monkeypatch):
    state = _fake_measures(monkeypatch)
    lock = _FakeLock("not permitted", state)
    df, log = hr.locked_sweep([1500, 900], lock=lock)
    assert lock.calls == [1500.0, 900.0]
    assert [x["status"] for x in log] == ["not permitted", "not permitted"]
    assert state["calls"] == 1                              # only the unlocked point was measured
    assert set(df["lock_status"]) == {"unlocked"}
    assert hr.c6_locked_verdict(df) is None                 # no locked data -> the emulated verdict stands
    assert hr.locked_table(df).empty
    # every arm the issue names: four weight-only kernels + cuBLAS at M=1, W8A16 + cuBLAS at prefill
    dec = set(df.loc[df["phase"] == "decode", "arm"])
    assert dec == {wo.ARMS[f] for f in wo.FORMATS} | {hr.CUBLAS}
    pre = df[df["phase"] == "prefill"]
    assert set(pre["arm"]) >= {hr.CUBLAS, "gemv_w8a16_fp8"} and (pre["M"] == hr.LOCKED_PREFILL_M).all()


def test_locked_sweep_changes_and_verdict(monkeypatch):
    four_bit = {wo.ARMS["nvfp4"]: 0.85, wo.ARMS["int4"]: 0.84}
    state = _fake_measures(monkeypatch, slow_at={1200.0: {hr.CUBLAS: 0.84}, 900.0: {**four_bit, hr.CUBLAS: 0.64}})
    df, log = hr.locked_sweep([1200, 900], lock=_FakeLock("locked", state))
    assert [x["status"] for x in log] == ["locked", "locked"]
    t = hr.locked_table(df)
    assert t.loc[("decode", wo.ARMS["nvfp4"]), 900.0] == pytest.approx(-0.15)
    assert t.loc[("decode", hr.CUBLAS), 1200.0] == pytest.approx(-0.16)
    assert t.loc[("decode", wo.ARMS["fp8"]), 1200.0] == pytest.approx(0.0)
    v = hr.c6_locked_verdict(df, emulated="holds-in-kind: x")
    assert v.verdict == "holds" and "900 MHz" in v.our_figure and "emulated sweep" in v.reason


def test_locked_verdict_differs(monkeypatch):
    # fp8 loses 10% at 1500 MHz (>= 1200: should be flat), and nvfp4 vs int4 drift apart at 900
    state = _fake_measures(monkeypatch, slow_at={1500.0: {wo.ARMS["fp8"]: 0.90},
                                                 900.0: {wo.ARMS["nvfp4"]: 0.80, wo.ARMS["int4"]: 0.90}})
    df, _ = hr.locked_sweep([1500, 900], lock=_FakeLock("locked", state))
    v = hr.c6_locked_verdict(df)
    assert v.verdict == "differs"
    assert f"fp8 change more than {hr.LOCK_FLAT:.0%} at 1500 MHz" in v.reason and "nvfp4 vs int4" in v.reason
    assert "fp8 vs int8" in v.reason                        # fp8 at 1500 is also 10% off int8


def _fake_peers(monkeypatch, state, factor_at, missing=("peer_gemlite_w8a16_fp8",)):
    """peers.sweeps.decode / prefill returning measured rows for the Marlin peers asked (their
    rate scaled by factor_at[mhz][arm] under the fake lock) and a not-run row for ``missing``."""
    from fp8lab import peers
    from fp8lab.peers import sweeps as peer_sweeps

    seen = []

    def f(arm):
        return factor_at.get(state["mhz"], {}).get(arm, 1.0)

    def status(p):
        return "not-run: gemlite is not installed" if p in missing else "measured"

    def fake_decode(shapes_, Ms, ids, *, copy, same_copy, **kw):
        seen.append(("decode", tuple(ids), same_copy))
        return pd.DataFrame([dict(shape=shapes_[0], N=8192, K=28672, M=1, arm=p, fmt=peers.get(p).fmt,
                                  bw_p20=3.5e12 * f(p), bw_p50=3.5e12 * f(p), bw_p80=3.5e12 * f(p), time_p50_s=1e-4,
                                  sm_mhz_median=1980.0, sm_mhz_min=1900.0, check_relerr=1e-3, status=status(p))
                             for p in ids])

    def fake_prefill(shape, Ms, ids, **kw):
        seen.append(("prefill", tuple(ids)))
        return pd.DataFrame([dict(shape=shape, N=8192, K=8192, M=Ms[0], arm=p, with_quant=False, tflops_p20=500.0,
                                  tflops_p50=500.0, tflops_p80=500.0, time_p50_s=1e-3, sm_mhz_median=1980.0,
                                  sm_mhz_min=1900.0, check_relerr=1e-3, status=status(p)) for p in ids])

    monkeypatch.setattr(peer_sweeps, "decode", fake_decode)
    monkeypatch.setattr(peer_sweeps, "prefill", fake_prefill)
    return seen


MARLINS = ["peer_vllm_marlin_fp8", "peer_vllm_marlin_int8", "peer_vllm_marlin_int4", "peer_marlin_int4"]


def test_locked_sweep_times_marlin_the_seeds_subject_under_each_lock(monkeypatch):
    state = _fake_measures(monkeypatch)
    seen = _fake_peers(monkeypatch, state, {900.0: {"peer_vllm_marlin_int4": 0.85, "peer_marlin_int4": 0.84}})
    df, log = hr.locked_sweep([1200, 900], lock=_FakeLock("locked", state),
                              peers=MARLINS + ["peer_gemlite_w8a16_fp8"])
    assert len(seen) == 6 and all(x[1][-1] == "peer_gemlite_w8a16_fp8" for x in seen)   # 3 points x 2 phases
    dec = df[df["phase"] == "decode"]
    assert set(MARLINS) <= set(dec["arm"]) and "peer_gemlite_w8a16_fp8" not in set(df["arm"])   # not-run: no rate
    pre = df[(df["phase"] == "prefill") & (df["arm"] == "peer_vllm_marlin_int4")]
    assert set(pre["fmt"]) == {"int4"} and len(pre) == 3
    t = hr.locked_table(df)
    assert t.loc[("decode", "peer_marlin_int4"), 900.0] == pytest.approx(-0.16)
    v = hr.c6_locked_seed_verdict(df)
    assert v.subject == "seed" and v.variant == hr.LOCKED_MARLIN and v.verdict == "holds", v
    assert "900 MHz" in v.our_figure and "Marlin M = 1 within" in v.reason
    # the analogue row judges fp8lab's kernels only: Marlin rows beside them change nothing
    assert hr.c6_locked_verdict(df).verdict == "holds"
    assert not any("Marlin" in x for x in hr.c6_locked_verdict(df).our_figure.split(", "))


def test_locked_marlin_row_can_fail_and_says_why_it_did_not_run(monkeypatch):
    state = _fake_measures(monkeypatch)
    _fake_peers(monkeypatch, state, {1500.0: {"peer_vllm_marlin_fp8": 0.90}})
    df, _ = hr.locked_sweep([1500], lock=_FakeLock("locked", state), peers=MARLINS)
    v = hr.c6_locked_seed_verdict(df)
    assert v.verdict == "differs" and "at 1500 MHz" in v.reason and " vs " in v.reason   # flat and FP vs INT
    assert hr.c6_locked_verdict(df).verdict == "holds"
    # locked, but no Marlin among what ran: not-run, saying so
    state2 = _fake_measures(monkeypatch)
    df2, _ = hr.locked_sweep([1500], lock=_FakeLock("locked", state2))
    v2 = hr.c6_locked_seed_verdict(df2)
    assert v2.verdict == "not-run" and "no Marlin kernel was measured" in v2.our_figure
    # nothing locked: not-run with the opt-in sentence
    assert hr.c6_locked_seed_verdict(None).verdict == "not-run"
    with pytest.raises(ValueError, match="not peers of notebook 10"):
        hr.locked_sweep([1500], lock=_FakeLock("locked", state2), peers=["peer_deepgemm"])


def test_locked_sweep_bad_input():
    with pytest.raises(ValueError, match="lock_clocks is empty"):
        hr.locked_sweep([])
    with pytest.raises(ValueError, match="positive"):
        hr.locked_sweep([-5])
    with pytest.raises(ValueError, match="fmt"):
        hr.locked_sweep([1200], formats=["fp9"])
