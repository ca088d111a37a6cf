"""The stream-K schedule of the weight-only decode kernels (issue 7) on the GPU: against float64
at odd shapes (N not a multiple of the tile, K steps not divisible by the CTAs, M across the
tile widths and the 64-token blocks), with resident activations and with the two alternating
chunk buffers (act_resident, issue 22), bit-identical to split-K with splits = 1 where every CTA
owns whole tiles, poisoned outputs, and the workspace left clean for the next call."""

import numpy as np
import pytest

from fp8lab.emulate.compare import relerr
from fp8lab.kernels import weight_only as wo

pytestmark = pytest.mark.gpu


def _t(x, act="bf16"):
    import torch
    return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(
        torch.bfloat16 if act == "bf16" else torch.float16).cuda()


def _clean():
    import torch
    torch.cuda.synchronize()
    ws, cnt = wo.workspace(torch.device("cuda"), 1, 1)
    return float(ws.abs().sum()) == 0 and int(cnt.abs().sum()) == 0


def _case(fmt, M, N, K, act="bf16", seed=0):
    d = wo.generate(fmt, M, N, K, act=act, seed=seed)
    pw = wo.pack_weights(fmt, d["codes"], d["scales"], act=act, global_scale=d["global_scale"]).to("cuda")
    ref = wo.reference(fmt, d["act"], d["codes"], d["scales"], d["global_scale"])
    return pw, _t(d["act"], act), ref


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 7, 33, 83])
# 7 and 13 steps; N = 200 and 328 are not multiples of the 128- or 256-row CTA tile
@pytest.mark.parametrize("N,K", [(200, 896), (328, 1664)])
# 3 and 5 CTAs: the steps split unevenly and ranges straddle tile boundaries; 1000: more CTAs
# than units (one unit each)
@pytest.mark.parametrize("ctas", [3, 5, 1000])
# resident activations apply at M <= 16 (these K fit); at M = 33, 83 both take the chunk buffers.
# With 3 or 5 CTAs a CTA's units start mid-tile and run into the next tile, so its resident K
# steps wrap around K.
@pytest.mark.parametrize("resident", [True, False])
def test_streamk_vs_float64_poisoned_and_clean(fmt, M, N, K, ctas, resident):
    import torch
    pw, x, ref = _case(fmt, M, N, K, seed=M + N + ctas)
    tol = 6e-3
    for rep in range(2):                                     # the re-run finds the workspace clean
        out = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
        wo.gemv_w16(x, pw, out=out, schedule="streamk", ctas=ctas, act_resident=resident)
        got = out.double().cpu().numpy()
        assert np.isfinite(got).all(), (rep, np.argwhere(~np.isfinite(got))[:5])
        assert relerr(got, ref) < tol, rep
        assert np.max(np.abs(got - ref) / (np.abs(ref) + 1e-3 * np.abs(ref).max())) < 4 * tol, rep
        assert _clean(), rep


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 16])
def test_streamk_whole_tiles_bit_identical_to_one_split(fmt, act, M):
    """ctas = tiles along N: each CTA owns one whole tile (no reduction), the same fp32 sums in
    the same order as split-K with splits = 1."""
    import torch
    N, K = 520, 1152                                         # 9 steps; a partial last tile
    pw, x, _ = _case(fmt, M, N, K, act=act, seed=5)
    plan = wo.streamk_plan(fmt, M, N, K, wo.grid_x(fmt, N, M))
    assert plan["whole_tiles"] and plan["units_per_cta"] == plan["steps"]
    a = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
    b = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
    wo.gemv_w16(x, pw, out=a, splits=1)
    wo.gemv_w16(x, pw, out=b, schedule="streamk", ctas=wo.grid_x(fmt, N, M))
    torch.cuda.synchronize()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert _clean()


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 9, 16])
@pytest.mark.parametrize("K", [1152, 3072])
def test_streamk_resident_bit_identical_to_chunked(fmt, act, M, K):
    """One CTA per whole tile (no reduction, so no atomic order): resident activations and the
    chunk buffers feed the same fp32 sums in the same order. At M = 16, K = 3072 the rows do
    not fit 96 KiB and both calls take the chunk buffers."""
    import torch
    N = 520
    pw, x, _ = _case(fmt, M, N, K, act=act, seed=K + M)
    outs = []
    for resident in (True, False):
        o = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
        wo.gemv_w16(x, pw, out=o, schedule="streamk", ctas=wo.grid_x(fmt, N, M), act_resident=resident)
        outs.append(o)
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0].float()).all()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    assert _clean()


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_streamk_default_ctas_agrees_with_splitk(fmt):
    import torch
    M, N, K = 1, 4096, 4096
    pw, x, ref = _case(fmt, M, N, K, seed=2)
    cfg = wo.launch_config(pw, M)
    assert cfg["streamk_ctas"] == cfg["sms"] * cfg["ctas_per_sm"]
    a = wo.gemv_w16(x, pw)
    b = wo.gemv_w16(x, pw, schedule="streamk")
    torch.cuda.synchronize()
    for o in (a, b):
        assert relerr(o.double().cpu().numpy(), ref) < 6e-3
    assert float((a.float() - b.float()).abs().max()) <= 2 ** -6 * float(a.float().abs().max())
    assert _clean()


def test_streamk_rejects_bad_input():
    pw, x, _ = _case("fp8", 2, 32, 256)
    with pytest.raises(ValueError, match="schedule must be one of"):
        wo.gemv_w16(x, pw, schedule="persistent")
    with pytest.raises(ValueError, match="ctas must be a positive integer"):
        wo.gemv_w16(x, pw, schedule="streamk", ctas=0)
    with pytest.raises(ValueError, match="neither splits"):
        wo.gemv_w16(x, pw, schedule="streamk", splits=2)
    with pytest.raises(ValueError, match="ctas applies"):
        wo.gemv_w16(x, pw, ctas=4)
    with pytest.raises(ValueError, match="act_resident must be True or False"):
        wo.gemv_w16(x, pw, schedule="streamk", act_resident=1)
