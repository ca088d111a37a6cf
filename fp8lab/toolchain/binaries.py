"""SASS census of other people's binaries, filter first: ``python -m fp8lab census``.

:func:`fp8lab.toolchain.sass.sass_census` disassembles a whole binary and filters kernels
afterwards; for an inference-engine wheel that is half an hour spent mostly on libraries
with no kernel of interest. This module reads the function names first and disassembles
only what matches:

1. a wheel (zip) is unpacked, shared objects / cubins / fatbins only, into one temp folder
   (``procs.owned_temp_dir``: removed on exit, error and Ctrl-C; one left by a SIGKILL is
   swept by the next run);
2. each host ELF / fatbin is listed (``cuobjdump -lelf``: names such as
   ``x.1.sm_89.cubin``, so the architecture is known before anything is extracted), and
   only the cubins of the requested architectures are extracted (``cuobjdump -arch A
   -xelf all``); a bare cubin is used as it is;
3. each cubin's function symbols are read from its ELF symbol table here (no tool), and
   only a cubin with a function matching ``--filter`` is disassembled, restricted to those
   functions (``cuobjdump -sass -fun NAME ...`` on the extracted cubin);
4. steps 2-3 run in a thread pool as wide as the machine's cores (the work is in the child
   processes); every child is killed if the census stops (Ctrl-C, SIGTERM, an error).

The opcode counting is :func:`fp8lab.toolchain.sass.parse_sass`'s, the MMA operand reading
:func:`fp8lab.toolchain.sass.mma_operands`'s. The output is plain text and ``csv`` (no pandas table).
"""

from __future__ import annotations

import csv
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import sass
from .procs import owned_temp_dir
from .tools import ToolNotFound, find_tool, have_tool

TEMP_PREFIX = "fp8lab-census-"
EM_CUDA = 190

KERNEL_COLUMNS = ["library", "arch", "kernel", "demangled", "activation", "weight",
                  "mma_family", "mma_instructions", "instructions", "conversions"]
SUMMARY_COLUMNS = ["library", "arch", "activation", "weight", "mma_family", "kernels",
                   "conversions"]


class CensusError(ValueError):
    """Bad input (missing file, not a CUDA binary, bad regex or arch): one line for the user."""


# --------------------------------------------------------------------------------------
# Inputs

def resolve_inputs(paths: Iterable, cwd=None) -> list[Path]:
    """Absolute paths of the binaries, resolved from ``cwd`` (default: where the command
    was typed); every problem is found before any work, as one CensusError line."""
    base = Path(cwd) if cwd is not None else Path.cwd()
    out = []
    for typed in paths:
        p = Path(os.path.expanduser(str(typed)))
        p = p if p.is_absolute() else base / p
        if not p.exists():
            raise CensusError(f"{typed}: no such file (looked for {p})")
        if not p.is_file():
            raise CensusError(f"{typed}: not a file (a .whl, .so, .cubin or .fatbin is expected)")
        if not os.access(p, os.R_OK):
            raise CensusError(f"{typed}: not readable")
        try:
            kind = sass._kind(p)
        except ValueError as exc:
            raise CensusError(str(exc)) from None
        if kind == "zip":
            try:
                with zipfile.ZipFile(p) as zf:
                    zf.infolist()
            except zipfile.BadZipFile as exc:
                raise CensusError(f"{typed}: starts like a zip but is not a valid wheel ({exc})") from None
        out.append(p)
    return out


# --------------------------------------------------------------------------------------
# Reading a cubin's ELF header and symbol table (no tool needed)

def _read_elf(path: Path):
    """(e_machine, e_flags, ABI version, [(symbol index, name, STT type, section name)])
    of a little-endian ELF64; ValueError if it is not one."""
    return _read_elf_sections(path)[:4]


