"""triton_blockwise: compile for sm_89 / sm_90 with no GPU; validation; GPU correctness.

The compile tests need triton and cuobjdump, not a GPU (one config compiles in ~1 s).
"""

import numpy as np
import pytest

triton = pytest.importorskip("triton")

from fp8lab.toolchain import sass  # noqa: E402
from fp8lab.kernels import triton_blockwise as tb  # noqa: E402
from fp8lab.toolchain.tools import have_tool  # noqa: E402

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
@pytest.mark.parametrize("variant", [v for v in tb.VARIANTS if v not in tb.GPU_DISABLED])
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


# ---------------------------------------------------------------------------------------
# CPU: Triton's interpreter runs every path's index math (needs torch, not a GPU)

_INTERP_SCRIPT = r'''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np, torch, triton
from fp8lab.kernels import triton_blockwise as tb

M, N, K = 7, 264, 300                       # ragged M, N and a partial last K block
g = torch.Generator().manual_seed(0)
kb, nb = -(-K // 128), -(-N // 128)
a = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fn)
b = (torch.randn(N, K, generator=g) * 2).to(torch.float8_e4m3fn)
sa = (torch.rand(M, kb, generator=g) + 0.5).t().contiguous().t()          # M-major, as cuBLASLt wants
sb = torch.exp2(torch.randint(-3, 4, (nb, kb), generator=g).float())      # a wrong block shows
ref = tb.reference_blockwise_gemm(a.float().numpy(), b.float().numpy(), sa.numpy(), sb.numpy())
scale = (sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1))

def check(out, what):
    o = out.float().numpy().astype(np.float64)
    err = np.linalg.norm(o - ref) / np.linalg.norm(ref)
    # the interpreter truncates fp32 -> bf16 (3.3e-3), the GPU rounds to nearest (1.7e-3)
    assert np.isfinite(o).all() and err < 5e-3, (what, err)
    print(what, f"{err:.2e}")

def fresh():
    return torch.full((M, N), float("nan"), dtype=torch.bfloat16)

for variant in tb.VARIANTS:
    for bm, bn in ((16, 64), (64, 256)):
        out = fresh()
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        tb._blockwise_fp8_kernel[grid](a, b, out, sa, sb, M, N, K, K, K, N, *scale, BLOCK_M=bm, BLOCK_N=bn,
                                       BLOCK_K=tb.DEFAULT_BLOCK_K[variant], GROUP_M=2,
                                       PER_BLOCK=variant != "per_step", INPLACE=variant == "per_block_inplace")
        check(out, f"ptr {variant} {bm}x{bn}")
# KSTEP 2 with K = 300 (3 blocks): a half-masked second iteration (split 1) and masked-out blocks past
# a split's end (split 2: kb_per 2 and 1)
for bw_, bt, split, kstep in ((64, 16, 1, 1), (128, 16, 4, 1), (64, 16, 1, 2), (128, 16, 2, 2)):
    out = fresh()
    ws = torch.full((split * M * N,), float("nan"))
    cnt = torch.zeros(64, dtype=torch.int32)
    tb._blockwise_fp8_swapab_kernel[(triton.cdiv(N, bw_), triton.cdiv(M, bt), split)](
        a, b, out, sa, sb, ws, cnt, M, N, K, K, K, N, *scale, BLOCK_W=bw_, BLOCK_T=bt, SPLIT_K=split, EVEN_K=False,
        KSTEP=kstep)
    assert int(cnt.abs().sum()) == 0, "split-K counters not re-armed"
    check(out, f"swapab {bw_}x{bt} split {split} kstep {kstep}")
try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:
    sys.exit(0)
K2 = 304                                   # TMA needs 16-byte row strides
a2, b2 = torch.nn.functional.pad(a.view(torch.uint8), (0, 4)).view(torch.float8_e4m3fn), \
    torch.nn.functional.pad(b.view(torch.uint8), (0, 4)).view(torch.float8_e4m3fn)
for variant, (bm, bn, persist) in (("per_block", (64, 128, 0)), ("per_block_inplace", (128, 64, 1))):
    out = fresh()
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    tb._blockwise_fp8_tma_kernel[(min(tiles, 2) if persist else tiles,)](
        TensorDescriptor.from_tensor(a2, [bm, 128]), TensorDescriptor.from_tensor(b2, [bn, 128]), out, sa, sb,
        M, N, K2, N, *scale, BLOCK_M=bm, BLOCK_N=bn, GROUP_M=2, INPLACE=variant == "per_block_inplace",
        PERSIST=persist)
    check(out, f"tma {variant} {bm}x{bn} persist {persist}")
'''


