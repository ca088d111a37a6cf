"""Dequant emulators, exhaustively over every code against an independent reference.

The reference is ``fp8lab.emulate.formats.decode``: ml_dtypes' own conversion for the float formats,
``code - zero_point`` for the integers. Nothing here re-derives a value with the shift/mask
arithmetic under test (a test sharing the kernel's derivation let a wrong FP4 decode of
codes 0x0/0x1 pass in tilelang). Every comparison is bit for bit: pattern * folded factor
must equal the reference exactly in float64, and the sign of zero must survive.
"""

import itertools
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8lab.emulate import dequant as dq, formats

RNG = np.random.default_rng(20240601)
ALL_TRICKS = sorted(dq.TRICKS)


# --------------------------------------------------------------------------- helpers


def _positions_codes(n_codes: int, per_word: int) -> np.ndarray:
    """Logical codes in which every code visits every element position of a word, the other
    positions holding random codes (so neighbours' bits could leak in if a mask were wrong)."""
    blocks = []
    for pos in range(per_word):
        blk = RNG.integers(0, n_codes, size=(n_codes, per_word))
        blk[:, pos] = np.arange(n_codes)
        blocks.append(blk)
    return np.concatenate(blocks).reshape(-1)


def _pair_codes(n_codes: int, per_word: int) -> np.ndarray:
    """Every ordered pair of codes in every pair of positions (others random)."""
    a, b = np.meshgrid(np.arange(n_codes), np.arange(n_codes), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    blocks = []
    for p, q in itertools.combinations(range(per_word), 2):
        blk = RNG.integers(0, n_codes, size=(a.size, per_word))
        blk[:, p], blk[:, q] = a, b
        blocks.append(blk)
    return np.concatenate(blocks).reshape(-1)


def _decode(key, codes):
    trick = dq.TRICKS[key]
    return trick.run(trick.pack(codes))


def _assert_exact_on_finite(fmt, codes, res):
    ref = formats.decode(fmt, codes)
    got = res.values()
    fin = np.isfinite(ref)
    bad = fin & ~((got == ref) & (np.signbit(got) == np.signbit(ref)))
    assert not bad.any(), (
        f"{int(bad.sum())} mismatches, first codes {np.unique(codes[bad])[:8]}: "
        f"got {got[bad][:8]} want {ref[bad][:8]}"
    )
    return ref, got


def _bits_of(key, code, position=0):
    """The fp16/bf16 pattern emitted for one code at one logical position."""
    trick = dq.TRICKS[key]
    codes = np.zeros(trick.elements_per_word, dtype=np.int64)
    codes[position] = code
    res = trick.run(trick.pack(codes))
    return int(res.bits[position]), res.factor


# --------------------------------------------------------------------------- exhaustive


@pytest.mark.parametrize("key", ALL_TRICKS, ids=["-".join(k) for k in ALL_TRICKS])
def test_every_code_every_position(key):
    trick = dq.TRICKS[key]
    spec = formats.get_format(trick.fmt)
    codes = _positions_codes(spec.n_codes, trick.elements_per_word)
    res = _decode(key, codes)
    assert res.bits.dtype == np.uint16 and res.bits.shape == codes.shape
    ref, got = _assert_exact_on_finite(trick.fmt, codes, res)
    # every finite code of the format was decoded at every position
    n_finite = int(np.isfinite(formats.decode(trick.fmt, np.arange(spec.n_codes))).sum())
    assert int(np.isfinite(ref).sum()) >= n_finite * trick.elements_per_word


@pytest.mark.parametrize("key", ALL_TRICKS, ids=["-".join(k) for k in ALL_TRICKS])
def test_every_pair_of_codes_in_every_pair_of_positions(key):
    trick = dq.TRICKS[key]
    spec = formats.get_format(trick.fmt)
    codes = _pair_codes(spec.n_codes, trick.elements_per_word)
    _assert_exact_on_finite(trick.fmt, codes, _decode(key, codes))


@pytest.mark.parametrize("key", ALL_TRICKS, ids=["-".join(k) for k in ALL_TRICKS])
def test_output_does_not_depend_on_neighbours(key):
    # Same code at position 0, two very different neighbourhoods: identical pattern.
    trick = dq.TRICKS[key]
    n = formats.get_format(trick.fmt).n_codes
    epw = trick.elements_per_word
    lo = np.zeros((n, epw), dtype=np.int64)
    hi = np.full((n, epw), n - 1, dtype=np.int64)
    lo[:, 0] = hi[:, 0] = np.arange(n)
    a = _decode(key, lo.reshape(-1)).bits.reshape(n, epw)[:, 0]
    b = _decode(key, hi.reshape(-1)).bits.reshape(n, epw)[:, 0]
    assert np.array_equal(a, b)


# --------------------------------------------------------------------------- NaN / inf


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("trick", ["shift", "shift+mul"])
def test_e4m3_nan_codes_become_480(target, trick):
    # e4m3fn has no inf; S.1111.111 is NaN. The and/shift/or trick does not special-case it,
    # so it decodes as if it were 1.111 * 2^8 = 480: finite, sign kept. Weights never hold
    # NaN (quantisers saturate at 448), so Marlin accepts this on purpose.
    key = ("e4m3", target, trick)
    for code, want in ((0x7F, 480.0), (0xFF, -480.0)):
        for pos in range(4):
            codes = np.zeros(4, dtype=np.int64)
            codes[pos] = code
            assert _decode(key, codes).values()[pos] == want
    assert np.isnan(formats.decode("e4m3", [0x7F, 0xFF])).all()


def test_e5m2_prmt_keeps_inf_and_nan():
    # e5m2 is bit-identical to the top byte of fp16, so inf stays inf and NaN stays NaN,
    # with its payload: pattern = code << 8.
    codes = np.array([0x7C, 0xFC, 0x7D, 0xFF])
    res = _decode(("e5m2", "fp16", "prmt"), codes)
    assert [int(b) for b in res.bits] == [0x7C00, 0xFC00, 0x7D00, 0xFF00]
    v = res.values()
    assert v[0] == np.inf and v[1] == -np.inf and np.isnan(v[2:]).all()


def test_e5m2_bf16_shift_makes_inf_finite():
    # exponent 11111 lands in bf16's exponent field as 31 (not 255), so inf 0x7C decodes as
    # 2^(31-127) * 2^112 = 2^16 = 65536 and the NaN 0x7F as 1.75 * 2^16.
    res = _decode(("e5m2", "bf16", "shift"), np.array([0x7C, 0xFC, 0x7F, 0x00]))
    assert list(res.values()) == [65536.0, -65536.0, 114688.0, 0.0]


# --------------------------------------------------------------------------- corner cases


def test_e4m3_fp16_corner_patterns():
    key = ("e4m3", "fp16", "shift")
    # 0x01 = 2^-9, the smallest subnormal: its mantissa bit lands on fp16 bit 7 after the
    # >>1, i.e. pattern 0x0080 = 2^7 * 2^-24 = 2^-17 (an fp16 subnormal); * 2^8 = 2^-9.
    assert _bits_of(key, 0x01) == (0x0080, 256.0)
    # 0x07 = 7 * 2^-9, the largest subnormal: 0x0380 = 7 * 2^-17.
    assert _bits_of(key, 0x07)[0] == 0x0380
    # 0x08 = 2^-6, smallest normal: exponent field 00001 in fp16 is 2^-14; * 2^8 = 2^-6.
    assert _bits_of(key, 0x08)[0] == 0x0400
    # 0x38 = 1.0: exponent 0111 -> fp16 field 00111 = 2^-8, so 0x1C00; * 2^8 = 1.
    assert _bits_of(key, 0x38)[0] == 0x1C00
    # 0x7E = 448, the largest finite: 0x3F00 = 1.75 * 2^0; * 2^8 = 448.
    assert _bits_of(key, 0x7E)[0] == 0x3F00
    # 0x80 = -0.0: only the sign bit survives, fp16 -0.0 = 0x8000.
    assert _bits_of(key, 0x80)[0] == 0x8000
    # 0x00 = +0.0 stays 0x0000.
    assert _bits_of(key, 0x00)[0] == 0x0000
    # 0x7F (NaN in e4m3fn) -> 0x3F80 = 1.875: finite, * 2^8 = 480.
    assert _bits_of(key, 0x7F)[0] == 0x3F80


def test_e4m3_bf16_corner_patterns():
    key = ("e4m3", "bf16", "shift")
    # 0x01 = 2^-9: >>4 puts the mantissa bit at bf16 bit 4: 0x0010 = 16 * 2^-133 = 2^-129,
    # a bf16 subnormal; * 2^120 = 2^-9.
    assert _bits_of(key, 0x01) == (0x0010, 2.0**120)
    # 0x38 = 1.0 -> exponent field 00000111 = 2^-120: 0x0380.
    assert _bits_of(key, 0x38)[0] == 0x0380
    assert _bits_of(key, 0x80)[0] == 0x8000  # -0.0 keeps its sign
    assert _bits_of(key, 0xFF)[0] == 0x87F0  # NaN -> -1.875 * 2^-112, i.e. -480 after scaling


def test_e2m1_corner_patterns():
    # The codes a shared-derivation test once let through wrong (tilelang): 0x0 and 0x1.
    key = ("e2m1", "fp16", "shift")
    # 0x0 = +0.0 -> 0x0000.
    assert _bits_of(key, 0x0) == (0x0000, 2.0**14)
    # 0x1 = 0.5, the only positive subnormal: its mantissa bit lands on fp16 bit 9:
    # 0x0200 = 2^9 * 2^-24 = 2^-15; * 2^14 = 0.5.
    assert _bits_of(key, 0x1)[0] == 0x0200
    # 0x2 = 1.0: exponent 01 -> fp16 field 00001 = 2^-14: 0x0400; * 2^14 = 1.
    assert _bits_of(key, 0x2)[0] == 0x0400
    # 0x7 = 6.0: 0x0E00 = 1.5 * 2^(3-15); * 2^14 = 6.
    assert _bits_of(key, 0x7)[0] == 0x0E00
    # 0x8 = -0.0 -> 0x8000; 0x9 = -0.5 -> 0x8200.
    assert _bits_of(key, 0x8)[0] == 0x8000
    assert _bits_of(key, 0x9)[0] == 0x8200
    # bf16: 0x1 -> bit 6 (shift 6): 0x0040 = 64 * 2^-133 = 2^-127; * 2^126 = 0.5.
    assert _bits_of(("e2m1", "bf16", "shift"), 0x1) == (0x0040, 2.0**126)
    # every position of the 8, since each pair comes from a different shift
    for pos in range(8):
        assert _bits_of(key, 0x1, pos)[0] == 0x0200


def test_int_corner_patterns():
    # int4 code 0 = -8: (1024 + 0) - 1032 = -8 = fp16 0xC800; through the 1/16 FMA path too.
    for pos in range(8):
        assert _bits_of(("int4", "fp16", "magic"), 0, pos)[0] == 0xC800
        # code 8 = 0: 1032 - 1032 is +0 under round-to-nearest (never -0).
        assert _bits_of(("int4", "fp16", "magic"), 8, pos)[0] == 0x0000
        assert _bits_of(("int4", "bf16", "magic"), 0, pos)[0] == 0xC100  # -8 in bf16
        assert _bits_of(("int4", "bf16", "magic"), 15, pos)[0] == 0x40E0  # 7 in bf16
    for pos in range(4):
        assert _bits_of(("int8", "fp16", "magic"), 0, pos)[0] == 0xD800  # -128
        assert _bits_of(("int8", "fp16", "magic"), 255, pos)[0] == 0x57F0  # 127
        assert _bits_of(("int8", "bf16", "magic"), 0, pos)[0] == 0xC300  # -128 in bf16
        assert _bits_of(("int8", "bf16", "magic"), 255, pos)[0] == 0x42FE  # 127 in bf16
        assert _bits_of(("int8", "bf16", "magic"), 128, pos)[0] == 0x0000  # +0


@pytest.mark.parametrize(
    "key, factor",
    [
        (("e4m3", "fp16", "shift"), 2.0**8),  # fp16 bias 15 - e4m3 bias 7
        (("e4m3", "bf16", "shift"), 2.0**120),  # 127 - 7
        (("e5m2", "bf16", "shift"), 2.0**112),  # 127 - 15
        (("e2m1", "fp16", "shift"), 2.0**14),  # 15 - 1
        (("e2m1", "bf16", "shift"), 2.0**126),  # 127 - 1
        (("e4m3", "fp16", "shift+mul"), 1.0),  # multiplied in registers instead
        (("int4", "fp16", "magic"), 1.0),
        (("int8", "bf16", "magic"), 1.0),
    ],
)
def test_folded_factor(key, factor):
    assert _decode(key, np.zeros(dq.TRICKS[key].elements_per_word, dtype=np.int64)).factor == factor


# --------------------------------------------------------------------------- op counts


def test_e4m3_fp16_is_seven_and_shift_or_per_four_values():
    # C2: 4 values per 32-bit word, 7 instructions, only and/shift/or (3 per half2 + 1 shift):
    # LOP3 (and), SHF.R, LOP3 (and-or), SHF.L, LOP3, SHF.R, LOP3.
    res = dq.dequant_e4m3_fp16(dq.pack_bytes(np.arange(4)))
    assert res.ops_per_word == 7
    assert res.ops_per_element == 7 / 4
    assert res.op_counts == {"LOP3.LUT": 4, "SHF.R.U32.HI": 2, "SHF.L.U32": 1}
    assert [i.op for i in res.trace] == [
        "LOP3.LUT", "SHF.R.U32.HI", "LOP3.LUT", "SHF.L.U32", "LOP3.LUT", "SHF.R.U32.HI", "LOP3.LUT",
    ]


@pytest.mark.parametrize(
    "key, per_word, mix",
    [
        (("e4m3", "bf16", "shift"), 7, {"LOP3.LUT": 4, "SHF.R.U32.HI": 2, "SHF.L.U32": 1}),
        # + one multiply per half2 when the bias is not folded into the scale
        (("e4m3", "fp16", "shift+mul"), 9, {"LOP3.LUT": 4, "SHF.R.U32.HI": 2, "SHF.L.U32": 1, "HMUL2": 2}),
        (("e4m3", "bf16", "shift+mul"), 9, {"LOP3.LUT": 4, "SHF.R.U32.HI": 2, "SHF.L.U32": 1, "HFMA2.BF16_V2": 2}),
        (("e5m2", "fp16", "prmt"), 2, {"PRMT": 2}),
        # 8 values: one SHF.L 8, then twice the 7-instruction e4m3-shaped sequence
        (("e2m1", "fp16", "shift"), 15, {"LOP3.LUT": 8, "SHF.R.U32.HI": 4, "SHF.L.U32": 3}),
        (("e2m1", "bf16", "shift+mul"), 19, {"LOP3.LUT": 8, "SHF.R.U32.HI": 4, "SHF.L.U32": 3, "HFMA2.BF16_V2": 4}),
        # 4 LOP3 under the magic, 1 SHF, 2 HADD2 + 2 HFMA2 (the 1/16 trick saves shifts)
        (("int4", "fp16", "magic"), 9, {"LOP3.LUT": 4, "SHF.R.U32.HI": 1, "HADD2": 2, "HFMA2": 2}),
        (("int4", "bf16", "magic"), 11, {"LOP3.LUT": 4, "SHF.R.U32.HI": 3, "HFMA2.BF16_V2": 4}),
        (("int8", "fp16", "magic"), 4, {"PRMT": 2, "HADD2": 2}),
        (("int8", "bf16", "magic"), 10, {"PRMT": 6, "FADD": 4}),
    ],
)
def test_op_counts(key, per_word, mix):
    trick = dq.TRICKS[key]
    res = _decode(key, np.zeros(trick.elements_per_word, dtype=np.int64))
    assert res.ops_per_word == per_word
    assert res.op_counts == mix
    assert res.ops_per_element == per_word / trick.elements_per_word


def test_counter_counts_what_executes():
    # The count comes from executing instructions, not from a table: two calls, two entries.
    ctr = dq.OpCounter()
    w = np.arange(3, dtype=np.uint32)
    dq.lop3(w, 1, 2, 0xEA, ctr=ctr)
    dq.shf_l(w, 3, ctr=ctr)
    assert len(ctr) == 2 and ctr.counts == {"LOP3.LUT": 1, "SHF.L.U32": 1}


def test_shift_tricks_use_integer_ops_only():
    # C2's "with and/shift/or only": no floating-point instruction in the folded-bias tricks.
    for key in [k for k in ALL_TRICKS if k[2] == "shift"]:
        res = _decode(key, np.zeros(dq.TRICKS[key].elements_per_word, dtype=np.int64))
        assert set(res.op_counts) <= {"LOP3.LUT", "SHF.R.U32.HI", "SHF.L.U32"}, key


# --------------------------------------------------------------------------- primitives


def test_lop3_lut_constants():
    # PTX: ta=0xF0, tb=0xCC, tc=0xAA.
    assert dq.lop3_lut(lambda a, b, c: (a & b) | c) == 0xEA
    assert dq.lop3_lut(lambda a, b, c: a & b) == 0xC0
    assert dq.lop3_lut(lambda a, b, c: a ^ b ^ c) == 0x96


def test_lop3_every_lut_bitwise():
    # Reference: for each bit, index the LUT with (a_bit<<2 | b_bit<<1 | c_bit), in Python ints.
    a, b, c = (int(x) for x in RNG.integers(0, 2**32, size=3, dtype=np.uint64))
    ctr = dq.OpCounter()
    for lut in range(256):
        got = int(dq.lop3(np.array([a], np.uint32), b, c, lut, ctr=ctr)[0])
        want = 0
        for bit in range(32):
            idx = ((a >> bit & 1) << 2) | ((b >> bit & 1) << 1) | (c >> bit & 1)
            want |= ((lut >> idx) & 1) << bit
        assert got == want, hex(lut)


def _prmt_ref(a, b, sel):
    src = a.to_bytes(4, "little") + b.to_bytes(4, "little")
    out = bytearray()
    for k in range(4):
        nib = (sel >> 4 * k) & 0xF
        byte = src[nib & 7]
        out.append((0xFF if byte & 0x80 else 0) if nib & 8 else byte)
    return int.from_bytes(out, "little")


def test_prmt():
    ctr = dq.OpCounter()
    a, b = 0x44332211, 0x88776655
    A = np.array([a], np.uint32)
    assert int(dq.prmt(A, b, 0x3210, ctr=ctr)[0]) == a
    assert int(dq.prmt(A, b, 0x7654, ctr=ctr)[0]) == b
    assert int(dq.prmt(A, b, 0x0123, ctr=ctr)[0]) == 0x11223344  # byte swap
    # sign mode: nibble 0xF = byte 7 (0x88, negative) replicated -> 0xFF
    assert int(dq.prmt(A, b, 0x000F, ctr=ctr)[0]) == 0x111111FF
    for sel in RNG.integers(0, 2**16, size=200):
        assert int(dq.prmt(A, b, int(sel), ctr=ctr)[0]) == _prmt_ref(a, b, int(sel))


def test_shifts_clamp():
    ctr = dq.OpCounter()
    w = np.array([0x80000001], np.uint32)
    assert int(dq.shf_l(w, 0, ctr=ctr)[0]) == 0x80000001
    assert int(dq.shf_l(w, 31, ctr=ctr)[0]) == 0x80000000
    assert int(dq.shf_l(w, 32, ctr=ctr)[0]) == 0
    assert int(dq.shf_r(w, 31, ctr=ctr)[0]) == 1
    assert int(dq.shf_r(w, 40, ctr=ctr)[0]) == 0


def _random_f16_bits(n):
    bits = RNG.integers(0, 2**16, size=n, dtype=np.uint64).astype(np.uint16)
    return bits[np.isfinite(bits.view(np.float16))]


def test_hadd2_matches_numpy_rounding():
    # fp16 + fp16 is exact in float64, and numpy's float64 -> float16 cast rounds to nearest
    # even directly: an independent correctly rounded reference.
    a, b = _random_f16_bits(20000), _random_f16_bits(20000)
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    wa = a.astype(np.uint32) | (b.astype(np.uint32) << 16)
    wb = b.astype(np.uint32) | (a.astype(np.uint32) << 16)
    got = dq.hadd2(wa, wb, ctr=dq.OpCounter())
    with np.errstate(over="ignore"):
        want = (a.view(np.float16).astype(np.float64) + b.view(np.float16).astype(np.float64)).astype(np.float16)
    assert np.array_equal((got & 0xFFFF).astype(np.uint16), want.view(np.uint16))
    assert np.array_equal((got >> 16).astype(np.uint16), want.view(np.uint16))


def _round_fraction(x: Fraction, p: int, emin: int, max_finite: float) -> float:
    """Round an exact rational to nearest even with p-bit significands: integer arithmetic."""
    if x == 0:
        return 0.0
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    e = max(e, emin)
    scaled = x / Fraction(2) ** (e - p + 1)
    q, r = divmod(scaled.numerator, scaled.denominator)
    if 2 * r > scaled.denominator or (2 * r == scaled.denominator and q % 2):
        q += 1
    val = q * Fraction(2) ** (e - p + 1)
    return sign * (float("inf") if val > Fraction(max_finite) else float(val))


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_fma_single_rounding(target):
    dtype, fmt, fma = (
        (np.float16, (11, -14, 65504.0), dq.hfma2)
        if target == "fp16"
        else (ml_dtypes.bfloat16, (8, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)), dq.hfma2_bf16)
    )

    def f(v):
        return int(np.array(v, dtype=dtype).view(np.uint16))

    # Designed double-rounding traps (the exact result sits just below a halfway point; a
    # float32 intermediate would land on the halfway point and round the wrong way).
    if target == "fp16":
        a, b, c, want = 1.5, 1 + 2.0**-10, -(2.0**-24), 1.5 + 2.0**-10
    else:
        a, b, c, want = 1.75, 1.15625, -(2.0**-40), 2 + 2.0**-6
    got = fma(np.array([f(a)], np.uint32), f(b), f(c), ctr=dq.OpCounter())
    assert float(np.array([got[0] & 0xFFFF], np.uint16).view(dtype)[0]) == want
    # Random inputs (finite, moderate range) against exact rational arithmetic.
    rng = np.random.default_rng(7)
    vals = (rng.standard_normal(3 * 3000) * 2.0 ** rng.integers(-12, 12, 3 * 3000)).astype(dtype)
    bits = vals.view(np.uint16).astype(np.uint32).reshape(3, -1)
    got = fma(bits[0], bits[1], bits[2], ctr=dq.OpCounter()) & 0xFFFF
    got = got.astype(np.uint16).view(dtype).astype(np.float64)
    fv = vals.astype(np.float64).reshape(3, -1)
    for i in range(fv.shape[1]):
        exact = Fraction(fv[0, i]) * Fraction(fv[1, i]) + Fraction(fv[2, i])
        assert got[i] == _round_fraction(exact, *fmt), (fv[:, i], got[i])