def _read_elf_sections(path: Path):
    """:func:`_read_elf` plus {name: bytes} of the sections that tell a cubin's arch suffix."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a little-endian ELF64 file")
    e_machine = struct.unpack_from("<H", data, 18)[0]
    e_shoff = struct.unpack_from("<Q", data, 40)[0]
    e_flags = struct.unpack_from("<I", data, 48)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, stype, _flags, _addr, offset, size, link, _info, _align, entsize = \
            struct.unpack_from("<IIQQQQIIQQ", data, off)
        sections.append((name, stype, offset, size, link, entsize))

    def cstr(table_off: int, idx: int) -> str:
        end = data.index(b"\0", table_off + idx)
        return data[table_off + idx:end].decode("utf-8", "replace")

    shstr = sections[e_shstrndx][2] if sections else 0
    names = [cstr(shstr, s[0]) for s in sections]
    arch_sections = {n: data[s[2]:s[2] + s[3]] for n, s in zip(names, sections)
                     if n in _ARCH_SECTIONS}
    symbols = []
    for s in sections:
        if s[1] != 2:  # SHT_SYMTAB
            continue
        _n, _t, offset, size, link, entsize = s
        strtab = sections[link][2]
        for k in range(size // (entsize or 24)):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, offset + k * 24)
            if st_name == 0:
                continue
            sec = names[st_shndx] if 0 < st_shndx < len(names) else ""
            symbols.append((k, cstr(strtab, st_name), st_info & 0xF, sec))
    return e_machine, e_flags, data[8], symbols, arch_sections


_ARCH_SECTIONS = (".note.nv.tkinfo", ".nv.compat")
_TK_ARCH = re.compile(rb"(?:-arch[= ]|--gpu-name[= ]|-gpu-name[= ])\s*sm_(\d+)([af]?)\b")


def cubin_arch(e_flags: int, abi_version: int, sections: dict | None = None) -> str:
    """The SM of a cubin: the number from its ELF flags (bits 8-15 in the current CUDA ELF
    ABI, v8+, CUDA 12.8 on; bits 0-7 before), the 'a' / 'f' suffix from its sections, as
    cuobjdump reads it (sm_90 and sm_90a cubins have the same e_flags):

    - ``.note.nv.tkinfo`` holds the compiler's options (``-arch sm_90a``, ``--gpu-name sm_90a``);
    - without that note, ``.nv.compat`` attribute 0x09 = 1 marks an arch-specific ('a') cubin.
    """
    sm = (e_flags >> 8) & 0xFF if abi_version >= 8 else e_flags & 0xFF
    sections = sections or {}
    tk = _TK_ARCH.search(sections.get(".note.nv.tkinfo", b""))
    if tk and int(tk.group(1)) == sm:
        return f"sm_{sm}{tk.group(2).decode()}"
    compat = sections.get(".nv.compat", b"")
    for i in range(0, len(compat) - 3, 4):  # (format 0x02 = 16-bit value, attribute, value)
        if compat[i] == 0x02 and compat[i + 1] == 0x09:
            return f"sm_{sm}a" if int.from_bytes(compat[i + 2:i + 4], "little") == 1 else f"sm_{sm}"
        if compat[i] != 0x02:  # other formats carry a size: stop rather than misread
            break
    return f"sm_{sm}"


def bare_cubin_arch(path) -> str:
    """The SM of a bare cubin file, suffix included (``sm_90a``)."""
    _m, flags, abi, _s, sections = _read_elf_sections(Path(path))
    return cubin_arch(flags, abi, sections)


def cubin_functions(path) -> list[tuple[int, str]]:
    """(symbol index, name) of every function defined in a cubin's own ``.text.*``
    section, i.e. every kernel and non-inlined device function that has SASS."""
    _m, _f, _abi, symbols = _read_elf(Path(path))
    return [(k, name) for k, name, stt, sec in symbols
            if stt == 2 and sec == f".text.{name}"]  # STT_FUNC


def is_cubin(path) -> bool:
    with open(path, "rb") as f:
        head = f.read(20)
    return head[:4] == b"\x7fELF" and len(head) == 20 and struct.unpack_from("<H", head, 18)[0] == EM_CUDA


# --------------------------------------------------------------------------------------
# Child processes, all killed when the census stops

class Children:
    """The tool processes a census has running; ``stop()`` kills them and refuses new ones."""

    def __init__(self, tmpdir=None):
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen] = set()
        self.stopped = False
        # The tools' own scratch files (cuobjdump -sass writes /tmp/tmpxft_* per function
        # and leaves them when killed) go into the census's temp folder, removed at the end.
        self.env = dict(os.environ, TMPDIR=str(tmpdir)) if tmpdir is not None else None

    def popen(self, cmd: list[str], **kw) -> subprocess.Popen:
        with self._lock:
            if self.stopped:
                raise KeyboardInterrupt("census stopped")
            if self.env is not None:
                kw.setdefault("env", self.env)
            p = subprocess.Popen(cmd, **kw)
            self._live.add(p)
            return p

    def done(self, p: subprocess.Popen) -> None:
        with self._lock:
            self._live.discard(p)

    def run(self, cmd: list[str], cwd=None) -> tuple[int, str, str]:
        p = self.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", cwd=cwd)
        try:
            out, err = p.communicate()
        finally:
            self.done(p)
        return p.returncode, out, err

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            live = list(self._live)
        for p in live:
            try:
                p.kill()
            except OSError:
                pass
        for p in live:
            try:
                p.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass


@contextmanager
def sigterm_as_interrupt():
    """While the block runs, SIGTERM raises KeyboardInterrupt in the main thread, so the
    census's own clean-up runs (tool processes killed, temp folder removed): the runner
    stops a notebook by SIGTERM to the kernel's process group, and Python's default action
    for SIGTERM ends the process at once, leaving /tmp/fp8lab-census-* behind. On the way
    out a SIGTERM that arrived is sent again to the handler that was there before (by
    default: the process ends, as it was asked to). Outside the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def on_term(signum, _frame):
        got.append(signum)
        if len(got) == 1:
            raise KeyboardInterrupt("SIGTERM")
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if got:
            os.kill(os.getpid(), signal.SIGTERM)


