"""Seed 001's kernels without a GPU: configuration list and launch rules, counts, inputs, the
float64 reference, CPU models of the kernels' arithmetic, the quantiser model against an
independent e4m3 rounding, the compile-time facts (nvcc), and the experiments' table logic and
verdict rules on synthetic timings."""

import math

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from fp8lab.toolchain import tools
from fp8lab.experiments import quantisers as qx, three_arms as ta
from fp8lab.kernels import quant_act as qa, seed001 as s1
from fp8lab.emulate.compare import relerr

needs_nvcc = pytest.mark.skipif(not (tools.have_tool("nvcc") and tools.have_tool("cuobjdump")),
                                reason="needs nvcc and cuobjdump")


# --------------------------------------------------------------------------- configurations
def test_wmma_config_list_matches_the_roles():
    cfgs = s1.wmma_configs()
    assert len(cfgs) == len(s1.WMMA_ROLES) == 12
    _, large = s1.wmma_config("large")
    assert (large.bm, large.bn, large.wm, large.wn, large.pad) == (128, 128, 64, 32, 8)
    assert s1.wmma_config("large_pad0")[1].pad == 0
    forced = s1.wmma_config("pad1_forced")[1]
    assert forced.pad == 1 and forced.force_pad
    for c in cfgs:
        c.validate()
        assert s1.wmma_config(c.name)[1] == c
        # stages of (BM + BN) rows of 128 + pad bf16, or the fp32 epilogue tile (BN + 4 floats)
        assert c.smem_bytes == max((c.stages or 2) * (c.bm + c.bn) * (128 + c.pad) * 2, c.bm * (c.bn + 4) * 4)
        assert c.smem_bytes <= 227 * 1024
    assert large.smem_bytes == 139264 and large.threads == 256
    s3 = s1.wmma_config("large_s3")[1]
    assert (s3.bm, s3.bn, s3.wm, s3.wn, s3.pad, s3.stages) == (128, 128, 64, 32, 8, 3)
    assert s3.smem_bytes == 3 * 256 * 136 * 2 == 208896 and s3.name.endswith("_s3")
    assert s1.wmma_config("large_s2")[1].smem_bytes == large.smem_bytes
    assert s1.ctas_per_sm(s1.wmma_config("large_n64_s2")[1]) == 2
    for role in s1.WMMA_LARGE_ROLES:
        assert role in ta.TILE_CHECK                                   # the tile study times every one
    il = s1.wmma_config("large_il")[1]
    assert (il.bm, il.bn, il.wm, il.wn, il.pad, il.stages, il.schedule) == (128, 128, 64, 32, 8, 3, 1)
    assert il.name == "128x128x128_w64x32_pad8_il3" and il.smem_bytes == 208896
    w32 = s1.wmma_config("large_il_w32")[1]
    assert (w32.wm, w32.wn, w32.threads, w32.schedule) == (32, 32, 512, 1)
    assert all(c.schedule == 0 for c in cfgs[:10])                     # the first ten ids keep their meaning


def test_wmma_pipelined_config_rules():
    s1.WmmaConfig(128, 128, 64, 32, 8, stages=4).validate()
    with pytest.raises(ValueError, match="2 to 4 stages"):
        s1.WmmaConfig(128, 128, 64, 32, 8, stages=1).validate()
    with pytest.raises(ValueError, match="2 to 4 stages"):
        s1.WmmaConfig(128, 128, 64, 32, 8, stages=5).validate()
    with pytest.raises(ValueError, match="16-byte aligned rows"):
        s1.WmmaConfig(64, 64, 32, 32, 1, force_pad=True, stages=2).validate()
    # the parser reads the stage and schedule fields; a line without them is not a configuration
    text = ("#define FP8LAB_WMMA_CONFIGS(X) X(64, 64, 32, 32, 8, 0, 3, 1) X(64, 64, 32, 32, 8, 0, 3) "
            "X(64, 64, 32, 32, 8, 0)\n#ifdef FP8LAB_WMMA_PAD_CHECK")
    assert s1._configs_from_source(text) == (s1.WmmaConfig(64, 64, 32, 32, 8, stages=3, schedule=1),)


def test_wmma_interleaved_config_rules():
    s1.WmmaConfig(128, 128, 64, 32, 8, stages=3, schedule=1).validate()
    s1.WmmaConfig(128, 128, 64, 32, 8, stages=4, schedule=1).validate()
    with pytest.raises(ValueError, match="3 or 4 stages"):
        s1.WmmaConfig(128, 128, 64, 32, 8, stages=2, schedule=1).validate()
    with pytest.raises(ValueError, match="even warp count"):
        s1.WmmaConfig(64, 32, 64, 32, 8, stages=3, schedule=1).validate()
    with pytest.raises(ValueError, match="schedule must be"):
        s1.WmmaConfig(128, 128, 64, 32, 8, stages=3, schedule=2).validate()
    with pytest.raises(ValueError, match="16-byte aligned rows"):
        s1.WmmaConfig(128, 128, 64, 32, 1, force_pad=True, stages=3, schedule=1).validate()


def test_smem_wavefront_model():
    # 32 consecutive 4-byte words: one wavefront; the same bank 32 times: 32
    assert s1.smem_wavefronts([4 * i for i in range(32)], 4) == 1
    assert s1.smem_wavefronts([128 * i for i in range(32)], 4) == 32
    assert s1.smem_wavefronts([0] * 32, 4) == 1                        # one word, broadcast
    # 16-byte accesses go 8 threads per phase: 32 contiguous 16 B pieces = 4 wavefronts
    assert s1.smem_wavefronts([16 * i for i in range(32)], 16) == 4
    assert s1.smem_wavefronts([256 * i for i in range(8)], 16) == 8    # +0 pad ldmatrix rows: 8-way
    assert s1.smem_wavefronts([272 * i for i in range(8)], 16) == 1    # +8 pad: conflict-free
    with pytest.raises(ValueError, match="aligned"):
        s1.smem_wavefronts([2], 16)


