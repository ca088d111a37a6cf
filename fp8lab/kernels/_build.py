"""Build fp8lab's CUDA kernels as torch extensions, once per content hash.

Every binding builds the same way: the build folder is ``<cache>/torch_ext/<name>_<hash>``
(``fp8lab.paths.cache_dir``; $FP8LAB_CACHE_DIR overrides the root), the hash covering the
sources, the torch and CUDA versions, the GPU archs present and anything else the caller
names (flags, a CUTLASS version), so an edit rebuilds and an unchanged tree imports in a
second.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable, Mapping

KERNEL_DIR = Path(__file__).resolve().parent
#: Headers several kernels include (kernels/common/: the shared PTX helpers, the bindings' launch
#: helpers). Every cache key that hashes a kernel's sources lists these too, so an edit to one
#: rebuilds every kernel (tests/test_build.py walks the #include graph to check each key is closed).
COMMON_HEADERS = tuple(sorted([*(KERNEL_DIR / "common").glob("*.cuh"), *(KERNEL_DIR / "common").glob("*.h")]))


def extension_digest(sources: Iterable[Path], torch, *extra: str, gpu_archs: bool = True) -> str:
    """16 hex digits over the sources' names and bytes, torch/CUDA versions,
    TORCH_CUDA_ARCH_LIST, the visible GPUs' compute capabilities and ``extra``."""
    h = hashlib.sha256()
    for p in sources:
        p = Path(p)
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(f"torch={torch.__version__} cuda={torch.version.cuda}".encode())
    h.update(os.environ.get("TORCH_CUDA_ARCH_LIST", "").encode())
    if gpu_archs and torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        h.update(repr(caps).encode())
    for e in extra:
        h.update(str(e).encode())
    return h.hexdigest()[:16]


_LOADED: dict = {}


def extension(name: str, sources: Iterable[Path], digest_sources: Iterable[Path] | None = None, *,
              verbose: bool = False, **build):
    """Extension ``name`` imported once per process, built once per content hash: the hash
    covers ``digest_sources`` (the sources and every header they include; default ``sources``)
    and the torch / CUDA versions and GPU archs. ``build``: :func:`load_torch_extension`'s flags."""
    if name not in _LOADED:
        import torch

        sources = tuple(sources)
        _LOADED[name] = load_torch_extension(
            name, sources, digest=extension_digest(tuple(digest_sources or sources), torch), verbose=verbose, **build)
    return _LOADED[name]


def load_torch_extension(name: str, sources: Iterable[Path], *, digest: str,
                         include_paths: Iterable[Path] = (), cflags: Iterable[str] = ("-O3",),
                         cuda_cflags: Iterable[str] = ("-O3",), env: Mapping[str, str] | None = None,
                         verbose: bool = False):
    """Build (or import the cached build of) one extension. ``env`` is set for the build
    only and restored after (e.g. TORCH_CUDA_ARCH_LIST for an arch-specific kernel). No -std
    flag is passed: torch adds the C++ standard its headers need."""
    from torch.utils import cpp_extension

    from ..paths import cache_dir

    build = cache_dir("torch_ext", f"{name}_{digest}")
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return cpp_extension.load(
            name=f"fp8lab_{name}_{digest}",
            sources=[str(p) for p in sources],
            extra_include_paths=[str(p) for p in include_paths],
            extra_cflags=list(cflags),
            extra_cuda_cflags=list(cuda_cflags),
            build_directory=str(build),
            verbose=verbose,
        )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class WarpTiled:
    """Mixin of a tile configuration with a CTA tile ``bm`` x ``bn`` split into warp tiles
    ``wm`` x ``wn``: its warps and threads per CTA."""

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def threads(self) -> int:
        return 32 * self.warps
