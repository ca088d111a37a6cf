"""The pattern GPU tests' model of what each thread reads (test_weight_only_pattern_gpu.py), checked on
the CPU: over every thread of the split-K grid it reads each packed weight word exactly once, in the
GEMV's order and in the step-major what-if; so a GPU test that finds one thread's XOR in its sink word
checks the kernel against a model that covers the whole layout."""

import numpy as np
import pytest

from fp8lab.kernels import weight_only as wo
from test_weight_only_pattern_gpu import _splitk_units


class _Shape:
    def __init__(self, fmt, N, K):
        self.fmt, self.N, self.K, self.steps = fmt, N, K, K // 128
        self.n_tiles16 = wo.padded_rows(fmt, N) // 16


@pytest.mark.parametrize("fmt", wo.FORMATS)
@pytest.mark.parametrize("M", [1, 16])
@pytest.mark.parametrize("order", wo.PATTERN_ORDERS)
def test_the_model_reads_every_weight_word_once(fmt, M, order):
    N, K, splits = 328, 1664, 5
    pw = _Shape(fmt, N, K)
    nt = wo.n_tiles(M)
    gx, gy, _ = wo.pattern_geometry(fmt, M, N, K, schedule="splitk", splits=splits)["grid"]
    bits, tm = wo.BITS[fmt], wo.tiles_per_warp(fmt, nt)
    per = 1 if bits == 8 else 2
    loads = tm * (16 if bits == 8 else 8) // 4
    words = pw.n_tiles16 * 16 * K * bits // 32 // 4                 # uint4 of the packed weight
    seen = np.zeros(words, int)
    for cx in range(gx):
        for y in range(gy):
            for warp in range(wo.WARPS):
                units = _splitk_units(pw, nt, splits, cx, y, warp)
                for t16, st in units or ():
                    sup, sub = divmod(t16, per)
                    sstep = sup * pw.steps + st if order == "tile" else st * (pw.n_tiles16 // per) + sup
                    base = sstep * 128 + (2 * sub if (bits == 4 and tm == 1) else 0) * 32
                    for i in range(loads):
                        seen[base + 32 * i: base + 32 * i + 32] += 1      # the warp's 32 lanes
    assert (seen == 1).all(), (seen.min(), seen.max())
