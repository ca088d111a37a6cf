"""fp8lab.kernels.wgmma_blockwise: fp8lab's own Hopper blockwise FP8 GEMM (TMA + wgmma, warp-specialised).

CPU (nvcc): both variants compile for sm_90a to FP8 wgmma (QGMMA 64x128x32) without spills, with the
warp-specialised register split, three TMA loads, and exactly the wgmma waits the source has (ptxas
adds waits of its own where it cannot prove the accumulators safe: the overlap would be gone).
Shape and argument rules give one clear ValueError.

GPU (H100/H200): both variants against float64 at odd shapes with poisoned outputs, bit-identical to
each other, a wrong scale caught, agreement with cuBLASLt, CUDA-graph replay.
"""
import math

import pytest

from fp8lab.kernels import wgmma_blockwise as wg
from fp8lab.toolchain import tools

needs_nvcc = pytest.mark.skipif(not tools.have_tool("nvcc") or not tools.have_tool("cuobjdump"),
                                reason="nvcc and cuobjdump needed")


@pytest.mark.parametrize("M, N, K", [(1, 8, 128), (7, 576, 1152), (83, 2112, 4096), (4096, 4096, 512)])
def test_check_shapes_accepts(M, N, K):
    wg.check_shapes(M, N, K)


@pytest.mark.parametrize("M, N, K, match", [
    (0, 8, 128, "M must be a positive"), (1, 8, 100, "K must be a multiple of 128"),
    (1, 12, 128, "N must be a multiple of 8"), (1, 8, 1.5, "K must be a positive"),
])
def test_check_shapes_rejects(M, N, K, match):
    with pytest.raises(ValueError, match=match):
        wg.check_shapes(M, N, K)


def test_variants():
    assert wg.get_variant(None) == wg.DEFAULT_VARIANT == "overlap"
    assert [wg.get_variant(v) for v in wg.VARIANTS] == list(wg.VARIANTS)
    with pytest.raises(ValueError, match="variant must be one of"):
        wg.get_variant("fast")


def test_pick_tile_n_fills_the_last_wave():
    assert wg.pick_tile_n(1024, 7168, 132) == 112     # 448 tiles of 128 (4 waves, 85%) vs 512 of 112 (97%)
    assert wg.pick_tile_n(1024, 4096, 132) == 128     # 256 tiles of 128: 2 waves, 97%
    assert wg.pick_tile_n(4096, 7168, 132) == 128     # a tie (14 waves x 128 = 16 x 112): the wider
    assert wg.pick_tile_n(4096, 4096, 132) == 128     # 8 x 128 against 9 x 112: 1.6% less, under the margin
    assert wg.pick_tile_n(128, 112, 132) == 112       # one tile either way: the narrower is less work
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="must be a positive integer"):
            wg.pick_tile_n(bad, 4096, 132)


@needs_nvcc
def test_both_variants_compile_to_qgmma_without_spills_or_added_waits():
    r = wg.compile_standalone()
    # per variant: (wgmma issue sites x 4 k32 steps, fences, waits) as written in the .cu's K loop
    want = {"wait": (4, 1, 1), "overlap": (16, 4, 5)}
    assert set(r) == {"wait", "overlap", "wait/112", "overlap/112"}
    for name, k in r.items():
        v, _, bn = name.partition("/")
        qgmma, fences, waits = want[v]
        bn = int(bn or 128)
        assert k["tile_n"] == bn and k["stages"] == (6 if bn == 128 else 7)
        assert k["registers"] <= 168                      # 384 threads, one CTA per SM
        assert (k["setmaxnreg_alloc"], k["setmaxnreg_dealloc"]) == (232, 40)
        assert k["spill_store_bytes"] == k["spill_load_bytes"] == k["stack_bytes"] == 0
        assert k["sass_stl"] == k["sass_ldl"] == 0
        assert k["sass_qgmma_shapes"] == f"64x{bn}x32.F32.E4M3.E4M3"
        assert k["sass_hmma"] == k["sass_hgmma"] == 0
        assert k["sass_utmaldg"] == 3                     # A, B, the per-token scales
        assert (k["sass_qgmma"], k["wgmma_fences"], k["wgmma_waits"]) == (qgmma, fences, waits), k