# --------------------------------------------------------------------------------------
# The census

_LELF = re.compile(r"ELF file\s+\d+:\s+(\S+\.(sm_\w+)\.cubin)")


@dataclass
class Cubin:
    library: str
    arch: str
    path: Path
    functions: list  # (symbol index, name) that match the filter


@dataclass
class Census:
    kernels: list = field(default_factory=list)   # dicts with KERNEL_COLUMNS
    notes: list = field(default_factory=list)     # (library, why nothing was counted)
    disassembled: list = field(default_factory=list)  # (library, arch, cubin, n functions)
    duplicates: int = 0

    def summary(self) -> list[dict]:
        return summarise(self.kernels)


def _wanted(arch: str, archs) -> bool:
    return archs is None or any(sass._arch_matches(arch, a) for a in archs)


def list_elf_cubins(path: Path, children: Children) -> list[tuple[str, str]] | None:
    """(member name, arch) of the cubins embedded in a host ELF / fatbin, from
    ``cuobjdump -lelf``; None if it holds no device code."""
    rc, out, err = children.run([str(find_tool("cuobjdump")), "-lelf", str(path)])
    if rc != 0:
        if "does not contain device code" in err or "does not contain device code" in out:
            return None
        raise RuntimeError(f"cuobjdump -lelf failed (exit {rc}) on {path}: {err.strip()}")
    return [(m.group(1), m.group(2)) for m in map(_LELF.search, out.splitlines()) if m]


def extract_cubins(path: Path, library: str, archs, rx, workdir: Path,
                   children: Children, remove_after: bool = False) -> tuple[list[Cubin], str | None]:
    """The matching cubins of one binary (extracting only the requested architectures),
    or ([], why nothing is there). ``remove_after``: delete ``path`` (a wheel member in
    the temp folder) once its cubins are out, so a large wheel never sits unpacked whole."""
    if is_cubin(path):
        try:
            found = [(path, bare_cubin_arch(path))]
        except (ValueError, struct.error, IndexError) as exc:
            return [], f"cubin not readable ({exc})"
    else:
        try:
            return _extract_from_host(path, library, archs, rx, workdir, children)
        finally:
            if remove_after:
                path.unlink(missing_ok=True)
    return _matching(found, path, library, archs, rx)


