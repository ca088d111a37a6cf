"""Build the original Marlin (github.com/IST-DASLab/marlin) from its own source, as its
setup.py does (a torch CUDA extension of marlin_cuda.cpp + marlin_cuda_kernel.cu), into an
ignored folder: ``build/peers/marlin`` ($FP8LAB_MARLIN_BUILD). Its source is never copied into
the repository: ``scripts/peers_offline.py --sources`` unpacks it into ``build/peers/src/marlin``
($FP8LAB_MARLIN_SRC).

:func:`compile_check` compiles the kernel file alone with nvcc (no torch, no GPU): the CPU
proof that the source builds for sm_90 with the flags torch's extension builder passes.

DeepGEMM (github.com/deepseek-ai/DeepGEMM) the same way, below: :func:`build_deepgemm` builds its
C++ binding into ``build/peers/deepgemm`` ($FP8LAB_DEEPGEMM_BUILD) from the source that
``scripts/peers_offline.py --sources`` unpacks into ``build/peers/src/deepgemm``
($FP8LAB_DEEPGEMM_SRC); :func:`deepgemm_compile_check` (the binding, compile only) and
:func:`deepgemm_jit_check` (one Hopper kernel its JIT builds) are its CPU proofs.
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

__all__ = ["KERNEL", "BINDING", "NVCC_FLAGS", "nvcc_flags", "source_files", "compile_check", "build_marlin",
           "deepgemm_binding", "deepgemm_compile_check", "deepgemm_jit_check", "build_deepgemm"]

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


# ------------------------------------------------------------------------------------------
# DeepGEMM (github.com/deepseek-ai/DeepGEMM): its C++ binding built from its own source
# ------------------------------------------------------------------------------------------
# DeepGEMM compiles one C++ file ahead (csrc/python_api.cpp -> deep_gemm/_C, no device code:
# g++ with CUDA's and torch's headers, linked to cudart and nvrtc) and every kernel at run time
# (its JIT runs $CUDA_HOME/bin/nvcc >= 12.3 on generated code that includes
# <deep_gemm/include>/{deep_gemm,cute,cutlass}). Its setup.py copies CUTLASS's cute/ and cutlass/
# from the submodule into the package; here they are links to the nvidia-cutlass wheel's headers
# (fp8lab's own CUTLASS kernels use them): the wheel's 4.2.0 cute/ is file-for-file the 4.2.1
# commit DeepGEMM pins (f3fde58) and its cutlass/ differs in version.h and two SM100 epilogue
# files DeepGEMM does not include. {fmt} (header-only) comes from its pinned commit.
DG_BINDING = "csrc/python_api.cpp"
#: DeepGEMM's setup.py ``cxx_flags`` (as of 54e2261); the C++ ABI define is added from torch
DG_CXX_FLAGS = ("-std=c++17", "-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations")
DG_LIBRARIES = ("cudart", "nvrtc")
DG_CUTLASS_PINNED = "4.2.1 (f3fde58)"
#: the flags DeepGEMM's JIT passes nvcc for every kernel (csrc/jit/compiler.hpp at 54e2261)
DG_JIT_NVCC_FLAGS = ("-std=c++20", "--diag-suppress=39,161,174,177,186,940",
                     "--ptxas-options=--register-usage-level=10",
                     "--compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi", "-O3",
                     "--expt-relaxed-constexpr", "--expt-extended-lambda")
#: one kernel the JIT builds for fp8_gemm_nt on sm_90 (1x128 / 128x128 scales: the 1D2D kernel),
#: instantiated with values its heuristics pick for N = K = 4096 (BLOCK 128x128x128, 5 stages,
#: 128 TMA + 256 math threads, 132 SMs, bf16 out): the CPU proof that the headers compile
_DG_JIT_PROBE = """#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>
using namespace deep_gemm;
static void instantiate() {
    auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 4096, 4096, 1,
        128, 128, 128, 128, 128, 128, 5, 128, 256, 1, false, 132, GemmType::Normal, cutlass::bfloat16_t,
        epilogue::transform::EpilogueIdentity>);
    (void) ptr;
}
"""
#: a header the CPU torch wheels lack (generated by torch's CMake build; one define)
_TORCH_CUDA_MACROS = ("c10/cuda/impl/cuda_cmake_macros.h", "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")


def deepgemm_binding(src: Optional[Path] = None) -> Path:
    """DeepGEMM's C++ binding in its source tree; FileNotFoundError naming what to run."""
    src = Path(src) if src else discover.deepgemm_src()
    cpp = src / DG_BINDING
    if not (cpp.exists() and (src / "deep_gemm" / "include" / "deep_gemm").is_dir()):
        raise FileNotFoundError(f"DeepGEMM's source is not at {src} (no {DG_BINDING} / deep_gemm/include): run "
                                "`python scripts/peers_offline.py --sources` or set $FP8LAB_DEEPGEMM_SRC")
    return cpp


