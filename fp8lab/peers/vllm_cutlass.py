"""vLLM's CUTLASS blockwise FP8 GEMM for Hopper (``cutlass_scaled_mm_blockwise_sm90_fp8``: what
vLLM's ``cutlass_scaled_mm`` runs on sm_90 for 1x128 activation and 128x128 weight scales, the
DeepSeek-V3 block-FP8 format), built from vLLM's released source without vLLM: the files of vLLM
0.34.0's sdist that this GEMM compiles from (fp8lab.peers.vllm_quant pins the sdist and unpacks
them, with the quantiser's, into ``build/peers/src/vllm``).

- :func:`build` compiles vLLM's ``scaled_mm_blockwise_sm90_fp8.cu`` (its dispatch: CUTLASS's
  FP8 block-scaled-accumulation kernels, cooperative 128 x 128 x 128 tiles on a 1 x 2 cluster when M
  is a multiple of 4, else the operands swapped onto 128 x 16 x 128 ping-pong tiles) with fp8lab's
  binding (``vllm_cutlass_binding.cpp``: the one operator, through torch's stable ABI as vLLM
  registers its ops, under NAMESPACE) against the CUTLASS headers fp8lab's own CUTLASS arm uses
  (the nvidia-cutlass wheel; vLLM 0.34 pins CUTLASS 4.7.1: the version is in build_info.json), for
  sm_90a.
- vLLM 0.34 calls it with no padding of M (its ``CutlassFp8BlockScaledMMKernel``: activations
  quantised with M-major scales, ``cutlass_scaled_mm(A, B.T, scale_a=As, scale_b=Bs.T)``); the
  adapter does the same.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from .. import paths
from . import vllm_quant

#: the CUDA source vLLM compiles for this GEMM on sm_90 (relative to the sdist unpack)
CU_SOURCES = (f"{vllm_quant.CUTLASS_C3X}/scaled_mm_blockwise_sm90_fp8.cu",)
HEADERS = tuple(p for p in vllm_quant.CUTLASS_PATHS if p not in CU_SOURCES)
BINDING = Path(__file__).with_name("vllm_cutlass_binding.cpp")
NAMESPACE = "_fp8lab_vllm_cutlass"
BUILD_ENV = "FP8LAB_VLLM_CUTLASS_BUILD"
PROBING_ENV = "FP8LAB_VLLM_CUTLASS_PROBING"
ARCH_LIST = "9.0a"              # wgmma and TMA: the arch-specific Hopper target, as vLLM builds it
INSTALL = (f"python scripts/peers_offline.py --sources --source-peers vllm && python -m fp8lab.peers build "
           f"vllm-cutlass  (vLLM {vllm_quant.VLLM_VERSION}'s sdist from PyPI)")
#: the nvcc flags vLLM's CMake gives its CUTLASS sources beyond torch's: USE_CUDA (torch's stable shim
#: declares its CUDA stream getter under it); the -U flags undo torch's -D__CUDA_NO_HALF_* defaults
#: (CUTLASS's numeric types want those operators)
CUDA_FLAGS = ("-O3", "-std=c++17", "-DNDEBUG", "-DUSE_CUDA", "--expt-relaxed-constexpr",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_HALF2_OPERATORS__")


def src_dir() -> Path:
    return vllm_quant.src_dir()


def build_dir() -> Path:
    env = os.environ.get(BUILD_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "vllm-cutlass"


def missing_source(src: Optional[Path] = None) -> Optional[str]:
    """Why the source is not usable (one line with what to run), None when it is."""
    src = src or src_dir()
    lost = [p for p in (*CU_SOURCES, *HEADERS, "csrc/torch_utils.h") if not (src / p).exists()]
    if lost:
        return (f"vLLM's CUTLASS blockwise GEMM source is not at {src} (no {lost[0]}): run "
                f"`{INSTALL.split(' && ')[0]}`")
    return None


def cutlass_include() -> Path:
    """The CUTLASS headers fp8lab's own CUTLASS arm builds with (CutlassNotFound otherwise)."""
    from ..kernels import cutlass_blockwise_sm90 as cb

    return cb.cutlass_include_dir()


