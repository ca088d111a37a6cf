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
    from fp8lab.kernels import cutlass_blockwise_sm90, hmma_peak, mma_blockwise, seed001, weight_only
    for mod in (mma_blockwise, seed001, weight_only, hmma_peak):
        src = inspect.getsource(mod.load_extension)
        assert "extension(" in src and "_build" in inspect.getsource(mod), mod.__name__
    src = inspect.getsource(cutlass_blockwise_sm90.load_extension)   # its own wrappers, generated per config
    assert "load_torch_extension(" in src and "extension_digest(" in src


def test_an_extension_is_built_once_per_process(monkeypatch, tmp_path):
    import types

    from fp8lab.kernels import _build

    calls = []
    monkeypatch.setitem(__import__("sys").modules, "torch", types.SimpleNamespace(__version__="0", version=None))
    monkeypatch.setattr(_build, "extension_digest", lambda sources, torch: "d" + str(len(sources)))
    monkeypatch.setattr(_build, "load_torch_extension", lambda name, sources, **kw: calls.append((name, kw)) or object())
    monkeypatch.setattr(_build, "_LOADED", {})
    src = tmp_path / "k.cu"
    first = _build.extension("k", [src], include_paths=[tmp_path])
    assert _build.extension("k", [src]) is first
    assert calls == [("k", {"digest": "d1", "verbose": False, "include_paths": [tmp_path]})]


# --- issue 18: the shared PTX helpers live in one header, and every cache key hashes it ---------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _include_closure(paths) -> set:
    """Every file reachable from ``paths`` through quoted #includes found next to the including
    file (nvcc's first place to look; the kernels include "common/ptx.cuh" that way)."""
    seen, todo = set(), [Path(p).resolve() for p in paths]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for inc in _QUOTED_INCLUDE.findall(p.read_text()):
            q = (p.parent / inc).resolve()
            if q.is_file():
                todo.append(q)
    return seen


def test_common_headers_are_found():
    assert _build.KERNEL_DIR / "common" / "ptx.cuh" in _build.COMMON_HEADERS


def test_every_cache_key_hashes_every_header_its_sources_include():
    from fp8lab.kernels import gemv_w8a8, mma_blockwise, seed001, weight_only, wgmma_blockwise
    keys = {"mma_blockwise cubins (compile_grid)": mma_blockwise.SOURCES,
            "mma_blockwise extension": mma_blockwise.EXT_DIGEST_SOURCES,
            "weight_only cubins (_compile)": weight_only.SOURCES,
            "gemv_w16 extension": weight_only.EXT_DIGEST_SOURCES,
            "gemv_w16_xalu extension": weight_only.XALU_EXT_DIGEST_SOURCES,
            "gemv_pattern extension": weight_only.PATTERN_EXT_DIGEST_SOURCES,
            "seed001 extension": seed001.EXT_DIGEST_SOURCES,
            "wgmma_blockwise extension": wgmma_blockwise.EXT_DIGEST_SOURCES,
            "gemv_w8a8 extension": gemv_w8a8.EXT_DIGEST_SOURCES}
    for name, key in keys.items():
        hashed = {Path(p).resolve() for p in key}
        missing = sorted(str(p.relative_to(_build.KERNEL_DIR)) for p in _include_closure(key) - hashed)
        assert not missing, f"{name}'s cache key misses included files {missing}: an edit there would not rebuild"


def test_include_closure_sees_a_missing_header(tmp_path):
    # The check above would pass vacuously if the walk found nothing.
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "h.cuh").write_text("#pragma once\n")
    (tmp_path / "k.cu").write_text('#include <stdint.h>\n#include "common/h.cuh"\n')
    assert _include_closure([tmp_path / "k.cu"]) == {(tmp_path / "k.cu").resolve(),
                                                     (tmp_path / "common" / "h.cuh").resolve()}


# asm text of the shared helpers, and the names their copies used to have.
_PTX_HELPER = re.compile(r'"\s*(cp\.async|ldmatrix)|__cvta_generic_to_shared|'
                         r'\bvoid\s+(cp_async\w*|ldmatrix\w*)\s*\(')


def test_ptx_helpers_are_defined_only_in_the_common_header():
    files = [p for p in sorted(_build.KERNEL_DIR.rglob("*"))
             if p.suffix in (".cu", ".cuh", ".h", ".hpp", ".cpp") and p.parent.name != "common"]
    assert any(p.name == "gemv_w16.cuh" for p in files)
    copies = [f"{p.relative_to(_build.KERNEL_DIR)}:{n}" for p in files
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if not line.lstrip().startswith("//") and _PTX_HELPER.search(line)]
    assert not copies, f"cp.async / ldmatrix / cvta helpers defined outside kernels/common/ptx.cuh: {copies}"
    assert _PTX_HELPER.search((_build.KERNEL_DIR / "common" / "ptx.cuh").read_text())
