"""Block scales to per-element scales: the one expansion every float64 reference of a
block-scaled operand uses (a (ceil(R/br), ceil(C/bc)) grid of scales, one per br x bc block,
repeated over its block and cut to the operand's R x C). numpy or torch in, same kind out;
``expand`` keeps the grid's dtype, ``dequant`` works in float64."""

from __future__ import annotations

import numpy as np

from .compare import _is_torch

__all__ = ["expand", "dequant"]


def expand(scales, rows: int, cols: int, block=(128, 128)):
    """Per-element scales of an operand of ``rows`` x ``cols`` from its block grid ``scales``
    (one scale per ``block`` = (br, bc) block, the last block of each axis possibly partial)."""
    br, bc = block
    if _is_torch(scales):
        return scales.repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]
    s = np.asarray(scales)
    return np.repeat(np.repeat(s, br, axis=0)[:rows], bc, axis=1)[:, :cols]


def dequant(codes, scales, block=(128, 128)):
    """codes x their block scales in float64 (exact for e4m3 / e5m2 / int8 codes and fp32 scales:
    at most 24 + 4 significant bits). numpy or torch in, same kind out."""
    R, C = codes.shape
    if _is_torch(codes):
        return codes.double() * expand(scales.double(), R, C, block)
    return np.asarray(codes).astype(np.float64) * expand(np.asarray(scales, np.float64), R, C, block)
