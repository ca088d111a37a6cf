"""The CUTLASS Hopper blockwise FP8 arm (cutlass_blockwise_sm90).

CPU: the include-dir lookup, shape validation, the scale-layout conversion against a model of CuTe
layouts, the SASS summary parser. With FP8LAB_SLOW=1 also: that model against CuTe itself (a host-only
probe compiled with nvcc, 10-20 s once, then cached) and a full kernel compile (~1-1.5 min) checked for
QGMMA, the setmaxnreg split and no spills.
GPU (H100/H200): the kernel against float64 at odd shapes with poisoned outputs, a deliberately wrong
scale layout that the tolerance must catch, bad-input ValueErrors, CUDA-graph replay.
"""

import math
import os
from pathlib import Path

import numpy as np
import pytest

from fp8lab.toolchain import tools
from fp8lab.kernels import cutlass_blockwise_sm90 as cb


def _have_cutlass() -> bool:
    try:
        cb.cutlass_include_dir()
        return True
    except cb.CutlassNotFound:
        return False


needs_cutlass = pytest.mark.skipif(not _have_cutlass(), reason="CUTLASS headers not installed "
                                   "(pip install --no-deps nvidia-cutlass)")
needs_nvcc = pytest.mark.skipif(not tools.have_tool("nvcc"), reason="nvcc not installed")


# --------------------------------------------------------------------------- include dir
def _fake_include(root: Path, *, marker=True, version=(4, 2, 0)) -> Path:
    (root / "cute").mkdir(parents=True)
    (root / "cute" / "tensor.hpp").write_text("")
    if marker:
        (root / cb._MARKER).parent.mkdir(parents=True)
        (root / cb._MARKER).write_text("")
    (root / "cutlass" / "version.h").parent.mkdir(parents=True, exist_ok=True)
    (root / "cutlass" / "version.h").write_text(
        "".join(f"#define CUTLASS_{k} {v}\n" for k, v in zip(("MAJOR", "MINOR", "PATCH"), version)))
    return root


@needs_cutlass
def test_include_dir_from_the_wheel(monkeypatch):
    monkeypatch.delenv(cb.INCLUDE_ENV, raising=False)
    inc = cb.cutlass_include_dir()
    assert (inc / "cute" / "tensor.hpp").is_file() and (inc / cb._MARKER).is_file()
    assert inc.parts[-3:] == ("cutlass_library", "source", "include")
    major, minor, _ = map(int, cb.cutlass_version(inc).split("."))
    assert (major, minor) >= (3, 9)


def test_include_dir_env_override(tmp_path, monkeypatch):
    inc = _fake_include(tmp_path / "inc", version=(9, 8, 7))
    monkeypatch.setenv(cb.INCLUDE_ENV, str(inc))
    assert cb.cutlass_include_dir() == inc.resolve()
    assert cb.cutlass_version() == "9.8.7"


def test_include_dir_env_without_the_blockwise_collective(tmp_path, monkeypatch):
    monkeypatch.setenv(cb.INCLUDE_ENV, str(_fake_include(tmp_path / "old", marker=False)))
    with pytest.raises(cb.CutlassNotFound, match="blockwise_scaling.hpp"):
        cb.cutlass_include_dir()
    monkeypatch.setenv(cb.INCLUDE_ENV, str(tmp_path / "missing"))
    with pytest.raises(cb.CutlassNotFound, match="cute/tensor.hpp"):
        cb.cutlass_include_dir()


def test_include_dir_absent_says_how_to_install(monkeypatch):
    monkeypatch.delenv(cb.INCLUDE_ENV, raising=False)
    real = cb.importlib.util.find_spec
    monkeypatch.setattr(cb.importlib.util, "find_spec",
                        lambda name, *a: None if name == "cutlass_library" else real(name, *a))
    with pytest.raises(cb.CutlassNotFound, match=r"pip install --no-deps nvidia-cutlass.*FP8LAB_CUTLASS_INCLUDE"):
        cb.cutlass_include_dir()
    ok, why = cb.available()
    assert not ok and "CUTLASS headers not found" in why


def test_available_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(cb.INCLUDE_ENV, str(_fake_include(tmp_path / "inc")))
    ok, why = cb.available()
    try:
        import torch
    except ImportError:
        assert (ok, why) == (False, "torch is not installed")
        return
    if not torch.cuda.is_available():
        assert not ok and "no CUDA device" in why
    elif torch.cuda.get_device_capability() != (9, 0):
        assert not ok and "sm_90" in why
    else:
        assert ok and why == ""


