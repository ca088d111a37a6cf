"""SGLang's per-token-group FP8 activation quantiser for CUDA (``PerTokenGroupQuantFlatKernel`` in
``sglang/kernels/jit/csrc/gemm/per_token_group_quant.cuh``: what sglang's ``per_token_group_quant``
JIT-compiles and runs on a CUDA GPU), built from sglang's released wheel without sglang: the kernel's
header and the headers it includes (SGL_PATHS, 0.3 MB of ``sglang-<SGLANG_VERSION>`` on PyPI, its
sha256 checked) and the tvm-ffi headers and library its launcher is written against (TVM_PATHS, from
``apache-tvm-ffi`` at the version sglang pins), unpacked into ``build/peers/src/sglang`` by
``scripts/peers_offline.py --sources --source-peers sglang``.

Why this and not sgl-kernel: sgl-kernel (the ``peer_sglang_quant_group`` arm) ships only as a ~535 MB
wheel, with no sdist, and its source is only in sglang's 1.2 GB repository; sglang's own wheel carries
the CUDA sources of its JIT kernels, this quantiser among them.

- :func:`build` compiles ``sglang_quant_kernel.cu`` (fp8lab's C entry: it includes sglang's header
  unmodified, instantiates the launcher as sglang does for bf16 in, e4m3 out, groups of 128, fp32
  scales, no SiLU fusion, and hands it DLTensors and the caller's stream through tvm-ffi's
  environment) with sglang's JIT flags (CUDA_FLAGS: C++20, ``--use_fast_math``, its arch macro)
  into a shared library linked against the carried ``libtvm_ffi.so``; no torch headers.
- :func:`ops` loads it with ctypes; :func:`quantise` calls it on torch tensors, on torch's
  current stream, with programmatic dependent launch where sglang enables it (sm_90 and newer).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Optional

from .. import paths

SGLANG_VERSION = "0.5.23"
WHEEL = f"sglang-{SGLANG_VERSION}-cp312-cp312-manylinux_2_34_x86_64.whl"
WHEEL_URL = ("https://files.pythonhosted.org/packages/ca/5f/fb9c2417fc4c650f62ef98ddee2cc25988456c94e8a6ca8661ef0cb"
             f"e0b09/{WHEEL}")
WHEEL_SHA256 = "8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6"
#: the version sglang 0.5.23 requires (Requires-Dist: apache-tvm-ffi==0.1.11)
TVM_FFI_VERSION = "0.1.11"
TVM_WHEEL = f"apache_tvm_ffi-{TVM_FFI_VERSION}-cp312-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
TVM_WHEEL_URL = ("https://files.pythonhosted.org/packages/36/99/2848df4e8ed5bf51df1d286d1718510584fa61e88adbc9c5b23d"
                 f"71b38f7c/{TVM_WHEEL}")
TVM_WHEEL_SHA256 = "78aa1857b04a2ea718317041ab3f01288b3d496e6036eb1b99ebdc9da0fdaef5"
_JIT = "sglang/kernels/jit"
KERNEL_HEADER = f"{_JIT}/csrc/gemm/per_token_group_quant.cuh"
#: the kernel's header, what it includes of sglang's (nvcc -M), and sglang's licence
SGL_PATHS = (KERNEL_HEADER, *(f"{_JIT}/include/sgl_kernel/{h}" for h in (
    "bits.h", "deepseek_v4/fp8_utils.cuh", "math.cuh", "source_location.h", "tensor.h", "tile.cuh", "type.cuh",
    "utils.cuh", "utils.h", "vec.cuh", "warp.cuh")), f"sglang-{SGLANG_VERSION}.dist-info/licenses/LICENSE")
#: tvm-ffi's headers (with DLPack's), its library and licence (prefixes)
TVM_PATHS = ("tvm_ffi/include/", "tvm_ffi/lib/libtvm_ffi.so", f"apache_tvm_ffi-{TVM_FFI_VERSION}.dist-info/licenses/")
KERNEL = Path(__file__).with_name("sglang_quant_kernel.cu")
LIBRARY = "libfp8lab_sglang_quant.so"
SYMBOL = "fp8lab_sglang_per_token_group_quant"
SRC_ENV = "FP8LAB_SGLANG_SRC"
BUILD_ENV = "FP8LAB_SGLANG_QUANT_BUILD"
PROBING_ENV = "FP8LAB_SGLANG_QUANT_PROBING"
ARCH = "sm_90a"
INSTALL = (f"python scripts/peers_offline.py --sources --source-peers sglang && python -m fp8lab.peers build "
           f"sglang-quant  (sglang {SGLANG_VERSION}'s wheel from PyPI)")
#: sglang's JIT flags for this kernel (its get_default_target_flags and the kernel's --use_fast_math),
#: for sm_90a: SGL_CUDA_ARCH is the macro its loader injects (its headers refuse to compile without it)
CUDA_FLAGS = ("-DSGL_CUDA_ARCH=900", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++20", "-O3",
              "--expt-relaxed-constexpr", "--use_fast_math")


def src_dir() -> Path:
    env = os.environ.get(SRC_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "src" / "sglang"


def build_dir() -> Path:
    env = os.environ.get(BUILD_ENV)
    return Path(env) if env else paths.repo_root() / "build" / "peers" / "sglang-quant"


def source_stamp(src: Optional[Path] = None) -> dict:
    from .discover import read_json

    return read_json((src or src_dir()) / ".fp8lab-source.json")


def missing_source(src: Optional[Path] = None) -> Optional[str]:
    """Why the source is not usable (one line with what to run), None when it is."""
    src = src or src_dir()
    lost = [p for p in (*SGL_PATHS, "tvm_ffi/include/tvm/ffi/extra/c_env_api.h", "tvm_ffi/lib/libtvm_ffi.so")
            if not (src / p).exists()]
    if lost:
        return f"SGLang's quantiser source is not at {src} (no {lost[0]}): run `{INSTALL.split(' && ')[0]}`"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gather(dest: Path, wheel: Path, tvm_wheel: Path) -> str:
    """Unpack SGL_PATHS of sglang's wheel (WHEEL, sha256 WHEEL_SHA256) and TVM_PATHS of tvm-ffi's
    (TVM_WHEEL, TVM_WHEEL_SHA256) into ``dest``, replacing an earlier unpack of this function's;
    stamps ``.fp8lab-source.json``; returns sglang's version. ValueError (one line) for another
    file or one that lacks a path, FileExistsError when ``dest`` holds files this did not unpack."""
    for path, want, name in ((Path(wheel), WHEEL_SHA256, WHEEL), (Path(tvm_wheel), TVM_WHEEL_SHA256, TVM_WHEEL)):
        got = _sha256(path)
        if got != want:
            raise ValueError(f"{path} is not {name} (sha256 {got[:16]}..., want {want[:16]}...)")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        if not (dest / ".fp8lab-source.json").exists():
            raise FileExistsError(f"{dest} holds files this script did not unpack: not replacing them")
        shutil.rmtree(dest)
    picked = []
    with zipfile.ZipFile(wheel) as zs, zipfile.ZipFile(tvm_wheel) as zt:
        names = set(zs.namelist())
        missing = [p for p in SGL_PATHS if p not in names]
        if missing:
            raise ValueError(f"{wheel} lacks {missing[0]}")
        tvm = [n for n in zt.namelist() if not n.endswith("/") and any(n.startswith(p) for p in TVM_PATHS)]
        if not any(n.endswith("c_env_api.h") for n in tvm) or "tvm_ffi/lib/libtvm_ffi.so" not in tvm:
            raise ValueError(f"{tvm_wheel} lacks tvm-ffi's headers or library")
        for z, members in ((zs, SGL_PATHS), (zt, tvm)):
            for name in members:
                if name.startswith("/") or ".." in Path(name).parts:
                    raise ValueError(f"unsafe path {name!r} in a wheel")
                out = dest / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
                picked.append(name)
    (dest / ".fp8lab-source.json").write_text(json.dumps(
        {"package": "sglang", "version": SGLANG_VERSION, "wheel": WHEEL, "url": WHEEL_URL, "sha256": WHEEL_SHA256,
         "tvm_ffi": TVM_FFI_VERSION, "tvm_wheel": TVM_WHEEL, "tvm_url": TVM_WHEEL_URL, "tvm_sha256": TVM_WHEEL_SHA256,
         "files": len(picked)}, indent=1))
    return SGLANG_VERSION


def include_dirs(src: Path) -> list:
    return [str(src / _JIT / "include"), str(src / _JIT / "csrc"), str(src / "tvm_ffi" / "include")]


def _nvcc() -> str:
    try:
        from torch.utils import cpp_extension

        exe = cpp_extension._join_cuda_home("bin", "nvcc")
        if Path(exe).exists():
            return exe
    except Exception:  # noqa: BLE001 - no torch or no CUDA_HOME: PATH's nvcc
        pass
    return shutil.which("nvcc") or "nvcc"


def compile_command(src: Path, out: Path, nvcc: str = "nvcc", shared: bool = True) -> list:
    lib = src / "tvm_ffi" / "lib"
    cmd = [nvcc, *CUDA_FLAGS, "-Xcompiler", "-fPIC", *(f"-I{i}" for i in include_dirs(src))]
    if shared:
        return [*cmd, "-shared", str(KERNEL), "-o", str(out), f"-L{lib}", "-ltvm_ffi", f"-Xlinker=-rpath,{lib}"]
    return [*cmd, "-c", str(KERNEL), "-o", str(out)]


def built(out: Optional[Path] = None, src: Optional[Path] = None) -> Optional[Path]:
    """The library in ``out`` when it was built from the unpack ``src`` as it is now."""
    from .discover import read_json

    out, src = out or build_dir(), src or src_dir()
    so = out / LIBRARY
    d = read_json(out / "build_info.json")
    same = bool(d) and d.get("sha256") == source_stamp(src).get("sha256") and d.get("source") == str(src)
    return so if so.exists() and same else None


def build(verbose: bool = False, out: Optional[Path] = None, timeout: float = 900) -> Path:
    """Compile the library into ``out`` (nvcc, CUDA_FLAGS, -shared); writes build_info.json
    (sglang and tvm-ffi versions, wheel sha256, nvcc). Returns the .so; RuntimeError with the
    compiler's last lines when it fails."""
    src = src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    out = Path(out) if out else build_dir()
    out.mkdir(parents=True, exist_ok=True)
    so = out / LIBRARY
    nvcc = _nvcc()
    cmd = compile_command(src, so, nvcc)
    if verbose:
        print(" ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0 or not so.exists():
        tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"SGLang's quantiser did not build (nvcc exit {r.returncode}): {tail[:600]}")
    from .build import _nvcc_version

    stamp = source_stamp(src)
    (out / "build_info.json").write_text(json.dumps(dict(
        version=stamp.get("version", "?"), sha256=stamp.get("sha256", "?"), tvm_ffi=stamp.get("tvm_ffi", "?"),
        source=str(src), url=WHEEL_URL, nvcc=_nvcc_version(nvcc), arch=ARCH, flags=list(CUDA_FLAGS)), indent=1))
    return so


