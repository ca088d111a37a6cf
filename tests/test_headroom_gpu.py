"""EXTRA_ALU kernels on the GPU: bit-exact with k = 0 and the regular kernel, ValueErrors."""

import numpy as np
import pytest

from fp8lab.kernels import weight_only as wo

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M", [1, 7])
def test_extra_alu_bit_exact(M):
    import torch

    N, K = 200, 640   # N not a multiple of 16, K = 5 steps (a partial register ring)
    pw_host, info = wo.random_weight("fp8", N, K, act="bf16", seed=3)
    pw = pw_host.to("cuda")
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    plain = wo.gemv_w16(x, pw)
    W = wo.dequantize_torch("fp8", info["codes"], info["scales"], info["global_scale"])
    ref = x.double() @ W.t()
    assert float((plain.double() - ref).norm() / ref.norm()) < 1e-2
    for k in wo.EXTRA_ALU_LEVELS:
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        wo.gemv_w16(x, pw, out=out, extra_alu=k)
        assert torch.equal(out, plain), f"k={k}"
        o2 = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        wo.gemv_w16(x, pw, out=o2, extra_alu=k, splits=2)
        assert torch.isfinite(o2).all()
        assert float((o2.double() - ref).norm() / ref.norm()) < 1e-2


def test_extra_alu_bad_input():
    import torch

    pw = wo.random_weight("fp8", 64, 256, act="bf16", seed=0)[0].to("cuda")
    x = torch.randn(9, 256, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="M <= 8"):
        wo.gemv_w16(x, pw, extra_alu=2)
    with pytest.raises(ValueError, match="extra_alu must be one of"):
        wo.gemv_w16(x[:1], pw, extra_alu=3)
    pi = wo.random_weight("int8", 64, 256, act="bf16", seed=0)[0].to("cuda")
    with pytest.raises(ValueError, match="fp8 weights"):
        wo.gemv_w16(x[:1], pi, extra_alu=2)


def test_locked_sweep_runs_end_to_end_without_touching_clocks():
    """The locked sweep's measuring path on a real GPU, with a stand-in lock that reports
    'locked' and changes nothing (the shared GPU's clocks are never touched): every arm is
    measured, checked against float64 and labelled per clock."""
    import contextlib

    from fp8lab.experiments import headroom as hr

    calls = []

    @contextlib.contextmanager
    def fake_lock(sm_mhz):
        calls.append(sm_mhz)
        yield type("S", (), {"status": "locked"})()

    df, log = hr.locked_sweep([1700], decode_shape="qwen3-8b:o_proj", prefill_shape="qwen3-8b:o_proj",
                              prefill_m=256, formats=("fp8", "int4"), rep_ms=5, lock=fake_lock)
    assert calls == [1700.0] and log == [dict(sm_mhz=1700.0, status="locked")]
    assert set(df["lock_status"]) == {"unlocked", "locked"}
    assert (df["check_relerr"] < 1e-2).all() and (df["rate_p50"] > 0).all()
    assert set(df.loc[df["phase"] == "decode", "arm"]) == {wo.ARMS["fp8"], wo.ARMS["int4"], hr.CUBLAS}
    assert hr.CUBLAS in set(df.loc[df["phase"] == "prefill", "arm"])
    # nothing was locked, so the 'locked' point is the unlocked one measured again: the same rate
    # up to timing noise (rep_ms=5: a prefill point differed by 59% once on the H200 at e592d91),
    # never the order-of-magnitude gap of a wrong unit or a row compared with another arm's
    ratio = df.loc[df["lock_status"] == "locked", "change_vs_unlocked"] + 1
    assert ratio.between(1 / 3, 3).all(), ratio


def test_locked_sweep_times_the_marlins_that_are_built_without_touching_clocks():
    """Marlin, seed 003's subject, through the locked sweep on a real GPU with the same stand-in
    lock: every Marlin peer built here is measured at both points (checked against float64 of
    its own operands), the others leave no row, and C6's seed row is judged from those rows."""
    import contextlib

    from fp8lab.experiments import headroom as hr
    from fp8lab.peers import discover

    built = [p for p in hr.MARLIN_PEERS if discover.availability(p).ok]
    if not built:
        pytest.skip("no Marlin peer built here (python -m fp8lab.peers build marlin / vllm-marlin)")

    @contextlib.contextmanager
    def fake_lock(sm_mhz):
        yield type("S", (), {"status": "locked"})()

    df, _ = hr.locked_sweep([1700], decode_shape="qwen3-8b:o_proj", prefill_shape="qwen3-8b:o_proj",
                            prefill_m=256, formats=("fp8",), rep_ms=5, lock=fake_lock, peers=list(hr.MARLIN_PEERS))
    for phase in ("decode", "prefill"):
        got = set(df.loc[(df["phase"] == phase) & (df["lock_status"] == "locked"), "arm"])
        assert set(built) <= got, (phase, got)
    rows = df[df["arm"].isin(built)]
    assert (rows["check_relerr"] < 1e-2).all() and (rows["rate_p50"] > 0).all()
    assert rows["change_vs_unlocked"].notna().all()
    v = hr.c6_locked_seed_verdict(df)
    assert v.subject == "seed" and v.verdict in ("holds", "differs") and "1700 MHz" in v.our_figure
