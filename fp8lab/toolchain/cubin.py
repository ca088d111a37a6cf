"""One content-hashed cache for ``nvcc -cubin`` (no GPU): every place that compiles device code
to read its SASS, registers or compile errors goes through :func:`compile_cubin`.

The key is a sha256 over the source's bytes, the bytes of every file named in ``key_files`` (the
headers it includes), the arch, the flags and defines, and nvcc's release. A hit returns the
cubin and the log of the compile that made it (``ptxas -v`` output when the flags ask for it),
with ``cached`` True and that compile's own ``compile_s``. A compile error is cached as well (the
same inputs give the same error, and the B9 pad check expects some); a timeout or a killed nvcc is
not. Entries live under ``cache_dir("cubin")`` (``$FP8LAB_CACHE_DIR``), outside the repo: a cubin
and a JSON sidecar per key, each written in a temp folder beside them and renamed into place, so a
killed run leaves no half-written entry (and the next run removes its temp folder).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

__all__ = ["Build", "compile_cubin", "cache_key", "headers_under", "nvcc_release"]

#: runner(cmd) -> (returncode, stdout, stderr); census passes its Children.run (killed on a stop)
Runner = Callable[[list], tuple]


@dataclasses.dataclass(frozen=True)
class Build:
    """One compile's outcome. ``cubin`` is None when nvcc failed (``rc`` != 0, ``log`` says why)."""
    cubin: Optional[Path]
    rc: int
    log: str              # nvcc's stdout + stderr
    compile_s: float      # seconds nvcc took when this entry was made
    cached: bool          # True when this call found the entry
    key: str
    cmd: tuple            # the nvcc command of the entry (the output path is the cache's)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.cubin is not None

    def error(self) -> str:
        """nvcc's first error line without its file path and line number ('' when it built)."""
        if self.ok:
            return ""
        import re

        lines = [ln.strip() for ln in self.log.splitlines() if "error" in ln.lower()]
        if not lines:
            return f"nvcc exit {self.rc}"
        tool = "ptxas" if lines[0].startswith("ptxas") else "nvcc"
        return f"{tool}: " + re.sub(r"^.*?error\s*:?\s*", "", lines[0], flags=re.I)


@functools.lru_cache(maxsize=None)
def nvcc_release() -> str:
    """nvcc's release ('' when there is none), asked once per process."""
    from .tools import tool_version

    return tool_version("nvcc")


def headers_under(folder: Path) -> tuple:
    """Every header below ``folder`` (.h .cuh .hpp .inc), sorted: the key files of a source that
    includes its neighbours."""
    folder = Path(folder)
    return tuple(sorted(p for p in folder.rglob("*") if p.suffix in (".h", ".cuh", ".hpp", ".inc") and p.is_file()))


def cache_key(source: Path, arch: str, *, flags: Sequence[str] = (), defines: Sequence[str] = (),
              include: Sequence[Path] = (), key_files: Iterable[Path] = (), extra: str = "") -> str:
    """24 hex digits over everything that decides the cubin (see the module docstring)."""
    h = hashlib.sha256()
    source = Path(source)
    h.update(source.name.encode() + b"\0" + source.read_bytes())
    for p in sorted({Path(p) for p in key_files} - {source}):
        h.update(b"\0" + p.name.encode() + b"\0" + p.read_bytes())
    h.update(json.dumps([arch, list(map(str, flags)), sorted(map(str, defines)),
                         [str(Path(i).name) for i in include], extra, nvcc_release()]).encode())
    return h.hexdigest()[:24]


def _default_runner(cmd: list, timeout: float) -> tuple:
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def compile_cubin(source: Path, arch: str, *, flags: Sequence[str] = ("-O3", "-std=c++17"),
                  defines: Sequence[str] = (), include: Sequence[Path] = (), key_files: Iterable[Path] = (),
                  extra_key: str = "", runner: Optional[Runner] = None, timeout: float = 900,
                  refresh: bool = False, nvcc=None) -> Build:
    """``nvcc -cubin -arch=<arch> <flags> -D<defines> -I<include> <source>``, through the cache.

    ``key_files``: the files the source includes (their bytes go into the key; a header missing
    from it would let an edit return a stale cubin). ``runner``: how nvcc runs (default
    subprocess with ``timeout``). ``refresh``: compile even when the entry exists, and replace it.
    ``nvcc``: the compiler's path (default: ``find_tool("nvcc")``)."""
    from ..paths import cache_dir
    from . import procs
    from .tools import find_tool

    source = Path(source)
    key_files = tuple(key_files)
    key = cache_key(source, arch, flags=flags, defines=defines, include=include, key_files=key_files,
                    extra=extra_key)
    folder = cache_dir("cubin")
    out = folder / f"{source.stem}_{arch}_{key}.cubin"
    meta = out.with_suffix(".json")
    if not refresh and meta.is_file():
        try:
            m = json.loads(meta.read_text())
        except (OSError, ValueError):
            m = None
        if m is not None and (m["rc"] != 0 or out.is_file()):
            return Build(out if m["rc"] == 0 else None, int(m["rc"]), m["log"], float(m["compile_s"]), True, key,
                         tuple(m["cmd"]))
    with procs.owned_temp_dir("tmp-", base=folder) as tmpdir:   # a killed run's leftovers go next time
        tmp = Path(tmpdir) / out.name
        if nvcc is None:
            nvcc = find_tool("nvcc") if runner is None else (shutil.which("nvcc") or "nvcc")  # a runner may fake it
        cmd = [str(nvcc), "-cubin", f"-arch={arch}", *map(str, flags), *(f"-D{d}" for d in defines),
               *(f"-I{i}" for i in include), str(source), "-o", str(tmp)]
        t0 = time.perf_counter()
        rc, stdout, stderr = runner(cmd) if runner is not None else _default_runner(cmd, timeout)
        compile_s = time.perf_counter() - t0
        log = (stdout or "") + (stderr or "")
        shown = tuple(cmd[:-1]) + (str(out),)
        if rc == 0 and not tmp.is_file():
            rc, log = -1, log + "\nnvcc exited 0 but wrote no cubin"
        if rc < 0:                  # killed (a stop, a signal): nothing is kept
            return Build(None, rc, log, compile_s, False, key, shown)
        if rc == 0:
            os.replace(tmp, out)
        mtmp = Path(tmpdir) / meta.name
        mtmp.write_text(json.dumps(dict(rc=rc, log=log, compile_s=round(compile_s, 3), cmd=list(shown))))
        os.replace(mtmp, meta)
    return Build(out if rc == 0 else None, rc, log, compile_s, False, key, shown)
