"""The rows layout (fp8lab.kernels.gemv_rows) on the CPU: packing, the codes' values, refusals in one
line, the launch geometry and form, and the kernels' SASS: the CUDA-core form (no spills, nine CTAs'
registers at M = 1, the weight loads streamed past L1, no tensor cores; the loads-only twin's loads
are the GEMV's; INT4 on fp16 pairs at eight CTAs per SM) and the tensor-core form (8 NT HMMAs and
every load of a step in its K loop, no local memory there at NT = 1, its twin's loads the GEMV's)."""

import re
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

from fp8lab.kernels import gemv_rows as gr
from fp8lab.kernels import weight_only as wo
from fp8lab.toolchain.tools import have_tool

from test_weight_only import _kernel_opcodes   # cuobjdump -sass per kernel, as the tile kernels' SASS tests read it

needs_nvcc = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")),
                                reason="needs nvcc and cuobjdump")


def _unpacked(fmt, w, N, K):
    """(N, K) codes from a rows weight's words: bytes row-major; int4 two per byte, k even low."""
    b = w.view(np.uint8).reshape(N, -1)
    if fmt not in ("int4", "nvfp4"):
        return b
    out = np.empty((N, K), np.uint8)
    out[:, 0::2], out[:, 1::2] = b & 15, b >> 4
    return out


