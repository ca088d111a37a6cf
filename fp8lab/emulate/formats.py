"""Number formats: every code of every weight/scale format with its value and class.

Values are decoded *independently* of the bit tricks in :mod:`fp8lab.emulate.dequant`: the float
formats through ``ml_dtypes`` (its own conversion code, not ours), the integer formats
through plain integer arithmetic. The dequant tests compare the tricks against these tables,
never against a reference built from the same bit derivation (a shared derivation is how a
wrong FP4 decode of codes 0x0/0x1 once passed its own test in tilelang).

Integer conventions (the ones Marlin's kernels consume, vLLM ``kU4B8`` / ``kU8B128``):

* ``int4``: a code ``c`` in 0..15 stands for ``c - 8`` (symmetric, zero point 8), range -8..7.
* ``int8``: a code ``c`` in 0..255 stands for ``c - 128`` (zero point 128), range -128..127.

Both are offset binary. A two's-complement checkpoint converts at repack time by flipping the
top bit (``twos_complement_to_offset``): ``t ^ 0x8`` for int4, ``t ^ 0x80`` for int8. Doing it
offline keeps the in-register dequant free of an extra XOR.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pandas as pd

__all__ = [
    "FormatSpec",
    "FORMATS",
    "CLASSES",
    "get_format",
    "decode",
    "code_table",
    "all_code_tables",
    "twos_complement_to_offset",
]

CLASSES = ("normal", "subnormal", "zero", "nan", "inf")


@dataclass(frozen=True)
class FormatSpec:
    """One number format. ``ml_dtype`` is None for the integer formats."""

    name: str
    bits: int
    kind: str  # "float" | "int"
    ml_dtype: object | None
    exponent_bits: int
    mantissa_bits: int
    description: str
    zero_point: int = 0  # integer formats: value = code - zero_point

    @property
    def n_codes(self) -> int:
        return 1 << self.bits


FORMATS: dict[str, FormatSpec] = {
    "e4m3": FormatSpec(
        "e4m3", 8, "float", ml_dtypes.float8_e4m3fn, 4, 3,
        "OCP FP8 E4M3 'fn' (finite, no inf): bias 7, max 448, S.1111.111 is NaN",
    ),
    "e5m2": FormatSpec(
        "e5m2", 8, "float", ml_dtypes.float8_e5m2, 5, 2,
        "OCP FP8 E5M2: bias 15 (same as fp16), max 57344, IEEE-style inf and NaN",
    ),
    "e2m1": FormatSpec(
        "e2m1", 4, "float", ml_dtypes.float4_e2m1fn, 2, 1,
        "OCP FP4 E2M1 (NVFP4 / MXFP4 element): bias 1, values 0, 0.5 .. 6, no inf or NaN",
    ),
    "ue8m0": FormatSpec(
        "ue8m0", 8, "float", ml_dtypes.float8_e8m0fnu, 8, 0,
        "OCP E8M0 scale (MX): unsigned power of two 2^(c-127), no zero, 0xFF is NaN",
    ),
    "int4": FormatSpec(
        "int4", 4, "int", None, 0, 0,
        "INT4 offset binary as Marlin's kU4B8: code c means c - 8 (symmetric, zero point 8)",
        zero_point=8,
    ),
    "int8": FormatSpec(
        "int8", 8, "int", None, 0, 0,
        "INT8 offset binary as Marlin's kU8B128: code c means c - 128 (zero point 128)",
        zero_point=128,
    ),
}


def get_format(fmt: str) -> FormatSpec:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: fmt must be one of {sorted(FORMATS)}")
    return FORMATS[fmt]


def _check_codes(spec: FormatSpec, codes) -> np.ndarray:
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be an integer array, got dtype {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() >= spec.n_codes):
        raise ValueError(
            f"{spec.name} codes must lie in 0..{spec.n_codes - 1} ({spec.bits} bits), "
            f"got min {codes.min()} max {codes.max()}"
        )
    return codes.astype(np.int64)


def decode(fmt: str, codes) -> np.ndarray:
    """Value (float64) of each code, decoded independently of any bit trick."""
    spec = get_format(fmt)
    codes = _check_codes(spec, codes)
    if spec.kind == "int":
        return (codes - spec.zero_point).astype(np.float64)
    # ml_dtypes stores every <=8-bit float in one byte (a 4-bit one in the low nibble), so a
    # uint8 view reinterprets the code; astype(float64) is then ml_dtypes' own conversion.
    return codes.astype(np.uint8).view(spec.ml_dtype).astype(np.float64)


def _classify(spec: FormatSpec, values: np.ndarray) -> np.ndarray:
    cls = np.full(values.shape, "normal", dtype=object)
    cls[values == 0] = "zero"
    if spec.kind == "float":
        smallest_normal = float(ml_dtypes.finfo(spec.ml_dtype).smallest_normal)
        finite = np.isfinite(values)
        sub = finite & (values != 0) & (np.abs(values) < smallest_normal)
        cls[sub] = "subnormal"
        cls[np.isinf(values)] = "inf"
        cls[np.isnan(values)] = "nan"
    return cls


def code_table(fmt: str) -> pd.DataFrame:
    """Every code of ``fmt``: one row per code with hex, bits, value (float64), class.

    ``negative_zero`` marks -0.0 (its sign bit matters: a dequant must keep it).
    """
    spec = get_format(fmt)
    codes = np.arange(spec.n_codes, dtype=np.int64)
    values = decode(fmt, codes)
    width = (spec.bits + 3) // 4
    df = pd.DataFrame(
        {
            "fmt": fmt,
            "code": codes,
            "hex": [f"0x{c:0{width}X}" for c in codes],
            "bits": [format(int(c), f"0{spec.bits}b") for c in codes],
            "value": values,
            "cls": _classify(spec, values),
            "negative_zero": (values == 0) & np.signbit(values),
        }
    )
    return df


def all_code_tables() -> pd.DataFrame:
    """Every code of every format in :data:`FORMATS`, stacked (tidy)."""
    return pd.concat([code_table(f) for f in FORMATS], ignore_index=True)


def twos_complement_to_offset(codes, bits: int) -> np.ndarray:
    """Map two's-complement codes (``bits`` = 4 or 8) to the offset-binary codes above.

    Flipping the top bit is exact: two's complement t means t - 2^bits*(t >= 2^(bits-1)),
    and (t ^ 2^(bits-1)) - 2^(bits-1) is the same integer.
    """
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    spec = FORMATS["int4" if bits == 4 else "int8"]
    codes = _check_codes(spec, codes)
    return codes ^ (1 << (bits - 1))
