"""The weight-only GEMV's SASS, compiled here (nvcc, cuobjdump; no GPU): what ptxas makes of the
dequant tricks and of the main loop.

- :func:`dequant_sass_counts`: per (format, activation dtype), the dequant probe's loop-body
  opcodes minus its pass-through twin's, against the emulators' traces (fp8lab.emulate.dequant).
- :func:`gemv_sass_counts`: static instructions per weight element of each GEMV kernel's main
  loop, the dequant class beside the rest, and the MMA opcodes of the whole kernel (C2, C5).
- :func:`xalu_sass_counts`: the EXTRA_ALU kernels of notebook 10 against the regular one.

The cubins come from the kernel module's builders (``weight_only.dequant_cubin`` /
``gemv_cubin`` / ``xalu_cubin``), the files ``python -m fp8lab build`` compiles ahead.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..emulate import dequant
from ..kernels import weight_only as wo

__all__ = ["OPCODE_EQUIV", "PROBE_EXTRA_OK", "DEQUANT_FAMILIES", "dequant_sass_counts", "gemv_sass_counts",
           "xalu_sass_counts"]

#: SASS opcodes that do the emulator's instruction on another pipe: ptxas turns a shift left
#: by a constant into IMAD.SHL (the FMA pipe), and a bf16 multiply by an FMA with -0 into HMUL2.
OPCODE_EQUIV = {"IMAD.SHL.U32": "SHF.L.U32", "HMUL2.BF16_V2": "HFMA2.BF16_V2"}
#: what ptxas may add to a dequant probe's loop besides the trace: constant moves, loop counting
PROBE_EXTRA_OK = ("MOV", "IMAD.MOV.U32", "HFMA2.MMA", "PRMT", "IADD3", "VIADD", "IMAD.IADD")
#: opcode families that make up a dequant (and the NVFP4 block-scale handling)
DEQUANT_FAMILIES = ("LOP3", "SHF", "PRMT", "HADD2", "HFMA2", "HMUL2", "FADD", "IMAD.SHL", "SHFL")


def _kernels_in_order(cubin: Path, arch: str, with_addr: bool = False) -> dict[str, list]:
    """mangled kernel name -> its opcodes in address order (or (address, opcode, branch
    target or None) with ``with_addr``)."""
    import re

    from ..toolchain import sass

    bra = re.compile(r"/\*([0-9a-fA-F]+)\*/\s+(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(?:`\()?0x([0-9a-fA-F]+)")
    addr_re = re.compile(r"/\*([0-9a-fA-F]+)\*/")
    out: dict[str, list] = {}
    cur = None
    for line in sass.disassemble(cubin, arch=arch):
        op = sass.parse_instruction(line)
        if op is not None:
            if cur is not None:
                a = int(addr_re.search(line).group(1), 16)
                m = bra.search(line)
                out[cur].append((a, op, int(m.group(2), 16) if m else None))
            continue
        s = line.strip()
        if s.startswith("Function :"):
            cur = s.split(":", 1)[1].strip()
            out[cur] = []
    for k, ops in out.items():
        while ops and ops[-1][1] == "NOP":   # alignment padding after the final self-branch
            ops.pop()
        if ops and ops[-1][1] == "BRA" and ops[-1][2] == ops[-1][0]:
            ops.pop()
    return out if with_addr else {k: [o for _, o, _ in v] for k, v in out.items()}


def _loop_body(ops: list) -> list[str]:
    """Opcodes of the (single) loop: from a backward branch's target to the branch."""
    back = [(a, t) for a, o, t in ops if o.startswith("BRA") and t is not None and t < a]
    if len(back) != 1:
        raise RuntimeError(f"expected one backward branch, found {len(back)}")
    a_b, a_t = back[0]
    return [o for a, o, _ in ops if a_t <= a < a_b]


def _main_loop(kernel: str, ops: list) -> list:
    """The GEMV's main loop: the opcodes between its first two ``BAR.SYNC``."""
    bars = [i for i, o in enumerate(ops) if o.startswith("BAR.SYNC")]
    if len(bars) < 2:
        raise RuntimeError(f"{kernel}: expected the main loop between two barriers")
    return ops[bars[0] + 1: bars[1]]


def _elements_per_thread(fmt: str, nt: int) -> float:
    """Weight elements one thread covers in one main-loop iteration (RING steps of STEP_K)."""
    return wo.RING * wo.STEP_K * 16 * wo.tiles_per_warp(fmt, nt) / 32


def _canon(op: str) -> str:
    return OPCODE_EQUIV.get(op, op)


