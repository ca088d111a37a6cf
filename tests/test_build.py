"""The extension cache key: what must and must not rebuild (no CUDA needed)."""

import types

from fp8lab.kernels import _build


def _torch(version="2.11.0", cuda="13.0"):
    cuda_mod = types.SimpleNamespace(is_available=lambda: False)
    return types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(cuda=cuda), cuda=cuda_mod)


def test_digest_follows_sources_versions_and_extra(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    d0 = _build.extension_digest([src], _torch())
    assert d0 == _build.extension_digest([src], _torch())              # stable
    assert len(d0) == 16
    assert _build.extension_digest([src], _torch(version="2.12.0")) != d0
    assert _build.extension_digest([src], _torch(cuda="12.9")) != d0
    assert _build.extension_digest([src], _torch(), "flags=-O2") != d0
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    assert _build.extension_digest([src], _torch()) != d0
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    src.write_text("__global__ void k() { }\n")                         # an edit rebuilds
    assert _build.extension_digest([src], _torch()) != d0


def test_every_binding_uses_the_shared_builder():
    import inspect
    from fp8lab.kernels import cutlass_blockwise_sm90, mma_blockwise, seed001, weight_only
    for mod in (mma_blockwise, seed001, weight_only, cutlass_blockwise_sm90):
        src = inspect.getsource(mod.load_extension)
        assert "load_torch_extension(" in src and "extension_digest(" in src, mod.__name__