def build_info() -> dict:
    from .discover import read_json

    return read_json(build_dir() / "build_info.json")


def version() -> str:
    d = build_info()
    if not d:
        return "source build"
    return f"sglang {d.get('version', '?')} wheel (source; tvm-ffi {d.get('tvm_ffi', '?')}; built with {d.get('nvcc', '?')})"


def prebuild_ready() -> tuple[bool, str]:
    """(ok, why not) for the prebuild target: the source, and torch with a Hopper GPU (the build is for sm_90a)."""
    why = missing_source()
    if why:
        return False, why
    from .build import hopper_torch

    return hopper_torch()


def prebuild() -> Path:
    """Build unless this source is built already, then probe it in its own process."""
    so = built() or build()
    ok, line = probe()
    print(f"SGLang quantiser probe: {'ok' if ok else 'failed'}: {line}")
    return so


def probe(timeout: float = 300.0) -> tuple[bool, str]:
    """One small checked quantisation in a separate process."""
    from . import discover

    so = build_dir() / LIBRARY
    if not so.exists():
        return False, f"not built (no {LIBRARY} in {build_dir()})"
    return discover._probe_child(build_dir(), so, ["probe-sglang-quant"], {PROBING_ENV: "1"}, timeout)


_LIB: dict = {}


def ops():
    """The library's entry (ctypes), PeerUnavailable naming what to run when the source or the
    build is missing, the GPU is not sm_90, or the probe failed."""
    from . import discover
    from .discover import PeerUnavailable

    why = missing_source()
    if why:
        raise PeerUnavailable(why)
    so = build_dir() / LIBRARY
    if not so.exists():
        raise PeerUnavailable(f"SGLang's quantiser is not built (no {LIBRARY} in {build_dir()}): "
                              "run `python -m fp8lab.peers build sglang-quant` (or `python -m fp8lab build`)")
    discover._need_torch()
    sm = discover._gpu_sm()
    if sm is not None and sm != 90:
        raise PeerUnavailable(f"SGLang's quantiser is built for sm_90a here; this GPU is sm_{sm}")
    if not os.environ.get(PROBING_ENV) and sm is not None:
        ok, line = probe()
        if not ok:
            raise PeerUnavailable(f"SGLang's quantiser failed its separate-process probe: {line}")
    if str(so) not in _LIB:
        try:
            lib = ctypes.CDLL(str(so))
            fn = getattr(lib, SYMBOL)
        except (OSError, AttributeError) as e:
            raise PeerUnavailable(f"SGLang's quantiser library does not load: {str(e).splitlines()[0][:200]}") from e
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                       ctypes.c_int64]
        _LIB[str(so)] = fn
    return _LIB[str(so)]


