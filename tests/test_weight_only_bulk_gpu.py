"""The bulk schedule of the weight-only decode kernels (issue 22: each warp's weights and scales
through a shared-memory ring filled by cp.async.bulk) on the GPU: against float64 at odd shapes
(N not a multiple of the CTA tile, fewer K steps than ring stages, a step count the splits do not
divide, M across the tile widths and 64-token blocks), bit-identical to split-K where no K split
reduces, poisoned outputs, the workspace left clean, and bad input refused in one line."""

import numpy as np
import pytest

from fp8lab.emulate.compare import relerr
from fp8lab.kernels import weight_only as wo
from test_weight_only_streamk_gpu import _case, _clean

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 16, 83])
# 3 steps (fewer than the ring's stages) and 13 steps; N = 200 and 328 are not multiples of the
# 128- or 256-row CTA tile; 5 splits of 13 steps: uneven slices
@pytest.mark.parametrize("N,K", [(200, 384), (328, 1664)])
@pytest.mark.parametrize("splits", [1, 5])
def test_bulk_vs_float64_poisoned_and_clean(fmt, M, N, K, splits):
    import torch
    pw, x, ref = _case(fmt, M, N, K, seed=M + N + splits)
    splits = min(splits, K // 128)
    tol = 6e-3
    for rep in range(2):                                     # the re-run finds the workspace clean
        out = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
        wo.gemv_w16(x, pw, out=out, schedule="bulk", splits=splits)
        got = out.double().cpu().numpy()
        assert np.isfinite(got).all(), (rep, np.argwhere(~np.isfinite(got))[:5])
        assert relerr(got, ref) < tol, rep
        assert np.max(np.abs(got - ref) / (np.abs(ref) + 1e-3 * np.abs(ref).max())) < 4 * tol, rep
        assert _clean(), rep


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 64])
@pytest.mark.parametrize("resident", [True, False])
def test_bulk_bit_identical_to_splitk_without_reduction(fmt, act, M, resident):
    """splits = 1: no reduction, so the bulk kernel must produce split-K's bits exactly (the same
    words, the same mma order); both with resident and with alternating activation chunks."""
    import torch
    N, K = 520, 2944                                         # 23 steps: the ring wraps 4 times
    pw, x, _ = _case(fmt, M, N, K, act=act, seed=5)
    a = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
    b = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
    wo.gemv_w16(x, pw, out=a, splits=1, act_resident=resident)
    wo.gemv_w16(x, pw, out=b, splits=1, schedule="bulk", act_resident=resident)
    torch.cuda.synchronize()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert _clean()


@pytest.mark.parametrize("fmt", ["fp8", "int4", "nvfp4"])
def test_bulk_default_splits_on_a_decode_shape(fmt):
    import torch
    M, N, K = 1, 4096, 4096
    pw, x, ref = _case(fmt, M, N, K, seed=2)
    cfg = wo.launch_config(pw, M)
    assert cfg["bulk_ctas_per_sm"] >= 1 and 1 <= cfg["bulk_splits"] <= K // 128
    b = wo.gemv_w16(x, pw, schedule="bulk")
    torch.cuda.synchronize()
    assert relerr(b.double().cpu().numpy(), ref) < 6e-3
    assert _clean()


def test_bulk_rejects_bad_input():
    import torch
    pw, x, _ = _case("fp8", 2, 32, 256)
    with pytest.raises(ValueError, match="no extra_alu"):
        wo.gemv_w16(x, pw, schedule="bulk", extra_alu=0)
    with pytest.raises(ValueError, match="ctas applies"):
        wo.gemv_w16(x, pw, schedule="bulk", ctas=4)
    # scales 8-byte but not 16-byte aligned: refused before any copy engine reads them
    s = pw.s
    buf = torch.zeros(s.numel() + 4, dtype=torch.int32, device="cuda")
    off = 2 if buf.data_ptr() % 16 == 0 else 0
    view = buf[off:off + s.numel()]
    view.copy_(s)
    assert view.data_ptr() % 16 == 8
    pw.s = view
    with pytest.raises(ValueError, match="16-byte"):
        wo.gemv_w16(x, pw, schedule="bulk")


def test_decode_sweep_refuses_bulk_below_sm90(monkeypatch):
    """measure_decode with schedule='bulk' on a GPU without cp.async.bulk: one clear line before
    anything is timed (it used to die of a KeyError on the launch config)."""
    from fp8lab.experiments import decode
    monkeypatch.setattr(wo, "_bulk_capable", lambda idx: False)
    with pytest.raises(ValueError, match="needs sm_90 or newer"):
        decode.measure_decode(["qwen3-8b:o_proj"], [1], ["fp8"], cublas=False, schedule="bulk",
                              copy={"rate_p50": 1.0})