# --------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("M, N, K", [(1, 8, 128), (7, 576, 1152), (83, 2112, 4096), (4096, 4096, 512)])
def test_check_shapes_accepts(M, N, K):
    cb.check_shapes(M, N, K)


@pytest.mark.parametrize("M, N, K, match", [
    (0, 128, 128, "M must be a positive integer"),
    (4, 128, 200, "K must be a multiple of 128"),
    (4, 12, 128, "N must be a multiple of 8"),       # 24-byte bf16 rows: TMA stores 16-byte units
    (4, 136.5, 128, "N must be a positive integer"),
    (2**31, 128, 128, "M must fit in int32"),
])
def test_check_shapes_rejects(M, N, K, match):
    with pytest.raises(ValueError, match=match):
        cb.check_shapes(M, N, K)


# --------------------------------------------------------------------------- scale layouts
def test_cute_offset_hand_examples():
    # ((1, 8), (128, 3)) : ((0, 1), (0, 8)) is the SFA of M = 7 (padded to 8), K = 384
    shape, stride = ((1, 8), (128, 3)), ((0, 1), (0, 8))
    assert cb.cute_offset((0, 0), shape, stride) == 0
    assert cb.cute_offset((5, 127), shape, stride) == 5          # same K block: only m moves
    assert cb.cute_offset((5, 128), shape, stride) == 13         # next K block: + sfa_ld
    assert cb.cute_offset((6, 383), shape, stride) == 6 + 2 * 8
    assert cb.cute_offset(((0, 6), (127, 2)), shape, stride) == 22   # hierarchical coordinate
    with pytest.raises(ValueError, match="out of range"):
        cb.cute_offset((8, 0), shape, stride)


def test_layouts_hand_derived():
    # What cute::print showed for these problems (the probe test below re-derives them from CuTe).
    assert cb.sfa_layout(7, 384) == (((1, 8), (128, 3), 1), ((0, 1), (0, 8), 24))
    assert cb.sfa_layout(8, 384) == cb.sfa_layout(7, 384)
    assert cb.sfb_layout(136, 384) == (((128, 2), (128, 3), 1), ((0, 3), (0, 1), 6))
    assert [cb.sfa_leading_dim(m) for m in (1, 3, 4, 5, 83, 128)] == [4, 4, 4, 8, 84, 128]