def include_dirs(src: Path, include: Path) -> list:
    """vLLM's csrc and its c3x folder, CUTLASS's include and its tools/util/include
    (``cutlass/util/packed_stride.hpp``, beside it in the wheel and in a CUTLASS checkout)."""
    util = include.parent / "tools" / "util" / "include"
    return [str(src / "csrc"), str(src / "csrc" / "quantization" / "w8a8" / "cutlass"), str(include),
            *([str(util)] if util.is_dir() else [])]


def built(out: Optional[Path] = None, src: Optional[Path] = None) -> Optional[Path]:
    """The extension in ``out`` when it was built from the sdist unpack ``src`` as it is now."""
    return vllm_quant.built(out or build_dir(), src, namespace=NAMESPACE)


def build(verbose: bool = False, out: Optional[Path] = None) -> Path:
    """Compile the extension (torch.utils.cpp_extension.load, ninja) into ``out`` for sm_90a;
    writes build_info.json (vLLM version and sdist sha256, CUTLASS version, nvcc, torch). Returns the .so."""
    from ..kernels import cutlass_blockwise_sm90 as cb

    src = src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    inc = cutlass_include()
    import torch
    from torch.utils import cpp_extension

    out = Path(out) if out else build_dir()
    out.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = ARCH_LIST
    try:
        cpp_extension.load(name=NAMESPACE, sources=[str(BINDING), *(str(src / s) for s in CU_SOURCES)],
                           extra_include_paths=include_dirs(src, inc), build_directory=str(out),
                           extra_cflags=["-O3"], extra_cuda_cflags=list(CUDA_FLAGS), is_python_module=False,
                           verbose=verbose)
    finally:
        if old is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old
    so = next(out.glob(f"{NAMESPACE}*.so"), None)
    if so is None or so.name.split(".")[0] != NAMESPACE:
        raise RuntimeError(f"the build finished without {NAMESPACE}*.so in {out} (build it in a process of its own)")
    from .build import _nvcc_version

    nvcc_v = _nvcc_version(cpp_extension._join_cuda_home("bin", "nvcc"))
    stamp = vllm_quant.source_stamp(src)
    (out / "build_info.json").write_text(json.dumps(dict(
        version=stamp.get("version", "?"), sha256=stamp.get("sha256", "?"), source=str(src), url=vllm_quant.SDIST_URL,
        cutlass=cb.cutlass_version(inc), nvcc=nvcc_v, torch=torch.__version__, arch_list=ARCH_LIST), indent=1))
    return so


def build_info() -> dict:
    from .discover import read_json

    return read_json(build_dir() / "build_info.json")


def version() -> str:
    d = build_info()
    if not d:
        return "source build"
    return (f"vLLM {d.get('version', '?')} sdist (CUTLASS {d.get('cutlass', '?')} headers; built with "
            f"{d.get('nvcc', '?')})")


def prebuild_ready() -> tuple[bool, str]:
    """(ok, why not) for the prebuild target: source, CUTLASS headers, and a Hopper GPU."""
    why = missing_source()
    if why:
        return False, why
    try:
        cutlass_include()
    except Exception as e:  # noqa: BLE001 - CutlassNotFound: one line
        return False, str(e).splitlines()[0]
    from .build import hopper_torch

    return hopper_torch()


def prebuild() -> Path:
    """Build unless this source commit is built already, then probe it in its own process."""
    so = built() or build()
    ok, line = probe()
    print(f"vLLM CUTLASS blockwise probe: {'ok' if ok else 'failed'}: {line}")
    return so


def probe(timeout: float = 300.0) -> tuple[bool, str]:
    """One small checked multiply in a separate process."""
    from . import discover

    return discover.probe_extension(build_dir(), NAMESPACE, "probe-vllm-cutlass", PROBING_ENV, timeout)