@pytest.mark.torch
def test_interpreter_runs_every_path(tmp_path):
    """Every kernel of every path on the CPU through TRITON_INTERPRET=1, against float64:
    ragged tiles, the scale lookups, split-K re-arming, the persistent tile loop."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 9):
        # its interpreter passes int arguments as shape-(1,) arrays, which numpy 2 refuses to
        # turn into range() bounds; the compiled kernels are not affected
        pytest.skip(f"triton {triton.__version__}'s interpreter cannot run range() over run-time ints")
    script = tmp_path / "interp.py"
    script.write_text(_INTERP_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ptr ") == 6 and proc.stdout.count("swapab ") == 4


def test_path_configs_are_valid():
    for v in ("per_block", "per_block_inplace"):
        cfgs = tb.tile_configs(v, "tma")
        assert len(cfgs) >= 12
        for c in cfgs:
            tb._check_tma(v, **c)
            # per_block keeps two fp32 tiles: never more than 192 accumulator registers per thread
            if v == "per_block":
                assert c["BLOCK_M"] * c["BLOCK_N"] * 2 // (32 * c["num_warps"]) <= 192
    for c in tb.tile_configs("per_block", "swapab"):
        tb._check_swapab("per_block", **c)
    with pytest.raises(ValueError, match="per_block variant only"):
        tb.tile_configs("per_block_inplace", "swapab")
    with pytest.raises(ValueError, match="tma path"):
        tb.tile_configs("per_step", "tma")
    with pytest.raises(ValueError, match="path must be one of"):
        tb.tile_configs("per_block", "wgmma")


@pytest.mark.parametrize("M, N, K", [(1, 4096, 4096), (16, 4096, 12288), (1, 7168, 18432), (1, 24576, 4096),
                                     (64, 576, 7168), (7, 264, 300)])
def test_limited_swapab_configs_fill_the_sms(M, N, K):
    cfgs = tb.limited_configs("per_block", "swapab", M, N, K, sms=132)
    full = tb.tile_configs("per_block", "swapab")
    assert 1 <= len(cfgs) <= 4 and all(c in full for c in cfgs)
    n_kb = -(-K // 128)
    for c in cfgs:
        assert c["BLOCK_T"] >= min(M, 64) and c["BLOCK_T"] == min(64, max(16, 1 << (M - 1).bit_length()))
        # every split keeps >= 2 K blocks unless K has fewer than 2 blocks per split anyway
        assert -(-n_kb // c["SPLIT_K"]) >= 2 or c["SPLIT_K"] == 1
    programs = max(-(-N // c["BLOCK_W"]) * -(-M // c["BLOCK_T"]) * c["SPLIT_K"] for c in cfgs)
    big_enough = N * n_kb // 128 >= 2 * 132 * 2      # enough (row block, K block) pairs to share out
    assert programs >= 2 * 132 or not big_enough


@pytest.mark.parametrize("path, variant", [("ptr", "per_block"), ("ptr", "per_step"), ("tma", "per_block"),
                                           ("tma", "per_block_inplace")])
@pytest.mark.parametrize("M", [1, 16, 64, 128, 1024, 8192])
def test_limited_configs_follow_m(path, variant, M):
    cfgs = tb.limited_configs(variant, path, M, 4096, 4096)
    full = tb.tile_configs(variant, path)
    assert 1 <= len(cfgs) <= 4 and all(c in full for c in cfgs)
    if path == "ptr" and M <= 64:
        assert max(c["BLOCK_M"] for c in cfgs) <= 64
    if M >= 1024:
        assert min(c["BLOCK_M"] for c in cfgs) >= 64


def test_set_autotune_validates():
    before = tb.set_autotune()
    try:
        assert tb.set_autotune("full", rep_ms=10)["mode"] == "full"
        with pytest.raises(ValueError, match="'limited' or 'full'"):
            tb.set_autotune("some")
        with pytest.raises(ValueError, match="milliseconds"):
            tb.set_autotune(warmup_ms=0)
    finally:
        tb.set_autotune(before["mode"], warmup_ms=before["warmup_ms"], rep_ms=before["rep_ms"], limit=before["limit"])


def test_autotune_space_follows_the_policy():
    before = tb.set_autotune()
    try:
        tb.set_autotune("limited", limit=2)
        limited = tb.autotune_space("per_block", "swapab", 1, 4096, 12288, sms=132)
        assert limited == tb.limited_configs("per_block", "swapab", 1, 4096, 12288, sms=132, limit=2)
        assert len(limited) == 2
        tb.set_autotune("full")
        assert tb.autotune_space("per_block", "tma", 4096, 4096, 4096, sms=132) == tb.tile_configs("per_block", "tma")
    finally:
        tb.set_autotune(before["mode"], warmup_ms=before["warmup_ms"], rep_ms=before["rep_ms"], limit=before["limit"])


def test_config_text_and_path_of():
    every = {p: tb.tile_configs("per_block", p) for p in tb.PATHS}
    for path, cfgs in every.items():
        texts = [tb.config_text(c) for c in cfgs]
        assert len(set(texts)) == len(texts), path          # the label tells the tiles apart
        assert all(tb.path_of(c) == path for c in cfgs)
    assert tb.config_text(dict(BLOCK_W=128, BLOCK_T=16, SPLIT_K=8, num_warps=4, num_stages=4, KSTEP=1)) == \
        "BW128 BT16 SK8 KS1 w4 s4"


@needs_cuobjdump
@pytest.mark.parametrize("path, kw", [
    ("tma", dict(variant="per_block_inplace", BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)),
    ("tma", dict(variant="per_block", BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4, PERSIST=1)),
    ("swapab", dict(variant="per_block", BLOCK_W=64, BLOCK_T=16, SPLIT_K=8, num_warps=4, num_stages=4,
                    M=1, N=4096, K=12288)),
    ("swapab", dict(variant="per_block", BLOCK_W=128, BLOCK_T=16, SPLIT_K=2, num_warps=4, num_stages=3, KSTEP=2,
                    M=1, N=24576, K=4096)),
])
def test_compile_new_paths_sm90(path, kw, tmp_path):
    """The TMA and swap-AB kernels compile for sm_90 without spills and issue FP8 wgmma (QGMMA);
    the TMA kernel really uses TMA, the split-K epilogue an acquire-release atomic."""
    res = tb.triton_resource_usage(arch="sm_90", path=path, **kw)
    assert res["spill_stores"] in (0, None) and res["stack_bytes"] == 0
    assert _census(res, tmp_path).iloc[0]["mma_types"] == "QGMMA:e4m3.e4m3"
    if path == "tma":
        assert "cp.async.bulk.tensor" in res["ptx"]
    else:
        assert "atom.global.gpu.acq_rel.add" in res["ptx"]


@needs_cuobjdump
def test_inplace_fits_two_programs_per_sm():
    """The point of per_block_inplace on Hopper: one fp32 tile of 128x128 over 8 warps leaves
    <= 128 registers per thread and 96 KB of shared memory: two programs per SM."""
    ip = tb.triton_resource_usage("per_block_inplace", "sm_90", path="tma", BLOCK_M=128, BLOCK_N=128, num_warps=8,
                                  num_stages=3)
    pb = tb.triton_resource_usage("per_block", "sm_90", path="tma", BLOCK_M=128, BLOCK_N=128, num_warps=8,
                                  num_stages=3)
    assert ip["registers"] <= 128 < pb["registers"]
    assert 2 * ip["shared_mem"] <= 227 * 1024


def test_triton_w8a16_sweeps_time_the_tiles_its_autotuner_would_try():
    """Notebook 11 times triton_w8a16's tiles itself (candidate_tiles) instead of trusting the
    autotuner's pick; the list must be the autotuner's own early prune at every M."""
    import types

    from fp8lab.kernels import triton_w8a16 as tw

    as_triton = [types.SimpleNamespace(kwargs=c) for c in tw.tile_configs()]
    for M in (1, 15, 16, 17, 33, 64, 65, 128, 1024, 8192):
        mine = tw.candidate_tiles(M)
        theirs = [c.kwargs for c in tw._prune(as_triton, {"M": M})]
        assert mine == theirs, M
        assert all(c["BLOCK_M"] <= max(16, M if M & (M - 1) == 0 else 1 << M.bit_length()) for c in mine)
    assert [c["BLOCK_M"] for c in tw.candidate_tiles(1)] == [16]
    assert len(tw.candidate_tiles(8192)) == len(tw.tile_configs())
    assert tw.tile_text(tw.tile_configs()[0]) == "128x128 w8 s3"