def test_fadd_single_rounding():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(2000) * 2.0 ** rng.integers(-60, 60, 2000)).astype(np.float32)
    b = (rng.standard_normal(2000) * 2.0 ** rng.integers(-60, 60, 2000)).astype(np.float32)
    got = dq.fadd(a.view(np.uint32), b.view(np.uint32), ctr=dq.OpCounter()).view(np.float32)
    # float32 + float32 in exact rationals, rounded to 24 bits.
    for x, y, g in zip(a.astype(float), b.astype(float), got.astype(float)):
        assert g == _round_fraction(Fraction(x) + Fraction(y), 24, -126, float(np.finfo(np.float32).max))


# --------------------------------------------------------------------------- packing


def test_pack_layout_by_hand():
    # bytes: byte i holds element BYTE_ORDER[i] = (0, 2, 1, 3)
    assert int(dq.pack_bytes(np.array([0x11, 0x22, 0x33, 0x44]))[0]) == 0x44223311
    # nibbles: nibble i holds element (0, 2, 4, 6, 1, 3, 5, 7)[i]
    assert int(dq.pack_nibbles(np.arange(8))[0]) == 0x75316420


def test_pack_roundtrip():
    c8 = RNG.integers(0, 256, size=400)
    c4 = RNG.integers(0, 16, size=400)
    assert np.array_equal(dq.unpack_bytes(dq.pack_bytes(c8)), c8)
    assert np.array_equal(dq.unpack_nibbles(dq.pack_nibbles(c4)), c4)
    assert np.array_equal(dq.pack("e4m3", c8), dq.pack_bytes(c8))
    assert np.array_equal(dq.pack("int4", c4), dq.pack_nibbles(c4))


