"""triton_blockwise: compile for sm_89 / sm_90 with no GPU; validation; GPU correctness.

The compile tests need triton and cuobjdump, not a GPU (one config compiles in ~1 s).
"""

import numpy as np
import pytest

triton = pytest.importorskip("triton")

from fp8lab import sass  # noqa: E402
from fp8lab.kernels import triton_blockwise as tb  # noqa: E402
from fp8lab.tools import have_tool  # noqa: E402

needs_cuobjdump = pytest.mark.skipif(not have_tool("cuobjdump"), reason="cuobjdump not installed")


def _census(res, tmp_path):
    p = tmp_path / f"{res['variant']}_{res['arch']}.cubin"
    p.write_bytes(res["cubin"])
    return sass.mma_summary(sass.sass_census(p, demangle_names=False))


@needs_cuobjdump
def test_compile_sm90_per_block_uses_wgmma(tmp_path):
    res = tb.triton_resource_usage("per_block", "sm_90", BLOCK_M=64, BLOCK_N=64, num_warps=4,
                                   num_stages=3)
    assert 0 < res["registers"] <= 255
    assert res["cubin"][:4] == b"\x7fELF"
    assert res["num_warps"] == 4 and res["threads"] == 128
    assert res["shared_mem"] > 0
    assert "wgmma.mma_async" in res["ptx"] and ".e4m3.e4m3" in res["ptx"]
    s = _census(res, tmp_path)
    assert len(s) == 1
    row = s.iloc[0]
    assert row["arch"].startswith("sm_90")
    assert row["mma_families"] == "QGMMA"
    assert row["mma_types"] == "QGMMA:e4m3.e4m3"
    # ptxas -v re-run reproduced the cubin (same register count), so spills are known.
    assert res["spill_stores"] is not None and res["spill_stores"] >= 0


@needs_cuobjdump
def test_compile_sm89_per_step_uses_qmma(tmp_path):
    res = tb.triton_resource_usage("per_step", "sm_89", BLOCK_M=32, BLOCK_N=64, num_warps=4,
                                   num_stages=3)
    assert res["BLOCK_K"] == 32
    assert 0 < res["registers"] <= 255
    s = _census(res, tmp_path)
    assert s.iloc[0]["arch"] == "sm_89"
    assert s.iloc[0]["mma_types"] == "QMMA:e4m3.e4m3"


@needs_cuobjdump
def test_per_step_scales_four_times_per_mma(tmp_path):
    """Static SASS shows one loop body per variant, so compare the scale arithmetic per MMA:
    per_step promotes after every 32-wide step (one QMMA group), per_block after four of
    them (BLOCK_K = 32 here for both, so only the promotion point differs)."""
    cfg = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    per_mma = {}
    for v in tb.VARIANTS:
        res = tb.triton_resource_usage(v, "sm_89", **cfg)
        p = tmp_path / f"{v}.cubin"
        p.write_bytes(res["cubin"])
        g = sass.sass_census(p, demangle_names=False).groupby("family")["count"].sum()
        assert g.get("QMMA", 0) > 0
        per_mma[v] = (g.get("FMUL", 0) + g.get("FFMA", 0)) / g["QMMA"]
    assert per_mma["per_step"] == pytest.approx(4 * per_mma["per_block"], rel=0.15)


