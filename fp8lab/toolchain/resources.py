"""Parsers for the two places a CUDA kernel's resource usage is printed.

- ``ptxas -v`` (``nvcc -Xptxas -v``; on stderr): registers, stack frame, spill stores / loads,
  static shared memory and cmem[0] per entry function, as the compiler saw them.
- ``cuobjdump -res-usage <cubin>``: REG, STACK, SHARED, LOCAL, CONSTANT[0] per function, read
  back from the binary that would run.

Both return ``{function_name: {...}}`` with integer byte counts. The compile grid uses ptxas for the
spill bytes (the cubin only records the stack frame) and cuobjdump to cross-check registers and
stack. The formats are pinned by real tool output in tests/fixtures/compile_grid/.
"""

from __future__ import annotations

import re

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")
_BARRIERS = re.compile(r"used (\d+) barriers")
_CUMSTACK = re.compile(r"(\d+) bytes cumulative stack size")


def parse_ptxas_v(text: str) -> dict[str, dict]:
    """Parse ``ptxas -v`` output into {function: dict(arch, registers, stack_bytes,
    spill_store_bytes, spill_load_bytes, static_smem_bytes, cmem0_bytes, barriers,
    cumulative_stack_bytes)}.

    ptxas prints, per entry function: "Compiling entry function 'F' for 'sm_XX'", then
    "Function properties for F" followed by the stack-frame/spill line, then "Used N registers,
    ..." (with "N bytes smem" only when there is static shared memory, and cmem[0] only on some
    archs: absent fields are 0). Raises ValueError when a function has no "Used N registers" line.
    """
    out: dict[str, dict] = {}
    current = None   # function whose "Used ..." line comes next
    props_for = None  # function whose stack-frame line comes next
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            out.setdefault(current, _empty(m.group(2)))
            continue
        m = _PROPS.search(line)
        if m:
            props_for = m.group(1)
            out.setdefault(props_for, _empty(None))
            continue
        m = _FRAME.search(line)
        if m and props_for is not None:
            rec = out[props_for]
            rec["stack_bytes"], rec["spill_store_bytes"], rec["spill_load_bytes"] = map(int, m.groups())
            props_for = None
            continue
        m = _USED.search(line)
        if m and current is not None:
            rec = out[current]
            rec["registers"] = int(m.group(1))
            for key, rx in (("static_smem_bytes", _SMEM), ("cmem0_bytes", _CMEM0), ("barriers", _BARRIERS),
                            ("cumulative_stack_bytes", _CUMSTACK)):
                mm = rx.search(line)
                rec[key] = int(mm.group(1)) if mm else 0
            current = None
    for name, rec in out.items():
        if rec["registers"] is None:
            raise ValueError(f"ptxas output has no 'Used N registers' line for {name}")
    return out


def _empty(arch):
    return dict(arch=arch, registers=None, stack_bytes=0, spill_store_bytes=0, spill_load_bytes=0,
                static_smem_bytes=0, cmem0_bytes=0, barriers=0, cumulative_stack_bytes=0)


_FUNC = re.compile(r"^\s*Function (\S+):\s*$")
_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(text: str) -> dict[str, dict]:
    """Parse ``cuobjdump -res-usage`` into {function: {"REG": .., "STACK": .., "SHARED": ..,
    "LOCAL": .., "CONSTANT[0]": .., ...}} (every KEY:value on the line after "Function F:").

    On sm_90 SHARED includes the 1 KB the driver reserves per block; dynamic shared memory is
    never in the cubin. Raises ValueError when a function has no REG field.
    """
    out: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = m.group(1)
            out[current] = {}
            continue
        if current is not None:
            fields = dict((k, int(v)) for k, v in _FIELD.findall(line))
            if fields:
                out[current].update(fields)
                current = None
    for name, rec in out.items():
        if "REG" not in rec:
            raise ValueError(f"cuobjdump -res-usage output has no REG for {name}")
    return out