# --------------------------------------------------------------------------- GPU
def _inputs(M, N, K, seed):
    """The CUTLASS arm's test inputs (per-token magnitudes, outlier channels, per-block weight
    magnitudes 2^U(-2, 2) so that the wrong block's scale shows), quantised by the reference quantisers."""
    import torch

    from fp8lab.kernels import baselines as bl

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=g, device="cuda")
    x *= torch.exp2(torch.rand(M, 1, generator=g, device="cuda") * 6 - 3)
    x[:, ::37] *= 20.0
    nb, kb = math.ceil(N / 128), K // 128
    w = 0.02 * torch.randn(N, K, generator=g, device="cuda")
    w *= torch.exp2(torch.rand(nb, kb, generator=g, device="cuda") * 4 - 2).repeat_interleave(128, 0)[:N] \
        .repeat_interleave(128, 1)
    a, sa = bl.quant_act_reference(x.bfloat16())
    b, sb = bl.quant_weight_reference(w)
    return {"a": a, "a_scale": sa, "b": b, "b_scale": sb}


def _errors(out, ref):
    d = out.double() - ref
    return {"rel": float(d.norm() / ref.norm()), "max": float(d.abs().max() / ref.abs().max()),
            "diff": wg.calc_diff(out.double().cpu().numpy(), ref.cpu().numpy())}


_CANARY = """
import torch
from fp8lab.experiments import blockwise as bw
from fp8lab.kernels import wgmma_blockwise as wg
s = bw.make_operands(300, 2112, 1152, seed=1)
for v in wg.VARIANTS:
    for bn in wg.TILE_WIDTHS:
        out = wg.WgmmaBlockwise(s.a, s.a_scale, s.b, s.b_scale, variant=v, tile_n=bn)()
        torch.cuda.synchronize()
        print(v, bn, bool(torch.isfinite(out).all()))
"""


