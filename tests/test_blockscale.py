"""fp8lab.emulate.blockscale: block grid -> per-element scales, float64 dequant (numpy side; the
torch side runs in every GPU check that uses it)."""

import numpy as np
import pytest

from fp8lab.emulate import blockscale


@pytest.mark.parametrize("rows, cols, block", [(5, 7, (2, 3)), (256, 384, (128, 128)), (3, 256, (1, 128)),
                                               (130, 200, (128, 128))])
def test_expand_gives_every_element_its_blocks_scale(rows, cols, block):
    br, bc = block
    grid = np.random.default_rng(0).uniform(0.5, 2.0, (-(-rows // br), -(-cols // bc)))
    full = blockscale.expand(grid, rows, cols, block)
    assert full.shape == (rows, cols)
    for r in range(0, rows, max(1, rows // 9)):
        for c in range(0, cols, max(1, cols // 11)):
            assert full[r, c] == grid[r // br, c // bc]


def test_dequant_is_codes_times_scales_in_float64():
    rng = np.random.default_rng(1)
    codes = rng.integers(-127, 128, (130, 256)).astype(np.int8)
    grid = rng.uniform(0.01, 1.0, (2, 2)).astype(np.float32)
    got = blockscale.dequant(codes, grid)
    assert got.dtype == np.float64
    want = np.array([[codes[r, c] * np.float64(grid[r // 128, c // 128]) for c in range(256)] for r in range(130)])
    assert np.array_equal(got, want)