def deepgemm_version(src: Path) -> str:
    """``__version__`` of DeepGEMM's package in ``src`` ("?" when it has none)."""
    init = Path(src) / "deep_gemm" / "__init__.py"
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", init.read_text(), re.M) if init.exists() else None
    return m.group(1) if m else "?"


def _source_stamp(src: Path) -> dict:
    try:
        return json.loads((Path(src) / ".fp8lab-source.json").read_text())
    except (OSError, ValueError):
        return {}


def deepgemm_include_dirs(src: Path, cuda_home: str, cutlass_inc: Path) -> list:
    """setup.py's ``build_include_dirs`` with the wheel's CUTLASS headers for its submodule's."""
    src = Path(src)
    return [f"{cuda_home}/include", f"{cuda_home}/include/cccl", str(src / "deep_gemm" / "include"),
            str(cutlass_inc), str(src / "third-party" / "fmt" / "include")]


def _torch_includes(torch_include: Optional[str]) -> list:
    """torch's header folders: its own list when torch imports, else under ``torch_include`` /
    $FP8LAB_TORCH_INCLUDE (e.g. a CPU wheel's torch/include). FileNotFoundError when neither."""
    try:
        from torch.utils import cpp_extension

        if torch_include is None:
            return list(cpp_extension.include_paths())
    except Exception:  # noqa: BLE001 - no torch here: headers from a folder
        pass
    inc = torch_include or os.environ.get("FP8LAB_TORCH_INCLUDE")
    if not inc or not (Path(inc) / "torch" / "extension.h").exists():
        raise FileNotFoundError("no torch headers: pass --torch-include DIR (a torch wheel's torch/include) "
                                "or set $FP8LAB_TORCH_INCLUDE")
    return [inc, f"{inc}/torch/csrc/api/include"]


def deepgemm_compile_check(src: Optional[Path] = None, torch_include: Optional[str] = None,
                           cuda_home: str = "/usr/local/cuda", extra_includes=(), cxx: str = "g++",
                           timeout: float = 900) -> dict:
    """Compile DeepGEMM's binding alone (``-c``, nothing linked, no GPU) with setup.py's flags
    against torch's, CUDA's, the wheel's CUTLASS and {fmt}'s headers. ``extra_includes`` are
    searched last (e.g. cuBLAS / cuSPARSE / NVRTC headers a CPU toolkit lacks). dict(ok,
    seconds, errors, command)."""
    import sysconfig
    import time

    from ..kernels.cutlass_blockwise_sm90 import cutlass_include_dir

    src = Path(src) if src else discover.deepgemm_src()
    cpp = deepgemm_binding(src)
    incs = deepgemm_include_dirs(src, cuda_home, cutlass_include_dir()) + _torch_includes(torch_include)
    incs.append(sysconfig.get_paths()["include"])
    with tempfile.TemporaryDirectory() as d:
        shim = Path(d) / "shim"
        if not any((Path(i) / _TORCH_CUDA_MACROS[0]).exists() for i in incs):
            (shim / _TORCH_CUDA_MACROS[0]).parent.mkdir(parents=True)
            (shim / _TORCH_CUDA_MACROS[0]).write_text(_TORCH_CUDA_MACROS[1])
        after = [*map(str, extra_includes), str(shim)]
        cmd = [shutil.which(cxx) or cxx, *DG_CXX_FLAGS, "-D_GLIBCXX_USE_CXX11_ABI=1", "-DTORCH_API_INCLUDE_EXTENSION_H",
               "-DTORCH_EXTENSION_NAME=_C", *(f"-I{i}" for i in incs), *(x for a in after for x in ("-idirafter", a)),
               "-c", str(cpp), "-o", str(Path(d) / "python_api.o")]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(src))
        ok = p.returncode == 0 and (Path(d) / "python_api.o").exists()
    errors = [ln for ln in (p.stdout + p.stderr).splitlines() if "error" in ln]
    return dict(ok=ok, seconds=time.monotonic() - t0, errors=errors[:10], command=" ".join(cmd))


def _link_dirs(where: Path, targets: dict) -> Path:
    """Links ``where/name -> target`` (replacing older links) for each item of ``targets``."""
    where.mkdir(parents=True, exist_ok=True)
    for name, target in targets.items():
        link = where / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(Path(target).resolve(), target_is_directory=True)
    return where


def _cutlass_links(cutlass_inc: Path) -> dict:
    return {"cute": Path(cutlass_inc) / "cute", "cutlass": Path(cutlass_inc) / "cutlass"}


