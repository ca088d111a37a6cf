"""The weight-only decode kernels as programmatic dependent launches (pdl=True, issue 22) on the GPU:
bit-identical to the plain launch in every schedule (split-K, stream-K, bulk), format and activation
type at odd shapes, poisoned outputs, the workspace left clean; the GEMV waits for the kernel before
it before reading its activations (an input written by the previous kernel in the stream is the one
multiplied, back to back and inside a CUDA graph, with a split-K and a stream-K launch sharing the
workspace); bad input refused in one line."""

import numpy as np
import pytest

from fp8lab.emulate.compare import relerr
from fp8lab.kernels import weight_only as wo
from test_weight_only_streamk_gpu import _case, _clean

pytestmark = pytest.mark.gpu

SCHEDULES = [("splitk", {}), ("splitk", dict(splits=3)), ("streamk", {}), ("streamk", dict(ctas=5)),
             ("bulk", {}), ("bulk", dict(splits=3))]


def _skip_without_pdl():
    if not wo.pdl_supported():
        pytest.skip("programmatic dependent launch needs sm_90 or newer")


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 16, 83])
@pytest.mark.parametrize("N,K", [(200, 384), (328, 1664)])
def test_pdl_bit_identical_to_the_plain_launch(fmt, act, M, N, K):
    import torch
    _skip_without_pdl()
    pw, x, ref = _case(fmt, M, N, K, act=act, seed=M + N)
    for schedule, kw in SCHEDULES:
        kw = dict(kw)
        if "splits" in kw:
            kw["splits"] = min(kw["splits"], K // 128)
        plain = wo.gemv_w16(x, pw, schedule=schedule, **kw)
        out = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
        wo.gemv_w16(x, pw, out=out, schedule=schedule, pdl=True, **kw)
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16), plain.view(torch.int16)), (schedule, kw)
        got = out.double().cpu().numpy()
        assert np.isfinite(got).all() and relerr(got, ref) < 6e-3, (schedule, kw)
        assert _clean(), (schedule, kw)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("fmt", ["fp8", "int4"])
def test_pdl_waits_for_the_kernel_that_writes_its_activations(graph, fmt):
    """A chain, many rounds: a kernel writes x; y = GEMV(x) (split-K, PDL); z = GEMV(y) (stream-K,
    PDL), the second GEMV's activations being the first's output, both on the shared workspace. The
    first GEMV lets the second launch before it has finished: every z must equal the same chain
    launched plainly, bit for bit (a GEMV that read its activations before the kernel writing them
    finished, or touched the workspace early, would give another z)."""
    import torch
    _skip_without_pdl()
    M, K, N1, N2, rounds = 4, 4096, 1024, 1000, 6
    pw1, _, _ = _case(fmt, M, N1, K, seed=7)
    pw2, _, _ = _case(fmt, M, N2, N1, seed=8)
    first, second = dict(schedule="splitk", splits=4), dict(schedule="streamk")
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

    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        for z in zs:
            z.fill_(float("nan"))
        g.replay()
    else:
        body()
    torch.cuda.synchronize()
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
