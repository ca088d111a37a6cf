"""The rows layout (fp8lab.kernels.gemv_rows) on the CPU: packing, the codes' values, refusals in one
line, the launch geometry, and the kernels' SASS (no spills, nine CTAs' registers at M = 1, the
weight loads streamed past L1, no tensor cores; the loads-only twin's loads are the GEMV's)."""

import re
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

from fp8lab.kernels import gemv_rows as gr
from fp8lab.kernels import weight_only as wo
from fp8lab.toolchain.tools import have_tool

needs_nvcc = pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")),
                                reason="needs nvcc and cuobjdump")


def _scales(N, K, act="bf16", seed=0):
    rng = np.random.default_rng(seed)
    return np.exp2(rng.integers(-9, -5, size=(N, K // 128))).astype(np.float64)


@pytest.mark.parametrize("fmt", gr.FORMATS)
@pytest.mark.parametrize("act", ["bf16", "fp16"])
def test_pack_rows_keeps_the_bytes_row_major_and_the_scales_in_the_act_dtype(fmt, act):
    rng = np.random.default_rng(1)
    N, K = 7, 384                          # odd N: 21 scales, padded to 11 words
    codes = rng.integers(0, 256, size=(N, K))
    sc = _scales(N, K, act)
    pw = gr.pack_rows(fmt, codes, sc, act=act)
    assert pw.layout == "rows" and pw.out_factor == 1.0 and (pw.N, pw.K, pw.fmt, pw.act) == (N, K, fmt, act)
    assert pw.w.dtype == np.uint32 and pw.w.size == N * K // 4
    assert np.array_equal(pw.w.view(np.uint8).reshape(N, K), codes.astype(np.uint8))
    s16 = pw.s.view(np.uint16)
    assert pw.s.size == 11 and s16[-1] == 0
    got = s16[:N * K // 128].view(wo._NP_DTYPE[act]).astype(np.float64).reshape(N, K // 128)
    assert np.array_equal(got, sc)
    # to / clone keep the layout
    assert pw.clone().layout == "rows"


def test_code_values():
    v = gr.code_values("fp8")
    assert np.isnan(v[0x7F]) and np.isnan(v[0xFF]) and v[0x7E] == 448 and v[0xFE] == -448
    assert v[0x01] == 2.0 ** -9 and v[0x38] == 1.0 and v[0x80] == 0.0
    assert np.array_equal(gr.code_values("int8"), np.arange(256) - 128.0)
    # int8 agrees with the tile layout's decode (same codes, same values)
    assert np.array_equal(gr.code_values("int8"), wo.trick_values("int8"))
    # e4m3 agrees with the tile layout's everywhere but the two NaN codes
    t = wo.trick_values("fp8")
    ok = ~np.isnan(v)
    assert np.array_equal(v[ok], t[ok]) and ok.sum() == 254


@pytest.mark.parametrize("fmt", gr.FORMATS)
def test_random_rows_draws_no_nan_code(fmt):
    pw, info = gr.random_rows(fmt, 64, 512, seed=3)
    assert not np.isnan(gr.code_values(fmt)[info["codes"]]).any()
    assert np.array_equal(pw.w.view(np.uint8).reshape(64, 512), info["codes"])
    assert info["scales"].shape == (64, 4) and info["global_scale"] == 1.0


@pytest.mark.parametrize("call, msg", [
    (lambda: gr.pack_rows("int4", np.zeros((4, 128)), np.ones((4, 1))), "tile layout only"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 100), int), np.ones((4, 1))), "multiple of 128"),
    (lambda: gr.pack_rows("fp8", np.full((4, 128), 256), np.ones((4, 1))), "0..255"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128)) + 0.5, np.ones((4, 1))), "integer array"),
    (lambda: gr.pack_rows("fp8", np.zeros(128, int), np.ones((4, 1))), "2-D"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128), int), np.ones((4, 2))), "scales must have shape"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128), int), np.full((4, 1), 1.0001)), "exactly representable"),
    (lambda: gr.pack_rows("fp8", np.zeros((4, 128), int), np.ones((4, 1)), act="fp32"), "act"),
    (lambda: gr.random_rows("nvfp4", 4, 128), "tile layout only"),
    (lambda: gr.random_rows("fp8", 4, 130), "multiple of 128"),
])
def test_bad_input_is_refused_in_one_line(call, msg):
    with pytest.raises(ValueError, match=msg) as e:
        call()
    assert "\n" not in str(e.value)


