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
    from fp8lab import provenance
    monkeypatch.setattr(provenance, "gpu_present", lambda: False)
    monkeypatch.setattr(provenance, "gpu_count", lambda: 0)
    monkeypatch.delenv("FP8LAB_MODE", raising=False)
