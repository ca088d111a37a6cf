"""Build the original Marlin (github.com/IST-DASLab/marlin) from its own source, as its
setup.py does (a torch CUDA extension of marlin_cuda.cpp + marlin_cuda_kernel.cu), into an
ignored folder: ``build/peers/marlin`` ($FP8LAB_MARLIN_BUILD). Its source is never copied into
the repository: ``scripts/peers_offline.py --sources`` unpacks it into ``build/peers/src/marlin``
($FP8LAB_MARLIN_SRC).

:func:`compile_check` compiles the kernel file alone with nvcc (no torch, no GPU): the CPU
proof that the source builds for sm_90 with the flags torch's extension builder passes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from . import discover

__all__ = ["KERNEL", "BINDING", "NVCC_FLAGS", "nvcc_flags", "source_files", "compile_check", "build_marlin"]

KERNEL = "marlin/marlin_cuda_kernel.cu"
BINDING = "marlin/marlin_cuda.cpp"
#: what torch.utils.cpp_extension passes nvcc for every CUDA extension (its COMMON_NVCC_FLAGS, as
#: of torch 2.13: Marlin's device code calls a constexpr host function, ceildiv, which needs
#: --expt-relaxed-constexpr, and must build without half operators), plus -O3; the check reads
#: torch's own list when torch imports
NVCC_FLAGS = ("-O3", "-std=c++17", "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
              "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr")


def nvcc_flags() -> tuple:
    try:
        from torch.utils import cpp_extension

        return ("-O3", "-std=c++17", *cpp_extension.COMMON_NVCC_FLAGS)
    except Exception:  # noqa: BLE001 - no torch here (the CPU machine): the list above
        return NVCC_FLAGS


def source_files(src: Optional[Path] = None) -> tuple[Path, Path]:
    """(binding .cpp, kernel .cu) in Marlin's source tree; FileNotFoundError naming what to run."""
    src = Path(src) if src else discover.marlin_src()
    cpp, cu = src / BINDING, src / KERNEL
    if not (cpp.exists() and cu.exists()):
        raise FileNotFoundError(f"Marlin's source is not at {src} (no {BINDING} / {KERNEL}): run "
                                "`python scripts/peers_offline.py --sources` or set $FP8LAB_MARLIN_SRC")
    return cpp, cu


def _source_commit(src: Path) -> str:
    stamp = src / ".fp8lab-source.json"
    if stamp.exists():
        try:
            return json.loads(stamp.read_text()).get("commit", "?")
        except ValueError:
            pass
    return "?"


def _setup_version(src: Path) -> str:
    m = re.search(r"version\s*=\s*['\"]([^'\"]+)", (src / "setup.py").read_text()) if (src / "setup.py").exists() else None
    return m.group(1) if m else "?"


def compile_check(arch: str = "sm_90", src: Optional[Path] = None, nvcc: str = "nvcc", timeout: float = 600) -> dict:
    """Compile Marlin's kernel file alone for ``arch`` (an object file in a temporary folder).
    dict(ok, arch, seconds, log tail, command)."""
    import time

    _, cu = source_files(src)
    exe = shutil.which(nvcc) or nvcc
    with tempfile.TemporaryDirectory() as d:
        cmd = [exe, f"-arch={arch}", *nvcc_flags(), "-c", str(cu), "-o", str(Path(d) / "marlin.o")]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        ok = p.returncode == 0 and (Path(d) / "marlin.o").exists()
    errors = [ln for ln in (p.stdout + p.stderr).splitlines() if "error" in ln]
    return dict(ok=ok, arch=arch, seconds=time.monotonic() - t0, errors=errors[:10], command=" ".join(cmd))


def _setuptools_build(cpp: Path, cu: Path, out: Path, verbose: bool) -> None:
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    ext = CUDAExtension("marlin_cuda", [str(cpp), str(cu)], extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]})
    with tempfile.TemporaryDirectory() as tmp:
        setup(name="marlin-cuda-fp8lab-build", ext_modules=[ext],
              cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
              script_args=["-q" if not verbose else "-v", "build_ext", "--build-lib", str(out), "--build-temp", tmp])


#: the weight-load copy of Marlin's kernel with its L2 cache hint (``cp_async4_stream``'s body)
_HINTED_COPY = re.compile(r"createpolicy\.fractional\.L2::evict_first\.b64 p, 1\.0;\"\s*"
                          r"\"\s*cp\.async\.cg\.shared\.global\.L2::cache_hint \[%0\], \[%1\], %2, p;")


def without_l2_hint(cu_text: str) -> str:
    """Marlin's kernel source with the weight loads' L2 evict_first hint removed: the same
    16-byte cp.async, no cache policy (discover.MARLIN_VARIANTS says why). ValueError when the
    source does not hold the hinted copy exactly once (another Marlin version: look first)."""
    n = len(_HINTED_COPY.findall(cu_text))
    if n != 1:
        raise ValueError(f"expected Marlin's hinted cp.async once in its kernel source, found it {n} times")
    return _HINTED_COPY.sub('"\n    "   cp.async.cg.shared.global [%0], [%1], %2;', cu_text)