def deepgemm_jit_check(arch: str = "sm_90a", src: Optional[Path] = None, nvcc: str = "nvcc",
                       timeout: float = 600) -> dict:
    """nvcc one kernel DeepGEMM's JIT builds for fp8_gemm_nt on Hopper (_DG_JIT_PROBE) to a cubin
    with the JIT's flags and include layout, the wheel's CUTLASS headers linked in: no torch,
    no GPU. dict(ok, arch, seconds, errors, command)."""
    import time

    from ..kernels.cutlass_blockwise_sm90 import cutlass_include_dir

    src = Path(src) if src else discover.deepgemm_src()
    deepgemm_binding(src)
    with tempfile.TemporaryDirectory() as d:
        inc = _link_dirs(Path(d) / "include", {"deep_gemm": Path(src) / "deep_gemm" / "include" / "deep_gemm",
                                               **_cutlass_links(cutlass_include_dir())})
        cu = Path(d) / "kernel.cu"
        cu.write_text(_DG_JIT_PROBE)
        cmd = [shutil.which(nvcc) or nvcc, str(cu), "-cubin", "-o", str(Path(d) / "kernel.cubin"), *DG_JIT_NVCC_FLAGS,
               f"-I{inc}", f"--gpu-architecture={arch}"]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=d)
        ok = p.returncode == 0 and (Path(d) / "kernel.cubin").exists()
    errors = [ln for ln in (p.stdout + p.stderr).splitlines() if "error" in ln]
    return dict(ok=ok, arch=arch, seconds=time.monotonic() - t0, errors=errors[:10], command=" ".join(cmd))


