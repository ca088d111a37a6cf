"""vLLM's Marlin GEMMs (``gptq_marlin``: FP8, INT8 and INT4 weight-only, the kernels vLLM runs for
those formats), built from their own sources without vLLM: the copy kernels-community keeps
(github.com/huggingface/kernels-community, folder ``vllm-quantization``, pinned at KC_COMMIT).

- ``scripts/peers_offline.py --sources --source-peers vllm-marlin`` unpacks what the build and the
  Python utilities need (KC_PATHS: the CUDA sources, vLLM's ScalarType header, the Python package)
  into ``build/peers/src/vllm-marlin`` ($FP8LAB_VLLM_MARLIN_SRC), stamped with the commit;
- :func:`build` compiles them with fp8lab's own binding (``vllm_marlin_binding.cpp``: the two
  operators the adapters call, under the namespace NAMESPACE) with torch's extension builder into
  ``build/peers/vllm-marlin`` ($FP8LAB_VLLM_MARLIN_BUILD);
- :func:`package` loads the extension and vLLM's Python utilities from the unpacked source (its
  quantisers, repacking and scale permutations, as vLLM's own tests use them), as a package of
  its own name whose ``_ops`` are the operators built here. Nothing of it is copied into fp8lab.

The kernels-community copy differs from vLLM's tree in one way that matters here: its
``marlin_utils`` lost vLLM's ``envs`` import, so ``apply_gptq_marlin_linear`` raises NameError
for N < 2048 and K >= 2048. fp8lab's adapters therefore call the operator with the arguments
``apply_*_marlin_linear`` passes under vLLM's defaults (no atomic-add reduce, fp32 reduce).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Optional

from .. import paths

KC_URL = "https://github.com/huggingface/kernels-community"
#: kernels-community's last commit with vllm-quantization (it left the tree afterwards)
KC_COMMIT = "8836a017f1ba741fce327e17907ff0522aeed4df"
KC_DIR = "vllm-quantization"
#: what the build and the Python utilities read, relative to KC_DIR
KC_PATHS = ("gptq_marlin", "core/scalar_type.hpp", "torch-ext/vllm_quantization/scalar_type.py",
            "torch-ext/vllm_quantization/marlin.py", "torch-ext/vllm_quantization/utils")
#: the CUDA sources of the extension: the GEMM's host code, the repack kernel, and every kernel
#: instantiation the host code dispatches to (gptq_marlin.cu refers to all of them)
CU_SOURCES = ("gptq_marlin/gptq_marlin.cu", "gptq_marlin/gptq_marlin_repack.cu",
              *(f"gptq_marlin/kernel_{dt}_{t}.cu" for dt in ("fp16", "bf16")
                for t in ("kfe2m1f", "kfe4m3fn", "ku4", "ku4b8", "ku8b128")))
BINDING = Path(__file__).with_name("vllm_marlin_binding.cpp")
#: the torch operator namespace (and extension name) of the build
NAMESPACE = "_fp8lab_vllm_marlin"
#: the Python package vLLM's utilities are loaded as (its relative imports resolve inside it)
PACKAGE = "fp8lab_vllm_quantization"
SRC_ENV = "FP8LAB_VLLM_MARLIN_SRC"
BUILD_ENV = "FP8LAB_VLLM_MARLIN_BUILD"
#: set in the probe's own process: its import must not probe again
PROBING_ENV = "FP8LAB_VLLM_MARLIN_PROBING"
INSTALL = ("python scripts/peers_offline.py --sources --source-peers vllm-marlin --kernels-community-git DIR "
           "&& python -m fp8lab.peers build vllm-marlin")


def src_dir() -> Path:
    env = os.environ.get(SRC_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "src" / "vllm-marlin"


def build_dir() -> Path:
    env = os.environ.get(BUILD_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "vllm-marlin"


def source_stamp(src: Optional[Path] = None) -> dict:
    from .discover import read_json

    return read_json((src or src_dir()) / ".fp8lab-source.json")


def missing_source(src: Optional[Path] = None) -> Optional[str]:
    """Why the source is not usable (one line with what to run), None when it is."""
    src = src or src_dir()
    lost = [p for p in (*CU_SOURCES, "core/scalar_type.hpp", "torch-ext/vllm_quantization/marlin.py")
            if not (src / p).exists()]
    if lost:
        return f"vLLM Marlin's source is not at {src} (no {lost[0]}): run `{INSTALL.split(' && ')[0]}`"
    return None


# ------------------------------------------------------------------------------------------
# gather (CPU machine, scripts/peers_offline.py)
# ------------------------------------------------------------------------------------------
def gather(dest: Path, git_dir: str, commit: Optional[str] = None) -> str:
    """Unpack KC_PATHS of KC_DIR at ``commit`` (default KC_COMMIT) of a local kernels-community
    git directory into ``dest`` (KC_DIR stripped), replacing an earlier unpack; returns the full
    commit. ValueError (one line) when the git directory does not hold that commit."""
    import shutil
    import tarfile
    import tempfile

    commit = commit or KC_COMMIT
    r = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "--verify", "-q", f"{commit}^{{commit}}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError(f"{git_dir} does not hold kernels-community commit {commit[:12]} (fetch it, or pass "
                         "another --kernels-community-git)")
    full = r.stdout.strip()
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        if not (dest / ".fp8lab-source.json").exists():
            raise FileExistsError(f"{dest} holds files fp8lab did not unpack: not replacing them")
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory() as d:
        tar = Path(d) / "src.tar"
        subprocess.run(["git", f"--git-dir={git_dir}", "archive", "-o", str(tar), full,
                        *(f"{KC_DIR}/{p}" for p in KC_PATHS)], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tar) as t:
            members = []
            for m in t.getmembers():
                if m.name.startswith(KC_DIR + "/"):         # the folder itself and the git header are left out
                    m.name = m.name[len(KC_DIR) + 1:]
                    members.append(m)
            t.extractall(dest, members=members, filter="data")
    (dest / ".fp8lab-source.json").write_text(json.dumps(
        {"url": KC_URL, "commit": full, "dir": KC_DIR, "licence": "Apache-2.0 (vLLM)"}, indent=1))
    return full


# ------------------------------------------------------------------------------------------
# build (GPU box)
# ------------------------------------------------------------------------------------------
def _so(out: Optional[Path] = None) -> Optional[Path]:
    return next((out or build_dir()).glob(f"{NAMESPACE}*.so"), None)


def built(out: Optional[Path] = None, src: Optional[Path] = None) -> Optional[Path]:
    """The extension in ``out`` when it was built from ``src`` at its current commit."""
    out, src = out or build_dir(), src or src_dir()
    so = _so(out)
    try:
        d = json.loads((out / "build_info.json").read_text())
    except (OSError, ValueError):
        return None
    same = d.get("source_commit") == source_stamp(src).get("commit") and d.get("source") == str(src)
    return so if so is not None and same and so.name.split(".")[0] == NAMESPACE else None


def stub_flags(nvcc: str = "nvcc") -> list:
    """``-static-global-template-stub=false`` where nvcc has it (12.8+; its default is true from 13.0):
    gptq_marlin.cu launches Marlin<...> kernels that other files instantiate explicitly, and
    with static host stubs those instantiations are not visible to it (the link fails on an
    undefined hidden Marlin<...> symbol, as on the H200 with nvcc 13.0 at e6504f8)."""
    try:
        helptext = subprocess.run([nvcc, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return ["-static-global-template-stub=false"] if "-static-global-template-stub" in helptext else []


def build(verbose: bool = False, out: Optional[Path] = None) -> Path:
    """Compile the extension (torch.utils.cpp_extension.load, ninja) into ``out``; writes
    build_info.json (source commit, nvcc, torch, arch list). Returns the .so."""
    import torch
    from torch.utils import cpp_extension

    src = src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    out = Path(out) if out else build_dir()
    out.mkdir(parents=True, exist_ok=True)
    if torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    nvcc = cpp_extension._join_cuda_home("bin", "nvcc")
    cpp_extension.load(name=NAMESPACE, sources=[str(BINDING), *(str(src / s) for s in CU_SOURCES)],
                       extra_include_paths=[str(src), str(src / "gptq_marlin")], build_directory=str(out),
                       extra_cflags=["-O3"], extra_cuda_cflags=["-O3", "-std=c++17", *stub_flags(nvcc)],
                       is_python_module=False, verbose=verbose)
    so = _so(out)
    if so is None or so.name.split(".")[0] != NAMESPACE:
        raise RuntimeError(f"the build finished without {NAMESPACE}*.so in {out} (build it in a process of its own)")
    from .build import _nvcc_version

    nvcc_v = _nvcc_version(cpp_extension._join_cuda_home("bin", "nvcc"))
    (out / "build_info.json").write_text(json.dumps(dict(
        source_commit=source_stamp(src).get("commit", "?"), source=str(src), url=KC_URL, dir=KC_DIR, nvcc=nvcc_v,
        torch=torch.__version__, arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST", "")), indent=1))
    return so


def build_info(out: Optional[Path] = None) -> dict:
    """The build_info.json of the build in ``out`` (default: this peer's), {} when absent or unreadable."""
    from .discover import read_json

    return read_json((out or build_dir()) / "build_info.json")


def version() -> str:
    d = build_info()
    if not d:
        return "source build"
    return f"kernels-community {KC_DIR} @ {str(d.get('source_commit', '?'))[:7]} (built with {d.get('nvcc', '?')})"


def prebuild_ready() -> tuple[bool, str]:
    """(ok, why not) for the prebuild target: the source is here and torch sees a CUDA GPU."""
    why = missing_source()
    if why:
        return False, why
    try:
        import torch
    except ImportError:
        return False, "no torch"
    return (True, "") if torch.cuda.is_available() else (False, "no CUDA GPU")


def prebuild() -> Path:
    """Build unless this source commit is built already, then probe it in its own process."""
    so = built()
    if so is None:
        so = build()
    ok, line = probe()
    print(f"vLLM Marlin probe: {'ok' if ok else 'failed'}: {line}")
    return so


def probe(timeout: float = 300.0) -> tuple[bool, str]:
    """One small checked multiply per format in a separate process."""
    from . import discover

    return discover.probe_extension(build_dir(), NAMESPACE, "probe-vllm-marlin", PROBING_ENV, timeout)


# ------------------------------------------------------------------------------------------
# import (the adapters)
# ------------------------------------------------------------------------------------------
def _load_ops(so: Path):
    from .discover import load_ops

    return load_ops(so, NAMESPACE, "gptq_marlin_gemm")


def package():
    """vLLM's Marlin utilities from the unpacked source, over the operators built here: a package
    named PACKAGE with ``scalar_type``, ``marlin`` and ``utils.marlin_utils{,_fp8,_test}``
    (PeerUnavailable naming what to run when the source or the build is missing, or the probe
    failed on this GPU)."""
    from . import discover
    from .discover import PeerUnavailable

    if PACKAGE in sys.modules and hasattr(sys.modules[PACKAGE], "marlin_utils_fp8"):
        return sys.modules[PACKAGE]
    src = src_dir()
    why = missing_source(src)
    if why:
        raise PeerUnavailable(why)
    so = _so()
    if so is None:
        raise PeerUnavailable(f"vLLM Marlin is not built (no {NAMESPACE}*.so in {build_dir()}): run "
                              "`python -m fp8lab.peers build vllm-marlin` (or `python -m fp8lab build`)")
    discover._need_torch()
    if not os.environ.get(PROBING_ENV) and discover._gpu_sm() is not None:
        ok, line = probe()
        if not ok:
            raise PeerUnavailable(f"vLLM Marlin's build failed its separate-process probe: {line}")
    try:
        ops = _load_ops(so)
    except Exception as e:  # noqa: BLE001 - an extension that does not load is a reason
        raise PeerUnavailable(f"vLLM Marlin's extension does not load: {str(e).splitlines()[0][:200]}") from e
    return assemble(src, ops)


def assemble(src: Path, ops):
    """The PACKAGE module over ``ops`` (an object with the NAMESPACE operators) from the Python
    files unpacked in ``src``; PeerUnavailable when they do not import."""
    from .discover import PeerUnavailable

    pkg = types.ModuleType(PACKAGE)
    pkg.__path__ = [str(src / "torch-ext" / "vllm_quantization")]
    pkg.__file__ = str(src / "torch-ext" / "vllm_quantization" / "__init__.py")
    ops_mod = types.ModuleType(PACKAGE + "._ops")
    ops_mod.ops = ops
    ops_mod.add_op_namespace_prefix = lambda name: f"{NAMESPACE}::{name}"
    sys.modules[PACKAGE] = pkg
    sys.modules[ops_mod.__name__] = ops_mod
    try:
        st = importlib.import_module(PACKAGE + ".scalar_type")
        mm = importlib.import_module(PACKAGE + ".marlin")
        pkg.ScalarType, pkg.scalar_types = st.ScalarType, st.scalar_types
        pkg.gptq_marlin_gemm, pkg.gptq_marlin_repack = mm.gptq_marlin_gemm, mm.gptq_marlin_repack
        for name in ("marlin_utils", "marlin_utils_test", "marlin_utils_fp8"):
            setattr(pkg, name, importlib.import_module(f"{PACKAGE}.utils.{name}"))
    except Exception as e:  # noqa: BLE001 - utilities that moved in another commit are a reason
        for k in [k for k in sys.modules if k == PACKAGE or k.startswith(PACKAGE + ".")]:
            del sys.modules[k]
        raise PeerUnavailable(f"vLLM Marlin's Python utilities do not import from {src}: "
                              f"{type(e).__name__}: {str(e).splitlines()[0][:160]}") from e
    return pkg


# ------------------------------------------------------------------------------------------
# CPU proof (no GPU, no CUDA torch): the GEMM's host file and one kernel file, compiled as the
# build compiles them, and the Marlin<...> kernels the host file launches found in that file
# ------------------------------------------------------------------------------------------
#: declarations a CPU torch wheel's ATen/cuda headers need from CUDA libraries a CPU toolkit may
#: lack (types only: the check compiles, it never links against them)
_LIB_STUBS = {
    "cusparse.h": "typedef struct cusparseContext* cusparseHandle_t;\n"
                  "typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;\n"
                  "const char* cusparseGetErrorString(cusparseStatus_t);\n",
    "cublas_v2.h": "typedef struct cublasContext* cublasHandle_t;\n"
                   "typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n",
    "cublasLt.h": "typedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusolver_common.h": "typedef enum { CUSOLVER_STATUS_SUCCESS = 0 } cusolverStatus_t;\n",
    "cusolverDn.h": "#include <cusolver_common.h>\ntypedef struct cusolverDnContext* cusolverDnHandle_t;\n",
}
CHECK_KERNEL = "gptq_marlin/kernel_bf16_kfe4m3fn.cu"
#: the FP8 (float8_e4m3fn) ScalarType id, as the mangled Marlin<...> names carry it (``Ll<id>E``)
_FP8_ID = 2814749767172868


def _symbols(obj: Path) -> list:
    """(type letter, mangled name) of an object file's symbols (nm)."""
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    rows = []
    for ln in out.splitlines():
        parts = ln.split()
        if len(parts) >= 2:
            rows.append((parts[-2], parts[-1]))
    return rows


def unresolved_kernels(host_obj: Path, kernel_obj: Path, type_id: int = _FP8_ID,
                       scalar: str = "13__nv_bfloat16") -> tuple[list, int]:
    """(the ``marlin::Marlin<scalar, type_id, ...>`` symbols the host object references that the
    kernel object does not define with external linkage, how many it references). ``scalar``: the
    mangled activation type (a regex; CHECK_KERNEL holds the bf16 ones)."""
    import re

    pat = re.compile(rf"^_ZN6marlin6MarlinI(?:{scalar})L[lx]{type_id}E")
    wanted = {n for t, n in _symbols(host_obj) if t == "U" and pat.search(n)}
    defined = {n for t, n in _symbols(kernel_obj) if t in ("T", "W") and pat.search(n)}
    return sorted(wanted - defined), len(wanted)


def compile_check(src: Optional[Path] = None, torch_include: Optional[str] = None, nvcc: str = "nvcc",
                  arch: str = "sm_90", timeout: float = 1800) -> dict:
    """Compile gptq_marlin.cu and CHECK_KERNEL with the build's nvcc flags (torch's, and
    :func:`stub_flags`) for ``arch`` in parallel, then check that every FP8 Marlin kernel the GEMM's
    host code launches is defined, with external linkage, by the kernel file (the link failure
    the H200 showed at e6504f8). dict(ok, seconds, errors, unresolved, referenced, command)."""
    import shutil
    import sysconfig
    import tempfile
    import time

    from . import build as peer_build

    src = Path(src) if src else src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    exe = shutil.which(nvcc) or nvcc
    incs = [str(src), str(src / "gptq_marlin"), *peer_build._torch_includes(torch_include),
            sysconfig.get_paths()["include"]]
    with tempfile.TemporaryDirectory() as d:
        shim = Path(d) / "shim"
        (shim / peer_build._TORCH_CUDA_MACROS[0]).parent.mkdir(parents=True)
        (shim / peer_build._TORCH_CUDA_MACROS[0]).write_text(peer_build._TORCH_CUDA_MACROS[1])
        for name, text in _LIB_STUBS.items():
            (shim / name).write_text("#pragma once\n" + text)
        flags = [f"-arch={arch}", *peer_build.nvcc_flags(), *stub_flags(exe), "-DTORCH_API_INCLUDE_EXTENSION_H",
                 f"-DTORCH_EXTENSION_NAME={NAMESPACE}", "-D_GLIBCXX_USE_CXX11_ABI=1",
                 *(f"-I{i}" for i in incs), f"-Xcompiler=-idirafter,{shim}"]
        objs = {"host": Path(d) / "gptq_marlin.o", "kernel": Path(d) / "kernel.o"}
        cmds = {"host": [exe, *flags, "-c", str(src / "gptq_marlin" / "gptq_marlin.cu"), "-o", str(objs["host"])],
                "kernel": [exe, *flags, "-c", str(src / CHECK_KERNEL), "-o", str(objs["kernel"])]}
        t0 = time.monotonic()
        procs = {k: subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for k, c in cmds.items()}
        logs = {k: p.communicate(timeout=timeout)[0] for k, p in procs.items()}
        compiled = all(p.returncode == 0 and objs[k].exists() for k, p in procs.items())
        unresolved, referenced = unresolved_kernels(objs["host"], objs["kernel"]) if compiled else ([], 0)
    errors = [ln for log in logs.values() for ln in log.splitlines() if " error" in ln or "fatal" in ln]
    ok = compiled and referenced > 0 and not unresolved
    return dict(ok=ok, seconds=time.monotonic() - t0, errors=errors[:10], unresolved=unresolved,
                referenced=referenced, command=" ".join(cmds["kernel"]))
