"""scripts/sass_identical.py's per-function verdicts, on synthetic SASS lines (no nvcc needed)."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "sass_identical", Path(__file__).resolve().parents[1] / "scripts" / "sass_identical.py")
si = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(si)

A = "IMAD R1, R2, R3, RZ ; /* 0x0000000302017224 */ /* 0x000fe200078e02ff */"
B = "LDS R4, [R5] ; /* 0x0000000005047984 */ /* 0x000e280000000800 */"
A_OTHER_CTRL = "IMAD R1, R2, R3, RZ ; /* 0x0000000302017224 */ /* 0x001fc400078e02ff */"
A_OTHER_REG = "IMAD R7, R2, R3, RZ ; /* 0x0000000302077224 */ /* 0x000fe200078e02ff */"


def test_verdicts_from_identical_to_differs():
    assert si.compare([A, B], [A, B]) == ("identical", "")
    assert si.compare([A, B], [A_OTHER_CTRL, B])[0] == "control bits only"
    assert si.compare([A, B], [B, A])[0] == "order only"
    assert si.compare([A, B], [A_OTHER_REG, B])[0] == "same opcodes"
    verdict, detail = si.compare([A, B], [A, B, B])
    assert verdict == "differs" and "2 -> 3 instructions" in detail and "'LDS': 1" in detail


def test_opcode_ignores_predicates():
    assert si._opcode("@!P0 LDG.E.CONSTANT R1, desc[UR4][R2.64]") == "LDG.E.CONSTANT"
    assert si._opcode("@UP1 BRA 0x100") == "BRA"
