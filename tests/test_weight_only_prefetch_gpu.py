"""The register ring's L2 prefetch (gemv_w16(prefetch=D), issue 7) on the GPU: a hint, so the
output is bit-identical to prefetch = 0 at every split count and stream-K CTA count (every
format, both act dtypes, M = 1 and 16, a partial last tile whose warps past N stop loading,
tiles crossed inside a stream-K CTA); against float64 with poisoned outputs and a clean
workspace; bad options refused."""

import numpy as np
import pytest

from fp8lab.kernels import weight_only as wo

pytestmark = pytest.mark.gpu

PREFETCHES = (1, 2, 5, 16, wo.PREFETCH_MAX)


def _case(fmt, M, N, K, act="bf16", seed=0):
    import torch
    d = wo.generate(fmt, M, N, K, act=act, seed=seed)
    pw = wo.pack_weights(fmt, d["codes"], d["scales"], act=act, global_scale=d["global_scale"]).to("cuda")
    ref = wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"])
    x = torch.from_numpy(np.asarray(d["act"], dtype=np.float32)).to(
        torch.bfloat16 if act == "bf16" else torch.float16).cuda()
    return pw, x, ref


def _nan(M, N, x):
    import torch
    return torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")


def _clean():
    import torch
    torch.cuda.synchronize()
    ws, cnt = wo.workspace(torch.device("cuda"), 1, 1)
    return float(ws.abs().sum()) == 0 and int(cnt.abs().sum()) == 0


def _runs(fmt, N, M, steps):
    runs = [dict(splits=s) for s in sorted({1, 2, 3, steps})] + [dict()]
    runs += [dict(schedule="streamk", ctas=c) for c in (3, 5, wo.grid_x(fmt, N, M), 1000)]
    return runs + [dict(schedule="streamk")]


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 16])
def test_prefetch_bit_identical_to_none(fmt, act, M):
    """N = 520: the last CTA tile is partial (its warps past N stop loading early: the
    prefetch must stop with them); K = 2944 (23 steps): the prefetch distance runs past the
    end of a split and of a stream-K tile."""
    import torch
    N, K = 520, 2944
    pw, x, _ = _case(fmt, M, N, K, act=act, seed=11 + M)
    for kw in _runs(fmt, N, M, K // 128):
        base = _nan(M, N, x)
        wo.gemv_w16(x, pw, out=base, prefetch=0, **kw)
        for pf in PREFETCHES:
            out = _nan(M, N, x)
            wo.gemv_w16(x, pw, out=out, prefetch=pf, **kw)
            torch.cuda.synchronize()
            assert torch.equal(base.view(torch.int16), out.view(torch.int16)), (fmt, act, M, kw, pf)
        assert _clean(), (fmt, act, M, kw)


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 7, 13])
@pytest.mark.parametrize("N,K", [(200, 896), (328, 1664), (96, 128)])
def test_prefetch_vs_float64_poisoned_clean(fmt, M, N, K):
    pw, x, ref = _case(fmt, M, N, K, seed=M + N)
    for kw in _runs(fmt, N, M, K // 128):
        for rep in range(2):                                  # the re-run finds the workspace clean
            out = _nan(M, N, x)
            wo.gemv_w16(x, pw, out=out, prefetch=4, **kw)
            got = out.double().cpu().numpy()
            assert np.isfinite(got).all(), (kw, rep)
            assert float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) < 6e-3, (kw, rep)
            assert _clean(), (kw, rep)


def test_prefetch_default_and_bad_options():
    import torch
    pw, x, _ = _case("fp8", 2, 32, 256)
    a = wo.gemv_w16(x, pw)                                    # the default distance
    b = wo.gemv_w16(x, pw, prefetch=0)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    for bad in (-1, wo.PREFETCH_MAX + 1, 2.5, True):
        with pytest.raises(ValueError, match="prefetch must be an integer"):
            wo.gemv_w16(x, pw, prefetch=bad)
    with pytest.raises(ValueError, match="loader='regs' only"):
        wo.gemv_w16(x, pw, loader="smem", prefetch=2)
    pw17, x17, _ = _case("fp8", 17, 32, 256)
    with pytest.raises(ValueError, match="M <= 16"):
        wo.gemv_w16(x17, pw17, prefetch=2)
    wo.gemv_w16(x17, pw17)                                    # the default resolves to none there