def dequant_sass_counts(arch: str = "sm_90"):
    """The dequant sequences as ptxas compiles them, against the emulators' traces.

    Compiles ``gemv_w16_check.cu`` for ``arch`` and, per (format, act dtype), subtracts the
    pass-through probe's loop-body opcode counts from the dequant probe's (constants are
    hoisted out of the loop, as in the GEMV). One row per (fmt, act,
    opcode): ``sass`` (the difference), ``emulator`` (the trace's count of that opcode, with
    :data:`OPCODE_EQUIV` applied to the SASS side), per word; plus ``*_total`` rows."""
    import pandas as pd

    cubin = wo.dequant_cubin(arch)
    kernels = _kernels_in_order(cubin, arch, with_addr=True)
    rows = []
    for fmt in wo.FORMATS:
        for act in wo.ACT_DTYPES:
            bf = "1" if act == "bf16" else "0"
            fid = wo.FORMAT_ID[fmt]
            probe = [k for k in kernels if f"dequant_probeILi{fid}ELb{bf}ELb1E" in k]
            twin = [k for k in kernels if f"dequant_probeILi{fid}ELb{bf}ELb0E" in k]
            if len(probe) != 1 or len(twin) != 1:
                raise RuntimeError(f"probe kernels for {fmt}/{act} not found in {cubin.name}: {list(kernels)}")
            diff = Counter(_canon(o) for o in _loop_body(kernels[probe[0]]))
            diff.subtract(Counter(_canon(o) for o in _loop_body(kernels[twin[0]])))
            target = "fp16" if act == "fp16" else "bf16"
            emu = dequant.dequant(wo.CODE_FORMAT[fmt], target, np.zeros(1, np.uint32))
            emu_counts = Counter(emu.op_counts)
            for op in sorted(set(k for k, v in diff.items() if v) | set(emu_counts)):
                rows.append(dict(fmt=fmt, arm=wo.ARMS[fmt], act=act, arch=arch, opcode=op, sass=int(diff[op]),
                                 emulator=int(emu_counts.get(op, 0)),
                                 kind="emulated" if op in emu_counts else "extra",
                                 elements_per_word=emu.elements_per_word))
            rows.append(dict(fmt=fmt, arm=wo.ARMS[fmt], act=act, arch=arch, opcode="*_total",
                             sass=int(sum(diff.values())), emulator=len(emu.trace), kind="total",
                             elements_per_word=emu.elements_per_word))
    return pd.DataFrame(rows)


def gemv_sass_counts(arch: str = "sm_90", nt: int = 1):
    """Static SASS of each GEMV kernel's main loop (between its two barriers: one iteration =
    3 steps of 128 K), per weight element a thread covers there, by opcode.

    One row per (fmt, act, opcode): ``count`` in the loop, ``per_element`` = count /
    (3 x 128 x 16 x TM / 32), ``dequant_class`` (opcode in :data:`DEQUANT_FAMILIES`). Also the
    whole kernel's census flags: ``mma_ops`` and ``fp8_converts`` (F2FP touching E4M3/E5M2)."""
    import pandas as pd

    from ..toolchain import sass

    cubin = wo.gemv_cubin(arch, nt)
    kernels = _kernels_in_order(cubin, arch)
    rows = []
    for fmt in wo.FORMATS:
        for act in wo.ACT_DTYPES:
            bf = "1" if act == "bf16" else "0"
            names = [k for k in kernels if f"{wo.ARMS[fmt]}ILb{bf}ELi{nt}E" in k]
            if len(names) != 1:
                raise RuntimeError(f"kernel {wo.ARMS[fmt]}<{act}, {nt}> not found in {cubin.name}")
            ops = kernels[names[0]]
            loop = Counter(_main_loop(names[0], ops))
            elems = _elements_per_thread(fmt, nt)
            mma = sorted({o for o in ops if sass.is_mma(sass.opcode_family(o))})
            fp8c = sum(1 for o in ops if sass.opcode_family(o) == "F2FP.FP8")
            for op, c in sorted(loop.items()):
                fam = sass.opcode_family(op)
                rows.append(dict(fmt=fmt, arm=wo.ARMS[fmt], act=act, arch=arch, nt=nt, opcode=op, count=c,
                                 per_element=c / elems,
                                 dequant_class=any(op.startswith(f) for f in DEQUANT_FAMILIES),
                                 kernel_instructions=len(ops), mma_ops="+".join(mma), fp8_converts=fp8c,
                                 family=fam))
    return pd.DataFrame(rows)


def xalu_sass_counts(arch: str = "sm_90"):
    """Static SASS of the EXTRA_ALU kernels' main loop against the regular fp8 kernel (bf16,
    NT = 1), counted as :func:`gemv_sass_counts` does (between the two barriers, per weight
    element a thread covers there).

    One row per kernel: ``extra_alu`` (None for the regular kernel), ``loop_instructions``,
    ``per_element``, ``int_per_element`` (LOP3 + IADD3 family), ``extra_per_element``
    (``per_element`` minus the regular kernel's), ``kernel_instructions`` and ``same_as_base``
    (the whole kernel's opcode sequence equals the regular kernel's)."""
    import pandas as pd

    cubin = wo.xalu_cubin(arch)
    kernels = _kernels_in_order(cubin, arch)
    named = {None: [k for k in kernels if f"{wo.ARMS['fp8']}ILb1ELi1E" in k]}
    for k in wo.EXTRA_ALU_LEVELS:
        named[k] = [n for n in kernels if f"{wo.XALU_KERNEL}ILb1ELi1ELi{k}E" in n]
    elems = _elements_per_thread("fp8", 1)
    rows = []
    for k, names in named.items():
        if len(names) != 1:
            raise RuntimeError(f"EXTRA_ALU kernel k={k} not found in {cubin.name}: {list(kernels)}")
        ops = kernels[names[0]]
        loop = _main_loop(names[0], ops)
        n_int = sum(1 for o in loop if o.startswith(("LOP3", "IADD3", "VIADD")))
        rows.append(dict(arch=arch, kernel=names[0], extra_alu=k, loop_instructions=len(loop),
                         per_element=len(loop) / elems, int_per_element=n_int / elems,
                         kernel_instructions=len(ops), ops=ops))
    df = pd.DataFrame(rows)
    base = df[df.extra_alu.isna()].iloc[0]
    df["extra_per_element"] = df.per_element - base.per_element
    df["same_as_base"] = [list(o) == list(base.ops) for o in df.ops]
    return df.drop(columns="ops")


# ---------------------------------------------------------------------------------------------
# Exact probes (the bitwise GPU test builds its inputs here, so the CPU test checks them)
# ---------------------------------------------------------------------------------------------