def quantise(fn, x, q, s, pdl: bool = True) -> None:
    """x (M, K) bf16 contiguous CUDA tensor -> q (M, K) e4m3 and s (M, K/128) fp32 (row-major or
    column-major strides), on torch's current stream. RuntimeError with the launcher's message."""
    import torch

    M, K = x.shape
    err = ctypes.create_string_buffer(512)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    rc = fn(x.data_ptr(), q.data_ptr(), s.data_ptr(), M, K, s.stride(0), s.stride(1), x.device.index, stream,
            int(pdl), err, len(err))
    if rc != 0:
        raise RuntimeError(f"SGLang's per_token_group_quant: {err.value.decode(errors='replace')}")


# ------------------------------------------------------------------------------------------
# CPU proof (no GPU): the kernel file compiled as the build compiles it
# ------------------------------------------------------------------------------------------
def compile_check(src: Optional[Path] = None, nvcc: str = "nvcc", timeout: float = 900) -> dict:
    """Compile fp8lab's entry with sglang's header (CUDA_FLAGS, an object file), list the
    quantiser's kernels in the SASS (cuobjdump) and check the object defines SYMBOL:
    dict(ok, seconds, errors, kernels, command)."""
    import tempfile
    import time

    src = Path(src) if src else src_dir()
    why = missing_source(src)
    if why:
        raise FileNotFoundError(why)
    exe = shutil.which(nvcc) or nvcc
    with tempfile.TemporaryDirectory() as d:
        obj = Path(d) / "sglang_quant.o"
        cmd = compile_command(src, obj, exe, shared=False)
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        kernels, defined = [], False
        if r.returncode == 0 and obj.exists():
            from ..toolchain import tools

            sass = tools.run_tool("cuobjdump", ["-sass", str(obj)], timeout=600).stdout
            kernels = sorted({ln.split(":", 1)[1].strip() for ln in sass.splitlines()
                              if ln.strip().startswith("Function :") and "per_token_group_quant" in ln})
            nm = shutil.which("nm")
            syms = subprocess.run([nm, "--defined-only", str(obj)], capture_output=True, text=True,
                                  timeout=120).stdout if nm else ""
            defined = not nm or any(ln.split()[-1] == SYMBOL for ln in syms.splitlines() if ln.strip())
    log = r.stdout + r.stderr
    errors = [ln for ln in log.splitlines() if " error" in ln or "fatal" in ln]
    return dict(ok=r.returncode == 0 and bool(kernels) and defined, seconds=time.monotonic() - t0,
                errors=errors[:10], kernels=kernels, command=" ".join(cmd))