def _stage_deepgemm(src: Path, out: Path, cutlass_inc: Path) -> Path:
    """out/deep_gemm: DeepGEMM's Python package (an ignored build output, as its setup.py's
    build_py makes one) with include/cute and include/cutlass linked to ``cutlass_inc``."""
    pkg = out / "deep_gemm"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(Path(src) / "deep_gemm", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    _link_dirs(pkg / "include", _cutlass_links(cutlass_inc))
    return pkg


#: the link flags of the static-libstdcxx variant (discover.DEEPGEMM_VARIANTS): libstdc++ linked
#: in, references to what the library defines bound inside it, none of the static library's
#: symbols exported (libgcc_s, the unwinder, stays shared: exceptions cross into torch's libraries)
DG_STATIC_LINK_FLAGS = ("-static-libstdc++", "-Wl,-Bsymbolic", "-Wl,--exclude-libs,ALL")


def _deepgemm_setuptools_build(cpp: Path, include_dirs: list, lib_dirs: list, out: Path, verbose: bool,
                               link_flags: tuple = ()) -> None:
    """setup.py's CUDAExtension("deep_gemm._C") built into out/deep_gemm (no ninja: one file)."""
    import torch
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    flags = [*DG_CXX_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
    ext = CUDAExtension("deep_gemm._C", [str(cpp)], include_dirs=include_dirs, libraries=list(DG_LIBRARIES),
                        library_dirs=lib_dirs, extra_compile_args=flags, extra_link_args=list(link_flags))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            setup(name="deep-gemm-fp8lab-build", ext_modules=[ext],
                  cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
                  script_args=["-q" if not verbose else "-v", "build_ext", "--build-lib", str(out), "--build-temp", tmp])
        except SystemExit as e:       # setuptools exits on a compiler error
            raise RuntimeError(f"DeepGEMM's extension did not build: {e}") from e


def _nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except Exception:  # noqa: BLE001 - the version is provenance, not a requirement
        return ""


def write_deepgemm_build_info(out: Path, info: dict) -> Path:
    """build_info.json beside the build (read back by discover.deepgemm_build_info)."""
    path = Path(out) / "build_info.json"
    path.write_text(json.dumps(info, indent=1))
    return path


def build_deepgemm(src: Optional[Path] = None, out: Optional[Path] = None, verbose: bool = False,
                   variant: str = "as-is") -> Path:
    """Build DeepGEMM's deep_gemm._C with this box's torch into ``out`` (default: the variant's
    folder, build/peers/deepgemm), beside a copy of its package whose JIT include folder links the
    wheel's CUTLASS headers; writes build_info.json (commits, versions, flags, CUDA home). The
    ``static-libstdcxx`` variant links with DG_STATIC_LINK_FLAGS; the others share the as-is build.
    Returns the folder."""
    import torch
    from torch.utils import cpp_extension

    from ..kernels.cutlass_blockwise_sm90 import cutlass_include_dir, cutlass_version

    src = Path(src) if src else discover.deepgemm_src()
    cpp = deepgemm_binding(src)
    if variant not in discover.DEEPGEMM_VARIANTS:
        raise ValueError(f"DeepGEMM variant must be one of {discover.DEEPGEMM_VARIANTS}, got {variant!r}")
    link = DG_STATIC_LINK_FLAGS if variant in discover.DEEPGEMM_OWN_BUILD else ()
    out = Path(out) if out else discover.deepgemm_build_dir(variant)
    out.mkdir(parents=True, exist_ok=True)
    cuda_home = cpp_extension.CUDA_HOME
    if not cuda_home:
        raise RuntimeError("torch finds no CUDA toolkit (CUDA_HOME): DeepGEMM's build and its JIT need nvcc")
    cutlass_inc = cutlass_include_dir()
    _stage_deepgemm(src, out, cutlass_inc)
    _deepgemm_setuptools_build(cpp, deepgemm_include_dirs(src, cuda_home, cutlass_inc), [f"{cuda_home}/lib64"],
                               out, verbose, link)
    if not any((out / "deep_gemm").glob("_C*.so")):
        raise RuntimeError(f"the build finished without deep_gemm/_C*.so in {out}")
    stamp = _source_stamp(src)
    write_deepgemm_build_info(out, dict(
        version=deepgemm_version(src), source_commit=stamp.get("commit", "?"), source=str(src),
        fmt_commit=stamp.get("fmt", {}).get("commit", "?"), cutlass_pinned=DG_CUTLASS_PINNED,
        cutlass_include=str(cutlass_inc), cutlass_version=cutlass_version(cutlass_inc), cxx_flags=list(DG_CXX_FLAGS),
        libraries=list(DG_LIBRARIES), link_flags=list(link), variant=variant, jit_nvcc_flags=list(DG_JIT_NVCC_FLAGS), cuda_home=str(cuda_home),
        nvcc=_nvcc_version(cpp_extension._join_cuda_home("bin", "nvcc")), torch=torch.__version__,
        torch_cuda=str(torch.version.cuda)))
    discover.reset()
    return out


# ------------------------------------------------------------------------------------------
# DeepGEMM in `python -m fp8lab build` (fp8lab.run.prebuild's peer_deepgemm_* targets)
# ------------------------------------------------------------------------------------------
def hopper_torch() -> tuple[bool, str]:
    """(ok, why not): torch imports and sees a Hopper (sm_90) GPU, what the sm_90a peers' builds need."""
    try:
        import torch
    except ImportError:
        return False, "no torch"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    return (True, "") if torch.cuda.get_device_capability()[0] == 9 else (False, "not a Hopper (sm_90) GPU")


def deepgemm_prebuild_ready() -> tuple[bool, str]:
    """(ok, why not): DeepGEMM's source and the CUTLASS headers are here, and torch sees a Hopper GPU
    (its sm_90 kernels are the ones notebooks 05 and 06 run)."""
    from ..kernels.cutlass_blockwise_sm90 import CutlassNotFound, cutlass_include_dir

    try:
        deepgemm_binding()
    except FileNotFoundError:
        return False, ("DeepGEMM's source is not here (python scripts/peers_offline.py --sources "
                       "or $FP8LAB_DEEPGEMM_SRC)")
    try:
        cutlass_include_dir()
    except CutlassNotFound as e:
        return False, str(e).splitlines()[0]
    return hopper_torch()


def _deepgemm_built(variant: str) -> Optional[Path]:
    """The variant's deep_gemm/_C*.so when it was built from the unpacked source at its commit."""
    src, out = discover.deepgemm_src(), discover.deepgemm_build_dir(variant)
    so = next((out / "deep_gemm").glob("_C*.so"), None)
    d = discover.deepgemm_build_info(out)
    same = d.get("source_commit") == _source_stamp(src).get("commit") and d.get("source") == str(src) \
        and d.get("variant") == variant
    return so if so is not None and same else None


def prebuild_deepgemm(variant: str = "as-is") -> Path:
    """Build one DeepGEMM build (``as-is``, which the ``deepbind`` variant imports too, or one of
    DEEPGEMM_OWN_BUILD) unless the same source is built there, then probe every variant that imports
    it, each in its own process (the lines are cached beside the build, so the notebooks' sweeps
    choose a variant without probing again). Returns the .so."""
    so = _deepgemm_built(variant)
    if so is None:
        build_deepgemm(variant=variant)
        so = next((discover.deepgemm_build_dir(variant) / "deep_gemm").glob("_C*.so"))
    users = [v for v in discover.DEEPGEMM_VARIANTS
             if discover.deepgemm_build_dir(v) == discover.deepgemm_build_dir(variant)]
    for v in users:
        ok, line = discover.probe_deepgemm(v)
        print(f"DeepGEMM ({v}) probe: {'ok' if ok else 'failed'}: {line}")
    return so
