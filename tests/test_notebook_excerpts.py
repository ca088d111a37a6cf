"""Kernel excerpts shown in notebooks are cut out of the sources by marker strings
(``src.index("...")``, notebook 06's ``show(SOURCE, start, end)``): a refactor that drops a marker
breaks the notebook in every mode, GPU or not (a merged dedupe dropped wmma_w8a16.cu's
"  // Epilogue" and notebook 06 failed under `make run` on a CPU box). Every marker must stand in
one of fp8lab's sources, and a ``show`` pair's end after its start in the same file."""

import ast

import pytest

from fp8lab.paths import repo_root

ROOT = repo_root()
FILES = {p: p.read_text() for p in sorted((ROOT / "fp8lab").rglob("*"))
         if p.suffix in (".cu", ".cuh", ".h", ".py") and "__pycache__" not in p.parts}
#: markers cut out of other people's sources (notebook 02: CUTLASS example 94's main loop, read
#: from $FP8LAB_CUTLASS_SRC when it is there)
EXTERNAL = {"// Perform MMA into a temporary fragment", "// Except for the last warp-tile"}


def _calls(path):
    """(kind, [string args]) of every ``x.index("...")`` / ``show(src, "a", "b")`` call."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        strs = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                and len(a.value) >= 8]
        if name in ("index", "show") and strs:
            yield name, strs


def _in_order(a: str, b: str) -> bool:
    return any(a in t and b in t[t.index(a):] for t in FILES.values())


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.py"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_excerpt_marker_stands_in_the_sources(nb):
    bad = []
    for kind, strs in _calls(nb):
        strs = [s for s in strs if s not in EXTERNAL]
        if kind == "show" and len(strs) == 2:
            if not _in_order(*strs):
                bad.append(f"show: {strs[0]!r} ... {strs[1]!r} not in one file in that order")
        else:
            bad += [repr(s) for s in strs if not any(s in t for t in FILES.values())]
    assert not bad, f"{nb.name}: excerpt markers missing from fp8lab/: {bad}"


def test_the_check_sees_notebook_06s_wmma_excerpt():
    calls = list(_calls(ROOT / "notebooks" / "06_three_arms.py"))
    assert ("show", ["  for (int kb = kb_begin; kb < kb_end; ++kb) {", "  // Epilogue"]) in calls
