"""SASS census: which machine instructions a compiled CUDA binary actually issues.

``cuobjdump -sass`` (or ``nvdisasm`` for a bare cubin) disassembles every kernel in a
binary; this module streams that text and counts instructions per kernel into a tidy
table, one row per (binary, arch, kernel, opcode):

    binary  arch   kernel                 demangled                   opcode               family  count
    x.so    sm_80  _Z6marlinILi256E...    void marlin<256>(...)       HMMA.16816.F32.BF16  HMMA    512

Inputs: a ``.cubin``, any ELF with an embedded fatbinary (a ``.so`` such as a PyTorch
extension, a ``.o``, an executable), a bare ``.fatbin``, or a wheel (``.whl``: every
shared object / cubin inside it). The file type is read from its magic bytes, not its
name. The ``family`` column groups an opcode by its base mnemonic (``LDG.E.128`` ->
``LDG``), except ``F2FP`` conversions, which keep the formats that matter (``F2FP.FP8``
for anything touching E4M3/E5M2, ``F2FP.BF16`` for the fp32 -> bf16 pack, ...).

:func:`mma_summary` condenses the table to one row per kernel: which tensor-core
instruction families it issues and at what operand precision (16-bit HMMA/HGMMA vs
8-bit QMMA/QGMMA/IMMA vs 4-bit), plus a name-based guess of the kernel's activation
precision (:func:`classify_activation`) that is independent of the SASS.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from fp8lab.toolchain.tools import ToolNotFound, find_tool, have_tool

COLUMNS = ["binary", "arch", "kernel", "demangled", "opcode", "family", "count"]

# --------------------------------------------------------------------------------------
# Opcode classification

# Data types as they appear in SASS modifiers, with their width in bits.
DTYPE_BITS = {
    "F64": 64, "F32": 32, "TF32": 19, "F16": 16, "BF16": 16,
    "E4M3": 8, "E5M2": 8, "S8": 8, "U8": 8,
    "E3M2": 6, "E2M3": 6, "E2M1": 4, "S4": 4, "U4": 4, "B1": 1,
}
FP8_TOKENS = frozenset({"E4M3", "E5M2"})
FP6_TOKENS = frozenset({"E3M2", "E2M3"})
FP4_TOKENS = frozenset({"E2M1"})

# Tensor-core families by the operand precision they imply. HMMA/HGMMA are the 16-bit
# (and tf32) MMAs of sm_70+ / sm_90 wgmma; QMMA (sm_89, sm_120) and QGMMA (sm_90 wgmma)
# are the FP8 ones; IMMA/IGMMA the integer ones; OMMA the sm_120 FP4 mma.sync; UTC*MMA
# the sm_100 tcgen05 forms.
MMA_FAMILIES_16BIT = frozenset({"HMMA", "HGMMA", "UTCHMMA"})
MMA_FAMILIES_FP8 = frozenset({"QMMA", "QGMMA", "UTCQMMA"})
MMA_FAMILIES_INT = frozenset({"IMMA", "IGMMA", "UTCIMMA"})
MMA_FAMILIES_FP4 = frozenset({"OMMA", "UTCOMMA"})

_ARCH = re.compile(r"(?:code for|\.target|arch =)\s+(sm_\w+)")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_SELF_BRANCH = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+BRA\s+(?:`\()?0x([0-9a-fA-F]+)")
_NVDISASM_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")


def is_mma(family: str) -> bool:
    return family.endswith("MMA")


def opcode_family(opcode: str) -> str:
    """Group a full opcode (``HMMA.16816.F32.BF16``) into its family (``HMMA``).

    ``F2FP`` keeps what it converts: ``F2FP.FP8`` (touches E4M3/E5M2), ``F2FP.FP6``,
    ``F2FP.FP4`` (E2M1), ``F2FP.BF16`` / ``F2FP.F16`` (the fp32 -> 16-bit pack of an
    epilogue), so a census tells a weight dequant from an output pack.
    """
    parts = opcode.split(".")
    base = parts[0]
    if base == "F2FP":
        mods = set(parts[1:])
        for tokens, name in ((FP8_TOKENS, "FP8"), (FP6_TOKENS, "FP6"), (FP4_TOKENS, "FP4")):
            if mods & tokens:
                return f"F2FP.{name}"
        if "UE8M0" in mods:
            return "F2FP.UE8M0"
        for t in ("BF16", "F16"):
            if t in mods:
                return f"F2FP.{t}"
        return "F2FP"
    return base


def mma_operands(opcode: str) -> tuple[str, str] | None:
    """(accumulator type, operand types) of an MMA opcode, e.g.
    ``HMMA.16816.F32.BF16`` -> ("f32", "bf16"); ``QGMMA.64x128x32.F32.E4M3.E4M3`` ->
    ("f32", "e4m3.e4m3"); None if the opcode is not an MMA.

    HMMA/HGMMA spell no operand type for fp16 (``HMMA.16816.F32``), so a missing one
    means f16 there; integer MMAs spell only the operands (accumulator s32).
    """
    family = opcode_family(opcode)
    if not is_mma(family):
        return None
    dts = [t for t in opcode.split(".")[1:] if t in DTYPE_BITS]
    if family in MMA_FAMILIES_INT:
        return "s32", ".".join(dts).lower() or "s8.s8"
    if not dts:
        return ("f16", "f16") if family in MMA_FAMILIES_16BIT else ("?", "?")
    acc, ops = dts[0], dts[1:]
    if not ops:
        ops = ["F16"] if family in MMA_FAMILIES_16BIT else ["?"]
    return acc.lower(), ".".join(ops).lower()


def mma_operand_bits(opcode: str) -> int | None:
    """Width in bits of the narrowest MMA operand (16 for bf16, 8 for e4m3, ...)."""
    ops = mma_operands(opcode)
    if ops is None:
        return None
    widths = [DTYPE_BITS[t.upper()] for t in ops[1].split(".") if t.upper() in DTYPE_BITS]
    return min(widths) if widths else None


def parse_instruction(line: str) -> str | None:
    """The full opcode of one disassembly line (predicate dropped), or None.

    Handles ``/*0070*/  @!PT HMMA.16816.F32.BF16 R4, R8, R12, R4 ;  /* 0x... */``, the
    encoding-only continuation lines of sm_80/89 dumps (no opcode: None), and ``NOP;``.
    Plain string operations, no regex: a large binary has tens of millions of lines.
    """
    s = line.lstrip()
    if not s.startswith("/*") or s.startswith("/* "):  # not code, or an encoding-only line
        return None
    end = s.find("*/", 2)
    if end < 6:  # the address has at least 4 hex digits
        return None
    try:
        int(s[2:end], 16)
    except ValueError:
        return None
    toks = s[end + 2:].split(None, 4)
    i = 0
    while i < len(toks) and (toks[i].startswith("@") or toks[i] == "{"):
        i += 1  # predicates (@P0, @!PT, @!UPT) and the brace of a dual-issue pair
    if i == len(toks):
        return None
    op = toks[i].lstrip("{").rstrip(";")
    if not op or not ("A" <= op[0] <= "Z"):
        return None
    return op


# --------------------------------------------------------------------------------------
# Parsing a disassembly stream

def parse_sass(lines: Iterable[str], *, binary: str = "", arch: str | None = None,
               kernel_filter: str | None = None) -> pd.DataFrame:
    """Count opcodes per kernel in ``cuobjdump -sass`` or ``nvdisasm`` text.

    ``arch`` keeps only that architecture (``sm_90`` also matches ``sm_90a``);
    ``kernel_filter`` is a regex searched in the mangled name. The NOPs that pad a kernel
    after its closing self-branch (``/*0170*/ BRA 0x170``) are alignment, never executed,
    and not counted. A kernel that appears
    twice for one arch (two translation units instantiating one template) is counted
    once; the number skipped is in ``df.attrs["duplicates"]``. Returns the tidy table
    without the ``demangled`` column filled (see :func:`demangle`).
    """
    kf = re.compile(kernel_filter) if kernel_filter else None
    counts: dict[tuple[str, str], Counter] = {}
    cur_arch = "sm_?"
    cur: Counter | None = None
    duplicates = 0

    def start(name: str) -> Counter | None:
        nonlocal duplicates
        if arch is not None and not _arch_matches(cur_arch, arch):
            return None
        if kf is not None and not kf.search(name):
            return None
        key = (cur_arch, name)
        if key in counts:
            duplicates += 1
            return None
        counts[key] = Counter()
        return counts[key]

    padding = False  # after a kernel's closing self-branch: NOPs there only align the code
    for line in lines:
        op = parse_instruction(line)
        if op is not None:
            if cur is None:
                continue
            if op == "NOP" and padding:
                continue
            if op == "BRA":
                m = _SELF_BRANCH.match(line)
                padding = bool(m) and int(m.group(1), 16) == int(m.group(2), 16)
            else:
                padding = False
            cur[op] += 1
            continue
        if not line.strip() or line.lstrip().startswith("/*"):
            continue  # blank, or an encoding-only line: cheap exits before the regexes
        if "Fatbin" in line:  # a new ELF inside a fatbinary: no kernel until its header
            cur = None
            continue
        m = _ARCH.search(line)
        if m:
            cur_arch = m.group(1)
            cur = None
            continue
        m = _FUNCTION.match(line) or _NVDISASM_SECTION.match(line)
        if m:
            cur = start(m.group(1))
    rows = [(binary, a, k, k, op, opcode_family(op), n)
            for (a, k), ctr in counts.items() for op, n in sorted(ctr.items())]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["count"] = df["count"].astype("int64")
    df.attrs["duplicates"] = duplicates
    df.attrs["kernels_without_instructions"] = sorted(k for (a, k), c in counts.items() if not c)
    return df


def _arch_matches(found: str, wanted: str) -> bool:
    wanted = normalise_arch(wanted)
    return found == wanted or found.rstrip("af") == wanted


def normalise_arch(arch) -> str:
    """'sm_90', 'sm90', '90', 90 -> 'sm_90' (suffixes a/f kept)."""
    m = re.fullmatch(r"(?:sm_?)?(\d{2,3}[af]?)", str(arch).strip())
    if not m:
        raise ValueError(f"arch must look like 'sm_90' (or 90), got {arch!r}")
    return f"sm_{m.group(1)}"


# --------------------------------------------------------------------------------------
# Running the disassembler

_ELF = b"\x7fELF"
_ZIP = b"PK\x03\x04"
_FATBIN = b"\x50\xed\x55\xba"  # 0xBA55ED50 little-endian: a bare fatbinary file


def _kind(path: Path) -> str:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise ValueError(f"{path} must be a file (a .cubin, .so, .fatbin or .whl), not a directory")
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(_ELF):
        return "elf"
    if head.startswith(_ZIP):
        return "zip"
    if head.startswith(_FATBIN):
        return "fatbin"
    raise ValueError(f"{path} is not a CUDA binary: expected an ELF (.cubin, .so, .o), a fatbin "
                     f"or a wheel (.whl zip); its first bytes are {head[:4]!r}")


class NoDeviceCode(ValueError):
    """The binary is valid but holds no CUDA device code (SASS)."""


def _stream(cmd: list[str], path: Path) -> Iterator[str]:
    """Yield the tool's stdout line by line (binaries with thousands of kernels print
    gigabytes of SASS, so it is never held in memory), then check its exit status."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                bufsize=1 << 20, errors="replace")
        try:
            assert proc.stdout is not None
            yield from proc.stdout
        finally:
            if proc.poll() is None:
                proc.stdout.close()
            rc = proc.wait()
        err.seek(0)
        msg = err.read().strip()
    if rc != 0:
        if "does not contain device code" in msg:
            raise NoDeviceCode(f"{path} contains no CUDA device code")
        if "Invalid fatbin" in msg or "not an ELF" in msg.lower():
            raise ValueError(f"{path} is not a CUDA binary ({msg})")
        raise RuntimeError(f"{cmd[0]} failed (exit {rc}) on {path}: {msg}")


