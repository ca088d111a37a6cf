"""Code tables of every format: sizes, classes, hand-derived values, and a second,
textbook decode (sign * 2^(e - bias) * (1.m | 0.m)) that must agree with ml_dtypes."""

import math

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from fp8lab.emulate import formats


@pytest.mark.parametrize("fmt", sorted(formats.FORMATS))
def test_table_has_every_code_once(fmt):
    spec = formats.FORMATS[fmt]
    t = formats.code_table(fmt)
    assert list(t["code"]) == list(range(2**spec.bits))
    assert set(t["cls"]) <= set(formats.CLASSES)
    assert t["value"].dtype == np.float64


@pytest.mark.parametrize(
    "fmt, counts",
    [
        # e4m3fn: S.1111.111 is the only NaN (2 codes), no inf; exponent 0 with m != 0 is
        # subnormal: 7 per sign.
        ("e4m3", {"normal": 238, "subnormal": 14, "zero": 2, "nan": 2}),
        # e5m2 is IEEE-like: exponent 11111 gives inf (m=0, 2 codes) and NaN (m!=0, 6 codes);
        # 3 subnormals per sign.
        ("e5m2", {"normal": 240, "subnormal": 6, "zero": 2, "nan": 6, "inf": 2}),
        # e2m1: 0x1/0x9 are the subnormals +-0.5; no inf or NaN at all.
        ("e2m1", {"normal": 12, "subnormal": 2, "zero": 2}),
        # ue8m0: every code is a power of two except 0xFF (NaN); there is no zero.
        ("ue8m0", {"normal": 255, "nan": 1}),
        ("int4", {"normal": 15, "zero": 1}),
        ("int8", {"normal": 255, "zero": 1}),
    ],
)
def test_class_counts(fmt, counts):
    assert formats.code_table(fmt)["cls"].value_counts().to_dict() == counts


def _v(fmt, code):
    return float(formats.decode(fmt, np.array([code]))[0])


def test_hand_derived_values():
    assert _v("e4m3", 0x38) == 1.0  # 0.0111.000: exponent 7 = bias
    assert _v("e4m3", 0x7E) == 448.0  # 0.1111.110: the largest finite e4m3fn, 2^8 * 1.75
    assert _v("e4m3", 0x08) == 2.0**-6  # 0.0001.000: smallest normal
    assert _v("e4m3", 0x01) == 2.0**-9  # 0.0000.001: smallest subnormal, 2^-6 * 1/8
    assert _v("e4m3", 0xB8) == -1.0
    assert _v("e5m2", 0x3C) == 1.0  # 0.01111.00: exponent 15 = bias
    assert _v("e5m2", 0x7B) == 57344.0  # 0.11110.11: 2^15 * 1.75
    assert _v("e5m2", 0x01) == 2.0**-16  # smallest subnormal 2^-14 * 1/4
    assert math.isinf(_v("e5m2", 0x7C)) and _v("e5m2", 0xFC) < 0
    assert [_v("e2m1", c) for c in range(8)] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert _v("ue8m0", 127) == 1.0 and _v("ue8m0", 0) == 2.0**-127 and _v("ue8m0", 254) == 2.0**127
    assert math.isnan(_v("ue8m0", 255))
    assert [_v("int4", c) for c in (0, 8, 15)] == [-8, 0, 7]  # zero point 8 (Marlin kU4B8)
    assert [_v("int8", c) for c in (0, 128, 255)] == [-128, 0, 127]  # zero point 128


@pytest.mark.parametrize("fmt, nan_codes", [("e4m3", [0x7F, 0xFF]), ("e5m2", [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF])])
def test_nan_codes(fmt, nan_codes):
    t = formats.code_table(fmt)
    assert sorted(t.loc[t["cls"] == "nan", "code"]) == nan_codes


@pytest.mark.parametrize("fmt, code", [("e4m3", 0x80), ("e5m2", 0x80), ("e2m1", 0x8)])
def test_negative_zero_is_marked(fmt, code):
    t = formats.code_table(fmt)
    assert t.loc[t["negative_zero"], "code"].tolist() == [code]