# --------------------------------------------------------------------------- bad input


def test_bad_inputs():
    with pytest.raises(ValueError, match="dtype uint32"):
        dq.dequant_e4m3_fp16(np.arange(4, dtype=np.int32))
    with pytest.raises(ValueError, match="dtype uint32"):
        dq.dequant_int4_fp16([1, 2, 3])
    with pytest.raises(ValueError, match="1-D"):
        dq.dequant_e2m1_bf16(np.zeros((2, 2), dtype=np.uint32))
    with pytest.raises(ValueError, match="multiple of 4"):
        dq.pack_bytes(np.arange(5))
    with pytest.raises(ValueError, match="multiple of 8"):
        dq.pack_nibbles(np.arange(12) % 16)
    with pytest.raises(ValueError, match=r"0\.\.15"):
        dq.pack_nibbles(np.array([16, 0, 0, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match=r"0\.\.255"):
        dq.pack_bytes(np.array([-1, 0, 0, 0]))
    with pytest.raises(ValueError, match="integer"):
        dq.pack_bytes(np.zeros(4))
    with pytest.raises(ValueError, match="1-D"):
        dq.pack_bytes(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="no dequant trick"):
        dq.dequant("e4m3", "fp32", np.zeros(1, np.uint32))
    with pytest.raises(ValueError, match="fmt must be one of"):
        dq.pack("e3m3", np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="8 bits"):
        dq.lop3(np.zeros(1, np.uint32), 0, 0, 0x100, ctr=dq.OpCounter())
    with pytest.raises(ValueError, match=">= 0"):
        dq.shf_l(np.zeros(1, np.uint32), -1, ctr=dq.OpCounter())
    with pytest.raises(ValueError, match="uint32"):
        dq.lop3(np.zeros(1, np.int64), 0, 0, 0xEA, ctr=dq.OpCounter())


# ------------------------------------------------------------------ memory: emulate in chunks
def test_chunked_emulation_is_the_same_as_whole(monkeypatch):
    rng = np.random.default_rng(7)
    w = rng.integers(0, 2**32, size=5003, dtype=np.uint64).astype(np.uint32)
    whole = {k: t.run(w) for k, t in dq.TRICKS.items()}
    monkeypatch.setattr(dq, "EMULATE_CHUNK_WORDS", 1000)        # 6 chunks, the last one short
    for k, t in dq.TRICKS.items():
        got = t.run(w)
        np.testing.assert_array_equal(got.bits, whole[k].bits, err_msg=str(k))
        assert got.trace == whole[k].trace and got.factor == whole[k].factor


@pytest.mark.parametrize("key", [("e2m1", "bf16", "shift+mul"), ("int4", "bf16", "magic"),
                                 ("e4m3", "fp16", "shift+mul")])
def test_emulating_a_big_weight_needs_little_more_than_its_output(key):
    # Whole, these sequences peak at ~26-29x their input (one new array per instruction).
    import tracemalloc
    w = np.arange(1 << 22, dtype=np.uint32) * np.uint32(2654435761)
    trick = dq.TRICKS[key]
    tracemalloc.start()
    try:
        res = trick.run(w)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out = res.bits.nbytes                                          # 2 B per element
    assert peak < out + 40 * 4 * dq.EMULATE_CHUNK_WORDS, (peak / w.nbytes, key)
