"""quant_act_warp_ilp on a GPU (issue 6 item 5): bit for bit against the torch reference at every
groups_per_warp, odd M, K in {128, 384, 7168}, special and wide-exponent inputs, poisoned outputs,
both scale layouts; traffic_copy writes what it should; bad input raises ValueError."""

import pytest

pytestmark = pytest.mark.gpu


def _special(M, K, seed):
    from fp8lab.experiments.quantisers import special_input
    return special_input(M, K, seed=seed)


def _wide(M, K, seed):
    from fp8lab.experiments.quantisers import wide_input
    return wide_input(M, K, seed=seed)


@pytest.mark.parametrize("gpw", [2, 4, 8])
@pytest.mark.parametrize("M,K", [(1, 128), (7, 384), (83, 7168), (4097, 128), (4097, 7168)])
@pytest.mark.parametrize("kind", ["special", "wide"])
def test_ilp_bitwise_equal_to_reference(M, K, gpw, kind):
    import torch
    from fp8lab.kernels import baselines, quant_act as qa
    x = (_special if kind == "special" else _wide)(M, K, seed=M + K + gpw)
    rq, rs = baselines.quant_act_reference(x)
    q = torch.empty((M, K), dtype=torch.uint8, device="cuda").fill_(0x55).view(torch.float8_e4m3fn)
    s = torch.full((M, K // 128), float("nan"), device="cuda")
    qa.quant_act(x, "quant_act_warp_ilp", q_out=q, s_out=s, groups_per_warp=gpw)
    dq = int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
    assert dq == 0, f"{dq} codes differ"
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32))
    if M <= 83:   # M-major scales (cuBLASLt's layout), fresh outputs
        q2, s2 = qa.quant_act(x, "quant_act_warp_ilp", scale_layout="m_major", groups_per_warp=gpw)
        assert s2.stride() == (1, M)
        assert torch.equal(s2.contiguous().view(torch.int32), rs.view(torch.int32))
        assert torch.equal(q2.view(torch.uint8), rq.view(torch.uint8))


def test_ilp_true_division_rule_matches_the_warp_kernel():
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import quant_act as qa
    x = make_input(83, 7168, seed=3)
    qw, sw = qa.quant_act(x, "quant_act_warp", scale_rule="true_division")
    qi, si = qa.quant_act(x, "quant_act_warp_ilp", scale_rule="true_division")
    assert torch.equal(sw.view(torch.int32), si.view(torch.int32))
    assert torch.equal(qw.view(torch.uint8), qi.view(torch.uint8))


@pytest.mark.parametrize("pdl,release", [(False, None), (True, None), (True, "after_stores"), (True, "after_wait")])
def test_traffic_copy_writes_high_bytes_and_unit_scales(pdl, release):
    import torch
    from fp8lab.kernels import quant_act as qa
    if pdl and not qa.pdl_supported():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    x = torch.randn(83, 384, device="cuda").to(torch.bfloat16)
    q = torch.zeros((83, 384), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    s = torch.full((83, 3), float("nan"), device="cuda")
    qa.traffic_copy(x, q_out=q, s_out=s, pdl=pdl, pdl_release=release)
    assert torch.equal(q.view(torch.uint8), (x.view(torch.int16) >> 8).to(torch.uint8))
    assert bool((s == 1).all())


def test_ilp_rejects_bad_input():
    import torch
    from fp8lab.kernels import quant_act as qa
    x = torch.randn(4, 256, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of 128"):
        qa.quant_act(x[:, :200].contiguous(), "quant_act_warp_ilp")
    with pytest.raises(ValueError, match="multiple of 128"):
        qa.quant_act(torch.randn(4, 100, device="cuda").to(torch.bfloat16), "quant_act_warp_ilp")
    with pytest.raises(ValueError, match="bfloat16"):
        qa.quant_act(x.float(), "quant_act_warp_ilp")
    with pytest.raises(ValueError, match="groups_per_warp"):
        qa.quant_act(x, "quant_act_warp_ilp", groups_per_warp=6)


def test_quantiser_experiment_ilp_and_diagnostic_smoke():
    from fp8lab.experiments import quantisers as qx
    df = qx.measure(Ms=(1, 64), Ks=(256,), arms=("quant_act_warp_ilp",), diagnostic_arms=("traffic_copy",),
                    rep_ms=5, warmup_ms=2)
    assert (df["status"] == "measured").all()
    assert df.loc[df["arm"] == "quant_act_warp_ilp", "bitwise_ok"].astype(bool).all()
    assert set(df["copy_timing_method"]) <= {"graph", "events"}