def disassemble(path, *, arch: str | None = None, tool: str = "auto") -> Iterator[str]:
    """Stream the SASS text of one ELF / fatbin. ``tool``: 'cuobjdump', 'nvdisasm'
    (bare cubins only), or 'auto' (cuobjdump, else nvdisasm for a cubin)."""
    path = Path(path)
    kind = _kind(path)
    if kind == "zip":
        raise ValueError(f"{path} is a zip/wheel: use sass_census(), which unpacks it")
    if tool not in ("auto", "cuobjdump", "nvdisasm"):
        raise ValueError(f"tool must be 'auto', 'cuobjdump' or 'nvdisasm', got {tool!r}")
    if tool == "auto":
        tool = "cuobjdump" if have_tool("cuobjdump") else "nvdisasm"
    if tool == "cuobjdump":
        cmd = [str(find_tool("cuobjdump")), "-sass"]
        if arch is not None:
            cmd += ["-arch", normalise_arch(arch)]
        return _stream(cmd + [str(path)], path)
    if kind != "elf":
        raise ValueError(f"nvdisasm reads a bare cubin only; {path} is a {kind}: install cuobjdump")
    return _stream([str(find_tool("nvdisasm")), "-c", str(path)], path)


# --------------------------------------------------------------------------------------
# Demangling

