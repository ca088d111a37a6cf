"""triton_w8a16's swapab path on a GPU: against float64 at ragged shapes with a poisoned output,
every BLOCK_W / BLOCK_T and splits that leave some programs without K blocks, the rule's config,
back-to-back launches (the split-K counters re-armed), the same bf16 product as the tiles path
where each output gets one partial (SPLIT_K = 1), and bad input refused in one line."""

import numpy as np
import pytest

from fp8lab.emulate.compare import relerr
from fp8lab.kernels import weight_only as wo

from test_weight_only_gpu import _t

pytestmark = pytest.mark.gpu


def _problem(M, N, K, seed):
    import torch
    from fp8lab.kernels import triton_w8a16 as tw
    d = wo.generate("fp8", M, N, K, act="bf16", seed=seed)
    x = _t(d["act"], "bf16")
    q = torch.from_numpy(d["codes"]).cuda()
    s = tw.fold_scales(torch.from_numpy(d["scales"]).to(torch.bfloat16).cuda())
    return x, q, s, tw.reference(d["act"], d["codes"], d["scales"])


@pytest.mark.parametrize("M,N,K", [(1, 96, 384), (7, 200, 640), (16, 4096, 1024), (33, 136, 2048), (64, 264, 256)])
def test_swapab_vs_float64(M, N, K):
    import torch
    from fp8lab.kernels import triton_w8a16 as tw
    x, q, s, ref = _problem(M, N, K, seed=M + N)
    configs = [None] + [dict(BLOCK_W=bw, BLOCK_T=bt, SPLIT_K=sk) for bw in (64, 128) for bt in (16, 64)
                        for sk in (1, 4, 16) if bt >= min(M, 16)] + [dict(SPLIT_K=4, DEQ="cvt")]
    for cfg in configs:
        for _ in range(2):                            # a second launch finds its counters re-armed
            out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
            tw.triton_w8a16(x, q, s, out=out, path="swapab", config=cfg)
            got = out.double().cpu().numpy()
            assert np.isfinite(got).all() and relerr(got, ref) < 8e-3, (cfg, relerr(got, ref))


def test_swapab_both_dequantisations_give_the_same_bits():
    """'trick' and 'cvt' form the same bf16 w x s (exact products rounded once) and run the same
    MMAs in the same order: outputs equal bit for bit."""
    import torch
    from fp8lab.kernels import triton_w8a16 as tw
    x, q, s, _ = _problem(16, 1000, 2048, seed=9)
    a = tw.triton_w8a16(x, q, s, path="swapab", config=dict(SPLIT_K=2, DEQ="trick"))
    b = tw.triton_w8a16(x, q, s, path="swapab", config=dict(SPLIT_K=2, DEQ="cvt"))
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_swapab_one_split_matches_the_tiles_path_closely():
    """Both dequantise to the same bf16 w x s and accumulate in fp32; only the MMA's summation order
    differs, so outputs agree to within a bf16 rounding or two."""
    import torch
    from fp8lab.kernels import triton_w8a16 as tw
    M, N, K = 16, 512, 2048
    x, q, s, ref = _problem(M, N, K, seed=3)
    a = tw.triton_w8a16(x, q, s, path="swapab", config=dict(BLOCK_W=128, BLOCK_T=16, SPLIT_K=1))
    b = tw.triton_w8a16(x, q, s, config=dict(BLOCK_M=16, BLOCK_N=128, num_warps=4, num_stages=3))
    diff = (a.double() - b.double()).abs()
    assert float(diff.max()) <= float(2 * 2.0 ** -7 * torch.maximum(a.double().abs(), b.double().abs()).max())
    assert relerr(a.double().cpu().numpy(), ref) < 8e-3


def test_swapab_refuses_bad_input():
    import torch
    from fp8lab.kernels import triton_w8a16 as tw
    x, q, s, _ = _problem(65, 128, 256, seed=1)
    with pytest.raises(ValueError, match="M <= 64"):
        tw.triton_w8a16(x, q, s, path="swapab")
    with pytest.raises(ValueError, match="swapab SPLIT_K must be one of"):
        tw.triton_w8a16(x[:8].contiguous(), q, s, path="swapab", config=dict(SPLIT_K=3))
    with pytest.raises(ValueError, match="uint8"):
        tw.triton_w8a16(x[:8].contiguous(), q.to(torch.int16), s, path="swapab")
