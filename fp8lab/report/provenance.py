"""Provenance: what machine, which GPU and clocks, which versions, which commit, and a
hash of the sources that ran.

Every table fp8lab writes carries this in its ``.meta.json`` sidecar. Nothing here
changes the machine; NVML is only read.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata as _md
import os
import platform
import re
import socket
import subprocess
import sys

from .. import __version__
from ..paths import repo_root


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def device_slug(name: str) -> str:
    """Short key for a GPU name, used as the data/ and figures/ folder.

    'NVIDIA H200' -> 'h200', 'NVIDIA GeForce RTX 4090' -> 'rtx-4090',
    'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA L40S' -> 'l40s'.
    Memory size and memory type say nothing about the chip, so they are dropped.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"device name must be a non-empty string, got {name!r}")
    words = re.split(r"[\s_/-]+", name.strip().lower())
    drop = {"nvidia", "geforce", "tesla", "graphics", "device", ""}
    keep = [w for w in words
            if w not in drop and not re.fullmatch(r"\d+gb|hbm\d*e?|gddr\d*x?|nvl", w)]
    slug = "-".join(re.sub(r"[^a-z0-9.]+", "", w) for w in keep).strip("-")
    if not slug:
        raise ValueError(f"cannot derive a device key from {name!r}")
    return slug


# ---------------------------------------------------------------- git

def git_info(root=None) -> dict:
    """Commit, dirty flag (tracked files changed) and the untracked files of the checkout.
    data/ and figures/ are outputs, so changes there do not make the code dirty."""
    root = str(root or repo_root())
    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                              timeout=30)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return _git_from_env()
        scope = ["--", ".", ":(exclude)data", ":(exclude)figures", ":(exclude)runs"]
        status = git("status", "--porcelain", "--untracked-files=all", *scope).stdout.splitlines()
        changed = [s[3:] for s in status if not s.startswith("??")]
        untracked = [s[3:] for s in status if s.startswith("??")]
        return {"commit": head.stdout.strip(), "dirty": bool(changed),
                "changed": changed[:50], "untracked": untracked[:50]}
    except (OSError, subprocess.TimeoutExpired):
        return _git_from_env()


def _git_from_env() -> dict:
    """A copy of the repo without .git (rsync'd to a GPU box, say): the commit it was
    copied from can be given as FP8LAB_GIT_COMMIT (and FP8LAB_GIT_DIRTY=1|0)."""
    commit = os.environ.get("FP8LAB_GIT_COMMIT") or None
    dirty = os.environ.get("FP8LAB_GIT_DIRTY")
    return {"commit": commit, "dirty": None if dirty is None else dirty == "1",
            "untracked": None, "source": "FP8LAB_GIT_COMMIT" if commit else "no git checkout"}


# ---------------------------------------------------------------- source hash

# A commit id says which code ran only when the checkout had one; a copy without .git (how
# GPU boxes get the code) can only say what FP8LAB_GIT_COMMIT claims. The hash of the
# sources themselves is recorded beside it, so the claim can be checked against the commit's
# tree in git (`python -m fp8lab verify`). The same rule picks the files whether they are
# listed by git, found by walking a copy, or read from a commit, so the three agree on a
# clean checkout.
SOURCE_DIRS = ("fp8lab", "notebooks")
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".hpp", ".c", ".cpp", ".ipynb",
                   ".yaml", ".yml", ".json", ".toml", ".txt")
_SKIP_DIRS = ("__pycache__", ".ipynb_checkpoints", "build", "dist")
SOURCE_RULE = (
    "v1: files under fp8lab/ and notebooks/ ending " + " ".join(SOURCE_SUFFIXES) +
    "; no path part starting with '.', named " + " ".join(_SKIP_DIRS) +
    " or ending .egg-info; sha256 of the lines '<sha256 of the file>  <path>\\n' "
    "sorted by path (sha256sum's format); a symlink counts as its target path")


def _skipped(part: str) -> bool:
    return not part or part.startswith(".") or part in _SKIP_DIRS or part.endswith(".egg-info")


def is_source(relpath: str) -> bool:
    """Whether a path (relative to the checkout, '/'-separated) is one of the hashed sources."""
    parts = relpath.split("/")
    if len(parts) < 2 or parts[0] not in SOURCE_DIRS or any(map(_skipped, parts)):
        return False
    return parts[-1].endswith(SOURCE_SUFFIXES)


def _combine(digests: dict[str, str]) -> str:
    lines = "".join(f"{digests[p]}  {p}\n" for p in sorted(digests))
    return hashlib.sha256(lines.encode()).hexdigest()


def _file_digest(path: str) -> str | None:
    """sha256 of a file's bytes, of a symlink's target path (what git stores for a link), or
    None for something that is not a file (a submodule's folder, a file deleted since it was
    listed)."""
    if os.path.islink(path):
        return hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
    if not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _digests_of(root: str, relpaths) -> dict[str, str]:
    out = {}
    for rel in relpaths:
        d = _file_digest(os.path.join(root, rel))
        if d is not None:
            out[rel] = d
    return out