def _extract_from_host(path, library, archs, rx, workdir, children):
    """Cubins of the requested architectures out of a host ELF / fatbin."""
    listed = list_elf_cubins(path, children)
    if listed is None:
        return [], "no CUDA device code"
    arches = sorted({a for _n, a in listed if _wanted(a, archs)})
    if not arches:
        have = ", ".join(sorted({a for _n, a in listed})) or "none"
        return [], f"no cubin for the requested architectures (has {have})"
    found = []
    for a in arches:
        d = workdir / a
        d.mkdir(parents=True, exist_ok=True)
        rc, _out, err = children.run([str(find_tool("cuobjdump")), "-arch", a, "-xelf", "all",
                                      str(path)], cwd=d)
        if rc != 0:
            raise RuntimeError(f"cuobjdump -xelf failed (exit {rc}) on {path}: {err.strip()}")
        # cuobjdump -arch sm_90 also hands out sm_90a cubins: keep each one under its name
        found += [(c, m.group(1)) for c in sorted(d.glob("*.cubin"))
                  if (m := re.search(r"\.(sm_\w+)\.cubin$", c.name)) and m.group(1) == a]
    return _matching(found, path, library, archs, rx)


def _matching(found, path, library, archs, rx):
    if not found:
        return [], "no cubin for the requested architectures"
    cubins, wanted, unreadable = [], 0, []
    for c, a in found:
        if not _wanted(a, archs):
            continue
        wanted += 1
        try:
            funcs = [(k, n) for k, n in cubin_functions(c) if rx is None or rx.search(n)]
        except (ValueError, struct.error, IndexError) as exc:  # not an ELF64 we can read
            unreadable.append(f"{c.name}: {exc}")
            funcs = []
        if funcs:
            cubins.append(Cubin(library, a, c, funcs))
        elif c != path:
            c.unlink(missing_ok=True)  # nothing to disassemble: its disk space back now
    if cubins:
        return cubins, None
    if unreadable:
        return [], "cubin not readable (" + "; ".join(unreadable) + ")"
    if not wanted:
        return [], f"no cubin for the requested architectures (has {found[0][1]})"
    return [], "no function matches the filter" if rx is not None else "no functions"


_ARGS_BUDGET = 100_000  # bytes of function names per command (Linux: 2 MB of arguments in all)


def _fun_chunks(cub: Cubin, everything: bool) -> list[list[tuple[int, str]]]:
    """The functions to disassemble, split so no command line grows too long; [[]] (one
    command, no restriction) when every function of the cubin is wanted."""
    if everything:
        return [[]]
    chunks, cur, size = [], [], 0
    for k, n in cub.functions:
        if cur and size + len(n) > _ARGS_BUDGET:
            chunks.append(cur)
            cur, size = [], 0
        cur.append((k, n))
        size += len(n) + 8
    return chunks + [cur] if cur else chunks


def disassemble_cubin(cub: Cubin, rx, children: Children, tool: str) -> list[tuple[str, Counter]]:
    """Opcode counts per function of one cubin, disassembling only ``cub.functions``.

    nvdisasm (``-c -fun <symbol indices>``) is preferred: one process per cubin, where
    ``cuobjdump -sass -fun`` starts an nvdisasm per function (slower, and its scratch files
    outlive a kill). Its closing self-branch is spelled with a label, rewritten for
    :func:`sass.parse_sass` by :func:`nvdisasm_self_branches`."""
    everything = rx is None
    per: dict[str, Counter] = {}
    for chunk in _fun_chunks(cub, everything):
        if tool == "nvdisasm":
            cmd = [str(find_tool("nvdisasm")), "-c"]
            if chunk:
                cmd += ["-fun", ",".join(str(k) for k, _ in chunk)]
        else:
            cmd = [str(find_tool("cuobjdump")), "-sass"]
            for _k, n in chunk:
                cmd += ["-fun", n]
        cmd.append(str(cub.path))
        for name, ops in _count(cmd, cub, rx, children, nvdisasm=tool == "nvdisasm"):
            per.setdefault(name, Counter()).update(ops)
    return sorted(per.items())


_LABEL = re.compile(r"^\s*(\.L_x_\d+):\s*$")
_LABEL_BRA = re.compile(r"^(\s*/\*([0-9a-fA-F]+)\*/\s+)BRA\s+`\((\.L_x_\d+)\)\s*;")


