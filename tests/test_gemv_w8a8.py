"""fp8lab.kernels.gemv_w8a8: the W8A8 blockwise decode kernel (format kFp8A8 of gemv_w16.cuh).

CPU: the packing (two derivations agree; unpack is its inverse), and the product a warp's mmas
form, rebuilt from what each thread loads by the PTX fragment layouts, equals the tile's dot
products (the K permutation is the same for both operands); the kernels compile for sm_90
without spills to e4m3 -> fp16 conversions and HMMA, four 16-byte weight loads per step; bad
arguments give one ValueError line.

GPU: against float64 at odd shapes and every M tile with poisoned outputs, every split count,
M-major and row-major activation scales, a wrong scale caught, agreement with cuBLASLt blockwise,
PDL and CUDA-graph replay bit-identical.
"""
import math
from collections import Counter

import numpy as np
import pytest

from fp8lab.kernels import gemv_w8a8 as g, weight_only as wo
from fp8lab.toolchain import tools

needs_nvcc = pytest.mark.skipif(not tools.have_tool("nvcc") or not tools.have_tool("cuobjdump"),
                                reason="nvcc and cuobjdump needed")


def _codes(rng, shape):
    c = rng.integers(0, 256, shape, dtype=np.uint8)
    c[(c & 0x7F) == 0x7F] = 0            # no NaN codes
    return c