@pytest.fixture(scope="module")
def ext():
    """The extension, after one run of both variants in a child process: a kernel that traps or
    faults there fails these tests with its message, and leaves this process's CUDA context (and
    every GPU test after these in `make test-gpu`) intact."""
    import subprocess
    import sys

    ok, why = wg.available()
    if not ok:
        pytest.skip(why)
    ext = wg.load_extension()          # built here first: the child imports the cached build
    try:
        r = subprocess.run([sys.executable, "-c", _CANARY], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("wgmma_blockwise: the child's first launches did not finish in 300 s")
    if r.returncode != 0:
        pytest.fail(f"wgmma_blockwise crashed in a child process (exit {r.returncode}): "
                    f"{(r.stderr or r.stdout)[-800:]}")
    return ext


@pytest.mark.gpu
@pytest.mark.parametrize("K", [128, 1152, 4096])
@pytest.mark.parametrize("N", [8, 136, 576, 2112])
@pytest.mark.parametrize("M", [1, 7, 83, 128, 300, 4096])
def test_matches_float64_and_the_variants_agree_bit_for_bit(ext, M, N, K):
    import torch

    d = _inputs(M, N, K, seed=M * 7 + N + K)
    ref = wg.reference(**d)
    outs = {}
    for v in wg.VARIANTS:
        ops = wg.WgmmaBlockwise(**d, variant=v)
        ops.out.fill_(float("nan"))                       # poison: a tile never stored stays NaN
        out = ops()
        torch.cuda.synchronize()
        assert out.shape == (M, N) and out.dtype == torch.bfloat16 and out.data_ptr() == ops.out.data_ptr()
        assert torch.isfinite(out).all(), v
        e = _errors(out, ref)
        assert e["rel"] < 4e-3 and e["max"] < 8e-3 and e["diff"] < 2e-5, (v, e)
        outs[v] = out.clone()
    assert torch.equal(outs["wait"], outs["overlap"])     # same operations in the same order


@pytest.mark.gpu
@pytest.mark.parametrize("K", [128, 1152])
@pytest.mark.parametrize("N", [8, 136, 240, 576, 2112])
@pytest.mark.parametrize("M", [1, 83, 300])
def test_the_112_wide_tile_takes_each_columns_own_weight_scale(ext, M, N, K):
    """Tiles of 112 columns straddle the 128-wide weight scale blocks (at N = 240: columns 112-127 in
    block 0, 128-223 in block 1): against float64, and bit-identical in both variants."""
    import torch

    d = _inputs(M, N, K, seed=M * 5 + N + K)
    ref = wg.reference(**d)
    outs = {}
    for v in wg.VARIANTS:
        ops = wg.WgmmaBlockwise(**d, variant=v, tile_n=112)
        assert ops.tile_n == 112
        ops.out.fill_(float("nan"))
        out = ops()
        torch.cuda.synchronize()
        assert torch.isfinite(out).all(), v
        e = _errors(out, ref)
        assert e["rel"] < 4e-3 and e["max"] < 8e-3 and e["diff"] < 2e-5, (v, e)
        outs[v] = out.clone()
    assert torch.equal(outs["wait"], outs["overlap"])


@pytest.mark.gpu
@pytest.mark.parametrize("group_m", [1, 3, 64])
def test_the_tile_walk_covers_every_tile(ext, group_m):
    import torch

    d = _inputs(1000, 1160, 384, seed=group_m)            # 8 x 10 tiles, partial in M and N
    ops = wg.WgmmaBlockwise(**d, group_m=group_m)
    ops.out.fill_(float("nan"))
    out = ops()
    assert torch.isfinite(out).all()
    assert _errors(out, wg.reference(**d))["rel"] < 4e-3


@pytest.mark.gpu
def test_a_wrong_scale_is_caught(ext):
    """The tolerance must fail a kernel that reads the wrong scale."""
    d = _inputs(83, 576, 1152, seed=5)
    ref = wg.reference(**d)
    bad_sb = d["b_scale"].flip(0).contiguous()
    assert _errors(wg.WgmmaBlockwise(**dict(d, b_scale=bad_sb))(), ref)["rel"] > 5e-2
    bad_sa = d["a_scale"].roll(1, dims=0).contiguous()
    assert _errors(wg.WgmmaBlockwise(**dict(d, a_scale=bad_sa))(), ref)["rel"] > 5e-2


@pytest.mark.gpu
def test_agrees_with_cublaslt(ext):
    from fp8lab.kernels import baselines as bl

    d = _inputs(128, 2112, 4096, seed=11)
    ref = wg.reference(**d)
    ours, theirs = wg.WgmmaBlockwise(**d)(), bl.BlockwiseOperands(**d)()
    assert _errors(ours, ref)["rel"] < 4e-3 and _errors(theirs, ref)["rel"] < 4e-3
    assert float((ours.double() - theirs.double()).norm() / ref.norm()) < 4e-3


@pytest.mark.gpu
def test_cuda_graph_replay(ext):
    import torch

    d = _inputs(7, 2112, 1152, seed=13)
    ops = wg.WgmmaBlockwise(**d)
    eager = ops().clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        ops()
    torch.cuda.current_stream().wait_stream(stream)
    ops.out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(ops.out, eager)


@pytest.mark.gpu
def test_bad_arguments_are_one_clear_error(ext):
    import torch

    d = _inputs(7, 576, 1152, seed=1)
    with pytest.raises(ValueError, match="variant must be one of"):
        wg.WgmmaBlockwise(**d, variant="fast")
    with pytest.raises(ValueError, match="group_m must be a positive integer"):
        wg.WgmmaBlockwise(**d, group_m=0)
    for bad in (64, 256, True, "112"):
        with pytest.raises(ValueError, match="tile_n must be one of"):
            wg.WgmmaBlockwise(**d, tile_n=bad)
    with pytest.raises(ValueError, match="b_scale must be"):
        wg.WgmmaBlockwise(**dict(d, b_scale=d["b_scale"][:, :-1]))
    with pytest.raises(ValueError, match="out must be"):
        wg.WgmmaBlockwise(**d, out=torch.empty((7, 576), dtype=torch.float32, device="cuda"))