def nvdisasm_self_branches(lines):
    """nvdisasm's closing self-branch ``.L_x_1:`` / ``/*0170*/ BRA `(.L_x_1);`` rewritten as
    cuobjdump prints it (``/*0170*/ BRA 0x170;``), so :func:`sass.parse_sass` recognises it
    and does not count the alignment NOPs after it (as it does for cuobjdump's output)."""
    labels: set[str] = set()  # the labels right above the current line
    for line in lines:
        m = _LABEL.match(line)
        if m:
            labels.add(m.group(1))
            yield line
            continue
        b = _LABEL_BRA.match(line)
        if b and b.group(3) in labels:
            line = f"{b.group(1)}BRA 0x{b.group(2)};\n"
        if line.strip():
            labels = set()
        yield line


def _count(cmd, cub: Cubin, rx, children: Children, nvdisasm: bool = False):
    with tempfile.TemporaryFile(mode="w+") as errf:
        p = children.popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True, errors="replace",
                           bufsize=1 << 20)
        try:
            lines = nvdisasm_self_branches(p.stdout) if nvdisasm else p.stdout
            df = sass.parse_sass(lines, binary=cub.library,
                                 kernel_filter=rx.pattern if rx is not None else None)
        finally:
            p.stdout.close()
            rc = p.wait()
            children.done(p)
        errf.seek(0)
        err = errf.read().strip()
    if rc != 0:
        if children.stopped:
            raise KeyboardInterrupt("census stopped")
        raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {rc}) on {cub.path.name} of "
                           f"{cub.library}: {err}")
    per: dict[str, Counter] = {}
    for k, op, n in zip(df["kernel"], df["opcode"], df["count"]):
        per.setdefault(k, Counter())[op] += int(n)
    for k in df.attrs.get("kernels_without_instructions", []):
        per.setdefault(k, Counter())
    return per.items()


def _members(zpath: Path, tmp: Path):
    """Extract a wheel's shared objects / cubins / fatbins only, one at a time (yielded as
    soon as it is out, so the pool starts on it while the next is unpacked)."""
    with zipfile.ZipFile(zpath) as zf:
        for i, m in enumerate(zf.infolist()):
            if m.is_dir() or not sass._BINARY_MEMBER.search(m.filename):
                continue
            d = tmp / "whl" / str(i)
            d.mkdir(parents=True)
            yield f"{zpath.name}!{m.filename}", Path(zf.extract(m, d))


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def census(paths: Iterable, *, archs=None, kernel_filter: str | None = None,
           workers: int | None = None, tool: str = "auto", cwd=None,
           demangle_names: bool = True, keep_ops: bool = False) -> Census:
    """Filter-first census of binaries (wheel, .so, cubin, fatbin); see the module doc.

    ``archs``: list of 'sm_80'-like names (None: all); ``kernel_filter``: regex searched
    in the mangled function names (None: all); ``keep_ops``: each kernel keeps its opcode
    Counter under ``ops`` (for notebook 09's per-kernel tables). Raises CensusError on bad
    input before running any tool."""
    files = resolve_inputs(paths, cwd=cwd)
    try:
        archs = None if not archs else [sass.normalise_arch(a) for a in archs]
    except ValueError as exc:
        raise CensusError(str(exc)) from None
    try:
        rx = re.compile(kernel_filter) if kernel_filter else None
    except re.error as exc:
        raise CensusError(f"--filter {kernel_filter!r} is not a valid regular expression: {exc}") from None
    if tool == "auto":
        tool = "nvdisasm" if have_tool("nvdisasm") else "cuobjdump"
    try:
        find_tool(tool)
        if any(not is_cubin(f) for f in files):
            find_tool("cuobjdump")  # listing and extracting a host ELF / wheel needs it
    except ToolNotFound as exc:
        raise CensusError(str(exc)) from None

    result = Census()
    seen: set[tuple[str, str, str]] = set()
    with sigterm_as_interrupt(), owned_temp_dir(TEMP_PREFIX) as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "tooltmp").mkdir()
        children = Children(tmp / "tooltmp")
        pool = ThreadPoolExecutor(max_workers=workers or default_workers(),
                                  thread_name_prefix="census")
        pending: dict = {}
        try:
            def jobs():
                for f in files:
                    if sass._kind(f) == "zip":
                        for label, member in _members(f, tmp):
                            yield label, member, True
                    else:
                        yield f.name, f, False
            for i, (label, f, member) in enumerate(jobs()):
                fut = pool.submit(extract_cubins, f, label, archs, rx, tmp / "x" / str(i),
                                  children, member)
                pending[fut] = ("extract", label, f)
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    what, label, obj = pending.pop(fut)
                    if what == "extract":
                        cubins, why = fut.result()
                        if why:
                            result.notes.append((label, why))
                        for c in cubins:
                            pending[pool.submit(disassemble_cubin, c, rx, children, tool)] = \
                                ("sass", label, c)
                    else:
                        c = obj
                        result.disassembled.append((label, c.arch, c.path.name, len(c.functions)))
                        for name, ops in fut.result():
                            key = (label, c.arch, name)
                            if key in seen:  # one kernel in two cubins of one library
                                result.duplicates += 1
                                continue
                            seen.add(key)
                            result.kernels.append(dict(library=label, arch=c.arch, kernel=name,
                                                       ops=ops))
        except BaseException:
            children.stop()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    names = {k["kernel"] for k in result.kernels}
    dm = sass.demangle(names) if demangle_names and names else {n: n for n in names}
    for k in result.kernels:
        ops = k["ops"] if keep_ops else k.pop("ops")
        k.update(describe_kernel(ops, dm.get(k["kernel"], k["kernel"])))
        k["demangled"] = dm.get(k["kernel"], k["kernel"])
    result.kernels.sort(key=lambda k: (k["library"], _arch_key(k["arch"]), k["kernel"]))
    return result