@pytest.mark.parametrize("N, K", [(16, 128), (40, 384), (136, 256), (300, 640)])
def test_pack_round_trips_and_both_layouts_agree(N, K):
    rng = np.random.default_rng(N + K)
    codes = _codes(rng, (N, K))
    sb = rng.uniform(0.25, 4, (math.ceil(N / 128), K // 128)).astype(np.float32)
    pw = g.pack(codes, sb)
    assert pw.w.dtype == np.uint32 and pw.w.size == pw.n_rows * K // 4
    back, s_rows = g.unpack(pw)            # through positions(): the fragment semantics
    assert np.array_equal(back[:N], codes) and not back[N:].any()
    assert np.array_equal(s_rows[:N], np.repeat(sb, 128, axis=0)[:N])


@pytest.mark.parametrize("N, K", [(16, 128), (40, 384)])
def test_the_warps_mmas_form_the_tiles_dot_products(N, K):
    rng = np.random.default_rng(7 * N + K)
    codes = _codes(rng, (N, K))
    pw = g.pack(codes, np.ones((math.ceil(N / 128), K // 128), np.float32))
    act = _codes(rng, (8, K))
    W = np.zeros((pw.n_rows, K))
    W[:N] = g._e4m3(codes)
    A = g._e4m3(act)
    for t in range(pw.n_tiles16):
        for st in range(K // 128):
            ks = slice(128 * st, 128 * (st + 1))
            want = W[16 * t: 16 * t + 16, ks] @ A[:, ks].T
            got = g.fragment_product(pw, act, t, st)
            assert np.allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max())), (t, st)


def test_a_misplaced_byte_is_seen_by_the_fragment_check():
    """The check above can fail: swap two codes of one thread's word and it does."""
    rng = np.random.default_rng(3)
    codes = _codes(rng, (16, 128))
    codes[0, 0], codes[8, 0] = 0x38, 0x40  # 1.0 and 2.0: lane 0's word 0, bytes 0 and 2
    pw = g.pack(codes, np.ones((1, 1), np.float32))
    act = _codes(rng, (8, 128))
    act[:, 0] = 0x38
    want = g._e4m3(codes) @ g._e4m3(act).T
    assert np.allclose(g.fragment_product(pw, act, 0, 0), want)
    b = pw.w.view(np.uint8).copy()
    assert (b[0], b[2]) == (0x38, 0x40)
    b[[0, 2]] = b[[2, 0]]                  # row g's first code <-> row g + 8's
    bad = g.PackedW8A8(pw.N, pw.K, b.view(np.uint32), pw.s)
    assert not np.allclose(g.fragment_product(bad, act, 0, 0), want)


@pytest.mark.parametrize("kw, match", [
    (dict(b=np.zeros((16, 100), np.uint8), b_scale=np.ones((1, 1), np.float32)), "K a positive multiple of 128"),
    (dict(b=np.zeros((16, 128), np.uint8), b_scale=np.ones((2, 1), np.float32)), r"b_scale must be \(ceil"),
    (dict(b=np.zeros(128, np.uint8), b_scale=np.ones((1, 1), np.float32)), "b must be 2-D"),
])
def test_pack_rejects_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        g.pack(**kw)


def test_reference_matches_a_direct_sum():
    rng = np.random.default_rng(1)
    M, N, K = 3, 20, 256
    a, b = _codes(rng, (M, K)), _codes(rng, (N, K))
    sa = rng.uniform(0.5, 2, (M, 2))
    sb = rng.uniform(0.5, 2, (1, 2))
    want = np.zeros((M, N))
    A, B = g._e4m3(a), g._e4m3(b)
    for kb in range(2):
        ks = slice(128 * kb, 128 * kb + 128)
        want += (A[:, ks] @ B[:, ks].T) * sa[:, kb:kb + 1] * sb[0, kb]
    assert np.allclose(g.reference(a, sa, b, sb), want, rtol=1e-13)


@needs_nvcc
def test_compiles_to_f2fp_and_hmma_without_spills():
    from fp8lab.experiments import gemv_sass as gs

    path = g.cubin("sm_90")
    kernels = gs._kernels_in_order(path, "sm_90")
    names = {nt: [k for k in kernels if f"{g.KERNEL}ILi{nt}E" in k] for nt in (1, 2, 4, 8)}
    assert all(len(v) == 1 for v in names.values()), list(kernels)
    for nt, (name,) in names.items():
        ops = kernels[name]
        assert not any(o.startswith(("STL", "LDL")) for o in ops), nt
        loop = Counter(gs._main_loop(name, ops))              # 3 steps of 128 K
        assert loop["F2FP.F16.E4M3.UNPACK_B"] == 3 * (32 + 16 * nt), (nt, loop)
        assert loop["HMMA.16816.F32"] == 3 * 8 * nt
        assert loop["LDG.E.NA.128.CONSTANT"] == 3 * 4          # the weight stream: 4 x 16 B per step
        assert loop["LDSM.16.M88.4"] == 3 * 2 * nt
        assert not any(o.startswith(("QMMA", "HGMMA", "QGMMA")) for o in ops)


# --------------------------------------------------------------------------- GPU
def _inputs(M, N, K, seed, scale_layout="m_major"):
    import torch

    from fp8lab.kernels import baselines as bl

    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=gen, device="cuda")
    x *= torch.exp2(torch.rand(M, 1, generator=gen, device="cuda") * 6 - 3)
    x[:, ::37] *= 20.0
    nb, kb = math.ceil(N / 128), K // 128
    w = 0.02 * torch.randn(N, K, generator=gen, device="cuda")
    w *= torch.exp2(torch.rand(nb, kb, generator=gen, device="cuda") * 4 - 2).repeat_interleave(128, 0)[:N] \
        .repeat_interleave(128, 1)
    a, sa = bl.quant_act_reference(x.bfloat16())
    sa = sa.t().contiguous().t() if scale_layout == "m_major" else sa.contiguous()
    b, sb = bl.quant_weight_reference(w)
    return {"a": a, "a_scale": sa, "b": b, "b_scale": sb}


def _rel(out, ref):
    d = out.double().cpu().numpy() - ref
    return float(np.linalg.norm(d) / np.linalg.norm(ref)), float(np.abs(d).max() / np.abs(ref).max())


_CANARY = """
import torch
from fp8lab.kernels import baselines as bl, gemv_w8a8 as g
x = torch.randn(16, 1152, device="cuda").bfloat16()
a, sa = bl.quant_act_reference(x)
b, sb = bl.quant_weight_reference(0.02 * torch.randn(2112, 1152, device="cuda"))
pw = g.to_device(g.pack(b, sb))
for M in (1, 16):
    out = g.gemv_w8a8(a[:M].contiguous(), sa[:M], pw)
torch.cuda.synchronize()
print(bool(torch.isfinite(out).all()))
"""


@pytest.fixture(scope="module")
def ext():
    """The extension, after one run in a child process: a kernel that faults there fails these
    tests with its message and leaves this process's CUDA context intact."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    ext = g.load_extension()
    try:
        r = subprocess.run([sys.executable, "-c", _CANARY], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("gemv_w8a8: the child's first launches did not finish in 300 s")
    if r.returncode != 0:
        pytest.fail(f"gemv_w8a8 failed in a child process (exit {r.returncode}): {(r.stderr or r.stdout)[-800:]}")
    return ext


@pytest.mark.gpu
@pytest.mark.parametrize("K", [128, 1152, 4096])
@pytest.mark.parametrize("N", [8, 136, 2112])
@pytest.mark.parametrize("M", [1, 3, 8, 9, 16, 33, 64, 65, 130])
def test_matches_float64(ext, M, N, K):
    import torch

    d = _inputs(M, N, K, seed=M * 7 + N + K, scale_layout="m_major" if M % 2 else "row_major")
    ref = g.reference(**d)
    pw = g.to_device(g.pack(d["b"], d["b_scale"]))
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    got = g.gemv_w8a8(d["a"], d["a_scale"], pw, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr() and torch.isfinite(out).all()
    rel, mx = _rel(out, ref)
    assert rel < 4e-3 and mx < 8e-3, (rel, mx)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 16])
def test_every_split_count_gives_the_same_sums(ext, M):
    import torch

    d = _inputs(M, 600, 2048, seed=M)
    ref = g.reference(**d)
    pw = g.to_device(g.pack(d["b"], d["b_scale"]))
    one = g.gemv_w8a8(d["a"], d["a_scale"], pw, splits=1)
    for s in (2, 3, 5, 16):
        out = g.gemv_w8a8(d["a"], d["a_scale"], pw, splits=s)
        assert _rel(out, ref)[0] < 4e-3, s
        assert float((out.double() - one.double()).abs().max()) <= 2 * float(one.double().abs().max()) * 2 ** -8, s
    for resident in (False, True):
        again = g.gemv_w8a8(d["a"], d["a_scale"], pw, splits=1, act_resident=resident)
        assert torch.equal(again, one)   # one CTA per tile: the same fp32 order


@pytest.mark.gpu
def test_a_wrong_scale_is_caught(ext):
    d = _inputs(16, 576, 1152, seed=5)
    ref = g.reference(**d)
    pw = g.to_device(g.pack(d["b"], d["b_scale"]))
    assert _rel(g.gemv_w8a8(d["a"], d["a_scale"], pw), ref)[0] < 4e-3
    bad_b = g.to_device(g.pack(d["b"], d["b_scale"].flip(0).contiguous()))
    assert _rel(g.gemv_w8a8(d["a"], d["a_scale"], bad_b), ref)[0] > 5e-2
    bad_sa = d["a_scale"].roll(1, dims=0)
    assert _rel(g.gemv_w8a8(d["a"], bad_sa, pw), ref)[0] > 5e-2


@pytest.mark.gpu
def test_agrees_with_cublaslt(ext):
    from fp8lab.kernels import baselines as bl

    d = _inputs(16, 2112, 4096, seed=11)
    ref = g.reference(**d)
    ours = g.gemv_w8a8(d["a"], d["a_scale"], g.to_device(g.pack(d["b"], d["b_scale"])))
    theirs = bl.BlockwiseOperands(**d)()
    assert _rel(ours, ref)[0] < 4e-3 and _rel(theirs, ref)[0] < 4e-3
    assert float((ours.double() - theirs.double()).norm() / theirs.double().norm()) < 4e-3


@pytest.mark.gpu
def test_pdl_and_cuda_graph_replay_are_bit_identical(ext):
    import torch

    d = _inputs(7, 2112, 1152, seed=13)
    pw = g.to_device(g.pack(d["b"], d["b_scale"]))
    out = torch.empty((7, 2112), dtype=torch.bfloat16, device="cuda")
    eager = g.gemv_w8a8(d["a"], d["a_scale"], pw, splits=2, out=out).clone()
    if wo.pdl_supported():
        assert torch.equal(g.gemv_w8a8(d["a"], d["a_scale"], pw, splits=2, pdl=True), eager)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        g.gemv_w8a8(d["a"], d["a_scale"], pw, splits=2, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@pytest.mark.gpu
def test_bad_arguments_are_one_clear_error(ext):
    import torch

    d = _inputs(4, 256, 256, seed=2)
    pw = g.to_device(g.pack(d["b"], d["b_scale"]))
    cases = [
        (dict(a=d["a"].float()), "a must be float8_e4m3fn"),
        (dict(a=d["a"][:, :128].contiguous()), "but the weight has K = 256"),
        (dict(a_scale=d["a_scale"].double()), "a_scale must be a float32"),
        (dict(a_scale=d["a_scale"][:, :1]), r"a_scale must be \(M, K/128\)"),
        (dict(out=torch.empty(4, 256, device="cuda")), "out must be a bfloat16"),
        (dict(splits=0), "splits must be an integer"),
        (dict(pw=d["b"]), "pw must be a PackedW8A8"),
        (dict(act_resident=1), "act_resident must be True or False"),
    ]
    for over, match in cases:
        kw = dict(a=d["a"], a_scale=d["a_scale"], pw=pw)
        kw.update(over)
        a, sa, p = kw.pop("a"), kw.pop("a_scale"), kw.pop("pw")
        with pytest.raises(ValueError, match=match):
            g.gemv_w8a8(a, sa, p, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K, splits", [(1, 300, 1152, 4), (16, 2112, 640, 1), (83, 136, 1664, 5)])
def test_access_pattern_threads_read_their_kernel_threads_words(ext, M, N, K, splits):
    """pattern_stream (the kernel's weight and scale loads alone, notebook 05's ceiling for target 3):
    with the key set to one thread's XOR of the words its kernel thread loads (derived here from the
    packed layout: weights [tile][step][4][32] uint4, one scale word per (tile, step)), exactly that
    thread's sink word holds it; at the kernel's occupancy by default."""
    import torch

    d = _inputs(min(M, 4), N, K, seed=N)
    pw = g.to_device(g.pack(d["b"], d["b_scale"]))
    w4 = pw.w.cpu().numpy().view(np.uint32).reshape(-1, 4)
    s = pw.s.cpu().numpy().view(np.uint32).reshape(-1)
    geo = wo.pattern_geometry("fp8", M, N, K, schedule="splitk", splits=splits)
    gx, gy, gz = geo["grid"]
    sps = geo["steps_per_split"]
    for cx, y, z, warp, lane in ((gx - 1, gy - 1, gz - 1, 0, 31), (0, 0, 0, 3, 9), (gx // 2, gy // 2, 0, 5, 17)):
        tile = cx * 8 + warp
        if tile >= pw.n_tiles16:
            continue
        x = np.uint32(0)
        for st in range(y * sps, min(pw.steps, (y + 1) * sps)):
            sstep = tile * pw.steps + st
            for i in range(4):
                for v in w4[sstep * 128 + 32 * i + lane]:
                    x ^= v
            x ^= s[sstep]
        sink = torch.full((geo["threads"],), -1, dtype=torch.int32, device="cuda")
        occ = g.pattern_stream(pw, M, splits=splits, sink=sink, key=int(x))
        torch.cuda.synchronize()
        got = sink.cpu().numpy().view(np.uint32)
        idx = ((z * gy + y) * gx + cx) * 256 + 32 * warp + lane
        assert got[idx] == x and set(np.unique(got).tolist()) <= {int(x), 0xFFFFFFFF}, (cx, y, z, warp, lane)
        assert occ == g.launch_config(pw, M)["ctas_per_sm"]
    with pytest.raises(ValueError, match="PackedW8A8"):
        g.pattern_stream(d["b"], M)