def _textbook(code, ebits, mbits, bias):
    """IEEE-style decode from fields, in exact Python floats (no ml_dtypes)."""
    s = -1.0 if code >> (ebits + mbits) & 1 else 1.0
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    if e == 0:
        return s * 2.0 ** (1 - bias) * (m / 2**mbits)
    return s * 2.0 ** (e - bias) * (1 + m / 2**mbits)


@pytest.mark.parametrize("fmt, ebits, mbits, bias", [("e4m3", 4, 3, 7), ("e5m2", 5, 2, 15), ("e2m1", 2, 1, 1)])
def test_ml_dtypes_agrees_with_textbook_decode(fmt, ebits, mbits, bias):
    t = formats.code_table(fmt)
    fin = t[np.isfinite(t["value"])]
    want = [_textbook(int(c), ebits, mbits, bias) for c in fin["code"]]
    got = fin["value"].tolist()
    assert got == want
    assert list(np.signbit(got)) == list(np.signbit(want))


def test_twos_complement_conversion():
    t = np.arange(256)
    want = t.astype(np.uint8).view(np.int8).astype(np.float64)  # numpy's own int8
    assert np.array_equal(formats.decode("int8", formats.twos_complement_to_offset(t, 8)), want)
    t4 = np.arange(16)
    want4 = t4.astype(np.uint8).view(ml_dtypes.int4).astype(np.float64)
    assert np.array_equal(formats.decode("int4", formats.twos_complement_to_offset(t4, 4)), want4)


def test_all_code_tables_stack():
    t = formats.all_code_tables()
    assert len(t) == sum(2**s.bits for s in formats.FORMATS.values())


def test_bad_inputs():
    with pytest.raises(ValueError, match="fmt must be one of"):
        formats.code_table("e3m4x")
    with pytest.raises(ValueError, match=r"0\.\.255"):
        formats.decode("e4m3", [256])
    with pytest.raises(ValueError, match=r"0\.\.15"):
        formats.decode("e2m1", [16])
    with pytest.raises(ValueError, match=r"0\.\.15"):
        formats.decode("int4", [-1])
    with pytest.raises(ValueError, match="integer"):
        formats.decode("e4m3", [1.5])
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        formats.twos_complement_to_offset([1], 6)


def test_experiment_sweep_tables():
    # The notebook's sweep, without Jupyter: every trick bit-exact on every finite code.
    from fp8lab.emulate import dequant
    from fp8lab.experiments import formats as exp

    s = exp.trick_summary(seed=1)
    assert len(s) == len(dequant.TRICKS)
    assert (s["mismatches"] == 0).all() and (s["bit_exact"] == s["finite_codes"]).all()
    marlin = s[(s["fmt"] == "e4m3") & (s["target"] == "fp16") & (s["trick"] == "shift")].iloc[0]
    assert (marlin["ops_per_word"], marlin["elements_per_word"], marlin["factor_log2"]) == (7, 4, 8)
    assert marlin["nonfinite_handling"] == "NaN -> finite ±480"
    cv = exp.code_values(seed=1)
    assert cv["positions_agree"].all()
    # rows: one per code per trick
    assert len(cv) == sum(formats.get_format(k[0]).n_codes for k in dequant.TRICKS)
    assert set(cv.loc[cv["cls"] == "nan", "note"].str.contains("finite|kept")) == {True}
    rep = exp.representable()
    assert (rep["representable"] == rep["finite_codes"]).all()


# ------------------------------------------------------------------ B2 and C2 verdicts
from fp8lab.toolchain import tools  # noqa: E402
from fp8lab.experiments import formats as fx  # noqa: E402

needs_nvcc = pytest.mark.skipif(not (tools.have_tool("nvcc") and tools.have_tool("cuobjdump")),
                                reason="nvcc / cuobjdump not installed")


@pytest.fixture(scope="module")
def sweep():
    return fx.trick_summary(seed=1), fx.representable(), fx.code_values(seed=1)