def _arch_key(arch: str):
    m = re.match(r"sm_(\d+)(\w*)", arch)
    return (int(m.group(1)), m.group(2)) if m else (0, arch)


# --------------------------------------------------------------------------------------
# Per-kernel description

_DTYPE_NAMES = {"bf16": "bf16", "f16": "fp16", "tf32": "tf32", "f32": "fp32", "f64": "fp64",
                "e4m3": "fp8 e4m3", "e5m2": "fp8 e5m2", "e3m2": "fp6 e3m2", "e2m3": "fp6 e2m3",
                "e2m1": "fp4 e2m1", "s8": "int8", "u8": "uint8", "s4": "int4", "u4": "uint4",
                "b1": "b1"}


def operand_dtype(operands: str) -> str:
    """'e4m3.e4m3' -> 'fp8 e4m3'; 'e4m3.e5m2' -> 'fp8 e4m3 x fp8 e5m2'; 'bf16' -> 'bf16'."""
    parts = [_DTYPE_NAMES.get(t, t) for t in operands.split(".") if t]
    uniq = list(dict.fromkeys(parts))
    return " x ".join(uniq) if uniq else "?"


_CONVERSION_BASES = frozenset({"F2F", "F2FP", "F2I", "I2F", "I2FP", "I2I", "I2IP", "F2IP"})


def is_conversion(opcode: str) -> bool:
    """Type conversions in full: F2F*, F2FP*, F2I*, I2F*, I2I*, and the HADD2.F32 /
    HMUL2.F32 forms ptxas uses to widen fp16 to fp32."""
    parts = opcode.split(".")
    return parts[0] in _CONVERSION_BASES or (parts[0] in ("HADD2", "HMUL2", "HFMA2")
                                             and "F32" in parts[1:])


def describe_kernel(ops: Counter, demangled: str) -> dict:
    fams: Counter = Counter()
    acts: Counter = Counter()
    for op, n in ops.items():
        fam = sass.opcode_family(op)
        if sass.is_mma(fam):
            fams[fam] += n
            ao = sass.mma_operands(op)
            acts[operand_dtype(ao[1]) if ao else "?"] += n
    return dict(
        activation=" + ".join(sorted(acts)) if acts else "no MMA",
        weight=weight_type(demangled),
        mma_family="+".join(sorted(fams)) or "none",
        mma_instructions=int(sum(fams.values())),
        instructions=int(sum(ops.values())),
        conversions=" ".join(sorted(op for op in ops if is_conversion(op))))


