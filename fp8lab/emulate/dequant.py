"""Marlin-style in-register dequant, emulated as explicit 32-bit integer instructions.

Each emulator takes packed ``uint32`` words (one per thread register) and issues the same
sequence of instructions a CUDA kernel would (``LOP3.LUT``, ``SHF``, ``PRMT``, ``HADD2`` /
``HFMA2`` ...), each on the whole array of words at once. Every instruction is counted when it
executes, so ``ops_per_word`` is the length of the sequence really run, not a number typed in.
The GPU kernels implement exactly these sequences and are checked bitwise against them.

Output: the fp16 / bf16 bit patterns (``uint16``) in logical element order, plus ``factor``,
the exact power of two the kernel folds into the (per-group) scale instead of multiplying
every element: ``value = float(pattern) * factor``.

Packing layout (what the tricks consume; ``pack_*`` take codes in logical order):

* 8-bit formats (e4m3, e5m2, int8): 4 codes per word. Byte ``i`` (bits 8i..8i+7) holds logical
  element ``BYTE_ORDER[i]`` with ``BYTE_ORDER = (0, 2, 1, 3)``: the and/shift/or trick and the
  PRMT trick both produce a half2 from bytes {0, 2} and another from bytes {1, 3}, so storing
  elements (0, 1) in bytes (0, 2) makes each half2 hold consecutive elements.
* 4-bit formats (e2m1, int4): 8 codes per word. Nibble ``i`` (bits 4i..4i+3) holds logical
  element ``NIBBLE_ORDER[i]`` with ``NIBBLE_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)`` (Marlin's
  interleave): nibbles {i, i+4} sit at the same offset in the two 16-bit halves, so one mask
  extracts an (element 2j, element 2j+1) pair.

Shapes: every emulator takes ``words``: (n_words,) uint32 and returns
``DequantResult.bits``: (n_words * E,) uint16, E = elements per word (4 or 8).

Output element order: ``bits[w*E + j]`` is logical element ``j`` of word ``w``
(E = elements per word); half2 number ``k`` of a word holds elements (2k, 2k+1) in its
(low, high) lanes, which is the order an mma B fragment wants.

Arithmetic instructions round as the hardware does: round to nearest even, once (fused for
FMA), subnormals kept (no FTZ), NaN results canonical (0x7FFF / 0x7FFFFFFF). bf16 arithmetic is
issued as ``HFMA2.BF16_V2`` (a*1+b for a subtract, a*b-0 for a multiply): that is what nvcc
emits for ``__hsub2`` / ``__hmul2`` on bf16 from sm_80 on, so the count holds on Ampere and
Hopper alike.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import ml_dtypes
import numpy as np

from fp8lab.emulate.formats import get_format

__all__ = [
    "BYTE_ORDER",
    "NIBBLE_ORDER",
    "Instr",
    "OpCounter",
    "DequantResult",
    "Trick",
    "TRICKS",
    "lop3_lut",
    "lop3",
    "shf_l",
    "shf_r",
    "prmt",
    "hadd2",
    "hmul2",
    "hfma2",
    "hfma2_bf16",
    "fadd",
    "pack_bytes",
    "pack_nibbles",
    "pack",
    "unpack_bytes",
    "unpack_nibbles",
    "dequant",
    "dequant_e4m3_fp16",
    "dequant_e4m3_bf16",
    "dequant_e5m2_fp16",
    "dequant_e5m2_bf16",
    "dequant_e2m1_fp16",
    "dequant_e2m1_bf16",
    "dequant_int4_fp16",
    "dequant_int4_bf16",
    "dequant_int8_fp16",
    "dequant_int8_bf16",
]

BYTE_ORDER = (0, 2, 1, 3)
NIBBLE_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)

_U32 = np.uint32
_M16 = _U32(0xFFFF)


# --------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class Instr:
    """One issued instruction: SASS opcode and a C-like note of what it computes."""

    op: str
    asm: str = ""

    def __str__(self) -> str:
        return f"{self.op:<14} {self.asm}"


@dataclass
class OpCounter:
    """Collects the instructions an emulator executes.

    Each emulated instruction runs once on the whole array of words, which stands for one
    thread issuing it once for its word: the trace length is instructions per word.
    """

    trace: list[Instr] = field(default_factory=list)

    def issue(self, op: str, asm: str = "") -> None:
        self.trace.append(Instr(op, asm))

    def __len__(self) -> int:
        return len(self.trace)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(i.op for i in self.trace))


# --------------------------------------------------------------------------- integer ops


def _u32(x) -> np.ndarray:
    """An operand: a uint32 array, or a Python int immediate (0..2^32-1)."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.uint32:
            raise ValueError(f"operands must be uint32, got dtype {x.dtype}")
        return x
    x = int(x)
    if not 0 <= x < 1 << 32:
        raise ValueError(f"immediate must fit 32 bits (0..0xFFFFFFFF), got {x:#x}")
    return np.asarray(x, dtype=np.uint32)