def _scales(N, K, act="bf16", seed=0):
    rng = np.random.default_rng(seed)
    return np.exp2(rng.integers(-9, -5, size=(N, K // 128))).astype(np.float64)


@pytest.mark.parametrize("fmt", [f for f in gr.FORMATS if f != "nvfp4"])
@pytest.mark.parametrize("act", ["bf16", "fp16"])
def test_pack_rows_keeps_the_bytes_row_major_and_the_scales_in_the_act_dtype(fmt, act):
    rng = np.random.default_rng(1)
    N, K = 7, 384                          # odd N: 21 scales, padded to 11 words
    codes = rng.integers(0, 16 if fmt == "int4" else 256, size=(N, K))
    sc = _scales(N, K, act)
    pw = gr.pack_rows(fmt, codes, sc, act=act)
    assert pw.layout == "rows" and pw.out_factor == 1.0 and (pw.N, pw.K, pw.fmt, pw.act) == (N, K, fmt, act)
    assert pw.w.dtype == np.uint32 and pw.w.size == N * K * wo.BITS[fmt] // 32
    assert np.array_equal(_unpacked(fmt, pw.w, N, K), codes.astype(np.uint8))
    s16 = pw.s.view(np.uint16)
    assert pw.s.size == 11 and s16[-1] == 0
    got = s16[:N * K // 128].view(wo._NP_DTYPE[act]).astype(np.float64).reshape(N, K // 128)
    assert np.array_equal(got, sc)
    # to / clone keep the layout
    assert pw.clone().layout == "rows"


@pytest.mark.parametrize("act", ["bf16", "fp16"])
def test_pack_rows_nvfp4_keeps_codes_block_scales_and_global(act):
    """nvfp4: codes two per byte as int4's, the (N, K / 16) e4m3 block-scale bytes row-major, and the
    global scale x 2^14 (the factor its codes carry in fp16) as out_factor."""
    rng = np.random.default_rng(2)
    N, K = 7, 384
    codes = rng.integers(0, 16, size=(N, K))
    sc = rng.integers(0, 256, size=(N, K // 16))
    pw = gr.pack_rows("nvfp4", codes, sc, act=act, global_scale=0.375)
    assert (pw.layout, pw.fmt, pw.act, pw.N, pw.K) == ("rows", "nvfp4", act, N, K)
    assert pw.out_factor == 0.375 * 2.0 ** 14
    assert pw.w.size == N * K // 8 and np.array_equal(_unpacked("nvfp4", pw.w, N, K), codes.astype(np.uint8))
    assert pw.s.size == N * K // 64 and np.array_equal(pw.s.view(np.uint8).reshape(N, K // 16), sc.astype(np.uint8))
    v = gr.code_values("nvfp4")
    assert list(v[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6] and np.array_equal(v[8:], -v[:8])


def _byte_perm(x: int, y: int, s: int) -> int:
    """__byte_perm(x, y, s) (default mode): output byte i is byte (s >> 4 i) & 7 of y:x."""
    src = (y << 32) | x
    return sum(((src >> 8 * ((s >> 4 * i) & 7)) & 0xFF) << 8 * i for i in range(4))


def _e2m1_pairs(q: int) -> list[int]:
    """gemv_rows.cuh e2m1_pairs, bit for bit: (a | b) & c LOP3s, byte permutes, masks."""
    m32 = 0xFFFFFFFF
    qe, qo = q & 0x0F0F0F0F, q & 0xF0F0F0F0
    ue = (((qe << 4) & m32) | ((qe << 1) & m32)) & 0x8E8E8E8E
    uo = (qo | (qo >> 3)) & 0x8E8E8E8E
    return [_byte_perm(ue, 0, 0x2404), _byte_perm(uo, 0, 0x2404), ue & 0xFF00FF00, uo & 0xFF00FF00]


def test_e2m1_pairs_is_exact_for_every_code_in_every_place():
    """The nvfp4 rows kernel's decode: pair j of a word is (code j, code j + 4) as fp16 e2m1 x 2^-14,
    exact for all 16 codes (the subnormal +-0.5 and -0 included) in all 8 nibbles, whatever the
    other nibbles hold."""
    rng = np.random.default_rng(5)
    want = (gr.code_values("nvfp4") * 2.0 ** -14).astype(np.float16)
    for j in range(8):
        for c in range(16):
            for other in rng.integers(0, 2**32, size=8, dtype=np.uint64):
                q = (int(other) & ~(0xF << 4 * j) & 0xFFFFFFFF) | (c << 4 * j)
                h = _e2m1_pairs(q)
                pair = h[j % 4]
                half = (pair >> 16) if j >= 4 else (pair & 0xFFFF)
                got = np.array([half], np.uint16).view(np.float16)[0]
                assert got == want[c] and np.signbit(got) == np.signbit(want[c]), (j, c, hex(q), got, want[c])
    assert gr.NVFP4_CODE_FACTOR == 2.0 ** 14


def test_code_values():
    v = gr.code_values("fp8")
    assert np.isnan(v[0x7F]) and np.isnan(v[0xFF]) and v[0x7E] == 448 and v[0xFE] == -448
    assert v[0x01] == 2.0 ** -9 and v[0x38] == 1.0 and v[0x80] == 0.0
    assert np.array_equal(gr.code_values("int8"), np.arange(256) - 128.0)
    # int8 agrees with the tile layout's decode (same codes, same values)
    assert np.array_equal(gr.code_values("int8"), wo.trick_values("int8"))
    assert np.array_equal(gr.code_values("int4"), np.arange(16) - 8.0)
    assert np.array_equal(gr.code_values("int4"), wo.trick_values("int4"))
    # e4m3 agrees with the tile layout's everywhere but the two NaN codes
    t = wo.trick_values("fp8")
    ok = ~np.isnan(v)
    assert np.array_equal(v[ok], t[ok]) and ok.sum() == 254


@pytest.mark.parametrize("fmt", gr.FORMATS)
def test_random_rows_draws_no_nan_code(fmt):
    pw, info = gr.random_rows(fmt, 64, 512, seed=3)
    assert not np.isnan(gr.code_values(fmt)[info["codes"]]).any()
    assert np.array_equal(_unpacked(fmt, pw.w, 64, 512), info["codes"])
    four = fmt in ("int4", "nvfp4")
    assert info["codes"].max() > (14 if four else 250) and (not four or info["codes"].max() == 15)
    if fmt == "nvfp4":
        sv = info["scales"].view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        assert info["scales"].shape == (64, 32) and np.isfinite(sv).all() and sv.min() > 0
        assert info["global_scale"] == 2.0 ** -8 and pw.out_factor == 2.0 ** 6
    else:
        assert info["scales"].shape == (64, 4) and info["global_scale"] == 1.0


@pytest.mark.parametrize("call, msg", [
    (lambda: gr.pack_rows("nvfp4", np.zeros((4, 128), int), np.ones((4, 1), int)), r"must be \(N, K/16\)"),
    (lambda: gr.pack_rows("nvfp4", np.zeros((4, 128), int), np.full((4, 8), 0.5)), "e4m3 codes"),
    (lambda: gr.pack_rows("nvfp4", np.zeros((4, 128), int), np.ones((4, 8), int), global_scale=0.1), "fp32"),
    (lambda: gr.pack_rows("int4", np.zeros((4, 128), int), np.ones((4, 1)), global_scale=2.0), "nvfp4's"),
    (lambda: gr.pack_rows("nvfp4", np.full((4, 128), 16), np.ones((4, 8), int)), "0..15"),
    (lambda: gr.check_form_for("nvfp4", "mma"), "tensor cores"),
    (lambda: gr.check_form_for("fp8", "cuda8"), "8 rows per CTA"),
    (lambda: gr.check_form_for("int4", "cuda16"), "form must be one of"),
    (lambda: gr.pack_rows("int4", np.full((4, 128), 16), np.ones((4, 1))), "0..15"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 100), int), np.ones((4, 1))), "multiple of 128"),
    (lambda: gr.pack_rows("fp8", np.full((4, 128), 256), np.ones((4, 1))), "0..255"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128)) + 0.5, np.ones((4, 1))), "integer array"),
    (lambda: gr.pack_rows("fp8", np.zeros(128, int), np.ones((4, 1))), "2-D"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128), int), np.ones((4, 2))), "scales must have shape"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128), int), np.full((4, 1), 1.0001)), "exactly representable"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128), int), np.ones((4, 1)), act="fp32"), "act"),
    (lambda: gr.random_rows("fp8", 4, 130), "multiple of 128"),
])
def test_bad_input_is_refused_in_one_line(call, msg):
    with pytest.raises(ValueError, match=msg) as e:
        call()
    assert "\n" not in str(e.value)