def scalar_type_name(type_id: int) -> str | None:
    """A vLLM ScalarType id (csrc/core/scalar_type.hpp: exponent 8 bits, mantissa 8, signed 1,
    bias 32, ...) as a name: 'uint4b8', 'int8', 'fp8 e4m3', 'bf16', ...; None if implausible."""
    exponent = type_id & 0xFF
    mantissa = (type_id >> 8) & 0xFF
    signed = (type_id >> 16) & 0x1
    bias = (type_id >> 17) & 0xFFFFFFFF
    if bias >= 1 << 31:
        bias -= 1 << 32
    if exponent == 0:
        bits = mantissa + signed
        if not 1 <= bits <= 64:
            return None
        return f"{'int' if signed else 'uint'}{bits}" + (f"b{bias}" if bias else "")
    known = {(8, 7): "bf16", (5, 10): "fp16", (8, 23): "fp32", (4, 3): "fp8 e4m3",
             (5, 2): "fp8 e5m2", (2, 1): "fp4 e2m1", (3, 2): "fp6 e3m2", (2, 3): "fp6 e2m3",
             (8, 0): "ue8m0"}
    if exponent + mantissa + signed > 64:
        return None
    return known.get((exponent, mantissa), f"e{exponent}m{mantissa}")


_MARLIN_ARGS = re.compile(r"\bMarlin<([^>]*)>")
_WEIGHT_RULES = [  # (regex on the lower-cased name, weight type), first match wins: exact types first
    (re.compile(r"u4b8|uint4b8"), "uint4b8"),
    (re.compile(r"u8b128|uint8b128"), "uint8b128"),
    (re.compile(r"nvfp4"), "nvfp4"),
    (re.compile(r"mxfp4"), "mxfp4"),
    (re.compile(r"e2m1|fp4"), "fp4 e2m1"),
    (re.compile(r"fp8|e4m3"), "fp8 e4m3"),
    (re.compile(r"e5m2"), "fp8 e5m2"),
    (re.compile(r"\bint8\b|_int8|int8_"), "int8"),
    (re.compile(r"\bint4\b|_int4|int4_|\bs4\b"), "int4"),
    (re.compile(r"w4a\d+"), "4-bit"),   # the scheme says the width, not the format
    (re.compile(r"w8a\d+"), "8-bit"),
]
# Words in a name that look like a type and are not one (fp8lab's own namespace).
_NOT_A_TYPE = re.compile(r"fp8lab")


def weight_type(demangled: str) -> str:
    """The weight type a kernel name states, best effort; '?' when it states none.

    Marlin (vLLM, sglang): the template argument after the activation type is the weight's
    ScalarType id (``Marlin<__nv_bfloat16, 1099511627780l, ...>`` or, newer, ``Marlin<a_type_id,
    b_type_id, ...>``). Otherwise words in the name: ``u4b8``, ``w4a16``, ``int8``, ``fp8``."""
    m = _MARLIN_ARGS.search(demangled)
    if m:
        args = [a.strip() for a in m.group(1).split(",")]
        if len(args) >= 2:
            num = re.fullmatch(r"(?:\([^)]*\))?\s*(-?\d+)[lLuU]*", args[1])  # "(long)5", "5l"
            if num:
                name = scalar_type_name(int(num.group(1)))
                if name:
                    return name
    low = _NOT_A_TYPE.sub("", demangled.lower())
    for rx, name in _WEIGHT_RULES:
        if rx.search(low):
            return name
    return "?"


def summarise(kernels: list[dict]) -> list[dict]:
    """One row per (library, arch, activation, weight, MMA family): kernel count and the
    conversion opcodes seen in any of them."""
    groups: dict[tuple, dict] = {}
    for k in kernels:
        key = (k["library"], k["arch"], k["activation"], k["weight"], k["mma_family"])
        g = groups.setdefault(key, dict(zip(SUMMARY_COLUMNS[:5], key), kernels=0, conv=set()))
        g["kernels"] += 1
        g["conv"].update(k["conversions"].split())
    rows = []
    for key in sorted(groups, key=lambda t: (t[0], _arch_key(t[1]), -groups[t]["kernels"], t[2:])):
        g = groups[key]
        conv = g.pop("conv")
        g["conversions"] = " ".join(sorted(conv)) or "-"
        rows.append(g)
    return rows


# --------------------------------------------------------------------------------------
# Output