def lop3_lut(f: Callable[[int, int, int], int]) -> int:
    """The 8-bit LUT of a three-input logic function, as PTX defines it.

    PTX evaluates ``f`` on the constants ta=0xF0, tb=0xCC, tc=0xAA: bit ``i`` of the result is
    f applied to bit ``i`` of each, and bit ``i`` of (ta, tb, tc) enumerates all 8 input
    combinations. Example: ``lop3_lut(lambda a, b, c: (a & b) | c) == 0xEA``.
    """
    return f(0xF0, 0xCC, 0xAA) & 0xFF


def lop3(a, b, c, lut: int, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``LOP3.LUT d, a, b, c, lut``: any three-input bitwise function in one instruction.

    Evaluated generically from the LUT (sum of minterms), so a wrong LUT gives a wrong result
    instead of silently doing what was meant.
    """
    if not 0 <= int(lut) <= 0xFF:
        raise ValueError(f"lop3 lut must be 8 bits (0..0xFF), got {lut:#x}")
    a, b, c = _u32(a), _u32(b), _u32(c)
    na, nb, nc = ~a, ~b, ~c
    out = np.zeros(np.broadcast(a, b, c).shape, dtype=np.uint32)
    for i in range(8):
        if (lut >> i) & 1:
            # Minterm i: bit 2 of i selects a (ta = 0xF0 has bit i set iff i >= 4), bit 1
            # selects b (tb = 0xCC), bit 0 selects c (tc = 0xAA).
            out |= (a if i & 4 else na) & (b if i & 2 else nb) & (c if i & 1 else nc)
    ctr.issue("LOP3.LUT", asm or f"lut {lut:#04x}")
    return out


def _check_shift(n: int) -> int:
    n = int(n)
    if n < 0:
        raise ValueError(f"shift amount must be >= 0, got {n}")
    return n


def shf_l(a, n: int, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``SHF.L.U32 d, a, n, RZ``: logical left shift; amounts >= 32 clamp (result 0)."""
    a, n = _u32(a), _check_shift(n)
    out = np.zeros_like(a) if n >= 32 else np.left_shift(a, _U32(n))
    ctr.issue("SHF.L.U32", asm or f"<< {n}")
    return out


def shf_r(a, n: int, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``SHF.R.U32.HI d, RZ, n, a``: logical right shift; amounts >= 32 clamp (result 0)."""
    a, n = _u32(a), _check_shift(n)
    out = np.zeros_like(a) if n >= 32 else np.right_shift(a, _U32(n))
    ctr.issue("SHF.R.U32.HI", asm or f">> {n}")
    return out


def prmt(a, b, selector: int, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``PRMT d, a, selector, b`` in PTX's default mode.

    The 8 source bytes are numbered 0..3 from ``a`` (least significant first) and 4..7 from
    ``b``. Nibble ``k`` of the selector picks output byte ``k``: its low 3 bits choose the
    source byte, its bit 3 asks for the sign of that byte replicated over all 8 bits.
    Selector bits above 15 are ignored, as in hardware. The other PTX modes (f4e, b4e, rc8,
    ecl, ecr, rc16) are not emulated: no trick here uses them.
    """
    a, b = _u32(a), _u32(b)
    selector = int(selector)
    if not 0 <= selector < 1 << 32:
        raise ValueError(f"prmt selector must fit 32 bits, got {selector:#x}")
    shape = np.broadcast(a, b).shape
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    out = np.zeros(shape, dtype=np.uint32)
    for k in range(4):
        nib = (selector >> (4 * k)) & 0xF
        src_idx = nib & 7
        src = a if src_idx < 4 else b
        byte = (src >> _U32(8 * (src_idx & 3))) & _U32(0xFF)
        if nib & 8:
            byte = np.where(byte & _U32(0x80), _U32(0xFF), _U32(0)).astype(np.uint32)
        out |= byte << _U32(8 * k)
    ctr.issue("PRMT", asm or f"sel {selector & 0xFFFF:#06x}")
    return out


# --------------------------------------------------------------------------- rounding

# (precision incl. hidden bit, minimum normal exponent, largest finite value)
_FP16 = (11, -14, 65504.0)
_BF16 = (8, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))
_FP32 = (24, -126, float(np.finfo(np.float32).max))


def _sum_round_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b in float64, rounded to odd instead of to nearest.

    Round-to-odd keeps a sticky bit: rounding the result once more to nearest at a precision
    of at most 51 bits gives the correctly rounded exact sum (no double-rounding error). The
    exact error of the float64 sum comes from TwoSum (Knuth).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        bp = s - a
        err = (a - (s - bp)) + (b - bp)
        fix = np.isfinite(s) & (err != 0) & ((s.view(np.int64) & 1) == 0)
        if np.any(fix):
            toward = np.where(err > 0, np.inf, -np.inf)
            s = np.where(fix, np.nextafter(s, toward), s)
    return s


def _round_nearest(x: np.ndarray, fmt: tuple[int, int, float]) -> np.ndarray:
    """Round float64 ``x`` to nearest even in a binary format (with subnormals, overflow to
    inf). Exact when ``x`` is the exact value or its round-to-odd float64 image."""
    p, emin, max_finite = fmt
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    sel = np.isfinite(x) & (x != 0)
    if np.any(sel):
        xs = x[sel]
        _, e = np.frexp(np.abs(xs))  # |x| = m * 2^e with m in [0.5, 1)
        ulp = np.ldexp(1.0, np.maximum(e - 1, emin) - (p - 1))
        r = np.rint(xs / ulp) * ulp  # dividing by a power of two is exact; rint is RNE
        out[sel] = np.where(np.abs(r) > max_finite, np.copysign(np.inf, r), r)
    return out


def _f16_bits(x: np.ndarray) -> np.ndarray:
    # x is already representable in fp16, so astype is exact; NaN gets the canonical pattern.
    with np.errstate(invalid="ignore", over="ignore"):
        bits = x.astype(np.float16).view(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), bits).astype(np.uint16)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), bits).astype(np.uint16)


