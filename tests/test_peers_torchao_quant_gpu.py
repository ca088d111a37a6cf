"""torchao's per-token-group FP8 quantiser (a peer of notebook 06b) through fp8lab's adapter, on the
GPU at shapes nobody tuned it on: every code and scale finite and in range, the codes times the
scales back within e4m3's rounding of the input, and how many codes and scales differ from fp8lab's
reference recipe (reported by the sweep, bounded here). Needs torchao and a CUDA GPU (skips
otherwise)."""

from __future__ import annotations

import pytest

from fp8lab.arms import peer_catalog, registry
from fp8lab.peers import adapters


def test_it_is_a_quantiser_peer_of_06b_with_an_adapter_and_a_style():
    p = peer_catalog.get("peer_torchao_quant_group")
    assert p.kind == "quantiser" and p.notebooks == ("06b",) and p.group == 128
    assert adapters.QUANTISERS["peer_torchao_quant_group"] is adapters.torchao_quant_group
    assert registry.short_label("peer_torchao_quant_group") == "torchao quant"


@pytest.mark.gpu
@pytest.mark.parametrize("M, K", [(1, 256), (7, 1152), (33, 4096), (130, 640)])
def test_torchao_quantiser_at_shapes_it_was_not_tuned_on(M, K):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from fp8lab.kernels import baselines
    from fp8lab.peers import discover

    a = discover.availability("peer_torchao_quant_group")
    if not a.ok:
        pytest.skip(a.reason)
    fn = adapters.torchao_quant_group()
    g = torch.Generator("cuda").manual_seed(M * K)
    x = (torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-3, 2, K, device="cuda")).to(torch.bfloat16)
    q, s = fn(x)
    torch.cuda.synchronize()
    assert q.shape == (M, K) and q.dtype == torch.float8_e4m3fn
    s = s.float().reshape(M, K // 128)
    assert torch.isfinite(s).all() and (s > 0).all()
    qf = q.float()
    assert torch.isfinite(qf).all() and qf.abs().max() <= 448
    back = (qf.reshape(M, K // 128, 128) * s[..., None]).reshape(M, K).double()
    xd = x.double()
    # round-to-nearest e4m3 is within 2^-4 of each normal value, relative; subnormals' absolute
    # error (<= s x 2^-10) is nothing beside the group's norm (>= its amax, 448 s): so per group
    # ||back - x|| <= 2^-4 ||x||, and a wrong scale or layout is off by ~1
    err = (back - xd).reshape(M, K // 128, 128).norm(dim=-1) / xd.reshape(M, K // 128, 128).norm(dim=-1)
    assert float(err.max()) <= 2 ** -4 * 1.01, float(err.max())
    # its scales are fp8lab's recipe (amax / 448 in fp32), up to the rounding of that division
    rq, rs = baselines.quant_act_reference(x)
    assert torch.allclose(s, rs, rtol=2 ** -20, atol=0), float(((s - rs).abs() / rs).max())