def build_marlin(src: Optional[Path] = None, out: Optional[Path] = None, verbose: bool = False,
                 variant: str = "as-is") -> Path:
    """Build marlin_cuda with torch.utils.cpp_extension.load into ``out``; writes build_info.json
    (source version and commit, variant, nvcc, torch, arch list). ``variant`` "no-l2-hint" builds
    a copy of the kernel source with :func:`without_l2_hint` applied. Returns the folder."""
    import torch
    from torch.utils import cpp_extension

    src = Path(src) if src else discover.marlin_src()
    cpp, cu = source_files(src)
    out = Path(out) if out else discover.marlin_build_dir(variant)
    out.mkdir(parents=True, exist_ok=True)
    if variant != "as-is":
        patched = out / "src"
        patched.mkdir(exist_ok=True)
        (patched / cpp.name).write_text(cpp.read_text())
        (patched / cu.name).write_text(without_l2_hint(cu.read_text()))
        cpp, cu = patched / cpp.name, patched / cu.name
    if torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    try:
        cpp_extension.verify_ninja_availability()
        have_ninja = True
    except RuntimeError:
        have_ninja = False
    if have_ninja:
        cpp_extension.load(name="marlin_cuda", sources=[str(cpp), str(cu)], build_directory=str(out),
                           extra_cuda_cflags=["-O3"], verbose=verbose)
    else:
        # torch's JIT loader needs ninja; an offline box without it builds as Marlin's own
        # setup.py does (setuptools + BuildExtension, no ninja)
        _setuptools_build(cpp, cu, out, verbose)
    so = next(out.glob("marlin_cuda*.so"), None)
    if so is None:
        raise RuntimeError(f"the build finished without marlin_cuda*.so in {out}")
    if so.name.split(".")[0] != "marlin_cuda":
        # torch's JIT loader renames a second module of one name in one process (marlin_cuda_v1):
        # Marlin's package imports marlin_cuda, so such a build cannot be used
        raise RuntimeError(f"{so.name}: built under another module name; build each variant in its own "
                           "process (python -m fp8lab.peers build marlin does)")
    nvcc_v = ""
    try:
        nvcc_v = subprocess.run([cpp_extension._join_cuda_home("bin", "nvcc"), "--version"], capture_output=True,
                                text=True).stdout.strip().splitlines()[-1]
    except Exception:  # noqa: BLE001 - the version is provenance, not a requirement
        pass
    (out / "build_info.json").write_text(json.dumps(dict(
        version=_setup_version(src), source_commit=_source_commit(src), source=str(src), variant=variant, nvcc=nvcc_v,
        torch=torch.__version__, arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST", "")), indent=1))
    discover.reset()
    return out


# ------------------------------------------------------------------------------------------
# prebuild (``python -m fp8lab build``, make run): each Marlin variant as a target of its own
# ------------------------------------------------------------------------------------------
def prebuild_ready() -> tuple[bool, str]:
    """(ok, why not): Marlin's source is here and torch sees a CUDA GPU (the target's ``needs``)."""
    try:
        source_files()
    except FileNotFoundError:
        return False, ("Marlin's source is not here (python scripts/peers_offline.py --sources "
                       "or $FP8LAB_MARLIN_SRC)")
    try:
        import torch
    except ImportError:
        return False, "no torch"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    return True, ""


def _built(out: Path, variant: str, src: Path) -> Optional[Path]:
    """The extension in ``out`` when it was built from ``src`` at its current commit as ``variant``."""
    so = next(out.glob("marlin_cuda*.so"), None)
    info = out / "build_info.json"
    if so is None or not info.exists():
        return None
    try:
        d = json.loads(info.read_text())
    except ValueError:
        return None
    same = d.get("variant") == variant and d.get("source_commit") == _source_commit(src) \
        and d.get("source") == str(src)
    return so if same and so.name.split(".")[0] == "marlin_cuda" else None


def prebuild(variant: str = "as-is") -> Path:
    """Build one Marlin variant unless the same source is already built there, then probe it in
    its own process (the probe's line is cached beside the build, so the notebooks' sweeps do
    not probe again). Returns the .so (its mtime tells prebuild whether it was cached)."""
    src = discover.marlin_src()
    out = discover.marlin_build_dir(variant)
    so = _built(out, variant, src)
    if so is None:
        build_marlin(variant=variant)
        so = next(out.glob("marlin_cuda*.so"))
    ok, line = discover.probe_marlin(variant)
    print(f"Marlin ({variant}) probe: {'ok' if ok else 'failed'}: {line}")
    return so
