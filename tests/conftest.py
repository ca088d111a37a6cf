import os

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with torch (CUDA); none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """data/ and figures/ redirected into a temporary folder."""
    data, figs = tmp_path / "data", tmp_path / "figures"
    data.mkdir()
    figs.mkdir()
    monkeypatch.setenv("FP8LAB_DATA_DIR", str(data))
    monkeypatch.setenv("FP8LAB_FIGURES_DIR", str(figs))
    return tmp_path


@pytest.fixture
def no_gpu(monkeypatch):
    from fp8lab.report import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: False)
    monkeypatch.setattr(provenance, "gpu_count", lambda: 0)
    monkeypatch.delenv("FP8LAB_MODE", raising=False)


@pytest.fixture(scope="session")
def mma_pair_cubin(tmp_path_factory):
    """tests/fixtures/sass/mma_pair.cu built for sm_89 now (a built cubin is not committed)."""
    from pathlib import Path

    from fp8lab.toolchain.tools import have_tool, run_tool
    if not have_tool("nvcc"):
        pytest.skip("nvcc not installed")
    src = Path(__file__).parent / "fixtures" / "sass" / "mma_pair.cu"
    out = tmp_path_factory.mktemp("cubin") / "mma_pair_sm_89.cubin"
    run_tool("nvcc", ["-cubin", "-arch=sm_89", "-o", out, src])
    return out