@pytest.mark.parametrize("M, K", [(1, 128), (7, 384), (8, 256), (83, 1152)])
def test_sfa_conversion_matches_the_layout(M, K):
    rng = np.random.default_rng(M)
    kb = K // 128
    a_scale = rng.uniform(0.5, 2.0, size=(M, kb)).astype(np.float32)
    buf = cb.prepare_sfa_numpy(a_scale)
    Mp = cb.sfa_leading_dim(M)
    assert buf.shape == (kb, Mp) and buf.dtype == np.float32 and Mp % 4 == 0 and Mp - M < 4
    shape, stride = cb.sfa_layout(M, K)
    for m in range(M):
        for k in range(0, K, 61):                      # every K block, several k inside each
            assert buf.flat[cb.cute_offset((m, k, 0), shape, stride)] == a_scale[m, k // 128]
    assert np.all(buf[:, M:] == 1.0)                   # padding: finite, never NaN
    # The same buffer read as the (M, K/128) view the kernel sees, M-major with leading dim Mp:
    view = np.lib.stride_tricks.as_strided(buf, shape=(M, kb), strides=(4, 4 * Mp))
    np.testing.assert_array_equal(view, a_scale)


@pytest.mark.parametrize("N, K", [(8, 128), (128, 384), (136, 256), (576, 1152)])
def test_sfb_conversion_matches_the_layout(N, K):
    nb, kb = math.ceil(N / 128), K // 128
    b_scale = np.asfortranarray(np.arange(nb * kb, dtype=np.float32).reshape(nb, kb) + 1)
    buf = cb.prepare_sfb_numpy(b_scale)
    assert buf.flags.c_contiguous and buf.shape == (nb, kb)
    shape, stride = cb.sfb_layout(N, K)
    for n in range(0, N, 7):
        for k in range(0, K, 53):
            assert buf.flat[cb.cute_offset((n, k, 0), shape, stride)] == b_scale[n // 128, k // 128]


slow_only = pytest.mark.skipif(os.environ.get("FP8LAB_SLOW") != "1", reason="runs nvcc (10-90 s on 2 cores): "
                               "set FP8LAB_SLOW=1")


@needs_cutlass
@needs_nvcc
@pytest.mark.slow
@slow_only
def test_layout_model_matches_cute_itself():
    """The numpy model above against the layouts CuTe builds from the kernel's own config header."""
    M, N, K = 7, 136, 384
    probe = cb.probe_layouts(M, N, K)
    assert probe["sfa"] == cb.sfa_layout(M, K)
    assert probe["sfb"] == cb.sfb_layout(N, K)
    sh, st = cb.sfa_layout(M, K)
    model = np.array([[cb.cute_offset((m, k, 0), sh, st) for k in range(K)] for m in range(M)])
    np.testing.assert_array_equal(probe["sfa_offsets"], model)
    sh, st = cb.sfb_layout(N, K)
    model = np.array([[cb.cute_offset((n, k, 0), sh, st) for k in range(K)] for n in range(N)])
    np.testing.assert_array_equal(probe["sfb_offsets"], model)


def test_parse_cute_layout():
    assert cb.parse_cute_layout("((_1,8),(_128,3),1):((_0,_1),(_0,8),24)") == \
        (((1, 8), (128, 3), 1), ((0, 1), (0, 8), 24))
    with pytest.raises(ValueError, match="not a CuTe layout"):
        cb.parse_cute_layout("((1,8)")


# --------------------------------------------------------------------------- compile
# Lines of `cuobjdump -sass` from this kernel (nvcc 13.0, sm_90a): the parser must read them.
_SASS = """
        /*0ea0*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8 ;                     /* 0x000000e8000079c8 */
        /*1350*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16], RZ, !UPT ;   /* 0x01e00000101879f3 */
        /*13c0*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16], R24 ;        /* 0x01e00000101879f3 */
        /*1400*/              @!P0 FMUL R5, R5, R7 ;                                           /* 0x0000000705058220 */
        /*2eb0*/                   UTMASTG.3D [UR20], [UR16] ;                                  /* 0x00000014100073b5 */
        /*4390*/                   USETMAXREG.DEALLOC.CTAPOOL 0x28 ;                            /* 0x00000028000079c8 */
        /*4790*/                   LDGSTS.E.LTC128B [R7+0x35000], desc[UR24][R2.64] ;           /* 0x3500000002077fae */
        /*5350*/                   UTMALDG.3D [UR8], [UR22], desc[UR30] ;                       /* 0x00001e08160075b4 */
"""


def test_sass_summary_reads_the_warp_specialised_kernel():
    s = cb.sass_summary(_SASS)
    assert s["sass_qgmma"] == 2 and s["sass_hgmma"] == 0 and s["sass_hmma"] == 0
    assert s["sass_qgmma_shapes"] == "64x128x32.F32.E4M3.E4M3"
    assert (s["setmaxnreg_alloc"], s["setmaxnreg_dealloc"]) == (232, 40)
    assert s["sass_utmaldg"] == 1 and s["sass_utmastg"] == 1 and s["sass_ldgsts"] == 1
    assert s["sass_stl"] == 0 and s["sass_instructions"] == 8


@needs_cutlass
def test_nvcc_args_target_sm90a_only(tmp_path):
    args = cb.nvcc_args(tmp_path / "k.cubin")
    assert "-arch=sm_90a" in args and "--expt-relaxed-constexpr" in args and "-DNDEBUG" in args
    assert f"-I{cb.cutlass_include_dir()}" in args and args[-1] == str(cb.SOURCE)
    assert cb.GENCODE == "-gencode=arch=compute_90a,code=sm_90a"


@needs_cutlass
@needs_nvcc
@pytest.mark.slow
@slow_only
def test_kernel_compiles_to_qgmma_without_spills():
    r = cb.compile_standalone()
    assert r["arch"] == "sm_90a"
    assert r["sass_qgmma"] >= 4 and r["sass_hmma"] == 0 and r["sass_hgmma"] == 0
    assert "64x128x32.F32.E4M3.E4M3" in r["sass_qgmma_shapes"]
    # Warp specialisation: 384 threads launch with 65536 / 384 -> 168 registers, then the producer
    # warpgroup gives registers back (setmaxnreg.dec 40) and the two consumers take them (inc 232).
    assert r["registers"] <= 168
    assert (r["setmaxnreg_alloc"], r["setmaxnreg_dealloc"]) == (232, 40)
    assert r["spill_store_bytes"] == r["spill_load_bytes"] == r["stack_bytes"] == 0
    assert r["sass_stl"] == r["sass_ldl"] == 0
    assert r["sass_utmaldg"] >= 3       # A, B and the per-token SFA through TMA
    assert r["sass_ldgsts"] >= 1        # the 128x128 SFB through cp.async


# --------------------------------------------------------------------------- GPU
def _inputs(M, N, K, seed):
    """On-GPU version of mma_blockwise.generate_inputs' distribution (per-token magnitudes, outlier
    channels, per-block weight magnitudes 2^U(-2, 2) so that reading the wrong block's scale shows),
    quantised by the reference quantisers. Scales come back row-major (the copy path of prepare_sfa)."""
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
            "diff": cb.calc_diff(out.double().cpu().numpy(), ref.cpu().numpy())}


@pytest.fixture(scope="module")
def ext():
    ok, why = cb.available()
    if not ok:
        pytest.skip(why)
    return cb.load_extension()   # first build: ~1.5 min of nvcc


@pytest.mark.gpu
@pytest.mark.parametrize("K", [512, 1152, 4096])
@pytest.mark.parametrize("N", [128, 576, 2112, 4096])
@pytest.mark.parametrize("M", [1, 7, 83, 128, 4096])
def test_matches_float64(ext, M, N, K):
    import torch

    d = _inputs(M, N, K, seed=M * 7 + N + K)
    ref = cb.reference(**d)
    ops = cb.CutlassBlockwise(**d)
    ops.out.fill_(float("nan"))                       # poison: a tile never stored stays NaN
    out = ops()
    torch.cuda.synchronize()
    assert out.shape == (M, N) and out.dtype == torch.bfloat16 and out.data_ptr() == ops.out.data_ptr()
    assert torch.isfinite(out).all()
    e = _errors(out, ref)
    # bf16 output rounding (2^-9 relative) dominates: per-128 promotion keeps the fp32 sums exact enough
    assert e["rel"] < 4e-3 and e["max"] < 8e-3 and e["diff"] < 2e-5, e
    # The one-shot path (arguments rebuilt per call) runs the same kernel on the same data.
    again = cb.cutlass_blockwise_sm90(**d, out=torch.full_like(out, float("nan")))
    assert torch.equal(again, out)


@pytest.mark.gpu
def test_m_major_scales_take_the_zero_copy_path(ext):
    import torch

    d = _inputs(128, 576, 1152, seed=3)
    row_major = cb.CutlassBlockwise(**d)
    m_major = dict(d, a_scale=d["a_scale"].t().contiguous().t())          # strides (1, M), M % 4 == 0
    ops = cb.CutlassBlockwise(**m_major)
    assert ops.sfa.data_ptr() == m_major["a_scale"].data_ptr()           # no copy
    assert row_major.sfa.data_ptr() != d["a_scale"].data_ptr()
    assert torch.equal(ops(), row_major())


@pytest.mark.gpu
def test_a_wrong_scale_layout_is_caught(ext):
    """The tolerance must fail a kernel that reads the wrong scale: give it transposed-order scales."""
    d = _inputs(83, 576, 1152, seed=5)
    ref = cb.reference(**d)
    bad_sb = d["b_scale"].flip(0).contiguous()                              # wrong weight block per tile
    assert _errors(cb.CutlassBlockwise(**dict(d, b_scale=bad_sb))(), ref)["rel"] > 5e-2
    bad_sa = d["a_scale"].roll(1, dims=0).contiguous()                      # a neighbour token's scale
    assert _errors(cb.CutlassBlockwise(**dict(d, a_scale=bad_sa))(), ref)["rel"] > 5e-2


@pytest.mark.gpu
def test_agrees_with_cublaslt(ext):
    from fp8lab.kernels import baselines as bl

    d = _inputs(128, 2112, 4096, seed=11)
    ref = cb.reference(**d)
    ours, theirs = cb.CutlassBlockwise(**d)(), bl.BlockwiseOperands(**d)()
    assert _errors(ours, ref)["rel"] < 4e-3 and _errors(theirs, ref)["rel"] < 4e-3
    assert float((ours.double() - theirs.double()).norm() / ref.norm()) < 4e-3


@pytest.mark.gpu
def test_cuda_graph_replay(ext):
    import torch

    d = _inputs(7, 2112, 1152, seed=13)
    ops = cb.CutlassBlockwise(**d)
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
def test_wrapper_validation(ext):
    import torch

    d = _inputs(8, 256, 256, seed=0)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        cb.CutlassBlockwise(**dict(d, a=d["a"].float()))
    with pytest.raises(ValueError, match="contiguous"):
        cb.CutlassBlockwise(**dict(d, b=d["b"].t().contiguous().t()))
    with pytest.raises(ValueError, match="16-byte aligned"):
        a = torch.empty(8 * 256 + 8, dtype=torch.uint8, device="cuda")[8:].view(torch.float8_e4m3fn).view(8, 256)
        cb.CutlassBlockwise(**dict(d, a=a))
    with pytest.raises(ValueError, match="multiple of 128"):
        cb.CutlassBlockwise(d["a"][:, :200].contiguous(), d["a_scale"][:, :1], d["b"][:, :200].contiguous(),
                            d["b_scale"][:, :1])
    with pytest.raises(ValueError, match="N must be a multiple of 8"):
        cb.CutlassBlockwise(**dict(d, b=d["b"][:12].contiguous(), b_scale=d["b_scale"][:1]))
    with pytest.raises(ValueError, match=r"a_scale must be \(M, K/128\)"):
        cb.CutlassBlockwise(**dict(d, a_scale=d["a_scale"][:, :1]))
    with pytest.raises(ValueError, match=r"b_scale must be \(ceil\(N/128\), K/128\)"):
        cb.CutlassBlockwise(**dict(d, b_scale=d["b_scale"][:1]))
    with pytest.raises(ValueError, match="torch.float32"):
        cb.CutlassBlockwise(**dict(d, b_scale=d["b_scale"].double()))
    with pytest.raises(ValueError, match="bfloat16"):
        cb.CutlassBlockwise(**d, out=torch.empty(8, 256, device="cuda"))
    with pytest.raises(ValueError, match=r"out must be \(M, N\)"):
        cb.cutlass_blockwise_sm90(**d, out=torch.empty(8, 128, device="cuda", dtype=torch.bfloat16))


# --------------------------------------------------------------------------- configs (CPU)
def test_config_table_is_consistent():
    assert cb.DEFAULT_CONFIG in cb.CONFIGS and cb.get_config(None).name == cb.DEFAULT_CONFIG
    d = cb.get_config(None)
    assert (d.k.tile_m, d.k.tile_n, d.k.cluster_m, d.k.cluster_n) == (*cb.TILE_MNK[:2], *cb.CLUSTER_MNK[:2])
    assert not d.k.pingpong and not d.k.streamk and d.raster == "heuristic" and d.swizzle == 1
    assert {c.kernel for c in cb.CONFIGS.values()} == set(cb.KERNELS)   # no kernel built for nothing
    for c in cb.CONFIGS.values():
        k = c.k
        assert c.raster in cb.RASTER and c.swizzle in cb.SWIZZLES
        # one weight scale per N tile (SFB on cp.async) and a K tile = the scale block
        assert k.tile_n == 128 and k.tile_m in (64, 128)
        # the register budget: two fp32 accumulators of (tile_m / consumer warpgroups) x tile_n per thread
        per_wg_rows = k.tile_m if k.pingpong else k.tile_m // 2
        assert 2 * per_wg_rows * k.tile_n // 128 <= 128
        assert k.cluster_m * k.cluster_n <= 2
    assert cb.get_config("pingpong_64x128").k.schedule == "KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum"
    assert cb.get_config(cb.CONFIGS["coop_128x128_c2x1"]).name == "coop_128x128_c2x1"


@pytest.mark.parametrize("bad", ["coop_128x256", "", "COOP_128x128", 3, ("coop_128x128",)])
def test_unknown_config_names_the_known_ones(bad):
    with pytest.raises(ValueError, match=r"unknown cutlass_blockwise_sm90 config .*known configs: \[.*'coop_128x128'"):
        cb.get_config(bad)


def test_kernel_defines_and_nvcc_args():
    k = cb.KERNELS["coop_128x128_c2x1"]
    assert "FP8LAB_CUTLASS_CLUSTER_M=2" in k.defines() and "FP8LAB_CUTLASS_KERNEL=coop_128x128_c2x1" in k.defines()
    assert "FP8LAB_CUTLASS_STREAMK=1" in cb.KERNELS["coop_128x128_streamk"].defines()
    with pytest.raises(ValueError, match="unknown cutlass_blockwise_sm90 kernel"):
        cb.get_kernel("coop_256x128")


@needs_cutlass
def test_nvcc_args_select_the_kernel(tmp_path):
    args = cb.nvcc_args(tmp_path / "k.cubin", kernel="pingpong_64x128")
    assert "-DFP8LAB_CUTLASS_PINGPONG=1" in args and "-DFP8LAB_CUTLASS_TILE_M=64" in args
    assert "-DFP8LAB_CUTLASS_KERNEL=coop_128x128" in cb.nvcc_args(tmp_path / "k.cubin")


def test_built_kernels_env(monkeypatch):
    monkeypatch.delenv(cb.KERNELS_ENV, raising=False)
    assert cb.built_kernels() == list(cb.KERNELS)
    monkeypatch.setenv(cb.KERNELS_ENV, "pingpong_64x128, coop_128x128")
    assert cb.built_kernels() == ["coop_128x128", "pingpong_64x128"]          # table order
    monkeypatch.setenv(cb.KERNELS_ENV, "coop_128x128,nope")
    with pytest.raises(ValueError, match="unknown cutlass_blockwise_sm90 kernel 'nope'"):
        cb.built_kernels()


def test_kernel_wrappers_and_list(tmp_path):
    paths = cb._write_kernel_sources(["coop_128x128", "coop_128x128_streamk"], tmp_path)
    assert [p.name for p in paths] == ["cutlass_sm90_k_coop_128x128.cu", "cutlass_sm90_k_coop_128x128_streamk.cu"]
    text = paths[1].read_text()
    assert "#define FP8LAB_CUTLASS_STREAMK 1" in text and f'#include "{cb.SOURCE}"' in text
    inc = (tmp_path / "cutlass_blockwise_sm90_kernels.inc").read_text()
    assert "#define FP8LAB_CUTLASS_KERNEL_LIST(X) X(coop_128x128) X(coop_128x128_streamk)" in inc


@needs_cutlass
@needs_nvcc
@pytest.mark.slow
@slow_only
def test_pingpong_kernel_compiles_without_spills():
    r = cb.compile_standalone(kernel="pingpong_64x128")
    assert r["sass_qgmma"] >= 4 and r["sass_hmma"] == 0 and "64x128x32.F32.E4M3.E4M3" in r["sass_qgmma_shapes"]
    assert r["registers"] <= 168 and r["spill_store_bytes"] == r["spill_load_bytes"] == r["stack_bytes"] == 0
    assert r["sass_stl"] == r["sass_ldl"] == 0


# --------------------------------------------------------------------------- configs (GPU)
@pytest.mark.gpu
@pytest.mark.parametrize("config", list(cb.CONFIGS))
@pytest.mark.parametrize("M, N, K", [(1, 384, 512), (7, 392, 1152), (83, 2120, 1152), (300, 1544, 4096)])
def test_every_config_matches_float64(ext, config, M, N, K):
    """Every configuration at odd M and N = 384 / 128-multiples + an 8-multiple tail, poisoned output,
    plan and one-shot paths; then a second plan run (stream-K re-zeroes its fix-up locks per launch)."""
    import torch

    d = _inputs(M, N, K, seed=M * 13 + N + K)
    ref = cb.reference(**d)
    ops = cb.CutlassBlockwise(**d, config=config)
    ops.out.fill_(float("nan"))
    out = ops().clone()
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), config
    e = _errors(out, ref)
    assert e["rel"] < 4e-3 and e["max"] < 8e-3 and e["diff"] < 2e-5, (config, e)
    ops.out.fill_(float("nan"))
    assert torch.equal(ops(), out), f"{config}: a second launch of the plan differs"
    again = cb.cutlass_blockwise_sm90(**d, config=config, out=torch.full_like(out, float("nan")))
    assert torch.equal(again, out), config


@pytest.mark.gpu
def test_every_config_is_in_the_build(ext):
    assert set(ext.kernels()) == set(cb.built_kernels())
    for c in cb.CONFIGS:
        if cb.CONFIGS[c].kernel in ext.kernels():
            info = cb.kernel_info(c)
            assert info["stages"] >= 2 and info["threads"] == 384 and info["shared_memory_bytes"] > 0


@pytest.mark.gpu
def test_unknown_config_is_a_value_error_on_gpu(ext):
    d = _inputs(8, 256, 256, seed=0)
    with pytest.raises(ValueError, match="known configs"):
        cb.CutlassBlockwise(**d, config="coop_128x256")
    with pytest.raises(ValueError, match="known configs"):
        cb.cutlass_blockwise_sm90(**d, config="nope")