def test_geometry():
    assert gr.geometry(24576, 1) == {"grid": (6144, 1), "mb": 1, "threads": 6144 * 128}
    assert gr.geometry(10, 2) == {"grid": (3, 1), "mb": 2, "threads": 3 * 128}
    assert gr.geometry(10, 5) == {"grid": (3, 2), "mb": 4, "threads": 6 * 128}
    assert [gr.tokens_per_cta(m) for m in (1, 2, 3, 4, 9)] == [1, 2, 4, 4, 4]


def test_rows_is_a_schedule_of_gemv_w16():
    assert "rows" in wo.SCHEDULES and wo.DEFAULT_SCHEDULE == "splitk"
    assert wo.PackedWeight("fp8", "bf16", 1, 128, None, None, 1.0).layout == "tiles"


def _opcodes(cubin):
    import subprocess

    from fp8lab.toolchain import sass, tools

    out = subprocess.run([str(tools.find_tool("cuobjdump")), "-sass", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    ks, cur = {}, None
    for line in out.splitlines():
        if "Function :" in line:
            cur = ks.setdefault(line.split("Function :")[1].strip(), [])
        elif cur is not None and (op := sass.parse_instruction(line)):
            cur.append(op)
    return ks


@needs_nvcc
def test_rows_sass():
    """Every rows kernel: no local memory (no spills), no tensor-core op, weights by LDG.E.NA.128
    (ld.global.nc.L1::no_allocate); the M = 1 GEMVs fit nine CTAs per SM (<= 56 registers); each
    loads-only twin issues exactly its GEMV's global loads and one store."""
    import subprocess

    from fp8lab.toolchain import tools

    cubin = gr.rows_cubin("sm_90")
    ks = _opcodes(cubin)
    assert len(ks) == 24, sorted(ks)
    res = subprocess.run([str(tools.find_tool("cuobjdump")), "-res-usage", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    regs = {}
    for name, body in re.findall(r"Function (\S+):\s*\n\s*(REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:\d+)", res):
        r, st, _, loc = (int(x) for x in re.findall(r"\d+", body))
        assert st == 0 and loc == 0, (name, body)
        regs[name] = r
    assert len(regs) == 24, res
    for name, ops in ks.items():
        assert not [o for o in ops if o.startswith(("HMMA", "LDL", "STL", "ATOM", "RED"))], name
        assert any(o.startswith("LDG.E.NA.128") for o in ops), name
    gemvs = {n: o for n, o in ks.items() if "_rowsI" in n}
    assert len(gemvs) == 12
    for n, ops in gemvs.items():
        if n.endswith("ELi1EEEvNS0_10RowsParamsE"):             # MB = 1
            assert regs[n] <= 56, (n, regs[n])
        if "fp8_rows" in n:
            assert any(o.startswith("F2FP") for o in ops), n     # cvt.rn.f16x2.e4m3x2
    loads = lambda ops: Counter(o for o in ops if o.startswith("LDG"))   # noqa: E731
    for f, fname in ((0, "fp8"), (1, "int8")):
        for b in (0, 1):
            for mb in (1, 2, 4):
                (g,) = [o for n, o in gemvs.items() if f"gemv_w8a16_{fname}_rowsILb{b}ELi{mb}E" in n]
                (t,) = [o for n, o in ks.items() if f"gemv_rows_loadsILi{f}ELb{b}ELi{mb}E" in n]
                assert loads(t) == loads(g), (fname, b, mb, loads(t), loads(g))
                assert sum(o.startswith("STG") for o in t) == 1