def test_w_store_mappings_cover_the_tile_and_only_the_new_one_is_conflict_free():
    for role in ("large", "large_il", "large_il_w32", "medium"):
        cfg = s1.wmma_config(role)[1]
        # every thread's chunks (chunk i = tid + i * threads) cover the BN x 128 W tile exactly once
        if cfg.schedule:
            cells = [(s1._il_w_row(q), s1._il_w_col(q)) for q in range(cfg.bn * 8)]
            step = cfg.threads // 32 // 2 * 8
            for tid in range(cfg.threads):                           # the kernel's row step per chunk
                for i in range(cfg.bn * 8 // cfg.threads):
                    assert cells[tid + i * cfg.threads] == (cells[tid][0] + i * step, cells[tid][1])
        else:
            cells = [(q // 8, (q % 8) * 16) for q in range(cfg.bn * 8)]
        assert sorted(cells) == [(r, c) for r in range(cfg.bn) for c in range(0, 128, 16)]
        pats = s1.smem_access_patterns(cfg)
        want = 4 if cfg.schedule else 8          # 32 x 16 B stores: 4 wavefronts at best; the old map: 2-way
        assert s1.smem_wavefronts(pats["sts_w_lo"], 16) == want
        assert s1.smem_wavefronts(pats["sts_w_hi"], 16) == want
        assert s1.smem_wavefronts(pats["cp_async_a"], 16) == 4
        assert s1.smem_wavefronts(pats["ldsm_rows"], 16) == 1
        # a warp's global W loads stay whole 32-byte sectors: 8 rows x 64 contiguous codes per warp
        rows = {}
        for r, c in s1.w_store_chunks(cfg):
            rows.setdefault(r, []).append(c)
        assert all(sorted(v) == list(range(min(v), min(v) + 16 * len(v), 16)) and min(v) % 32 == 0
                   for v in rows.values())


def test_kblock_budget_counts():
    b = s1.kblock_budget(s1.wmma_config("large")[1])
    assert (b["hmma_per_warp"], b["ldsm_per_warp"], b["hmma_per_cta"]) == (128, 48, 1024)
    assert b["smem_cycles_ldsm"] == 8 * 48 * 4 and b["smem_cycles_sts_w"] == 512 and b["smem_cycles_cp_async"] == 256
    assert b["smem_cycles_per_hmma"] == pytest.approx(2.25)
    il = s1.kblock_budget(s1.wmma_config("large_il")[1])
    assert il["smem_cycles_sts_w"] == 256 and il["smem_cycles_per_hmma"] == pytest.approx(2.0)
    assert s1.kblock_budget(s1.wmma_config("large_pad0")[1])["smem_cycles_ldsm"] == 8 * 48 * 4 * 8
    assert s1.kblock_budget(s1.wmma_config("large_il_w32")[1])["ldsm_per_hmma"] == pytest.approx(0.5)


def test_wmma_pad_rule_refuses_plus_one():
    with pytest.raises(ValueError, match="multiple of 8"):
        s1.WmmaConfig(64, 64, 32, 32, 1).validate()
    with pytest.raises(ValueError, match="258 bytes"):
        s1.WmmaConfig(128, 128, 64, 32, 1).validate()
    s1.WmmaConfig(64, 64, 32, 32, 8).validate()
    s1.WmmaConfig(64, 64, 32, 32, 1, force_pad=True).validate()   # only the forced build passes
    with pytest.raises(ValueError, match="divide 128"):
        s1.WmmaConfig(64, 256, 32, 64, 8).validate()
    with pytest.raises(ValueError, match="16x16"):
        s1.WmmaConfig(48, 64, 24, 32, 8).validate()
    with pytest.raises(ValueError, match="unknown wmma config"):
        s1.wmma_config("huge")
    with pytest.raises(ValueError, match="config id"):
        s1.wmma_config(17)


@pytest.mark.parametrize("M,N,K", [(1, 7168, 18432), (1, 576, 7168), (7, 1536, 7168), (16, 36864, 7168),
                                   (32, 1536, 7168), (128, 7168, 16384), (256, 1536, 7168), (4096, 36864, 7168)])
def test_pick_wmma_rule(M, N, K):
    p = s1.pick_wmma(M, N, K)
    role = "decode" if M <= 16 else "small" if M <= 32 else "medium" if M <= 128 else "large_il"
    assert p["role"] == role
    kb = K // 128
    # every split holds at least one K block and together they cover K exactly once
    assert 1 <= p["kb_per_split"] <= kb
    assert p["splits"] == math.ceil(kb / p["kb_per_split"])
    assert (p["splits"] - 1) * p["kb_per_split"] < kb <= p["splits"] * p["kb_per_split"]
    if p["tiles"] >= p["target_ctas"]:
        assert p["splits"] == 1
    else:
        assert p["tiles"] * p["splits"] >= min(p["target_ctas"], p["tiles"] * kb) * 0.5


def test_pick_wmma_falls_back_to_a_tile_that_fits():
    p = s1.pick_wmma(4096, 4096, 4096, smem_optin=99 * 1024, smem_per_sm=100 * 1024)
    assert p["role"] == "small"            # large_il (209 KB), large (139 KB), medium (104 KB) do not fit 99 KB
    p = s1.pick_wmma(4096, 4096, 4096, smem_optin=200 * 1024, smem_per_sm=228 * 1024)
    assert p["role"] == "large"            # large_il (209 KB) does not fit 200 KB: one step down
    with pytest.raises(ValueError, match="multiple of 128"):
        s1.pick_wmma(4, 4096, 200)


@pytest.mark.parametrize("tm,tn", [(1, 1), (1, 56), (3, 7), (8, 12), (9, 5), (32, 288), (17, 1)])
def test_tile_order_visits_every_tile_once(tm, tn):
    seen = [s1.tile_of_pid(pid, tm, tn) for pid in range(tm * tn)]
    assert sorted(seen) == [(m, n) for m in range(tm) for n in range(tn)]
    # consecutive CTAs share a weight-tile column within a group of 8 tile rows
    if tm >= 2:
        assert seen[0][1] == seen[1][1]


# --------------------------------------------------------------------------- counts and inputs
def test_generate_inputs_numpy():
    d = s1.generate_inputs(7, 200, 384, seed=1, backend="numpy")
    a, w, s = d["a"], d["w"], d["w_scale"]
    assert a.dtype == ml_dtypes.bfloat16 and a.shape == (7, 384)
    assert w.dtype == ml_dtypes.float8_e4m3fn and w.shape == (200, 384)
    assert s.shape == (2, 3) and s.dtype == np.float32 and (s > 0).all()
    assert s.max() / s.min() > 2                      # block magnitudes differ: a wrong scale shows
    wf = np.abs(w.astype(np.float32))
    assert np.isfinite(wf).all() and wf.max() == 448.0
    with pytest.raises(ValueError, match="backend"):
        s1.generate_inputs(1, 128, 128, backend="jax")


def test_weight_quantiser_round_trip():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((200, 256)).astype(np.float32)
    q, s = s1.quantise_weight_numpy(w)
    deq = q.astype(np.float32) * np.repeat(np.repeat(s, 128, 0)[:200], 128, 1)
    assert np.abs(deq - w).max() <= np.abs(w).max() * 2.0 ** -4      # e4m3: 3 mantissa bits
    blocks = np.pad(np.abs(q.astype(np.float32)), ((0, 56), (0, 0))).reshape(2, 128, 2, 128).max(axis=(1, 3))
    assert (blocks == 448.0).all()


def _blockwise_loop_reference(a, w, s):
    """Independent of reference_w8a16: per 128-K block, exact dot products scaled afterwards."""
    a64, w64 = np.asarray(a).astype(np.float64), np.asarray(w).astype(np.float64)
    M, K = a64.shape
    N = w64.shape[0]
    c = np.zeros((M, N))
    for kb in range(K // 128):
        ks = slice(kb * 128, (kb + 1) * 128)
        c += (a64[:, ks] @ w64[:, ks].T) * np.asarray(s, np.float64)[np.arange(N) // 128, kb][None, :]
    return c


@pytest.mark.parametrize("M,N,K", [(1, 136, 128), (7, 200, 384), (83, 129, 256)])
def test_reference_matches_blockwise_loop(M, N, K):
    d = s1.generate_inputs(M, N, K, seed=M, backend="numpy")
    ref = s1.reference_w8a16(d["a"], d["w"], d["w_scale"])
    np.testing.assert_allclose(ref, _blockwise_loop_reference(d["a"], d["w"], d["w_scale"]),
                               rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    sub = s1.reference_w8a16(d["a"], d["w"], d["w_scale"], rows=[0, M - 1])
    np.testing.assert_allclose(sub, ref[[0, M - 1]], rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    with pytest.raises(ValueError, match="w_scale must be"):
        s1.reference_w8a16(d["a"], d["w"], np.ones((5, 5), np.float32))


def test_reference_hand_example():
    # w row 0 in scale block 0 (scale 0.5), row 128 in block 1 (scale 4): a wrong block shows
    a = np.zeros((1, 128), ml_dtypes.bfloat16)
    a[0, :2] = [1.0, 2.0]
    w = np.zeros((129, 128), ml_dtypes.float8_e4m3fn)
    w[0, :2] = [1.0, 0.5]
    w[128, :2] = [1.0, 0.5]
    s = np.array([[0.5], [4.0]], np.float32)
    ref = s1.reference_w8a16(a, w, s)
    assert ref[0, 0] == 1.0 and ref[0, 128] == 8.0 and ref[0, 1] == 0.0


def test_kernel_models_track_float64():
    d = s1.generate_inputs(5, 130, 1024, seed=3, backend="numpy")
    ref = s1.reference_w8a16(d["a"], d["w"], d["w_scale"])
    wm = s1.emulate_wmma_fp32(d["a"], d["w"], d["w_scale"])
    sc = s1.emulate_scalar_fp32(d["a"], d["w"], d["w_scale"])
    split = s1.emulate_wmma_fp32(d["a"], d["w"], d["w_scale"], kb_per_split=3)
    for model in (wm, sc, split):
        assert model.dtype == np.float32
        assert relerr(model, ref) < 1e-6
    # fp32 accumulation is not exact: the models are distinguishable from float64
    assert relerr(sc, ref) > 0


# --------------------------------------------------------------------------- quantisers (CPU model)
def _e4m3_table():
    """Every finite e4m3fn value from the bit definition (not ml_dtypes): code -> value."""
    vals = {}
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 0x7
        if e == 0xF and m == 0x7:
            continue                                   # NaN
        v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        vals[code] = sign * v
    return vals


_TABLE = _e4m3_table()
_POS = sorted((v, c) for c, v in _TABLE.items() if c < 0x80)


def _e4m3_rne(v: float) -> int:
    """Round to nearest e4m3, ties to the even code, |v| > 464 -> NaN (0x7F | sign): torch's rule."""
    if math.isnan(v):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    a = abs(v)
    if a > 464:
        return 0x7F | sign
    best = min(_POS, key=lambda t: (abs(t[0] - a), t[1] & 1))
    return best[1] | sign


def test_e4m3_table_sanity():
    assert _TABLE[0x7E] == 448.0 and _TABLE[0x01] == 2.0 ** -9 and _TABLE[0x38] == 1.0
    assert _e4m3_rne(464.0) == 0x7E          # tie between 448 (even code) and 480 (NaN pattern)
    assert _e4m3_rne(465.0) == 0x7F          # overflow: NaN, torch does not saturate
    assert _e4m3_rne(-470.0) == 0xFF
    assert _e4m3_rne(2.0 ** -10) == 0x00     # tie between 0 and 2^-9: even code 0
    assert _e4m3_rne(1.5 * 2.0 ** -10) == 0x01


def test_quant_emulation_matches_an_independent_rounding():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 384)) * np.exp2(rng.uniform(-8, 8, (3, 3, 1))).repeat(128, 2).reshape(3, 384))
    x = x.astype(np.float32).astype(ml_dtypes.bfloat16)
    q, s = qa.quant_act_emulate(x)
    xf = x.astype(np.float32).reshape(3, 3, 128)
    for m in range(3):
        for kb in range(3):
            amax = np.float32(np.abs(xf[m, kb]).max())
            want_s = np.float32(amax * (np.float32(1) / np.float32(448)))
            assert s[m, kb] == want_s
            for k in range(128):
                v = float(np.float32(xf[m, kb, k] / want_s))
                assert int(q[m, kb * 128 + k].view(np.uint8)) == _e4m3_rne(v), (m, kb, k)


def test_quant_emulation_special_groups():
    x = np.zeros((1, 640), np.float32)
    x[0, 128:131] = [-np.nan, 1.0, 500.0]               # NaN group: scale 1, values divided by 1
    x[0, 256:259] = [np.inf, 1.0, -2.0]                 # inf group: scale inf, x / inf = 0, inf/inf = NaN
    x[0, 384:386] = [-448.0, 3.0]                       # amax 448: the amax maps to +-448
    x[0, 512:514] = [-0.0, 0.0]                         # zeros and a negative zero: scale 1
    q, s = qa.quant_act_emulate(x.astype(ml_dtypes.bfloat16))
    codes = q.view(np.uint8)[0]
    assert s[0, 0] == 1.0 and (codes[:128] == 0).all()
    # a GPU division returns the canonical +NaN whatever the operands' signs: every NaN code is 0x7F
    assert s[0, 1] == 1.0 and codes[128] == 0x7F and codes[129] == 0x38 and codes[130] == 0x7F
    assert np.isinf(s[0, 2]) and codes[256] == 0x7F and codes[257] == 0 and codes[258] == 0x80
    assert codes[384] == 0xFE
    assert s[0, 4] == 1.0 and codes[512] == 0x80 and codes[513] == 0


def test_scale_rules_differ_for_about_half_the_groups():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 128 * 64)).astype(np.float32).astype(ml_dtypes.bfloat16)
    _, s_cuda = qa.quant_act_emulate(x, "torch_cuda")
    _, s_true = qa.quant_act_emulate(x, "true_division")
    frac = float((s_cuda != s_true).mean())
    assert 0.2 < frac < 0.8, frac           # why the kernels must copy torch's reciprocal-multiply
    ulps = np.abs(s_cuda.view(np.int32).astype(np.int64) - s_true.view(np.int32))
    assert ulps.max() == 1                   # one last-bit step, never more
    with pytest.raises(ValueError, match="scale_rule"):
        qa.quant_act_emulate(x, "round_up")
    with pytest.raises(ValueError, match="multiple of 128"):
        qa.quant_act_emulate(x[:, :100])


# --------------------------------------------------------------------------- compile-time facts
def _compile(src, arch="sm_90a", extra=()):
    import subprocess
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        proc = subprocess.run([str(tools.find_tool("nvcc")), "-cubin", f"-arch={arch}", "-O3", "-Xptxas", "-v",
                               "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                               "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                               *extra, str(src), "-o", str(cubin)], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        sass = tools.run_tool("cuobjdump", ["-sass", str(cubin)]).stdout
    return proc.stderr + proc.stdout, sass


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_89"])
def test_kernels_compile_alone_without_spills(arch):
    from fp8lab.toolchain.resources import parse_ptxas_v

    for src in (s1.SCALAR_SOURCE, s1.QUANT_SOURCE, s1.DEQUANT_SOURCE):
        log, sass = _compile(src, arch)
        funcs = parse_ptxas_v(log)
        assert funcs and all(f["spill_store_bytes"] == 0 and f["spill_load_bytes"] == 0 for f in funcs.values())
        if src == s1.QUANT_SOURCE:
            assert "ATOMS.MAX" in sass                                 # the naive kernel's shared atomics
            assert "F2FP.SATFINITE.E4M3.F32.PACK_AB" in sass           # hardware e4m3 rounding on the fast path
            assert "SHFL.BFLY" in sass                                 # warp / 16t shuffle reductions
        if src == s1.SCALAR_SOURCE:
            assert "FFMA" in sass and "HMMA" not in sass               # CUDA cores only


@needs_nvcc
def test_wmma_kernel_compiles_to_ldmatrix_and_hmma():
    from fp8lab.toolchain.resources import parse_ptxas_v

    log, sass = _compile(s1.WMMA_SOURCE, "sm_90a")
    funcs = parse_ptxas_v(log)
    wmma = {k: v for k, v in funcs.items()
            if any(n in k for n in ("wmma_w8a16_kernel", "wmma_w8a16_pipelined_kernel", "wmma_w8a16_il_kernel"))}
    assert len(wmma) == 2 * len(s1.wmma_configs())                   # bf16 and fp32 outputs per config
    assert sum("pipelined" in k for k in wmma) == 2 * sum(c.stages > 0 and not c.schedule for c in s1.wmma_configs())
    assert sum("il_kernel" in k for k in wmma) == 2 * sum(c.schedule == 1 for c in s1.wmma_configs())
    assert all(v["spill_store_bytes"] == 0 for v in wmma.values())
    assert "HMMA.16816.F32.BF16" in sass and "LDSM.16.M88.4" in sass  # tensor cores fed by ldmatrix
    assert "F2FP.F16.E4M3.UNPACK_B" in sass                          # exact e4m3 -> f16 in hardware
    assert "LDGSTS" in sass                                          # cp.async for the A tiles
    # the interleaved kernels: per 128-K block (one pass of the main loop) the counts the
    # shared-memory model (s1.kblock_budget) assumes, one barrier, and the register budget that
    # sets the warps per SM (8 x 256 threads x <= 255; 16 warps need <= 128)
    for role, regs in (("large_il", 255), ("large_il_w32", 128)):
        cfg = s1.wmma_config(role)[1]
        b = s1.kblock_budget(cfg)
        key = f"Config{_mangled(cfg)}"
        f = next(v for k, v in wmma.items() if "il_kernel" in k and key in k)
        assert f["registers"] <= regs, (role, f["registers"])
        loop = _main_loop_census(sass, "il_kernel", key)
        assert loop["HMMA.16816.F32.BF16"] == b["hmma_per_warp"]
        assert loop["LDSM.16.M88.4"] == b["ldsm_per_warp"]
        assert loop["STS.128"] == 2 * cfg.bn * 8 // cfg.threads          # two 16-byte stores per W chunk
        assert loop["LDGSTS.E.BYPASS.128"] == cfg.bm * 16 // cfg.threads
        assert loop["BAR.SYNC.DEFER_BLOCKING"] == 1
        assert loop["F2FP.F16.E4M3.UNPACK_B"] == b["f2fp_unpack_per_thread"]


def _mangled(cfg):
    """The Itanium-mangled template arguments of Config<...> (how the kernel's name spells them)."""
    return "ILi{}ELi{}ELi{}ELi{}ELi{}ELb{}ELi{}ELi{}E".format(cfg.bm, cfg.bn, cfg.wm, cfg.wn, cfg.pad,
                                                           int(cfg.force_pad), cfg.stages, cfg.schedule)


def _main_loop_census(sass, *name_parts):
    """Opcode counts of the backward-branch loop with the most HMMAs in the first function (bf16 or
    fp32 output alike) whose name holds every name_part: the per-K-block body of a wmma kernel."""
    import collections
    import re

    for f in re.split(r"\n\s+Function : ", sass)[1:]:
        if not all(p in f.split("\n", 1)[0] for p in name_parts):
            continue
        ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", f)]
        at = {a: i for i, (a, _) in enumerate(ins)}
        best = None
        for i, (a, t) in enumerate(ins):
            m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", t)
            if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
                body = ins[at[int(m.group(1), 16)]:i + 1]
                n = sum("HMMA" in x for _, x in body)
                if best is None or n > best[0]:
                    best = (n, body)
        assert best is not None, name_parts
        return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for _, t in best[1])
    raise AssertionError(f"no function with {name_parts}")


@needs_nvcc
def test_b9_compile_check():
    df = ta.b9_compile_check("sm_90a", pads=(8, 0, 1))
    c = df.set_index(["pad", "forced"])
    assert c.loc[(8, False), "accepted"] and c.loc[(8, False), "row_bytes"] == 272
    assert c.loc[(0, False), "accepted"]
    assert not c.loc[(1, False), "accepted"] and c.loc[(1, False), "static_assert"]
    assert "multiple of 8" in c.loc[(1, False), "diagnostic"]
    # nvcc itself has no objection to ldm = 129: the refusal is ours, from the documented rule
    assert c.loc[(1, True), "accepted"] and c.loc[(1, True), "row_bytes_mod_16"] == 2
    assert c.loc[(1, True), "ldsm_in_sass"] > 0


# --------------------------------------------------------------------------- experiment logic
def test_w8a8_tile_rules_name_real_configs():
    from fp8lab.kernels import mma_blockwise as mb, triton_blockwise as tb

    names = {c.name for c in mb.configs()}
    for M in (1, 16, 17, 32, 64, 128, 256, 4096):
        name, swz = ta.mma_config_for(M)
        assert name in names and swz >= 1
        cfg = dict(BLOCK_K=128, GROUP_M=8) | ta.triton_config_for(M)
        tb._check_tile("per_block", **cfg)
    assert ta.check_rows(5) == [0, 1, 2, 3, 4]
    assert ta.check_rows(100, 2) == [0, 1, 98, 99]


def _synthetic(sites=("q_a", "o_proj"), Ms=(1, 16, 128, 1024), scale=1.0):
    """A sweep table shaped like measure()'s, with timings from a simple model: memory-bound
    below, compute-bound above (so the winner changes with M)."""
    rows = []
    for sh in ta.site_shapes(sites):
        N, K = sh.N, sh.K
        for M in Ms:
            flop = 2 * M * N * K
            t = {"scalar_tiled": flop / 5e12 * (32 / min(M, 32) if M < 32 else 1),
                 "wmma_w8a16": max(N * K / 3e12, flop / 350e12),
                 "triton_blockwise": max(N * K / 2e12, flop / 900e12),
                 "mma_blockwise": max(N * K / 2.5e12, flop / 500e12),
                 "cublaslt_blockwise": max(N * K / 1e12, flop / 1000e12),
                 "cublas_bf16": max(2 * N * K / 3.5e12, flop / 650e12)}
            for arm, tt in t.items():
                prep = ta.PREP_OF.get(arm, "")
                pt = (M * K * 3 / 3e12 + 2e-6) if prep == "quant_act_warp" else (3 * N * K / 4e12 if prep else 0.0)
                status = "measured" if not (arm == "scalar_tiled" and M > 256) else "skipped: M > scalar_max_m = 256"
                rows.append({"site": sh.site, "model": "deepseek-v3", "N": N, "K": K, "M": M, "arm": arm, "role": "gemm",
                             "kind": ta.KIND_OF[arm], "status": status, "flop": flop, "time_p50_s": tt * scale,
                             "tflops_p50": flop / (tt * scale) / 1e12, "prep_arm": prep, "prep_p50_s": pt,
                             "total_p50_s": tt * scale + pt if status == "measured" else math.nan})
    return ta.mark_best_w8a8(pd.DataFrame(rows))


def test_three_arms_view_winner_and_crossovers():
    df = _synthetic()
    view = ta.three_arms_view(df)
    assert set(view["site"]) == {"q_a", "o_proj"} and len(view) == 8
    assert (view["best_w8a8_impl"].isin(ta.W8A8_IMPLS)).all()
    r = view.iloc[0]
    fams = {f: r[f] for f in ta.FAMILIES if np.isfinite(r[f])}
    assert r["winner"] == min(fams, key=fams.get)
    # best_w8a8 is the faster of the two fp8lab kernels, quantiser included
    d = df[(df["site"] == r["site"]) & (df["M"] == r["M"]) & df["arm"].isin(ta.W8A8_IMPLS)]
    assert r["best_w8a8"] == pytest.approx(d["total_p50_s"].min())
    cx = ta.crossovers(view)
    assert len(cx) >= 1 and (cx["M_below"] < cx["M_above"]).all()
    assert (cx["winner_below"] != cx["winner_above"]).all()


def test_versus_peers_compares_like_with_like():
    """Issue 17 in notebook 06: the best W8A8 route against the fastest peer, GEMM alone against a
    peer's pre-quantised call, GEMM + quant_act_warp against a peer's call with its own quantiser."""
    from fp8lab.peers import sweeps
    df = _synthetic(sites=("q_a",), Ms=(1, 128))
    assert ta.versus_peers(df, None).empty and list(ta.versus_peers(df, pd.DataFrame()).columns) == ta.VERSUS_COLUMNS
    rows = []
    for M in (1, 128):
        for arm, t, tq in (("peer_a", 10e-6, 14e-6), ("peer_b", 8e-6, 20e-6), ("peer_c", 1e-9, 1e-9)):
            for quant, tt in (("none", t), (sweeps.QUANT_OWN, tq)):
                rows.append(dict(site="q_a", M=M, arm=arm, quant=quant, time_p50_s=tt,
                                 status="not-run: missing" if arm == "peer_c" else "measured"))
    v = ta.versus_peers(df, pd.DataFrame(rows)).set_index(["quant", "M"])
    assert list(v.columns) == ta.VERSUS_COLUMNS[1:2] + ta.VERSUS_COLUMNS[3:]
    own = df[df["arm"].isin(ta.W8A8_IMPLS) & (df["M"] == 1)]
    r = v.loc[("none", 1)]              # GEMM alone: the fastest peer is peer_b; a not-run peer never counts
    assert r["best_peer"] == "peer_b" and r["own_time_s"] == pytest.approx(own["time_p50_s"].min())
    assert r["own_over_peer"] == pytest.approx(8e-6 / own["time_p50_s"].min())
    r = v.loc[(sweeps.QUANT_OWN, 1)]    # with the quantiser: peer_a, against fp8lab's GEMM + quantiser
    assert r["best_peer"] == "peer_a" and r["own_time_s"] == pytest.approx(own["total_p50_s"].min())
    assert r["own_over_peer"] == pytest.approx(14e-6 / own["total_p50_s"].min())


def test_notebook_06_runs_the_blockwise_peers():
    from fp8lab.arms import peer_catalog
    from fp8lab.peers import sweeps
    assert peer_catalog.ids_for("06") == peer_catalog.ids_for("05")
    assert set(peer_catalog.ids_for("06")) == {"peer_torchao_blockwise", "peer_vllm_blockwise",
                                               "peer_sglang_blockwise", "peer_deepgemm", "peer_vllm_cutlass_blockwise",
                                               "peer_vllm_triton_blockwise"}
    assert sweeps.resolve("all", "06") == list(peer_catalog.ids_for("06"))
    with pytest.raises(ValueError, match="not peers of notebook 06"):
        sweeps.resolve(["peer_marlin_int4"], "06")


def test_crossovers_none_when_one_arm_always_wins():
    view = pd.DataFrame({"site": ["a"] * 3, "M": [1, 16, 128], "winner": ["wmma_w8a16"] * 3})
    assert ta.crossovers(view).empty
    v = ta.b7_verdict(view.assign(**{f: 1.0 for f in ta.FAMILIES}, N=1, K=128, best_w8a8_impl=""))
    assert v.verdict == "differs"


def test_b7_verdict_holds_with_a_crossover():
    v = ta.b7_verdict(ta.three_arms_view(_synthetic()))
    assert v.verdict == "holds" and "between M=" in v.our_figure


def test_step_table_scales_per_parameter():
    df = _synthetic(sites=ta.DENSE_SITES, Ms=(256,))
    step = ta.step_table(df, ceilings={"fp32": 65e12, "bf16": 680e12, "fp8_blockwise": 1150e12})
    params = sum(s.N * s.K for s in ta.site_shapes(ta.DENSE_SITES))
    assert params == pytest.approx(583.3e6, rel=1e-3)                # one DeepSeek-V3 dense layer
    r = step.set_index("family")
    view = ta.three_arms_view(df)
    assert r.loc["wmma_w8a16", "measured_layer_ms"] == pytest.approx(view["wmma_w8a16"].sum() * 1e3)
    assert r.loc["wmma_w8a16", "scaled_step_ms"] == pytest.approx(
        r.loc["wmma_w8a16", "measured_layer_ms"] * 4.238e9 / params)
    # the spec floors reproduce the seed's derived ones
    assert r.loc["scalar_tiled", "spec_floor_ms"] == pytest.approx(32.4, rel=0.01)
    assert r.loc["wmma_w8a16", "spec_floor_ms"] == pytest.approx(2.19, rel=0.01)
    assert r.loc["best_w8a8", "spec_floor_ms"] == pytest.approx(1.10, rel=0.01)
    assert r.loc["best_w8a8", "measured_ceiling_floor_ms"] == pytest.approx(2 * 256 * 4.238e9 / 1150e12 * 1e3)
    assert r["complete"].all()
    v = ta.b4_verdict(step)
    assert "4.238 G" in v.our_figure and v.subject == "analogue"
    # an arm under its own floor means a counting or timing bug: not-run with the reason, never a verdict
    fast = df.copy()
    fast.loc[fast["arm"] == "wmma_w8a16", "total_p50_s"] *= 1e-3
    slow = ta.b4_verdict(ta.step_table(fast))
    assert slow.verdict == "not-run" and "wmma_w8a16" in slow.reason and "< floor" in slow.reason
    with pytest.raises(ValueError, match="M = 256"):
        ta.step_table(_synthetic(Ms=(1,)))


def _pts(arm, tflops, M=128, **kw):
    """A one-row sweep table: ``arm`` measured at ``tflops`` TFLOP/s."""
    return pd.DataFrame([{"arm": arm, "status": "measured", "site": "q_a", "M": M, "tflops_p50": tflops,
                          "impl_config": "medium", **kw}])


def test_b1_verdict_boundaries():
    fp32 = 1e12                                         # so tflops_p50 reads as the fraction
    by = lambda f, **kw: ta.b1_verdict(_pts("scalar_tiled", f, **kw), fp32)
    v = by(0.068)
    assert v.verdict == "holds" and v.subject == "analogue" and "25%" in v.rule and "[3.4%, 13.6%]" in v.rule
    assert by(0.1359).verdict == "holds" and by(0.1361).verdict == "holds-in-kind"
    assert by(0.0341).verdict == "holds" and by(0.0339).verdict == "holds-in-kind"
    assert by(0.25).verdict == "holds-in-kind" and by(0.2501).verdict == "differs"   # the ~1/4 ceiling
    assert "2.0x the seed's" in by(0.1361).reason
    assert by(0.068, M=16).verdict == "not-run"                                     # partial 32-row tile
    assert ta.b1_verdict(_pts("scalar_tiled", 0.068), None).verdict == "not-run"
    # the synthetic sweep: scalar at 5 TFLOP/s = 7.7% of 65
    assert ta.b1_verdict(_synthetic(Ms=(128,)), 65e12).verdict == "holds"


def test_b3_verdict_boundaries():
    w = lambda tf: _pts("wmma_w8a16", tf, M=4096)
    v = ta.b3_verdict(w(495), 2000e12, bf16_spec=990e12)
    assert v.verdict == "holds" and v.subject == "analogue" and ">= 50% of the BF16 datasheet rate (990" in v.rule
    assert ta.b3_verdict(w(494.9), 2000e12, bf16_spec=990e12).verdict == "differs"
    # under half the datasheet, at least half of cuBLAS BF16 measured in the run: holds-in-kind
    assert ta.b3_verdict(w(340), 680e12, bf16_spec=990e12).verdict == "holds-in-kind"
    r = ta.b3_verdict(w(339.9), 680e12, bf16_spec=990e12)
    assert r.verdict == "differs" and "under 50%" in r.reason
    assert ta.b3_verdict(w(339.9), None, bf16_spec=990e12).verdict == "differs"
    assert ta.b3_verdict(w(300).iloc[0:0], 680e12).verdict == "not-run"
    # the mma.sync ceiling only adds its fraction to the figure; it never changes the verdict
    df = _synthetic(Ms=(4096,))                 # wmma at 350 TFLOP/s
    v = ta.b3_verdict(df, 800e12, mma_sync_measured=400e12)
    assert v.verdict == "differs" and "of the mma.sync (HMMA) peak measured here (400" in v.our_figure
    assert "mma.sync" not in ta.b3_verdict(df, 800e12).our_figure


def _step(scalar_ms, fams=None):
    """A step table (step_table's columns) with the scalar family at ``scalar_ms``."""
    rows = [{"family": "scalar_tiled", "scaled_step_ms": scalar_ms, "spec_floor_ms": 32.4}]
    rows += [{"family": f, "scaled_step_ms": t, "spec_floor_ms": fl} for f, t, fl in (fams or [])]
    return pd.DataFrame([{**r, "complete": True, "sites": 7, "sites_params": 583.3e6} for r in rows])


def test_b4_verdict_boundaries():
    # 32.4 ms floor / scalar step within 2x of the seed's 6.8% ([3.4%, 13.6%]) holds, else differs
    v = ta.b4_verdict(_step(32.4 / 0.068))
    assert v.verdict == "holds" and v.subject == "analogue" and "[3.4%, 13.6%]" in v.rule
    assert ta.b4_verdict(_step(32.4 / 0.1359)).verdict == "holds"
    d = ta.b4_verdict(_step(32.4 / 0.1361))
    assert d.verdict == "differs" and "13.6%" in d.reason
    assert ta.b4_verdict(_step(32.4 / 0.0341)).verdict == "holds"
    assert ta.b4_verdict(_step(32.4 / 0.0339)).verdict == "differs"
    # a family under 0.98 x its floor: not-run (a counting bug), at 0.98 x: judged
    assert ta.b4_verdict(_step(400, [("wmma_w8a16", 2.19 * 0.98, 2.19)])).verdict == "holds"
    nr = ta.b4_verdict(_step(400, [("wmma_w8a16", 2.19 * 0.979, 2.19)]))
    assert nr.verdict == "not-run" and "wmma_w8a16" in nr.reason
    assert ta.b4_verdict(None).verdict == "not-run"
    assert ta.b4_verdict(_step(400, [])[lambda d: d["family"] != "scalar_tiled"]).verdict == "not-run"


def _view(times, site="q_a"):
    """A three_arms_view with two families, A = wmma_w8a16 and B = cublas_bf16: {M: (tA, tB)}."""
    rows = []
    for M, (a, b) in times.items():
        r = {"site": site, "M": M, "N": 1, "K": 128, "best_w8a8_impl": "", **{f: math.nan for f in ta.FAMILIES}}
        r.update(wmma_w8a16=a, cublas_bf16=b, winner="wmma_w8a16" if a < b else "cublas_bf16")
        rows.append(r)
    return pd.DataFrame(rows)


def test_b7_verdict_boundaries():
    # a change of winner counts when the winner leads by >= 5% on both sides
    v = ta.b7_verdict(_view({1: (1.0, 1.05), 16: (1.05, 1.0)}))
    assert v.verdict == "holds" and v.subject == "analogue" and "5%" in v.rule and "between M=1 and 16" in v.our_figure
    d = ta.b7_verdict(_view({1: (1.0, 1.049), 16: (1.05, 1.0)}))
    assert d.verdict == "differs" and "none with a 5% lead" in d.reason
    assert ta.b7_verdict(_view({1: (1.0, 1.05), 16: (1.049, 1.0)})).verdict == "differs"
    one = ta.b7_verdict(_view({1: (1.0, 2.0), 16: (1.0, 2.0)}))
    assert one.verdict == "differs" and "one family wins" in one.reason
    assert ta.b7_verdict(_view({})).verdict == "not-run"


def test_b8_verdict_boundaries():
    def num(ratios):
        rows = []
        for K, r in ratios.items():
            rows += [{"arm": "scalar_tiled", "out_dtype": "fp32", "K": K, "status": "measured", "rel_err": 1e-6},
                     {"arm": "wmma_w8a16", "out_dtype": "fp32", "K": K, "status": "measured", "rel_err": r * 1e-6}]
        return pd.DataFrame(rows)
    v = ta.b8_verdict(num({512: 0.9, 7168: 0.1}))
    assert v.verdict == "holds" and v.subject == "analogue" and "0.9 x" in v.rule
    # judged at every K: a small K where the tensor-core path is not better makes it differ
    d = ta.b8_verdict(num({512: 0.91, 7168: 0.1}))
    assert d.verdict == "differs" and "K=512" in d.reason
    n = num({512: 0.5})
    assert ta.b8_verdict(n[n["arm"] == "scalar_tiled"]).verdict == "not-run"
    assert ta.b8_verdict(None).verdict == "not-run"


def test_b9_verdict_rules():
    comp = pd.DataFrame([{"pad": 8, "forced": False, "accepted": True, "static_assert": False},
                         {"pad": 1, "forced": False, "accepted": False, "static_assert": True},
                         {"pad": 1, "forced": True, "accepted": True, "static_assert": False}])
    v = ta.b9_verdict(comp, {"pad8_relerr": 1e-3, "pad1_outcome": "wrong", "pad1_relerr": 0.9})
    assert v.verdict == "holds" and v.subject == "analogue" and "faults or is wrong" in v.rule
    assert ta.b9_verdict(comp, {"pad8_relerr": 1e-3, "pad1_outcome": "fault", "pad1_error": "misaligned"}).verdict == "holds"
    c = ta.b9_verdict(comp, {"pad8_relerr": 1e-3, "pad1_outcome": "correct", "pad1_relerr": 1e-3})
    assert c.verdict == "differs" and "computed correct results" in c.reason
    # the +8 pad at the tolerance is not correct
    e = ta.b9_verdict(comp, {"pad8_relerr": ta.TOL, "pad1_outcome": "fault"})
    assert e.verdict == "differs" and "+8 build is not correct" in e.reason
    unref = comp.copy()
    unref.loc[1, ["accepted", "static_assert"]] = [True, False]
    u = ta.b9_verdict(unref, {"pad8_relerr": 1e-3, "pad1_outcome": "fault"})
    assert u.verdict == "differs" and "did not refuse" in u.reason
    assert ta.b9_verdict(comp, None).verdict == "not-run"


def test_b6_verdict_boundaries():
    def df(speed_at_1024, ilp_frac=0.5):
        rows = []
        for M in (1, 256, 1024, 8192):
            sp = speed_at_1024 if M == 1024 else 40.0
            for arm, t, frac in (("quant_act_naive", 100e-6, 0.01), ("quant_act_warp", 100e-6 / sp, 0.5),
                                 ("quant_act_warp_ilp", 50e-6 / sp, ilp_frac)):
                rows.append({"arm": arm, "M": M, "K": 7168, "status": "measured", "time_p50_s": t,
                             "fraction_of_copy": frac})
        return pd.DataFrame(rows)
    v = qx.b6_verdict(df(2.0))
    assert v.verdict == "holds" and v.subject == "analogue" and "32/1024" in v.our_figure
    assert "quant_act_warp >= 2x faster" in v.rule and "80%" not in v.rule
    d = qx.b6_verdict(df(1.99))
    assert d.verdict == "differs" and "M=1024" in d.reason
    # the 80%-of-copy performance target is not part of the verdict, whatever the bandwidth kernel reaches
    assert qx.b6_verdict(df(2.0, ilp_frac=0.1)).verdict == "holds"
    # judged on quant_act_warp (the seed's fix), not on the bandwidth kernel
    assert "quant_act_warp " in v.our_figure and "quant_act_warp_ilp" not in v.our_figure
    only = df(2.0)
    assert qx.b6_verdict(only[only["M"] == 1]).verdict == "not-run"        # M = 1 is outside the target range
    assert qx.b6_verdict(only[only["arm"] != "quant_act_warp"]).verdict == "not-run"
    assert qx._n_sets(5_500_000, 60 * 2**20) == (23, False)
    assert qx._n_sets(20_000, 60 * 2**20)[1] is True


def test_three_arms_keeps_the_fastest_triton_tile():
    rows = [({"impl_config": "swapab A"}, 14e-6), ({"impl_config": "swapab B"}, 8e-6),
            ({"impl_config": "swapab C", "status": "not-run: x"}, math.inf)]
    best = ta._fastest(rows)
    assert best["impl_config"] == "swapab B; fastest of 3 tiles timed here (others 14.0 us)"
    assert rows[1][0]["impl_config"] == "swapab B"                  # the tried rows are not changed
    assert ta._fastest(rows[:1]) == {"impl_config": "swapab A"}      # one tile: nothing to say
    assert ta._fastest(rows[2:])["status"] == "not-run: x"           # none measured: the first row, as is


def test_three_arms_triton_tiles():
    pytest.importorskip("triton")
    from fp8lab.kernels import triton_blockwise as tb

    assert ta.triton_tiles(1, 4096, 4096, "rule") == [ta.triton_config_for(1)]
    auto = ta.triton_tiles(1, 4096, 12288, sms=132)
    assert len(auto) > 1 and {tb.path_of(c) for c in auto} == {tb.auto_path(1)}


def test_experiments_refuse_bad_arguments_before_touching_a_gpu():
    with pytest.raises(ValueError, match="unknown arms"):
        ta.measure(arms=["cutlass_blockwise_sm90x"])
    with pytest.raises(ValueError, match="Ms must be"):
        ta.measure(Ms=[0])
    with pytest.raises(ValueError, match="triton_mode"):
        ta.measure(triton_mode="fastest")
    with pytest.raises(ValueError, match="unknown site"):
        ta.measure(sites=["lm_head"])
    with pytest.raises(ValueError, match="unknown arms"):
        qx.measure(arms=["quant_act_magic"])
    with pytest.raises(ValueError, match="multiple of 128"):
        qx.measure(Ks=[100])


def test_notebook_verdicts_from_synthetic_tables():
    sweep = _synthetic(Ms=(1, 16, 128, 1024))
    step = _synthetic(sites=ta.DENSE_SITES, Ms=(256,))
    ceil = pd.DataFrame([{"ceiling": "fp32_fma", "status": "measured", "rate_p50": 65.6e12},
                         {"ceiling": "bf16_tensor", "status": "measured", "rate_p50": 680e12},
                         {"ceiling": "fp8_tensor_blockwise", "status": "not-run: old cuBLAS", "rate_p50": math.nan}])
    assert ta.ceiling_rate(ceil, "bf16_tensor") == 680e12
    assert ta.ceiling_rate(ceil, "fp8_tensor_blockwise") is None and ta.ceiling_rate(None, "x") is None
    vs = ta.verdicts(sweep, step, ceil, None, None, None)
    assert [v.claim for v in vs] == ["B1", "B3", "B4", "B7", "B8", "B9"]
    by = {v.claim: v.verdict for v in vs}
    assert by["B8"] == by["B9"] == "not-run"
    assert by["B1"] == "holds" and by["B7"] == "holds"
    assert {v.subject for v in vs} == {"analogue"} and all(v.rule for v in vs)
    assert ta.verdicts(sweep, None, ceil, None, None, None)[2].verdict == "not-run"