def _lanes(w: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The (low, high) 16-bit lanes of a packed word, as float64 values of ``dtype``."""
    lo = (w & _M16).astype(np.uint16).view(dtype).astype(np.float64)
    hi = (w >> _U32(16)).astype(np.uint16).view(dtype).astype(np.float64)
    return lo, hi


def _join(lo_bits: np.ndarray, hi_bits: np.ndarray) -> np.ndarray:
    return lo_bits.astype(np.uint32) | (hi_bits.astype(np.uint32) << _U32(16))


def _fma_lanes(a, b, c, fmt, dtype, to_bits) -> np.ndarray:
    """Per 16-bit lane: round(a * b + c) once. The product of two <=24-bit significands is
    exact in float64, so the only rounding is the final one."""
    a, b, c = _u32(a), _u32(b), _u32(c)
    shape = np.broadcast(a, b, c).shape
    outs = []
    for la, lb, lc in zip(_lanes(a, dtype), _lanes(b, dtype), _lanes(c, dtype)):
        with np.errstate(invalid="ignore", over="ignore"):
            s = _sum_round_to_odd(la * lb, lc)
        outs.append(np.broadcast_to(to_bits(_round_nearest(s, fmt)), shape))
    return _join(*outs)


_ONE_F16X2 = 0x3C003C00
_ONE_BF16X2 = 0x3F803F80
_NEG_ZERO_X2 = 0x80008000


def hfma2(a, b, c, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``HFMA2 d, a, b, c``: fused a*b+c on two fp16 lanes, one rounding (RN)."""
    out = _fma_lanes(a, b, c, _FP16, np.float16, _f16_bits)
    ctr.issue("HFMA2", asm)
    return out


def hadd2(a, b, *, neg_b: bool = False, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``HADD2 d, a, [-]b``: fp16x2 add (a subtract with the negate modifier, as SASS does)."""
    b = _u32(b)
    if neg_b:
        b = b ^ _U32(_NEG_ZERO_X2)  # negation only flips the two sign bits: exact
    out = _fma_lanes(a, _ONE_F16X2, b, _FP16, np.float16, _f16_bits)
    ctr.issue("HADD2", asm)
    return out


def hmul2(a, b, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``HMUL2 d, a, b``: fp16x2 multiply (RN); as a*b + (-0) so that -0 * x keeps its sign."""
    out = _fma_lanes(a, b, _NEG_ZERO_X2, _FP16, np.float16, _f16_bits)
    ctr.issue("HMUL2", asm)
    return out


def hfma2_bf16(a, b, c, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``HFMA2.BF16_V2 d, a, b, c``: fused a*b+c on two bf16 lanes, one rounding (RN)."""
    out = _fma_lanes(a, b, c, _BF16, ml_dtypes.bfloat16, _bf16_bits)
    ctr.issue("HFMA2.BF16_V2", asm)
    return out


def fadd(a, b, *, ctr: OpCounter, asm: str = "") -> np.ndarray:
    """``FADD d, a, b``: fp32 add (RN, denormals kept: no .FTZ)."""
    a, b = _u32(a), _u32(b)
    fa = a.view(np.float32).astype(np.float64)
    fb = b.view(np.float32).astype(np.float64)
    r = _round_nearest(_sum_round_to_odd(*np.broadcast_arrays(fa, fb)), _FP32)
    with np.errstate(invalid="ignore", over="ignore"):
        bits = r.astype(np.float32).view(np.uint32)
    out = np.where(np.isnan(r), _U32(0x7FFFFFFF), bits).astype(np.uint32)
    ctr.issue("FADD", asm)
    return out


# --------------------------------------------------------------------------- packing


def _check_codes(codes, bits: int, per_word: int) -> np.ndarray:
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be an integer array, got dtype {codes.dtype}")
    if codes.ndim != 1:
        raise ValueError(f"codes must be 1-D (logical order), got shape {codes.shape}")
    if codes.size % per_word:
        raise ValueError(
            f"codes length must be a multiple of {per_word} ({per_word} {bits}-bit codes per "
            f"32-bit word), got {codes.size}"
        )
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << bits):
        raise ValueError(
            f"{bits}-bit codes must lie in 0..{(1 << bits) - 1}, "
            f"got min {codes.min()} max {codes.max()}"
        )
    return codes.astype(np.uint32).reshape(-1, per_word)


def _pack(codes, bits: int, order) -> np.ndarray:
    """len(order) logical ``bits``-bit codes per word; field i holds element ``order[i]``."""
    c = _check_codes(codes, bits, len(order))
    w = np.zeros(c.shape[0], dtype=np.uint32)
    for i, elem in enumerate(order):
        w |= c[:, elem] << _U32(bits * i)
    return w


def pack_bytes(codes) -> np.ndarray:
    """4 logical 8-bit codes per word; byte i holds element ``BYTE_ORDER[i]``."""
    return _pack(codes, 8, BYTE_ORDER)


def pack_nibbles(codes) -> np.ndarray:
    """8 logical 4-bit codes per word; nibble i holds element ``NIBBLE_ORDER[i]``."""
    return _pack(codes, 4, NIBBLE_ORDER)


def _check_words(words) -> np.ndarray:
    if not isinstance(words, np.ndarray) or words.dtype != np.uint32:
        got = words.dtype if isinstance(words, np.ndarray) else type(words).__name__
        raise ValueError(f"words must be a numpy array of dtype uint32 (packed words), got {got}")
    if words.ndim != 1:
        raise ValueError(f"words must be 1-D (one packed word per entry), got shape {words.shape}")
    return words


def _unpack(words, bits: int, order) -> np.ndarray:
    w = _check_words(words)
    out = np.zeros((w.size, len(order)), dtype=np.uint32)
    for i, elem in enumerate(order):
        out[:, elem] = (w >> _U32(bits * i)) & _U32((1 << bits) - 1)
    return out.reshape(-1)


def unpack_bytes(words) -> np.ndarray:
    """Inverse of :func:`pack_bytes` (logical order), for tests and display."""
    return _unpack(words, 8, BYTE_ORDER)


def unpack_nibbles(words) -> np.ndarray:
    """Inverse of :func:`pack_nibbles` (logical order)."""
    return _unpack(words, 4, NIBBLE_ORDER)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class DequantResult:
    """What one emulator produced for an array of words."""

    bits: np.ndarray  # (n_words * elements_per_word,) uint16, logical element order
    target: str  # "fp16" | "bf16": how to read ``bits``
    factor: float  # exact power of two folded into the scale: value = bits-as-target * factor
    elements_per_word: int
    trace: tuple[Instr, ...]  # the instructions issued per word, in order

    @property
    def ops_per_word(self) -> int:
        return len(self.trace)

    @property
    def ops_per_element(self) -> float:
        return len(self.trace) / self.elements_per_word

    @property
    def op_counts(self) -> dict[str, int]:
        return dict(Counter(i.op for i in self.trace))

    def values(self) -> np.ndarray:
        """The decoded values in float64: the pattern read as fp16/bf16, times ``factor``.

        Multiplying by a power of two is exact in float64 for every value here.
        """
        dtype = np.float16 if self.target == "fp16" else ml_dtypes.bfloat16
        with np.errstate(invalid="ignore"):  # signalling-NaN patterns quiet on conversion
            return self.bits.view(dtype).astype(np.float64) * self.factor


def _result(halves: list[np.ndarray], target, factor, epw, ctr) -> DequantResult:
    """``halves``: the packed half2 words in output order (half2 k = elements 2k, 2k+1)."""
    lanes = []
    for h in halves:
        lanes.append((h & _M16).astype(np.uint16))
        lanes.append((h >> _U32(16)).astype(np.uint16))
    bits = np.stack(lanes, axis=1).reshape(-1)
    return DequantResult(bits, target, float(factor), epw, tuple(ctr.trace))


#: words per emulator call: every instruction makes a new array of the input's size and
#: a sequence holds up to ~29 of them, so a weight's whole word array at once would need ~29x
#: its size; in chunks the peak is the output plus ~29 x this many words (4 B each).
EMULATE_CHUNK_WORDS = 1 << 18


def _chunked(f):
    """Run emulator ``f`` over at most EMULATE_CHUNK_WORDS words at a time, into one output
    array (the instruction sequence does not depend on the data, so any chunk's trace is
    the trace)."""
    @functools.wraps(f)
    def run(words, **kw) -> DequantResult:
        w = _check_words(words)
        step = EMULATE_CHUNK_WORDS
        if w.size <= step:
            return f(w, **kw)
        first = f(w[:step], **kw)
        epw = first.elements_per_word
        bits = np.empty(w.size * epw, dtype=np.uint16)
        bits[:step * epw] = first.bits
        for i in range(step, w.size, step):
            part = f(w[i:i + step], **kw)
            bits[i * epw:(i + part.bits.size // epw) * epw] = part.bits
        return dataclasses.replace(first, bits=bits)
    return run


# --------------------------------------------------------------------------- float tricks

_SIGN_X2 = 0x80008000
_LUT_AND = lop3_lut(lambda a, b, c: a & b)  # 0xC0: c is RZ
_LUT_AND_OR = lop3_lut(lambda a, b, c: (a & b) | c)  # 0xEA


def _sign_shift(q, mask: int, shift: int, ctr: OpCounter, label: str) -> np.ndarray:
    """``(q & 0x80008000) | ((q & mask) >> shift)``: 3 instructions.

    The sign stays in bit 15 of each lane; exponent and mantissa move right by the difference
    of exponent widths, which lands them in the target's exponent and mantissa fields with
    the *source* bias, hence the power-of-two factor folded into the scale.
    """
    t = lop3(q, mask, 0, _LUT_AND, ctr=ctr, asm=f"t = {label} & {mask:#010x}")
    t = shf_r(t, shift, ctr=ctr, asm=f"t = t >> {shift}")
    return lop3(q, _SIGN_X2, t, _LUT_AND_OR, ctr=ctr, asm=f"h = ({label} & 0x80008000) | t")


def _scale_in_register(halves, target, factor, ctr) -> list[np.ndarray]:
    """The non-folded variant: multiply every half2 by the bias factor in the kernel."""
    if target == "fp16":
        f = int(np.array(factor, dtype=np.float16).view(np.uint16))
        return [hmul2(h, f | (f << 16), ctr=ctr, asm=f"h *= 2^{int(np.log2(factor))}")
                for h in halves]
    f = int(np.array(factor, dtype=ml_dtypes.bfloat16).view(np.uint16))
    return [hfma2_bf16(h, f | (f << 16), _NEG_ZERO_X2, ctr=ctr,
                       asm=f"h = h * 2^{int(np.log2(factor))} - 0") for h in halves]


def _fp8_shift(words, *, exp_bits: int, target: str, bias: int, scale_in_reg: bool):
    """8-bit float -> fp16/bf16 by and/shift/or (Marlin), 4 values per word."""
    q = _check_words(words)
    ctr = OpCounter()
    tgt_exp, tgt_bias = (5, 15) if target == "fp16" else (8, 127)
    shift = tgt_exp - exp_bits
    # Bytes 1 and 3 already sit in the top of each 16-bit lane: elements (2, 3).
    hi = _sign_shift(q, 0x7F007F00, shift, ctr, "q")
    q8 = shf_l(q, 8, ctr=ctr, asm="q8 = q << 8")
    lo = _sign_shift(q8, 0x7F007F00, shift, ctr, "q8")  # bytes 0 and 2: elements (0, 1)
    factor = 2.0 ** (tgt_bias - bias)
    halves = [lo, hi]
    if scale_in_reg:
        halves, factor = _scale_in_register(halves, target, factor, ctr), 1.0
    return _result(halves, target, factor, 4, ctr)


def _fp4_shift(words, *, target: str, scale_in_reg: bool):
    """E2M1 -> fp16/bf16 by and/shift/or, 8 values per word (Marlin's kFE2M1f path)."""
    q = _check_words(words)
    ctr = OpCounter()
    tgt_exp, tgt_bias = (5, 15) if target == "fp16" else (8, 127)
    shift = tgt_exp - 2
    halves = []
    # One SHF.L moves nibbles 0, 1, 4, 5 (elements 0..3) into the top byte of each lane;
    # the unshifted word carries nibbles 2, 3, 6, 7 (elements 4..7) there already.
    q8 = shf_l(q, 8, ctr=ctr, asm="q8 = q << 8")
    for src, label in ((q8, "q8"), (q, "q")):
        top = _sign_shift(src, 0x70007000, shift, ctr, label)  # nibbles 3/7 of src
        s4 = shf_l(src, 4, ctr=ctr, asm=f"{label}s = {label} << 4")
        nxt = _sign_shift(s4, 0x70007000, shift, ctr, f"{label}s")  # nibbles 2/6 of src
        halves += [nxt, top]
    factor = 2.0 ** (tgt_bias - 1)
    if scale_in_reg:
        halves, factor = _scale_in_register(halves, target, factor, ctr), 1.0
    return _result(halves, target, factor, 8, ctr)


@_chunked
def dequant_e4m3_fp16(words, *, scale_in_reg: bool = False) -> DequantResult:
    """E4M3 (fn) -> fp16, factor 2^8. NaN codes 0x7F/0xFF come out as finite +-480."""
    return _fp8_shift(words, exp_bits=4, target="fp16", bias=7, scale_in_reg=scale_in_reg)


@_chunked
def dequant_e4m3_bf16(words, *, scale_in_reg: bool = False) -> DequantResult:
    """E4M3 (fn) -> bf16, factor 2^120. NaN codes 0x7F/0xFF come out as finite +-480."""
    return _fp8_shift(words, exp_bits=4, target="bf16", bias=7, scale_in_reg=scale_in_reg)


@_chunked
def dequant_e5m2_bf16(words, *, scale_in_reg: bool = False) -> DequantResult:
    """E5M2 -> bf16, factor 2^112. Inf/NaN codes (exponent 11111) come out finite."""
    return _fp8_shift(words, exp_bits=5, target="bf16", bias=15, scale_in_reg=scale_in_reg)


@_chunked
def dequant_e2m1_fp16(words, *, scale_in_reg: bool = False) -> DequantResult:
    """E2M1 -> fp16, factor 2^14 (all 16 codes are finite)."""
    return _fp4_shift(words, target="fp16", scale_in_reg=scale_in_reg)


@_chunked
def dequant_e2m1_bf16(words, *, scale_in_reg: bool = False) -> DequantResult:
    """E2M1 -> bf16, factor 2^126."""
    return _fp4_shift(words, target="bf16", scale_in_reg=scale_in_reg)


@_chunked
def dequant_e5m2_fp16(words) -> DequantResult:
    """E5M2 -> fp16 with two PRMTs: E5M2 *is* the top byte of fp16 (same bias 15), so moving
    each byte into the top of a lane and zeroing the bottom is the whole conversion; inf and
    NaN stay inf and NaN. Factor 1."""
    q = _check_words(words)
    ctr = OpCounter()
    # Output byte k <- selector nibble k; 4 is byte 0 of RZ (zero).
    lo = prmt(q, 0, 0x2404, ctr=ctr, asm="h0 = {0, q.b0, 0, q.b2}")
    hi = prmt(q, 0, 0x3414, ctr=ctr, asm="h1 = {0, q.b1, 0, q.b3}")
    return _result([lo, hi], "fp16", 1.0, 4, ctr)


# --------------------------------------------------------------------------- integer tricks


@_chunked
def dequant_int4_fp16(words) -> DequantResult:
    """INT4 (code c means c-8) -> fp16 with the 0x6400 magic number, factor 1.

    ``0x6400 | n`` is the fp16 1024 + n for n < 1024, so OR-ing a nibble under the magic number
    is an int->float conversion; one HADD2 removes 1024 + 8 (magic + zero point). The second
    nibble of each byte is taken in place (mask 0x00F000F0, i.e. 1024 + 16n) and one HFMA2
    scales by 1/16 and removes 64 + 8, which saves the shift. 9 instructions per 8 values.
    """
    q = _check_words(words)
    ctr = OpCounter()
    halves = []
    for src, label in ((q, "q"), (None, "q8")):
        if src is None:
            src = shf_r(q, 8, ctr=ctr, asm="q8 = q >> 8")
        lo = lop3(src, 0x000F000F, 0x64006400, _LUT_AND_OR, ctr=ctr,
                  asm=f"lo = ({label} & 0x000F000F) | 0x64006400")
        hi = lop3(src, 0x00F000F0, 0x64006400, _LUT_AND_OR, ctr=ctr,
                  asm=f"hi = ({label} & 0x00F000F0) | 0x64006400")
        lo = hadd2(lo, 0x64086408, neg_b=True, ctr=ctr, asm="lo -= 1032 (magic 1024 + zp 8)")
        # 0x2C00 = 1/16, 0xD480 = -72 = -(1024/16 + 8)
        hi = hfma2(hi, 0x2C002C00, 0xD480D480, ctr=ctr, asm="hi = hi * (1/16) - 72")
        halves += [lo, hi]
    return _result(halves, "fp16", 1.0, 8, ctr)


@_chunked
def dequant_int4_bf16(words) -> DequantResult:
    """INT4 -> bf16 with the 0x4300 magic number (128.0), factor 1.

    bf16 has 7 mantissa bits, so the nibble must sit in bits 0..3 (bit 7 is already exponent):
    each pair needs its own shift, and one HFMA2.BF16 removes 128 + 8. 11 instructions per 8.
    """
    q = _check_words(words)
    ctr = OpCounter()
    halves = []
    srcs = [q]
    for n in (4, 8, 12):
        srcs.append(shf_r(q, n, ctr=ctr, asm=f"q{n} = q >> {n}"))
    for n, src in zip((0, 4, 8, 12), srcs):
        label = "q" if n == 0 else f"q{n}"
        h = lop3(src, 0x000F000F, 0x43004300, _LUT_AND_OR, ctr=ctr,
                 asm=f"h = ({label} & 0x000F000F) | 0x43004300")
        h = hfma2_bf16(h, _ONE_BF16X2, 0xC308C308, ctr=ctr, asm="h = h * 1 - 136 (128 + zp 8)")
        halves.append(h)
    return _result(halves, "bf16", 1.0, 8, ctr)


@_chunked
def dequant_int8_fp16(words) -> DequantResult:
    """INT8 (code c means c-128) -> fp16: PRMT each byte under the 0x64 magic byte (1024 + c,
    exact since c < 1024), then HADD2 removes 1024 + 128. 4 instructions per 4 values."""
    q = _check_words(words)
    ctr = OpCounter()
    # Selector nibbles 5 pick byte 1 of the magic operand (0x64).
    lo = prmt(q, 0x64646464, 0x5250, ctr=ctr, asm="lo = {q.b0, 0x64, q.b2, 0x64}")
    hi = prmt(q, 0x64646464, 0x5351, ctr=ctr, asm="hi = {q.b1, 0x64, q.b3, 0x64}")
    lo = hadd2(lo, 0x64806480, neg_b=True, ctr=ctr, asm="lo -= 1152 (magic 1024 + zp 128)")
    hi = hadd2(hi, 0x64806480, neg_b=True, ctr=ctr, asm="hi -= 1152")
    return _result([lo, hi], "fp16", 1.0, 4, ctr)


@_chunked
def dequant_int8_bf16(words) -> DequantResult:
    """INT8 -> bf16 through fp32: bf16's 7 mantissa bits cannot hold 8 bits under a magic
    number, so each byte goes under the fp32 magic 0x4B000000 (2^23), one FADD removes
    2^23 + 128, and a PRMT keeps the top halves of two fp32 (exact: small integers have zero
    low halves). 10 instructions per 4 values."""
    q = _check_words(words)
    ctr = OpCounter()
    f = []
    for elem, byte in enumerate(BYTE_ORDER.index(e) for e in range(4)):
        f.append(prmt(q, 0x4B000000, 0x7650 | byte, ctr=ctr,
                      asm=f"f{elem} = {{q.b{byte}, 0, 0, 0x4B}}  (2^23 + c)"))
    f = [fadd(x, 0xCB000080, ctr=ctr, asm="f -= 2^23 + 128") for x in f]
    lo = prmt(f[0], f[1], 0x7632, ctr=ctr, asm="lo = {hi16(f0), hi16(f1)}")
    hi = prmt(f[2], f[3], 0x7632, ctr=ctr, asm="hi = {hi16(f2), hi16(f3)}")
    return _result([lo, hi], "bf16", 1.0, 4, ctr)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Trick:
    """One (format, target, trick) emulator with the packing it consumes."""

    fmt: str
    target: str
    name: str
    elements_per_word: int
    run: Callable[[np.ndarray], DequantResult]
    pack: Callable[[np.ndarray], np.ndarray]
    summary: str


def _t(fmt, target, name, epw, run, summary):
    pack_fn = pack_bytes if epw == 4 else pack_nibbles
    return (fmt, target, name), Trick(fmt, target, name, epw, run, pack_fn, summary)


def _reg(f):
    return lambda w: f(w, scale_in_reg=True)


def _shift_tricks(fmt, epw, to_fp16, to_bf16, fp16_bias, bf16_bias):
    """The and/shift/or trick (Marlin) into both targets twice: with the exponent bias folded
    into the scale, and with it multiplied in registers."""
    return [
        _t(fmt, "fp16", "shift", epw, to_fp16,
           f"and/shift/or (Marlin), bias {fp16_bias} folded into the scale"),
        _t(fmt, "bf16", "shift", epw, to_bf16,
           f"and/shift/or (Marlin), bias {bf16_bias} folded into the scale"),
        _t(fmt, "fp16", "shift+mul", epw, _reg(to_fp16),
           "and/shift/or, bias multiplied in registers (HMUL2)"),
        _t(fmt, "bf16", "shift+mul", epw, _reg(to_bf16),
           "and/shift/or, bias multiplied in registers (HFMA2.BF16)"),
    ]


TRICKS: dict[tuple[str, str, str], Trick] = dict(
    [
        *_shift_tricks("e4m3", 4, dequant_e4m3_fp16, dequant_e4m3_bf16, "2^8", "2^120"),
        _t("e5m2", "fp16", "prmt", 4, dequant_e5m2_fp16,
           "byte permute: e5m2 is the top byte of fp16"),
        _t("e5m2", "bf16", "shift", 4, dequant_e5m2_bf16,
           "and/shift/or, bias 2^112 folded into the scale"),
        *_shift_tricks("e2m1", 8, dequant_e2m1_fp16, dequant_e2m1_bf16, "2^14", "2^126"),
        _t("int4", "fp16", "magic", 8, dequant_int4_fp16,
           "LOP3 under magic 0x6400, HADD2/HFMA2 remove magic + zero point 8"),
        _t("int4", "bf16", "magic", 8, dequant_int4_bf16,
           "LOP3 under magic 0x4300, HFMA2.BF16 removes magic + zero point 8"),
        _t("int8", "fp16", "magic", 4, dequant_int8_fp16,
           "PRMT under magic 0x64, HADD2 removes magic + zero point 128"),
        _t("int8", "bf16", "magic", 4, dequant_int8_bf16,
           "PRMT under fp32 magic 2^23, FADD, PRMT to bf16"),
    ]
)


def pack(fmt: str, codes) -> np.ndarray:
    """Pack logical-order codes of ``fmt`` into the words its tricks consume."""
    spec = get_format(fmt)
    if spec.bits == 8:
        return pack_bytes(codes)
    if spec.bits == 4:
        return pack_nibbles(codes)
    raise ValueError(f"no packing for {fmt!r}: only 4- and 8-bit formats pack into words")


def dequant(fmt: str, target: str, words, trick: str | None = None) -> DequantResult:
    """Run the emulator registered for (fmt, target, trick); ``trick=None`` picks the
    folded-bias default (the first registered)."""
    keys = [k for k in TRICKS if k[0] == fmt and k[1] == target and (trick is None or k[2] == trick)]
    if not keys:
        raise ValueError(
            f"no dequant trick for fmt={fmt!r}, target={target!r}, trick={trick!r}; "
            f"registered: {sorted(TRICKS)}"
        )
    return TRICKS[keys[0]].run(words)