def format_table(rows: list[dict], columns: list[str], headers: dict | None = None) -> str:
    headers = headers or {}
    cells = [[headers.get(c, c) for c in columns]] + [[str(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    right = {i for i, c in enumerate(columns) if c == "kernels"}

    def line(row):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(row, widths))).rstrip()
    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def render(result: Census) -> str:
    rows = result.summary()
    notes = sorted(result.notes)
    lines = []
    # One wheel: its name once above the table, its members' paths in the rows.
    prefixes = {r["library"].split("!", 1)[0] + "!" for r in rows} | \
        {lib.split("!", 1)[0] + "!" for lib, _ in notes}
    if len(prefixes) == 1 and all("!" in r["library"] for r in rows) and \
            all("!" in lib for lib, _ in notes):
        prefix = prefixes.pop()
        lines.append(f"{prefix[:-1]}:")
        rows = [dict(r, library=r["library"][len(prefix):]) for r in rows]
        notes = [(lib[len(prefix):], why) for lib, why in notes]
    if rows:
        lines.append(format_table(rows, SUMMARY_COLUMNS, {
            "activation": "activation (MMA operands)", "weight": "weight (from name)",
            "mma_family": "MMA", "conversions": "conversion opcodes"}))
    else:
        lines.append("no kernel matched")
    n = len(result.kernels)
    lines.append(f"\n{n} kernel{'s' * (n != 1)} from {len(result.disassembled)} disassembled "
                 f"cubin{'s' * (len(result.disassembled) != 1)}"
                 + (f"; {result.duplicates} duplicate kernel copies counted once"
                    if result.duplicates else ""))
    for lib, why in notes:
        lines.append(f"  skipped {lib}: {why}")
    return "\n".join(lines)


def committed_census_dir() -> Path:
    from ..paths import data_dir
    return data_dir() / "cpu" / "09_sass_census"


def check_out_dir(out: Path) -> None:
    """Refuse the folder of fp8lab's own committed census (its C1 verdict reads it); its
    ``binaries/`` subfolder, meant for user binaries, is allowed."""
    own = committed_census_dir().resolve()
    o = out.resolve()
    if (o == own or own in o.parents) and not (o == own / "binaries" or (own / "binaries") in o.parents):
        raise CensusError(f"--out {out}: that is fp8lab's own committed census (behind claim C1); "
                          f"use another folder, e.g. {own / 'binaries' / '<name>'}")


def write_csvs(result: Census, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    kp, sp = out / "census_kernels.csv", out / "census_summary.csv"
    with open(kp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=KERNEL_COLUMNS)
        w.writeheader()
        w.writerows({c: k[c] for c in KERNEL_COLUMNS} for k in result.kernels)
    with open(sp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS)
        w.writeheader()
        w.writerows(result.summary())
    return kp, sp


def add_arguments(ap) -> None:
    ap.add_argument("binaries", nargs="+", metavar="BINARY",
                    help=".whl, .so (any ELF with embedded CUDA code), .cubin or .fatbin; "
                         "relative paths from the current folder")
    ap.add_argument("--arch", nargs="+", metavar="SM",
                    help="architectures to keep, e.g. sm_80 sm_90 (default: all)")
    ap.add_argument("--filter", metavar="REGEX",
                    help="keep functions whose mangled name matches (re.search); others are "
                         "never disassembled")
    ap.add_argument("--out", metavar="DIR", help="also write census_kernels.csv and "
                    "census_summary.csv there (default: print only)")
    ap.add_argument("--workers", type=int, help="parallel tool processes (default: the cores)")


def cli(a) -> int:
    def on_term(signum, _frame):
        exc = KeyboardInterrupt()
        exc.signum = signum
        raise exc
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM as Ctrl-C: children killed, temp folder removed
        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return _cli(a)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _cli(a) -> int:
    try:
        out = None
        if a.out:
            out = Path(os.path.expanduser(a.out))
            out = out if out.is_absolute() else Path.cwd() / out
            check_out_dir(out)
        result = census(a.binaries, archs=a.arch, kernel_filter=a.filter, workers=a.workers)
    except CensusError as exc:
        print(f"fp8lab census: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a tool failed on a file it should read
        print(f"fp8lab census: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    print(render(result))
    if out is not None:
        kp, sp = write_csvs(result, out)
        print(f"wrote {kp} and {sp}")
    return 0
