"""The mma.sync BF16 ceiling kernel: config validation, exact reference, SASS (CPU); bit-exact run (GPU)."""

import numpy as np
import pytest

from fp8lab.kernels import hmma_peak as hp
from fp8lab.toolchain.tools import have_tool


def test_config_validation_and_flop():
    cfg = hp.HmmaConfig(blocks=10, n_iters=100)
    assert cfg.tiles == 10 * hp.WARPS * hp.CHAINS
    assert hp.flop(cfg) == cfg.tiles * 100 * 2 * 16**3
    for bad in (dict(blocks=0, n_iters=1), dict(blocks=1, n_iters=-3), dict(blocks=1.5, n_iters=1),
                dict(blocks=True, n_iters=1)):
        with pytest.raises(ValueError, match="positive int"):
            hp.HmmaConfig(**bad)
    with pytest.raises(ValueError, match="exactness"):
        hp.HmmaConfig(blocks=1, n_iters=hp.MAX_ITERS + 1)
    assert hp.default_config(132).blocks == 528


def test_reference_is_exact_in_fp32_at_the_largest_n_iters():
    a, b = hp.operands(0)
    assert set(np.unique(a)) <= {-2, -1, 0, 1, 2} and set(np.unique(b)) <= {-2, -1, 0, 1, 2}
    ref = hp.reference(a, b, hp.MAX_ITERS)
    assert np.abs(ref).max() <= 2**24
    assert np.array_equal(ref.astype(np.float32).astype(np.float64), ref)


@pytest.mark.skipif(not (have_tool("nvcc") and have_tool("cuobjdump")), reason="needs nvcc and cuobjdump")
def test_sass_is_bf16_hmma_without_spills(tmp_path):
    import subprocess

    from fp8lab.toolchain.tools import find_tool, run_tool

    cubin = tmp_path / "hp.cubin"
    r = subprocess.run([str(find_tool("nvcc")), "-cubin", "-arch=sm_90", "-O3", "-Xptxas", "-v",
                        str(hp.KERNEL_DIR / "hmma_peak.cu"), "-o", str(cubin)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes spill stores" in r.stderr
    sass = run_tool("cuobjdump", ["-sass", str(cubin)]).stdout
    ops = [ln for ln in sass.splitlines() if "MMA" in ln]
    assert ops and all("HMMA.16816.F32.BF16" in ln for ln in ops)


@pytest.mark.gpu
def test_gpu_bit_exact():
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for cfg in (hp.HmmaConfig(blocks=3, n_iters=37), hp.HmmaConfig(blocks=133, n_iters=1000)):
        assert hp.check(cfg) == cfg.tiles
