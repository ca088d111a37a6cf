"""The quantisers as programmatic dependent launches (pdl=True, issue 22's quantiser target) on a
GPU: quant_act_warp_ilp bit for bit against the torch reference at every groups_per_warp and
'auto', odd M, K in {128, 384, 7168}, poisoned outputs, both scale layouts (quant_act_subwarp's:
test_quant_act_subwarp_gpu); each waits for the kernel before it (an input written by the previous
kernel in the stream is the one quantised), eagerly and inside a CUDA graph, also when that kernel
is itself a PDL launch that released the quantiser early (traffic_copy); off sm_90 it is refused
with one line."""

import pytest

from cuda_graph import run_eager_or_in_graph
from test_quant_act_ilp_gpu import _special, _wide

pytestmark = pytest.mark.gpu


def _pdl_ok():
    from fp8lab.kernels import quant_act as qa
    return qa.pdl_supported()


def _check(x, **kw):
    import torch
    from fp8lab.kernels import baselines, quant_act as qa
    M, K = x.shape
    rq, rs = baselines.quant_act_reference(x)
    q = torch.empty((M, K), dtype=torch.uint8, device="cuda").fill_(0x55).view(torch.float8_e4m3fn)
    s = torch.full((M, K // 128), float("nan"), device="cuda")
    qa.quant_act(x, "quant_act_warp_ilp", q_out=q, s_out=s, pdl=True, **kw)
    dq = int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
    assert dq == 0, f"{dq} codes differ ({kw})"
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32)), kw
    q2, s2 = qa.quant_act(x, "quant_act_warp_ilp", scale_layout="m_major", pdl=True, **kw)
    assert s2.stride() == (1, M)
    assert torch.equal(s2.contiguous().view(torch.int32), rs.view(torch.int32)), kw
    assert torch.equal(q2.view(torch.uint8), rq.view(torch.uint8)), kw


@pytest.mark.parametrize("M,K", [(1, 128), (7, 384), (16, 7168), (83, 7168), (4097, 7168)])
@pytest.mark.parametrize("kind", ["special", "wide"])
def test_pdl_bitwise_equal_to_reference(M, K, kind):
    if not _pdl_ok():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    x = (_special if kind == "special" else _wide)(M, K, seed=5 * M + K)
    for gpw in (2, 4, 8):
        _check(x, groups_per_warp=gpw)
    _check(x)                                              # auto


@pytest.mark.parametrize("variant,release", [("quant_act_warp_ilp", None), ("quant_act_subwarp", None),
                                             ("quant_act_subwarp", "after_stores")])
@pytest.mark.parametrize("graph", [False, True])
def test_pdl_waits_for_the_kernel_that_writes_its_input(graph, variant, release):
    """A kernel writes x, the PDL launch quantises it at once, back to back, many times over with a
    fresh input each time: every output is the quantisation of what the kernel before wrote (a
    launch that read x before the writer finished would quantise the previous round's values)."""
    if not _pdl_ok():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import baselines, quant_act as qa
    M, K, rounds = 16, 7168, 8
    srcs = [make_input(M, K, seed=100 + i) for i in range(rounds)]
    x = torch.zeros((M, K), dtype=torch.bfloat16, device="cuda")
    qs = [torch.empty((M, K), dtype=torch.float8_e4m3fn, device="cuda") for _ in range(rounds)]
    ss = [torch.empty((M, K // 128), dtype=torch.float32, device="cuda") for _ in range(rounds)]

    def body():
        for i in range(rounds):
            torch.mul(srcs[i], 1, out=x)                   # a kernel (not a memcpy) writes the input
            qa.quant_act(x, variant, q_out=qs[i], s_out=ss[i], pdl=True, pdl_release=release)

    def poison():
        for q in qs:
            q.view(torch.uint8).fill_(0x55)

    run_eager_or_in_graph(body, graph, poison)
    for i in range(rounds):
        rq, rs = baselines.quant_act_reference(srcs[i])
        assert torch.equal(qs[i].view(torch.uint8), rq.view(torch.uint8)), i
        assert torch.equal(ss[i].view(torch.int32), rs.view(torch.int32)), i


@pytest.mark.parametrize("release", ["after_stores", "after_wait"])
@pytest.mark.parametrize("graph", [False, True])
def test_pdl_quantiser_waits_for_a_pdl_kernel_that_writes_its_input(graph, release):
    """Two PDL launches back to back, the second reading what the first writes: traffic_copy
    writes the high bytes of x into the bytes of y (bf16, (M, K/2)), then quant_act_subwarp
    quantises y, both releasing the next kernel at ``release``. Released early, the quantiser is
    resident while the copy still runs: its outputs are the quantisation of the copied bytes only
    if its wait held. Fresh x every round; eager and in a CUDA graph."""
    if not _pdl_ok():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    import torch
    from fp8lab.experiments.quantisers import make_input
    from fp8lab.kernels import baselines, quant_act as qa
    M, K, rounds = 16, 7168, 6
    srcs = [make_input(M, K, seed=300 + i) for i in range(rounds)]
    x = torch.zeros((M, K), dtype=torch.bfloat16, device="cuda")
    y = torch.zeros((M, K // 2), dtype=torch.bfloat16, device="cuda")
    cs = torch.empty((M, K // 128), dtype=torch.float32, device="cuda")
    qs = [torch.empty((M, K // 2), dtype=torch.float8_e4m3fn, device="cuda") for _ in range(rounds)]
    ss = [torch.empty((M, K // 256), dtype=torch.float32, device="cuda") for _ in range(rounds)]

    def body():
        for i in range(rounds):
            torch.mul(srcs[i], 1, out=x)                   # a plain kernel writes x
            qa.traffic_copy(x, q_out=y.view(torch.uint8).view(torch.float8_e4m3fn), s_out=cs, pdl=True,
                            pdl_release=release)
            qa.quant_act(y, "quant_act_subwarp", q_out=qs[i], s_out=ss[i], pdl=True, pdl_release=release)

    def poison():
        for q in qs:
            q.view(torch.uint8).fill_(0x55)

    run_eager_or_in_graph(body, graph, poison)
    for i in range(rounds):
        want_y = (srcs[i].view(torch.int16) >> 8).to(torch.uint8).view(torch.bfloat16)
        rq, rs = baselines.quant_act_reference(want_y)
        assert torch.equal(qs[i].view(torch.uint8), rq.view(torch.uint8)), i
        assert torch.equal(ss[i].view(torch.int32), rs.view(torch.int32)), i


def test_pdl_refused_where_it_does_not_apply():
    import torch
    from fp8lab.kernels import quant_act as qa
    x = torch.zeros((4, 128), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="quant_act_subwarp only, not quant_act_warp"):
        qa.quant_act(x, "quant_act_warp", pdl=True)
    with pytest.raises(ValueError, match="with persistent=True"):
        qa.quant_act(x, "quant_act_warp_ilp", groups_per_warp=4, persistent=True, pdl=True)
    if not _pdl_ok():
        with pytest.raises(ValueError, match="sm_90 or newer"):
            qa.quant_act(x, "quant_act_warp_ilp", pdl=True)
