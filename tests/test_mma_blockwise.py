"""The blockwise FP8 mma kernel: reference, counts and inputs on CPU; the kernel's index math
through a lane-level emulation on CPU; the real kernel against the reference on a GPU."""

import math

import ml_dtypes
import numpy as np
import pytest

from fp8lab.kernels import mma_blockwise as mb


# --------------------------------------------------------------------------- reference & inputs
def _per_block_loop_reference(a, a_scale, b, b_scale):
    """Independent of mma_blockwise_reference: a loop over K blocks, scales applied to each
    block's exact dot product (the kernel's own order of operations)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    M, K = a.shape
    N = b.shape[0]
    c = np.zeros((M, N))
    cols = np.arange(N) // 128
    for kb in range(K // 128):
        blk = a64[:, kb * 128:(kb + 1) * 128] @ b64[:, kb * 128:(kb + 1) * 128].T
        c += blk * np.asarray(a_scale, np.float64)[:, kb:kb + 1] * np.asarray(b_scale, np.float64)[cols, kb][None, :]
    return c


@pytest.mark.parametrize("M, N, K", [(1, 136, 256), (7, 256, 384), (83, 136, 128)])
def test_reference_matches_per_block_loop(M, N, K):
    d = mb.generate_inputs(M, N, K, seed=M)
    ref = mb.mma_blockwise_reference(**d)
    assert ref.shape == (M, N) and ref.dtype == np.float64
    np.testing.assert_allclose(ref, _per_block_loop_reference(**d), rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_reference_hand_example():
    # One K block, scales 2 and 0.5: C = 2 * 0.5 * (1*1 + 2*0.5) = 2; wrong scale block visible.
    a = np.zeros((1, 128), ml_dtypes.float8_e4m3fn)
    b = np.zeros((129, 128), ml_dtypes.float8_e4m3fn)
    a[0, :2] = [1.0, 2.0]
    b[0, :2] = [1.0, 0.5]
    b[128, :2] = [1.0, 0.5]
    sa = np.array([[2.0]], np.float32)
    sb = np.array([[0.5], [4.0]], np.float32)
    ref = mb.mma_blockwise_reference(a, sa, b, sb)
    assert ref[0, 0] == 2.0 and ref[0, 128] == 16.0 and ref[0, 1] == 0.0


def test_generate_inputs_layouts_and_ranges():
    d = mb.generate_inputs(83, 136, 384, seed=3)
    a, sa, b, sb = d["a"], d["a_scale"], d["b"], d["b_scale"]
    assert a.dtype == ml_dtypes.float8_e4m3fn and a.shape == (83, 384) and a.flags.c_contiguous
    assert b.dtype == ml_dtypes.float8_e4m3fn and b.shape == (136, 384)
    assert sa.shape == (83, 3) and sa.strides == (4, 4 * 83)  # M-major, what cuBLASLt wants
    assert sb.shape == (2, 3) and sb.dtype == np.float32
    assert np.isfinite(a.astype(np.float32)).all() and np.isfinite(b.astype(np.float32)).all()
    assert (sa > 0).all() and (sb > 0).all()
    # amax of every group / block maps to the top of the e4m3 range
    ag = np.abs(a.astype(np.float32)).reshape(83, 3, 128).max(axis=2)
    assert ag.max() == 448.0 and ag.min() >= 416.0
    # the weight-block magnitudes differ, so a wrong block's scale would show
    assert sb.max() / sb.min() > 2


def test_config_lookup():
    assert mb.get_config("64x128x128_w64x64_s3") == mb.SEED_CONFIG
    assert mb.get_config(mb.config_id(mb.SEED_CONFIG)) == mb.SEED_CONFIG
    with pytest.raises(ValueError, match="unknown config name"):
        mb.get_config("64x128")
    with pytest.raises(ValueError, match="not compiled into the extension"):
        mb.config_id(mb.MMAConfig(64, 64, 64, 64, 2))


# --------------------------------------------------------------------------- lane-level emulation
# A CPU model of what one CTA of mma_blockwise.cuh does, thread by thread: the cp.async stores
# through the XOR swizzle, the ldmatrix.x4 lane addresses, the fragments those return, the
# m16n8k32 fragment layout *as the PTX ISA defines it* (not as the kernel assumes it), the scale
# lookups and the epilogue. The kernel-side formulas below mirror mma_blockwise.cuh line by line:
# change them together. The instruction semantics (ldmatrix, mma fragments) come from the PTX ISA.

def _swz(row, chunk):                                    # mma_blockwise.cuh: swz()
    return row * 128 + ((chunk ^ (row & 7)) << 4)


_LANE = np.arange(32)
_G, _T = _LANE >> 2, _LANE & 3


def _ptx_a_layout():
    """PTX ISA, mma.m16n8k32 .e4m3 A: element a_i of lane l -> (row, col); a_i is byte i%4 of register i//4."""
    i = np.arange(16)
    row = np.where((i < 4) | ((i >= 8) & (i < 12)), 0, 8)[None, :] + _G[:, None]
    col = (_T * 4)[:, None] + (i & 3)[None, :] + np.where(i >= 8, 16, 0)[None, :]
    return row, col