def test_geometry():
    assert gr.geometry(24576, 1) == {"grid": (6144, 1), "mb": 1, "threads": 6144 * 128, "form": "cuda", "block": 128}
    assert gr.geometry(10, 2) == {"grid": (3, 1), "mb": 2, "threads": 3 * 128, "form": "cuda", "block": 128}
    assert gr.geometry(10, 5) == {"grid": (3, 2), "mb": 4, "threads": 6 * 128, "form": "cuda", "block": 128}
    assert [gr.tokens_per_cta(m) for m in (1, 2, 3, 4, 9)] == [1, 2, 4, 4, 4]
    # the 4-bit formats' 8-row form: 8 rows x one token per CTA
    assert gr.geometry(10, 3, "cuda8") == {"grid": (2, 3), "mb": 1, "threads": 6 * 128, "form": "cuda8", "block": 128}
    assert gr.geometry(24576, 1, "cuda8")["grid"] == (3072, 1)
    # the tensor-core form: 16 rows x 8 (M <= 8) or 16 tokens per CTA, a 1-D grid, W warps per CTA
    assert gr.geometry(24576, 16, "mma", 4096) == {"grid": (1536, 1), "mb": 16, "threads": 1536 * 128,
                                                   "form": "mma", "block": 128}
    assert gr.geometry(17, 5, "mma", 128) == {"grid": (2, 1), "mb": 8, "threads": 2 * 128, "form": "mma", "block": 128}
    assert gr.geometry(17, 40, "mma", 128)["grid"] == (2 * 3, 1)
    assert gr.geometry(4096, 1, "mma", 14336)["threads"] == 256 * 16 * 32
    assert [gr.tokens_per_cta(m, "mma") for m in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 16]
    with pytest.raises(ValueError, match="needs K"):
        gr.geometry(16, 2, "mma")


