"""The library baselines against float64 (GPU): a wrong scale layout runs and returns
wrong numbers, so every shape class cuBLASLt treats specially is checked."""

import pytest

pytestmark = pytest.mark.gpu


def _ref(a8, sa, b8, sb):
    import torch
    K = a8.shape[1]
    A = a8.double() * sa.double().repeat_interleave(128, 1)[:, :K]
    B = b8.double() * sb.double().repeat_interleave(128, 0)[: b8.shape[0]].repeat_interleave(128, 1)[:, :K]
    return A @ B.t()


@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (7, 576, 7168), (83, 2112, 1152), (128, 4096, 512),
                                   (256, 24576, 1536)])
def test_cublaslt_blockwise_matches_float64(M, N, K):
    import torch
    from fp8lab.kernels import baselines as bl
    torch.manual_seed(M + N + K)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    a8, sa = bl.quant_act_reference(x)
    b8, sb = bl.quant_weight_reference(w)
    ops = bl.BlockwiseOperands(a8, sa, b8, sb)
    c = ops()
    assert c.shape == (M, N) and c.dtype == torch.bfloat16
    ref = _ref(a8, sa, b8, sb)
    err = float((c.double() - ref).norm() / ref.norm())
    assert err < 4e-3, err
    assert ops.padded_rows == (-M) % 4


def test_quantisers_round_trip_and_zero_groups():
    import torch
    from fp8lab.kernels import baselines as bl
    x = torch.randn(5, 384, device="cuda", dtype=torch.bfloat16)
    x[2, 128:256] = 0                                    # an all-zero group: scale 1, codes 0
    q, s = bl.quant_act_reference(x)
    assert s[2, 1] == 1 and (q[2, 128:256].float() == 0).all()
    # every group's largest magnitude maps to +-448 exactly
    g = q.float().view(5, 3, 128).abs().amax(-1)
    assert ((g == 448) | (s == 1)).all()
    deq = q.float().view(5, 3, 128) * s[..., None]
    rel = (deq.view(5, 384) - x.float()).abs().max() / x.float().abs().max()
    assert rel < 0.07                                    # e4m3 has 3 mantissa bits
    with pytest.raises(ValueError, match="multiple of 128"):
        bl.quant_act_reference(x[:, :200])
    with pytest.raises(ValueError, match="bfloat16"):
        bl.quant_act_reference(x.float())


def test_blockwise_operands_reject_bad_input():
    import torch
    from fp8lab.kernels import baselines as bl
    a8 = torch.zeros(4, 256, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.zeros(136, 256, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="N a multiple of 16"):
        bl.BlockwiseOperands(a8, torch.ones(4, 2, device="cuda"), b8, torch.ones(2, 2, device="cuda"))
    b8 = torch.zeros(128, 256, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="a_scale must be"):
        bl.BlockwiseOperands(a8, torch.ones(2, 4, device="cuda"), b8, torch.ones(1, 2, device="cuda"))
