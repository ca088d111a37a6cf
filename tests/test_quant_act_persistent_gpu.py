"""quant_act_warp_ilp_persistent and groups_per_warp='auto' on a GPU (issue 6 item 5): bit for bit
against the torch reference at 2 / 4 / 8 groups per chunk, M in {1, 7, 83, 1024, 4097}, K in
{128, 384, 7168}, special and wide-exponent inputs, poisoned outputs, both scale layouts, shapes
whose chunks do not divide evenly over the grid's warps (several sweeps, a partial last one)."""

import pytest

from test_quant_act_ilp_gpu import _special, _wide

pytestmark = pytest.mark.gpu

SHAPES = [(1, 128), (7, 384), (83, 7168), (1024, 7168), (1024, 384), (4097, 128), (4097, 7168)]


def _check(x, **kw):
    import torch
    from fp8lab.kernels import baselines, quant_act as qa
    M, K = x.shape
    rq, rs = baselines.quant_act_reference(x)
    q = torch.empty((M, K), dtype=torch.uint8, device="cuda").fill_(0x55).view(torch.float8_e4m3fn)
    s = torch.full((M, K // 128), float("nan"), device="cuda")
    qa.quant_act(x, "quant_act_warp_ilp", q_out=q, s_out=s, **kw)
    dq = int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
    assert dq == 0, f"{dq} codes differ ({kw})"
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32)), kw
    if M <= 83 or M == 1024:   # M-major scales (cuBLASLt's layout), fresh outputs
        q2, s2 = qa.quant_act(x, "quant_act_warp_ilp", scale_layout="m_major", **kw)
        assert s2.stride() == (1, M)
        assert torch.equal(s2.contiguous().view(torch.int32), rs.view(torch.int32)), kw
        assert torch.equal(q2.view(torch.uint8), rq.view(torch.uint8)), kw


@pytest.mark.parametrize("M,K", SHAPES)
@pytest.mark.parametrize("kind", ["special", "wide"])
def test_persistent_bitwise_equal_to_reference(M, K, kind):
    x = (_special if kind == "special" else _wide)(M, K, seed=3 * M + K)
    for gpw in (2, 4, 8):
        _check(x, groups_per_warp=gpw, persistent=True)
    _check(x)                                     # auto (the default)
    _check(x, groups_per_warp="auto")


def test_shapes_include_uneven_multi_sweep_grids():
    """The shapes above reach the cases the walk's bounds must get right, whatever the occupancy
    (4 to 8 blocks per SM) the launcher finds: several sweeps with a partial last one."""
    import torch
    from fp8lab.kernels import quant_act as qa
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for bps in range(4, 9):
        uneven = [(M, K, g) for (M, K) in SHAPES for g in (2, 4, 8)
                  if (lambda c: c["sweeps"] > 1 and c["chunks"] % (c["blocks"] * 8) != 0)(
                      qa.persistent_launch(M, K, g, sms, bps))]
        assert len(uneven) >= 3, (bps, uneven)


def test_persistent_true_division_matches_the_grid_kernel():
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import quant_act as qa
    x = make_input(1024, 7168, seed=5)
    qg, sg = qa.quant_act(x, "quant_act_warp_ilp", scale_rule="true_division", groups_per_warp=4, persistent=False)
    for gpw in (2, 4, 8):
        qp, sp = qa.quant_act(x, "quant_act_warp_ilp", scale_rule="true_division", groups_per_warp=gpw, persistent=True)
        assert torch.equal(sg.view(torch.int32), sp.view(torch.int32)), gpw
        assert torch.equal(qg.view(torch.uint8), qp.view(torch.uint8)), gpw


def test_persistent_works_inside_a_cuda_graph():
    """The launcher's occupancy query must not break stream capture (the experiment times in graphs)."""
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import baselines, quant_act as qa
    x = make_input(1024, 7168, seed=9)
    rq, rs = baselines.quant_act_reference(x)
    q = torch.empty((1024, 7168), dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty((1024, 56), dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        qa.quant_act(x, "quant_act_warp_ilp", q_out=q, s_out=s, groups_per_warp=8, persistent=True)
    q.view(torch.uint8).fill_(0x55)
    s.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32))