def _ptx_b_layout():
    """PTX ISA, mma.m16n8k32 .e4m3 B (K x N): element b_i of lane l -> (k, n)."""
    i = np.arange(8)
    k = (_T * 4)[:, None] + (i & 3)[None, :] + np.where(i >= 4, 16, 0)[None, :]
    n = np.broadcast_to(_G[:, None], k.shape)
    return k, n


def _ptx_c_layout():
    """PTX ISA, m16n8 f32 accumulator: c_i of lane l -> (row, col)."""
    i = np.arange(4)
    return _G[:, None] + np.where(i >= 2, 8, 0)[None, :], (_T * 2)[:, None] + (i & 1)[None, :]


A_ROW, A_COL = _ptx_a_layout()
B_K, B_N = _ptx_b_layout()
C_ROW, C_COL = _ptx_c_layout()


def _ldmatrix_x4(smem, addr):
    """ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8q..8q+7 give the 8 row addresses of matrix q;
    lane l receives from matrix q the 4 bytes at row l//4, bytes 4*(l%4)..+3. -> [32, 4 regs, 4 bytes]."""
    q = np.arange(4)
    row_addr = addr[8 * q[None, :] + (_LANE >> 2)[:, None]]          # [lane, q]
    src = row_addr + 4 * (_LANE & 3)[:, None]
    return smem[src[..., None] + np.arange(4)]