def _demangler() -> str | None:
    for name in ("cu++filt", "c++filt"):
        found = shutil.which(name)
        if found:
            return found
    # cu++filt ships beside nvcc / cuobjdump in the toolkit and in NVIDIA's wheels.
    for tool in ("nvcc", "cuobjdump"):
        try:
            cand = find_tool(tool).parent / "cu++filt"
        except ToolNotFound:
            continue
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled -> demangled via cu++filt (else binutils c++filt: CUDA kernels use the
    Itanium ABI); names stay mangled when neither exists."""
    names = sorted(set(names))
    tool = _demangler()
    if not names or tool is None:
        return {n: n for n in names}
    try:
        out = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True,
                             text=True, timeout=300).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {n: n for n in names}
    if len(out) != len(names):
        return {n: n for n in names}
    return {n: d.strip() or n for n, d in zip(names, out)}


# --------------------------------------------------------------------------------------
# Public entry points

_BINARY_MEMBER = re.compile(r"\.(so(\.\d+)*|cubin|fatbin)$")


def sass_census(path, *, arch=None, kernel_filter: str | None = None,
                demangle_names: bool = True, tool: str = "auto",
                label: str | None = None) -> pd.DataFrame:
    """Opcode histogram per kernel of one binary (cubin, ELF with fatbin, fatbin, wheel).

    ``arch`` restricts to one architecture or a list of them (each passed to ``cuobjdump
    -arch``, one pass per arch, and filtered again, because cuobjdump ignores -arch for a
    bare cubin). A wheel is unpacked member
    by member into a temp dir; members without device code are skipped (listed in
    ``df.attrs["skipped"]``). A single file without device code raises ValueError.
    """
    path = Path(path)
    kind = _kind(path)
    label = label or path.name
    if kind == "zip":
        return _wheel_census(path, arch=arch, kernel_filter=kernel_filter,
                             demangle_names=demangle_names, tool=tool, label=label)
    archs = [arch] if arch is None or isinstance(arch, str) else list(arch)
    frames = [parse_sass(disassemble(path, arch=a, tool=tool), binary=label, arch=a,
                         kernel_filter=kernel_filter) for a in archs]
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    df.attrs["duplicates"] = sum(f.attrs.get("duplicates", 0) for f in frames)
    if demangle_names and len(df):
        dm = demangle(df["kernel"].unique())
        df["demangled"] = df["kernel"].map(dm)
    df.attrs.setdefault("skipped", [])
    return df


def _wheel_census(path: Path, **kw) -> pd.DataFrame:
    label = kw.pop("label")
    frames, skipped, dups = [], [], 0
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise ValueError(f"{path} starts like a zip but is not a valid wheel: {e}") from None
    with zf, tempfile.TemporaryDirectory(prefix="fp8lab-whl-") as tmp:
        members = [m for m in zf.infolist() if not m.is_dir() and _BINARY_MEMBER.search(m.filename)]
        for m in members:
            # One member at a time: a CUDA wheel can hold several GB of shared objects.
            out = Path(zf.extract(m, tmp))
            try:
                df = sass_census(out, label=f"{label}!{m.filename}", **kw)
            except (NoDeviceCode, ValueError):
                skipped.append(m.filename)
                continue
            finally:
                out.unlink(missing_ok=True)
            dups += df.attrs.get("duplicates", 0)
            frames.append(df)
    if not frames:
        raise ValueError(f"{path}: no shared object or cubin in this wheel contains CUDA device "
                         f"code ({len(members)} binaries looked at)")
    df = pd.concat(frames, ignore_index=True)
    df.attrs.update(skipped=skipped, duplicates=dups)
    return df


def census_paths(paths: Iterable, **kw) -> pd.DataFrame:
    """:func:`sass_census` over several binaries, concatenated."""
    frames = [sass_census(p, **kw) for p in paths]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------------------
# Kernel classification and per-kernel summary

# ScalarType ids as vLLM packs them (csrc/core/scalar_type.hpp): exponent (8 bits),
# mantissa (8), signed (1), bias (32), finite_values_only (1), nan_repr (8), from bit 0.
def _scalar_type_bits(type_id: int) -> int | None:
    exponent = type_id & 0xFF
    mantissa = (type_id >> 8) & 0xFF
    signed = (type_id >> 16) & 0x1
    bits = exponent + mantissa + signed
    return bits if 1 <= bits <= 64 else None


_SIXTEEN_BIT_TYPES = ("__half", "half", "__nv_bfloat16", "nv_bfloat16", "c10::Half",
                      "c10::BFloat16", "cutlass::half_t", "cutlass::bfloat16_t")
_EIGHT_BIT_TYPES = ("__nv_fp8_e4m3", "__nv_fp8_e5m2", "cutlass::float_e4m3_t",
                    "cutlass::float_e5m2_t", "c10::Float8_e4m3fn", "signed char", "int8_t")
_MARLIN = re.compile(r"\bMarlin<\s*(?:\(long\)|\(long long\))?\s*([^,>]+?)\s*,")
_NAME_RULES = [  # (regex on the lower-cased demangled name, activation class)
    (re.compile(r"w\d+a16|wna16|_a16\b|a16_"), "A16"),
    (re.compile(r"w\d+a8|_a8\b|a8_|fp8_fp8|e4m3_e4m3|blockwise_fp8"), "A8"),
    (re.compile(r"w\d+a4|_a4\b|a4_|fp4_fp4"), "A4"),
]


def classify_activation(name: str) -> tuple[str, str]:
    """Guess a kernel's activation precision from its name only: ('A16' | 'A8' | 'A4' |
    'unknown', the rule that decided). Independent of its SASS on purpose, so a census
    can test "A16 kernels issue only 16-bit MMAs" without assuming it.

    Rules, in order:
    1. Marlin (vLLM, sglang): the first template argument of ``Marlin<...>`` is the
       activation type: a 16-bit C++ type (older Marlin: ``__nv_bfloat16``, ``half``),
       or a vLLM ScalarType id (newer Marlin's ``a_type_id``), whose bit width is
       exponent + mantissa + sign bits packed in the id.
    2. Names that spell the scheme: ``w8a16``, ``wna16``, ``a16`` -> A16; ``w8a8``,
       ``fp8_fp8``, ``blockwise_fp8`` -> A8; ``w4a4`` -> A4.
    """
    m = _MARLIN.search(name)
    if m:
        arg = m.group(1).strip()
        if any(arg == t or arg.endswith("::" + t.split("::")[-1]) for t in _SIXTEEN_BIT_TYPES):
            return "A16", f"Marlin<{arg}, ...>: 16-bit activation type"
        if any(t in arg for t in _EIGHT_BIT_TYPES):
            return "A8", f"Marlin<{arg}, ...>: 8-bit activation type"
        num = re.fullmatch(r"-?\d+[lL]*", arg)
        if num:
            bits = _scalar_type_bits(int(arg.rstrip("lL")))
            if bits in (16, 8, 4):
                return f"A{bits}", f"Marlin a_type_id {arg} decodes to a {bits}-bit type"
    low = name.lower()
    for rx, cls in _NAME_RULES:
        if rx.search(low):
            return cls, f"name matches /{rx.pattern}/"
    return "unknown", "no rule matched"


def mma_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (binary, arch, kernel): MMA families and operand precision.

    Columns: binary, arch, kernel, demangled, instructions (total), n_mma,
    mma_families ('+'-joined, e.g. 'HMMA' or 'QGMMA'), mma_types (e.g. 'HMMA:bf16',
    'QMMA:e4m3.e4m3'), mma_16bit / mma_fp8 / mma_int / mma_fp4 (instruction counts),
    operand_bits (narrowest MMA operand, 0 if no MMA), fp8_converts (F2FP/F2F touching
    E4M3/E5M2), local_mem (LDL + STL: spills or local arrays), act / act_rule
    (:func:`classify_activation` of the demangled name).
    """
    if not len(df):
        return pd.DataFrame(columns=[
            "binary", "arch", "kernel", "demangled", "instructions", "n_mma", "mma_families",
            "mma_types", "mma_16bit", "mma_fp8", "mma_int", "mma_fp4", "operand_bits",
            "fp8_converts", "local_mem", "act", "act_rule"])
    rows = []
    for (binary, arch, kernel), g in df.groupby(["binary", "arch", "kernel"], sort=True):
        fams = Counter()
        types = Counter()
        bits = []
        fp8_conv = local = 0
        for op, fam, n in zip(g["opcode"], g["family"], g["count"]):
            if is_mma(fam):
                fams[fam] += n
                acc_ops = mma_operands(op)
                types[f"{fam}:{acc_ops[1] if acc_ops else '?'}"] += n
                b = mma_operand_bits(op)
                if b:
                    bits.append(b)
            toks = set(op.split(".")[1:])
            if fam.startswith("F2F") and toks & FP8_TOKENS:
                fp8_conv += n
            if fam in ("LDL", "STL"):
                local += n
        demangled = g["demangled"].iloc[0]
        act, rule = classify_activation(demangled)
        rows.append(dict(
            binary=binary, arch=arch, kernel=kernel, demangled=demangled,
            instructions=int(g["count"].sum()), n_mma=int(sum(fams.values())),
            mma_families="+".join(sorted(fams)) or "none",
            mma_types=", ".join(sorted(types)) or "none",
            mma_16bit=int(sum(n for f, n in fams.items() if f in MMA_FAMILIES_16BIT)),
            mma_fp8=int(sum(n for f, n in fams.items() if f in MMA_FAMILIES_FP8)),
            mma_int=int(sum(n for f, n in fams.items() if f in MMA_FAMILIES_INT)),
            mma_fp4=int(sum(n for f, n in fams.items() if f in MMA_FAMILIES_FP4)),
            operand_bits=min(bits) if bits else 0,
            fp8_converts=int(fp8_conv), local_mem=int(local), act=act, act_rule=rule))
    return pd.DataFrame(rows)
