"""The weight-only decode kernels as programmatic dependent launches (pdl=True, issue 22) on the GPU.

Where each output's fp32 sum gets at most two partial sums (split-K and bulk with splits <= 2,
stream-K with whole tiles), the workspace's red.add order cannot change a bit, so a PDL launch must
be bit-identical to the plain one. With three or more partials (split-K / bulk as chosen or with
splits = 3, stream-K tiles shared by several CTAs) the fp32 adds land in whatever order the CTAs
finish, with or without PDL (the H200 run of d5a5ab8 saw such differences), so there the PDL
launch must equal the plain one to within one rounding of the output, and float64 as closely as the
plain one. Every format and activation type at odd shapes, poisoned outputs, the workspace left
clean. The GEMV waits for the kernel before it before reading its activations: a chain whose
reductions are order-independent (split-K with two splits, then stream-K with two CTAs per tile,
both on the shared workspace) must give the plain chain's outputs bit for bit, back to back and
inside a CUDA graph. Bad input refused in one line."""

import numpy as np
import pytest

from cuda_graph import run_eager_or_in_graph

from fp8lab.emulate.compare import relerr
from fp8lab.kernels import weight_only as wo
from test_weight_only_streamk_gpu import _case, _clean

pytestmark = pytest.mark.gpu

# at most two partial sums per output: the result cannot depend on the order of the adds
EXACT = [("splitk", dict(splits=1)), ("splitk", dict(splits=2)), ("streamk", "whole"),
         ("bulk", dict(splits=1)), ("bulk", dict(splits=2))]
# three or more partials where K allows: the order of the fp32 adds may differ run to run
REORDERED = [("splitk", {}), ("splitk", dict(splits=3)), ("streamk", {}), ("streamk", dict(ctas=5)),
             ("bulk", {}), ("bulk", dict(splits=3))]


def _skip_without_pdl():
    if not wo.pdl_supported():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")


def _within_one_rounding(a, b):
    """|a - b| at most one rounding of the output dtype at max(|a|, |b|), plus 2^-16 of b's largest
    magnitude (fp32 sums of cancelling partials)."""
    import torch
    eps = torch.finfo(a.dtype).eps                       # bf16 2^-7, fp16 2^-10: the spacing at |x| is at most eps |x|
    a, b = a.double(), b.double()
    bound = eps * torch.maximum(a.abs(), b.abs()) + 2.0 ** -16 * float(b.abs().max())
    return bool(((a - b).abs() <= bound).all())


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 16, 83])
@pytest.mark.parametrize("N,K", [(200, 384), (328, 1664)])
def test_pdl_same_result_as_the_plain_launch(fmt, act, M, N, K):
    import torch
    _skip_without_pdl()
    pw, x, ref = _case(fmt, M, N, K, act=act, seed=M + N)
    for exact, schedules in ((True, EXACT), (False, REORDERED)):
        for schedule, kw in schedules:
            if kw == "whole":
                kw = dict(ctas=wo.grid_x(fmt, N, M))
                assert wo.streamk_plan(fmt, M, N, K, kw["ctas"])["whole_tiles"]
            kw = dict(kw)
            if "splits" in kw:
                kw["splits"] = min(kw["splits"], K // 128)
            plain = wo.gemv_w16(x, pw, schedule=schedule, **kw)
            out = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
            wo.gemv_w16(x, pw, out=out, schedule=schedule, pdl=True, **kw)
            torch.cuda.synchronize()
            if exact:
                assert torch.equal(out.view(torch.int16), plain.view(torch.int16)), (schedule, kw)
            else:
                assert _within_one_rounding(out, plain), (schedule, kw)
            got = out.double().cpu().numpy()
            assert np.isfinite(got).all(), (schedule, kw)
            assert relerr(got, ref) < 6e-3, (schedule, kw, relerr(got, ref))
            assert _clean(), (schedule, kw)


def test_within_one_rounding_can_fail():
    """The bound above is not vacuous: a two-rounding difference, or another GEMV's output, fails it."""
    import torch
    a = torch.tensor([1.0, -2.0, 3.0], dtype=torch.bfloat16)
    one_up = torch.tensor([1.0078125, -2.0, 3.0], dtype=torch.bfloat16)
    two_up = torch.tensor([1.015625, -2.0, 3.0], dtype=torch.bfloat16)
    assert _within_one_rounding(one_up, a)
    assert not _within_one_rounding(two_up, a)
    assert not _within_one_rounding(torch.tensor([3.0, -2.0, 1.0], dtype=torch.bfloat16), a)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("fmt", ["fp8", "int4"])
def test_pdl_waits_for_the_kernel_that_writes_its_activations(graph, fmt):
    """A chain, many rounds: a kernel writes x; y = GEMV(x) (split-K, two splits, PDL); z = GEMV(y)
    (stream-K, two CTAs per tile, PDL), the second GEMV's activations being the first's output, both
    reducing through the shared workspace. The
    first GEMV lets the second launch before it has finished: every z must equal the same chain
    launched plainly, bit for bit (a GEMV that read its activations before the kernel writing them
    finished, or touched the workspace early, would give another z)."""
    import torch
    _skip_without_pdl()
    M, K, N1, N2, rounds = 4, 4096, 1024, 1000, 6
    pw1, _, _ = _case(fmt, M, N1, K, seed=7)
    pw2, _, _ = _case(fmt, M, N2, N1, seed=8)
    # two partial sums per output in both GEMVs: the workspace's add order cannot change a bit
    tiles = wo.grid_x(fmt, N2, M)
    plan = wo.streamk_plan(fmt, M, N2, N1, 2 * tiles)
    assert plan["units_per_cta"] * 2 == plan["steps"] and not plan["whole_tiles"], plan
    first, second = dict(schedule="splitk", splits=2), dict(schedule="streamk", ctas=2 * tiles)
    srcs = [torch.randn(M, K, device="cuda").to(torch.bfloat16) for _ in range(rounds)]
    want = [wo.gemv_w16(wo.gemv_w16(s, pw1, **first), pw2, **second) for s in srcs]
    x = torch.zeros((M, K), dtype=torch.bfloat16, device="cuda")
    y = torch.empty((M, N1), dtype=torch.bfloat16, device="cuda")
    zs = [torch.empty((M, N2), dtype=torch.bfloat16, device="cuda") for _ in range(rounds)]

    def body():
        for i in range(rounds):
            torch.mul(srcs[i], 1, out=x)                 # a kernel (not a memcpy) writes the activations
            wo.gemv_w16(x, pw1, out=y, pdl=True, **first)
            wo.gemv_w16(y, pw2, out=zs[i], pdl=True, **second)

    def poison():
        for z in zs:
            z.fill_(float("nan"))

    run_eager_or_in_graph(body, graph, poison)
    for i in range(rounds):
        assert torch.equal(zs[i].view(torch.int16), want[i].view(torch.int16)), i
    assert not torch.equal(zs[0], zs[1])
    assert _clean()


def test_pdl_rejects_bad_input():
    _skip_without_pdl()
    pw, x, _ = _case("fp8", 2, 32, 256)
    with pytest.raises(ValueError, match="pdl must be True or False"):
        wo.gemv_w16(x, pw, pdl=1)
    with pytest.raises(ValueError, match="pdl=True takes no extra_alu"):
        wo.gemv_w16(x, pw, pdl=True, extra_alu=0)
