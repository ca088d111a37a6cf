"""quant_act_subwarp (8 lanes x 32 bytes per group, issue 22) on a GPU, in each subwarp_form: bit for
bit against the torch reference, plain and as a programmatic dependent launch, at group counts that leave a warp partly
idle (G = 1, 3, 5 ...), odd M, K in {128, 384, 7168}, special and wide-exponent inputs, poisoned
outputs, both scale layouts, a PDL launch releasing the next kernel after its stores or right after its
wait; the true-division rule matches the warp kernel's; bad input raises
ValueError. (That a PDL launch waits for the kernel writing its input: test_quant_act_pdl_gpu.)"""

import pytest

from test_quant_act_ilp_gpu import _special, _wide

pytestmark = pytest.mark.gpu

SUB = "quant_act_subwarp"


@pytest.mark.parametrize("M,K", [(1, 128), (1, 384), (5, 128), (7, 384), (16, 7168), (83, 7168), (4097, 128),
                                 (4097, 7168)])
@pytest.mark.parametrize("kind", ["special", "wide"])
@pytest.mark.parametrize("pdl,release", [(False, None), (True, None), (True, "after_stores")])
@pytest.mark.parametrize("form", ["ef", "plain", "plain16"])
def test_subwarp_bitwise_equal_to_reference(M, K, kind, pdl, release, form):
    import torch
    from fp8lab.kernels import baselines, quant_act as qa
    if pdl and not qa.pdl_supported():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    x = (_special if kind == "special" else _wide)(M, K, seed=3 * M + K)
    rq, rs = baselines.quant_act_reference(x)
    q = torch.empty((M, K), dtype=torch.uint8, device="cuda").fill_(0x55).view(torch.float8_e4m3fn)
    s = torch.full((M, K // 128), float("nan"), device="cuda")
    qa.quant_act(x, SUB, q_out=q, s_out=s, pdl=pdl, subwarp_form=form, pdl_release=release)
    dq = int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
    assert dq == 0, f"{dq} codes differ"
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32))
    q2, s2 = qa.quant_act(x, SUB, scale_layout="m_major", pdl=pdl, subwarp_form=form,  # cuBLASLt's layout
                          pdl_release=release)
    assert s2.stride() == (1, M)
    assert torch.equal(s2.contiguous().view(torch.int32), rs.view(torch.int32))
    assert torch.equal(q2.view(torch.uint8), rq.view(torch.uint8))


@pytest.mark.parametrize("form", [None, "ef", "plain16"])         # None: the default form
def test_subwarp_writes_nothing_past_its_outputs(form):
    """Outputs carved out of a larger poisoned buffer: the bytes around them stay untouched."""
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import baselines, quant_act as qa
    M, K = 5, 384                                          # G = 15: the last warp has one idle segment
    x = make_input(M, K, seed=11)
    qbuf = torch.full((M * K + 64,), 0x55, dtype=torch.uint8, device="cuda")
    sbuf = torch.full((M * 3 + 8,), float("nan"), device="cuda")
    q = qbuf[16:16 + M * K].view(torch.float8_e4m3fn).view(M, K)
    s = sbuf[4:4 + M * 3].view(M, 3)
    qa.quant_act(x, SUB, q_out=q, s_out=s, subwarp_form=form)
    rq, rs = baselines.quant_act_reference(x)
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32))
    assert bool((qbuf[:16] == 0x55).all()) and bool((qbuf[16 + M * K:] == 0x55).all())
    assert bool(sbuf[:4].isnan().all()) and bool(sbuf[4 + M * 3:].isnan().all())


@pytest.mark.parametrize("form", ["ef", "plain16"])
def test_subwarp_true_division_rule_matches_the_warp_kernel(form):
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import quant_act as qa
    x = make_input(83, 7168, seed=5)
    qw, sw = qa.quant_act(x, "quant_act_warp", scale_rule="true_division")
    qs, ss = qa.quant_act(x, SUB, scale_rule="true_division", subwarp_form=form)
    assert torch.equal(sw.view(torch.int32), ss.view(torch.int32))
    assert torch.equal(qw.view(torch.uint8), qs.view(torch.uint8))


def test_subwarp_rejects_bad_input():
    import torch
    from fp8lab.kernels import quant_act as qa
    x = torch.randn(4, 256, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of 128"):
        qa.quant_act(torch.randn(4, 100, device="cuda").to(torch.bfloat16), SUB)
    with pytest.raises(ValueError, match="bfloat16"):
        qa.quant_act(x.float(), SUB)
    with pytest.raises(ValueError, match="groups_per_warp applies to quant_act_warp_ilp only"):
        qa.quant_act(x, SUB, groups_per_warp=4)
    with pytest.raises(ValueError, match="16-byte aligned"):
        qa.quant_act(torch.zeros(4 * 256 + 4, dtype=torch.bfloat16, device="cuda")[4:].view(4, 256), SUB)


def test_quantiser_experiment_subwarp_arms_smoke():
    from fp8lab.experiments import quantisers as qx
    from fp8lab.kernels import quant_act as qa
    arms = ("quant_act_subwarp", qx.SUBWARP_PDL_ARM) if qa.pdl_supported() else ("quant_act_subwarp",)
    df = qx.measure(Ms=(1, 64), Ks=(384,), arms=arms, rep_ms=5, warmup_ms=2, subwarp_form="plain16")
    assert (df["status"] == "measured").all()
    assert df["bitwise_ok"].astype(bool).all()
