"""The shared-memory weight ring (loader='smem', issue 7) on the GPU: bit-identical to the
register ring at one CTA per tile (every format, both act dtypes, every stage count, both
schedules), exact on one-hot activations over every code, against float64 with splits and
stream-K at odd N and K, poisoned outputs, the workspace left clean, bad options refused."""

import numpy as np
import pytest

from fp8lab.kernels import weight_only as wo

pytestmark = pytest.mark.gpu


def _t(x, act="bf16"):
    import torch
    return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(
        torch.bfloat16 if act == "bf16" else torch.float16).cuda()


def _relerr(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


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


def _nan(M, N, x):
    import torch
    return torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [1, 16])
@pytest.mark.parametrize("stages", wo.SMEM_STAGES)
def test_smem_bit_identical_to_regs_one_split(fmt, act, M, stages):
    """splits = 1 and stream-K with one CTA per tile: the same fp32 sums in the same order as
    the register ring, so the same bits (N = 520: a partial last tile; 11 steps: not a
    multiple of the 3-step chunk, and fewer than ST - 1 ahead at the end)."""
    import torch
    N, K = 520, 1408
    pw, x, _ = _case(fmt, M, N, K, act=act, seed=5 + stages)
    a, b, c = _nan(M, N, x), _nan(M, N, x), _nan(M, N, x)
    wo.gemv_w16(x, pw, out=a, splits=1)
    wo.gemv_w16(x, pw, out=b, splits=1, loader="smem", stages=stages)
    wo.gemv_w16(x, pw, out=c, schedule="streamk", ctas=wo.grid_x(fmt, N, M), loader="smem", stages=stages)
    torch.cuda.synchronize()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16)), (fmt, act, M, stages, "split-K")
    assert torch.equal(a.view(torch.int16), c.view(torch.int16)), (fmt, act, M, stages, "stream-K")
    assert _clean()


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("act", wo.ACT_DTYPES)
@pytest.mark.parametrize("M", [8, 16])
def test_smem_onehot_exact_every_code_and_position(fmt, act, M):
    import torch
    N, K = 64, 256
    codes = wo.all_codes(fmt, N, K, seed=1)
    sc, gs, a = wo.unit_scales(fmt, act, N, K)
    pw = wo.pack_weights(fmt, codes, sc, act=act, global_scale=gs)
    W = wo.emulate_packed(pw)
    dev = pw.to("cuda")
    for r in range(K // M):
        cols = np.arange(M) * (K // M) + r
        x = wo.onehot(M, K, cols, a)
        xt = _t(x, act)
        out = _nan(M, N, xt)
        wo.gemv_w16(xt, dev, out=out, loader="smem")
        assert np.array_equal(out.double().cpu().numpy(), x @ W.T), (fmt, act, M, r)


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 7, 13])
@pytest.mark.parametrize("N,K", [(200, 896), (328, 1664), (96, 128)])
@pytest.mark.parametrize("stages", [4, 8])
def test_smem_vs_float64_splits_streamk_poisoned_clean(fmt, M, N, K, stages):
    pw, x, ref = _case(fmt, M, N, K, seed=M + N + stages)
    steps = K // 128
    runs = [dict(splits=s) for s in sorted({1, min(2, steps), min(3, steps), steps})]
    runs += [dict(schedule="streamk", ctas=c) for c in (3, 5, 1000)] + [dict(), dict(schedule="streamk")]
    for kw in runs:
        for rep in range(2):                                  # the re-run finds the workspace clean
            out = _nan(M, N, x)
            wo.gemv_w16(x, pw, out=out, loader="smem", stages=stages, **kw)
            got = out.double().cpu().numpy()
            assert np.isfinite(got).all(), (kw, rep)
            assert _relerr(got, ref) < 6e-3, (kw, rep)
            assert np.max(np.abs(got - ref) / (np.abs(ref) + 1e-3 * np.abs(ref).max())) < 2.4e-2, (kw, rep)
            assert _clean(), (kw, rep)


def test_smem_launch_config_occupancy():
    pw = wo.pack_weights("fp8", np.zeros((4096, 4096), np.uint8), np.ones((4096, 32))).to("cuda")
    for fmt_stages, want in ((6, 2), (8, 1)):
        cfg = wo.launch_config(pw, 1, loader="smem", stages=fmt_stages)
        assert cfg["ctas_per_sm"] == want and cfg["streamk_ctas_per_sm"] == want, cfg
        assert cfg["smem_bytes"] == wo.smem_ring_bytes("fp8", 1, fmt_stages)
    assert wo.launch_config(pw, 1, loader="smem")["stages"] == wo.default_stages("fp8", 1)


def test_smem_rejects_bad_options():
    pw, x, _ = _case("fp8", 2, 32, 256)
    with pytest.raises(ValueError, match="loader must be one of"):
        wo.gemv_w16(x, pw, loader="tma")
    with pytest.raises(ValueError, match="stages must be one of"):
        wo.gemv_w16(x, pw, loader="smem", stages=3)
    with pytest.raises(ValueError, match="stages applies"):
        wo.gemv_w16(x, pw, stages=4)
    with pytest.raises(ValueError, match="extra_alu"):
        wo.gemv_w16(x, pw, loader="smem", extra_alu=0)
    pw17, x17, _ = _case("fp8", 17, 32, 256)
    with pytest.raises(ValueError, match="M <= 16"):
        wo.gemv_w16(x17, pw17, loader="smem")
