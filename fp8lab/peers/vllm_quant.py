"""vLLM's per-token-group FP8 activation quantiser for CUDA (``per_token_group_quant_fp8`` in
``csrc/quantization/w8a8/fp8/per_token_group_quant.cu``: what vLLM's ``per_token_group_quant_fp8``
runs on a CUDA GPU, as ``torch.ops._C.per_token_group_fp8_quant``), built from vLLM's released
source without vLLM: the files of its sdist on PyPI (VLLM_VERSION, checked against SDIST_SHA256)
that this one kernel compiles from (SDIST_PATHS, 0.1 MB), unpacked into ``build/peers/src/vllm``
by ``scripts/peers_offline.py --sources --source-peers vllm`` (with the file of vLLM's Triton
block-FP8 GEMM and its NVIDIA configs, SDIST_GLOBS, which fp8lab.peers.vllm_triton runs).

- :func:`build` compiles vLLM's file with fp8lab's binding (``vllm_quant_binding.cpp``: the one
  operator, registered through torch's stable ABI as vLLM registers it, with vLLM's schema, under
  NAMESPACE) with torch's cpp_extension and vLLM's nvcc flags for it (extended lambdas).
- Its schema is vLLM's: ``scale_ue8m0`` False (fp32 scales, what fp8lab's recipe and the other
  quantisers make); the last two flags are vLLM's placeholders (``dummy_is_scale_transposed``,
  ``dummy_is_tma_aligned``: the kernel reads the scales' layout from their strides), passed False
  with row-major (M, K/128) scales, as notebook 06b compares.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from .. import paths

VLLM_VERSION = "0.34.0"
SDIST = f"vllm-{VLLM_VERSION}.tar.gz"
SDIST_URL = ("https://files.pythonhosted.org/packages/92/21/6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8"
             "dc622eff/vllm-0.34.0.tar.gz")
SDIST_SHA256 = "fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113"
#: the kernel's file and what it includes (nvcc -M over vLLM's csrc), and the licence
CU_SOURCES = ("csrc/quantization/w8a8/fp8/per_token_group_quant.cu",)
#: vLLM's Triton block-FP8 GEMM (fp8lab.peers.vllm_triton loads its kernel from this file)
FP8_UTILS = "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
#: vLLM's CUTLASS blockwise FP8 GEMM for Hopper and what it includes (fp8lab.peers.vllm_cutlass builds it)
CUTLASS_C3X = "csrc/quantization/w8a8/cutlass/c3x"
CUTLASS_PATHS = (f"{CUTLASS_C3X}/scaled_mm_blockwise_sm90_fp8.cu", f"{CUTLASS_C3X}/scaled_mm_blockwise_sm90_fp8_dispatch.cuh",
                 f"{CUTLASS_C3X}/cutlass_gemm_caller.cuh", f"{CUTLASS_C3X}/scaled_mm_kernels.hpp", "csrc/core/utils.hpp",
                 "csrc/cutlass_extensions/common.hpp", "csrc/cutlass_extensions/epilogue/scaled_mm_epilogues_c3x.hpp",
                 "csrc/cutlass_extensions/epilogue/broadcast_load_epilogue_c3x.hpp",
                 "csrc/cutlass_extensions/epilogue/broadcast_load_epilogue_array_c3x.hpp")
SDIST_PATHS = (*CU_SOURCES, "csrc/core/cuda_compat.h", "csrc/dispatch_utils.h", "csrc/torch_utils.h",
               "csrc/quantization/vectorization.cuh", "csrc/quantization/vectorization_utils.cuh", FP8_UTILS,
               *CUTLASS_PATHS, "LICENSE")
#: and the tuned configs vLLM ships for that GEMM on NVIDIA GPUs, 128 x 128 blocks (fnmatch patterns)
SDIST_GLOBS = ("vllm/model_executor/layers/quantization/utils/configs/N=*,K=*,device_name=NVIDIA_*,"
               "dtype=fp8_w8a8,block_shape=[[]128,128].json",)
BINDING = Path(__file__).with_name("vllm_quant_binding.cpp")
NAMESPACE = "_fp8lab_vllm_quant"
SRC_ENV = "FP8LAB_VLLM_SRC"
BUILD_ENV = "FP8LAB_VLLM_QUANT_BUILD"
PROBING_ENV = "FP8LAB_VLLM_QUANT_PROBING"
ARCH_LIST = "9.0"
INSTALL = (f"python scripts/peers_offline.py --sources --source-peers vllm && python -m fp8lab.peers build "
           f"vllm-quant  (vLLM {VLLM_VERSION}'s sdist from PyPI)")
#: vLLM's nvcc flags for this file beyond torch's: USE_CUDA (torch's shim declares its CUDA stream and
#: cuBLAS handle getters under it), --extended-lambda (its __device__ lambdas); the
#: -U flags undo torch's -D__CUDA_NO_HALF_* defaults (vLLM's own build does not set them)
CUDA_FLAGS = ("-O3", "-std=c++17", "-DUSE_CUDA", "--extended-lambda", "--expt-relaxed-constexpr",
              "-U__CUDA_NO_HALF_OPERATORS__",
              "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_HALF2_OPERATORS__")


def src_dir() -> Path:
    env = os.environ.get(SRC_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "src" / "vllm"


def build_dir() -> Path:
    env = os.environ.get(BUILD_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "vllm-quant"


def source_stamp(src: Optional[Path] = None) -> dict:
    from .discover import read_json

    return read_json((src or src_dir()) / ".fp8lab-source.json")


def missing_source(src: Optional[Path] = None) -> Optional[str]:
    """Why the source is not usable (one line with what to run), None when it is."""
    src = src or src_dir()
    lost = [p for p in (*CU_SOURCES, "csrc/torch_utils.h", "csrc/quantization/vectorization.cuh") if not (src / p).exists()]
    if lost:
        return f"vLLM's quantiser source is not at {src} (no {lost[0]}): run `{INSTALL.split(' && ')[0]}`"
    return None


def gather(dest: Path, sdist: Path) -> str:
    """Unpack SDIST_PATHS of vLLM's sdist (a local ``vllm-<VLLM_VERSION>.tar.gz`` whose sha256 is
    SDIST_SHA256) into ``dest`` (its top folder stripped), replacing an earlier unpack of this
    script's; stamps ``.fp8lab-source.json``; returns the version. ValueError (one line) for another
    file, FileExistsError when ``dest`` holds files this did not unpack."""
    import hashlib
    import shutil
    import tarfile

    sdist = Path(sdist)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise ValueError(f"{sdist} is not vLLM {VLLM_VERSION}'s sdist (sha256 {digest[:16]}..., want "
                         f"{SDIST_SHA256[:16]}...)")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        if not (dest / ".fp8lab-source.json").exists():
            raise FileExistsError(f"{dest} holds files this script did not unpack: not replacing them")
        shutil.rmtree(dest)
    import fnmatch

    top = f"vllm-{VLLM_VERSION}/"

    def wanted(name: str) -> bool:
        return name in SDIST_PATHS or any(fnmatch.fnmatchcase(name, g) for g in SDIST_GLOBS)

    with tarfile.open(sdist) as t:
        members = [m for m in t.getmembers() if m.isfile() and m.name.startswith(top) and wanted(m.name[len(top):])]
        missing = set(SDIST_PATHS) - {m.name[len(top):] for m in members}
        if missing:
            raise ValueError(f"{sdist} lacks {sorted(missing)[0]}")
        for m in members:
            m.name = m.name[len(top):]
        dest.mkdir(parents=True, exist_ok=True)
        t.extractall(dest, members=members, filter="data")
    (dest / ".fp8lab-source.json").write_text(json.dumps(
        {"package": "vllm", "version": VLLM_VERSION, "sdist": SDIST, "url": SDIST_URL, "sha256": SDIST_SHA256,
         "paths": list(SDIST_PATHS), "globs": list(SDIST_GLOBS)}, indent=1))
    return VLLM_VERSION


def built(out: Optional[Path] = None, src: Optional[Path] = None, namespace: str = NAMESPACE) -> Optional[Path]:
    """The extension ``<namespace>*.so`` in ``out`` when it was built from the sdist unpack ``src``
    as it is now (vllm_cutlass's build asks the same of its own)."""
    from .discover import read_json

    out, src = out or build_dir(), src or src_dir()
    so = next(out.glob(f"{namespace}*.so"), None)
    d = read_json(out / "build_info.json")
    same = bool(d) and d.get("sha256") == source_stamp(src).get("sha256") and d.get("source") == str(src)
    return so if so is not None and same else None


def build(verbose: bool = False, out: Optional[Path] = None) -> Path:
    """Compile the extension (torch.utils.cpp_extension.load) into ``out``; writes build_info.json
    (vLLM version and sdist sha256, nvcc, torch). Returns the .so."""
    src = src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    import torch
    from torch.utils import cpp_extension

    out = Path(out) if out else build_dir()
    out.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = ARCH_LIST
    try:
        cpp_extension.load(name=NAMESPACE, sources=[str(BINDING), *(str(src / s) for s in CU_SOURCES)],
                           extra_include_paths=[str(src / "csrc")], build_directory=str(out),
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

    stamp = source_stamp(src)
    (out / "build_info.json").write_text(json.dumps(dict(
        version=stamp.get("version", "?"), sha256=stamp.get("sha256", "?"), source=str(src), url=SDIST_URL,
        nvcc=_nvcc_version(cpp_extension._join_cuda_home("bin", "nvcc")), torch=torch.__version__,
        arch_list=ARCH_LIST), indent=1))
    return so


def build_info() -> dict:
    from .discover import read_json

    return read_json(build_dir() / "build_info.json")


def version() -> str:
    d = build_info()
    if not d:
        return "source build"
    return f"vLLM {d.get('version', '?')} sdist (source; built with {d.get('nvcc', '?')})"


def prebuild_ready() -> tuple[bool, str]:
    """(ok, why not) for the prebuild target: the source, torch and a CUDA GPU."""
    why = missing_source()
    if why:
        return False, why
    from . import discover

    try:
        discover._need_torch()
    except Exception as e:  # noqa: BLE001 - PeerUnavailable: one line
        return False, str(e).splitlines()[0]
    if discover._gpu_sm() is None:
        return False, "no CUDA GPU"
    return True, ""


def prebuild() -> Path:
    """Build unless this source is built already, then probe it in its own process."""
    so = built() or build()
    ok, line = probe()
    print(f"vLLM quantiser probe: {'ok' if ok else 'failed'}: {line}")
    return so


def probe(timeout: float = 300.0) -> tuple[bool, str]:
    """One small checked quantisation in a separate process."""
    from . import discover

    return discover.probe_extension(build_dir(), NAMESPACE, "probe-vllm-quant", PROBING_ENV, timeout)


def ops():
    """The operator namespace (``per_token_group_fp8_quant``), PeerUnavailable naming what to run
    when the source or the build is missing or the probe failed."""
    from . import discover
    from .discover import PeerUnavailable

    why = missing_source()
    if why:
        raise PeerUnavailable(why)
    so = next(build_dir().glob(f"{NAMESPACE}*.so"), None)
    if so is None:
        raise PeerUnavailable(f"vLLM's quantiser is not built (no {NAMESPACE}*.so in {build_dir()}): "
                              "run `python -m fp8lab.peers build vllm-quant` (or `python -m fp8lab build`)")
    discover._need_torch()
    if not os.environ.get(PROBING_ENV) and discover._gpu_sm() is not None:
        ok, line = probe()
        if not ok:
            raise PeerUnavailable(f"vLLM's quantiser failed its separate-process probe: {line}")
    try:
        return discover.load_ops(so, NAMESPACE, "per_token_group_fp8_quant")
    except Exception as e:  # noqa: BLE001 - an extension that does not load is a reason
        raise PeerUnavailable(f"vLLM's quantiser extension does not load: {str(e).splitlines()[0][:200]}") from e


# ------------------------------------------------------------------------------------------
# CPU proof (no GPU): the source and the binding compiled as the build compiles them
# ------------------------------------------------------------------------------------------
def compile_check(src: Optional[Path] = None, torch_include: Optional[str] = None, nvcc: str = "nvcc",
                  arch: str = "sm_90", timeout: float = 1200) -> dict:
    """Compile vLLM's kernel file (nvcc, CUDA_FLAGS, for ``arch``) and fp8lab's binding (nvcc as
    host compiler driver) against torch's headers, then list the quantiser's kernels in the SASS
    (cuobjdump) and check the object defines the function the binding registers:
    dict(ok, seconds, errors, kernels, command)."""
    import shutil
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
        incs = [str(src / "csrc"), *peer_build._torch_includes(torch_include)]
        common = [*(f"-I{i}" for i in incs), f"-Xcompiler=-idirafter,{shim}", "-D_GLIBCXX_USE_CXX11_ABI=1"]
        obj, bobj = Path(d) / "quant.o", Path(d) / "binding.o"
        cmd = [exe, f"-gencode=arch=compute_{arch[3:]},code={arch}", *CUDA_FLAGS, *common, "-c",
               str(src / CU_SOURCES[0]), "-o", str(obj)]
        bcmd = [exe, "-x", "c++", "-std=c++17", "-O2", *common, "-Xcompiler=-fPIC", "-c", str(BINDING), "-o", str(bobj)]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rb = subprocess.run(bcmd, capture_output=True, text=True, timeout=timeout)
        kernels, defined = [], False
        if r.returncode == 0 and obj.exists():
            from ..toolchain import tools

            sass = tools.run_tool("cuobjdump", ["-sass", str(obj)], timeout=600).stdout
            kernels = sorted({ln.split(":", 1)[1].strip() for ln in sass.splitlines()
                              if ln.strip().startswith("Function :") and "per_token_group_quant" in ln})
            nm = shutil.which("nm")        # binutils: the host function the binding registers
            syms = subprocess.run([nm, "-C", "--defined-only", str(obj)], capture_output=True, text=True,
                                  timeout=120).stdout if nm else ""
            defined = not nm or any(" T per_token_group_quant_fp8(" in ln for ln in syms.splitlines())
    log = r.stdout + r.stderr + rb.stdout + rb.stderr
    errors = [ln for ln in log.splitlines() if " error" in ln or "fatal" in ln]
    return dict(ok=r.returncode == 0 and rb.returncode == 0 and bool(kernels) and defined,
                seconds=time.monotonic() - t0, errors=errors[:10], kernels=kernels,
                command=" ".join(cmd) + "\n" + " ".join(bcmd))