def ops():
    """The operator namespace (``blockwise_sm90_fp8``), PeerUnavailable naming what to run when
    the source or the build is missing, the GPU is not a Hopper, or the probe failed."""
    from . import discover
    from .discover import PeerUnavailable

    why = missing_source()
    if why:
        raise PeerUnavailable(why)
    so = next(build_dir().glob(f"{NAMESPACE}*.so"), None)
    if so is None:
        raise PeerUnavailable(f"vLLM's CUTLASS blockwise GEMM is not built (no {NAMESPACE}*.so in {build_dir()}): "
                              "run `python -m fp8lab.peers build vllm-cutlass` (or `python -m fp8lab build`)")
    discover._need_torch()
    sm = discover._gpu_sm()
    if sm is not None and sm // 10 != 9:
        raise PeerUnavailable(f"vLLM's CUTLASS blockwise GEMM is built for sm_90a only (this GPU is sm_{sm})")
    if not os.environ.get(PROBING_ENV) and sm is not None:
        ok, line = probe()
        if not ok:
            raise PeerUnavailable(f"vLLM's CUTLASS blockwise GEMM failed its separate-process probe: {line}")
    try:
        return discover.load_ops(so, NAMESPACE, "blockwise_sm90_fp8")
    except Exception as e:  # noqa: BLE001 - an extension that does not load is a reason
        raise PeerUnavailable(f"vLLM's CUTLASS blockwise extension does not load: {str(e).splitlines()[0][:200]}") \
            from e


# ------------------------------------------------------------------------------------------
# CPU proof (no GPU): the source compiled as the build compiles it, for sm_90a
# ------------------------------------------------------------------------------------------
def compile_check(src: Optional[Path] = None, torch_include: Optional[str] = None, nvcc: str = "nvcc",
                  arch: str = "sm_90a", timeout: float = 2400) -> dict:
    """Compile vLLM's kernel file with the build's flags (torch's headers, CUDA_FLAGS, the CUTLASS
    headers) for ``arch`` and fp8lab's binding, then list the CUTLASS GEMM kernels its SASS holds
    (``cutlass::device_kernel<...>``, what CUTLASS's adapter launches; cuobjdump):
    dict(ok, seconds, errors, kernels, command)."""
    import shutil
    import sysconfig
    import tempfile
    import time

    from . import build as peer_build
    from . import vllm_marlin

    src = Path(src) if src else src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    exe = shutil.which(nvcc) or nvcc
    with tempfile.TemporaryDirectory() as d:
        shim = Path(d) / "shim"
        (shim / peer_build._TORCH_CUDA_MACROS[0]).parent.mkdir(parents=True)
        (shim / peer_build._TORCH_CUDA_MACROS[0]).write_text(peer_build._TORCH_CUDA_MACROS[1])
        for name, text in vllm_marlin._LIB_STUBS.items():
            (shim / name).write_text("#pragma once\n" + text)
        incs = [*include_dirs(src, cutlass_include()), *peer_build._torch_includes(torch_include),
                sysconfig.get_paths()["include"]]
        obj, bobj = Path(d) / "blockwise.o", Path(d) / "binding.o"
        common = ["-D_GLIBCXX_USE_CXX11_ABI=1", *(f"-I{i}" for i in incs), f"-Xcompiler=-idirafter,{shim}"]
        cmd = [exe, f"-gencode=arch=compute_{arch[3:]},code={arch}", *CUDA_FLAGS, *common, "-c",
               str(src / CU_SOURCES[0]), "-o", str(obj)]
        bcmd = [exe, "-x", "c++", "-std=c++17", "-O2", *common, "-c", str(BINDING), "-o", str(bobj)]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rb = subprocess.run(bcmd, capture_output=True, text=True, timeout=timeout)
        kernels = []
        if r.returncode == 0 and obj.exists():
            from ..toolchain import tools

            sass = tools.run_tool("cuobjdump", ["-sass", str(obj)], timeout=600).stdout
            kernels = sorted({ln.split(":", 1)[1].strip() for ln in sass.splitlines()
                              if ln.strip().startswith("Function :") and "device_kernel" in ln})
    log = r.stdout + r.stderr + rb.stdout + rb.stderr
    errors = [ln for ln in log.splitlines() if " error" in ln or "fatal" in ln]
    return dict(ok=r.returncode == 0 and rb.returncode == 0 and bool(kernels), seconds=time.monotonic() - t0,
                errors=errors[:10], kernels=kernels, command=" ".join(cmd) + "\n" + " ".join(bcmd))