def test_warps_per_cta_fill_the_grid():
    """W grows (4, 8, 16; 8 at most above 8 tokens) until the grid holds 4096 warps, while each warp
    keeps two 128-K steps: notebook 08's small-N shapes get more warps per CTA."""
    assert gr.warps_for(24576, 1, 4096) == 4          # qwen3-8b gate_up: 1536 CTAs
    assert gr.warps_for(8192, 1, 28672) == 8          # llama3-70b down_proj: 512 CTAs
    assert gr.warps_for(4096, 1, 14336) == 16         # llama3-8b down_proj: 256 CTAs
    assert gr.warps_for(4096, 16, 14336) == 8         # 16 tokens: at most 8
    assert gr.warps_for(4096, 64, 14336) == 4         # four token blocks: 1024 CTAs
    assert gr.warps_for(64, 1, 1024) == 4             # eight K steps: two per warp at W = 4
    assert gr.warps_for(64, 1, 2048) == 8
    assert gr.warps_for(4096, 1, 14336, "mma32") == 8    # 32 rows per CTA: 128 CTAs, at most 8 warps
    assert gr.warps_for(24576, 16, 4096, "mma32") == 8   # 768 CTAs


@needs_nvcc
def test_warps_for_is_the_kernels_rule(tmp_path):
    """gemv_rows.warps_for (Python, for geometry and the sink) gives what gemv_rows_mma.cuh's host
    code launches, over a grid of shapes (a host program built with nvcc; no GPU needed)."""
    import subprocess

    from fp8lab.toolchain import tools

    cases = [(n, m, k, tm) for n in (16, 100, 4096, 8192, 24576, 57344) for m in (1, 2, 8, 9, 16, 17, 64)
             for k in (128, 512, 1024, 2048, 4096, 28672) for tm in (1, 2)]
    src = tmp_path / "w.cu"
    src.write_text('#include <cstdio>\n#include "gemv_rows_mma.cuh"\nint main() {\n'
                   + "".join(f'  std::printf("%d\\n", fp8lab::rows::warps_for({n}, {m}, {k}, {tm}));\n'
                             for n, m, k, tm in cases)
                   + "  return 0;\n}\n")
    exe = tmp_path / "w"
    subprocess.run([str(tools.find_tool("nvcc")), "-std=c++17", "-arch=sm_90", "-I", str(gr.KERNEL_DIR), str(src),
                    "-o", str(exe)], check=True, capture_output=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    assert got == [gr.warps_for(n, m, k, "mma32" if tm == 2 else "mma") for n, m, k, tm in cases]


def test_default_form(monkeypatch):
    """The tensor-core form from MMA_MIN_M = 2 on for fp8 / int8, at 32 rows per CTA from MMA32_MIN_M
    = 9 (INT4 has one, opt-in, and keeps the CUDA-core form by default); MMA_MIN_M = None makes it
    opt-in. The 4-bit formats at M = 1: 8 rows per CTA (ROWS8_AT_M1)."""
    assert gr.MMA_MIN_M == 2 and gr.MMA32_MIN_M == 9 and gr.MMA_FORMATS == ("fp8", "int8", "int4")
    assert gr.MMA_DEFAULT_FORMATS == ("fp8", "int8")
    assert [gr.default_form("fp8", m) for m in (1, 2, 8, 9, 16, 64)] == ["cuda", "mma", "mma", "mma32", "mma32", "mma32"]
    assert [gr.default_form("int8", m) for m in (1, 3, 17)] == ["cuda", "mma", "mma32"]
    assert [gr.default_form("int4", m) for m in (1, 2, 16)] == ["cuda8", "cuda", "cuda"]
    assert [gr.default_form("nvfp4", m) for m in (1, 2, 16)] == ["cuda8", "cuda", "cuda"]
    monkeypatch.setattr(gr, "MMA_MIN_M", None)
    monkeypatch.setattr(gr, "ROWS8_AT_M1", False)
    assert {gr.default_form(f, m) for f in gr.FORMATS for m in (1, 2, 16, 64)} == {"cuda"}
    for call, msg in [(lambda: gr.check_form("wgmma"), "form must be one of"),
                      (lambda: gr.geometry(16, 1, "tc"), "form must be one of")]:
        with pytest.raises(ValueError, match=msg) as e:
            call()
        assert "\n" not in str(e.value)


def test_measure_decode_refuses_a_bad_rows_form_in_one_line():
    from fp8lab.experiments import decode

    with pytest.raises(ValueError, match="form must be one of") as e:
        decode.measure_decode(["qwen3-8b:o_proj"], [1], ["fp8"], schedule="rows", rows_form="tc")
    assert "\n" not in str(e.value)


def test_rows_is_a_schedule_of_the_decode_sweep_not_of_gemv_w16():
    from fp8lab.experiments import decode

    assert "rows" in decode.SCHEDULES and "rows" not in wo.SCHEDULES and wo.DEFAULT_SCHEDULE == "splitk"
    assert set(wo.SCHEDULES) < set(decode.SCHEDULES)
    assert wo.PackedWeight("fp8", "bf16", 1, 128, None, None, 1.0).layout == "tiles"


@needs_nvcc
def test_rows_sass():
    """Every CUDA-core rows kernel: no local memory (no spills), no tensor-core op, weights by
    LDG.E.NA.128 (ld.global.nc.L1::no_allocate); the 8-bit M = 1 GEMVs fit nine CTAs per SM (<= 56
    registers), the 4-bit ones eight (<= 64) with their products on fp16 pairs (HFMA2), their 8-row
    forms four (<= 128); nvfp4 decodes its codes with byte permutes (no conversion instruction but
    its scales' F2FP); each loads-only twin issues exactly its GEMV's global loads and one store."""
    import subprocess

    from fp8lab.toolchain import tools

    cubin = gr.rows_cubin("sm_90")
    ks = {n: o for n, o in _kernel_opcodes(cubin).items() if "rows_mma" not in n}
    # 4 formats x 2 dtypes x 3 token blocks, GEMV and twin; the 8-row form: 2 formats x 2 dtypes, GEMV and twin
    assert len(ks) == 56, sorted(ks)
    res = subprocess.run([str(tools.find_tool("cuobjdump")), "-res-usage", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    regs = {}
    for name, body in re.findall(r"Function (\S+):\s*\n\s*(REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:\d+)", res):
        if "rows_mma" in name:
            continue
        r, st, _, loc = (int(x) for x in re.findall(r"\d+", body))
        assert st == 0 and loc == 0, (name, body)
        regs[name] = r
    assert len(regs) == 56, res
    for name, ops in ks.items():
        assert not [o for o in ops if o.startswith(("HMMA", "LDL", "STL", "ATOM", "RED"))], name
        assert any(o.startswith("LDG.E.NA.128") for o in ops), name
    gemvs = {n: o for n, o in ks.items() if "_rowsI" in n or "_rows8I" in n}
    assert len(gemvs) == 28
    four = ("int4_rows", "nvfp4_rows")
    for n, ops in gemvs.items():
        if "_rows8I" in n:
            assert regs[n] <= 128, (n, regs[n])
        elif n.endswith("ELi1EEEvNS0_10RowsParamsE"):             # MB = 1
            assert regs[n] <= (64 if any(f in n for f in four) else 56), (n, regs[n])
        rows = 8 if "_rows8I" in n else 4
        if any(f in n for f in four):
            assert sum(o.startswith("HFMA2") for o in ops) >= 16 * rows, n   # 4 per 8 codes, 32 codes a row
        if "fp8_rows" in n:
            assert any(o.startswith("F2FP") for o in ops), n     # cvt.rn.f16x2.e4m3x2
        if "nvfp4_rows" in n:
            # e2m1_pairs: two byte permutes per 8 codes; the block scales' e4m3 pairs by F2FP
            assert sum(o.startswith("PRMT") for o in ops) >= 8 * rows, n
            assert any(o.startswith("F2FP") for o in ops), n
    loads = lambda ops: Counter(o for o in ops if o.startswith("LDG"))   # noqa: E731
    for f, fname in ((0, "w8a16_fp8"), (1, "w8a16_int8"), (2, "w4a16_nvfp4"), (3, "w4a16_int4")):
        for b in (0, 1):
            for mb in (1, 2, 4):
                (g,) = [o for n, o in gemvs.items() if f"gemv_{fname}_rowsILb{b}ELi{mb}E" in n]
                (t,) = [o for n, o in ks.items() if f"gemv_rows_loadsILi{f}ELb{b}ELi{mb}E" in n]
                assert loads(t) == loads(g), (fname, b, mb, loads(t), loads(g))
                assert sum(o.startswith("STG") for o in t) == 1
            if f in (2, 3):
                (g,) = [o for n, o in gemvs.items() if f"gemv_{fname}_rows8ILb{b}E" in n]
                (t,) = [o for n, o in ks.items() if f"gemv_rows8_loadsILi{f}ELb{b}E" in n]
                assert loads(t) == loads(g), (fname, b, "rows8", loads(t), loads(g))
                assert sum(o.startswith("STG") for o in t) == 1


def _loops(cubin):
    """{kernel: [(opcodes of one loop body), ...]}: the instructions from each backward branch's
    target to the branch (cuobjdump -sass, addresses kept)."""
    import subprocess

    from fp8lab.toolchain import sass, tools

    out = subprocess.run([str(tools.find_tool("cuobjdump")), "-sass", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    ks, cur = {}, None
    for line in out.splitlines():
        if "Function :" in line:
            cur = ks.setdefault(line.split("Function :")[1].strip(), [])
        elif cur is not None and (m := re.search(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", line)):
            if op := sass.parse_instruction(line):
                cur.append((int(m.group(1), 16), op, m.group(2)))
    loops = {}
    for name, ins in ks.items():
        for addr, op, text in ins:
            if op.startswith("BRA") and (t := re.search(r"BRA (0x[0-9a-f]+)", text)) and int(t.group(1), 16) < addr:
                lo = int(t.group(1), 16)
                loops.setdefault(name, []).append([o for a, o, _ in ins if lo <= a <= addr])
    return loops


@needs_nvcc
def test_rows_mma_sass():
    """The tensor-core form (gemv_rows_mma.cuh), 54 GEMVs (fp8 / int8 / int4 x bf16 / fp16 x, at 16 rows per
    CTA (TM = 1), NT = 1 in 4, 8, 16 warps and NT = 2 in 4, 8; at 32 rows (TM = 2) NT = 1, 2 in 4, 8) and
    54 loads-only twins: the K loop (the loop with the HMMAs) holds 8 NT TM HMMA.16816.F32, 4 TM 16-byte
    weight loads streamed past L1 (LDG.E.NA.128; int4 2 TM: 128 K per row in 16 bytes), 4 NT activation
    loads and 2 TM scale loads; no local
    memory in it at NT = 1 (NT = 2 reloads spilled words: gemv_rows_mma.cuh says why); TM = 1: NT = 1
    in 64 registers (32 warps per SM), NT = 2 in 80 (24); TM = 2: 20 / W and 16 / W CTAs; each twin's K
    loop issues exactly its GEMV's global loads, it stores once, and an SM holds as many of its CTAs
    as of its GEMV's."""
    import subprocess

    from fp8lab.toolchain import tools

    cubin = gr.rows_cubin("sm_90")
    ks = {n: o for n, o in _kernel_opcodes(cubin).items() if "rows_mma" in n}
    assert len(ks) == 108, sorted(ks)
    loops = _loops(cubin)
    res = subprocess.run([str(tools.find_tool("cuobjdump")), "-res-usage", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    regs = {n: int(r) for n, r in re.findall(r"Function (\S+):\s*\n\s*REG:(\d+)", res) if "rows_mma" in n}
    ldg = lambda ops: Counter(o for o in ops if o.startswith("LDG"))   # noqa: E731
    warps_per_sm = {(1, 1): 32, (2, 1): 24, (1, 2): 20, (2, 2): 16}    # min_ctas_mma x W, rounded down
    for f, fname in ((0, "w8a16_fp8"), (1, "w8a16_int8"), (3, "w4a16_int4")):
        for b in (0, 1):
            for nt, tm, w in ((1, 1, 4), (1, 1, 8), (1, 1, 16), (2, 1, 4), (2, 1, 8),
                              (1, 2, 4), (1, 2, 8), (2, 2, 4), (2, 2, 8)):
                (g,) = [n for n in ks if f"gemv_{fname}_rows_mmaILb{b}ELi{nt}ELi{tm}ELi{w}E" in n]
                (t,) = [n for n in ks if f"gemv_rows_mma_loadsILi{f}ELb{b}ELi{nt}ELi{tm}ELi{w}E" in n]
                (kl,) = [lp for lp in loops[g] if any(o.startswith("HMMA") for o in lp)]
                assert sum(o.startswith("HMMA.16816.F32") for o in kl) == 8 * nt * tm, (g, kl)
                assert sum(o.startswith("HMMA") for o in ks[g]) == 8 * nt * tm, g
                assert sum(o.startswith("LDG.E.NA.128") for o in kl) == (2 if f == 3 else 4) * tm, g
                assert sum(o.startswith("LDG.E.128") for o in kl) == 4 * nt, g
                assert sum(o.startswith("LDG.E.U16") for o in kl) == 2 * tm, g
                local = [o for o in kl if o.startswith(("LDL", "STL"))]
                assert len(local) <= (0 if nt == 1 else 2 * tm), (g, local)
                cap = 65536 // (warps_per_sm[(nt, tm)] // w * w * 32) // 8 * 8
                assert regs[g] <= cap, (g, regs[g], cap)
                if f == 0:
                    assert any(o.startswith("F2FP") for o in kl), g   # cvt.rn.f16x2.e4m3x2
                if f == 3:    # six byte permutes per 8 codes (gemv_rows_mma.cuh codes8_int4), 64 codes per tile
                    assert sum(o.startswith("PRMT") for o in kl) == 48 * tm, g
                (tl,) = [lp for lp in loops[t] if any(o.startswith("LDG") for o in lp)]
                assert ldg(tl) == ldg(kl), (t, ldg(tl), ldg(kl))
                assert sum(o.startswith("STG") for o in ks[t]) == 1
                assert not [o for o in ks[t] if o.startswith(("HMMA", "LDL", "STL"))], t
                # the twin holds its GEMV's CTAs per SM (registers allocated per warp in 256s), so
                # launch_on needs no shared-memory pad (whose carveout would shrink L1)
                per_sm = lambda r: min(65536 // (-(-r * 32 // 256) * 256 * w), 64 // w)   # noqa: E731
                assert per_sm(regs[t]) == per_sm(regs[g]), (t, regs[t], g, regs[g])


@needs_nvcc
def test_the_8_row_form_spends_fewer_instructions_per_code():
    """The 4-bit formats' 8-row form exists to share each thread's activation loads and conversion
    among more rows: its M = 1 K loop issues fewer instructions per weight code than the 4-row form's
    (SASS of the loop body: 256 codes per thread at 8 rows, 128 at 4), no local memory in either."""
    loops = _loops(gr.rows_cubin("sm_90"))
    for fname in ("int4", "nvfp4"):
        for b in (0, 1):
            (four,) = [max(v, key=len) for n, v in loops.items() if f"gemv_w4a16_{fname}_rowsILb{b}ELi1E" in n]
            (eight,) = [max(v, key=len) for n, v in loops.items() if f"gemv_w4a16_{fname}_rows8ILb{b}E" in n]
            assert not [o for o in four + eight if o.startswith(("LDL", "STL"))]
            assert len(eight) / 256 < 0.85 * len(four) / 128, (fname, b, len(four), len(eight))