def test_b2_holds_with_the_nan_caveat_from_the_data(sweep):
    tricks, rep, cv = sweep
    v = fx.b2_verdict(tricks, rep, cv)
    assert v.verdict == "holds" and v.subject == "arithmetic" and "4 e4m3 tricks" in v.rule
    assert "0x7F, 0xFF" in v.reason and "±480" in v.reason
    # the caveat follows the data: another decoded value shows up in the reason
    cv2 = cv.copy()
    cv2.loc[(cv2["fmt"] == "e4m3") & (cv2["cls"] == "nan"), "decoded"] = 500.0
    assert "±500" in fx.b2_verdict(tricks, rep, cv2).reason
    # NaN kept: no finite-value caveat
    cv3 = cv.copy()
    cv3.loc[(cv3["fmt"] == "e4m3") & (cv3["cls"] == "nan"), "decoded"] = math.nan
    assert "stay non-finite" in fx.b2_verdict(tricks, rep, cv3).reason


def test_b2_differs_on_one_mismatch(sweep):
    tricks, rep, cv = sweep
    t = tricks.copy()
    i = t.index[(t["fmt"] == "e4m3") & (t["target"] == "bf16") & (t["trick"] == "shift")][0]
    t.loc[i, ["bit_exact", "mismatches"]] = [t.loc[i, "finite_codes"] - 1, 1]
    v = fx.b2_verdict(t, rep, cv)
    assert v.verdict == "differs" and "bf16 shift: 1 mismatches" in v.reason
    r = rep.copy()
    r.loc[(r["fmt"] == "e4m3") & (r["target"] == "fp16"), "representable"] -= 1
    assert fx.b2_verdict(tricks, r, cv).verdict == "differs"


def _sass(per4_fp16=7.0, per4_bf16=7.0, conv=0):
    return pd.DataFrame([{"arch": "sm_90", "kernel": "gemv_w8a16_fp8", "act": a, "per_4_values": p,
                          "op_mix": "LOP3.LUTx4", "conversions_in_loop": conv, "conversion_ops": "F2FP.F16" if conv else "",
                          "float_muls_in_loop": 0, "probe_per_word": 7, "elements_per_word": 4}
                         for a, p in (("bf16", per4_bf16), ("fp16", per4_fp16))])


def test_c2_verdict_boundaries(sweep):
    tricks = sweep[0]
    v = fx.c2_verdict(tricks, _sass())
    assert v.verdict == "holds" and v.subject == "analogue" and "6-8" in v.rule and "2^8 (fp16) / 2^120" in v.rule
    assert fx.c2_verdict(tricks, _sass(per4_fp16=8.0)).verdict == "holds"
    assert fx.c2_verdict(tricks, _sass(per4_fp16=6.0)).verdict == "holds"
    d = fx.c2_verdict(tricks, _sass(per4_bf16=8.01))
    assert d.verdict == "differs" and "bf16: 8.01 per 4 values" in d.reason
    assert fx.c2_verdict(tricks, _sass(per4_fp16=5.99)).verdict == "differs"
    c = fx.c2_verdict(tricks, _sass(conv=2))
    assert c.verdict == "differs" and "F2FP" in c.reason
    # a trick that folds the wrong factor differs
    t = tricks.copy()
    t.loc[(t["fmt"] == "e4m3") & (t["target"] == "bf16") & (t["trick"] == "shift"), "factor_log2"] = 119
    assert "bias difference is 2^120" in fx.c2_verdict(t, _sass()).reason
    # no SASS: not-run with the reason
    n = fx.c2_verdict(tricks, None, "no nvcc")
    assert n.verdict == "not-run" and n.reason == "no nvcc"


def test_folded_bias_from_the_formats():
    assert fx.folded_bias_log2() == {"fp16": 8, "bf16": 120}


@needs_nvcc
def test_c2_counts_from_compiled_sass():
    s = fx.c2_sass().set_index("act")
    assert set(s.index) == {"fp16", "bf16"} and (s["kernel"] == "gemv_w8a16_fp8").all()
    # the isolated probe reproduces the emulator's 7 per word; the GEMV's loop comes to ~7 per 4 values
    assert (s["probe_per_word"] == 7).all() and (s["elements_per_word"] == 4).all()
    assert ((s["per_4_values"] >= 6.5) & (s["per_4_values"] <= 7.5)).all()
    assert (s["conversions_in_loop"] == 0).all() and (s["float_muls_in_loop"] == 0).all()
    assert "LOP3.LUT" in s.loc["fp16", "op_mix"] and "SHF.R.U32.HI" in s.loc["fp16", "op_mix"]