def _result(digests: dict[str, str], method: str) -> dict:
    return {"sha256": _combine(digests), "files": len(digests), "rule": SOURCE_RULE,
            "method": method}


def walk_sources(root) -> dict:
    """Source hash of a folder found by walking it (a copy without .git)."""
    root = str(root)
    rels = []
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            # a symlinked folder is not walked into (git stores it as a link), it is a link
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            dirnames[:] = [d for d in dirnames if d not in links and not _skipped(d)]
            rels += [f"{rel_dir}/{n}" for n in filenames + links if is_source(f"{rel_dir}/{n}")]
    return _result(_digests_of(root, rels), "walk")


def _git(root: str, *args, input=None, text=True):
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=text,
                          input=input, timeout=60)


def git_worktree_sources(root) -> dict | None:
    """Source hash of a git checkout's working files: tracked files and untracked ones git
    does not ignore (an untracked module beside the tracked ones is code that can run), as
    they are on disk now, so a dirty tree hashes differently. None when not a checkout."""
    root = str(root)
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        # a copy without .git unpacked inside some other checkout is not that checkout
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(root):
            return None
        ls = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                  "--", *SOURCE_DIRS)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if ls.returncode != 0:
        return None
    rels = sorted({p for p in ls.stdout.split("\0") if p and is_source(p)})
    return _result(_digests_of(root, rels), "git working tree")


def commit_sources(commit: str, root=None) -> dict:
    """Source hash of a commit's tree, read from git without checking it out. Raises
    ValueError when git does not have the commit."""
    root = str(root or repo_root())
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z_./~^-]*", commit):
        raise ValueError(f"not a commit name: {commit!r}")
    ls = _git(root, "ls-tree", "-r", "-z", f"{commit}^{{tree}}", "--",
              *SOURCE_DIRS, text=False)
    if ls.returncode != 0:
        raise ValueError(f"git has no commit {commit!r} in {root}: "
                         f"{ls.stderr.decode(errors='replace').strip()}")
    objs = {}
    for entry in ls.stdout.split(b"\0"):
        if not entry:
            continue
        head, path = entry.split(b"\t", 1)
        _mode, kind, oid = head.split()
        rel = path.decode()
        if kind == b"blob" and is_source(rel):   # a submodule is a 'commit' entry: no bytes here
            objs[rel] = oid.decode()
    batch = _git(root, "cat-file", "--batch", input="".join(o + "\n" for o in objs.values())
                 .encode(), text=False)
    if batch.returncode != 0:
        raise ValueError(f"git cat-file failed in {root}: "
                         f"{batch.stderr.decode(errors='replace').strip()}")
    out, pos, contents = batch.stdout, 0, {}
    for oid in objs.values():
        nl = out.index(b"\n", pos)
        header = out[pos:nl].split()
        if len(header) != 3 or header[0].decode() != oid:
            raise ValueError(f"git cat-file answered {out[pos:nl]!r} for blob {oid}")
        size = int(header[2])
        contents[oid] = hashlib.sha256(out[nl + 1:nl + 1 + size]).hexdigest()
        pos = nl + 1 + size + 1          # the content is followed by a newline
    return _result({rel: contents[oid] for rel, oid in objs.items()}, "git commit")


def compute_source_hash(root=None) -> dict:
    """Source hash of the checkout as it is on disk: from git's file list when it is a
    checkout, else by walking it. Never raises: a failure is recorded as the reason."""
    root = str(root or repo_root())
    try:
        return git_worktree_sources(root) or walk_sources(root)
    except OSError as exc:
        return {"sha256": None, "files": 0, "rule": SOURCE_RULE,
                "error": f"cannot hash the sources: {exc}"}


@functools.lru_cache(maxsize=None)
def _source_hash_cached(root: str) -> dict:
    return compute_source_hash(root)


def source_hash(root=None) -> dict:
    """The checkout's source hash, computed once per process (a notebook's tables all come
    from the code it imported when it started)."""
    return dict(_source_hash_cached(str(root or repo_root())))


# ---------------------------------------------------------------- versions

def _dist_version(name: str):
    try:
        return _md.version(name)
    except _md.PackageNotFoundError:
        return None


def versions(include_torch: bool | None = None) -> dict:
    """Versions of the software a result depends on. torch is imported only when asked
    (or when it is already imported): importing it costs seconds."""
    from ..toolchain.tools import tool_version
    v = {
        "fp8lab": __version__,
        "python": platform.python_version(),
        "numpy": _dist_version("numpy"),
        "pandas": _dist_version("pandas"),
        "matplotlib": _dist_version("matplotlib"),
        "ml_dtypes": _dist_version("ml_dtypes"),
        "triton": _dist_version("triton"),
        "nvcc": tool_version("nvcc") or None,
    }
    if include_torch is None:
        include_torch = "torch" in sys.modules
    if include_torch:
        try:
            import torch
            v["torch"] = torch.__version__
            v["cuda"] = torch.version.cuda
            if torch.cuda.is_available():
                v["cublas"] = _cublas_version(torch)
        except ImportError:
            v["torch"] = None
    else:
        v["torch"] = _dist_version("torch")
    return v