def _decode(codes):
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def emulate(cfg, a, a_scale, b, b_scale, *, lookup="per_warp", swizzle=1):
    """The kernel's output (float64, before bf16 rounding) computed the way the kernel moves data."""
    a8, b8 = a.view(np.uint8), b.view(np.uint8)
    M, K = a8.shape
    N = b8.shape[0]
    BM, BN, WM, WN = cfg.bm, cfg.bn, cfg.wm, cfg.wn
    WARPS_N = BN // WN
    MI, NI, THREADS = WM // 16, WN // 8, cfg.threads
    tiles_m, tiles_n = math.ceil(M / BM), math.ceil(N / BN)
    nblocks_n = math.ceil(N / 128)
    out = np.full((M, N), np.nan)
    writes = np.zeros((M, N), int)
    seen_tiles = set()
    for pid in range(tiles_m * tiles_n):
        # grouped launch order (kernel: "which tile")
        group = max(swizzle, 1)
        per_group = group * tiles_n
        first_m = (pid // per_group) * group
        group_m = min(tiles_m - first_m, group)
        tile_m = first_m + (pid % per_group) % group_m
        tile_n = (pid % per_group) // group_m
        seen_tiles.add((tile_m, tile_n))
        m0, n0 = tile_m * BM, tile_n * BN
        acc = np.zeros((cfg.warps, MI, NI, 32, 4))
        for kb in range(K // 128):
            k0 = kb * 128
            # load_stage: every thread's 16-byte cp.async chunks
            sA = np.full(BM * 128, 0xEE, np.uint8)   # poison: a chunk never written would show
            sB = np.full(BN * 128, 0xEE, np.uint8)
            for smem, src, rows, lim, base in ((sA, a8, BM, M, m0), (sB, b8, BN, N, n0)):
                chunks = rows * 8
                for it in range(math.ceil(chunks / THREADS)):
                    for tid in range(THREADS):
                        i = it * THREADS + tid
                        if i >= chunks:
                            continue
                        row, ch = i >> 3, i & 7
                        g_row = base + row
                        d = _swz(row, ch)
                        smem[d:d + 16] = src[g_row, k0 + ch * 16:k0 + ch * 16 + 16] if g_row < lim else 0
            for warp in range(cfg.warps):
                warp_m, warp_n = warp // WARPS_N, warp % WARPS_N
                if lookup == "per_warp":
                    nb = (n0 + warp_n * WN) // 128
                elif lookup == "per_cta":
                    nb = tile_n
                else:
                    nb = n0 // 128
                nb = min(nb, nblocks_n - 1)
                sb = float(b_scale[nb, kb])
                blk = np.zeros((MI, NI, 32, 4))
                j, r = _LANE >> 3, _LANE & 7
                for ks in range(4):
                    af, bf = [], [None] * NI
                    for mi in range(MI):
                        row = warp_m * WM + mi * 16 + (j & 1) * 8 + r
                        af.append(_ldmatrix_x4(sA, _swz(row, 2 * ks + (j >> 1))))
                    for np_ in range(NI // 2):
                        row = warp_n * WN + np_ * 16 + (j >> 1) * 8 + r
                        q = _ldmatrix_x4(sB, _swz(row, 2 * ks + (j & 1)))
                        bf[2 * np_], bf[2 * np_ + 1] = q[:, 0:2], q[:, 2:4]
                    for mi in range(MI):
                        # registers -> the 16x32 A operand, by the PTX layout
                        A = np.full((16, 32), -1, np.int32)
                        A[A_ROW, A_COL] = af[mi].reshape(32, 16)
                        assert (A >= 0).all(), "A fragment does not cover the 16x32 tile"
                        for ni in range(NI):
                            B = np.full((32, 8), -1, np.int32)
                            B[B_K, B_N] = bf[ni].reshape(32, 8)
                            assert (B >= 0).all(), "B fragment does not cover the 32x8 tile"
                            D = _decode(A.astype(np.uint8)) @ _decode(B.astype(np.uint8))
                            blk[mi, ni] += D[C_ROW, C_COL]
                # promotion with the thread's rows' scales (rows past M: scale 1, outputs unused)
                for mi in range(MI):
                    for h in range(2):
                        rows = m0 + warp_m * WM + mi * 16 + h * 8 + _G
                        sa = np.where(rows < M, a_scale[np.minimum(rows, M - 1), kb], 1.0)
                        acc[warp, mi, :, :, 2 * h:2 * h + 2] += blk[mi, :, :, 2 * h:2 * h + 2] * (sa * sb)[None, :, None]
        # epilogue
        for warp in range(cfg.warps):
            warp_m, warp_n = warp // WARPS_N, warp % WARPS_N
            for mi in range(MI):
                for h in range(2):
                    for ni in range(NI):
                        rows = m0 + warp_m * WM + mi * 16 + h * 8 + _G
                        cols = n0 + warp_n * WN + ni * 8 + 2 * _T
                        for e in range(2):
                            ok = (rows < M) & (cols + e < N)
                            out[rows[ok], cols[ok] + e] = acc[warp, mi, ni, ok, 2 * h + e]
                            np.add.at(writes, (rows[ok], cols[ok] + e), 1)
    assert seen_tiles == {(i, j) for i in range(tiles_m) for j in range(tiles_n)}, "launch order misses tiles"
    assert (writes == 1).all(), "every output element must be written exactly once"
    return out


EMU_CONFIGS = [mb.SEED_CONFIG, mb.MMAConfig(16, 64, 16, 32, 4), mb.MMAConfig(128, 256, 64, 64, 2),
               mb.MMAConfig(32, 128, 32, 32, 4), mb.MMAConfig(128, 64, 64, 32, 4)]


@pytest.mark.parametrize("cfg", EMU_CONFIGS, ids=lambda c: c.name)
def test_emulated_kernel_index_math(cfg):
    for (M, N, K), swz in (((83, 136, 256), 1), ((7, 264, 128), 3), ((1, 72, 128), 8)):
        d = mb.generate_inputs(M, N, K, seed=M + N)
        ref = mb.mma_blockwise_reference(**d)
        got = emulate(cfg, **d, swizzle=swz)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())  # fp32 scale products, like the kernel


def test_emulated_buggy_lookups_fail_where_the_seed_says():
    d = mb.generate_inputs(7, 264, 128, seed=5)
    ref = mb.mma_blockwise_reference(**d)
    err = lambda cfg, lk: np.abs(emulate(cfg, **d, lookup=lk) - ref).max() / np.abs(ref).max()  # noqa: E731
    narrow, seed, wide = mb.MMAConfig(64, 64, 32, 32, 4), mb.SEED_CONFIG, mb.MMAConfig(128, 256, 64, 64, 2)
    assert err(seed, "per_cta") < 1e-6           # BN == 128: the tile index is the block index
    assert err(narrow, "per_cta") > 1e-2         # BN = 64: tile 1 reads block 1 for columns 64..127
    assert err(narrow, "per_cta_first_col") < 1e-6    # BN <= 128: the first column's block is right
    assert err(wide, "per_cta_first_col") > 1e-2      # BN = 256 spans two weight blocks


def test_swizzle_is_conflict_free():
    # ldmatrix phase: 8 consecutive rows (8-aligned) reading one logical chunk hit 8 distinct
    # 16-byte bank groups, i.e. all 32 banks once.
    for base in range(0, 256, 8):
        for chunk in range(8):
            groups = {(_swz(base + r, chunk) % 128) // 16 for r in range(8)}
            assert len(groups) == 8
    # cp.async: a warp writes 4 rows x 8 chunks; within a row the chunks are a permutation
    for row in range(16):
        assert sorted((_swz(row, c) % 128) // 16 for c in range(8)) == list(range(8))


# --------------------------------------------------------------------------- the real kernel (GPU)
@pytest.mark.gpu
@pytest.mark.parametrize("variant", mb.VARIANTS)
@pytest.mark.parametrize("cfg", mb.configs(), ids=lambda c: c.name)
def test_kernel_matches_reference(cfg, variant):
    import torch

    for (M, N, K), swz in (((1, 136, 256), 1), ((83, 256, 384), 8), ((300, 136, 1024), 4)):
        d = mb.generate_inputs(M, N, K, seed=M, backend="torch")
        ref = mb.mma_blockwise_reference(**d)
        out = mb.mma_blockwise(**d, config=cfg, variant=variant, swizzle=swz)
        torch.cuda.synchronize()
        assert out.dtype == torch.bfloat16 and out.shape == (M, N) and torch.isfinite(out).all()
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 8e-3, f"{cfg.name} {variant} M={M}: normalised max error {err:.2e}"
        assert mb.calc_diff(out.double().cpu().numpy(), ref.cpu().numpy()) < 2e-5


@pytest.mark.gpu
def test_kernel_buggy_lookup_is_wrong_when_bn_is_not_128():
    d = mb.generate_inputs(64, 512, 256, seed=1, backend="torch")
    ref = mb.mma_blockwise_reference(**d)

    def err(cfg, lookup):
        out = mb.mma_blockwise(**d, config=cfg, variant="per_block", scale_lookup=lookup)
        return ((out.double() - ref).abs().max() / ref.abs().max()).item()

    assert err(mb.SEED_CONFIG, "per_cta") < 8e-3
    assert err(mb.MMAConfig(64, 64, 32, 32, 4), "per_cta") > 5e-2
    assert err(mb.MMAConfig(64, 256, 64, 64, 2), "per_cta_first_col") > 5e-2


@pytest.mark.gpu
def test_wrapper_validation():
    import torch

    d = mb.generate_inputs(8, 128, 256, seed=0, backend="torch")
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        mb.mma_blockwise(d["a"].float(), d["a_scale"], d["b"], d["b_scale"])
    with pytest.raises(ValueError, match="multiple of 128"):
        mb.mma_blockwise(d["a"][:, :200].contiguous(), d["a_scale"][:, :1], d["b"][:, :200].contiguous(),
                         d["b_scale"][:, :1])
    with pytest.raises(ValueError, match="contiguous"):
        mb.mma_blockwise(d["a"].t(), d["a_scale"], d["b"], d["b_scale"])
    with pytest.raises(ValueError, match="16-byte aligned"):
        a = torch.empty(8 * 256 + 1, dtype=torch.uint8, device="cuda")[1:].view(torch.float8_e4m3fn).view(8, 256)
        mb.mma_blockwise(a, d["a_scale"], d["b"], d["b_scale"])
    with pytest.raises(ValueError, match=r"b_scale must be \[ceil\(N/128\), K/128\]"):
        mb.mma_blockwise(d["a"], d["a_scale"], d["b"], d["b_scale"][:, :1])
    with pytest.raises(ValueError, match="finite and > 0"):
        mb.mma_blockwise(d["a"], d["a_scale"] * 0, d["b"], d["b_scale"], variant="per_block_inplace")
    with pytest.raises(ValueError, match="per_block variant only"):
        mb.mma_blockwise(**d, variant="per_slice", scale_lookup="per_cta")