@pytest.mark.parametrize("M, N, K", [(4096, 4096, 4096), (1, 4096, 12288), (83, 200, 300)])
def test_specialisation_matches_the_jit(M, N, K):
    """The GPU-less compile must see the arguments the JIT would: compare with triton's own
    binder where this triton exposes it (3.9 does)."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.jit import create_function_from_signature
    except ImportError:
        pytest.skip("this triton has no create_function_from_signature")
    k = tb._blockwise_fp8_kernel
    binder = create_function_from_signature(k.signature, k.params, make_backend(GPUTarget("cuda", 90, 32)))

    class Ptr:  # what the binder reads from a tensor: a dtype and an aligned address
        def __init__(self, dtype):
            self.dtype = dtype

        def data_ptr(self):
            return 1 << 20

    ptrs = [Ptr("float8_e4m3fn"), Ptr("float8_e4m3fn"), Ptr("bfloat16"), Ptr("float32"), Ptr("float32")]
    ints = list(tb.launch_ints(M, N, K).values())
    spec = binder(*ptrs, *ints, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, PER_BLOCK=True)[1]
    sig, const, div = tb.launch_specialization(M, N, K)
    for name, (ty, attr) in zip(k.arg_names, spec):
        if name.isupper() and name not in ("M", "N", "K"):
            continue  # the tile constexprs
        if ty == "constexpr":
            assert sig[name] == "constexpr" and const[name] == attr, name
        else:
            assert sig[name] == ty, name
            assert (name in div) == (attr == "D"), name


@pytest.mark.parametrize("kw, match", [
    (dict(variant="per_slice"), "variant must be one of"),
    (dict(BLOCK_K=48), "power of two"),
    (dict(BLOCK_K=16), "BLOCK_K must be >= 32"),
    (dict(BLOCK_K=256), "divide the 128-wide scale block"),
    (dict(BLOCK_M=24), "power of two"),
    (dict(num_warps=3), "num_warps"),
    (dict(num_stages=0), "num_stages"),
    (dict(GROUP_M=0), "GROUP_M"),
    (dict(arch="sm_80"), "needs arch >= sm_89"),
    (dict(arch="hopper"), "arch must look like"),
])
def test_resource_usage_rejects_bad_config(kw, match):
    args = dict(variant="per_block", arch="sm_90") | kw
    with pytest.raises(ValueError, match=match):
        tb.triton_resource_usage(args.pop("variant"), args.pop("arch"), **args)


def test_tile_configs_are_valid():
    for v in tb.VARIANTS:
        cfgs = tb.tile_configs(v)
        assert len(cfgs) >= 8
        for c in cfgs:
            tb._check_tile(v, **c)
            assert 16 <= c["BLOCK_M"] <= 128 and 64 <= c["BLOCK_N"] <= 256
            assert c["num_warps"] in (4, 8) and 3 <= c["num_stages"] <= 5
            assert c["BLOCK_K"] == tb.DEFAULT_BLOCK_K[v]


def test_reference_blockwise_gemm_matches_dequantised_matmul():
    """The float64 reference against a dense formulation: dequantise A and B with their
    broadcast scales, then one matmul (a different route to the same number)."""
    rng = np.random.default_rng(0)
    M, N, K = 7, 200, 300  # N and K not multiples of 128: partial last blocks
    a = rng.standard_normal((M, K))
    b = rng.standard_normal((N, K))
    sa = rng.uniform(0.5, 2, (M, -(-K // 128)))
    sb = rng.uniform(0.5, 2, (-(-N // 128), -(-K // 128)))
    a_deq = a * np.repeat(sa, 128, axis=1)[:, :K]
    b_deq = b * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1)[:N, :K]
    want = a_deq @ b_deq.T
    np.testing.assert_allclose(tb.reference_blockwise_gemm(a, b, sa, sb), want, rtol=0,
                               atol=1e-12 * np.abs(want).max())


def test_flops_bytes():
    f, b = tb.flops_bytes(4096, 4096, 4096)
    assert f == 2 * 4096 ** 3
    assert b == 2 * 4096 * 4096 + 4 * (4096 * 32 + 32 * 32) + 2 * 4096 * 4096


# ---------------------------------------------------------------------------------------
# GPU: correctness of both variants and the wrapper's validation

def _fp8_inputs(torch, M, N, K, device="cuda", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    kb, nb = -(-K // 128), -(-N // 128)
    a = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(M, kb, generator=g) + 0.5
    sb = torch.rand(nb, kb, generator=g) + 0.5
    return [t.to(device) for t in (a, b, sa, sb)]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", tb.VARIANTS)
@pytest.mark.parametrize("M, N, K", [(1, 256, 256), (7, 192, 384), (83, 320, 640), (256, 512, 1024)])
def test_gpu_matches_reference(variant, M, N, K):
    torch = pytest.importorskip("torch")
    a, b, sa, sb = _fp8_inputs(torch, M, N, K)
    ref = tb.reference_blockwise_gemm(a.float().cpu().numpy(), b.float().cpu().numpy(),
                                      sa.cpu().numpy(), sb.cpu().numpy())
    for cfg in (None, dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3),
                dict(BLOCK_M=64, BLOCK_N=256, num_warps=8, num_stages=3)):
        out = tb.blockwise_fp8_gemm(a, b, sa, sb, variant=variant, config=cfg)
        assert out.dtype == torch.bfloat16 and out.shape == (M, N)
        got = out.float().cpu().numpy().astype(np.float64)
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        assert rel < 1e-2, (variant, cfg, rel)  # bf16 output: ~4e-3 at most
    # M-major activation scales (the cuBLASLt layout) give the same result.
    sa_mmajor = sa.t().contiguous().t()
    out = tb.blockwise_fp8_gemm(a, b, sa_mmajor, sb, variant=variant)
    got = out.float().cpu().numpy().astype(np.float64)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-2


@pytest.mark.gpu
def test_gpu_wrapper_validation():
    torch = pytest.importorskip("torch")
    a, b, sa, sb = _fp8_inputs(torch, 16, 256, 256)
    with pytest.raises(ValueError, match="K differs"):
        tb.blockwise_fp8_gemm(a, b[:, :128].contiguous(), sa, sb)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        tb.blockwise_fp8_gemm(a.to(torch.bfloat16), b, sa, sb)
    with pytest.raises(ValueError, match="a_scale must be"):
        tb.blockwise_fp8_gemm(a, b, sa[:, :1].contiguous(), sb)
    with pytest.raises(ValueError, match="b_scale must be"):
        tb.blockwise_fp8_gemm(a, b, sa, sb.t().contiguous()[:1])
    with pytest.raises(ValueError, match="contiguous"):
        tb.blockwise_fp8_gemm(a.t().contiguous().t(), b, sa, sb)
    with pytest.raises(ValueError, match="float32"):
        tb.blockwise_fp8_gemm(a, b, sa.half(), sb)
    with pytest.raises(ValueError, match="CUDA device"):
        tb.blockwise_fp8_gemm(a.cpu(), b, sa, sb)
    with pytest.raises(ValueError, match="variant"):
        tb.blockwise_fp8_gemm(a, b, sa, sb, variant="per_slice")