def _cublas_version(torch):
    try:
        ver = torch._C._cuda_getCompiledVersion()  # the CUDA runtime torch was built with
        return f"cuda-runtime-{ver // 1000}.{(ver % 1000) // 10}"
    except Exception:  # noqa: BLE001 - best effort; absent on some builds
        return None


# ---------------------------------------------------------------- NVML

@functools.lru_cache(maxsize=1)
def _nvml():
    """The pynvml module, initialised, or None when there is no NVIDIA driver."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no driver, no library: simply no GPU
        return None


def gpu_count() -> int:
    nv = _nvml()
    if nv is None:
        return 0
    try:
        return int(nv.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return 0


def gpu_present() -> bool:
    """A usable NVIDIA GPU: NVML sees one and CUDA_VISIBLE_DEVICES does not hide them all."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None and vis.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    return gpu_count() > 0


def _str(x):
    return x.decode() if isinstance(x, bytes) else x


def nvml_handle(torch_index: int = 0):
    """NVML handle of the GPU that torch calls ``cuda:torch_index`` (they number GPUs
    differently under CUDA_VISIBLE_DEVICES, so match by UUID)."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        import torch
        uuid = str(torch.cuda.get_device_properties(torch_index).uuid)
        return nv.nvmlDeviceGetHandleByUUID("GPU-" + uuid if not uuid.startswith("GPU-") else uuid)
    except Exception:  # noqa: BLE001 - fall back to the first visible index
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        idx = torch_index
        parts = [p.strip() for p in vis.split(",") if p.strip()]
        if parts and parts[torch_index].isdigit():
            idx = int(parts[torch_index])
        try:
            return nv.nvmlDeviceGetHandleByIndex(idx)
        except Exception:  # noqa: BLE001
            return None


def nvml_gpu_names() -> list[str]:
    """Names of the GPUs NVML sees (no torch needed); [] without a driver."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    for i in range(gpu_count()):
        try:
            out.append(_str(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))))
        except Exception:  # noqa: BLE001
            out.append(None)
    return out


def nvml_snapshot(handle) -> dict:
    """Clocks and power as NVML reads them now (MHz, W). Read only."""
    nv = _nvml()
    if nv is None or handle is None:
        return {}
    out = {}
    def read(key, fn, *args, scale=1.0):
        try:
            out[key] = fn(handle, *args) * scale if scale != 1.0 else fn(handle, *args)
        except Exception:  # noqa: BLE001 - not every field exists on every GPU
            out[key] = None
    read("sm_clock_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
    read("mem_clock_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
    read("sm_clock_max_mhz", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM)
    read("mem_clock_max_mhz", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_MEM)
    read("app_sm_clock_mhz", nv.nvmlDeviceGetApplicationsClock, nv.NVML_CLOCK_SM)
    read("power_w", nv.nvmlDeviceGetPowerUsage, scale=1e-3)
    read("power_limit_w", nv.nvmlDeviceGetEnforcedPowerLimit, scale=1e-3)
    read("temperature_c", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU)
    return out


def gpu_info(torch_index: int = 0) -> dict:
    """Name, key, compute capability, SMs, memory, L2, driver and a clock snapshot of the
    current CUDA device (needs torch with CUDA)."""
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch")
    p = torch.cuda.get_device_properties(torch_index)
    info = {
        "device_name": p.name,
        "device": device_slug(p.name),
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "memory_gib": round(p.total_memory / 2**30, 1),
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    nv = _nvml()
    handle = nvml_handle(torch_index)
    if nv is not None:
        try:
            info["driver"] = _str(nv.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            info["driver"] = None
    info["clocks_at_start"] = nvml_snapshot(handle)
    return info


def host_info() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def collect(*, notebook: str, params: dict, device: str, mode: str, gpu: dict | None) -> dict:
    """The whole provenance record for one run of one notebook."""
    meta = {
        "notebook": notebook,
        "parameters": params,
        "mode": mode,
        "device": device,
        "time": utc_now(),
        "run_id": os.environ.get("FP8LAB_RUN_ID"),
        "git": git_info(),
        "sources": source_hash(),
        "versions": versions(include_torch=gpu is not None),
        "host": host_info(),
    }
    if gpu is not None:
        meta["gpu"] = gpu
        meta["device_name"] = gpu["device_name"]
    else:
        meta["device_name"] = "CPU (" + (platform.processor() or platform.machine()) + ")"
    return meta
